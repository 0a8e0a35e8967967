package lifecycle

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/clock"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

const (
	// FieldOwner is the server-side apply field manager of what
	// Registration sets on Nodes: spec.providerID, nothing else. Each
	// component that applies to Nodes has its own manager, because an apply
	// asks to remove every field its manager owned and no longer lists:
	// shared with node IPAM, whose applies do not list the providerID, it
	// would ask to clear the providerID, which Node validation refuses.
	FieldOwner = "capct-registration"
	// nodePoll is how often a machine waiting on its Node looks again when
	// Node events do not wake it (Config.NodeRecheck).
	nodePoll = 5 * time.Second
)

// Registration finds the machine's Node in the workload cluster, by
// providerID or else by name (the kubelet's hostname is the container
// name), and sets spec.providerID on it when the kubelet did not.
type Registration struct {
	WorkloadClient WorkloadClientFunc
	// NodeRecheck is how soon a machine whose Node is not there looks
	// again (Config.NodeRecheck).
	NodeRecheck time.Duration
	Clock       clock.PassiveClock
}

// Reconcile implements Phase.
func (r *Registration) Reconcile(ctx context.Context, s *MachineScope) (ctrl.Result, error) {
	cm := s.ContainerMachine
	now := r.Clock.Now()
	// The kubelet registers the Node while the bootstrap data still runs
	// (a worker's at the end of kubeadm join, a control plane's as soon as
	// its API server answers), so the Node is looked for from the launch
	// on: the pod CIDRs, the CNI configuration and the taint's removal then
	// go on beside the end of the bootstrap, not after it.
	if s.Container == nil {
		if !conditions.IsTrue(cm, infrav1.RegisteredCondition) {
			setCondition(cm, now, infrav1.RegisteredCondition, metav1.ConditionFalse, infrav1.WaitingForLaunchReason, "Waiting for the container to run")
		}
		return ctrl.Result{}, nil
	}
	if c := conditions.Get(cm, infrav1.RegisteredCondition); c != nil && c.Status == metav1.ConditionFalse && terminalReasons[c.Reason] {
		return ctrl.Result{}, nil
	}
	if s.Warm() {
		// Nothing to look for: a warm machine joins no cluster until its
		// pool promotes it, which wakes it.
		setCondition(cm, now, infrav1.RegisteredCondition, metav1.ConditionFalse, infrav1.WarmReason,
			"Booted and kept warm: the machine joins the cluster when the pool promotes it")
		return ctrl.Result{}, nil
	}
	// A worker has nothing to register with before the control plane is up.
	// A control-plane machine is what brings it up, so it looks at once.
	if !s.IsControlPlane() && !conditions.IsTrue(s.Cluster, clusterv1.ClusterControlPlaneInitializedCondition) {
		setCondition(cm, now, infrav1.RegisteredCondition, metav1.ConditionFalse, infrav1.WaitingForControlPlaneReason, "Waiting for the control plane to be initialized")
		return ctrl.Result{RequeueAfter: nodePoll}, nil
	}
	workload, err := r.WorkloadClient(ctx, client.ObjectKeyFromObject(s.Cluster))
	if err != nil {
		// The workload API server is not reachable yet (or for a moment):
		// that is waiting, not failing. Liveness bounds how long it may last.
		if !conditions.IsTrue(cm, infrav1.RegisteredCondition) {
			setCondition(cm, now, infrav1.RegisteredCondition, metav1.ConditionFalse, infrav1.WaitingForControlPlaneReason,
				fmt.Sprintf("Cannot reach the workload cluster yet: %v", err))
		}
		return ctrl.Result{RequeueAfter: nodePoll}, nil
	}
	node, err := findNode(ctx, workload, s.ProviderID(), s.ContainerName())
	if err != nil {
		return ctrl.Result{}, err
	}
	if node == nil {
		switch {
		case conditions.IsTrue(cm, infrav1.RegisteredCondition):
		case !conditions.IsTrue(cm, infrav1.BootstrappedCondition):
			// Expected: the kubelet registers while kubeadm runs.
			setCondition(cm, now, infrav1.RegisteredCondition, metav1.ConditionFalse, infrav1.WaitingForBootstrapReason,
				fmt.Sprintf("Waiting for the kubelet to register Node %s while the bootstrap data runs", s.ContainerName()))
		default:
			setCondition(cm, now, infrav1.RegisteredCondition, metav1.ConditionFalse, infrav1.NodeNotFoundReason,
				fmt.Sprintf("No Node with providerID %s or name %s yet", s.ProviderID(), s.ContainerName()))
		}
		return ctrl.Result{RequeueAfter: nodeRecheck(r.NodeRecheck)}, nil
	}
	if node.Spec.ProviderID == "" {
		if node, err = applyProviderID(ctx, workload, node.Name, s.ProviderID()); err != nil {
			return ctrl.Result{}, err
		}
	}
	s.Node = node
	if !conditions.IsTrue(cm, infrav1.RegisteredCondition) {
		if elapsed, ok := since(cm, now, infrav1.LaunchedCondition); ok {
			registrationDuration.Observe(elapsed.Seconds())
		}
		setCondition(cm, now, infrav1.RegisteredCondition, metav1.ConditionTrue, infrav1.SucceededReason, "")
	}
	return ctrl.Result{}, nil
}

// findNode returns the Node with providerID, else the one named name whose
// providerID is empty or equal; nil when there is none.
func findNode(ctx context.Context, c client.Client, providerID, name string) (*corev1.Node, error) {
	node := &corev1.Node{}
	err := c.Get(ctx, client.ObjectKey{Name: name}, node)
	switch {
	case err == nil && (node.Spec.ProviderID == "" || node.Spec.ProviderID == providerID):
		return node, nil
	case err != nil && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("failed to get Node %s: %w", name, err)
	}
	// The kubelet may have registered under another name (a hostname
	// override); the providerID still identifies it.
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("failed to list Nodes: %w", err)
	}
	for i := range nodes.Items {
		if nodes.Items[i].Spec.ProviderID == providerID {
			return &nodes.Items[i], nil
		}
	}
	return nil, nil
}

// nodeRecheck is configured, or nodePoll.
func nodeRecheck(configured time.Duration) time.Duration {
	if configured > 0 {
		return configured
	}
	return nodePoll
}

// applyProviderID server-side applies the Node's spec.providerID as CAPCT,
// with client-go's apply configuration of a Node, which sends that one
// field: the Node is the kubelet's, and CAPCT owns only this field of it.
// It returns the Node as the server returned it: the later phases write
// with its resourceVersion, and the one read before is stale now.
func applyProviderID(ctx context.Context, workload client.Client, name, providerID string) (*corev1.Node, error) {
	applied := corev1ac.Node(name).WithSpec(corev1ac.NodeSpec().WithProviderID(providerID))
	if err := workload.Apply(ctx, applied, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return nil, fmt.Errorf("failed to set providerID on Node %s: %w", name, err)
	}
	fields, err := runtime.DefaultUnstructuredConverter.ToUnstructured(applied)
	if err != nil {
		return nil, fmt.Errorf("failed to read Node %s as applied: %w", name, err)
	}
	node := &corev1.Node{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(fields, node); err != nil {
		return nil, fmt.Errorf("failed to read Node %s as applied: %w", name, err)
	}
	return node, nil
}
