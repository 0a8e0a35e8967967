package containermachine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

// This file wakes machines on their workload cluster's Node events, so that
// Registration and Initialization go on as soon as a kubelet registers or
// its Node turns Ready, instead of at the next poll.

const (
	// containerNameField indexes ContainerMachines by their container's
	// name, which is their Node's name (the kubelet's hostname).
	containerNameField = "capct.containerName"
	// nodeSafetyNet is how often a machine waiting on its Node looks again
	// while Node events wake it: only for an event missed while the watch
	// was being set up or re-established.
	nodeSafetyNet = 30 * time.Second
)

// containerNameOf is the index function of containerNameField.
func containerNameOf(o client.Object) []string {
	cm, ok := o.(*infrav1.ContainerMachine)
	if !ok || cm.Labels[clusterv1.ClusterNameLabel] == "" {
		return nil
	}
	return []string{naming.ContainerName(cm.Namespace, cm.Labels[clusterv1.ClusterNameLabel], cm.Name)}
}

// watchNodes watches the Nodes of cluster's workload cluster once it is
// connected. Before that, ErrClusterNotConnected is no error: the
// connection's event (GetClusterSource) reconciles the cluster's machines
// again, which adds the watch, and polling covers the time between.
func (r *Reconciler) watchNodes(ctx context.Context, cluster *clusterv1.Cluster) error {
	if r.ClusterCache == nil || r.controller == nil {
		return nil
	}
	err := r.ClusterCache.Watch(ctx, client.ObjectKeyFromObject(cluster), clustercache.NewWatcher(clustercache.WatcherOptions{
		Name:         "containermachine-watchNodes",
		Watcher:      r.controller,
		Kind:         &corev1.Node{},
		EventHandler: handler.EnqueueRequestsFromMapFunc(r.nodeToContainerMachine),
		Predicates:   []predicate.Predicate{nodeChanged},
	}))
	if err != nil && !errors.Is(err, clustercache.ErrClusterNotConnected) {
		return fmt.Errorf("failed to watch the Nodes of Cluster %s: %w", klog.KObj(cluster), err)
	}
	return nil
}

// nodeToContainerMachine maps a Node to the ContainerMachine whose
// container it runs in.
func (r *Reconciler) nodeToContainerMachine(ctx context.Context, node client.Object) []reconcile.Request {
	machines := &infrav1.ContainerMachineList{}
	if err := r.Client.List(ctx, machines, client.MatchingFields{containerNameField: node.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list the ContainerMachine of a Node", "Node", node.GetName())
		return nil
	}
	requests := make([]reconcile.Request, 0, len(machines.Items))
	for i := range machines.Items {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&machines.Items[i])})
	}
	return requests
}

// nodeChanged passes the Node events a machine acts on: a Node that comes
// or goes, and a change of what Registration, Initialization and Liveness
// read (the providerID, the pod CIDRs, the taints, the addresses, the Ready
// condition, its heartbeat included: a kubelet that runs again after its
// container restarted reports anew, maybe with the same status). Other
// status updates (images, volumes) are dropped.
var nodeChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		before, okBefore := e.ObjectOld.(*corev1.Node)
		after, okAfter := e.ObjectNew.(*corev1.Node)
		if !okBefore || !okAfter {
			return false
		}
		return before.Spec.ProviderID != after.Spec.ProviderID ||
			!slices.Equal(before.Spec.PodCIDRs, after.Spec.PodCIDRs) ||
			len(before.Spec.Taints) != len(after.Spec.Taints) ||
			len(before.Status.Addresses) != len(after.Status.Addresses) ||
			ready(before) != ready(after)
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// ready is n's Ready condition, as far as a machine reads it.
func ready(n *corev1.Node) corev1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return corev1.NodeCondition{Status: c.Status, Reason: c.Reason, LastHeartbeatTime: c.LastHeartbeatTime}
		}
	}
	return corev1.NodeCondition{}
}
