package containermachinepool

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
)

// m builds a member: age orders creation, flags are "o" outdated, "p"
// provisioned, "d" delete-annotated, "x" deleting, "f" failed for good,
// "k" its diagnostics kept, "w" young and awaiting its Machine.
func m(name string, age int, flags string) member {
	cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{
		Name: name, CreationTimestamp: metav1.NewTime(time.Unix(int64(1000-age), 0)),
	}}
	mem := member{cm: cm, machine: &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name}}}
	for _, f := range flags {
		switch f {
		case 'o':
			mem.outdated = true
		case 'p':
			cm.Status.Initialization.Provisioned = ptr.To(true)
		case 'd':
			mem.machine.Annotations = map[string]string{clusterv1.DeleteMachineAnnotation: ""}
		case 'x':
			mem.machine.DeletionTimestamp = ptr.To(metav1.Now())
		case 'f':
			mem.failed = "Registered=False TimedOut"
		case 'k':
			mem.diagnosed = true
		case 'w':
			mem.awaitingMachine = true
		}
	}
	return mem
}

func TestComputePlan(t *testing.T) {
	def := resolveStrategy(expinfrav1.RollingUpdate{}, 3)
	for _, tc := range []struct {
		name    string
		members []member
		desired int
		st      strategy
		create  int
		deleted string
		// diagnosed are the machines to diagnose first; "[]" when unset.
		diagnosed string
	}{
		{"scale up from zero", nil, 3, def, 3, "[]", ""},
		{"steady", []member{m("a", 3, "p"), m("b", 2, "p"), m("c", 1, "p")}, 3, def, 0, "[]", ""},
		{"scale down deletes the oldest", []member{m("a", 3, "p"), m("b", 2, "p"), m("c", 1, "p")}, 1, def, 0, "[a b]", ""},
		{"annotation first", []member{m("a", 3, "p"), m("b", 2, "p"), m("c", 1, "pd")}, 2, def, 0, "[c]", ""},
		{"deleting ones are not counted", []member{m("a", 3, "px"), m("b", 2, "p")}, 2, def, 1, "[]", ""},
		{"rollout surges first", []member{m("a", 3, "po"), m("b", 2, "po"), m("c", 1, "po")}, 3, def, 1, "[]", ""},
		{"rollout keeps an unprovisioned surge machine", []member{m("a", 3, "po"), m("b", 2, "po"), m("c", 1, "po"), m("n", 0, "")}, 3, def, 0, "[]", ""},
		{"rollout deletes one outdated per provisioned new", []member{m("a", 3, "po"), m("b", 2, "po"), m("c", 1, "po"), m("n", 0, "p")}, 3, def, 1, "[a]", ""},
		{"unprovisioned outdated go at once", []member{m("a", 3, "o"), m("b", 2, "p"), m("c", 1, "p")}, 3, def, 1, "[a]", ""},
		// A ClusterClass upgrade: the template, then the version a second
		// later. The surge machine made for the template has no Machine
		// yet; deleting it would leave Cluster API an orphan Machine over
		// maxSurge, so it waits, and nothing more is made meanwhile.
		{"an outdated machine awaiting its Machine is kept", []member{m("a", 3, "po"), m("b", 1, "ow")}, 1, def, 0, "[]", ""},
		{"maxUnavailable without surge", []member{m("a", 3, "po"), m("b", 2, "po")}, 2,
			resolveStrategy(expinfrav1.RollingUpdate{MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromString("50%"))}, 2), 1, "[a]", ""},

		// Failed members: never counted, replaced within the bounds, deleted
		// only once diagnosed.
		{"a failed member is diagnosed, not deleted, and replaced", []member{m("a", 3, "p"), m("b", 2, "pf"), m("c", 1, "p")}, 3, def, 1, "[]", "[b]"},
		{"a diagnosed failed member is deleted and replaced", []member{m("a", 3, "p"), m("b", 2, "pfk"), m("c", 1, "p")}, 3, def, 1, "[b]", ""},
		{"an undiagnosed failed member still counts towards maxSurge", []member{m("a", 4, "p"), m("b", 3, "pf"), m("c", 2, "p"), m("n", 1, "")}, 3, def, 0, "[]", "[b]"},
		{"two failed, surge 1: one replacement at a time", []member{m("a", 3, "p"), m("b", 2, "f"), m("c", 1, "pf")}, 3, def, 1, "[]", "[b c]"},
		{"two failed and diagnosed: both deleted, both replaced", []member{m("a", 3, "p"), m("b", 2, "fk"), m("c", 1, "pfk")}, 3, def, 2, "[b c]", ""},
		{"a failed member is not an excess: healthy ones stay", []member{m("a", 3, "p"), m("b", 2, "p"), m("c", 1, "p"), m("d", 0, "pf")}, 3, def, 0, "[]", "[d]"},
		{"maxUnavailable never holds a failed member", []member{m("a", 2, "p"), m("b", 1, "pfk")}, 2,
			resolveStrategy(expinfrav1.RollingUpdate{MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}, 2), 1, "[b]", ""},
		{"maxSurge 0: the failed member goes first, then its replacement", []member{m("a", 2, "p"), m("b", 1, "pf")}, 2,
			resolveStrategy(expinfrav1.RollingUpdate{MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromInt32(1))}, 2), 0, "[]", "[b]"},
		{"a failed outdated member goes as failed", []member{m("a", 2, "po"), m("b", 1, "pofk")}, 2, def, 2, "[b]", ""},
		{"scale down with a failed member", []member{m("a", 3, "p"), m("b", 2, "p"), m("c", 1, "pfk")}, 1, def, 0, "[c a]", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := computePlan(tc.members, tc.desired, tc.st, domains{})
			var names, diagnose []string
			for _, d := range p.delete {
				names = append(names, d.name())
			}
			for _, d := range p.diagnose {
				diagnose = append(diagnose, d.name())
			}
			if tc.diagnosed == "" {
				tc.diagnosed = "[]"
			}
			if p.create != tc.create || fmt.Sprint(names) != tc.deleted || fmt.Sprint(diagnose) != tc.diagnosed {
				t.Fatalf("create %d delete %v diagnose %v, want create %d delete %s diagnose %s", p.create, names, diagnose, tc.create, tc.deleted, tc.diagnosed)
			}
			if !p.empty() != (p.create > 0 || len(p.delete) > 0 || len(p.diagnose) > 0) {
				t.Fatalf("empty() = %v for %+v", p.empty(), p)
			}
			// Never more than maxSurge over: what stays plus what is
			// created.
			active := 0
			for _, mem := range tc.members {
				if !mem.deleting() {
					active++
				}
			}
			if after := active - len(p.delete) + p.create; p.create > 0 && after > tc.desired+tc.st.maxSurge {
				t.Fatalf("%d machines after the plan, more than %d+%d", after, tc.desired, tc.st.maxSurge)
			}
		})
	}
}

// in puts mem in failure domain domain.
func in(domain string, mem member) member {
	mem.domain = domain
	return mem
}

// TestFailureDomains: new members go to the listed domain with the fewest
// members that stay (the first by name on a tie), only to those the
// Cluster reports while it reports any of them, and to none without a
// list; scale-in takes from the most populated domain, an unlisted one
// first, the oldest on a tie.
func TestFailureDomains(t *testing.T) {
	def := resolveStrategy(expinfrav1.RollingUpdate{}, 3)
	ab := []string{"fd-b", "fd-a"}
	cluster := func(names ...string) *clusterv1.Cluster {
		c := &clusterv1.Cluster{}
		for _, n := range names {
			c.Status.FailureDomains = append(c.Status.FailureDomains, clusterv1.FailureDomain{Name: n})
		}
		return c
	}
	for _, tc := range []struct {
		name    string
		members []member
		desired int
		listed  []string
		cluster *clusterv1.Cluster
		// created are the domains of the machines created, deleted the
		// machines deleted in order.
		created, deleted string
	}{
		{"none listed: the provider places", nil, 2, nil, cluster("fd-a", "fd-b"), "[ ]", "[]"},
		{"from zero, alternating by name", nil, 3, ab, cluster("fd-a", "fd-b", "fd-c"), "[fd-a fd-b fd-a]", "[]"},
		{"never a domain not listed", []member{in("fd-c", m("c", 1, "p"))}, 3, ab, cluster("fd-a", "fd-b", "fd-c"), "[fd-a fd-b]", "[]"},
		{"to the least populated", []member{in("fd-a", m("a", 2, "p")), in("fd-a", m("b", 1, "p"))}, 5, ab, cluster("fd-a", "fd-b"), "[fd-b fd-b fd-a]", "[]"},
		{"the Cluster has not reported: all listed", nil, 2, ab, nil, "[fd-a fd-b]", "[]"},
		{"a lost domain gets no new member", []member{in("fd-a", m("a", 1, "p"))}, 3, ab, cluster("fd-a"), "[fd-a fd-a]", "[]"},
		{"every listed domain lost: pinned as asked", nil, 2, ab, cluster("fd-c"), "[fd-a fd-b]", "[]"},
		{"a duplicate listed domain counts once", nil, 3, []string{"fd-a", "fd-a", "fd-b"}, nil, "[fd-a fd-b fd-a]", "[]"},
		{"outdated members do not count", []member{in("fd-a", m("a", 3, "po")), in("fd-b", m("b", 2, "po")), in("fd-a", m("n", 0, "p"))}, 2, ab, cluster("fd-a", "fd-b"),
			"[fd-b]", "[a]"},
		{"a failed member is replaced in the emptiest domain", []member{in("fd-a", m("a", 2, "p")), in("fd-b", m("b", 1, "pfk"))}, 2, ab, cluster("fd-a", "fd-b"),
			"[fd-b]", "[b]"},

		{"scale-in from the most populated, not the oldest", []member{in("fd-a", m("a", 3, "p")), in("fd-b", m("b", 2, "p")), in("fd-b", m("c", 1, "p"))}, 2, ab, nil,
			"[]", "[b]"},
		{"scale-in evens out, oldest first on a tie", []member{
			in("fd-a", m("a1", 6, "p")), in("fd-a", m("a2", 5, "p")), in("fd-a", m("a3", 4, "p")),
			in("fd-b", m("b1", 3, "p")), in("fd-b", m("b2", 2, "p")), in("fd-a", m("a4", 1, "p")),
		}, 2, ab, nil, "[]", "[a1 a2 a3 b1]"},
		{"scale-in takes an unlisted domain first", []member{in("fd-a", m("a", 3, "p")), in("fd-b", m("b", 2, "p")), in("fd-c", m("c", 1, "p"))}, 2, ab, nil,
			"[]", "[c]"},
		{"a member in no domain is unlisted", []member{in("fd-a", m("a", 3, "p")), in("fd-b", m("b", 2, "p")), m("c", 1, "p")}, 2, ab, nil,
			"[]", "[c]"},
		{"the delete-machine annotation still goes first", []member{in("fd-a", m("a", 3, "p")), in("fd-a", m("b", 2, "p")), in("fd-b", m("c", 1, "pd"))}, 2, ab, nil,
			"[]", "[c]"},
		{"without domains, the oldest", []member{m("a", 3, "p"), m("b", 2, "p"), m("c", 1, "p")}, 1, nil, nil, "[]", "[a b]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := computePlan(tc.members, tc.desired, def, newDomains(tc.listed, tc.cluster))
			var deleted []string
			for _, d := range p.delete {
				deleted = append(deleted, d.name())
			}
			if len(p.domains) != p.create {
				t.Fatalf("%d domains for %d machines to create", len(p.domains), p.create)
			}
			if got := fmt.Sprint(p.domains); got != tc.created || fmt.Sprint(deleted) != tc.deleted {
				t.Fatalf("created in %s, deleted %v; want created in %s, deleted %s", got, deleted, tc.created, tc.deleted)
			}
		})
	}
}

func TestResolveStrategy(t *testing.T) {
	if got := resolveStrategy(expinfrav1.RollingUpdate{}, 10); got != (strategy{maxSurge: 1, maxUnavailable: 0}) {
		t.Fatalf("defaults: %+v", got)
	}
	got := resolveStrategy(expinfrav1.RollingUpdate{MaxSurge: ptr.To(intstr.FromString("25%")), MaxUnavailable: ptr.To(intstr.FromString("25%"))}, 10)
	if got != (strategy{maxSurge: 3, maxUnavailable: 2}) {
		t.Fatalf("percentages: %+v", got)
	}
	if got := resolveStrategy(expinfrav1.RollingUpdate{MaxSurge: ptr.To(intstr.FromInt32(0))}, 10); got.maxSurge != 1 {
		t.Fatalf("both zero must surge 1: %+v", got)
	}
}

func TestFailure(t *testing.T) {
	cond := func(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg}
	}
	for _, tc := range []struct {
		name       string
		cm         []metav1.Condition
		machine    []metav1.Condition // nil: no Machine yet
		want       string             // substring of the reason; "" for none
		byHealthCk bool
	}{
		{"healthy", []metav1.Condition{cond(infrav1.LaunchedCondition, metav1.ConditionTrue, infrav1.SucceededReason, "")}, []metav1.Condition{}, "", false},
		{"waiting is not failing", []metav1.Condition{cond(infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.WaitingForBootstrapDataReason, "")}, nil, "", false},
		{"stopped is not failing", []metav1.Condition{cond(infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.StoppedReason, "")}, nil, "", false},
		{"container gone", []metav1.Condition{cond(infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.ContainerMissingReason, "gone")}, nil,
			"Launched=False ContainerMissing: gone", false},
		{"registration timed out", []metav1.Condition{cond(infrav1.RegisteredCondition, metav1.ConditionFalse, infrav1.TimedOutReason, "no Node")}, []metav1.Condition{},
			"Registered=False TimedOut: no Node", false},
		{"health check leaves it to the owner", nil, []metav1.Condition{
			cond(clusterv1.MachineHealthCheckSucceededCondition, metav1.ConditionFalse, clusterv1.MachineHealthCheckUnhealthyNodeReason, "Node Ready Unknown for 5m"),
			cond(clusterv1.MachineOwnerRemediatedCondition, metav1.ConditionFalse, clusterv1.MachineOwnerRemediatedWaitingForRemediationReason, ""),
		}, "MachineHealthCheck found the Machine unhealthy: Node Ready Unknown for 5m", true},
		{"health check remediates externally", nil, []metav1.Condition{
			cond(clusterv1.MachineHealthCheckSucceededCondition, metav1.ConditionFalse, clusterv1.MachineHealthCheckUnhealthyNodeReason, ""),
		}, "", false},
		{"health check recovered", nil, []metav1.Condition{
			cond(clusterv1.MachineHealthCheckSucceededCondition, metav1.ConditionTrue, clusterv1.MachineHealthCheckSucceededReason, ""),
			cond(clusterv1.MachineOwnerRemediatedCondition, metav1.ConditionFalse, clusterv1.MachineOwnerRemediatedWaitingForRemediationReason, ""),
		}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := &infrav1.ContainerMachine{}
			cm.Status.Conditions = tc.cm
			var machine *clusterv1.Machine
			if tc.machine != nil {
				machine = &clusterv1.Machine{}
				machine.Status.Conditions = tc.machine
			}
			got, byHealthCheck := failure(cm, machine)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) || byHealthCheck != tc.byHealthCk {
				t.Fatalf("failure = %q, %v; want %q, %v", got, byHealthCheck, tc.want, tc.byHealthCk)
			}
		})
	}
}
