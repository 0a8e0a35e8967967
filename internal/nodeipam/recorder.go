package nodeipam

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
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
//
// It reads the cluster's records from the manager's cache, with what this
// manager wrote or first read from the API server laid over them until the
// cache shows it (overlay.go), so an allocation costs no list at the API
// server: only the first one of each cluster in a manager's life does. The
// argument that no CIDR is handed out twice is in docs/node-ipam.md.
type Recorder struct {
	client client.Client
	reader client.Reader
	// Clock tells when an overlaid record is due to be read again
	// (OverlayRecheck); nil is the real clock.
	Clock clock.PassiveClock

	mu       sync.Mutex
	clusters map[types.UID]*clusterState
}

// clusterState serialises one cluster's allocations and remembers what
// the cache may not show yet, and the bad records already returned, so
// that each is reported once.
type clusterState struct {
	// alloc is held around read, decide and record, so that two machines
	// of the cluster never get the same CIDR, and around every use of the
	// fields below.
	alloc    sync.Mutex
	reported map[string]bool
	// listed is true once the cluster's ContainerMachines were listed at
	// the API server in this manager's life.
	listed bool
	// machines are the pending records by ContainerMachine name; nodes the
	// pending pod CIDRs by Node name.
	machines map[string]*pending
	nodes    map[string]*pending
}

// NewRecorder returns a Recorder.
//
//   - c writes the management cluster (the ContainerMachine annotation);
//     its reads come from the manager's cache (mgr.GetClient()).
//   - reader reads the API server directly (mgr.GetAPIReader()): once per
//     cluster, the first time the cluster allocates in this manager's
//     life, because the cache may lag behind what the manager that led
//     before this one wrote; and for a record the cache disagrees with
//     for longer than OverlayRecheck.
func NewRecorder(c client.Client, reader client.Reader) *Recorder {
	return &Recorder{client: c, reader: reader, clusters: map[types.UID]*clusterState{}}
}

func (r *Recorder) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

func (r *Recorder) state(cluster *clusterv1.Cluster) *clusterState {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.clusters[cluster.UID]
	if !ok {
		st = &clusterState{reported: map[string]bool{}, machines: map[string]*pending{}, nodes: map[string]*pending{}}
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
// rebuild, a crash before it has handed nothing out. It reads both from
// informers, with this manager's pending records laid over them; its only
// request to the API server is the record's patch when it changes (and,
// once per cluster in a manager's life, the list that seeds the overlay).
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

	if err := r.seed(ctx, st, req.Cluster); err != nil {
		return Decision{}, err
	}
	machines := &infrav1.ContainerMachineList{}
	if err := r.client.List(ctx, machines, client.InNamespace(req.Cluster.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: req.Cluster.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return Decision{}, fmt.Errorf("failed to list the ContainerMachines of Cluster %s: %w", klog.KObj(req.Cluster), err)
	}
	nodes := &corev1.NodeList{}
	if err := req.Workload.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return Decision{}, fmt.Errorf("failed to list the Nodes of Cluster %s: %w", klog.KObj(req.Cluster), err)
	}
	all, err := r.withPendingMachines(ctx, st, req.Cluster.Namespace, machines.Items)
	if err != nil {
		return Decision{}, err
	}
	d, err := Decide(cfg, all, st.withPendingNodes(r.now(), nodes.Items), cm, req.Node)
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
	if live := listed(all, cm); live != nil {
		previous = live.Annotations[infrav1.PodCIDRsAnnotation]
	}
	if value := FormatPodCIDRs(d.CIDRs); previous != value {
		if err := r.record(ctx, cm, value); err != nil {
			return Decision{}, err
		}
		st.machines[cm.Name] = &pending{value: value, providerID: cm.Spec.ProviderID, checked: r.now(),
			cached: listed(machines.Items, cm) != nil}
		ctrl.LoggerFrom(ctx).Info("Recorded pod CIDRs", "PodCIDRs", value, "Previous", previous)
	}
	return d, nil
}

// seed lays every record the API server holds for the cluster over the
// cache, the first time the cluster allocates in this manager's life. The
// cache may have been started long before this manager became the leader,
// and its watch may not yet have delivered what the previous leader
// recorded last; the API server's list has it.
func (r *Recorder) seed(ctx context.Context, st *clusterState, cluster *clusterv1.Cluster) error {
	if st.listed {
		return nil
	}
	machines := &infrav1.ContainerMachineList{}
	if err := r.reader.List(ctx, machines, client.InNamespace(cluster.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: cluster.Name}); err != nil {
		return fmt.Errorf("failed to list the ContainerMachines of Cluster %s: %w", klog.KObj(cluster), err)
	}
	now := r.now()
	for i := range machines.Items {
		m := &machines.Items[i]
		if v, ok := m.Annotations[infrav1.PodCIDRsAnnotation]; ok {
			st.machines[m.Name] = &pending{value: v, providerID: m.Spec.ProviderID, checked: now}
		}
	}
	st.listed = true
	return nil
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
// it. The apply carries the Node's UID: the API server refuses an apply
// whose UID matches no Node (a Node deleted meanwhile is never created
// again) or another Node of the same name. It carries no resourceVersion,
// which the kubelet changes every few seconds while a node starts: each
// such change would fail the apply and cost the machine a retry.
//
// Until the cluster's Node informer shows the CIDRs, the Recorder counts
// them as the Node's: once the machine's record is gone, the Node is what
// keeps them reserved. They are counted from before the apply, so that no
// allocation runs between the apply and the count; an apply that fails
// reserves them for OverlayRecheck at most, besides the machine's record.
// The lock is not held over the apply, so the cluster's Nodes are written
// in parallel.
func (r *Recorder) AssignNode(ctx context.Context, cluster *clusterv1.Cluster, workload client.Client, node *corev1.Node, cidrs []netip.Prefix) (*corev1.Node, error) {
	want := CIDRStrings(cidrs)
	if slices.Equal(node.Spec.PodCIDRs, want) && node.Spec.PodCIDR == want[0] {
		return node, nil
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name, UID: node.UID}}
	n.Spec.PodCIDR = want[0]
	n.Spec.PodCIDRs = want
	st := r.state(cluster)
	st.alloc.Lock()
	st.nodes[node.Name] = &pending{value: strings.Join(want, ","), checked: r.now()}
	st.alloc.Unlock()
	if err := ssa.Apply(ctx, workload, FieldOwner, n); err != nil {
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
