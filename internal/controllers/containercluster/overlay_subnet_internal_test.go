package containercluster

import (
	"context"
	"errors"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/engines"
)

// TestANewOverlayAvoidsEveryLocalNetworkOfItsEngines makes the overlay of
// a cluster on two engines while the second engine holds another
// cluster's bridge on the subnet the overlay's name derives first: the
// overlay takes another subnet, since the swarm would not refuse it and a
// node on both would not know which interface an address is behind. An
// engine that does not answer stops only the making of a new overlay.
func TestANewOverlayAvoidsEveryLocalNetworkOfItsEngines(t *testing.T) {
	ctx := context.Background()
	a, b := fake.New(nil), fake.New(nil)
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "uid-1"}}
	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}, Spec: infrav1.ContainerClusterSpec{
		ClusterID: "uid-1", Engines: []infrav1.ClusterEngine{{Name: "a"}, {Name: "b"}}}}
	r := &Reconciler{Engines: engines.Named(map[string]container.Runtime{"a": a, "b": b})}
	const name = "capct-c1"
	first, _ := container.Subnets(name, 0)
	b.AddNetwork(container.Network{Name: "capct-other", Labels: container.Owner{Namespace: "ns", Cluster: "other", ClusterID: "uid-2"}.Labels(),
		IPv4Subnet: first}, true)

	// Engine b away while the overlay is new: no subnet is picked blind.
	b.FailNext(fake.OpLocalSubnets, container.NewError("list", "networks", "", container.KindUnreachable, errors.New("no route to host")))
	if _, err := r.ensureNetwork(ctx, cluster, cc, name, container.IPv4); !container.IsUnreachable(err) {
		t.Fatalf("want engine b's unreachability while the overlay is new, got %v", err)
	}
	if _, err := a.InspectNetwork(ctx, name); !container.IsNotFound(err) {
		t.Fatalf("an overlay was made without engine b's local networks: %v", err)
	}

	subnets, err := r.ensureNetwork(ctx, cluster, cc, name, container.IPv4)
	if err != nil {
		t.Fatal(err)
	}
	if subnets[0].Overlaps(first) {
		t.Fatalf("the overlay took %s, the subnet of engine b's bridge capct-other %s", subnets[0], first)
	}
	if local, err := a.LocalSubnets(ctx); err != nil || slices.Contains(local, subnets[0]) {
		t.Fatalf("the overlay %s is among engine a's local subnets %v (%v)", subnets[0], local, err)
	}

	// Made, the overlay no longer asks the other engines.
	b.FailNext(fake.OpLocalSubnets, container.NewError("list", "networks", "", container.KindUnreachable, errors.New("no route to host")))
	if again, err := r.ensureNetwork(ctx, cluster, cc, name, container.IPv4); err != nil || again[0] != subnets[0] {
		t.Fatalf("ensuring the existing overlay with engine b away: %v, %v", again, err)
	}
}
