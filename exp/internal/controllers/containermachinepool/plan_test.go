package containermachinepool

import (
	"fmt"
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
// provisioned, "d" delete-annotated, "x" deleting.
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
	}{
		{"scale up from zero", nil, 3, def, 3, "[]"},
		{"steady", []member{m("a", 3, "p"), m("b", 2, "p"), m("c", 1, "p")}, 3, def, 0, "[]"},
		{"scale down deletes the oldest", []member{m("a", 3, "p"), m("b", 2, "p"), m("c", 1, "p")}, 1, def, 0, "[a b]"},
		{"annotation first", []member{m("a", 3, "p"), m("b", 2, "p"), m("c", 1, "pd")}, 2, def, 0, "[c]"},
		{"deleting ones are not counted", []member{m("a", 3, "px"), m("b", 2, "p")}, 2, def, 1, "[]"},
		{"rollout surges first", []member{m("a", 3, "po"), m("b", 2, "po"), m("c", 1, "po")}, 3, def, 1, "[]"},
		{"rollout keeps an unprovisioned surge machine", []member{m("a", 3, "po"), m("b", 2, "po"), m("c", 1, "po"), m("n", 0, "")}, 3, def, 0, "[]"},
		{"rollout deletes one outdated per provisioned new", []member{m("a", 3, "po"), m("b", 2, "po"), m("c", 1, "po"), m("n", 0, "p")}, 3, def, 1, "[a]"},
		{"unprovisioned outdated go at once", []member{m("a", 3, "o"), m("b", 2, "p"), m("c", 1, "p")}, 3, def, 1, "[a]"},
		{"maxUnavailable without surge", []member{m("a", 3, "po"), m("b", 2, "po")}, 2,
			resolveStrategy(expinfrav1.RollingUpdate{MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromString("50%"))}, 2), 1, "[a]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := computePlan(tc.members, tc.desired, tc.st)
			var names []string
			for _, d := range p.delete {
				names = append(names, d.name())
			}
			if p.create != tc.create || fmt.Sprint(names) != tc.deleted {
				t.Fatalf("create %d delete %v, want create %d delete %s", p.create, names, tc.create, tc.deleted)
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
