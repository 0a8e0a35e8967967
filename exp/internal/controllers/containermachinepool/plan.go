package containermachinepool

import (
	"fmt"
	"maps"
	"slices"
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
	// domain is the failure domain the member is in (memberDomain); "" for
	// one the provider has not placed and the pool asked nothing of.
	domain string
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
	// domains are the failure domains of the machines to create, one per
	// machine (len create); "" leaves the choice to the machine provider.
	domains []string
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
//   - Among up-to-date machines that are equally deletable (not annotated),
//     the next to go is in the most populated failure domain, a domain the
//     MachinePool does not list counting as the most populated of all; on a
//     tie the oldest goes (byDomain).
//   - The created machines go to the failure domains spreadOver picks.
func computePlan(members []member, desired int, st strategy, fd domains) plan {
	var active []member
	for _, m := range members {
		if !m.deleting() {
			active = append(active, m)
		}
	}
	sort.SliceStable(active, func(i, j int) bool { return deleteBefore(active[i], active[j]) })
	active = byDomain(active, fd)

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
	kept := map[string]int{}
	for _, m := range remaining {
		if upToDate(m) {
			good++
			kept[m.domain]++
		}
	}
	p.create = max(0, min(desired-good, desired+st.maxSurge-len(remaining)))
	p.domains = spreadOver(fd, kept, p.create)
	return p
}

// domains are the failure domains a pool's members go to.
type domains struct {
	// listed are the MachinePool's spec.failureDomains. Empty: the pool
	// asks for none, and the machine provider places each member
	// (machineprovider.PlaceMachine spreads a cluster's machines over its
	// engines, and skips engines that do not answer).
	listed []string
	// reported are the failure domains the Cluster reports now
	// (status.failureDomains, from the ContainerCluster): an engine whose
	// host is lost is dropped from them.
	reported map[string]bool
}

// newDomains is the domains of a MachinePool's failureDomains and its
// Cluster's reported ones; cluster may be nil.
func newDomains(listed []string, cluster *clusterv1.Cluster) domains {
	d := domains{reported: map[string]bool{}}
	for _, name := range listed {
		if name != "" && !slices.Contains(d.listed, name) {
			d.listed = append(d.listed, name)
		}
	}
	sort.Strings(d.listed)
	if cluster != nil {
		for _, f := range cluster.Status.FailureDomains {
			d.reported[f.Name] = true
		}
	}
	return d
}

// candidates are the listed domains a new member may go to: those the
// Cluster reports, so that replacements for a lost engine's members go to
// the others; all listed when it reports none of them (the Cluster has
// not reported yet, or every listed domain is lost: the members then wait
// for theirs, pinned as asked).
func (d domains) candidates() []string {
	var out []string
	for _, name := range d.listed {
		if d.reported[name] {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return d.listed
	}
	return out
}

// spreadOver picks the failure domain of each of n new members: each goes
// to the candidate domain with the fewest members (kept counts the
// members that stay, by domain), the first by name on a tie. Without
// listed domains each is "": the machine provider places it.
func spreadOver(d domains, kept map[string]int, n int) []string {
	out := make([]string, n)
	candidates := d.candidates()
	if len(candidates) == 0 {
		return out
	}
	counts := maps.Clone(kept)
	if counts == nil {
		counts = map[string]int{}
	}
	for i := range out {
		best := candidates[0]
		for _, name := range candidates[1:] {
			if counts[name] < counts[best] {
				best = name
			}
		}
		out[i] = best
		counts[best]++
	}
	return out
}

// byDomain reorders the up-to-date, unannotated members at the end of
// sorted (the order deleteBefore gives) so that scale-in takes from the
// most populated failure domain first: each next one is the first, in
// sorted's order, of the domains with the most of them, a domain the
// MachinePool does not list going before any it lists. Without domains
// (every member in "") the order is sorted's: the oldest first.
func byDomain(sorted []member, d domains) []member {
	start := len(sorted)
	for start > 0 && plain(sorted[start-1]) {
		start--
	}
	tail := slices.Clone(sorted[start:])
	counts := map[string]int{}
	for _, m := range tail {
		counts[m.domain]++
	}
	// rank orders domains for deletion: unlisted ones first, then the
	// most populated.
	rank := func(domain string) (bool, int) {
		return len(d.listed) > 0 && !slices.Contains(d.listed, domain), counts[domain]
	}
	out := slices.Clone(sorted[:start])
	for len(tail) > 0 {
		pick := 0
		for i := 1; i < len(tail); i++ {
			bu, bn := rank(tail[pick].domain)
			iu, in := rank(tail[i].domain)
			if iu && !bu || iu == bu && in > bn {
				pick = i
			}
		}
		out = append(out, tail[pick])
		counts[tail[pick].domain]--
		tail = slices.Delete(tail, pick, pick+1)
	}
	return out
}

// plain is a member that nothing marks for deletion: not failed, not
// annotated, not outdated. Which of these go first is the failure
// domains' choice (byDomain).
func plain(m member) bool { return upToDate(m) && !m.deleteRequested() }

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
