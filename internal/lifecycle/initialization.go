package lifecycle

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/nodeipam"
)

// UninitializedTaint is the taint a kubelet started with an external cloud
// provider puts on its Node until a cloud controller initialises it. CAPCT
// is that controller for its machines.
const UninitializedTaint = "node.cloudprovider.kubernetes.io/uninitialized"

// maxPodCIDRRetry bounds the backoff of a machine waiting for a free pod
// CIDR.
const maxPodCIDRRetry = 5 * time.Minute

// Initialization makes a registered Node usable: it assigns the Node's pod
// CIDRs (node IPAM), gives the Node the machine's addresses and removes the
// uninitialized taint, and waits for the Node to be Ready.
type Initialization struct {
	WorkloadClient WorkloadClientFunc
	// NodeIPAM decides and records node pod CIDRs; nil when node IPAM is
	// off.
	NodeIPAM *nodeipam.Recorder
	// PodNetwork writes the node's CNI configuration as soon as its pod
	// CIDRs are assigned; nil leaves it to the ContainerCluster
	// controller's pod network sync alone.
	PodNetwork NodeNetwork
	// NodeRecheck is how soon a machine whose Node is not Ready looks again
	// (Config.NodeRecheck).
	NodeRecheck time.Duration
	Clock       clock.PassiveClock
	Recorder    record.EventRecorder
}

// Reconcile implements Phase.
func (i *Initialization) Reconcile(ctx context.Context, s *MachineScope) (ctrl.Result, error) {
	cm := s.ContainerMachine
	now := i.Clock.Now()
	if conditions.IsTrue(cm, infrav1.InitializedCondition) {
		return ctrl.Result{}, nil
	}
	if c := conditions.Get(cm, infrav1.InitializedCondition); c != nil && c.Status == metav1.ConditionFalse && terminalReasons[c.Reason] {
		return ctrl.Result{}, nil
	}
	if s.Node == nil {
		setCondition(cm, now, infrav1.InitializedCondition, metav1.ConditionFalse, infrav1.WaitingForRegistrationReason, "Waiting for the Node to register")
		return ctrl.Result{}, nil
	}
	workload, err := i.WorkloadClient(ctx, client.ObjectKeyFromObject(s.Cluster))
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to reach the workload cluster of Cluster %s: %w", client.ObjectKeyFromObject(s.Cluster), err)
	}

	if i.NodeIPAM != nil {
		done, err := i.assignPodCIDRs(ctx, s, workload)
		if err != nil || !done {
			setCondition(cm, now, infrav1.InitializedCondition, metav1.ConditionFalse, infrav1.InProgressReason, "Waiting for the Node's pod CIDRs")
			return ctrl.Result{RequeueAfter: podCIDRRetry(cm, now)}, err
		}
	}
	if err := i.removeUninitializedTaint(ctx, workload, s); err != nil {
		return ctrl.Result{}, err
	}
	if !isNodeReady(s.Node) {
		setCondition(cm, now, infrav1.InitializedCondition, metav1.ConditionFalse, infrav1.NodeNotReadyReason, fmt.Sprintf("Node %s is not Ready", s.Node.Name))
		return ctrl.Result{RequeueAfter: nodeRecheck(i.NodeRecheck)}, nil
	}
	if elapsed, ok := since(cm, now, infrav1.RegisteredCondition); ok {
		initializationDuration.Observe(elapsed.Seconds())
	}
	setCondition(cm, now, infrav1.InitializedCondition, metav1.ConditionTrue, infrav1.SucceededReason, "")
	return ctrl.Result{}, nil
}

// NodeNetwork writes one node container's CNI configuration
// (podnetwork.Syncer.ConfigureNode).
type NodeNetwork interface {
	ConfigureNode(ctx context.Context, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster, rt container.Runtime, name string, owner container.Owner, cidrs []netip.Prefix) error
}

// assignPodCIDRs asks node IPAM for the machine's pod CIDRs, sets them on
// the Node and writes the node's CNI configuration for them. The
// PodCIDRAllocated condition, status.podCIDRs and the events are this
// phase's; node IPAM has written only its record. A machine that has to
// wait (exhaustion, a conflict) returns done=false without an error, so
// that it polls instead of backing off on an error. The routes to the
// node follow from the record, through the ContainerCluster controller's
// pod network sync, which also writes the CNI configuration of a node
// whose write here failed.
func (i *Initialization) assignPodCIDRs(ctx context.Context, s *MachineScope, workload client.Client) (done bool, err error) {
	cm := s.ContainerMachine
	// Decided and applied on an earlier pass: the phase polls until the Node
	// is Ready, and a decision would list the cluster's machines again for
	// the same answer (2.3 lists per machine in make bench-scale, whose bytes
	// grow with the square of the cluster). A record that another one
	// overlaps is caught when that one is decided.
	if conditions.IsTrue(cm, infrav1.PodCIDRAllocatedCondition) && nodeipam.NodeHoldsRecord(s.Node, cm) {
		return true, nil
	}
	d, err := i.NodeIPAM.Allocate(ctx, nodeipam.Request{
		Cluster: s.Cluster, ContainerCluster: s.ContainerCluster, ContainerMachine: cm, Node: s.Node, Workload: workload,
	})
	if err != nil {
		return false, err
	}
	for _, b := range d.BadRecords {
		var target client.Object = cm
		if other, ok := b.Object.(*infrav1.ContainerMachine); ok {
			target = other
		}
		i.Recorder.Eventf(target, corev1.EventTypeWarning, nodeipam.EventBadRecord, "Bad pod CIDR record of %s: %v", b.Owner, b.Err)
	}
	// The PodCIDRAllocated condition says what was decided; only what a
	// person may act on is an event too.
	if d.Event != nil && d.Event.Type == corev1.EventTypeWarning {
		i.Recorder.Event(cm, d.Event.Type, d.Event.Reason, d.Event.Message)
	}
	now := i.Clock.Now()
	switch {
	case d.Reason == infrav1.DisabledReason:
		setCondition(cm, now, infrav1.PodCIDRAllocatedCondition, metav1.ConditionFalse, d.Reason, d.Message)
		return true, nil
	case !d.Done():
		// One event when the machine starts waiting for this reason, not
		// one per poll.
		if conditions.GetReason(cm, infrav1.PodCIDRAllocatedCondition) != d.Reason {
			i.Recorder.Event(cm, corev1.EventTypeWarning, d.Reason, d.Message)
		}
		setCondition(cm, now, infrav1.PodCIDRAllocatedCondition, metav1.ConditionFalse, d.Reason, d.Message)
		return false, nil
	}
	node, err := i.NodeIPAM.AssignNode(ctx, s.Cluster, workload, s.Node, d.CIDRs)
	if err != nil {
		return false, err
	}
	s.Node = node
	if err := i.configureNode(ctx, s, d.CIDRs); err != nil {
		// PodCIDRAllocated stays False, so the next pass writes it again.
		return false, err
	}
	cm.Status.PodCIDRs = nodeipam.CIDRStrings(d.CIDRs)
	setCondition(cm, now, infrav1.PodCIDRAllocatedCondition, metav1.ConditionTrue, d.Reason, d.Message)
	return true, nil
}

// configureNode writes the node container's CNI configuration for cidrs,
// without waiting for the cluster's pod network sync: the kubelet reports
// the Node Ready once it is there.
func (i *Initialization) configureNode(ctx context.Context, s *MachineScope, cidrs []netip.Prefix) error {
	if i.PodNetwork == nil || s.Container == nil || s.Runtime == nil {
		return nil
	}
	if err := i.PodNetwork.ConfigureNode(ctx, s.Cluster, s.ContainerCluster, s.Runtime, s.Container.Name, s.Owner(), cidrs); err != nil {
		return fmt.Errorf("failed to configure the pod network of ContainerMachine %s: %w", klog.KObj(s.ContainerMachine), err)
	}
	return nil
}

// removeUninitializedTaint gives the Node the machine's InternalIPs when the
// kubelet left them out (as it does under an external cloud provider), then
// removes the taint, so that nothing is scheduled on a Node without
// addresses. The taint belongs to the kubelet's field manager, and
// server-side apply cannot remove another manager's list item (kubernetes
// PR#128866), so these writes are patches with an optimistic lock instead.
func (i *Initialization) removeUninitializedTaint(ctx context.Context, workload client.Client, s *MachineScope) error {
	node := s.Node
	taints := make([]corev1.Taint, 0, len(node.Spec.Taints))
	for _, t := range node.Spec.Taints {
		if t.Key != UninitializedTaint {
			taints = append(taints, t)
		}
	}
	if len(taints) == len(node.Spec.Taints) {
		return nil
	}
	if !hasInternalIP(node) && s.Container != nil {
		before := node.DeepCopy()
		for _, a := range Addresses(s.Container) {
			node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeAddressType(a.Type), Address: a.Address})
		}
		if err := workload.Status().Patch(ctx, node, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("failed to set the addresses of Node %s: %w", node.Name, err)
		}
	}
	before := node.DeepCopy()
	node.Spec.Taints = taints
	if err := workload.Patch(ctx, node, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("failed to remove taint %s from Node %s: %w", UninitializedTaint, node.Name, err)
	}
	return nil
}

// podCIDRRetry backs off while the cluster's pod network is exhausted: a
// CIDR frees up only when a node goes, so asking every few seconds would
// only load the API server. The wait doubles with each retry, counted from
// the condition's transition, up to maxPodCIDRRetry.
func podCIDRRetry(cm *infrav1.ContainerMachine, now time.Time) time.Duration {
	if conditions.GetReason(cm, infrav1.PodCIDRAllocatedCondition) != infrav1.ExhaustedReason {
		return nodePoll
	}
	elapsed, _ := since(cm, now, infrav1.PodCIDRAllocatedCondition)
	return min(max(elapsed, nodePoll), maxPodCIDRRetry)
}

func hasInternalIP(n *corev1.Node) bool {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return true
		}
	}
	return false
}

func isNodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
