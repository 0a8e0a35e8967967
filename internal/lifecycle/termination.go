package lifecycle

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/loadbalancer"
)

// deletionPoll is how soon a deletion looks again for a container that is
// still there.
const deletionPoll = time.Second

// Termination deletes a machine's container. A control-plane machine leaves
// the load balancer first (its weight drops to 0 as soon as it is being
// deleted), so that no request goes to an API server that is going away.
// The container's disappearance is confirmed before the caller removes the
// finalizer; a container that is already gone never blocks deletion.
type Termination struct {
	*Deps
	// LoadBalancer rewrites the configuration of the load balancer in front
	// of a control-plane machine's cluster; nil leaves it alone.
	LoadBalancer *loadbalancer.LoadBalancer
}

// Reconcile returns done once the container is gone.
func (t *Termination) Reconcile(ctx context.Context, s *MachineScope) (done bool, result ctrl.Result, err error) {
	cm := s.ContainerMachine
	t.Bootstraps.Forget(client.ObjectKeyFromObject(cm))
	if s.IsControlPlane() && t.LoadBalancer != nil && s.ContainerCluster != nil && s.ContainerCluster.DeletionTimestamp.IsZero() {
		if _, err := t.LoadBalancer.Sync(ctx, s.Cluster, s.ContainerCluster); err != nil {
			return false, ctrl.Result{}, fmt.Errorf("failed to take ContainerMachine %s/%s out of the load balancer: %w", cm.Namespace, cm.Name, err)
		}
	}
	name := s.ContainerName()
	existing, err := s.Runtime.Inspect(ctx, name)
	if container.IsNotFound(err) {
		// The other nodes' routes to its pod CIDRs go when the
		// ContainerCluster controller sees the ContainerMachine go.
		return true, ctrl.Result{}, nil
	}
	if err != nil {
		return false, ctrl.Result{}, fmt.Errorf("failed to inspect container %s of ContainerMachine %s/%s: %w", name, cm.Namespace, cm.Name, err)
	}
	if !s.Owner().Owns(existing.Labels) {
		// Another cluster's container with this name is not ours to delete.
		return true, ctrl.Result{}, nil
	}
	if err := s.Runtime.Delete(ctx, name, s.Owner()); err != nil && !container.IsNotFound(err) {
		return false, ctrl.Result{}, fmt.Errorf("failed to delete container %s of ContainerMachine %s/%s: %w", name, cm.Namespace, cm.Name, err)
	}
	t.Recorder.Eventf(cm, corev1.EventTypeNormal, "Deleted", "Deleted container %s", name)
	// Confirm on the next pass rather than trusting the delete call.
	return false, ctrl.Result{RequeueAfter: deletionPoll}, nil
}
