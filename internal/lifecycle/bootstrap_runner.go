package lifecycle

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// BootstrapRunner runs machines' bootstrap data on goroutines of their own,
// so that a kubeadm init of a minute or more never holds a reconcile
// worker. A finished run is kept until the phase reads it, and the machine
// is reconciled again at once through notify.
//
// Runs live in memory: after a restart of the manager a machine whose run
// was cut short starts it again, unless the bootstrap sentinel shows that it
// had finished.
type BootstrapRunner struct {
	base   context.Context
	notify func(types.NamespacedName)

	mu   sync.Mutex
	runs map[types.NamespacedName]*bootstrapRun
}

type bootstrapRun struct {
	cancel context.CancelFunc
	done   bool
	err    error
}

// NewBootstrapRunner returns a runner whose runs end when base ends (the
// manager's context). notify is called with the machine's key when a run
// finishes.
func NewBootstrapRunner(base context.Context, notify func(types.NamespacedName)) *BootstrapRunner {
	return &BootstrapRunner{base: base, notify: notify, runs: map[types.NamespacedName]*bootstrapRun{}}
}

// Start runs fn for key unless a run is already known for it; fn's context
// ends at deadline.
func (r *BootstrapRunner) Start(key types.NamespacedName, deadline time.Time, fn func(ctx context.Context) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.runs[key]; ok {
		return
	}
	ctx, cancel := context.WithDeadline(r.base, deadline)
	run := &bootstrapRun{cancel: cancel}
	r.runs[key] = run
	go func() {
		err := fn(ctx)
		cancel()
		r.mu.Lock()
		run.done, run.err = true, err
		r.mu.Unlock()
		if r.notify != nil {
			r.notify(key)
		}
	}()
}

// Status reports whether a run is known for key and, once it has finished,
// its error.
func (r *BootstrapRunner) Status(key types.NamespacedName) (known, done bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	run, ok := r.runs[key]
	if !ok {
		return false, false, nil
	}
	return true, run.done, run.err
}

// Forget cancels a run that is still going and drops what is known of it.
func (r *BootstrapRunner) Forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if run, ok := r.runs[key]; ok {
		run.cancel()
		delete(r.runs, key)
	}
}
