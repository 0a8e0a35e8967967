package realcluster

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

func node(name string, ready corev1.ConditionStatus, heartbeat time.Time) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: ready, Reason: "KubeletReady", LastHeartbeatTime: metav1.NewTime(heartbeat),
		}}
	}
	return n
}

func TestCountNodes(t *testing.T) {
	cp := node("c-control-plane-x", corev1.ConditionTrue, t0)
	md := node("c-md-0-a-b", corev1.ConditionTrue, t0)
	mp := node("c-mp-0-z", corev1.ConditionTrue, t0)
	mpNotReady := node("c-mp-0-y", corev1.ConditionFalse, t0)
	for _, tc := range []struct {
		name   string
		nodes  []corev1.Node
		md, mp int
		want   NodeCounts
		are    bool
	}{
		{"only the control plane", []corev1.Node{cp}, 0, 0, NodeCounts{1, 1, 0, 0}, true},
		{"one of each", []corev1.Node{cp, md, mp}, 1, 1, NodeCounts{3, 3, 1, 1}, true},
		{"a pool node not Ready", []corev1.Node{cp, mp, mpNotReady}, 0, 2, NodeCounts{2, 3, 0, 2}, false},
		{"one pool node too many", []corev1.Node{cp, mp}, 0, 0, NodeCounts{2, 2, 0, 1}, false},
		{"a deployment node where a pool node is wanted", []corev1.Node{cp, md}, 0, 1, NodeCounts{2, 2, 1, 0}, false},
		{"no control plane", []corev1.Node{md}, 0, 0, NodeCounts{1, 1, 1, 0}, false},
		{"no Ready condition", []corev1.Node{node("c-control-plane-x", "", t0)}, 0, 0, NodeCounts{0, 1, 0, 0}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CountNodes(tc.nodes)
			if got != tc.want {
				t.Errorf("CountNodes = %+v, want %+v", got, tc.want)
			}
			if got.Are(tc.md, tc.mp) != tc.are {
				t.Errorf("%+v.Are(%d, %d) = %v, want %v", got, tc.md, tc.mp, !tc.are, tc.are)
			}
		})
	}
}

func TestStaleNodes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []corev1.Node
		want  []string
	}{
		{"Ready, posted after", []corev1.Node{node("a", corev1.ConditionTrue, t0.Add(time.Second))}, nil},
		{"Ready, posted at the same second", []corev1.Node{node("a", corev1.ConditionTrue, t0)}, nil},
		{"Ready, posted before", []corev1.Node{node("a", corev1.ConditionTrue, t0.Add(-time.Second))},
			[]string{"a Ready=True (KubeletReady), last heartbeat 2026-12-03T09:59:59Z"}},
		{"not Ready", []corev1.Node{node("a", corev1.ConditionUnknown, t0.Add(time.Minute))},
			[]string{"a Ready=Unknown (KubeletReady), last heartbeat 2026-12-03T10:01:00Z"}},
		{"no Ready condition", []corev1.Node{node("a", "", t0)}, []string{"a has no Ready condition"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := StaleNodes(tc.nodes, t0); !slices.Equal(got, tc.want) {
				t.Errorf("StaleNodes = %q, want %q", got, tc.want)
			}
		})
	}
}

func pod(uid string, started *time.Time, ready corev1.ConditionStatus) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "qs-server", UID: types.UID(uid)}}
	p.Status.Phase = corev1.PodRunning
	if started != nil {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{
			RestartCount: 1,
			State:        corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(*started)}},
		}}
	}
	if ready != "" {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}
	}
	return p
}

func TestRestartedPod(t *testing.T) {
	after, before := t0.Add(5*time.Second), t0.Add(-time.Hour)
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want []string
	}{
		{"the same pod, started again, Ready", pod("u1", &after, corev1.ConditionTrue), nil},
		{"started at the stop's second", pod("u1", &t0, corev1.ConditionTrue), nil},
		{"another pod", pod("u2", &after, corev1.ConditionTrue), []string{"qs-server is not the pod of before"}},
		{"not started again", pod("u1", &before, corev1.ConditionTrue), []string{"qs-server has not run again since the restart"}},
		{"not running", pod("u1", nil, corev1.ConditionFalse),
			[]string{"qs-server has not run again since the restart", "qs-server is not Ready"}},
		{"not Ready", pod("u1", &after, corev1.ConditionFalse), []string{"qs-server is not Ready"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RestartedPod(tc.pod, "u1", t0); !slices.Equal(got, tc.want) {
				t.Errorf("RestartedPod = %q, want %q", got, tc.want)
			}
		})
	}
}

func cond(t string, s metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: message}
}

func TestMachinePhase(t *testing.T) {
	long := "the container\n   exited " + strings.Repeat("x", 400)
	for _, tc := range []struct {
		name string
		m    infrav1.ContainerMachine
		want string
	}{
		{"nothing yet", infrav1.ContainerMachine{}, "Pending"},
		{"launched, bootstrap False", infrav1.ContainerMachine{Status: infrav1.ContainerMachineStatus{Conditions: []metav1.Condition{
			cond(infrav1.LaunchedCondition, metav1.ConditionTrue, "", ""), cond(infrav1.BootstrappedCondition, metav1.ConditionFalse, "", ""),
		}}}, "Launched"},
		{"the last True phase wins, whatever the conditions' order", infrav1.ContainerMachine{Status: infrav1.ContainerMachineStatus{Conditions: []metav1.Condition{
			cond(infrav1.InitializedCondition, metav1.ConditionTrue, "", ""), cond(infrav1.LaunchedCondition, metav1.ConditionTrue, "", ""),
			cond(infrav1.RegisteredCondition, metav1.ConditionTrue, "", ""),
		}}}, "Initialized"},
		{"failed, with Ready's message squeezed and cut at 300", infrav1.ContainerMachine{Status: infrav1.ContainerMachineStatus{
			Phase:      infrav1.MachinePhaseFailed,
			Conditions: []metav1.Condition{cond("Ready", metav1.ConditionFalse, "Failed", long)},
		}}, "Failed: " + ("the container exited " + strings.Repeat("x", 400))[:300]},
		{"deleting beats failed", infrav1.ContainerMachine{
			ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &metav1.Time{Time: t0}},
			Status:     infrav1.ContainerMachineStatus{Phase: infrav1.MachinePhaseFailed},
		}, "Deleting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := MachinePhase(&tc.m); got != tc.want {
				t.Errorf("MachinePhase = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestObjectState(t *testing.T) {
	conds := []metav1.Condition{
		cond("Available", metav1.ConditionTrue, "Available", ""),
		cond("Paused", metav1.ConditionFalse, "NotPaused", ""),
		cond("Deleting", metav1.ConditionFalse, "NotDeleting", ""),
		cond("Ready", metav1.ConditionTrue, "Ready", ""),
		cond("ContainerRunning", metav1.ConditionFalse, "EngineUnreachable", ""),
		cond("RemoteConnectionProbe", metav1.ConditionFalse, "ProbeFailed", ""),
	}
	for _, tc := range []struct {
		kind, phase, want string
	}{
		{"ContainerMachine", "Running", "Running Ready=True ContainerRunning=False(EngineUnreachable) RemoteConnectionProbe=False(ProbeFailed)"},
		{"ContainerCluster", "", "Ready=True ContainerRunning=False(EngineUnreachable) RemoteConnectionProbe=False(ProbeFailed)"},
		{"Cluster", "Provisioned", "Provisioned Available=True RemoteConnectionProbe=False(ProbeFailed)"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			if got := ObjectState(tc.kind, tc.phase, conds); got != tc.want {
				t.Errorf("ObjectState = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNodeAndPodState(t *testing.T) {
	n := node("a", corev1.ConditionFalse, t0)
	if got, want := NodeState(&n), "Ready=False(KubeletReady)"; got != want {
		t.Errorf("NodeState = %q, want %q", got, want)
	}
	if got, want := NodeState(&corev1.Node{}), ""; got != want {
		t.Errorf("NodeState of a Node without conditions = %q, want %q", got, want)
	}
	p := pod("u", &t0, corev1.ConditionTrue)
	if got, want := PodState(p), "Ready=True Running restarts=1"; got != want {
		t.Errorf("PodState = %q, want %q", got, want)
	}
	if got, want := PodState(&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}), "Pending restarts=0"; got != want {
		t.Errorf("PodState of a pending pod = %q, want %q", got, want)
	}
}

func TestTally(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"b", "a", "b"}, "1 a, 2 b"},
		{[]string{"Launched=False/WaitingForHostCapacity"}, "1 Launched=False/WaitingForHostCapacity"},
	} {
		if got := Tally(tc.in); got != tc.want {
			t.Errorf("Tally(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestLastLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"HTTP/1.0 200 OK\r\n\r\nhello from qs-server on n\r\n", "hello from qs-server on n"},
		{"hello\n", "hello"},
		{"", ""},
	} {
		if got := LastLine(tc.in); got != tc.want {
			t.Errorf("LastLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestTimeline(t *testing.T) {
	var tl Timeline
	steps := []struct {
		at            int
		object, state string
		change        bool
	}{
		{0, "engine", "answers", true},
		{0, "management API", "answers", true},
		{3, "engine", "answers", false},
		{3, "engine", "down", true},
		{3, "management API", "unreachable", true},
		{20, "engine", "answers", true},
		{31, "management API", "answers", true},
		{34, "management API", "answers", false},
	}
	for _, s := range steps {
		if _, changed := tl.Record(t0.Add(time.Duration(s.at)*time.Second), s.object, s.state); changed != s.change {
			t.Errorf("Record(+%d, %s, %s) changed = %v, want %v", s.at, s.object, s.state, changed, s.change)
		}
	}
	if at, ok := tl.First("management API", "answers", t0.Add(17*time.Second)); !ok || !at.Equal(t0.Add(31*time.Second)) {
		t.Errorf("First answer after +17 = %v, %v; want +31", at, ok)
	}
	if _, ok := tl.First("engine", "down", t0.Add(4*time.Second)); ok {
		t.Error("First found the engine down after +4, where it was not")
	}
	want := "  engine\n         +0s  answers\n         +3s  down\n        +20s  answers\n" +
		"  management API\n         +0s  answers\n         +3s  unreachable\n        +31s  answers\n"
	if got := tl.Table(t0); got != want {
		t.Errorf("Table:\n%s\nwant:\n%s", got, want)
	}
	if got, want := (Entry{At: t0, Object: "container a", State: "running"}).TSV(), "1796292000\tcontainer a\trunning\n"; got != want {
		t.Errorf("TSV = %q, want %q", got, want)
	}
}

func TestDuplicateCIDRs(t *testing.T) {
	tests := []struct {
		name   string
		owners map[string][]string
		want   []string
	}{
		{name: "nothing", owners: nil, want: nil},
		{name: "distinct", owners: map[string][]string{"a": {"10.244.1.0/24"}, "b": {"10.244.2.0/24", "fd00:1::/64"}}, want: nil},
		{name: "an owner listing one twice", owners: map[string][]string{"a": {"10.244.1.0/24", "10.244.1.0/24"}}, want: nil},
		{name: "empty values", owners: map[string][]string{"a": {""}, "b": {""}}, want: nil},
		{
			name:   "two owners, one CIDR",
			owners: map[string][]string{"node-b": {"10.244.1.0/24"}, "node-a": {"10.244.1.0/24"}, "node-c": {"10.244.3.0/24"}},
			want:   []string{"10.244.1.0/24 held by node-a, node-b"},
		},
		{
			name:   "the second family only",
			owners: map[string][]string{"a": {"10.244.1.0/24", "fd00:1::/64"}, "b": {"10.244.2.0/24", "fd00:1::/64"}},
			want:   []string{"fd00:1::/64 held by a, b"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DuplicateCIDRs(tc.owners); !slices.Equal(got, tc.want) {
				t.Errorf("DuplicateCIDRs = %q, want %q", got, tc.want)
			}
		})
	}
}
