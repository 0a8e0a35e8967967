package container

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// UnreachableGate fails the calls to an engine at once while the engine is
// known to be unreachable, and lets one call through per interval to find
// out whether it is back (a circuit breaker, half-open once per interval).
// Without it, an engine whose host is gone holds every reconcile worker that
// touches it for the whole call timeout, on every call, and so starves the
// clusters on the engines that answer. It keeps no goroutine: the call let
// through is the probe.
//
// The manager's own engine needs no gate: when its socket is gone a call
// fails at once anyway, and an engine that hangs is cut off by the call
// timeout. Remote engines are where a call can hang until the timeout.
type UnreachableGate struct {
	clock    clock.PassiveClock
	interval time.Duration

	mu sync.Mutex
	// down is set by a call that found the engine unreachable, and cleared
	// by any answer.
	down    bool
	since   time.Time
	nextTry time.Time
	cause   error
}

// NewUnreachableGate returns a gate that, while its engine is unreachable,
// lets a call through every interval of clk.
func NewUnreachableGate(clk clock.PassiveClock, interval time.Duration) *UnreachableGate {
	return &UnreachableGate{clock: clk, interval: interval}
}

// Unreachable reports whether the last call found the engine unreachable.
func (g *UnreachableGate) Unreachable() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.down
}

// admit returns nil when a call may go to the engine, or the unreachable
// error to fail it with at once. A nil gate admits every call.
func (g *UnreachableGate) admit() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.down {
		return nil
	}
	now := g.clock.Now()
	if now.Before(g.nextTry) {
		return &Error{Op: "call", Object: "container engine", Kind: KindUnreachable,
			Err: fmt.Errorf("the container engine has been unreachable since %s; it is asked again from %s: %w",
				g.since.UTC().Format(time.RFC3339), g.nextTry.UTC().Format(time.RFC3339), g.cause)}
	}
	// This call is the probe; the others wait for its outcome.
	g.nextTry = now.Add(g.interval)
	return nil
}

// observe records the outcome of a call admitted under ctx.
func (g *UnreachableGate) observe(ctx context.Context, err error) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case IsUnreachable(err):
		now := g.clock.Now()
		if !g.down {
			g.down, g.since = true, now
		}
		g.nextTry, g.cause = now.Add(g.interval), err
	case err == nil || ctx.Err() == nil:
		// Any answer, an error too, shows the engine is there; a call the
		// caller gave up on shows nothing.
		g.down, g.cause = false, nil
	}
}
