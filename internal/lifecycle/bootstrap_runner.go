package lifecycle

import (
	"context"
	"slices"
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
// It also bounds the bootstraps in flight on each engine: a machine holds
// one of its engine's slots from its first attempt until its bootstrap
// succeeds or fails for good. Each engine has slots of its own, since a
// bootstrap loads the host it runs on and no other: machines stuck on one
// engine never hold up another's. Machines that ask for a slot when none is
// free wait in line and are woken when one frees up, first come first
// served, except that while machines of other namespaces wait, a namespace
// that holds its share of the engine's slots (half of them, rounded down)
// waits behind them (nextInLine).
type BootstrapRunner struct {
	base   context.Context
	notify func(types.NamespacedName)
	clock  clock.WithTicker
	// limit is the most bootstraps in flight on each engine; 0 means no
	// limit.
	limit int
	// poll is how often a watch reads the exit mark.
	poll time.Duration

	mu   sync.Mutex
	jobs map[types.NamespacedName]*bootstrapJob
	// pools holds each engine's slots by its name (engines.Local for the
	// manager's own).
	pools map[string]*slotPool
	// engineOf names the engine whose slot or line each machine is in.
	engineOf map[types.NamespacedName]string
}

// slotPool is one engine's bootstrap slots.
type slotPool struct {
	held map[types.NamespacedName]bool
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
// (the manager's context), with at most maxInFlight bootstraps at once on
// each engine (0: no limit). notify is called with a machine's key when its
// attempt ends or a slot frees up for it.
func NewBootstrapRunner(base context.Context, clk clock.WithTicker, maxInFlight int, notify func(types.NamespacedName)) *BootstrapRunner {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &BootstrapRunner{
		base: base, notify: notify, clock: clk, limit: max(maxInFlight, 0), poll: bootstrapWatchPoll,
		jobs: map[types.NamespacedName]*bootstrapJob{}, pools: map[string]*slotPool{}, engineOf: map[types.NamespacedName]string{},
	}
}

// SlotUsage says how busy an engine's bootstrap slots are.
type SlotUsage struct {
	// InFlight is the number of slots held.
	InFlight int
	// Limit is the most slots; 0 means no limit.
	Limit int
	// Ahead is the number of machines waiting before this one.
	Ahead int
}

// Acquire takes a slot of engine for key, or puts key in line for one. It
// returns true when key holds a slot (also when it held one already).
func (r *BootstrapRunner) Acquire(key types.NamespacedName, engine string) (bool, SlotUsage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.poolLocked(key, engine)
	if p.held[key] {
		return true, r.usageLocked(p, 0)
	}
	ahead := slices.Index(p.queue, key)
	if ahead < 0 {
		ahead = len(p.queue)
		p.queue = append(p.queue, key)
	}
	if slices.Contains(nextInLine(r.limit, p.held, p.queue), key) {
		p.held[key] = true
		p.dequeue(key)
		return true, r.usageLocked(p, 0)
	}
	return false, r.usageLocked(p, ahead)
}

// Hold takes a slot of engine for key even over the limit: its bootstrap
// runs already (the manager restarted during it), and it cannot be made to
// wait.
func (r *BootstrapRunner) Hold(key types.NamespacedName, engine string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.poolLocked(key, engine)
	p.held[key] = true
	p.dequeue(key)
}

// Release gives key's slot back, or takes key out of line, and wakes the
// machines next in line for the slots now free.
func (r *BootstrapRunner) Release(key types.NamespacedName) {
	r.mu.Lock()
	var wake []types.NamespacedName
	if engine, ok := r.engineOf[key]; ok {
		p := r.pools[engine]
		held := p.held[key]
		delete(p.held, key)
		queued := p.dequeue(key)
		delete(r.engineOf, key)
		if held || queued {
			wake = nextInLine(r.limit, p.held, p.queue)
		}
		if len(p.held) == 0 && len(p.queue) == 0 {
			delete(r.pools, engine)
		}
	}
	r.mu.Unlock()
	if r.notify != nil {
		for _, k := range wake {
			r.notify(k)
		}
	}
}

// poolLocked returns engine's slots, recording that key is in them. A
// machine's engine never changes; should key be found in another engine's
// pool, it leaves that one.
func (r *BootstrapRunner) poolLocked(key types.NamespacedName, engine string) *slotPool {
	if was, ok := r.engineOf[key]; ok && was != engine {
		delete(r.pools[was].held, key)
		r.pools[was].dequeue(key)
	}
	r.engineOf[key] = engine
	p, ok := r.pools[engine]
	if !ok {
		p = &slotPool{held: map[types.NamespacedName]bool{}}
		r.pools[engine] = p
	}
	return p
}

func (r *BootstrapRunner) usageLocked(p *slotPool, ahead int) SlotUsage {
	return SlotUsage{InFlight: len(p.held), Limit: r.limit, Ahead: ahead}
}

// dequeue takes key out of line and reports whether it was in it.
func (p *slotPool) dequeue(key types.NamespacedName) bool {
	i := slices.Index(p.queue, key)
	if i < 0 {
		return false
	}
	p.queue = slices.Delete(p.queue, i, i+1)
	return true
}

// nextInLine returns the machines of queue that take an engine's free
// slots, given its limit (0: none) and the machines that hold slots. The
// slots go in the order of the line, but while machines of another
// namespace wait, a namespace never takes a slot beyond its share: half of
// the limit rounded down, at least one. A machine whose namespace holds its
// share gives way to the machines behind it of namespaces under theirs, and
// when every namespace in line holds its share, the slot stays free until a
// bootstrap ends. Half rounded down, and the slot left free, make the share
// exact for an odd limit: of 3 or 5 slots no namespace takes 2 or 3 while
// another waits, so a tenant whose bootstraps never end holds at most half
// of an engine's slots against others, as with an even limit, and never a
// majority. At least one, so that a limit of 1 still serves the line in
// turn. A namespace alone in line takes every free slot, so a tenant alone
// on an engine may use all of them; slots are never taken back, so a
// namespace holding more than its share when others come is brought down to
// it as its bootstraps end (each within its bounded bootstrapTimeout).
func nextInLine(limit int, held map[types.NamespacedName]bool, queue []types.NamespacedName) []types.NamespacedName {
	if limit == 0 {
		return slices.Clone(queue)
	}
	share := max(limit/2, 1)
	holds := map[string]int{}
	for k := range held {
		holds[k.Namespace]++
	}
	taken := make([]bool, len(queue))
	var next []types.NamespacedName
	for free := limit - len(held); free > 0; free-- {
		pick := -1
		for i, k := range queue {
			if !taken[i] && holds[k.Namespace] < share {
				pick = i
				break
			}
		}
		if pick < 0 {
			pick = aloneInLine(queue, taken)
		}
		if pick < 0 {
			break
		}
		taken[pick] = true
		holds[queue[pick].Namespace]++
		next = append(next, queue[pick])
	}
	return next
}

// aloneInLine returns the first machine of queue not taken when every
// machine not taken is of one namespace, and -1 otherwise (or when none
// waits).
func aloneInLine(queue []types.NamespacedName, taken []bool) int {
	first := -1
	for i, k := range queue {
		switch {
		case taken[i]:
		case first < 0:
			first = i
		case k.Namespace != queue[first].Namespace:
			return -1
		}
	}
	return first
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
