package containercluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/engines"
)

// enginesIndex indexes ContainerClusters by the ContainerEngines they list,
// so that a change to an engine wakes the clusters on it.
const enginesIndex = "spec.engines.name"

// engineRecheck is how soon a cluster whose engines cannot run it looks
// again. The engines' watch wakes it when an engine changes, but nothing
// wakes it when its Namespace gains the label a selector asks for, and
// under --watch-filter the controller's event filter drops the events of
// engines without the filter's label.
const engineRecheck = time.Minute

// engineFailureDomainType is the attribute that tells a failure domain
// that is a container engine from one that only labels containers.
const engineFailureDomainType = "docker"

// enginesNotReady is why a cluster's engines cannot run its machines: the
// reason and message of its EnginesReady condition.
type enginesNotReady struct {
	reason  string
	message string
}

func (e *enginesNotReady) Error() string { return e.message }

// reconcileEngines sets the cluster's failure domains and, for a cluster
// on engines, its EnginesReady condition. Before the cluster is
// provisioned, engines that cannot run it stop the reconcile (stop), so
// that nothing is made on an engine the cluster may not use; after, they
// only say so: the load balancer and machines that run are never taken
// away because an engine went away or an admin narrowed it, and the
// engine's calls fail on their own while it is unreachable.
func (r *Reconciler) reconcileEngines(ctx context.Context, cc *infrav1.ContainerCluster, now time.Time, provisioned bool) (_ ctrl.Result, stop bool, _ error) {
	if len(cc.Spec.Engines) == 0 {
		cc.Status.FailureDomains = cc.Spec.FailureDomains
		return ctrl.Result{}, false, nil
	}
	cc.Status.FailureDomains = engineFailureDomains(cc)
	err := r.checkEngines(ctx, cc)
	var notReady *enginesNotReady
	if !errors.As(err, &notReady) {
		if err != nil {
			return ctrl.Result{}, true, err
		}
		conditions.Set(cc, metav1.Condition{
			Type: infrav1.EnginesReadyCondition, Status: metav1.ConditionTrue, Reason: infrav1.SucceededReason,
			LastTransitionTime: metav1.NewTime(now),
		})
		return ctrl.Result{}, false, nil
	}
	recheck := engineRecheck
	if notReady.reason == infrav1.NotSupportedYetReason {
		// Only a change of the cluster's spec, which wakes it, helps.
		recheck = 0
	}
	res, _ := r.refused(cc, now, infrav1.EnginesReadyCondition, notReady.reason, notReady, recheck)
	return res, !provisioned, nil
}

// checkEngines reports whether the engines cc lists can run its machines:
// each exists, allows cc's namespace (engines.AllowsNamespace, asked again
// on every pass because an admin can narrow an engine after admission),
// and is reached; several engines must also share a swarm (checkSwarm).
// It returns an *enginesNotReady for the first that cannot, and other
// errors when the API fails.
func (r *Reconciler) checkEngines(ctx context.Context, cc *infrav1.ContainerCluster) error {
	ns := &corev1.Namespace{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: cc.Namespace}, ns); err != nil {
		return fmt.Errorf("failed to get Namespace %s of ContainerCluster %s: %w", cc.Namespace, klog.KObj(cc), err)
	}
	found := make([]*infrav1.ContainerEngine, 0, len(cc.Spec.Engines))
	for _, listed := range cc.Spec.Engines {
		engine := &infrav1.ContainerEngine{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: listed.Name}, engine); apierrors.IsNotFound(err) {
			return &enginesNotReady{infrav1.EngineNotFoundReason, fmt.Sprintf(
				"ContainerEngine %s does not exist: its admin must create it, or the cluster must name another", listed.Name)}
		} else if err != nil {
			return fmt.Errorf("failed to get ContainerEngine %s of ContainerCluster %s: %w", listed.Name, klog.KObj(cc), err)
		}
		if !engine.DeletionTimestamp.IsZero() {
			// It is kept until its clusters go, for their deletion only.
			return &enginesNotReady{infrav1.EngineNotFoundReason, fmt.Sprintf(
				"ContainerEngine %s is being deleted: it runs nothing new, and goes once no cluster lists it", listed.Name)}
		}
		if allowed, err := engines.AllowsNamespace(engine, ns); err != nil || !allowed {
			message := fmt.Sprintf("ContainerEngine %s does not allow namespace %s: its admin must list the namespace, or select it by label, in the engine's spec.allowedNamespaces", listed.Name, cc.Namespace)
			if err != nil {
				message = err.Error()
			}
			return &enginesNotReady{infrav1.NamespaceNotAllowedReason, message}
		}
		available := conditions.Get(engine, infrav1.EngineAvailableCondition)
		switch {
		case available == nil:
			return &enginesNotReady{infrav1.EngineUnreachableReason, fmt.Sprintf(
				"ContainerEngine %s has not been reached yet", listed.Name)}
		case available.Status != metav1.ConditionTrue:
			return &enginesNotReady{available.Reason, fmt.Sprintf("ContainerEngine %s: %s", listed.Name, available.Message)}
		}
		found = append(found, engine)
	}
	if len(found) > 1 {
		return checkSwarm(cc, found)
	}
	return nil
}

// checkSwarm reports whether engines, the ContainerEngines of a cluster on
// several, can share its overlay network: each is in a swarm, the first,
// which makes the network and holds the load balancer, manages it, and
// every manager among them is of the first one's swarm. A worker does not
// know its swarm's ID, so a worker of another swarm shows only when its
// machines cannot reach the others.
func checkSwarm(cc *infrav1.ContainerCluster, listed []*infrav1.ContainerEngine) error {
	if family := cc.Spec.Network.IPFamily; family != "" && family != infrav1.IPv4Family {
		return &enginesNotReady{infrav1.NotSupportedYetReason, fmt.Sprintf(
			"spec.network.ipFamily is %s: the overlay network of a cluster on several engines is IPv4 only, until IPv6 on overlays is verified (docs/multihost.md)", family)}
	}
	for _, e := range listed {
		if e.Status.Swarm == nil || e.Status.Swarm.NodeID == "" {
			return &enginesNotReady{infrav1.EngineNotInSwarmReason, fmt.Sprintf(
				"ContainerEngine %s is in no swarm: a cluster on several engines runs on an overlay network of the swarm they are in; join it to the first engine's swarm (docs/multihost.md)", e.Name)}
		}
	}
	first := listed[0]
	if !first.Status.Swarm.Manager {
		return &enginesNotReady{infrav1.NoSwarmManagerReason, fmt.Sprintf(
			"ContainerEngine %s, the cluster's first engine, is not a manager of its swarm: only a manager makes the cluster's overlay network; list a manager first", first.Name)}
	}
	for _, e := range listed[1:] {
		if id := e.Status.Swarm.ClusterID; e.Status.Swarm.Manager && id != first.Status.Swarm.ClusterID {
			return &enginesNotReady{infrav1.SwarmMismatchReason, fmt.Sprintf(
				"ContainerEngine %s is in swarm %s, and the first engine %s in swarm %s: no overlay network spans two swarms", e.Name, id, first.Name, first.Status.Swarm.ClusterID)}
		}
	}
	return nil
}

// engineFailureDomains returns the failure domains of a cluster on
// engines: one per engine, named after it, control-plane machines allowed
// unless the entry says otherwise. Engines that are away stay listed:
// dropping them at once would let the list flap with every lost packet
// (leaving them out after a grace period is docs/multihost.md, step 8).
func engineFailureDomains(cc *infrav1.ContainerCluster) []clusterv1.FailureDomain {
	domains := make([]clusterv1.FailureDomain, 0, len(cc.Spec.Engines))
	for _, e := range cc.Spec.Engines {
		domains = append(domains, clusterv1.FailureDomain{
			Name:         e.Name,
			ControlPlane: ptr.To(ptr.Deref(e.ControlPlane, true)),
			Attributes:   map[string]string{"type": engineFailureDomainType},
		})
	}
	return domains
}

// engineToClusters maps a ContainerEngine to the ContainerClusters that
// list it.
func (r *Reconciler) engineToClusters(ctx context.Context, o client.Object) []reconcile.Request {
	list := &infrav1.ContainerClusterList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{enginesIndex: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list the ContainerClusters on a ContainerEngine", "ContainerEngine", o.GetName())
		return nil
	}
	requests := make([]reconcile.Request, 0, len(list.Items))
	for _, cc := range list.Items {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&cc)})
	}
	return requests
}

// listedEngines is the enginesIndex of a ContainerCluster.
func listedEngines(o client.Object) []string {
	cc, ok := o.(*infrav1.ContainerCluster)
	if !ok {
		return nil
	}
	return engines.Listed(cc)
}
