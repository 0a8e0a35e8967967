package lifecycle

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	fakeruntime "github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/hostcapacity"
)

func TestSetReadyCondition(t *testing.T) {
	type cond struct {
		t       string
		status  metav1.ConditionStatus
		reason  string
		message string
	}
	ok := func(t string) cond { return cond{t, metav1.ConditionTrue, infrav1.SucceededReason, ""} }
	running := cond{infrav1.ContainerRunningCondition, metav1.ConditionTrue, infrav1.RunningReason, ""}
	all := []cond{ok(infrav1.LaunchedCondition), running, ok(infrav1.BootstrappedCondition), ok(infrav1.RegisteredCondition), ok(infrav1.InitializedCondition)}
	with := func(cs ...cond) []cond {
		out := append([]cond(nil), all...)
		for _, c := range cs {
			for i := range out {
				if out[i].t == c.t {
					out[i] = c
				}
			}
		}
		return out
	}
	stopped := cond{infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.StoppedReason, "Container c1-cp-0 is exited"}
	bootstrapping := []cond{ok(infrav1.LaunchedCondition), running,
		{infrav1.BootstrappedCondition, metav1.ConditionUnknown, infrav1.InProgressReason, "Attempt 1 of 3 is running"},
		{infrav1.RegisteredCondition, metav1.ConditionFalse, infrav1.WaitingForBootstrapReason, "Waiting for the bootstrap data to run"},
		{infrav1.InitializedCondition, metav1.ConditionFalse, infrav1.WaitingForRegistrationReason, "Waiting for the Node to register"}}
	testCases := []struct {
		name        string
		conds       []cond
		deleting    bool
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantMessage string
		terminal    bool
		wantPhase   infrav1.MachinePhase
	}{
		{name: "nothing yet: the phases behind the first are left out", wantStatus: metav1.ConditionFalse, wantReason: infrav1.InProgressReason,
			wantMessage: "* Launched: Condition not yet reported"},
		{name: "every phase done", conds: all, wantStatus: metav1.ConditionTrue, wantReason: infrav1.SucceededReason, wantPhase: infrav1.MachinePhaseRunning},
		{name: "launched, not yet known to run", conds: []cond{ok(infrav1.LaunchedCondition)}, wantStatus: metav1.ConditionFalse, wantReason: infrav1.InProgressReason,
			wantMessage: "* ContainerRunning: Condition not yet reported"},
		{name: "every phase done but the last not reported", conds: all[:4], wantStatus: metav1.ConditionFalse, wantReason: infrav1.InProgressReason,
			wantMessage: "* Initialized: Condition not yet reported"},
		{name: "a waiting reason with every phase before True still counts", conds: with(cond{infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.WaitingForLaunchReason, "Waiting for the container to run"}),
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.WaitingForLaunchReason, wantMessage: "* Bootstrapped: Waiting for the container to run"},
		{name: "a bootstrap in progress is False, not Unknown, and hides the phases waiting for it", conds: bootstrapping,
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.InProgressReason, wantMessage: "* Bootstrapped: Attempt 1 of 3 is running", wantPhase: infrav1.MachinePhaseLaunched},
		{name: "a stopped container", conds: with(stopped),
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.StoppedReason, wantMessage: "* ContainerRunning: Container c1-cp-0 is exited", wantPhase: infrav1.MachinePhaseStopped},
		{name: "a restarting container, without a message, shows its reason", conds: with(cond{infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.RestartingReason, ""}),
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.RestartingReason, wantMessage: "* ContainerRunning: Restarting", wantPhase: infrav1.MachinePhaseStopped},
		{name: "back, but the Node not yet", conds: with(cond{infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.NodeNotReadyReason, ""}),
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.NodeNotReadyReason, wantMessage: "* ContainerRunning: NodeNotReady", wantPhase: infrav1.MachinePhaseStopped},
		{name: "the engine away", conds: with(cond{infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.EngineUnreachableReason, ""}),
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.EngineUnreachableReason, wantMessage: "* ContainerRunning: EngineUnreachable", wantPhase: infrav1.MachinePhaseStopped},
		{name: "two phases not True that wait for nothing both show, the first names the reason",
			conds:      with(stopped, cond{infrav1.InitializedCondition, metav1.ConditionFalse, infrav1.NodeNotReadyReason, "Node cp-0 is not Ready"}),
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.StoppedReason, wantPhase: infrav1.MachinePhaseStopped,
			wantMessage: "* ContainerRunning: Container c1-cp-0 is exited\n* Initialized: Node cp-0 is not Ready"},
		{name: "the container gone", conds: with(cond{infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.ContainerMissingReason, "Container c1-cp-0 is gone"}),
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.ContainerMissingReason, wantMessage: "* Launched: Container c1-cp-0 is gone", terminal: true},
		{name: "a launch that gave up hides the phases waiting for it",
			conds: []cond{{infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.LaunchFailedReason, "No container within 5m0s"},
				{infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.WaitingForLaunchReason, "Waiting for the container to run"}},
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.LaunchFailedReason, wantMessage: "* Launched: No container within 5m0s", terminal: true},
		{name: "waiting for host capacity", conds: []cond{{infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.WaitingForHostCapacityReason, ""}},
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.WaitingForHostCapacityReason, wantMessage: "* Launched: WaitingForHostCapacity"},
		{name: "a terminal phase wins over a stopped container, which still shows",
			conds:      with(stopped, cond{infrav1.InitializedCondition, metav1.ConditionFalse, infrav1.TimedOutReason, "Node not Ready within 15m0s"}),
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.TimedOutReason, terminal: true,
			wantMessage: "* ContainerRunning: Container c1-cp-0 is exited\n* Initialized: Node not Ready within 15m0s"},
		{name: "a multi-line message is indented as Cluster API does",
			conds:      with(cond{infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.BootstrapFailedReason, "kubeadm join failed\npreflight: port 10250 in use"}),
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.BootstrapFailedReason, terminal: true,
			wantMessage: "* Bootstrapped:\n  * kubeadm join failed\n  * preflight: port 10250 in use"},
		{name: "deleting comes first and keeps what else is wrong", deleting: true,
			conds:      with(cond{infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.EngineUnreachableReason, "Engine default did not answer"}),
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.DeletingReason, wantPhase: infrav1.MachinePhaseDeleting,
			wantMessage: "* Deleting: Deleting the container\n* ContainerRunning: Engine default did not answer"},
		{name: "deleting wins over a terminal phase", deleting: true, conds: with(cond{infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.ContainerMissingReason, "gone"}),
			wantStatus: metav1.ConditionFalse, wantReason: infrav1.DeletingReason, terminal: true, wantPhase: infrav1.MachinePhaseDeleting,
			wantMessage: "* Deleting: Deleting the container\n* Launched: gone"},
		{name: "deleting a ready machine", deleting: true, conds: all, wantStatus: metav1.ConditionFalse, wantReason: infrav1.DeletingReason,
			wantMessage: "* Deleting: Deleting the container", wantPhase: infrav1.MachinePhaseDeleting},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			cm := &infrav1.ContainerMachine{}
			if tc.deleting {
				cm.DeletionTimestamp = ptr.To(metav1.NewTime(start))
			}
			for _, c := range tc.conds {
				setCondition(cm, start, c.t, c.status, c.reason, c.message)
			}
			SetReadyCondition(cm, start.Add(time.Minute))
			ready := conditions.Get(cm, infrav1.ReadyCondition)
			if ready.Status != tc.wantStatus || ready.Reason != tc.wantReason {
				t.Fatalf("want Ready %s/%s, got %s/%s (%s)", tc.wantStatus, tc.wantReason, ready.Status, ready.Reason, ready.Message)
			}
			if ready.Message != tc.wantMessage {
				t.Fatalf("want Ready's message\n%s\ngot\n%s", tc.wantMessage, ready.Message)
			}
			if !ready.LastTransitionTime.Time.Equal(start.Add(time.Minute).Truncate(time.Second)) {
				t.Fatalf("want Ready's transition at the clock's time, got %s", ready.LastTransitionTime)
			}
			if got := TerminalCondition(cm) != nil; got != tc.terminal {
				t.Fatalf("want terminal %v, got %v", tc.terminal, got)
			}
			if tc.wantPhase != "" && DerivePhase(cm) != tc.wantPhase {
				t.Fatalf("want phase %s, got %s", tc.wantPhase, DerivePhase(cm))
			}
			if got := DerivePhase(cm) == infrav1.MachinePhaseFailed; got != (tc.terminal && !tc.deleting) {
				t.Fatalf("want phase Failed only when terminal, got %s", DerivePhase(cm))
			}
		})
	}
}

// TestSetReadyConditionKeepsItsTransitionTime checks that Ready's transition
// time moves only when its status does, as metav1's conditions do, though
// its reason and message change with every phase.
func TestSetReadyConditionKeepsItsTransitionTime(t *testing.T) {
	cm := &infrav1.ContainerMachine{}
	SetReadyCondition(cm, start)
	setCondition(cm, start, infrav1.LaunchedCondition, metav1.ConditionTrue, infrav1.SucceededReason, "")
	SetReadyCondition(cm, start.Add(time.Minute))
	ready := conditions.Get(cm, infrav1.ReadyCondition)
	if ready.Reason != infrav1.InProgressReason || !ready.LastTransitionTime.Time.Equal(start.Truncate(time.Second)) {
		t.Fatalf("want Ready InProgress since the start, got %s since %s", ready.Reason, ready.LastTransitionTime)
	}
}

func TestTruncateMessage(t *testing.T) {
	// é's two bytes straddle the cut, which falls before it.
	straddling := strings.Repeat("a", maxConditionMessage-4) + "é" + "tail"
	testCases := []struct {
		name string
		in   string
		want string
	}{
		{"short", "fine", "fine"},
		{"at the limit", strings.Repeat("b", maxConditionMessage), strings.Repeat("b", maxConditionMessage)},
		{"over the limit", strings.Repeat("c", maxConditionMessage+1), strings.Repeat("c", maxConditionMessage-3) + "..."},
		{"never inside a character", straddling, strings.Repeat("a", maxConditionMessage-4) + "..."},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			got := truncateMessage(tc.in)
			if got != tc.want {
				t.Fatalf("want %d bytes ending %q, got %d bytes ending %q", len(tc.want), tc.want[max(0, len(tc.want)-8):], len(got), got[max(0, len(got)-8):])
			}
			if len(got) > maxConditionMessage || !utf8.ValidString(got) {
				t.Fatalf("want at most %d bytes of valid UTF-8, got %d", maxConditionMessage, len(got))
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
	if _, err := NewMachine(e.deps.config()).Reconcile(context.Background(), s); err != nil {
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
	if !ptr.Deref(cm.Status.Initialization.Provisioned, false) {
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
	l := e.deps.launch()
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
		res, err := e.deps.launch().Reconcile(ctx, s)
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
	if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
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
	e.onEngine(s, "engine-b", fakeruntime.New(nil))
	if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
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
