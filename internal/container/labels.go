package container

import (
	"context"
	"fmt"
	"maps"
)

// Labels put on every container and network CAPCT creates. Four of them
// together say who owns an object (see Owner): the namespace and name of the
// Cluster, the cluster ID recorded on its ContainerCluster, and the machine.
const (
	// LabelNamespace carries the namespace of the owning Cluster (and so of
	// its ContainerMachines): names are only unique within a namespace.
	LabelNamespace = "io.x-k8s.capct.namespace"
	// LabelCluster carries the name of the owning Cluster.
	LabelCluster = "io.x-k8s.capct.cluster"
	// LabelClusterID carries the owning ContainerCluster's spec.clusterID.
	// It is set once from the Cluster's UID and travels with the object on
	// clusterctl move, which the UID does not: a moved cluster still owns its
	// containers, while a second cluster of the same name on another
	// management cluster does not.
	LabelClusterID = "io.x-k8s.capct.cluster-id"
	// LabelMachine carries the name of the owning ContainerMachine (or of the
	// load balancer); networks have none.
	LabelMachine = "io.x-k8s.capct.machine"
	// LabelRole carries the Role of the container.
	LabelRole = "io.x-k8s.capct.role"
	// LabelPool carries the name of the machine pool, for pool members.
	LabelPool = "io.x-k8s.capct.pool"
)

// Owner says who owns an engine object. Every Runtime call that changes an
// object, or reads a container's files, names the owner it expects, and the
// runtime refuses (a conflict error) to touch an object whose labels name
// another: CAPCT never changes, removes or reads out of what it did not
// create for that very cluster and machine.
type Owner struct {
	// Namespace of the Cluster.
	Namespace string
	// Cluster is the Cluster's name.
	Cluster string
	// ClusterID is the ContainerCluster's spec.clusterID.
	ClusterID string
	// Machine is the owning machine's name; empty for a cluster's networks.
	Machine string
}

// ForMachine returns the owner of machine's container in o's cluster.
func (o Owner) ForMachine(machine string) Owner {
	o.Machine = machine
	return o
}

// ClusterOwner returns o without its machine: the owner of the cluster's
// networks, and the selector of all of the cluster's containers.
func (o Owner) ClusterOwner() Owner {
	o.Machine = ""
	return o
}

// Valid reports whether o names a cluster completely. An incomplete owner
// would match objects of other clusters, so every check refuses it.
func (o Owner) Valid() bool {
	return o.Namespace != "" && o.Cluster != "" && o.ClusterID != ""
}

// Labels returns the owner labels of o; the machine label is left out when
// o has no machine.
func (o Owner) Labels() map[string]string {
	l := map[string]string{
		LabelNamespace: o.Namespace,
		LabelCluster:   o.Cluster,
		LabelClusterID: o.ClusterID,
	}
	if o.Machine != "" {
		l[LabelMachine] = o.Machine
	}
	return l
}

// Owns reports whether an object carrying labels belongs to o: the same
// namespace, cluster, cluster ID and machine (none, for a network). An
// invalid owner owns nothing.
func (o Owner) Owns(labels map[string]string) bool {
	return o.Valid() &&
		labels[LabelNamespace] == o.Namespace &&
		labels[LabelCluster] == o.Cluster &&
		labels[LabelClusterID] == o.ClusterID &&
		labels[LabelMachine] == o.Machine
}

// String names o for error messages.
func (o Owner) String() string {
	s := fmt.Sprintf("cluster %s/%s (ID %s)", o.Namespace, o.Cluster, o.ClusterID)
	if o.Machine != "" {
		s += " machine " + o.Machine
	}
	return s
}

// OwnerOf reads the owner an object's labels name.
func OwnerOf(labels map[string]string) Owner {
	return Owner{
		Namespace: labels[LabelNamespace],
		Cluster:   labels[LabelCluster],
		ClusterID: labels[LabelClusterID],
		Machine:   labels[LabelMachine],
	}
}

// NotOwnedError is the conflict error of a mutating call on an object whose
// labels name another owner than the caller expects.
func NotOwnedError(op, object, name string, want Owner, labels map[string]string) error {
	return NewError(op, object, name, KindConflict,
		fmt.Errorf("refusing to %s %s %q: it belongs to %s, not to %s", op, object, name, describeOwner(labels), want))
}

func describeOwner(labels map[string]string) string {
	if labels[LabelClusterID] == "" {
		return "no CAPCT cluster"
	}
	return OwnerOf(labels).String()
}

// MatchesSelector reports whether labels contain every key/value of selector.
func MatchesSelector(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// ListOwned lists the containers of owner's cluster (whatever their machine)
// that also match extra. It is the only listing meant for deletion: it
// refuses an incomplete owner and filters the runtime's answer again, so
// nothing of another cluster and nothing not made by CAPCT is ever returned,
// whatever the runtime does with the selector.
func ListOwned(ctx context.Context, rt Runtime, owner Owner, extra map[string]string) ([]Machine, error) {
	owner = owner.ClusterOwner()
	if !owner.Valid() {
		return nil, NewError("list", "containers", "", KindInvalid,
			fmt.Errorf("refusing to list owned containers without a complete owner (got %s)", owner))
	}
	sel := maps.Clone(extra)
	if sel == nil {
		sel = map[string]string{}
	}
	for k, v := range owner.Labels() {
		if got, ok := sel[k]; ok && got != v {
			return nil, NewError("list", "containers", owner.ClusterID, KindInvalid,
				fmt.Errorf("selector names %s=%q, not %q", k, got, v))
		}
		sel[k] = v
	}
	all, err := rt.List(ctx, sel)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, m := range all {
		if owner.ForMachine(m.Labels[LabelMachine]).Owns(m.Labels) && MatchesSelector(m.Labels, sel) {
			out = append(out, m)
		}
	}
	return out, nil
}
