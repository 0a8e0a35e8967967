package containermachinepool_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/labels/format"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/exp/internal/controllers/containermachinepool"
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
			return fmt.Errorf("the leftover container still exists: %w", err)
		}
		return nil
	})
}

// TestFailureDomainsSpreadAndPin: a MachinePool that lists two of its
// cluster's three failure domains has its members spread evenly over the
// two as it scales out and in, the first by name on a tie, and never one
// on the third, which the Cluster reports too. The cluster is on the
// manager's own engine, where failure domains only label machines: what is
// checked is the pool's choice on each ContainerMachine, which the machine
// provider places it by.
func TestFailureDomainsSpreadAndPin(t *testing.T) {
	startStack(t)
	f := newFixture(t, 0, expinfrav1.RollingUpdate{}, func(cc *infrav1.ContainerCluster, mp *clusterv1.MachinePool) {
		cc.Spec.FailureDomains = []clusterv1.FailureDomain{{Name: "fd-a"}, {Name: "fd-b"}, {Name: "fd-c"}}
		mp.Spec.FailureDomains = []string{"fd-b", "fd-a"}
	})
	ctx := ctxT(t)
	eventually(t, settle, "an empty pool to be ready and the Cluster to report its failure domains", func() error {
		if err := f.settled(0)(); err != nil {
			return err
		}
		cluster := &clusterv1.Cluster{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(f.cluster), cluster); err != nil {
			return err
		}
		if len(cluster.Status.FailureDomains) != 3 {
			return fmt.Errorf("the Cluster reports failure domains %v, want fd-a, fd-b and fd-c", cluster.Status.FailureDomains)
		}
		return nil
	})
	for _, step := range []struct {
		replicas int32
		want     string
	}{
		{4, "map[fd-a:2 fd-b:2]"},
		{5, "map[fd-a:3 fd-b:2]"},
		{2, "map[fd-a:1 fd-b:1]"},
		{3, "map[fd-a:2 fd-b:1]"},
	} {
		f.scale(step.replicas)
		eventually(t, settle, fmt.Sprintf("%d replicas", step.replicas), f.settled(int(step.replicas)))
		perDomain := map[string]int{}
		for _, cm := range f.state().cms {
			perDomain[cm.Annotations[containermachinepool.FailureDomainAnnotation]]++
			// On one host the domain labels the machine, as a Machine's
			// own failure domain does.
			if got, want := cm.Status.FailureDomain, cm.Annotations[containermachinepool.FailureDomainAnnotation]; got != want {
				t.Fatalf("ContainerMachine %s reports failure domain %q, its pool asked for %q", cm.Name, got, want)
			}
		}
		if got := fmt.Sprint(perDomain); got != step.want {
			t.Fatalf("%d replicas are in failure domains %s, want %s", step.replicas, got, step.want)
		}
	}
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

// TestFailedMemberIsReplaced makes two members fail for good, one whose
// bootstrap fails (its container still runs, so its logs can be read) and
// one whose container is removed behind CAPCT's back, and checks that the
// pool replaces each within its bounds (never more than replicas+maxSurge
// machines), and deletes each only after it kept its diagnostics in a
// Secret and named it in a Warning event.
func TestFailedMemberIsReplaced(t *testing.T) {
	startStack(t)
	f := newFixture(t, 2, expinfrav1.RollingUpdate{})
	eventually(t, settle, "2 replicas", f.settled(2))

	// The next node's bootstrap fails for good (exit 127: no such
	// command), and its journal says so.
	existing := map[string]bool{}
	for _, c := range f.state().containers {
		existing[c.Name] = true
	}
	var mu sync.Mutex
	victim := ""
	rt.SetExecHandler(func(_ context.Context, m container.Machine, _ map[string][]byte, in container.ExecInput, _ []byte) (container.ExecResult, bool) {
		mu.Lock()
		defer mu.Unlock()
		if existing[m.Name] || (victim != "" && m.Name != victim) {
			return container.ExecResult{}, false
		}
		switch {
		case in.Cmd[0] == "journalctl":
			return container.ExecResult{Stdout: []byte("kubelet[7]: the journal of " + m.Name + "\n")}, true
		case strings.Contains(strings.Join(in.Cmd, " "), "echo hello"):
			victim = m.Name
			return container.ExecResult{ExitCode: 127, Stderr: []byte("sh: 1: echo: not found\n")}, true
		}
		return container.ExecResult{}, false
	})
	t.Cleanup(func() { rt.SetExecHandler(nil) })
	victimCM := func() string {
		mu.Lock()
		defer mu.Unlock()
		for _, cm := range f.state().cms {
			if naming.ContainerName(f.ns, f.name, cm.Name) == victim {
				return cm.Name
			}
		}
		return ""
	}

	bounds := f.watchBounds(0, 4)
	order := f.watchDeletedAfterDiagnostics()
	f.scale(3)
	failed := ""
	eventually(t, settle, "a member to fail its bootstrap", func() error {
		if failed = victimCM(); failed == "" {
			return errors.New("no bootstrap failed yet")
		}
		return nil
	})
	eventually(t, 2*settle, "the failed member to be replaced", func() error {
		if err := f.settled(3)(); err != nil {
			return err
		}
		if slices.Contains(cmNames(f.state()), failed) {
			return fmt.Errorf("the failed ContainerMachine %s is still there", failed)
		}
		return nil
	})
	rt.SetExecHandler(nil)
	record := f.diagnostics(failed)
	for key, want := range map[string]string{
		"summary":        "Bootstrapped=False BootstrapFailed",
		"journal":        "the journal of " + victim,
		"bootstrap-exit": "127",
	} {
		if !strings.Contains(string(record.Data[key]), want) {
			t.Errorf("diagnostics %s = %q, want it to hold %q", key, record.Data[key], want)
		}
	}
	f.event(failed, "BootstrapFailed")

	// A container gone for good: nothing to read, but the record says so.
	s := f.state()
	gone := s.cms[0].Name
	if !rt.RemoveOutOfBand(naming.ContainerName(f.ns, f.name, gone)) {
		t.Fatalf("container of %s not found", gone)
	}
	eventually(t, 2*settle, "the member whose container is gone to be replaced", func() error {
		if err := f.settled(3)(); err != nil {
			return err
		}
		if slices.Contains(cmNames(f.state()), gone) {
			return fmt.Errorf("ContainerMachine %s is still there", gone)
		}
		return nil
	})
	record = f.diagnostics(gone)
	if !strings.Contains(string(record.Data["summary"]), infrav1.ContainerMissingReason) || !strings.Contains(string(record.Data["notes"]), "is gone") {
		t.Errorf("diagnostics of %s: summary %q notes %q", gone, record.Data["summary"], record.Data["notes"])
	}
	f.event(gone, infrav1.ContainerMissingReason)
	bounds.check()
	order.check(failed, gone)
}

// TestHealthCheckRemediation marks a Machine of the pool as a
// MachineHealthCheck does when it leaves remediation to the Machine's owner
// (HealthCheckSucceeded and OwnerRemediated False): the pool keeps its
// diagnostics, says on OwnerRemediated that it deletes it, deletes it and
// replaces it. A Machine that the health check finds healthy again loses
// its stale OwnerRemediated condition and stays.
func TestHealthCheckRemediation(t *testing.T) {
	startStack(t)
	f := newFixture(t, 2, expinfrav1.RollingUpdate{})
	eventually(t, settle, "2 replicas", f.settled(2))
	ctx := ctxT(t)
	s := f.state()
	unhealthy, recovered := s.machines[0].Name, s.machines[1].Name

	// Hold the unhealthy Machine once deleted, to read what the pool wrote
	// on it.
	const hold = "test.capct.io/hold"
	m := &clusterv1.Machine{}
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: unhealthy}, m))
	before := m.DeepCopy()
	m.Finalizers = append(m.Finalizers, hold)
	must(t, env.Client.Patch(ctx, m, client.MergeFrom(before)))

	setHealth := func(name string, healthy bool) {
		m := &clusterv1.Machine{}
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, m))
		before := m.DeepCopy()
		status, reason := metav1.ConditionFalse, clusterv1.MachineHealthCheckUnhealthyNodeReason
		if healthy {
			status, reason = metav1.ConditionTrue, clusterv1.MachineHealthCheckSucceededReason
		}
		conditions.Set(m, metav1.Condition{Type: clusterv1.MachineHealthCheckSucceededCondition, Status: status, Reason: reason,
			Message: "Health check failed: Condition Ready on Node is reporting status Unknown for more than 5m0s"})
		conditions.Set(m, metav1.Condition{Type: clusterv1.MachineOwnerRemediatedCondition, Status: metav1.ConditionFalse,
			Reason: clusterv1.MachineOwnerRemediatedWaitingForRemediationReason})
		must(t, env.Client.Status().Patch(ctx, m, client.MergeFrom(before)))
	}
	setHealth(recovered, true)
	setHealth(unhealthy, false)

	eventually(t, settle, "the unhealthy Machine to be deleted by the pool", func() error {
		m := &clusterv1.Machine{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: unhealthy}, m); err != nil {
			return err
		}
		if m.DeletionTimestamp.IsZero() {
			return errors.New("not deleted yet")
		}
		if c := conditions.Get(m, clusterv1.MachineOwnerRemediatedCondition); c == nil || c.Reason != "MachineDeleting" {
			return fmt.Errorf("OwnerRemediated %+v, want reason MachineDeleting", c)
		}
		return nil
	})
	record := f.diagnostics(unhealthy)
	if !strings.Contains(string(record.Data["summary"]), "MachineHealthCheck") {
		t.Errorf("diagnostics summary %q does not name the health check", record.Data["summary"])
	}
	f.event(unhealthy, "MachineHealthCheck")
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: unhealthy}, m))
	before = m.DeepCopy()
	m.Finalizers = slices.DeleteFunc(m.Finalizers, func(s string) bool { return s == hold })
	must(t, env.Client.Patch(ctx, m, client.MergeFrom(before)))

	eventually(t, 2*settle, "the unhealthy member to be replaced", func() error {
		if err := f.settled(2)(); err != nil {
			return err
		}
		names := cmNames(f.state())
		if slices.Contains(names, unhealthy) || !slices.Contains(names, recovered) {
			return fmt.Errorf("members %v, want %s gone and %s kept", names, unhealthy, recovered)
		}
		return nil
	})
	eventually(t, settle, "the recovered Machine's OwnerRemediated to go", func() error {
		m := &clusterv1.Machine{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: recovered}, m); err != nil {
			return err
		}
		if c := conditions.Get(m, clusterv1.MachineOwnerRemediatedCondition); c != nil {
			return fmt.Errorf("OwnerRemediated is still %+v", c)
		}
		return nil
	})
}

// diagnostics returns the Secret that keeps the diagnostics of the pool's
// ContainerMachine cm.
func (f *fixture) diagnostics(cm string) *corev1.Secret {
	f.t.Helper()
	s, err := f.diagnosticsOf(ctxT(f.t), cm)
	must(f.t, err)
	if s.Type != containermachinepool.DiagnosticsSecretType || s.Annotations[containermachinepool.DiagnosticsMachineAnnotation] != cm {
		f.t.Fatalf("Secret %s: type %q annotations %v", s.Name, s.Type, s.Annotations)
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Name != f.pool.Name {
		f.t.Fatalf("Secret %s is owned by %v, want the pool", s.Name, s.OwnerReferences)
	}
	return s
}

// diagnosticsOf finds the Secret that holds the diagnostics of the pool's
// ContainerMachine cm (one of the pool's slots, which names it), or a
// NotFound error.
func (f *fixture) diagnosticsOf(ctx context.Context, cm string) (*corev1.Secret, error) {
	list := &corev1.SecretList{}
	if err := env.Client.List(ctx, list, client.InNamespace(f.ns)); err != nil {
		return nil, err
	}
	for i := range list.Items {
		if list.Items[i].Annotations[containermachinepool.DiagnosticsMachineAnnotation] == cm {
			return &list.Items[i], nil
		}
	}
	return nil, apierrors.NewNotFound(corev1.Resource("secrets"), "diagnostics of "+cm)
}

// event waits for the pool's Warning event on the failed machine cm, which
// names the Secret and says why (want).
func (f *fixture) event(cm, want string) {
	f.t.Helper()
	eventually(f.t, settle, "the event on "+cm, func() error {
		events := &corev1.EventList{}
		if err := env.Client.List(ctxT(f.t), events, client.InNamespace(f.ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "ContainerMachinePool" && e.InvolvedObject.Name == f.pool.Name && e.Type == corev1.EventTypeWarning &&
				e.Reason == containermachinepool.ReplacingFailedMachineEvent && strings.Contains(e.Message, "ContainerMachine "+cm+":") &&
				strings.Contains(e.Message, "Secret "+f.pool.Name+"-diagnostics-") {
				if !strings.Contains(e.Message, want) {
					return fmt.Errorf("event %q does not say %q", e.Message, want)
				}
				return nil
			}
		}
		return fmt.Errorf("no event on %s among %d", cm, len(events.Items))
	})
}

// deletionOrder watches the pool's machines for one that goes (its
// ContainerMachine or Machine being deleted, or gone) without its
// diagnostics Secret.
type deletionOrder struct {
	t       *testing.T
	stop    context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	deleted map[string]bool
	early   []string
}

func (f *fixture) watchDeletedAfterDiagnostics() *deletionOrder {
	ctx, stop := context.WithCancel(ctxT(f.t))
	o := &deletionOrder{t: f.t, stop: stop, done: make(chan struct{}), deleted: map[string]bool{}}
	go func() {
		defer close(o.done)
		known := map[string]bool{}
		for ctx.Err() == nil {
			s, err := f.tryState(ctx)
			if err != nil {
				return
			}
			machines := map[string]clusterv1.Machine{}
			for _, m := range s.machines {
				machines[m.Name] = m
			}
			present := map[string]bool{}
			for _, cm := range s.cms {
				present[cm.Name] = true
				known[cm.Name] = true
				m, ok := machines[cm.Name]
				if cm.DeletionTimestamp.IsZero() && (!ok || m.DeletionTimestamp.IsZero()) {
					continue
				}
				o.seen(ctx, f, cm.Name)
			}
			for name := range known {
				if !present[name] {
					o.seen(ctx, f, name)
					delete(known, name)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	f.t.Cleanup(stop)
	return o
}

func (o *deletionOrder) seen(ctx context.Context, f *fixture, name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.deleted[name] {
		return
	}
	o.deleted[name] = true
	_, err := f.diagnosticsOf(ctx, name)
	if apierrors.IsNotFound(err) {
		o.early = append(o.early, name)
	}
}

// check stops the watch and fails the test if one of failed was deleted
// before its diagnostics were kept, or was not seen going at all.
func (o *deletionOrder) check(failed ...string) {
	o.t.Helper()
	o.stop()
	<-o.done
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, name := range failed {
		if !o.deleted[name] {
			o.t.Errorf("ContainerMachine %s was never seen going", name)
		}
		if slices.Contains(o.early, name) {
			o.t.Errorf("ContainerMachine %s went before its diagnostics were kept", name)
		}
	}
}

// TestOrphanMachineIsDeleted plays the race an upgrade met: Cluster API's
// MachinePool controller makes a Machine, from its cache, for a
// ContainerMachine the pool has already deleted. No controller of Cluster
// API deletes such a Machine; the pool must, and must leave its own
// machines alone.
func TestOrphanMachineIsDeleted(t *testing.T) {
	startStack(t)
	f := newFixture(t, 1, expinfrav1.RollingUpdate{})
	eventually(t, settle, "1 replica", f.settled(1))
	ctx := ctxT(t)
	orphan := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.name + "-gone", Labels: f.labels(),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachinePool", Name: f.mp.Name, UID: f.mp.UID}}},
		Spec: clusterv1.MachineSpec{
			ClusterName: f.name,
			Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To("none")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: containermachinepool.MachineKind, Name: f.name + "-gone",
			},
		},
	}
	must(t, env.Client.Create(ctx, orphan))
	eventually(t, settle, "the orphan Machine to go", func() error {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(orphan), &clusterv1.Machine{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("machine %s, whose ContainerMachine never existed, is still there (%w)", orphan.Name, err)
	})
	eventually(t, settle, "1 replica still", f.settled(1))
}
