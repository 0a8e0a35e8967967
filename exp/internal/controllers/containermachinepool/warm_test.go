package containermachinepool

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// wm builds a warm machine: age orders creation, domain is its failure
// domain, flags are "b" booted (its container runs), "o" outdated, "f"
// failed for good, "x" deleting.
func wm(name string, age int, domain, flags string) member {
	cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{
		Name: name, CreationTimestamp: metav1.NewTime(time.Unix(int64(1000-age), 0)),
	}}
	w := member{cm: cm, domain: domain}
	for _, f := range flags {
		switch f {
		case 'b':
			cm.Status.Conditions = []metav1.Condition{{Type: infrav1.ContainerRunningCondition, Status: metav1.ConditionTrue}}
		case 'o':
			w.outdated = true
		case 'f':
			w.failed = "Launched=False LaunchFailed"
		case 'x':
			cm.DeletionTimestamp = ptr.To(metav1.Now())
		}
	}
	return w
}

func memberNames(ms []member) string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.name())
	}
	return fmt.Sprint(out)
}

func TestComputeWarmPlan(t *testing.T) {
	none := domains{}
	two := newDomains([]string{"a", "b"}, nil)
	for _, tc := range []struct {
		name       string
		warm       []member
		size       int
		newDomains []string
		settled    bool
		fd         domains
		// want: promoted, cold domains, created domains, deleted.
		promote, cold, create, deleted string
	}{
		{"an empty pool fills its warm pool", nil, 3, nil, true, none, "[]", "[]", "[  ]", "[]"},
		{"a pool coming up does not warm", nil, 3, nil, false, none, "[]", "[]", "[]", "[]"},
		{"a full warm pool does nothing", []member{wm("w1", 2, "", "b"), wm("w2", 1, "", "b")}, 2, nil, true, none, "[]", "[]", "[]", "[]"},
		{"a scale-out takes booted warm machines first, then the oldest",
			[]member{wm("old", 3, "", ""), wm("w2", 1, "", "b"), wm("w1", 2, "", "b")}, 3, []string{"", ""}, false, none,
			"[w1 w2]", "[]", "[]", "[]"},
		{"a scale-out beyond the warm pool creates the rest cold",
			[]member{wm("w1", 2, "", "b")}, 1, []string{"", "", ""}, false, none,
			"[w1]", "[ ]", "[]", "[]"},
		{"promotion keeps to the failure domain asked for",
			[]member{wm("wa", 2, "a", "b"), wm("wb", 1, "b", "b")}, 2, []string{"b", "b"}, false, two,
			"[wb]", "[b]", "[]", "[]"},
		{"outdated and failed warm machines go, and are not promoted",
			[]member{wm("out", 3, "", "bo"), wm("bad", 2, "", "f"), wm("ok", 1, "", "b")}, 2, []string{""}, false, none,
			"[ok]", "[]", "[]", "[out bad]"},
		{"warm machines being deleted are neither counted nor deleted again",
			[]member{wm("gone", 2, "", "bx")}, 1, nil, true, none, "[]", "[]", "[]", "[]"},
		{"a smaller warm pool deletes the unbooted and the youngest first",
			[]member{wm("w1", 3, "", "b"), wm("w2", 2, "", "b"), wm("cold", 4, "", "")}, 1, nil, true, none,
			"[]", "[]", "[]", "[w2 cold]"},
		{"refilled warm machines spread over the failure domains",
			[]member{wm("wa", 1, "a", "b")}, 3, nil, true, two, "[]", "[]", "[b a]", "[]"},
		{"size zero empties the warm pool", []member{wm("w1", 1, "", "b")}, 0, nil, true, none, "[]", "[]", "[]", "[w1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := computeWarmPlan(tc.warm, tc.size, tc.newDomains, tc.settled, tc.fd)
			if got := memberNames(p.promote); got != tc.promote {
				t.Errorf("promote %s, want %s", got, tc.promote)
			}
			if got := fmt.Sprint(p.cold); got != tc.cold && (len(p.cold) != 0 || tc.cold != "[]") {
				t.Errorf("cold %q, want %q", got, tc.cold)
			}
			if got := fmt.Sprint(p.create); got != tc.create && (len(p.create) != 0 || tc.create != "[]") {
				t.Errorf("create %q, want %q", got, tc.create)
			}
			if got := memberNames(p.delete); got != tc.deleted {
				t.Errorf("delete %s, want %s", got, tc.deleted)
			}
		})
	}
}

func TestSettled(t *testing.T) {
	ready := func(name string) member {
		w := wm(name, 1, "", "")
		w.cm.Status.Conditions = []metav1.Condition{{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue}}
		return w
	}
	for _, tc := range []struct {
		name    string
		members []member
		desired int
		want    bool
	}{
		{"no members, none desired", nil, 0, true},
		{"every member Ready", []member{ready("a"), ready("b")}, 2, true},
		{"a member coming up", []member{ready("a"), wm("b", 1, "", "b")}, 2, false},
		{"fewer than desired", []member{ready("a")}, 2, false},
		{"a member being deleted", []member{ready("a"), wm("b", 1, "", "x")}, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := settled(tc.members, tc.desired); got != tc.want {
				t.Errorf("settled = %v, want %v", got, tc.want)
			}
		})
	}
}
