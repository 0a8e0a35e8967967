package nodeipam

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/ipam"
)

// Decision is node IPAM's answer for one machine: its pod CIDRs, or why it
// has to wait. The Initialization phase turns it into the PodCIDRAllocated
// condition, the machine's status and events; node IPAM itself only writes
// the allocation record (Recorder).
type Decision struct {
	// CIDRs are the machine's pod CIDRs, one per family, primary family
	// first; empty while it waits.
	CIDRs []netip.Prefix
	// Reason is the PodCIDRAllocated condition's reason: SucceededReason
	// with CIDRs; DisabledReason when node IPAM is off for the cluster;
	// otherwise why the machine waits (ExhaustedReason,
	// PodCIDRConflictReason, InvalidSpecReason).
	Reason string
	// Message says the same for humans; it names objects and CIDRs, never
	// secrets.
	Message string
	// Event, when set, is worth a Warning event on the machine: CIDRs the
	// Node holds replace different ones recorded. What is decided in the
	// normal course (a first allocation, CIDRs adopted from the Node) is
	// the condition's message only.
	Event *Event
	// BadRecords are the cluster's records that could not be honoured. The
	// Recorder returns each only the first time it sees it.
	BadRecords []*RecordError
	// Usage is the cluster's pod network usage per family after the
	// decision.
	Usage []ipam.FamilyUsage
}

// Done reports whether the machine needs nothing more from node IPAM:
// it has its CIDRs, or node IPAM is off for its cluster.
func (d Decision) Done() bool {
	return len(d.CIDRs) > 0 || d.Reason == infrav1.DisabledReason
}

// Event is an event to emit on the machine.
type Event struct {
	Type, Reason, Message string
}

// Event reasons.
const (
	EventBadRecord = "PodCIDRBadRecord"
)

// Decide returns the pod CIDRs of machine cm, whose Node is node, in a
// cluster of the given pod network (cfg), ContainerMachines and Nodes. It
// reads nothing and writes nothing, so its answer depends on its arguments
// only. The rules, in order:
//   - a Node that already holds exactly the machine's recorded CIDRs keeps
//     them, unless another record overlaps them (a conflict);
//   - Node.spec.podCIDRs is immutable, so CIDRs already on the Node are
//     adopted when nobody else holds them, and a conflict otherwise;
//   - recorded CIDRs that another record overlaps are a conflict;
//   - otherwise the machine keeps what it holds and gets any missing
//     family, or waits for a free CIDR.
//
// machines may or may not include cm; cm's own record is read from the
// listed copy when there is one, since that is what the API server holds.
func Decide(cfg ipam.Config, machines []infrav1.ContainerMachine, nodes []corev1.Node, cm *infrav1.ContainerMachine, node *corev1.Node) (Decision, error) {
	live := listed(machines, cm)
	if live == nil {
		live = cm
		machines = append(slices.Clip(machines), *cm.DeepCopy())
	}
	// The Node the decision is about is the caller's; make the rebuild see
	// the same one.
	nodes = slices.Clone(nodes)
	for i := range nodes {
		if nodes[i].Name == node.Name {
			nodes[i] = *node.DeepCopy()
		}
	}
	alloc, bad, err := Rebuild(cfg, machines, nodes)
	if err != nil {
		return Decision{}, fmt.Errorf("failed to rebuild the pod CIDR allocator: %w", err)
	}
	d := Decision{BadRecords: bad}
	adoptedFrom := ""

	own := machineOwner(cm)
	recorded, _ := ParsePodCIDRs(live.Annotations[infrav1.PodCIDRsAnnotation])
	held, _ := alloc.Get(own)
	nodeRaw := nodePodCIDRs(node)
	onNode, nodeErrs := ParsePodCIDRs(strings.Join(nodeRaw, ","))

	wait := func(reason, format string, args ...any) (Decision, error) {
		d.Reason, d.Message, d.Usage = reason, fmt.Sprintf(format, args...), alloc.Usage()
		return d, nil
	}
	switch {
	case len(nodeRaw) > 0 && len(nodeErrs) == 0 && sameSet(onNode, recorded):
		// The Node already holds exactly ours.
		if !covers(held, recorded) {
			return wait(infrav1.PodCIDRConflictReason, "Pod CIDRs %s of ContainerMachine %s and Node %s overlap another record: %s",
				FormatPodCIDRs(recorded), klog.KObj(cm), node.Name, recordErrors(bad, own))
		}
		d.CIDRs = recorded
	case len(nodeRaw) > 0:
		nodeHeld, _ := alloc.Get(nodeOwner(node))
		if len(nodeErrs) > 0 || !covers(nodeHeld, onNode) {
			return wait(infrav1.PodCIDRConflictReason, "Node %s already holds pod CIDRs %s, not %s recorded on ContainerMachine %s, and they cannot be adopted: %s",
				node.Name, strings.Join(nodeRaw, ","), orNone(recorded), klog.KObj(cm), errors.Join(append(nodeErrs, recordErrors(bad, nodeOwner(node)))...))
		}
		d.CIDRs = onNode
		if len(recorded) > 0 {
			d.Event = &Event{corev1.EventTypeWarning, infrav1.PodCIDRConflictReason, fmt.Sprintf(
				"Node %s already holds pod CIDRs %s, not the allocated %s; adopting the Node's and releasing %s",
				node.Name, FormatPodCIDRs(onNode), FormatPodCIDRs(recorded), FormatPodCIDRs(recorded))}
		}
		adoptedFrom = node.Name
	case len(recorded) > 0 && !covers(held, recorded):
		return wait(infrav1.PodCIDRConflictReason, "Pod CIDRs %s recorded on ContainerMachine %s cannot be kept: %s",
			FormatPodCIDRs(recorded), klog.KObj(cm), recordErrors(bad, own))
	default:
		// Allocate keeps what the machine holds and adds any missing
		// family (a cluster that became dual stack).
		cidrs, err := alloc.Allocate(own)
		if errors.Is(err, ipam.ErrExhausted) {
			return wait(infrav1.ExhaustedReason, "No free pod CIDR for ContainerMachine %s: %v", klog.KObj(cm), err)
		}
		if err != nil {
			return Decision{}, fmt.Errorf("failed to allocate pod CIDRs for ContainerMachine %s: %w", klog.KObj(cm), err)
		}
		d.CIDRs = cidrs
	}
	d.Reason, d.Message, d.Usage = infrav1.SucceededReason, "Pod CIDRs "+FormatPodCIDRs(d.CIDRs), alloc.Usage()
	if adoptedFrom != "" {
		d.Message += ", adopted from Node " + adoptedFrom
	}
	return d, nil
}

// listed returns the listed copy of cm, as the API server holds it, or nil.
func listed(machines []infrav1.ContainerMachine, cm *infrav1.ContainerMachine) *infrav1.ContainerMachine {
	for i := range machines {
		if machines[i].Namespace == cm.Namespace && machines[i].Name == cm.Name {
			return &machines[i]
		}
	}
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
