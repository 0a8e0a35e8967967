package containercluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/lifecycle"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

// reconcileDelete removes the load balancer, then the network (unless it is
// Unmanaged) once no machine of the cluster remains, then the finalizer.
//
// A ContainerEngine that does not answer is waited for until
// UnreachableEngineDeletionTimeout from the start of the deletion, as a
// machine's deletion waits for it (lifecycle.Termination); then what the
// cluster has there (containers, and on its first engine the load balancer
// and network) is abandoned, and an event and the log say what. Otherwise
// an engine lost for good would hold the cluster's deletion forever, and
// with it the ContainerEngine's own, which waits for the clusters that list
// it. The manager's own engine is always waited for, as by Termination.
func (r *Reconciler) reconcileDelete(ctx context.Context, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) (ctrl.Result, error) {
	now := r.Clock.Now()
	setLoadBalancerCondition(cc, now, metav1.ConditionFalse, infrav1.DeletingReason, "Deleting the load balancer")
	owner := naming.ClusterOwner(cluster, cc)
	if !owner.Valid() {
		// Deleted before CAPCT ever recorded an ID: it made nothing.
		controllerutil.RemoveFinalizer(cc, infrav1.ClusterFinalizer)
		return ctrl.Result{}, nil
	}
	left := r.lostEngineTimeLeft(cc, now)
	first := r.Engines.ForCluster(cc)[0]
	var abandoned []string
	if err := r.lb.Delete(ctx, cluster, cc); err != nil {
		if !abandons(err, first, left) {
			return ctrl.Result{}, err
		}
		abandoned = append(abandoned, fmt.Sprintf("load balancer %s on engine %q", naming.LoadBalancerName(cluster.Namespace, cluster.Name), first))
	}
	// The containers of machines whose deletion gave up on an engine that
	// did not answer, now that it may.
	if err := r.removeOrphans(ctx, cluster, cc, now); err != nil {
		return ctrl.Result{}, err
	}
	remaining, away, err := engines.ListReachable(ctx, r.Engines, cc, owner, nil)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to list the containers of Cluster %s: %w", klog.KObj(cluster), err)
	}
	if slices.Contains(away, engines.Local) {
		return ctrl.Result{}, container.NewError("list", "containers of Cluster", klog.KObj(cluster).String(), container.KindUnreachable,
			errors.New("the manager's own engine does not answer"))
	}
	if len(remaining) > 0 {
		setLoadBalancerCondition(cc, now, metav1.ConditionFalse, infrav1.DeletingReason,
			fmt.Sprintf("Waiting for %d containers of the cluster to be deleted", len(remaining)))
		return ctrl.Result{RequeueAfter: deletionPoll}, nil
	}
	if len(away) > 0 {
		if left > 0 {
			setLoadBalancerCondition(cc, now, metav1.ConditionFalse, infrav1.DeletingReason, fmt.Sprintf(
				"Waiting for engines %s, which do not answer, to show the cluster's containers; abandoning what is there in %s",
				quoted(away), left.Round(time.Second)))
			return ctrl.Result{RequeueAfter: min(left, engineRetry)}, nil
		}
		abandoned = append(abandoned, "any container of the cluster on engines "+quoted(away))
	}
	// An Unmanaged network belongs to someone else and outlives the cluster;
	// the runtime refuses to delete a Managed one that CAPCT did not create
	// for this very cluster.
	if cc.Spec.Network.Mode != infrav1.NetworkUnmanaged {
		network := naming.NetworkName(cluster, cc)
		rt, err := r.Engines.Get(first)
		if err == nil {
			err = rt.DeleteNetwork(ctx, network, owner)
		}
		if container.IsConflict(err) {
			// A network of that name that this cluster does not own (it
			// never adopted it, since EnsureNetwork refuses the same way)
			// stays, and does not hold up the deletion.
			r.recorder.Eventf(cc, corev1.EventTypeWarning, "NetworkNotOwned", "Left network %s in place: %v", network, err)
			err = nil
		}
		if abandons(err, first, left) {
			abandoned = append(abandoned, fmt.Sprintf("network %s on engine %q", network, first))
			err = nil
		}
		if err != nil && !container.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("failed to delete network %s of ContainerCluster %s: %w", network, klog.KObj(cc), err)
		}
	}
	if len(abandoned) > 0 {
		msg := fmt.Sprintf("Deleted the cluster without removing %s: the engines did not answer within %s of the deletion's start; "+
			"if they come back, remove what carries the label %s=%s there by hand",
			strings.Join(abandoned, ", "), r.lostEngineTimeout(), container.LabelClusterID, owner.ClusterID)
		r.recorder.Event(cc, corev1.EventTypeWarning, infrav1.EngineUnreachableReason, msg)
		ctrl.LoggerFrom(ctx).Info(msg)
	}
	if r.PodNetwork != nil {
		r.PodNetwork.ForgetCluster(cluster)
	}
	if r.NodeIPAM != nil {
		r.NodeIPAM.ForgetCluster(cluster)
	}
	controllerutil.RemoveFinalizer(cc, infrav1.ClusterFinalizer)
	return ctrl.Result{}, nil
}

// lostEngineTimeout is UnreachableEngineDeletionTimeout or its default.
func (r *Reconciler) lostEngineTimeout() time.Duration {
	if r.UnreachableEngineDeletionTimeout > 0 {
		return r.UnreachableEngineDeletionTimeout
	}
	return lifecycle.DefaultUnreachableEngineDeletionTimeout
}

// lostEngineTimeLeft is how long cc's deletion still waits, at now, for an
// engine that does not answer.
func (r *Reconciler) lostEngineTimeLeft(cc *infrav1.ContainerCluster, now time.Time) time.Duration {
	return cc.DeletionTimestamp.Add(r.lostEngineTimeout()).Sub(now)
}

// abandons reports whether the deletion goes on without what err, from
// engine, kept it from removing: engine is a ContainerEngine that does not
// answer, and the deletion has waited for it long enough (left).
func abandons(err error, engine string, left time.Duration) bool {
	return container.IsUnreachable(err) && engine != engines.Local && left <= 0
}

// quoted lists engine names for a message.
func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
