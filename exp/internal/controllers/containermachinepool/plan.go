package containermachinepool

import (
	"sort"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
)

// member is one machine of the pool: its ContainerMachine and, once Cluster
// API created it, the Machine that owns it.
type member struct {
	cm      *infrav1.ContainerMachine
	machine *clusterv1.Machine
	// outdated is true when the machine no longer matches the pool's
	// template or Kubernetes version.
	outdated bool
}

func (m member) name() string { return m.cm.Name }

// deleting is true once the ContainerMachine or its Machine is going away:
// such a machine no longer counts towards the desired replicas.
func (m member) deleting() bool {
	return !m.cm.DeletionTimestamp.IsZero() || (m.machine != nil && !m.machine.DeletionTimestamp.IsZero())
}

// provisioned is the readiness the rolling update waits for: the
// ContainerMachine's container runs and its bootstrap data ran.
func (m member) provisioned() bool {
	return ptr.Deref(m.cm.Status.Initialization.Provisioned, false)
}

// deleteRequested is Cluster API's delete-machine annotation, on the Machine
// (where users and the autoscaler put it) or on the ContainerMachine.
func (m member) deleteRequested() bool {
	if m.machine != nil {
		if _, ok := m.machine.Annotations[clusterv1.DeleteMachineAnnotation]; ok {
			return true
		}
	}
	_, ok := m.cm.Annotations[clusterv1.DeleteMachineAnnotation]
	return ok
}

// plan is what one reconcile does to the pool's machines.
type plan struct {
	// create is how many ContainerMachines to create.
	create int
	// delete are the machines to delete, in order.
	delete []member
}

// strategy is a resolved RollingUpdate.
type strategy struct {
	maxSurge       int
	maxUnavailable int
}

// resolveStrategy turns the pool's strategy into numbers for desired
// replicas: maxSurge defaults to 1 and rounds up, maxUnavailable defaults to
// 0 and rounds down (as for Deployments). Both zero would deadlock a
// rollout, so maxSurge becomes 1 then.
func resolveStrategy(s expinfrav1.RollingUpdate, desired int) strategy {
	surge := scaled(s.MaxSurge, intstr.FromInt32(1), desired, true)
	unavailable := scaled(s.MaxUnavailable, intstr.FromInt32(0), desired, false)
	if surge == 0 && unavailable == 0 {
		surge = 1
	}
	return strategy{maxSurge: surge, maxUnavailable: unavailable}
}

func scaled(v *intstr.IntOrString, def intstr.IntOrString, desired int, roundUp bool) int {
	if v == nil {
		v = &def
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, desired, roundUp)
	if err != nil || n < 0 {
		n, _ = intstr.GetScaledValueFromIntOrPercent(&def, desired, roundUp)
	}
	return n
}

// computePlan decides which machines to delete and how many to create. It
// is pure: the same members give the same plan, which is what makes a
// reconcile after a crash pick up where the last one stopped.
//
// Rules, in order:
//   - Machines already being deleted are ignored; they are neither counted
//     nor deleted again.
//   - Deletion candidates are ordered: delete-machine annotation first,
//     then outdated machines, then the oldest (name breaks ties).
//   - Every outdated machine is deleted, and so are up-to-date machines
//     beyond the desired replicas; but a provisioned machine only while at
//     least desired-maxUnavailable provisioned machines stay, so the pool
//     never drops below its available replicas because of a rollout. A
//     surge machine that is not provisioned yet is never taken for excess.
//   - Up-to-date machines are created until there are desired of them,
//     without the pool exceeding desired+maxSurge machines.
func computePlan(members []member, desired int, st strategy) plan {
	var active []member
	for _, m := range members {
		if !m.deleting() {
			active = append(active, m)
		}
	}
	sort.SliceStable(active, func(i, j int) bool { return deleteBefore(active[i], active[j]) })

	available := 0
	for _, m := range active {
		if m.provisioned() {
			available++
		}
	}
	minAvailable := desired - st.maxUnavailable
	// Up-to-date machines beyond the desired replicas are a scale down.
	// Outdated machines are not counted here: all of them go, and the
	// machines created beside them are a surge, not an excess.
	upToDateExcess := -desired
	for _, m := range active {
		if !m.outdated {
			upToDateExcess++
		}
	}

	var p plan
	remaining := make([]member, 0, len(active))
	for _, m := range active {
		wanted := m.outdated || upToDateExcess > 0
		if wanted && m.provisioned() && available-1 < minAvailable {
			// Deleting it would leave too few available machines: wait
			// until replacements are provisioned.
			wanted = false
		}
		if !wanted {
			remaining = append(remaining, m)
			continue
		}
		p.delete = append(p.delete, m)
		if !m.outdated {
			upToDateExcess--
		}
		if m.provisioned() {
			available--
		}
	}

	upToDate := 0
	for _, m := range remaining {
		if !m.outdated {
			upToDate++
		}
	}
	p.create = max(0, min(desired-upToDate, desired+st.maxSurge-len(remaining)))
	return p
}

// deleteBefore orders deletion candidates.
func deleteBefore(a, b member) bool {
	if a.deleteRequested() != b.deleteRequested() {
		return a.deleteRequested()
	}
	if a.outdated != b.outdated {
		return a.outdated
	}
	ta, tb := a.cm.CreationTimestamp, b.cm.CreationTimestamp
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return a.name() < b.name()
}
