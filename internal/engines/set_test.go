package engines

import (
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
