package container

import (
	"context"
	"fmt"
	"maps"
)

// Ownership labels put on every container and network CAPCT creates.
const (
	// LabelCluster carries the name of the owning Cluster.
	LabelCluster = "io.x-k8s.capct.cluster"
	// LabelClusterUID carries the UID of the owning Cluster. It is the label
	// that decides ownership: see BelongsTo and ListOwned.
	LabelClusterUID = "io.x-k8s.capct.cluster-uid"
	// LabelMachine carries the name of the owning Machine (or of the load
	// balancer).
	LabelMachine = "io.x-k8s.capct.machine"
	// LabelRole carries the Role of the container.
	LabelRole = "io.x-k8s.capct.role"
	// LabelPool carries the name of the machine pool, for pool members.
	LabelPool = "io.x-k8s.capct.pool"
)

// OwnerLabels returns the labels that mark a container as belonging to the
// machine machine of the cluster clusterName/clusterUID with the given role.
// Empty values are left out.
func OwnerLabels(clusterName, clusterUID, machine, role string) map[string]string {
	l := map[string]string{}
	for k, v := range map[string]string{
		LabelCluster:    clusterName,
		LabelClusterUID: clusterUID,
		LabelMachine:    machine,
		LabelRole:       role,
	} {
		if v != "" {
			l[k] = v
		}
	}
	return l
}

// BelongsTo reports whether an object carrying labels was created by CAPCT
// for the cluster with UID clusterUID. An empty clusterUID never matches.
func BelongsTo(labels map[string]string, clusterUID string) bool {
	return clusterUID != "" && labels[LabelClusterUID] == clusterUID
}

// SameOwner reports whether two label sets name the same cluster UID and the
// same machine; this is the adoption rule of CreateMachine.
func SameOwner(existing, wanted map[string]string) bool {
	return existing[LabelClusterUID] != "" &&
		existing[LabelClusterUID] == wanted[LabelClusterUID] &&
		existing[LabelMachine] == wanted[LabelMachine]
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

// ListOwned lists the containers of the cluster with UID clusterUID that also
// match extra. It is the only listing meant for deletion: it refuses an empty
// UID and filters the runtime's answer again with BelongsTo, so nothing of
// another cluster and nothing not made by CAPCT is ever returned, whatever the
// runtime does with the selector.
func ListOwned(ctx context.Context, rt Runtime, clusterUID string, extra map[string]string) ([]Machine, error) {
	if clusterUID == "" {
		return nil, NewError("list", "containers", "", KindInvalid,
			fmt.Errorf("refusing to list owned containers without a cluster UID"))
	}
	sel := maps.Clone(extra)
	if sel == nil {
		sel = map[string]string{}
	}
	if v, ok := sel[LabelClusterUID]; ok && v != clusterUID {
		return nil, NewError("list", "containers", clusterUID, KindInvalid,
			fmt.Errorf("selector names cluster UID %q, not %q", v, clusterUID))
	}
	sel[LabelClusterUID] = clusterUID
	all, err := rt.List(ctx, sel)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, m := range all {
		if BelongsTo(m.Labels, clusterUID) && MatchesSelector(m.Labels, sel) {
			out = append(out, m)
		}
	}
	return out, nil
}
