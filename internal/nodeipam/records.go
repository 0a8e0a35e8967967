package nodeipam

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/ipam"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

// Owner keys name who holds a CIDR in the allocator. Machines sort before
// Nodes, so when a machine's record and a stray Node overlap, the machine
// keeps the CIDR and the Node is the one reported.
func machineOwner(cm *infrav1.ContainerMachine) string {
	return "ContainerMachine/" + cm.Namespace + "/" + cm.Name
}

func nodeOwner(n *corev1.Node) string { return "Node/" + n.Name }

// RecordError is a record the rebuild could not (fully) honour: an
// unparseable annotation, a CIDR outside the cluster CIDRs, or a CIDR
// overlapping another owner's. The CIDRs that could be occupied still are,
// so a bad record never causes a duplicate.
type RecordError struct {
	// Owner is the allocator owner key of the record.
	Owner string
	// Object is the ContainerMachine or Node the record came from.
	Object client.Object
	Err    error
}

func (e *RecordError) Error() string { return e.Err.Error() }
func (e *RecordError) Unwrap() error { return e.Err }

// ParsePodCIDRs parses a comma-separated list of CIDRs (the annotation's
// format). Valid prefixes are returned masked; each invalid entry is an
// error.
func ParsePodCIDRs(s string) ([]netip.Prefix, []error) {
	var out []netip.Prefix
	var errs []error
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %q is not a CIDR: %w", ipam.ErrInvalidArgument, f, err))
			continue
		}
		out = append(out, p.Masked())
	}
	return out, errs
}

// FormatPodCIDRs is the inverse of ParsePodCIDRs.
func FormatPodCIDRs(cidrs []netip.Prefix) string {
	return strings.Join(CIDRStrings(cidrs), ",")
}

// CIDRStrings returns the CIDRs as strings, the form of Node.spec.podCIDRs
// and status.podCIDRs.
func CIDRStrings(cidrs []netip.Prefix) []string {
	out := make([]string, len(cidrs))
	for i, p := range cidrs {
		out[i] = p.String()
	}
	return out
}

func nodePodCIDRs(n *corev1.Node) []string {
	if len(n.Spec.PodCIDRs) > 0 {
		return n.Spec.PodCIDRs
	}
	if n.Spec.PodCIDR != "" {
		return []string{n.Spec.PodCIDR}
	}
	return nil
}

// NodeHoldsRecord reports whether node holds exactly the pod CIDRs recorded
// on cm. Once a decision has been applied, that is all a later pass would
// find (Decide's first rule), so the caller need not list the cluster again.
func NodeHoldsRecord(node *corev1.Node, cm *infrav1.ContainerMachine) bool {
	recorded, errs := ParsePodCIDRs(cm.Annotations[infrav1.PodCIDRsAnnotation])
	if len(errs) > 0 || len(recorded) == 0 {
		return false
	}
	onNode, errs := ParsePodCIDRs(strings.Join(nodePodCIDRs(node), ","))
	return len(errs) == 0 && sameSet(onNode, recorded)
}

func sameSet(a, b []netip.Prefix) bool {
	if len(a) != len(b) {
		return false
	}
	for _, p := range a {
		if !slices.Contains(b, p) {
			return false
		}
	}
	return true
}

// expectedProviderID is the providerID cm's Node carries: that of the
// container CAPCT names after cm. A machine gets its spec.providerID once
// its bootstrap data has run (lifecycle.Provision), and its Node may
// register and be given pod CIDRs before that; "" without the cluster-name
// label.
func expectedProviderID(cm *infrav1.ContainerMachine) string {
	cluster := cm.Labels[clusterv1.ClusterNameLabel]
	if cluster == "" {
		return ""
	}
	return naming.ProviderID(naming.ContainerName(cm.Namespace, cluster, cm.Name))
}

// Rebuild returns an allocator holding every pod CIDR that any of the
// cluster's ContainerMachines (annotation, including machines being
// deleted) or any Node (spec.podCIDRs) holds, before anything new is
// handed out. A Node whose CIDRs are exactly those of the machine with its
// providerID (spec.providerID, or the one its container's Node carries,
// which may come first) is the same record and counted once; any other Node CIDR is
// held by the Node itself, so a CIDR stays reserved until its Node is gone
// even after the machine's record was deleted.
//
// Each CIDR is occupied on its own, in sorted owner order (machines before
// Nodes), so the result does not depend on list order. Records that cannot
// be honoured are returned as RecordErrors; the error is nil unless cfg is
// invalid.
func Rebuild(cfg ipam.Config, machines []infrav1.ContainerMachine, nodes []corev1.Node) (*ipam.Allocator, []*RecordError, error) {
	alloc, err := ipam.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	records, byProviderID, bad := machineRecords(machines)
	for i := range nodes {
		n := &nodes[i]
		raw := nodePodCIDRs(n)
		if len(raw) == 0 {
			continue
		}
		cidrs, errs := ParsePodCIDRs(strings.Join(raw, ","))
		for _, e := range errs {
			bad = append(bad, &RecordError{Owner: nodeOwner(n), Object: n, Err: fmt.Errorf("spec.podCIDRs of Node %s: %w", n.Name, e)})
		}
		if m, ok := byProviderID[n.Spec.ProviderID]; ok && n.Spec.ProviderID != "" && sameSet(m, cidrs) {
			continue
		}
		if len(cidrs) > 0 {
			records[nodeOwner(n)] = record{obj: n, cidrs: cidrs}
		}
	}
	for _, owner := range slices.Sorted(maps.Keys(records)) {
		r := records[owner]
		for _, p := range r.cidrs {
			if err := alloc.Occupy(owner, []netip.Prefix{p}); err != nil {
				bad = append(bad, &RecordError{Owner: owner, Object: r.obj, Err: err})
			}
		}
	}
	return alloc, bad, nil
}

// record is what one owner holds: a ContainerMachine's annotation or a
// Node's spec.podCIDRs.
type record struct {
	obj   client.Object
	cidrs []netip.Prefix
}

// machineRecords reads the machines' records, keyed by owner and, for
// matching their Nodes, by the providerIDs their Nodes may carry; records
// that do not parse are returned as RecordErrors.
func machineRecords(machines []infrav1.ContainerMachine) (map[string]record, map[string][]netip.Prefix, []*RecordError) {
	records := map[string]record{}
	byProviderID := map[string][]netip.Prefix{}
	var bad []*RecordError
	for i := range machines {
		cm := &machines[i]
		v, ok := cm.Annotations[infrav1.PodCIDRsAnnotation]
		if !ok {
			continue
		}
		cidrs, errs := ParsePodCIDRs(v)
		for _, e := range errs {
			bad = append(bad, &RecordError{Owner: machineOwner(cm), Object: cm,
				Err: fmt.Errorf("annotation %s of ContainerMachine %s/%s: %w", infrav1.PodCIDRsAnnotation, cm.Namespace, cm.Name, e)})
		}
		if len(cidrs) == 0 {
			continue
		}
		records[machineOwner(cm)] = record{obj: cm, cidrs: cidrs}
		for _, id := range []string{cm.Spec.ProviderID, expectedProviderID(cm)} {
			if id != "" {
				byProviderID[id] = cidrs
			}
		}
	}
	return records, byProviderID, bad
}

// ClusterConfig returns the allocator configuration of a cluster. enabled
// is false, with the reason in why, when node IPAM is turned off in the
// ContainerCluster or the Cluster has no pod CIDRs; err reports CIDRs that
// cannot be parsed (the allocator itself validates the rest).
func ClusterConfig(cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) (cfg ipam.Config, enabled bool, why string, err error) {
	if cc != nil {
		a := cc.Spec.Network.PodCIDRAllocation
		if a.Enabled != nil && !*a.Enabled {
			return cfg, false, fmt.Sprintf("Node IPAM is disabled by spec.network.podCIDRAllocation.enabled of ContainerCluster %s/%s", cc.Namespace, cc.Name), nil
		}
		cfg.NodeMaskSizeIPv4 = int(a.NodeMaskSizeIPv4)
		cfg.NodeMaskSizeIPv6 = int(a.NodeMaskSizeIPv6)
	}
	blocks := cluster.Spec.ClusterNetwork.Pods.CIDRBlocks
	if len(blocks) == 0 {
		return cfg, false, fmt.Sprintf("Cluster %s/%s has no spec.clusterNetwork.pods.cidrBlocks", cluster.Namespace, cluster.Name), nil
	}
	for _, b := range blocks {
		p, perr := netip.ParsePrefix(strings.TrimSpace(b))
		if perr != nil {
			return cfg, true, "", fmt.Errorf("%w: pod CIDR block %q of Cluster %s/%s: %w", ipam.ErrInvalidConfig, b, cluster.Namespace, cluster.Name, perr)
		}
		cfg.ClusterCIDRs = append(cfg.ClusterCIDRs, p.Masked())
	}
	return cfg, true, "", nil
}
