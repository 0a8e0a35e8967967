package containermachinepool

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/labels/format"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// The warm pool (spec.warmPool) keeps machines booted ahead of a
// scale-out. A warm machine is a ContainerMachine of the pool labelled
// infrav1.WarmPoolLabel instead of Cluster API's machine-pool-name label:
// Cluster API lists a pool's machines by that label only, so it makes no
// Machine for a warm one, and the ContainerMachine controller launches it
// without bootstrap data (it has none and no Machine to wait for) and goes
// no further. A scale-out promotes warm machines before it creates any:
// one apply swaps the labels, Cluster API makes the Machine, and the
// machine bootstraps from the pool's data in the container that already
// runs. Everything is API objects and containers with a restart policy,
// so a warm pool survives manager and engine restarts as every machine
// does.

// warmMembers lists the pool's warm machines from reader, judged like
// members: outdated, failed, failure domain.
func (r *Reconciler) warmMembers(ctx context.Context, reader client.Reader, s *scope) ([]member, error) {
	cms := &infrav1.ContainerMachineList{}
	if err := reader.List(ctx, cms, client.InNamespace(s.pool.Namespace), client.MatchingLabels{
		clusterv1.ClusterNameLabel: s.clusterName(),
		infrav1.WarmPoolLabel:      format.MustFormatValue(s.machinePoolName),
	}); err != nil {
		return nil, fmt.Errorf("failed to list the warm ContainerMachines of ContainerMachinePool %s: %w", klog.KObj(s.pool), err)
	}
	var out []member
	for i := range cms.Items {
		cm := &cms.Items[i]
		if !ownedBy(cm, s.pool) || !infrav1.IsWarm(cm) {
			continue
		}
		out = append(out, s.judge(cm, nil))
	}
	return out, nil
}

// booted is a warm machine whose container runs: ready to be promoted.
func (m member) booted() bool {
	return conditions.IsTrue(m.cm, infrav1.ContainerRunningCondition)
}

// warmPlan is what one reconcile does to the pool's warm machines.
type warmPlan struct {
	// promote are the warm machines that join the pool, one for each of
	// the first new members the pool's plan asks for.
	promote []member
	// cold are the failure domains of the new members no warm machine
	// was found for: they are created as before.
	cold []string
	// create are the failure domains of the warm machines to create.
	create []string
	// delete are the warm machines to delete.
	delete []member
}

func (p warmPlan) empty() bool {
	return len(p.promote) == 0 && len(p.create) == 0 && len(p.delete) == 0
}

// computeWarmPlan decides what happens to the warm machines warm when the
// pool's plan creates members in newDomains (one failure domain each) and
// the pool keeps size warm machines. It is pure, like computePlan.
//
// Rules:
//   - Warm machines being deleted are ignored.
//   - Failed and outdated warm machines are deleted: a warm machine is
//     nobody's Node yet, so there is nothing to drain or keep.
//   - Each new member takes a usable warm machine of its failure domain
//     (any, when the pool asks for none): booted ones first, then the
//     oldest, name breaking ties. Only the new members none is found for
//     are created.
//   - Warm machines beyond size are deleted, those furthest from booted
//     and the youngest first.
//   - Missing warm machines are created only when settled (no member is
//     created, deleted or coming up): a container's creation and boot
//     cost the host's CPU, which a scale-out needs for the nodes joining.
//     They go to the failure domains spreadOver picks.
func computeWarmPlan(warm []member, size int, newDomains []string, settled bool, fd domains) warmPlan {
	var p warmPlan
	var usable []member
	for _, m := range warm {
		switch {
		case m.deleting():
		case m.failed != "" || m.outdated:
			p.delete = append(p.delete, m)
		default:
			usable = append(usable, m)
		}
	}
	sort.SliceStable(usable, func(i, j int) bool { return promoteBefore(usable[i], usable[j]) })
	for _, domain := range newDomains {
		i := slices.IndexFunc(usable, func(m member) bool { return domain == "" || m.domain == domain })
		if i < 0 {
			p.cold = append(p.cold, domain)
			continue
		}
		p.promote = append(p.promote, usable[i])
		usable = append(usable[:i:i], usable[i+1:]...)
	}
	if len(usable) > size {
		p.delete = append(p.delete, usable[size:]...)
		usable = usable[:size]
	}
	if settled && len(usable) < size {
		kept := map[string]int{}
		for _, m := range usable {
			kept[m.domain]++
		}
		p.create = spreadOver(fd, kept, size-len(usable))
	}
	return p
}

// promoteBefore orders warm machines for promotion: booted first, then
// the oldest, then by name.
func promoteBefore(a, b member) bool {
	if a.booted() != b.booted() {
		return a.booted()
	}
	ta, tb := a.cm.CreationTimestamp, b.cm.CreationTimestamp
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return a.name() < b.name()
}

// settled reports whether the pool's members are as desired and all
// Ready: nothing is being created, deleted or coming up.
func settled(members []member, desired int) bool {
	n := 0
	for _, m := range members {
		if m.deleting() || !conditions.IsTrue(m.cm, infrav1.ReadyCondition) {
			return false
		}
		n++
	}
	return n == desired
}

// warmReady counts the warm machines ready to be promoted, for
// status.warmReplicas.
func warmReady(warm []member) int {
	n := 0
	for _, m := range warm {
		if !m.deleting() && m.failed == "" && !m.outdated && m.booted() {
			n++
		}
	}
	return n
}
