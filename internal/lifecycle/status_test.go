package lifecycle

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	fakeruntime "github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/hostcapacity"
)

func TestSetReadyCondition(t *testing.T) {
	type cond struct {
		t      string
		status metav1.ConditionStatus
		reason string
	}
	ok := func(t string) cond { return cond{t, metav1.ConditionTrue, infrav1.SucceededReason} }
	running := cond{infrav1.ContainerRunningCondition, metav1.ConditionTrue, infrav1.RunningReason}
	all := []cond{ok(infrav1.LaunchedCondition), running, ok(infrav1.BootstrappedCondition), ok(infrav1.RegisteredCondition), ok(infrav1.InitializedCondition)}
	with := func(c cond) []cond {
		out := append([]cond(nil), all...)
		for i := range out {
			if out[i].t == c.t {
				out[i] = c
			}
		}
		return out
	}
	testCases := []struct {
		name       string
		conds      []cond
		wantStatus metav1.ConditionStatus
		wantReason string
		terminal   bool
		wantPhase  infrav1.MachinePhase
	}{
		{name: "nothing yet", wantStatus: metav1.ConditionFalse, wantReason: infrav1.InProgressReason},
		{name: "every phase done", conds: all, wantStatus: metav1.ConditionTrue, wantReason: infrav1.SucceededReason, wantPhase: infrav1.MachinePhaseRunning},
		{name: "launched, not yet known to run", conds: []cond{ok(infrav1.LaunchedCondition)}, wantStatus: metav1.ConditionFalse, wantReason: infrav1.InProgressReason},
		{name: "a stopped container", conds: with(cond{infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.StoppedReason}),
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.StoppedReason, wantPhase: infrav1.MachinePhaseStopped},
		{name: "a restarting container", conds: with(cond{infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.RestartingReason}),
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.RestartingReason, wantPhase: infrav1.MachinePhaseStopped},
		{name: "back, but the Node not yet", conds: with(cond{infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.NodeNotReadyReason}),
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.NodeNotReadyReason, wantPhase: infrav1.MachinePhaseStopped},
		{name: "the engine away", conds: with(cond{infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.EngineUnreachableReason}),
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.EngineUnreachableReason, wantPhase: infrav1.MachinePhaseStopped},
		{name: "the container gone", conds: with(cond{infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.ContainerMissingReason}),
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.ContainerMissingReason, terminal: true},
		{name: "waiting for host capacity", conds: []cond{{infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.WaitingForHostCapacityReason}},
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.WaitingForHostCapacityReason},
		{name: "a terminal phase wins over a stopped container", conds: append(with(cond{infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.StoppedReason}),
			cond{infrav1.InitializedCondition, metav1.ConditionFalse, infrav1.TimedOutReason}),
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.TimedOutReason, terminal: true},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			cm := &infrav1.ContainerMachine{}
			for _, c := range tc.conds {
				setCondition(cm, start, c.t, c.status, c.reason, "")
			}
			SetReadyCondition(cm, start)
			ready := conditions.Get(cm, infrav1.ReadyCondition)
			if ready.Status != tc.wantStatus || ready.Reason != tc.wantReason {
				t.Fatalf("want Ready %s/%s, got %s/%s (%s)", tc.wantStatus, tc.wantReason, ready.Status, ready.Reason, ready.Message)
			}
			if got := TerminalCondition(cm) != nil; got != tc.terminal {
				t.Fatalf("want terminal %v, got %v", tc.terminal, got)
			}
			if tc.wantPhase != "" && DerivePhase(cm) != tc.wantPhase {
				t.Fatalf("want phase %s, got %s", tc.wantPhase, DerivePhase(cm))
			}
			if got := DerivePhase(cm) == infrav1.MachinePhaseFailed; got != tc.terminal {
				t.Fatalf("want phase Failed only when terminal, got %s", DerivePhase(cm))
			}
		})
	}
}

func TestRunningCondition(t *testing.T) {
	started := start.Add(time.Hour)
	c := &container.Machine{Name: cpName, Started: started}
	node := func(status corev1.ConditionStatus, heartbeat time.Time) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: cpName}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.NewTime(heartbeat), LastTransitionTime: metav1.NewTime(start),
		}}}}
	}
	testCases := []struct {
		name       string
		node       *corev1.Node
		wasRunning bool
		want       metav1.ConditionStatus
	}{
		{"running on, Node Ready", node(corev1.ConditionTrue, started.Add(time.Minute)), true, metav1.ConditionTrue},
		{"back, Node reported Ready since the start", node(corev1.ConditionTrue, started.Add(10*time.Second)), false, metav1.ConditionTrue},
		{"back, Node reported in the same second", node(corev1.ConditionTrue, started.Truncate(time.Second)), false, metav1.ConditionTrue},
		{"back, Node's Ready from before the restart", node(corev1.ConditionTrue, started.Add(-time.Minute)), false, metav1.ConditionFalse},
		{"back, Node reported but not Ready", node(corev1.ConditionFalse, started.Add(10*time.Second)), false, metav1.ConditionFalse},
		{"restarted unseen: Node's Ready from before", node(corev1.ConditionTrue, started.Add(-time.Minute)), true, metav1.ConditionFalse},
		{"running on, Node NotReady is the Node's health", node(corev1.ConditionFalse, started.Add(time.Minute)), true, metav1.ConditionTrue},
		{"running on, workload cluster out of reach", nil, true, metav1.ConditionTrue},
		{"back, workload cluster out of reach", nil, false, metav1.ConditionFalse},
		{"back, Node without a Ready condition", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: cpName}}, false, metav1.ConditionFalse},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			status, reason, msg := runningCondition(c, tc.node, tc.wasRunning)
			if status != tc.want {
				t.Fatalf("want %s, got %s/%s: %s", tc.want, status, reason, msg)
			}
			if status == metav1.ConditionFalse && (reason != infrav1.NodeNotReadyReason || !strings.Contains(msg, cpName)) {
				t.Fatalf("want NodeNotReady naming the container, got %s: %s", reason, msg)
			}
		})
	}
}

// initialized runs a machine through every phase to Ready, with a Node
// that reports Ready now.
func initialized(t *testing.T, e *env) *MachineScope {
	t.Helper()
	ctx := context.Background()
	s := e.scope()
	bootstrap(t, e, s)
	node := readyNode(cpName)
	node.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(e.clock.Now())
	if err := e.workload.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	pass(t, e, s)
	SetReadyCondition(s.ContainerMachine, e.clock.Now())
	wantCondition(t, s, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	return s
}

// pass runs every phase once, as a reconcile does, on a fresh view of the
// container and Node.
func pass(t *testing.T, e *env, s *MachineScope) {
	t.Helper()
	s.Container, s.Node = nil, nil
	if _, err := NewMachine(e.deps).Reconcile(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	SetReadyCondition(s.ContainerMachine, e.clock.Now())
}

// heartbeat makes the Node's kubelet report Ready (or not) now.
func (e *env) heartbeat(t *testing.T, status corev1.ConditionStatus) {
	t.Helper()
	node := &corev1.Node{}
	if err := e.workload.Get(context.Background(), types.NamespacedName{Name: cpName}, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status,
		LastHeartbeatTime: metav1.NewTime(e.clock.Now()), LastTransitionTime: metav1.NewTime(e.clock.Now())}}
	if err := e.workload.Status().Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
}

func TestAStoppedContainerComesBackWithItsNode(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	s := initialized(t, e)
	cm := s.ContainerMachine

	e.clock.Step(time.Minute)
	if err := e.runtime.Stop(ctx, cpName, clusterOwner.ForMachine("cp-0"), 0); err != nil {
		t.Fatal(err)
	}
	pass(t, e, s)
	wantCondition(t, s, infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.StoppedReason)
	wantCondition(t, s, infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.StoppedReason)
	wantCondition(t, s, infrav1.LaunchedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	if TerminalCondition(cm) != nil || DerivePhase(cm) == infrav1.MachinePhaseFailed {
		t.Fatalf("a stopped container failed the machine: %v", TerminalCondition(cm))
	}
	if !ptrTrue(cm.Status.Initialization.Provisioned) {
		t.Fatal("provisioned went back: the contract keeps it once set")
	}
	if _, err := e.runtime.Inspect(ctx, cpName); err != nil {
		t.Fatal(err)
	}
	if m, _ := e.runtime.Inspect(ctx, cpName); m.State == container.StateRunning {
		t.Fatal("CAPCT started the stopped container itself")
	}
	e.wantEvent(t, "Warning "+infrav1.StoppedReason)

	// It starts again: until the kubelet reports since, the Node's old
	// Ready is stale.
	e.clock.Step(time.Minute)
	if err := e.runtime.Start(ctx, cpName, clusterOwner.ForMachine("cp-0")); err != nil {
		t.Fatal(err)
	}
	pass(t, e, s)
	wantCondition(t, s, infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.NodeNotReadyReason)
	wantCondition(t, s, infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.NodeNotReadyReason)
	e.clock.Step(5 * time.Second)
	e.heartbeat(t, corev1.ConditionFalse)
	pass(t, e, s)
	wantCondition(t, s, infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.NodeNotReadyReason)
	e.clock.Step(5 * time.Second)
	e.heartbeat(t, corev1.ConditionTrue)
	pass(t, e, s)
	wantCondition(t, s, infrav1.ContainerRunningCondition, metav1.ConditionTrue, infrav1.RunningReason)
	wantCondition(t, s, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	e.wantEvent(t, "Normal "+infrav1.RunningReason)
}

// wantEvent drains the recorded events up to one that contains want.
func (e *env) wantEvent(t *testing.T, want string) {
	t.Helper()
	for {
		select {
		case ev := <-e.recorder.Events:
			if strings.Contains(ev, want) {
				return
			}
		default:
			t.Fatalf("no %q event", want)
		}
	}
}

func TestARestartBetweenTwoPassesIsNoticed(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	s := initialized(t, e)
	e.clock.Step(time.Minute)
	// The engine restarts it faster than CAPCT looks.
	if err := e.runtime.Stop(ctx, cpName, clusterOwner.ForMachine("cp-0"), 0); err != nil {
		t.Fatal(err)
	}
	if err := e.runtime.Start(ctx, cpName, clusterOwner.ForMachine("cp-0")); err != nil {
		t.Fatal(err)
	}
	pass(t, e, s)
	wantCondition(t, s, infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.NodeNotReadyReason)
	e.clock.Step(5 * time.Second)
	e.heartbeat(t, corev1.ConditionTrue)
	pass(t, e, s)
	wantCondition(t, s, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.SucceededReason)
}

func TestARestartingContainerIsReported(t *testing.T) {
	m := &container.Machine{Name: cpName, State: container.StateRestarting}
	if reason, _ := notRunning(m); reason != infrav1.RestartingReason {
		t.Fatalf("want Restarting, got %s", reason)
	}
	for _, state := range []container.MachineState{container.StateExited, container.StateCreated, container.StatePaused, container.StateDead} {
		m.State = state
		if reason, msg := notRunning(m); reason != infrav1.StoppedReason || !strings.Contains(msg, string(state)) {
			t.Fatalf("%s: want Stopped naming the state, got %s: %s", state, reason, msg)
		}
	}
}

var unreachable = container.NewError("inspect", "container", cpName, container.KindUnreachable, errors.New("connection refused"))

func TestTheEngineBeingAwayFailsNothing(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	s := initialized(t, e)

	e.runtime.FailNext(fakeruntime.OpInspect, unreachable)
	pass(t, e, s)
	wantCondition(t, s, infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.EngineUnreachableReason)
	wantCondition(t, s, infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.EngineUnreachableReason)
	if TerminalCondition(s.ContainerMachine) != nil {
		t.Fatal("an unreachable engine failed the machine")
	}
	// The engine answers again and the container never stopped (the
	// engine's live restore): the Node reported since it started, so the
	// machine is back at once.
	pass(t, e, s)
	wantCondition(t, s, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.SucceededReason)

	// A launch whose engine is away past the launch timeout is not failed;
	// its timeout counts again once the engine answers.
	s2 := e.scope()
	s2.ContainerMachine.Name = "cp-1"
	l := &Launch{e.deps}
	e.runtime.FailNext(fakeruntime.OpCreateMachine, errors.New("image not found, say"))
	res, err := l.Reconcile(ctx, s2)
	if err != nil || res.RequeueAfter == 0 {
		t.Fatalf("want a retry, got %v %v", res, err)
	}
	wantCondition(t, s2, infrav1.LaunchedCondition, metav1.ConditionUnknown, infrav1.FailedReason)
	e.clock.Step(LaunchTimeout)
	e.runtime.FailNext(fakeruntime.OpInspect, unreachable)
	res, err = l.Reconcile(ctx, s2)
	if err != nil || res.RequeueAfter == 0 {
		t.Fatalf("want a retry while the engine is away, got %v %v", res, err)
	}
	wantCondition(t, s2, infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.EngineUnreachableReason)
	e.runtime.FailNext(fakeruntime.OpCreateMachine, container.NewError("create", "container", "c1-cp-1", container.KindUnreachable, errors.New("no answer")))
	if _, err := l.Reconcile(ctx, s2); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s2, infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.EngineUnreachableReason)
	// Back: a failure now starts a fresh timeout rather than ending it.
	e.runtime.FailNext(fakeruntime.OpCreateMachine, errors.New("image not found, say"))
	if _, err := l.Reconcile(ctx, s2); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s2, infrav1.LaunchedCondition, metav1.ConditionUnknown, infrav1.FailedReason)
	if _, err := l.Reconcile(ctx, s2); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s2, infrav1.LaunchedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
}

// heldHost is a host with no room: every Admit holds the node, and
// announces the first time.
type heldHost struct{ calls int }

func (h *heldHost) Admit(context.Context, types.NamespacedName, string, container.Role) (hostcapacity.Decision, error) {
	h.calls++
	return hostcapacity.Decision{
		Shortfall: &hostcapacity.Shortfall{Sysctl: hostcapacity.InotifyInstances, Limit: 128, InUse: 120, Nodes: 6, Need: 13},
		Announce:  h.calls == 1,
	}, nil
}

func TestLaunchWaitsForHostCapacity(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	host := &heldHost{}
	e.deps.HostCapacity = host
	s := e.scope()
	for range 2 {
		res, err := (&Launch{e.deps}).Reconcile(ctx, s)
		if err != nil || res.RequeueAfter == 0 {
			t.Fatalf("want a wait with a requeue, got %v %v", res, err)
		}
	}
	wantCondition(t, s, infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.WaitingForHostCapacityReason)
	if msg := condition(s, infrav1.LaunchedCondition).Message; !strings.Contains(msg, "sysctl -w fs.inotify.max_user_instances=") {
		t.Fatalf("the condition does not say how to raise the limit: %s", msg)
	}
	if _, err := e.runtime.Inspect(ctx, s.ContainerName()); !container.IsNotFound(err) {
		t.Fatalf("a container was created without room: %v", err)
	}
	if len(e.recorder.Events) != 1 {
		t.Fatalf("want one event for two held passes, got %d", len(e.recorder.Events))
	}
	if ev := <-e.recorder.Events; !strings.Contains(ev, "Warning "+infrav1.WaitingForHostCapacityReason) {
		t.Fatalf("unexpected event %q", ev)
	}
	// Waiting counts toward no timeout.
	e.clock.Step(LaunchTimeout)
	e.deps.HostCapacity = nil
	if _, err := (&Launch{e.deps}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.LaunchedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
}

// TestLaunchOnAnotherEngineIgnoresThisHostsCapacity places a machine on a
// ContainerEngine while the manager's own host is full: the gate measures
// this host, not the engine's, so the machine launches.
func TestLaunchOnAnotherEngineIgnoresThisHostsCapacity(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	host := &heldHost{}
	e.deps.HostCapacity = host
	s := e.scope()
	s.Engine = "engine-b"
	if _, err := (&Launch{e.deps}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.LaunchedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	if host.calls != 0 {
		t.Fatalf("the manager's host was asked %d times for a machine on another engine", host.calls)
	}
}

func TestDerivePhase(t *testing.T) {
	set := func(cm *infrav1.ContainerMachine, types ...string) {
		for _, ty := range types {
			setCondition(cm, start, ty, metav1.ConditionTrue, infrav1.SucceededReason, "")
		}
	}
	testCases := []struct {
		name string
		true []string
		want infrav1.MachinePhase
	}{
		{"nothing yet", nil, infrav1.MachinePhasePending},
		{"launched", []string{infrav1.LaunchedCondition}, infrav1.MachinePhaseLaunched},
		{"bootstrapped", []string{infrav1.LaunchedCondition, infrav1.BootstrappedCondition}, infrav1.MachinePhaseBootstrapped},
		{"registered", []string{infrav1.LaunchedCondition, infrav1.BootstrappedCondition, infrav1.RegisteredCondition}, infrav1.MachinePhaseRegistered},
		{"running", phaseConditions, infrav1.MachinePhaseRunning},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			cm := &infrav1.ContainerMachine{}
			set(cm, tc.true...)
			if got := DerivePhase(cm); got != tc.want {
				t.Fatalf("want %s, got %s", tc.want, got)
			}
		})
	}
}
