//go:build engine

package engines

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/container/runtimetest"
)

// TestRegistryServesConnectedEnginesAndWatchesThem checks the Registry as
// the reconcilers' Set: a cluster's engines are those it lists; an engine
// not connected is unreachable, not an error to back off on; once the
// engine controller connects it, Get serves it and a Watch started before
// sees its events; once it is forgotten, neither. Engine "engine-b" is the
// Docker engine the tests run on, reached through its own client, while the
// manager's own engine is a fake, so every real event seen came through
// engine-b's stream.
func TestRegistryServesConnectedEnginesAndWatchesThem(t *testing.T) {
	ctx := runtimetest.Ctx(t)
	local := fake.New(clocktesting.NewFakeClock(time.Now()))
	reg := NewRegistry(local, docker.Connect, fakeclient.NewClientBuilder().Build(), "capct-system", 30*time.Second, nil)

	if got := reg.ForCluster(nil); len(got) != 1 || got[0] != Local {
		t.Fatalf("ForCluster(nil) = %q, want the local engine", got)
	}
	onEngines := &infrav1.ContainerCluster{Spec: infrav1.ContainerClusterSpec{Engines: []infrav1.ClusterEngine{{Name: "engine-b"}, {Name: "engine-c"}}}}
	if got := reg.ForCluster(onEngines); len(got) != 2 || got[0] != "engine-b" || got[1] != "engine-c" {
		t.Fatalf("ForCluster = %q, want engine-b then engine-c", got)
	}
	if got, err := reg.Get(Local); err != nil || got != container.Runtime(local) {
		t.Fatalf("Get(Local) = %v, %v; want the manager's own runtime", got, err)
	}
	if _, err := reg.Get("engine-b"); !container.IsUnreachable(err) {
		t.Fatalf("Get of an engine not connected = %v, want an unreachable error", err)
	}

	events := make(chan container.Event, 256)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		reg.Watch(watchCtx, func(ev container.Event) {
			select {
			case events <- ev:
			default:
			}
		}, nil)
	}()
	defer func() { stopWatch(); <-watching }()
	// Connect engine-b only once the Watch is registered, so its stream is
	// the one Ensure starts, not one Watch starts for an engine it finds.
	for registered := false; !registered; time.Sleep(10 * time.Millisecond) {
		reg.mu.Lock()
		registered = len(reg.watches) == 1
		reg.mu.Unlock()
	}

	rt, err := reg.Ensure(ctx, &infrav1.ContainerEngine{ObjectMeta: metav1.ObjectMeta{Name: "engine-b", Generation: 1}})
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if got, err := reg.Get("engine-b"); err != nil || got != rt {
		t.Fatalf("Get(engine-b) = %v, %v; want the runtime Ensure made", got, err)
	}

	own, err := docker.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = own.Close() })
	image, err := dockertest.BusyboxImage(ctx, own)
	if err != nil {
		t.Fatalf("building the test image: %v", err)
	}
	env := runtimetest.NewEnv(t, own, image, container.IPv4)
	// The stream opens in the background: a container started before it
	// would be missed, so start them until one is seen.
	if !sawStart(t, env, events, "m", 10) {
		t.Fatal("no start event of engine-b reached the Watch started before it was connected")
	}

	reg.Forget("engine-b")
	if _, err := reg.Get("engine-b"); !container.IsUnreachable(err) {
		t.Fatalf("Get of a forgotten engine = %v, want an unreachable error", err)
	}
	for len(events) > 0 {
		<-events
	}
	if sawStart(t, env, events, "after", 3) {
		t.Fatal("a start event of engine-b reached the Watch after it was forgotten")
	}
}

// sawStart starts up to n containers of env, one a second, and reports
// whether the start of any reached events.
func sawStart(t *testing.T, env *runtimetest.Env, events <-chan container.Event, prefix string, n int) bool {
	t.Helper()
	for i := range n {
		env.Running(t, prefix+string(rune('a'+i)))
		deadline := time.After(time.Second)
		for {
			select {
			case ev := <-events:
				if ev.Type == container.EventStart && ev.Labels[container.LabelClusterID] == env.Owner.ClusterID {
					return true
				}
				continue
			case <-deadline:
			}
			break
		}
	}
	return false
}
