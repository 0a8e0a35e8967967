package machineprovider

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	fakeruntime "github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

// newClaim returns a worker of cluster ns/c1 on two ContainerEngines, both
// answering, and a provider over them.
func newClaim(t *testing.T) (*Claim, *Provider, map[string]*fakeruntime.Runtime) {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clusterv1.AddToScheme, infrav1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w-0",
		Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"}}}
	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"},
		Spec: infrav1.ContainerClusterSpec{ClusterID: "id-1", Engines: []infrav1.ClusterEngine{{Name: "engine-a"}, {Name: "engine-b"}}}}
	conditions := []metav1.Condition{{Type: infrav1.EnginesReadyCondition, Status: metav1.ConditionTrue, Reason: infrav1.SucceededReason}}
	cc.Status.Conditions = conditions
	objs := []client.Object{cm}
	for _, name := range []string{"engine-a", "engine-b"} {
		e := &infrav1.ContainerEngine{ObjectMeta: metav1.ObjectMeta{Name: name}}
		e.Status.Conditions = []metav1.Condition{{Type: infrav1.EngineAvailableCondition, Status: metav1.ConditionTrue, Reason: infrav1.SucceededReason}}
		objs = append(objs, e)
	}
	// engine-a already holds a machine of the cluster.
	objs = append(objs, &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w-1",
		Labels:      map[string]string{clusterv1.ClusterNameLabel: "c1"},
		Annotations: map[string]string{infrav1.EngineAnnotation: "engine-a"}}})
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(objs...).Build()
	rts := map[string]*fakeruntime.Runtime{"engine-a": fakeruntime.New(nil), "engine-b": fakeruntime.New(nil)}
	set := engines.Named(map[string]container.Runtime{"engine-a": rts["engine-a"], "engine-b": rts["engine-b"]})
	claim := &Claim{
		Cluster:          &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "uid-1"}},
		ContainerCluster: cc,
		Machine:          &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m-0"}},
		ContainerMachine: cm,
		Version:          "v1.35.4",
	}
	return claim, &Provider{Client: c, APIReader: c, Engines: set}, rts
}

// TestGetBeforePlacementFindsNothing: a machine not placed yet has no
// container on any engine, and asking for it places nothing.
func TestGetBeforePlacementFindsNothing(t *testing.T) {
	claim, p, _ := newClaim(t)
	_, m, err := p.Get(context.Background(), claim)
	if !container.IsNotFound(err) || m != nil {
		t.Fatalf("Get = %v, %v; want a NotFound error", m, err)
	}
	if _, ok := claim.ContainerMachine.Annotations[infrav1.EngineAnnotation]; ok {
		t.Fatal("Get placed the machine")
	}
}

// TestCreatePlacesBeforeTheContainerIsMade: Create records the engine with
// the fewest of the cluster's machines, then makes the container there.
func TestCreatePlacesBeforeTheContainerIsMade(t *testing.T) {
	claim, p, rts := newClaim(t)
	ctx := context.Background()
	rts["engine-b"].AddImage("capct/node:v1.35.4", nil)
	network := naming.NetworkName(claim.Cluster, claim.ContainerCluster)
	// The cluster's overlay, which every engine of it sees.
	for _, rt := range rts {
		if _, err := rt.EnsureNetwork(ctx, container.NetworkSpec{Name: network, Owner: claim.Owner().ClusterOwner(), IPFamily: container.IPv4}); err != nil {
			t.Fatal(err)
		}
	}
	created, err := p.Create(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	if created.Engine != "engine-b" || !created.New || created.Machine.State != container.StateRunning {
		t.Fatalf("Create = engine %q, new %t, state %s; want a new running container on engine-b", created.Engine, created.New, created.Machine.State)
	}
	stored := &infrav1.ContainerMachine{}
	if err := p.Client.Get(ctx, client.ObjectKeyFromObject(claim.ContainerMachine), stored); err != nil {
		t.Fatal(err)
	}
	if got := stored.Annotations[infrav1.EngineAnnotation]; got != "engine-b" {
		t.Fatalf("recorded engine %q, want engine-b", got)
	}
	// Idempotent: a second call finds the first call's container.
	again, err := p.Create(ctx, claim)
	if err != nil || again.New || again.Machine.Name != created.Machine.Name {
		t.Fatalf("second Create = %+v, %v; want the same container, not new", again, err)
	}
}

// TestCreatePlacesAPoolMemberInItsPoolsDomain: a MachinePool's member,
// whose Machine has no failure domain, goes to the one its pool chose
// (infrav1.FailureDomainAnnotation), not to the engine with the fewest
// machines; the Machine's own failure domain comes first.
func TestCreatePlacesAPoolMemberInItsPoolsDomain(t *testing.T) {
	for _, tc := range []struct{ name, machines, pools, want string }{
		{"the pool's choice", "", "engine-a", "engine-a"},
		{"the Machine's first", "engine-b", "engine-a", "engine-b"},
		{"none: the fewest machines", "", "", "engine-b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claim, p, rts := newClaim(t)
			ctx := context.Background()
			claim.Machine.Spec.FailureDomain = tc.machines
			if tc.pools != "" {
				claim.ContainerMachine.Annotations = map[string]string{infrav1.FailureDomainAnnotation: tc.pools}
			}
			network := naming.NetworkName(claim.Cluster, claim.ContainerCluster)
			for _, rt := range rts {
				rt.AddImage("capct/node:v1.35.4", nil)
				if _, err := rt.EnsureNetwork(ctx, container.NetworkSpec{Name: network, Owner: claim.Owner().ClusterOwner(), IPFamily: container.IPv4}); err != nil {
					t.Fatal(err)
				}
			}
			created, err := p.Create(ctx, claim)
			if err != nil {
				t.Fatal(err)
			}
			if created.Engine != tc.want {
				t.Fatalf("placed on %q, want %q", created.Engine, tc.want)
			}
		})
	}
}

// TestCreateWaitsForTheClustersEngines: no placement, and so no
// container, while the cluster's engines are not ready.
func TestCreateWaitsForTheClustersEngines(t *testing.T) {
	claim, p, _ := newClaim(t)
	claim.ContainerCluster.Status.Conditions = nil
	_, err := p.Create(context.Background(), claim)
	wait, ok := AsWait(err)
	if !ok || wait.Reason != infrav1.WaitingForClusterInfrastructureReason || wait.RequeueAfter == 0 {
		t.Fatalf("Create = %v; want a WaitError %s with a requeue", err, infrav1.WaitingForClusterInfrastructureReason)
	}
}

// TestDeleteLeavesAnotherOwnersContainer: a container with the machine's
// name that another cluster owns is not the machine's; it counts as gone
// and stays.
func TestDeleteLeavesAnotherOwnersContainer(t *testing.T) {
	claim, p, rts := newClaim(t)
	ctx := context.Background()
	claim.ContainerMachine.Annotations = map[string]string{infrav1.EngineAnnotation: "engine-a"}
	claim.ContainerMachine.DeletionTimestamp = ptr.To(metav1.Now())
	other := container.Owner{Namespace: "ns", Cluster: "c1", ClusterID: "id-other"}.ForMachine("w-0")
	if _, err := rts["engine-a"].CreateMachine(ctx, container.MachineSpec{Name: claim.ContainerName(), Image: "x", Labels: other.Labels(), Role: container.RoleWorker}); err != nil {
		t.Fatal(err)
	}
	deleted, err := p.Delete(ctx, claim)
	if err != nil || !deleted.Gone {
		t.Fatalf("Delete = %+v, %v; want gone", deleted, err)
	}
	if _, err := rts["engine-a"].Inspect(ctx, claim.ContainerName()); err != nil {
		t.Fatalf("another owner's container was touched: %v", err)
	}
}
