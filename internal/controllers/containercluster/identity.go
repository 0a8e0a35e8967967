package containercluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/clusters"
)

// isClusterInfrastructure reports whether cluster names cc in its
// spec.infrastructureRef.
func isClusterInfrastructure(cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) bool {
	name, ok := clusters.InfrastructureName(cluster)
	return ok && name == cc.Name
}

// ensureClusterInfrastructure lets the reconcile of cc go on only when cc is
// its Cluster's infrastructure; it returns true when the reconcile must stop.
//
// A cluster's containers, network and load balancer are known by an identity
// derived from the Cluster, so any ContainerCluster owned by the Cluster
// would reach them: a second one would rewrite the load balancer and, when
// deleted, delete it. Only the one the Cluster names in
// spec.infrastructureRef is acted on. Another one gets Ready False,
// NotClusterInfrastructure, loses CAPCT's finalizer and is never acted on,
// so deleting it touches nothing on the engine.
//
// While the Cluster names no infrastructure yet, cc waits: ClusterClass's
// topology controller creates the ContainerCluster, owned by the Cluster,
// and names it a moment later, which the Cluster watch brings back here.
// Cluster API refuses to unset the reference once set, so a ContainerCluster
// deleted while it is unset was never acted on either. clusterctl move keeps
// the reference and the name, and the Cluster is paused until the move ends.
func (r *Reconciler) ensureClusterInfrastructure(ctx context.Context, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) (stop bool, err error) {
	if isClusterInfrastructure(cluster, cc) {
		return false, nil
	}
	ref := cluster.Spec.InfrastructureRef
	if !ref.IsDefined() && cc.DeletionTimestamp.IsZero() {
		return true, nil
	}
	helper, err := patch.NewHelper(cc, r.Client)
	if err != nil {
		return true, fmt.Errorf("failed to create a patch helper for ContainerCluster %s: %w", klog.KObj(cc), err)
	}
	named := "no infrastructure"
	if ref.IsDefined() {
		named = fmt.Sprintf("%s %s", ref.Kind, ref.Name)
	}
	message := fmt.Sprintf("Cluster %s names %s in spec.infrastructureRef, not this ContainerCluster: CAPCT does not act on it, and deleting it leaves the cluster's containers, network and load balancer alone",
		klog.KObj(cluster), named)
	if c := conditions.Get(cc, infrav1.ReadyCondition); c == nil || c.Reason != infrav1.NotClusterInfrastructureReason || c.Message != message {
		r.recorder.Event(cc, corev1.EventTypeWarning, infrav1.NotClusterInfrastructureReason, message)
	}
	conditions.Set(cc, metav1.Condition{
		Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.NotClusterInfrastructureReason,
		Message: message, LastTransitionTime: metav1.NewTime(r.Clock.Now()),
	})
	controllerutil.RemoveFinalizer(cc, infrav1.ClusterFinalizer)
	if err := helper.Patch(ctx, cc, patch.WithOwnedConditions{Conditions: []string{infrav1.ReadyCondition}}); err != nil {
		return true, fmt.Errorf("failed to patch ContainerCluster %s, which is not the infrastructure of Cluster %s: %w",
			klog.KObj(cc), klog.KObj(cluster), err)
	}
	return true, nil
}
