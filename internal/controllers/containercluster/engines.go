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
	"github.com/capct/cluster-api-provider-container/internal/policy"
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
		return r.reconcileLocalEngine(ctx, cc, now, provisioned)
	}
	found, err := r.checkEngines(ctx, cc)
	var notReady *enginesNotReady
	if err != nil && !errors.As(err, &notReady) {
		return ctrl.Result{}, true, err
	}
	var lostIn time.Duration
	cc.Status.FailureDomains, lostIn = engineFailureDomains(cc, found, now)
	if notReady == nil {
		conditions.Set(cc, metav1.Condition{
			Type: infrav1.EnginesReadyCondition, Status: metav1.ConditionTrue, Reason: infrav1.SucceededReason,
			LastTransitionTime: metav1.NewTime(now),
		})
		return ctrl.Result{}, false, nil
	}
	recheck := engineRecheck
	switch {
	case notReady.reason == infrav1.NotSupportedYetReason:
		// Only a change of the cluster's spec, which wakes it, helps.
		recheck = 0
	case lostIn > 0 && lostIn < recheck:
		// Drop the lost engine's failure domain on time.
		recheck = lostIn
	}
	res, _ := r.refused(cc, now, infrav1.EnginesReadyCondition, notReady.reason, notReady, recheck)
	return res, !provisioned, nil
}

// reconcileLocalEngine decides, for a cluster that lists no engines and so
// runs on the manager's own, whether the manager lets its namespace use that
// engine (Policy.LocalEngineNamespaces, engines.LocalAllowsNamespace). A
// refused cluster gets EnginesReady False and, before it is provisioned,
// stops, as one whose ContainerEngine refuses its namespace does; an
// allowed one carries no EnginesReady, as before the policy existed.
func (r *Reconciler) reconcileLocalEngine(ctx context.Context, cc *infrav1.ContainerCluster, now time.Time, provisioned bool) (_ ctrl.Result, stop bool, _ error) {
	if r.Policy.LocalEngineNamespaces == nil {
		conditions.Delete(cc, infrav1.EnginesReadyCondition)
		return ctrl.Result{}, false, nil
	}
	ns := &corev1.Namespace{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: cc.Namespace}, ns); err != nil {
		return ctrl.Result{}, true, fmt.Errorf("failed to get Namespace %s of ContainerCluster %s: %w", cc.Namespace, klog.KObj(cc), err)
	}
	allowed, err := engines.LocalAllowsNamespace(r.Policy.LocalEngineNamespaces, ns)
	if err == nil && allowed {
		conditions.Delete(cc, infrav1.EnginesReadyCondition)
		return ctrl.Result{}, false, nil
	}
	if err == nil {
		err = fmt.Errorf("the manager's own engine, which runs the clusters that list no spec.engines, does not allow namespace %s: "+
			"the manager's --%s must list it or its --%s select it, or the cluster must list a ContainerEngine that allows it",
			cc.Namespace, policy.FlagLocalEngineAllowedNamespaces, policy.FlagLocalEngineNamespaceSelector)
	}
	// engineRecheck: nothing wakes the cluster when its Namespace gains the
	// label the selector asks for.
	res, _ := r.refused(cc, now, infrav1.EnginesReadyCondition, infrav1.NamespaceNotAllowedReason, err, engineRecheck)
	return res, !provisioned, nil
}

// checkEngines reports whether the engines cc lists can run its machines:
// each exists, allows cc's namespace (engines.AllowsNamespace, asked again
// on every pass because an admin can narrow an engine after admission),
// and is reached; several engines must also share a swarm (checkSwarm).
// It returns the engines it found, and an *enginesNotReady for the first
// problem, an engine that does not answer last: the others' problems are
// what the user can fix, and with an engine away the cluster goes on, on
// the rest (EngineUnreachable lets machineprovider.PlaceMachine place new
// machines on the engines that answer). Other errors are the API's.
func (r *Reconciler) checkEngines(ctx context.Context, cc *infrav1.ContainerCluster) (map[string]*infrav1.ContainerEngine, error) {
	ns := &corev1.Namespace{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: cc.Namespace}, ns); err != nil {
		return nil, fmt.Errorf("failed to get Namespace %s of ContainerCluster %s: %w", cc.Namespace, klog.KObj(cc), err)
	}
	found := make(map[string]*infrav1.ContainerEngine, len(cc.Spec.Engines))
	var ordered []*infrav1.ContainerEngine
	var away *enginesNotReady
	for _, listed := range cc.Spec.Engines {
		engine := &infrav1.ContainerEngine{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: listed.Name}, engine); apierrors.IsNotFound(err) {
			return found, &enginesNotReady{infrav1.EngineNotFoundReason, fmt.Sprintf(
				"ContainerEngine %s does not exist: its admin must create it, or the cluster must name another", listed.Name)}
		} else if err != nil {
			return found, fmt.Errorf("failed to get ContainerEngine %s of ContainerCluster %s: %w", listed.Name, klog.KObj(cc), err)
		}
		found[listed.Name] = engine
		ordered = append(ordered, engine)
		if !engine.DeletionTimestamp.IsZero() {
			// It is kept until its clusters go, for their deletion only.
			return found, &enginesNotReady{infrav1.EngineNotFoundReason, fmt.Sprintf(
				"ContainerEngine %s is being deleted: it runs nothing new, and goes once no cluster lists it", listed.Name)}
		}
		if allowed, err := engines.AllowsNamespace(engine, ns); err != nil || !allowed {
			message := fmt.Sprintf("ContainerEngine %s does not allow namespace %s: its admin must list the namespace, or select it by label, in the engine's spec.allowedNamespaces", listed.Name, cc.Namespace)
			if err != nil {
				message = err.Error()
			}
			return found, &enginesNotReady{infrav1.NamespaceNotAllowedReason, message}
		}
		available := conditions.Get(engine, infrav1.EngineAvailableCondition)
		switch {
		case available == nil:
			if away == nil {
				away = &enginesNotReady{infrav1.EngineUnreachableReason, fmt.Sprintf("ContainerEngine %s has not been reached yet", listed.Name)}
			}
		case available.Status == metav1.ConditionTrue:
		case available.Reason == infrav1.EngineUnreachableReason:
			if away == nil {
				away = &enginesNotReady{infrav1.EngineUnreachableReason, fmt.Sprintf(
					"ContainerEngine %s does not answer: %s; new machines go to the cluster's other engines", listed.Name, available.Message)}
			}
		default:
			return found, &enginesNotReady{available.Reason, fmt.Sprintf("ContainerEngine %s: %s", listed.Name, available.Message)}
		}
	}
	if away != nil {
		return found, away
	}
	if len(ordered) > 1 {
		return found, checkSwarm(cc, ordered)
	}
	return found, nil
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
// unless the entry says otherwise. An engine that has not answered for
// engines.LostAfter is left out, so that KubeadmControlPlane does not put
// machines on a lost host; a shorter silence leaves the list as it is, so
// that it does not flap with every lost packet. lostIn is how soon an
// engine that does not answer now will be left out (0: none). found holds
// the engines checkEngines found; one it did not get to stays listed.
func engineFailureDomains(cc *infrav1.ContainerCluster, found map[string]*infrav1.ContainerEngine, now time.Time) (domains []clusterv1.FailureDomain, lostIn time.Duration) {
	domains = make([]clusterv1.FailureDomain, 0, len(cc.Spec.Engines))
	for _, e := range cc.Spec.Engines {
		if engine := found[e.Name]; engine != nil {
			if lost := engines.LostFor(engine, now); lost >= engines.LostAfter {
				continue
			} else if lost > 0 && (lostIn == 0 || engines.LostAfter-lost < lostIn) {
				lostIn = engines.LostAfter - lost
			}
		}
		domains = append(domains, clusterv1.FailureDomain{
			Name:         e.Name,
			ControlPlane: ptr.To(ptr.Deref(e.ControlPlane, true)),
			Attributes:   map[string]string{"type": engineFailureDomainType},
		})
	}
	return domains, lostIn
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
