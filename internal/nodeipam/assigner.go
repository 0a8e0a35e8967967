package nodeipam

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/ipam"
	"github.com/capct/cluster-api-provider-container/internal/lifecycle"
	"github.com/capct/cluster-api-provider-container/internal/ssa"
)

// FieldOwner is the server-side apply field manager of Node.spec.podCIDR
// and spec.podCIDRs, and of nothing else: see lifecycle.FieldOwner for why
// the two never share one.
const FieldOwner = "capct-nodeipam"

// Event reasons.
const (
	eventAllocated = "PodCIDRsAllocated"
	eventAdopted   = "PodCIDRsAdopted"
	eventBadRecord = "PodCIDRBadRecord"
)

// Assigner is CAPCT's node IPAM: it implements lifecycle.PodCIDRAssigner.
// It is safe for concurrent use; one Assigner serves every cluster.
type Assigner struct {
	client   client.Client
	reader   client.Reader
	runtime  container.Runtime
	clock    clock.PassiveClock
	recorder record.EventRecorder

	mu       sync.Mutex
	clusters map[types.UID]*clusterState
}

var _ lifecycle.PodCIDRAssigner = (*Assigner)(nil)

// clusterState serialises one cluster's allocations and route syncs, and
// remembers what was already reported so events are not repeated.
type clusterState struct {
	// alloc is held around rebuild, allocate and the annotation write, so
	// two machines of the cluster never get the same CIDR.
	alloc sync.Mutex
	// routes is held around a route sync, so that a sync computed from an
	// older list cannot remove a route a newer sync just added.
	routes sync.Mutex

	mu sync.Mutex
	// reported holds bad-record messages already emitted as events.
	reported map[string]bool
	// failing maps a machine to the failure reason already emitted.
	failing map[string]string
}

// New returns an Assigner.
//
//   - c writes the management cluster (the ContainerMachine annotation).
//   - reader lists ContainerMachines for the rebuild. It must read the API
//     server directly, not an informer cache (use mgr.GetAPIReader()): a
//     cache that has not yet seen the annotation just written for another
//     machine would let the same CIDR be handed out twice.
//   - rt reaches the node containers (CNI config and routes).
//   - clk stamps conditions; rec emits events on ContainerMachines.
func New(c client.Client, reader client.Reader, rt container.Runtime, clk clock.PassiveClock, rec record.EventRecorder) *Assigner {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Assigner{client: c, reader: reader, runtime: rt, clock: clk, recorder: rec, clusters: map[types.UID]*clusterState{}}
}

func (a *Assigner) state(cluster *clusterv1.Cluster) *clusterState {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, ok := a.clusters[cluster.UID]
	if !ok {
		st = &clusterState{reported: map[string]bool{}, failing: map[string]string{}}
		a.clusters[cluster.UID] = st
	}
	return st
}

// ForgetCluster drops what the Assigner keeps about a deleted cluster: its
// locks, its de-duplicated reports and its metric series.
func (a *Assigner) ForgetCluster(cluster *clusterv1.Cluster) {
	a.mu.Lock()
	delete(a.clusters, cluster.UID)
	a.mu.Unlock()
	forgetUsage(cluster)
}

// AssignPodCIDRs implements lifecycle.PodCIDRAssigner. It allocates the
// machine's pod CIDRs (or keeps the recorded ones), persists them in the
// ContainerMachine's annotation, sets them on the Node, writes the node's
// CNI config and syncs the cluster's routes. It returns done=false without
// an error while the machine waits for something only a human or another
// machine's deletion can change (exhaustion, a conflict), so the caller
// polls.
func (a *Assigner) AssignPodCIDRs(ctx context.Context, s *lifecycle.MachineScope, workload client.Client) (bool, error) {
	cm := s.ContainerMachine
	cfg, enabled, why, err := ClusterConfig(s.Cluster, s.ContainerCluster)
	if err == nil && enabled {
		_, err = ipam.New(cfg)
	}
	if err != nil {
		a.fail(s, infrav1.InvalidSpecReason, fmt.Sprintf("The pod network of Cluster %s cannot be divided into node CIDRs: %v", klog.KObj(s.Cluster), err))
		return false, nil
	}
	if !enabled {
		a.setCondition(cm, metav1.ConditionFalse, infrav1.DisabledReason, why)
		return true, nil
	}
	if s.Node == nil {
		return false, nil
	}
	cidrs, ok, err := a.allocate(ctx, s, workload, cfg)
	if err != nil || !ok {
		return false, err
	}
	if err := a.assignNode(ctx, s, workload, cidrs); err != nil {
		allocationFailures.WithLabelValues(infrav1.FailedReason).Inc()
		return false, err
	}
	if err := a.writeCNIConfig(ctx, s.ContainerName(), s.Owner(), cidrs); err != nil {
		return false, err
	}
	if err := a.syncRoutes(ctx, s.Cluster, s.Owner().ClusterOwner(), cfg, s.ContainerName()); err != nil {
		return false, err
	}
	return true, nil
}

// allocate returns the machine's CIDRs once they are persisted in its
// annotation. ok is false, with the condition set, when the machine has to
// wait.
func (a *Assigner) allocate(ctx context.Context, s *lifecycle.MachineScope, workload client.Client, cfg ipam.Config) (_ []netip.Prefix, ok bool, _ error) {
	cm := s.ContainerMachine
	log := ctrl.LoggerFrom(ctx)
	st := a.state(s.Cluster)
	st.alloc.Lock()
	defer st.alloc.Unlock()

	machines := &infrav1.ContainerMachineList{}
	if err := a.reader.List(ctx, machines, client.InNamespace(s.Cluster.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: s.Cluster.Name}); err != nil {
		return nil, false, fmt.Errorf("failed to list the ContainerMachines of Cluster %s: %w", klog.KObj(s.Cluster), err)
	}
	nodes := &corev1.NodeList{}
	if err := workload.List(ctx, nodes); err != nil {
		return nil, false, fmt.Errorf("failed to list the Nodes of Cluster %s: %w", klog.KObj(s.Cluster), err)
	}
	live := cm
	found := false
	for i := range machines.Items {
		if machines.Items[i].Namespace == cm.Namespace && machines.Items[i].Name == cm.Name {
			live, found = &machines.Items[i], true
		}
	}
	if !found {
		machines.Items = append(machines.Items, *cm.DeepCopy())
	}
	// The scope's Node is the one the decisions below are about; make the
	// rebuild see the same one.
	for i := range nodes.Items {
		if nodes.Items[i].Name == s.Node.Name {
			nodes.Items[i] = *s.Node.DeepCopy()
		}
	}

	alloc, bad, err := Rebuild(cfg, machines.Items, nodes.Items)
	if err != nil {
		return nil, false, fmt.Errorf("failed to rebuild the pod CIDR allocator of Cluster %s: %w", klog.KObj(s.Cluster), err)
	}
	a.reportBadRecords(ctx, st, s, bad)
	recordUsage(s.Cluster, alloc.Usage())

	own := machineOwner(cm)
	recorded, _ := ParsePodCIDRs(live.Annotations[infrav1.PodCIDRsAnnotation])
	held, _ := alloc.Get(own)
	nodeRaw := nodePodCIDRs(s.Node)
	onNode, nodeErrs := ParsePodCIDRs(strings.Join(nodeRaw, ","))

	var cidrs []netip.Prefix
	switch {
	case len(nodeRaw) > 0 && len(nodeErrs) == 0 && sameSet(onNode, recorded):
		// The Node already holds exactly ours.
		if !covers(held, recorded) {
			a.fail(s, infrav1.PodCIDRConflictReason, fmt.Sprintf("Pod CIDRs %s of ContainerMachine %s and Node %s overlap another record: %s",
				FormatPodCIDRs(recorded), klog.KObj(cm), s.Node.Name, recordErrors(bad, own)))
			return nil, false, nil
		}
		cidrs = recorded
	case len(nodeRaw) > 0:
		// Node.spec.podCIDRs is immutable: never fight it. Adopt the
		// Node's CIDRs when they are valid and nobody else holds them.
		nodeHeld, _ := alloc.Get(nodeOwner(s.Node))
		if len(nodeErrs) > 0 || !covers(nodeHeld, onNode) {
			a.fail(s, infrav1.PodCIDRConflictReason, fmt.Sprintf("Node %s already holds pod CIDRs %s, not %s recorded on ContainerMachine %s, and they cannot be adopted: %s",
				s.Node.Name, strings.Join(nodeRaw, ","), orNone(recorded), klog.KObj(cm), errors.Join(append(nodeErrs, recordErrors(bad, nodeOwner(s.Node)))...)))
			return nil, false, nil
		}
		cidrs = onNode
		if len(recorded) > 0 {
			a.recorder.Eventf(cm, corev1.EventTypeWarning, infrav1.PodCIDRConflictReason,
				"Node %s already holds pod CIDRs %s, not the allocated %s; adopting the Node's and releasing %s",
				s.Node.Name, FormatPodCIDRs(onNode), FormatPodCIDRs(recorded), FormatPodCIDRs(recorded))
		} else {
			a.recorder.Eventf(cm, corev1.EventTypeNormal, eventAdopted, "Adopted pod CIDRs %s already set on Node %s", FormatPodCIDRs(onNode), s.Node.Name)
		}
	case len(recorded) > 0 && !covers(held, recorded):
		a.fail(s, infrav1.PodCIDRConflictReason, fmt.Sprintf("Pod CIDRs %s recorded on ContainerMachine %s cannot be kept: %s",
			FormatPodCIDRs(recorded), klog.KObj(cm), recordErrors(bad, own)))
		return nil, false, nil
	default:
		// Allocate keeps what the machine holds and adds any missing
		// family (a cluster that became dual stack).
		cidrs, err = alloc.Allocate(own)
		if errors.Is(err, ipam.ErrExhausted) {
			a.fail(s, infrav1.ExhaustedReason, fmt.Sprintf("No free pod CIDR for ContainerMachine %s: %v", klog.KObj(cm), err))
			return nil, false, nil
		}
		if err != nil {
			allocationFailures.WithLabelValues(infrav1.FailedReason).Inc()
			return nil, false, fmt.Errorf("failed to allocate pod CIDRs for ContainerMachine %s: %w", klog.KObj(cm), err)
		}
		recordUsage(s.Cluster, alloc.Usage())
	}

	value := FormatPodCIDRs(cidrs)
	if live.Annotations[infrav1.PodCIDRsAnnotation] != value {
		// Persist before anything outside CAPCT sees the CIDRs: a crash
		// after this point finds them in the rebuild, a crash before it
		// has handed nothing out. The providerID goes with them (the
		// controller's patch helper writes it only when the reconcile
		// ends): a rebuild matches a Node to its machine's record by
		// providerID, and would otherwise count the Node's CIDRs as a
		// second claim and report a conflict.
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, infrav1.PodCIDRsAnnotation, value)
		if cm.Spec.ProviderID != "" {
			patch = fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}},"spec":{"providerID":%q}}`,
				infrav1.PodCIDRsAnnotation, value, cm.Spec.ProviderID)
		}
		if err := a.client.Patch(ctx, cm.DeepCopy(), client.RawPatch(types.MergePatchType, patch)); err != nil {
			return nil, false, fmt.Errorf("failed to record pod CIDRs %s on ContainerMachine %s: %w", value, klog.KObj(cm), err)
		}
		log.Info("Recorded pod CIDRs", "PodCIDRs", value, "Previous", live.Annotations[infrav1.PodCIDRsAnnotation])
		if len(recorded) == 0 && len(nodeRaw) == 0 {
			a.recorder.Eventf(cm, corev1.EventTypeNormal, eventAllocated, "Allocated pod CIDRs %s", value)
		}
	}
	// The annotation is written above and only there: setting it on cm as
	// well would make the controller's patch helper send it a second time.
	cm.Status.PodCIDRs = cidrStrings(cidrs)
	a.succeed(s, fmt.Sprintf("Pod CIDRs %s", value))
	return cidrs, true, nil
}

// assignNode sets the Node's pod CIDRs unless it already has them. The
// apply carries the Node's resourceVersion so that it can never create a
// Node that was deleted meanwhile; a conflict is retried by the caller.
func (a *Assigner) assignNode(ctx context.Context, s *lifecycle.MachineScope, workload client.Client, cidrs []netip.Prefix) error {
	want := cidrStrings(cidrs)
	if slices.Equal(s.Node.Spec.PodCIDRs, want) && s.Node.Spec.PodCIDR == want[0] {
		return nil
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.Node.Name, ResourceVersion: s.Node.ResourceVersion}}
	n.Spec.PodCIDR = want[0]
	n.Spec.PodCIDRs = want
	if err := ssa.Apply(ctx, workload, FieldOwner, n, ssa.WithOptimisticLock()); err != nil {
		return fmt.Errorf("failed to set pod CIDRs %s on Node %s: %w", strings.Join(want, ","), s.Node.Name, err)
	}
	*s.Node = *n
	ctrl.LoggerFrom(ctx).Info("Assigned pod CIDRs to the Node", "Node", klog.KObj(n), "PodCIDRs", strings.Join(want, ","))
	return nil
}

// writeCNIConfig writes the node's CNI config unless it already has it.
func (a *Assigner) writeCNIConfig(ctx context.Context, name string, owner container.Owner, cidrs []netip.Prefix) error {
	want, err := CNIConfig(cidrs)
	if err != nil {
		return err
	}
	have, err := a.runtime.ReadFile(ctx, name, CNIConfigPath)
	switch {
	case err == nil && bytes.Equal(have, want):
		return nil
	case err != nil && !container.IsNotFound(err):
		return fmt.Errorf("failed to read %s in container %s: %w", CNIConfigPath, name, err)
	}
	if err := a.runtime.WriteFile(ctx, name, owner, CNIConfigPath, want, 0o644); err != nil {
		return fmt.Errorf("failed to write %s in container %s: %w", CNIConfigPath, name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Wrote the node's CNI config", "Container", name, "Path", CNIConfigPath)
	return nil
}

func covers(held, want []netip.Prefix) bool {
	for _, p := range want {
		if !slices.Contains(held, p) {
			return false
		}
	}
	return true
}

func orNone(cidrs []netip.Prefix) string {
	if len(cidrs) == 0 {
		return "none"
	}
	return FormatPodCIDRs(cidrs)
}

func recordErrors(bad []*RecordError, owner string) error {
	var errs []error
	for _, b := range bad {
		if b.Owner == owner {
			errs = append(errs, b.Err)
		}
	}
	if len(errs) == 0 {
		return errors.New("no usable record")
	}
	return errors.Join(errs...)
}

// reportBadRecords emits one event per bad record, on its ContainerMachine
// (or, for a Node's record, on the machine being reconciled), the first
// time it is seen.
func (a *Assigner) reportBadRecords(ctx context.Context, st *clusterState, s *lifecycle.MachineScope, bad []*RecordError) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, b := range bad {
		msg := b.Err.Error()
		if st.reported[msg] {
			continue
		}
		st.reported[msg] = true
		ctrl.LoggerFrom(ctx).Info("Ignoring a bad pod CIDR record", "Owner", b.Owner, "Reason", msg)
		var target client.Object = s.ContainerMachine
		if cm, ok := b.Object.(*infrav1.ContainerMachine); ok {
			target = cm
		}
		a.recorder.Eventf(target, corev1.EventTypeWarning, eventBadRecord, "Bad pod CIDR record of %s: %s", b.Owner, msg)
	}
}

// fail sets PodCIDRAllocated=False and emits a warning event only when the
// machine enters this failure, so that a machine polled every few seconds
// produces one event, not one per poll.
func (a *Assigner) fail(s *lifecycle.MachineScope, reason, msg string) {
	cm := s.ContainerMachine
	allocationFailures.WithLabelValues(reason).Inc()
	prev := conditions.Get(cm, infrav1.PodCIDRAllocatedCondition)
	st := a.state(s.Cluster)
	st.mu.Lock()
	key := machineOwner(cm)
	already := st.failing[key] == reason || (prev != nil && prev.Status == metav1.ConditionFalse && prev.Reason == reason)
	st.failing[key] = reason
	st.mu.Unlock()
	if !already {
		a.recorder.Event(cm, corev1.EventTypeWarning, reason, msg)
	}
	a.setCondition(cm, metav1.ConditionFalse, reason, msg)
}

func (a *Assigner) succeed(s *lifecycle.MachineScope, msg string) {
	st := a.state(s.Cluster)
	st.mu.Lock()
	delete(st.failing, machineOwner(s.ContainerMachine))
	st.mu.Unlock()
	a.setCondition(s.ContainerMachine, metav1.ConditionTrue, infrav1.SucceededReason, msg)
}

func (a *Assigner) setCondition(cm *infrav1.ContainerMachine, status metav1.ConditionStatus, reason, msg string) {
	conditions.Set(cm, metav1.Condition{
		Type: infrav1.PodCIDRAllocatedCondition, Status: status, Reason: reason, Message: msg,
		LastTransitionTime: metav1.NewTime(a.clock.Now()),
	})
}
