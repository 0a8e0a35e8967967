package lifecycle

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// BootstrapRunner does the slow parts of bootstraps on goroutines of their
// own, so that they never hold a reconcile worker: starting an attempt
// (preloading images, staging the run in the container and launching it)
// and watching it until its exit mark appears. The attempt itself runs
// detached inside the container (see provisioning.Script), so nothing of it
// is lost when the manager restarts: the Bootstrap phase reads the marks and
// starts a watch again.
//
// It also bounds the bootstraps in flight on the host: a machine holds a
// slot from its first attempt until its bootstrap succeeds or fails for
// good. Machines that ask for a slot when none is free wait in line and are
// woken, first come first served, when one frees up.
type BootstrapRunner struct {
	base   context.Context
	notify func(types.NamespacedName)
	clock  clock.WithTicker
	// limit is the most bootstraps in flight; 0 means no limit.
	limit int
	// poll is how often a watch reads the exit mark.
	poll time.Duration

	mu    sync.Mutex
	jobs  map[types.NamespacedName]*bootstrapJob
	slots map[types.NamespacedName]bool
	// queue holds the machines waiting for a slot, in the order they
	// first asked.
	queue []types.NamespacedName
}

type bootstrapJob struct {
	attempt int
	cancel  context.CancelFunc
	done    bool
	err     error
}

// DefaultMaxConcurrentBootstraps is the default of
// --max-concurrent-bootstraps; docs/bootstrap.md gives the measurements
// behind it (it was 4 until a 10-machine scale-out showed the joins queued
// behind it).
const DefaultMaxConcurrentBootstraps = 10

// bootstrapWatchPoll is how often a running attempt's exit mark is read.
const bootstrapWatchPoll = time.Second

// NewBootstrapRunner returns a runner whose goroutines end when base ends
// (the manager's context), with at most maxInFlight bootstraps at once (0:
// no limit). notify is called with a machine's key when its attempt ends
// or a slot frees up for it.
func NewBootstrapRunner(base context.Context, clk clock.WithTicker, maxInFlight int, notify func(types.NamespacedName)) *BootstrapRunner {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &BootstrapRunner{
		base: base, notify: notify, clock: clk, limit: max(maxInFlight, 0), poll: bootstrapWatchPoll,
		jobs: map[types.NamespacedName]*bootstrapJob{}, slots: map[types.NamespacedName]bool{},
	}
}

// SlotUsage says how busy the host's bootstrap slots are.
type SlotUsage struct {
	// InFlight is the number of slots held.
	InFlight int
	// Limit is the most slots; 0 means no limit.
	Limit int
	// Ahead is the number of machines waiting before this one.
	Ahead int
}

// Acquire takes a bootstrap slot for key, or puts key in line for one. It
// returns true when key holds a slot (also when it held one already).
func (r *BootstrapRunner) Acquire(key types.NamespacedName) (bool, SlotUsage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.slots[key] {
		return true, r.usageLocked(0)
	}
	ahead := 0
	queued := false
	for _, k := range r.queue {
		if k == key {
			queued = true
			break
		}
		ahead++
	}
	free := r.limit - len(r.slots)
	if r.limit == 0 || ahead < free {
		r.slots[key] = true
		r.dequeueLocked(key)
		return true, r.usageLocked(0)
	}
	if !queued {
		r.queue = append(r.queue, key)
	}
	return false, r.usageLocked(ahead)
}

// Hold takes a slot for key even over the limit: its bootstrap runs
// already (the manager restarted during it), and it cannot be made to wait.
func (r *BootstrapRunner) Hold(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.slots[key] = true
	r.dequeueLocked(key)
}

// Release gives key's slot back, or takes key out of line, and wakes the
// machines next in line for the slots now free.
func (r *BootstrapRunner) Release(key types.NamespacedName) {
	r.mu.Lock()
	held := r.slots[key]
	delete(r.slots, key)
	queued := r.dequeueLocked(key)
	var wake []types.NamespacedName
	if held || queued {
		free := min(len(r.queue), r.limit-len(r.slots))
		wake = append(wake, r.queue[:max(free, 0)]...)
	}
	r.mu.Unlock()
	if r.notify != nil {
		for _, k := range wake {
			r.notify(k)
		}
	}
}

func (r *BootstrapRunner) usageLocked(ahead int) SlotUsage {
	return SlotUsage{InFlight: len(r.slots), Limit: r.limit, Ahead: ahead}
}

// dequeueLocked takes key out of line and reports whether it was in it.
func (r *BootstrapRunner) dequeueLocked(key types.NamespacedName) bool {
	for i, k := range r.queue {
		if k == key {
			r.queue = append(r.queue[:i], r.queue[i+1:]...)
			return true
		}
	}
	return false
}

// Run makes sure a job runs for key's attempt: launch (when not nil), then
// a watch that calls ended every poll until it returns true, fails, or the
// deadline passes; key is then notified. It does nothing while a job for
// the same attempt runs, replaces a job for another attempt, and returns
// the error of a job for this attempt that has failed (forgetting it, so
// that the next call starts again). started tells whether it started a job.
func (r *BootstrapRunner) Run(key types.NamespacedName, attempt int, deadline time.Time,
	launch func(context.Context) error, ended func(context.Context) (bool, error)) (started bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if job, ok := r.jobs[key]; ok && job.attempt == attempt {
		switch {
		case !job.done:
			return false, nil
		case job.err != nil:
			delete(r.jobs, key)
			return false, job.err
		}
	}
	if job, ok := r.jobs[key]; ok {
		job.cancel()
	}
	ctx, cancel := context.WithDeadline(r.base, deadline)
	job := &bootstrapJob{attempt: attempt, cancel: cancel}
	r.jobs[key] = job
	go func() {
		err := r.runJob(ctx, launch, ended)
		cancel()
		r.mu.Lock()
		job.done, job.err = true, err
		r.mu.Unlock()
		if r.notify != nil && r.base.Err() == nil {
			r.notify(key)
		}
	}()
	return true, nil
}

func (r *BootstrapRunner) runJob(ctx context.Context, launch func(context.Context) error, ended func(context.Context) (bool, error)) error {
	if launch != nil {
		if err := launch(ctx); err != nil {
			return err
		}
	}
	ticker := r.clock.NewTicker(r.poll)
	defer ticker.Stop()
	for {
		done, err := ended(ctx)
		if done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			// The phase judges the timeout with its own clock.
			return nil
		case <-ticker.C():
		}
	}
}

// Forget stops key's job and gives its slot back.
func (r *BootstrapRunner) Forget(key types.NamespacedName) {
	r.mu.Lock()
	if job, ok := r.jobs[key]; ok {
		job.cancel()
		delete(r.jobs, key)
	}
	r.mu.Unlock()
	r.Release(key)
}
