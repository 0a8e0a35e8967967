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

// ContainerCluster returns the ContainerCluster that cluster's
// infrastructure reference names, or nil when the reference is empty or the
// object does not exist (yet, or any more): callers wait for it or, when
// deleting, carry on without it.
func ContainerCluster(ctx context.Context, reader client.Reader, cluster *clusterv1.Cluster) (*infrav1.ContainerCluster, error) {
	if cluster == nil || cluster.Spec.InfrastructureRef.Name == "" {
		return nil, nil
	}
	key := client.ObjectKey{Namespace: cluster.Namespace, Name: cluster.Spec.InfrastructureRef.Name}
	cc := &infrav1.ContainerCluster{}
	if err := reader.Get(ctx, key, cc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("failed to get ContainerCluster %s of Cluster %s/%s: %w", key, cluster.Namespace, cluster.Name, err)
	}
	return cc, nil
}
