package containercluster

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/engines"
)

// TestAnEncryptedClusterGetsAnEncryptedOverlay checks that
// spec.network.encrypted reaches the engine: the overlay of a cluster on
// two engines that asks for it is made encrypted, and one that exists
// unencrypted is not taken for it.
func TestAnEncryptedClusterGetsAnEncryptedOverlay(t *testing.T) {
	ctx := context.Background()
	a, b := fake.New(nil), fake.New(nil)
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "uid-1"}}
	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}, Spec: infrav1.ContainerClusterSpec{
		ClusterID: "uid-1", Engines: []infrav1.ClusterEngine{{Name: "a"}, {Name: "b"}},
		Network: infrav1.NetworkSpec{Encrypted: true}}}
	r := &Reconciler{Engines: engines.Named(map[string]container.Runtime{"a": a, "b": b})}

	if _, err := r.ensureNetwork(ctx, cluster, cc, "capct-c1", container.IPv4); err != nil {
		t.Fatal(err)
	}
	if n, err := a.InspectNetwork(ctx, "capct-c1"); err != nil || !n.Overlay || !n.Encrypted {
		t.Fatalf("want an encrypted overlay on the first engine, got %+v, %v", n, err)
	}

	// Made unencrypted before (by hand, or before the field was set):
	// adopting it would quietly carry the nodes' traffic in clear.
	if _, err := a.EnsureNetwork(ctx, container.NetworkSpec{Name: "capct-c2", Owner: container.Owner{Namespace: "ns", Cluster: "c2", ClusterID: "uid-2"}, Overlay: true}); err != nil {
		t.Fatal(err)
	}
	cluster2 := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c2", UID: "uid-2"}}
	cc2 := cc.DeepCopy()
	cc2.Name, cc2.Spec.ClusterID = "c2", "uid-2"
	if _, err := r.ensureNetwork(ctx, cluster2, cc2, "capct-c2", container.IPv4); !container.IsConflict(err) {
		t.Fatalf("want an unencrypted overlay refused for an encrypted cluster, got %v", err)
	}
}
