package containermachinepool_test

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/labels/format"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

const settle = 40 * time.Second

// TestScaleUpDownAndDelete scales 0→5→2→0 and checks ContainerMachines,
// Machines, containers and providerIDList at each step, then deletes the
// MachinePool and checks that a container left behind with the pool's label
// goes too.
func TestScaleUpDownAndDelete(t *testing.T) {
	st := startStack(t)
	f := newFixture(t, 0, expinfrav1.RollingUpdate{})
	eventually(t, settle, "an empty pool to be ready", f.settled(0))
	for _, n := range []int32{5, 2, 0} {
		f.scale(n)
		eventually(t, settle, fmt.Sprintf("%d replicas", n), f.settled(int(n)))
		t.Logf("scaled to %d: writes %v", n, st.writes.snapshot())
	}

	// A container carrying the pool label and the cluster's owner labels with no
	// ContainerMachine, e.g. from a machine whose finalizer was removed by
	// hand, is removed when the pool is deleted.
	ctx := ctxT(t)
	cluster := &clusterv1.Cluster{}
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(f.cluster), cluster))
	cc := &infrav1.ContainerCluster{}
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: cluster.Spec.InfrastructureRef.Name}, cc))
	labels := naming.ClusterOwner(cluster, cc).ForMachine("pool-gone1").Labels()
	labels[container.LabelPool] = format.MustFormatValue(f.mp.Name)
	if _, err := rt.CreateMachine(ctx, container.MachineSpec{Name: f.name + "-pool-gone1", Image: "capct/node:" + k8sVersion, Labels: labels, Role: container.RoleWorker}); err != nil {
		t.Fatal(err)
	}
	must(t, env.Client.Delete(ctx, f.mp))
	eventually(t, settle, "the pool and its leftovers to go", func() error {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(f.pool), &expinfrav1.ContainerMachinePool{})
		if err == nil {
			return errors.New("the ContainerMachinePool still exists")
		}
		if _, err := rt.Inspect(ctx, f.name+"-pool-gone1"); !container.IsNotFound(err) {
			return fmt.Errorf("the leftover container still exists: %v", err)
		}
		return nil
	})
}

// TestBootstrapDataArrivesAfterTheMachines creates the pool's machines
// before the MachinePool has bootstrap data, as with a KubeadmConfig that
// the bootstrap provider has not rendered yet: once the data Secret is set
// on the MachinePool, the waiting machines go on at once.
func TestBootstrapDataArrivesAfterTheMachines(t *testing.T) {
	startStack(t)
	f := newFixture(t, 0, expinfrav1.RollingUpdate{})
	ctx := ctxT(t)
	setDataSecret := func(name *string) {
		mp := &clusterv1.MachinePool{}
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(f.mp), mp))
		before := mp.DeepCopy()
		mp.Spec.Template.Spec.Bootstrap.DataSecretName = name
		must(t, env.Client.Patch(ctx, mp, client.MergeFrom(before)))
	}
	// Empty, as the API requires some bootstrap: CAPCT treats it as none yet.
	setDataSecret(ptr.To(""))
	f.scale(2)
	eventually(t, settle, "2 machines waiting for bootstrap data", func() error {
		s := f.state()
		if len(s.cms) != 2 {
			return fmt.Errorf("%d ContainerMachines", len(s.cms))
		}
		for _, cm := range s.cms {
			if c := conditions.Get(&cm, infrav1.LaunchedCondition); c == nil || c.Reason != infrav1.WaitingForBootstrapDataReason {
				return fmt.Errorf("ContainerMachine %s: Launched %v", cm.Name, c)
			}
		}
		return nil
	})
	// Machines that Cluster API has just created are updated for a few
	// seconds, and each update reconciles their ContainerMachines too. Once
	// they and the ContainerMachines are left alone, a machine waiting for
	// bootstrap data asks for no requeue: only the MachinePool watch brings
	// it back when the data arrives.
	f.quiet(3 * time.Second)
	setDataSecret(ptr.To("bootstrap"))
	eventually(t, 20*time.Second, "2 provisioned replicas", f.settled(2))
}

// TestDeleteMachineAnnotationFirst annotates two Machines of five and scales
// to three: exactly those two go.
func TestDeleteMachineAnnotationFirst(t *testing.T) {
	startStack(t)
	f := newFixture(t, 5, expinfrav1.RollingUpdate{})
	eventually(t, settle, "5 replicas", f.settled(5))
	ctx := ctxT(t)
	s := f.state()
	// The two that the order without annotations (the ContainerMachines'
	// oldest first, ties by name: creation times have one-second
	// resolution) would keep, so that only the annotation can make them go.
	keptFirst := s.cms
	sort.Slice(keptFirst, func(i, j int) bool {
		ti, tj := keptFirst[i].CreationTimestamp, keptFirst[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return tj.Before(&ti)
		}
		return keptFirst[i].Name > keptFirst[j].Name
	})
	marked := map[string]bool{keptFirst[0].Name: true, keptFirst[1].Name: true}
	for _, m := range s.machines {
		if !marked[m.Name] {
			continue
		}
		before := m.DeepCopy()
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[clusterv1.DeleteMachineAnnotation] = ""
		must(t, env.Client.Patch(ctx, &m, client.MergeFrom(before)))
	}
	f.scale(3)
	eventually(t, settle, "3 replicas", f.settled(3))
	for _, name := range cmNames(f.state()) {
		if marked[name] {
			t.Fatalf("machine %s was marked for deletion but kept; marked %v", name, marked)
		}
	}
}

// TestRollingImageChange changes the template image of a 3-replica pool with
// the default strategy (maxSurge 1, maxUnavailable 0): every machine is
// replaced, the pool never has fewer than 3 provisioned machines that are
// not being deleted nor more than 4 machines not being deleted.
func TestRollingImageChange(t *testing.T) {
	startStack(t)
	f := newFixture(t, 3, expinfrav1.RollingUpdate{})
	eventually(t, settle, "3 replicas", f.settled(3))
	old := cmNames(f.state())

	ctx := ctxT(t)
	bounds := f.watchBounds(3, 4)
	pool := &expinfrav1.ContainerMachinePool{}
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(f.pool), pool))
	before := pool.DeepCopy()
	pool.Spec.Template.Image = "capct/node:" + k8sVersion + "-custom"
	must(t, env.Client.Patch(ctx, pool, client.MergeFrom(before)))

	eventually(t, 2*settle, "the rollout", func() error {
		if err := f.settled(3)(); err != nil {
			return err
		}
		for _, cm := range f.state().cms {
			if cm.Spec.Image != pool.Spec.Template.Image {
				return fmt.Errorf("ContainerMachine %s still has image %q", cm.Name, cm.Spec.Image)
			}
		}
		return nil
	})
	bounds.check()
	for _, name := range cmNames(f.state()) {
		if slices.Contains(old, name) {
			t.Fatalf("machine %s survived the rollout", name)
		}
	}
}

// TestWriteCounts scales a pool 0→10 and bounds the writes of the pool
// controller per replica, then shows that a reconcile of the settled pool
// writes nothing.
func TestWriteCounts(t *testing.T) {
	// Stated in docs/machinepool.md; measured 1.7 on a quiet host and 2.9
	// under -race beside a real-cluster run, where the members' changes
	// spread over more coalescing windows (TestCoalesce pins that down).
	const perReplica = 4
	st := startStack(t)
	f := newFixture(t, 0, expinfrav1.RollingUpdate{})
	eventually(t, settle, "an empty pool to be ready", f.settled(0))
	time.Sleep(2 * time.Second)
	st.writes.reset()

	f.scale(10)
	eventually(t, settle, "10 replicas", f.settled(10))
	time.Sleep(2 * time.Second)
	got := st.writes.snapshot()
	total := st.writes.total()
	t.Logf("scale 0→10: %d writes %v", total, got)
	if got["apply"] != 10 {
		t.Errorf("want 10 applies (one per ContainerMachine), got %d", got["apply"])
	}
	if total > perReplica*10 {
		t.Errorf("scale 0→10 took %d writes, more than %d per replica", total, perReplica)
	}

	// Steady state: poke the pool (a label nobody reads) and wait for the
	// controller to have reconciled it.
	st.writes.reset()
	ctx := ctxT(t)
	pool := &expinfrav1.ContainerMachinePool{}
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(f.pool), pool))
	before := pool.DeepCopy()
	pool.Labels["poke"] = "1"
	must(t, env.Client.Patch(ctx, pool, client.MergeFrom(before)))
	eventually(t, 10*time.Second, "a reconcile", func() error {
		if st.writes.listCalls() == 0 {
			return errors.New("no reconcile yet")
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	if n := st.writes.total(); n != 0 {
		t.Fatalf("a steady-state reconcile of 10 replicas wrote %d times: %v", n, st.writes.snapshot())
	}
	t.Logf("steady state: %d reconciles' lists, 0 writes", st.writes.listCalls())
}

// TestCrashMidScaleUp stops the manager after the fourth ContainerMachine of
// ten was applied, starts a new one and checks that the pool ends with
// exactly ten machines and ten containers, no more.
func TestCrashMidScaleUp(t *testing.T) {
	first := startStack(t)
	f := newFixture(t, 0, expinfrav1.RollingUpdate{})
	eventually(t, settle, "an empty pool to be ready", f.settled(0))
	var applies atomic.Int32
	first.writes.mu.Lock()
	first.writes.onApply = func() error {
		if applies.Add(1) > 4 {
			go first.cancel() // the process dies here
			return errors.New("crashed")
		}
		return nil
	}
	first.writes.mu.Unlock()
	f.scale(10)
	eventually(t, 30*time.Second, "the crash", func() error {
		if applies.Load() <= 4 {
			return errors.New("not yet")
		}
		return nil
	})
	first.stop()
	if n := len(f.state().cms); n != 4 {
		t.Fatalf("want 4 ContainerMachines when the first manager died, got %d", n)
	}

	startStack(t)
	eventually(t, settle, "10 replicas after the restart", f.settled(10))
	time.Sleep(3 * time.Second)
	s := f.state()
	if len(s.cms) != 10 || len(s.containers) != 10 || len(s.machines) != 10 {
		t.Fatalf("after the restart: %d ContainerMachines, %d containers, %d Machines", len(s.cms), len(s.containers), len(s.machines))
	}
	seen := map[string]bool{}
	for _, c := range s.containers {
		if seen[c.Labels[container.LabelMachine]] {
			t.Fatalf("two containers for ContainerMachine %s", c.Labels[container.LabelMachine])
		}
		seen[c.Labels[container.LabelMachine]] = true
	}
}

// TestMaxUnavailableRollout uses maxSurge 0 / maxUnavailable 50% of 2: the
// pool never exceeds its 2 replicas nor has fewer than 1 provisioned machine
// during the rollout, and still replaces every machine.
func TestMaxUnavailableRollout(t *testing.T) {
	startStack(t)
	f := newFixture(t, 2, expinfrav1.RollingUpdate{MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromString("50%"))})
	eventually(t, settle, "2 replicas", f.settled(2))
	old := cmNames(f.state())
	ctx := ctxT(t)
	bounds := f.watchBounds(1, 2)
	mp := &clusterv1.MachinePool{}
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(f.mp), mp))
	before := mp.DeepCopy()
	mp.Spec.Template.Spec.Version = "v1.35.5"
	must(t, env.Client.Patch(ctx, mp, client.MergeFrom(before)))
	eventually(t, 2*settle, "the version rollout", func() error {
		if err := f.settled(2)(); err != nil {
			return err
		}
		for _, cm := range f.state().cms {
			if v := cm.Annotations["containermachinepool.infrastructure.cluster.x-k8s.io/version"]; v != "v1.35.5" {
				return fmt.Errorf("ContainerMachine %s is still at %s", cm.Name, v)
			}
		}
		return nil
	})
	bounds.check()
	for _, name := range cmNames(f.state()) {
		if slices.Contains(old, name) {
			t.Fatalf("machine %s survived the rollout", name)
		}
	}
}

// TestPausedClusterHoldsThePool pauses the Cluster, scales the MachinePool
// and checks that the pool creates nothing, then unpauses it and checks that
// the pool scales without any other nudge: the pool's own status patch
// (Paused turning False) no longer reconciles it, so the reconcile that
// writes it must carry on.
func TestPausedClusterHoldsThePool(t *testing.T) {
	startStack(t)
	f := newFixture(t, 0, expinfrav1.RollingUpdate{})
	eventually(t, settle, "an empty pool to be ready", f.settled(0))
	ctx := ctxT(t)
	setPaused := func(paused bool) {
		cluster := &clusterv1.Cluster{}
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(f.cluster), cluster))
		before := cluster.DeepCopy()
		cluster.Spec.Paused = ptr.To(paused)
		must(t, env.Client.Patch(ctx, cluster, client.MergeFrom(before)))
	}
	pausedIs := func(want bool) func() error {
		return func() error {
			pool := &expinfrav1.ContainerMachinePool{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(f.pool), pool); err != nil {
				return err
			}
			if got := conditions.IsTrue(pool, clusterv1.PausedCondition); got != want {
				return fmt.Errorf("pool's Paused condition is %v, want %v", got, want)
			}
			return nil
		}
	}

	setPaused(true)
	eventually(t, settle, "the pool to be Paused", pausedIs(true))
	f.scale(2)
	time.Sleep(5 * time.Second) // past the pool's 2 s coalescing of member changes
	if n := len(f.state().cms); n != 0 {
		t.Fatalf("a paused pool created %d ContainerMachines", n)
	}

	setPaused(false)
	eventually(t, settle, "the pool to be unpaused", pausedIs(false))
	eventually(t, settle, "2 replicas after the unpause", f.settled(2))
}
