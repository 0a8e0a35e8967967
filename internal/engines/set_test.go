package engines

import (
	"context"
	"fmt"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/container/runtimetest"
)

// TestSingleServesOnlyTheManagersEngine checks the Set every controller is
// given today: the local engine for every cluster, any other name refused
// rather than answered by the local engine, and ListOwned naming the engine
// and runtime of each of the owner's containers and nothing of another
// cluster.
func TestSingleServesOnlyTheManagersEngine(t *testing.T) {
	rt := fake.New(clocktesting.NewFakeClock(time.Now()))
	env := runtimetest.NewEnv(t, rt, "busybox", container.IPv4)
	env.Running(t, "m1")
	set := Single(rt)
	cc := &infrav1.ContainerCluster{}

	if got := set.ForCluster(cc); len(got) != 1 || got[0] != Local {
		t.Fatalf("ForCluster = %q, want only the local engine", got)
	}
	if got, err := FirstEngine(set, cc); err != nil || got != container.Runtime(rt) {
		t.Fatalf("FirstEngine = %v, %v; want the local runtime", got, err)
	}
	if _, err := set.Get("engine-b"); err == nil {
		t.Fatal("Get(engine-b) answered; want it refused, since only the local engine is served")
	}
	owned, err := ListOwned(runtimetest.Ctx(t), set, cc, env.Owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(owned) != 1 || owned[0].Name != env.Spec("m1").Name || owned[0].Engine != Local || owned[0].Runtime != container.Runtime(rt) {
		t.Fatalf("ListOwned = %+v, want m1 on the local engine", owned)
	}
	stranger := env.Owner
	stranger.ClusterID = "another"
	if owned, err := ListOwned(runtimetest.Ctx(t), set, cc, stranger, nil); err != nil || len(owned) != 0 {
		t.Fatalf("ListOwned of another cluster = %+v, %v; want nothing", owned, err)
	}
}

// TestNamedServesAndWatchesEveryEngine checks the Set tests build from
// runtimes they hold: each name gets its runtime, another is unreachable,
// a cluster's engines are those it lists, and Watch streams the events of
// an engine that is not the manager's own.
func TestNamedServesAndWatchesEveryEngine(t *testing.T) {
	local, b := fake.New(nil), fake.New(nil)
	set := Named(map[string]container.Runtime{Local: local, "engine-b": b})
	if got, err := set.Get("engine-b"); err != nil || got != container.Runtime(b) {
		t.Fatalf("Get(engine-b) = %v, %v; want its runtime", got, err)
	}
	if _, err := set.Get("engine-c"); !container.IsUnreachable(err) {
		t.Fatalf("Get of an engine not held = %v, want an unreachable error", err)
	}
	onB := &infrav1.ContainerCluster{Spec: infrav1.ContainerClusterSpec{Engines: []infrav1.ClusterEngine{{Name: "engine-b"}}}}
	if got := set.ForCluster(onB); len(got) != 1 || got[0] != "engine-b" {
		t.Fatalf("ForCluster = %q, want engine-b", got)
	}

	ctx, stop := context.WithCancel(runtimetest.Ctx(t))
	events := make(chan container.Event, 64)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		set.Watch(ctx, func(ev container.Event) {
			select {
			case events <- ev:
			default:
			}
		}, nil)
	}()
	defer func() { stop(); <-watching }()
	e := runtimetest.NewEnv(t, b, "img", container.IPv4)
	// The stream may open after a start: start machines until one is seen.
	deadline := time.After(10 * time.Second)
	for i := 0; ; i++ {
		e.Running(t, fmt.Sprintf("m%d", i))
		select {
		case ev := <-events:
			if ev.Labels[container.LabelClusterID] != e.Owner.ClusterID {
				t.Fatalf("an event of another engine's container: %+v", ev)
			}
			return
		case <-deadline:
			t.Fatal("no event of engine-b reached the Watch")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestListReachableGoesOnWithoutAnEngineThatIsAway lists a cluster's
// containers on two engines, one of which does not answer: ListOwned must
// fail, for callers that must see everything, and ListReachable must list
// the other engine's containers and name the one away.
func TestListReachableGoesOnWithoutAnEngineThatIsAway(t *testing.T) {
	a, b := fake.New(clocktesting.NewFakeClock(time.Now())), fake.New(clocktesting.NewFakeClock(time.Now()))
	env := runtimetest.NewEnv(t, a, "busybox", container.IPv4)
	env.Running(t, "m1")
	set := Named(map[string]container.Runtime{"a": a, "b": b})
	cc := &infrav1.ContainerCluster{Spec: infrav1.ContainerClusterSpec{Engines: []infrav1.ClusterEngine{{Name: "a"}, {Name: "b"}}}}
	away := func() {
		b.FailNext(fake.OpList, container.NewError("list", "containers", "", container.KindUnreachable, fmt.Errorf("no route to host")))
	}

	away()
	if _, err := ListOwned(runtimetest.Ctx(t), set, cc, env.Owner, nil); !container.IsUnreachable(err) {
		t.Fatalf("ListOwned with engine b away: %v; want its error", err)
	}
	away()
	owned, gone, err := ListReachable(runtimetest.Ctx(t), set, cc, env.Owner, nil)
	if err != nil || len(owned) != 1 || owned[0].Engine != "a" || len(gone) != 1 || gone[0] != "b" {
		t.Fatalf("ListReachable = %+v, away %q, %v; want m1 on a, and b away", owned, gone, err)
	}
	b.FailNext(fake.OpList, container.NewError("list", "containers", "", container.KindInvalid, fmt.Errorf("bad filter")))
	if _, _, err := ListReachable(runtimetest.Ctx(t), set, cc, env.Owner, nil); err == nil {
		t.Fatal("ListReachable hid an engine's error that is not its absence")
	}
}
