package container_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// awayRuntime is an engine that hangs while away, as one behind a dead
// host does, and otherwise answers that the container does not exist. It
// counts the calls that reach it.
type awayRuntime struct {
	container.Runtime // calls not overridden here panic: the test must not reach them
	away              atomic.Bool
	calls             atomic.Int32
}

func (a *awayRuntime) Inspect(ctx context.Context, name string) (*container.Machine, error) {
	a.calls.Add(1)
	if a.away.Load() {
		<-ctx.Done()
		return nil, container.NewError("inspect", "container", name, container.KindTransient, ctx.Err())
	}
	return nil, container.NewError("inspect", "container", name, container.KindNotFound, nil)
}

// TestUnreachableGateFailsFastUntilAProbeAnswers checks that, once a call
// found the engine unreachable, calls fail at once without reaching it,
// that one call per interval goes through to learn whether it is back, and
// that any answer, an error too, opens the gate again.
func TestUnreachableGateFailsFastUntilAProbeAnswers(t *testing.T) {
	const bound, interval = 100 * time.Millisecond, 5 * time.Second
	clk := clocktesting.NewFakeClock(time.Now())
	engine := &awayRuntime{}
	gate := container.NewUnreachableGate(clk, interval)
	rt := container.WithGatedCallTimeout(engine, bound, gate)
	ctx := context.Background()
	inspect := func(wantReached int32, wantUnreachable bool, wantFast bool) {
		t.Helper()
		start := time.Now()
		_, err := rt.Inspect(ctx, "c1-cp-0")
		took := time.Since(start)
		if container.IsUnreachable(err) != wantUnreachable {
			t.Fatalf("Inspect: %v; want unreachable %t", err, wantUnreachable)
		}
		if got := engine.calls.Load(); got != wantReached {
			t.Fatalf("%d calls reached the engine, want %d", got, wantReached)
		}
		if wantFast && took >= bound {
			t.Fatalf("a gated call took %s, as long as the bound %s", took, bound)
		}
	}

	engine.away.Store(true)
	inspect(1, true, false) // finds it away, after the bound
	if !gate.Unreachable() {
		t.Fatal("the gate did not record the engine as unreachable")
	}
	inspect(1, true, true) // fails at once
	clk.Step(interval)
	inspect(2, true, false) // the probe, still away
	inspect(2, true, true)
	clk.Step(interval)
	engine.away.Store(false)
	inspect(3, false, false) // the probe: the engine answers (not found)
	if gate.Unreachable() {
		t.Fatal("the gate stayed closed after the engine answered")
	}
	inspect(4, false, false) // and calls go through again
}
