// Package clusters finds a Cluster's ContainerCluster, the one lookup the
// machine scope, the pool controller and node IPAM share.
package clusters

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// ContainerClusterKind is the kind a Cluster's spec.infrastructureRef names
// when CAPCT is its infrastructure provider.
const ContainerClusterKind = "ContainerCluster"

// InfrastructureName is the name of the ContainerCluster that cluster's
// spec.infrastructureRef names, and false when it names none: unset, or an
// object of another kind or API group. A ContainerCluster of the same name
// in the namespace is then not the cluster's, whatever its owner says.
func InfrastructureName(cluster *clusterv1.Cluster) (string, bool) {
	if cluster == nil {
		return "", false
	}
	ref := cluster.Spec.InfrastructureRef
	if ref.Name == "" || ref.Kind != ContainerClusterKind || ref.APIGroup != infrav1.GroupVersion.Group {
		return "", false
	}
	return ref.Name, true
}

// ContainerCluster returns the ContainerCluster that cluster's
// infrastructure reference names, or nil when it names none
// (InfrastructureName) or the object does not exist (yet, or any more):
// callers wait for it or, when deleting, carry on without it.
func ContainerCluster(ctx context.Context, reader client.Reader, cluster *clusterv1.Cluster) (*infrav1.ContainerCluster, error) {
	name, ok := InfrastructureName(cluster)
	if !ok {
		return nil, nil
	}
	key := client.ObjectKey{Namespace: cluster.Namespace, Name: name}
	cc := &infrav1.ContainerCluster{}
	if err := reader.Get(ctx, key, cc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("failed to get ContainerCluster %s of Cluster %s/%s: %w", key, cluster.Namespace, cluster.Name, err)
	}
	return cc, nil
}
