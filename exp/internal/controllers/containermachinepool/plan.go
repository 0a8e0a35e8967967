package containermachinepool

import (
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/lifecycle"
)

// member is one machine of the pool: its ContainerMachine and, once Cluster
// API created it, the Machine that owns it.
type member struct {
	cm      *infrav1.ContainerMachine
	machine *clusterv1.Machine
	// outdated is true when the machine no longer matches the pool's
	// template or Kubernetes version.
	outdated bool
	// failed says why the machine will not work again, "" while it may
	// (see failure).
	failed string
	// byHealthCheck is true when a MachineHealthCheck asked for the
	// machine to be remediated (see failure).
	byHealthCheck bool
	// diagnosed is true once a failed machine's diagnostics are kept: only
	// then may it be deleted, and its container with it.
	diagnosed bool
	// awaitingMachine says Cluster API has not made the member's Machine
	// yet, and the member is young: it is not deleted until it has one.
	awaitingMachine bool
}

// awaitMachineFor bounds how long a member without a Machine is kept from
// deletion (member.awaitingMachine).
const awaitMachineFor = 30 * time.Second

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

// available is what the pool counts on: a provisioned machine that has not
// failed. status.initialization.provisioned stays true for good once set,
// so a machine that failed after it was provisioned must not count.
func (m member) available() bool { return m.provisioned() && m.failed == "" }

// failure says why a machine will not work again, or "" while it may, and
// whether a MachineHealthCheck said so:
//   - a lifecycle condition of the ContainerMachine that failed for good
//     (lifecycle.TerminalCondition: a launch or bootstrap that gave up, a
//     registration or initialization that timed out, a container gone);
//   - Cluster API's contract for the owners of Machines: a
//     MachineHealthCheck that found the Machine unhealthy and leaves the
//     remediation to its owner sets HealthCheckSucceeded and
//     OwnerRemediated to False. Cluster API's MachinePool controller does
//     not act on it for MachinePool Machines; the infrastructure pool
//     does, by deleting the Machine as a MachineSet would.
func failure(cm *infrav1.ContainerMachine, machine *clusterv1.Machine) (reason string, byHealthCheck bool) {
	if c := lifecycle.TerminalCondition(cm); c != nil {
		return fmt.Sprintf("%s=False %s: %s", c.Type, c.Reason, c.Message), false
	}
	if machine != nil && conditions.IsFalse(machine, clusterv1.MachineHealthCheckSucceededCondition) &&
		conditions.IsFalse(machine, clusterv1.MachineOwnerRemediatedCondition) {
		reason := "a MachineHealthCheck found the Machine unhealthy"
		if c := conditions.Get(machine, clusterv1.MachineHealthCheckSucceededCondition); c.Message != "" {
			reason += ": " + c.Message
		} else if c.Reason != "" {
			reason += ": " + c.Reason
		}
		return reason, true
	}
	return "", false
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
	// diagnose are failed machines whose diagnostics must be kept before
	// they may be deleted.
	diagnose []member
}

// empty is true when the plan changes nothing.
func (p plan) empty() bool { return p.create == 0 && len(p.delete) == 0 && len(p.diagnose) == 0 }

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
//   - A failed machine is never available nor up to date, so a replacement
//     is created for it as for a missing one. It is deleted once its
//     diagnostics are kept (diagnosed), and until then it is listed to be
//     diagnosed and still counts towards desired+maxSurge. Deleting it
//     takes nothing away from the available machines, so maxUnavailable
//     never holds it.
//   - Deletion candidates are ordered: failed first, then the
//     delete-machine annotation, then outdated machines, then the oldest
//     (name breaks ties).
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
		if m.available() {
			available++
		}
	}
	minAvailable := desired - st.maxUnavailable
	// Up-to-date machines beyond the desired replicas are a scale down.
	// Outdated and failed machines are not counted here: all of them go,
	// and the machines created beside them are a surge, not an excess.
	upToDateExcess := -desired
	for _, m := range active {
		if upToDate(m) {
			upToDateExcess++
		}
	}

	var p plan
	remaining := make([]member, 0, len(active))
	for _, m := range active {
		if m.failed != "" {
			if m.diagnosed {
				p.delete = append(p.delete, m)
			} else {
				p.diagnose = append(p.diagnose, m)
				remaining = append(remaining, m)
			}
			continue
		}
		wanted := (m.outdated || upToDateExcess > 0) && !m.awaitingMachine
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

	good := 0
	for _, m := range remaining {
		if upToDate(m) {
			good++
		}
	}
	p.create = max(0, min(desired-good, desired+st.maxSurge-len(remaining)))
	return p
}

// upToDate is a machine the pool keeps: it matches the pool and has not
// failed.
func upToDate(m member) bool { return !m.outdated && m.failed == "" }

// deleteBefore orders deletion candidates.
func deleteBefore(a, b member) bool {
	if (a.failed != "") != (b.failed != "") {
		return a.failed != ""
	}
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
