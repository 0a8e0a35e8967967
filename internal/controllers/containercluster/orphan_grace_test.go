package containercluster_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/controllers/containercluster"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/loadbalancer"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/test/capi"
)

// TestOrphanGracePeriod runs the orphan sweep with the grace period the
// manager runs with (the Reconciler's default, DefaultOrphanGracePeriod) on
// an injected clock: a node container without a ContainerMachine stays until
// it is that old and goes at that age; a node with its ContainerMachine and
// the load balancer stay however old they are.
//
// The reconciler reads a fake client and runs containers in the fake
// runtime, so that the suite's controllers, which watch the API server and
// the real engine, never touch what it sweeps; its manager only wires it and
// is never started. Reconcile is called directly, at chosen instants.
func TestOrphanGracePeriod(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC))
	rt := fake.New(clk)
	rt.AddImage(loadbalancer.DefaultImage, nil)

	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "uid-c1"},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerCluster", Name: "c1"}}}
	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: "c1", UID: "uid-c1"}}}}
	kept := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kept",
		Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"}}}
	c := fakeclient.NewClientBuilder().WithScheme(env.Scheme).
		WithObjects(cluster, cc, kept).WithStatusSubresource(cc).Build()

	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	// The load balancer's reload waits run on the real clock (the
	// reconciler hands its clock to them only when it can wait); only the
	// sweep's notion of now is the test's.
	r := &containercluster.Reconciler{Client: c, Engines: engines.Single(rt), Clock: passiveClock{clk}, LoadBalancerStats: capi.LoadBalancerStats(rt)}
	if err := r.SetupWithManager(ctx, mgr, capi.Options()); err != nil {
		t.Fatal(err)
	}
	grace := containercluster.DefaultOrphanGracePeriod
	if r.OrphanGracePeriod != grace {
		t.Fatalf("the reconciler's grace period is %s, want the default %s", r.OrphanGracePeriod, grace)
	}

	owner := naming.ClusterOwner(cluster, cc)
	owner.ClusterID = string(cluster.UID)
	node := func(machine string) string {
		name := naming.ContainerName("ns", "c1", machine)
		if _, err := rt.CreateMachine(ctx, container.MachineSpec{Name: name, Image: "capct/node:v1.35.4",
			Labels: owner.ForMachine(machine).Labels(), Role: container.RoleWorker}); err != nil {
			t.Fatal(err)
		}
		return name
	}
	orphan, live := node("gone"), node("kept")
	born := clk.Now()

	reconcileAt := func(at time.Time) {
		t.Helper()
		clk.SetTime(at)
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cc)}); err != nil {
			t.Fatalf("reconcile at %s: %v", at.Sub(born), err)
		}
	}
	exists := func(name string) bool {
		t.Helper()
		_, err := rt.Inspect(ctx, name)
		if err != nil && !container.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}

	// The first reconciles record the paused condition and add the
	// finalizer, one at a time; then the cluster is provisioned and swept.
	for i := 0; !ptr.Deref(cc.Status.Initialization.Provisioned, false); i++ {
		if i == 5 {
			t.Fatalf("the cluster is not provisioned after %d reconciles: %v", i, cc.Status.Conditions)
		}
		reconcileAt(born)
		if err := c.Get(ctx, client.ObjectKeyFromObject(cc), cc); err != nil {
			t.Fatal(err)
		}
	}
	lb := naming.LoadBalancerName("ns", "c1")
	if !exists(orphan) || !exists(lb) {
		t.Fatalf("orphan %v, load balancer %v right after they were made", exists(orphan), exists(lb))
	}

	reconcileAt(born.Add(grace - time.Second))
	if !exists(orphan) {
		t.Fatalf("the orphan went %s before the grace period of %s ended", time.Second, grace)
	}

	reconcileAt(born.Add(grace))
	if exists(orphan) {
		t.Fatalf("the orphan is still there after the grace period of %s", grace)
	}

	reconcileAt(born.Add(10 * grace))
	if !exists(live) || !exists(lb) {
		t.Fatalf("after %s: the node with its ContainerMachine exists %v, the load balancer %v; both must stay", 10*grace, exists(live), exists(lb))
	}
}

// passiveClock hides the fake clock's timers, so that whatever waits waits
// on the real clock.
type passiveClock struct{ clock.PassiveClock }
