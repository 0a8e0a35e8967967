package clusters

import (
	"testing"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// TestInfrastructureName: only a reference to a ContainerCluster of CAPCT's
// API group names one. A Cluster whose infrastructure is another provider's
// object of the same name, or of another group with CAPCT's kind, has no
// ContainerCluster, even if one of that name sits in the namespace.
func TestInfrastructureName(t *testing.T) {
	group := infrav1.GroupVersion.Group
	testCases := []struct {
		name   string
		ref    clusterv1.ContractVersionedObjectReference
		want   string
		wantOK bool
	}{
		{name: "a ContainerCluster", ref: clusterv1.ContractVersionedObjectReference{APIGroup: group, Kind: "ContainerCluster", Name: "demo"}, want: "demo", wantOK: true},
		{name: "unset", ref: clusterv1.ContractVersionedObjectReference{}},
		{name: "another provider's kind", ref: clusterv1.ContractVersionedObjectReference{APIGroup: group, Kind: "DockerCluster", Name: "demo"}},
		{name: "CAPCT's kind in another group", ref: clusterv1.ContractVersionedObjectReference{APIGroup: "example.com", Kind: "ContainerCluster", Name: "demo"}},
		{name: "no name", ref: clusterv1.ContractVersionedObjectReference{APIGroup: group, Kind: "ContainerCluster"}},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := InfrastructureName(&clusterv1.Cluster{Spec: clusterv1.ClusterSpec{InfrastructureRef: tc.ref}})
			if got != tc.want || ok != tc.wantOK {
				t.Fatalf("InfrastructureName = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
	if _, ok := InfrastructureName(nil); ok {
		t.Fatal("a nil Cluster names a ContainerCluster")
	}
}
