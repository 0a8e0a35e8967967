package nodeipam

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/ipam"
	"github.com/capct/cluster-api-provider-container/internal/ssa"
)

// FieldOwner is the server-side apply field manager of Node.spec.podCIDR
// and spec.podCIDRs, and of nothing else: a manager that applied the
// Node's providerID too would, in an apply without it, ask the API server
// to remove it, which Node validation refuses.
const FieldOwner = "capct-nodeipam"

// Recorder decides machines' pod CIDRs and writes the allocation record,
// the ContainerMachine's pod-cidrs annotation, before anyone else sees
// them. It is safe for concurrent use; one Recorder serves every cluster.
type Recorder struct {
	client client.Client
	reader client.Reader

	mu       sync.Mutex
	clusters map[types.UID]*clusterState
}

// clusterState serialises one cluster's allocations and remembers the bad
// records already returned, so that each is reported once.
type clusterState struct {
	// alloc is held around list, decide and record, so that two machines
	// of the cluster never get the same CIDR.
	alloc    sync.Mutex
	reported map[string]bool
}

// NewRecorder returns a Recorder.
//
//   - c writes the management cluster (the ContainerMachine annotation).
//   - reader lists ContainerMachines for the rebuild. It must read the API
//     server directly, not an informer cache (use mgr.GetAPIReader()): a
//     cache that has not yet seen the record just written for another
//     machine would let the same CIDR be handed out twice.
func NewRecorder(c client.Client, reader client.Reader) *Recorder {
	return &Recorder{client: c, reader: reader, clusters: map[types.UID]*clusterState{}}
}

func (r *Recorder) state(cluster *clusterv1.Cluster) *clusterState {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.clusters[cluster.UID]
	if !ok {
		st = &clusterState{reported: map[string]bool{}}
		r.clusters[cluster.UID] = st
	}
	return st
}

// ForgetCluster drops what the Recorder keeps about a deleted cluster: its
// lock, its reported records and its metric series.
func (r *Recorder) ForgetCluster(cluster *clusterv1.Cluster) {
	r.mu.Lock()
	delete(r.clusters, cluster.UID)
	r.mu.Unlock()
	forgetUsage(cluster)
}

// Request is what node IPAM needs to know of one machine.
type Request struct {
	Cluster          *clusterv1.Cluster
	ContainerCluster *infrav1.ContainerCluster
	ContainerMachine *infrav1.ContainerMachine
	// Node is the machine's registered Node.
	Node *corev1.Node
	// Workload lists the cluster's Nodes (a ClusterCache client: its reads
	// come from an informer).
	Workload client.Client
}

// Allocate decides the machine's pod CIDRs (Decide) from the cluster's
// ContainerMachines and Nodes, and records them on the ContainerMachine
// before returning them: a crash after the write finds them in the next
// rebuild, a crash before it has handed nothing out. Its API requests do not
// grow with the cluster: one list of ContainerMachines, one (cached) list of
// Nodes, and the record's patch when it changes.
func (r *Recorder) Allocate(ctx context.Context, req Request) (Decision, error) {
	cm := req.ContainerMachine
	cfg, enabled, why, err := ClusterConfig(req.Cluster, req.ContainerCluster)
	if err == nil && enabled {
		_, err = ipam.New(cfg)
	}
	if err != nil {
		return r.failed(Decision{Reason: infrav1.InvalidSpecReason,
			Message: fmt.Sprintf("The pod network of Cluster %s cannot be divided into node CIDRs: %v", klog.KObj(req.Cluster), err)}), nil
	}
	if !enabled {
		return Decision{Reason: infrav1.DisabledReason, Message: why}, nil
	}
	st := r.state(req.Cluster)
	st.alloc.Lock()
	defer st.alloc.Unlock()

	machines := &infrav1.ContainerMachineList{}
	if err := r.reader.List(ctx, machines, client.InNamespace(req.Cluster.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: req.Cluster.Name}); err != nil {
		return Decision{}, fmt.Errorf("failed to list the ContainerMachines of Cluster %s: %w", klog.KObj(req.Cluster), err)
	}
	nodes := &corev1.NodeList{}
	if err := req.Workload.List(ctx, nodes); err != nil {
		return Decision{}, fmt.Errorf("failed to list the Nodes of Cluster %s: %w", klog.KObj(req.Cluster), err)
	}
	d, err := Decide(cfg, machines.Items, nodes.Items, cm, req.Node)
	if err != nil {
		allocationFailures.WithLabelValues(infrav1.FailedReason).Inc()
		return Decision{}, fmt.Errorf("failed to decide the pod CIDRs of ContainerMachine %s: %w", klog.KObj(cm), err)
	}
	recordUsage(req.Cluster, d.Usage)
	d.BadRecords = st.unreported(d.BadRecords)
	if !d.Done() {
		return r.failed(d), nil
	}
	previous := cm.Annotations[infrav1.PodCIDRsAnnotation]
	if live := listed(machines.Items, cm); live != nil {
		previous = live.Annotations[infrav1.PodCIDRsAnnotation]
	}
	if value := FormatPodCIDRs(d.CIDRs); previous != value {
		if err := r.record(ctx, cm, value); err != nil {
			return Decision{}, err
		}
		ctrl.LoggerFrom(ctx).Info("Recorded pod CIDRs", "PodCIDRs", value, "Previous", previous)
	}
	return d, nil
}

func (r *Recorder) failed(d Decision) Decision {
	allocationFailures.WithLabelValues(d.Reason).Inc()
	return d
}

// record writes the allocation record. The providerID goes with it (the
// controller's patch helper writes it only when the reconcile ends): a
// rebuild matches a Node to its machine's record by providerID, and would
// otherwise count the Node's CIDRs as a second claim and report a conflict.
// Only the annotation and the providerID are sent, never the caller's
// copy of the object, so the controller's own patch still sees its changes.
func (r *Recorder) record(ctx context.Context, cm *infrav1.ContainerMachine, value string) error {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, infrav1.PodCIDRsAnnotation, value)
	if cm.Spec.ProviderID != "" {
		patch = fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}},"spec":{"providerID":%q}}`,
			infrav1.PodCIDRsAnnotation, value, cm.Spec.ProviderID)
	}
	if err := r.client.Patch(ctx, cm.DeepCopy(), client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("failed to record pod CIDRs %s on ContainerMachine %s: %w", value, klog.KObj(cm), err)
	}
	return nil
}

// unreported returns the records not returned before, and remembers them.
func (st *clusterState) unreported(bad []*RecordError) []*RecordError {
	var out []*RecordError
	for _, b := range bad {
		if msg := b.Err.Error(); !st.reported[msg] {
			st.reported[msg] = true
			out = append(out, b)
		}
	}
	return out
}

// AssignNode sets the Node's pod CIDRs, as field manager FieldOwner, unless
// it already has them, and returns the Node as the API server now holds
// it. The apply carries the Node's resourceVersion so that it can never
// create a Node that was deleted meanwhile; a conflict is retried by the
// caller.
func AssignNode(ctx context.Context, workload client.Client, node *corev1.Node, cidrs []netip.Prefix) (*corev1.Node, error) {
	want := CIDRStrings(cidrs)
	if slices.Equal(node.Spec.PodCIDRs, want) && node.Spec.PodCIDR == want[0] {
		return node, nil
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name, ResourceVersion: node.ResourceVersion}}
	n.Spec.PodCIDR = want[0]
	n.Spec.PodCIDRs = want
	if err := ssa.Apply(ctx, workload, FieldOwner, n, ssa.WithOptimisticLock()); err != nil {
		allocationFailures.WithLabelValues(infrav1.FailedReason).Inc()
		return nil, fmt.Errorf("failed to set pod CIDRs %s on Node %s: %w", strings.Join(want, ","), node.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Assigned pod CIDRs to the Node", "Node", klog.KObj(n), "PodCIDRs", strings.Join(want, ","))
	return n, nil
}

// Recorded returns the pod CIDRs recorded on a ContainerMachine; a record
// that does not parse counts as none (Allocate reports it).
func Recorded(cm *infrav1.ContainerMachine) []netip.Prefix {
	cidrs, _ := ParsePodCIDRs(cm.Annotations[infrav1.PodCIDRsAnnotation])
	return cidrs
}
