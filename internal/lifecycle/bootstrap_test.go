package lifecycle

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	fakeruntime "github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/provisioning"
)

// joinData joins a node the way CABPK's data does: kubeadm, then the
// sentinel in the same shell string.
const joinData = `#cloud-config
write_files:
- path: /etc/hosts
  append: true
  content: "10.0.0.1 node\n"
runcmd:
- kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml && echo success > /run/cluster-api/bootstrap-success.complete
`

// kubeadm stands in for kubeadm join in the fake runtime: each run takes
// the next outcome (the last one repeats); a run that succeeds writes the
// sentinel, as the `&& echo success` of the data would. Runs are counted
// per container, and a run can be held until released.
type kubeadm struct {
	t        *testing.T
	mu       sync.Mutex
	outcomes []container.ExecResult
	runs     map[string]int
	hold     chan struct{}
	started  chan string
	// seen are starts read from started while waiting for another, in
	// whatever order the runs began.
	seen map[string]int
}

func (e *env) newKubeadm(outcomes ...container.ExecResult) *kubeadm {
	k := &kubeadm{t: e.t, outcomes: outcomes, runs: map[string]int{}, started: make(chan string, 16)}
	e.runtime.SetExecHandler(func(ctx context.Context, m container.Machine, _ map[string][]byte, in container.ExecInput, _ []byte) (container.ExecResult, bool) {
		if !strings.Contains(strings.Join(in.Cmd, " "), "kubeadm join") {
			return container.ExecResult{}, false
		}
		k.mu.Lock()
		k.runs[m.Name]++
		i := min(k.runs[m.Name], len(k.outcomes)) - 1
		res, hold := container.ExecResult{}, k.hold
		if i >= 0 {
			res = k.outcomes[i]
		}
		k.mu.Unlock()
		k.started <- m.Name
		if hold != nil {
			<-hold
		}
		if res.ExitCode == 0 {
			if err := e.runtime.WriteFile(ctx, m.Name, container.OwnerOf(m.Labels), provisioning.SentinelPath, []byte("success\n"), 0o644); err != nil {
				e.t.Error(err)
			}
		}
		return res, true
	})
	return k
}

func (k *kubeadm) count(name string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.runs[name]
}

// holdRuns makes the next runs wait until the returned func is called.
func (k *kubeadm) holdRuns() func() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.hold = make(chan struct{})
	var once sync.Once
	hold := k.hold
	return func() { once.Do(func() { close(hold) }) }
}

func (k *kubeadm) waitStarted(name string) {
	k.t.Helper()
	if k.seen == nil {
		k.seen = map[string]int{}
	}
	for {
		if k.seen[name] > 0 {
			k.seen[name]--
			return
		}
		select {
		case got := <-k.started:
			k.seen[got]++
		case <-time.After(10 * time.Second):
			k.t.Fatalf("kubeadm did not start in %s", name)
		}
	}
}

// notified waits until the runner notifies key.
func (e *env) notified(key types.NamespacedName) {
	e.t.Helper()
	for {
		select {
		case got := <-e.finished:
			if got == key {
				return
			}
		case <-time.After(10 * time.Second):
			e.t.Fatalf("%s was not notified", key)
		}
	}
}

// launchedNamed returns a scope per name, each machine's container launched.
func (e *env) launchedNamed(names ...string) []*MachineScope {
	var machines []*MachineScope
	for _, name := range names {
		machines = append(machines, e.launched(func(s *MachineScope) { s.ContainerMachine.Name = name }))
	}
	return machines
}

func (e *env) reconcileBootstrap(s *MachineScope) {
	e.t.Helper()
	if _, err := e.deps.bootstrap().Reconcile(context.Background(), s); err != nil {
		e.t.Fatal(err)
	}
}

// restartManager replaces the runner, as a new manager or leader starts
// with nothing in memory; the old one's goroutines end.
func (e *env) restartManager(maxInFlight int) {
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	deps := *e.deps
	deps.Bootstraps = NewBootstrapRunner(ctx, clock.RealClock{}, maxInFlight, func(k types.NamespacedName) { e.finished <- k })
	deps.Bootstraps.poll = 10 * time.Millisecond
	e.deps = &deps
}

func events(r *record.FakeRecorder) string {
	var all []string
	for {
		select {
		case ev := <-r.Events:
			all = append(all, ev)
		default:
			return strings.Join(all, "\n")
		}
	}
}

func TestBootstrapRetriesAFailureThatCanPass(t *testing.T) {
	e := newEnv(t, joinData)
	k := e.newKubeadm(
		container.ExecResult{ExitCode: 1, Stderr: []byte("[preflight] Running pre-flight checks\nerror execution phase preflight: [preflight] Some fatal errors occurred:\n\t[ERROR CRI]: container runtime is not running: output: rpc error: code = Unimplemented desc = unknown service runtime.v1.RuntimeService\n")},
		container.ExecResult{Stdout: []byte("This node has joined the cluster")},
	)
	s := e.scope()
	ctx := context.Background()
	if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(s.ContainerMachine)
	e.reconcileBootstrap(s)
	e.notified(key)
	e.reconcileBootstrap(s)
	c := condition(s, infrav1.BootstrappedCondition)
	if c.Status != metav1.ConditionUnknown || !strings.Contains(c.Message, "retrying (attempt 2 of 3)") ||
		!strings.Contains(c.Message, "containerd does not serve the CRI") || !strings.Contains(c.Message, "step 2 (kubeadm join) with exit code 1") {
		t.Fatalf("want the retry and its cause in the condition, got %s/%s: %s", c.Status, c.Reason, c.Message)
	}
	if TerminalCondition(s.ContainerMachine) != nil {
		t.Fatal("a failure that can pass must not be terminal")
	}
	e.notified(key)
	e.reconcileBootstrap(s)
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	if n := k.count(cpName); n != 2 {
		t.Fatalf("want kubeadm run twice, got %d", n)
	}
	hosts, err := e.runtime.ReadFile(ctx, cpName, clusterOwner.ForMachine("cp-0"), "/etc/hosts")
	if err != nil || string(hosts) != "10.0.0.1 node\n" {
		t.Fatalf("the append must apply once across attempts, got %q %v", hosts, err)
	}
	if evs := events(e.recorder); !strings.Contains(evs, "BootstrapRetry") || strings.Contains(evs, infrav1.BootstrapFailedReason) {
		t.Fatalf("want a BootstrapRetry event and no failure, got:\n%s", evs)
	}
}

func TestBootstrapStopsAtAFailureThatCannotPass(t *testing.T) {
	testCases := []struct {
		name string
		res  container.ExecResult
	}{
		{"kubeadm not found", container.ExecResult{ExitCode: 127, Stderr: []byte("sh: kubeadm: not found")}},
		{"a port in use", container.ExecResult{ExitCode: 1, Stderr: []byte("[ERROR Port-10250]: Port 10250 is in use")}},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, joinData)
			k := e.newKubeadm(tc.res)
			s := e.scope()
			if _, err := e.deps.launch().Reconcile(context.Background(), s); err != nil {
				t.Fatal(err)
			}
			e.reconcileBootstrap(s)
			e.notified(client.ObjectKeyFromObject(s.ContainerMachine))
			e.reconcileBootstrap(s)
			wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.BootstrapFailedReason)
			if msg := condition(s, infrav1.BootstrappedCondition).Message; !strings.Contains(msg, "cannot pass on a retry") || !strings.Contains(msg, string(tc.res.Stderr)) {
				t.Fatalf("want the reason and the output in the message, got %q", msg)
			}
			if n := k.count(cpName); n != 1 {
				t.Fatalf("want one run, got %d", n)
			}
		})
	}
}

func TestBootstrapGivesUpAfterTheLastAttempt(t *testing.T) {
	e := newEnv(t, joinData)
	k := e.newKubeadm(container.ExecResult{ExitCode: 1, Stderr: []byte("dial tcp 10.0.0.1:6443: connect: connection refused")})
	s := e.scope()
	if _, err := e.deps.launch().Reconcile(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(s.ContainerMachine)
	e.reconcileBootstrap(s)
	for range MaxBootstrapAttempts {
		e.notified(key)
		e.reconcileBootstrap(s)
	}
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.BootstrapFailedReason)
	msg := condition(s, infrav1.BootstrappedCondition).Message
	if !strings.Contains(msg, "No attempts are left") || !strings.Contains(msg, "10.0.0.1:6443 refused the connection") {
		t.Fatalf("unexpected message %q", msg)
	}
	if n := k.count(cpName); n != MaxBootstrapAttempts {
		t.Fatalf("want %d runs, got %d", MaxBootstrapAttempts, n)
	}
}

func TestBootstrapRunsOnceAcrossManagerRestarts(t *testing.T) {
	e := newEnv(t, joinData)
	k := e.newKubeadm(container.ExecResult{})
	release := k.holdRuns()
	defer release()
	s := e.scope()
	ctx := context.Background()
	if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(s.ContainerMachine)
	e.reconcileBootstrap(s)
	k.waitStarted(cpName)

	// A new manager finds the attempt running and only watches it, however
	// often it looks.
	for range 3 {
		e.restartManager(1)
		e.reconcileBootstrap(s)
		wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionUnknown, infrav1.InProgressReason)
	}
	release()
	e.notified(key)
	e.reconcileBootstrap(s)
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)

	// Another after the end reads the outcome from the marks, even with
	// the status lost, as after clusterctl move.
	e.restartManager(1)
	s2 := e.scope()
	s2.Container = s.Container
	e.reconcileBootstrap(s2)
	wantCondition(t, s2, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	if n := k.count(cpName); n != 1 {
		t.Fatalf("kubeadm ran %d times, want once", n)
	}
	// Nor was the attempt staged or launched again.
	launches := 0
	for _, c := range e.runtime.ExecCalls() {
		if _, ok := provisioning.ParseLaunchCommand(c.Cmd); ok {
			launches++
		}
	}
	if launches != 1 {
		t.Fatalf("attempt 1 was launched %d times, want once", launches)
	}
}

func TestBootstrapStartsAnAttemptThatWasAskedForButNeverClaimed(t *testing.T) {
	e := newEnv(t, joinData)
	k := e.newKubeadm(container.ExecResult{})
	s := e.scope()
	ctx := context.Background()
	if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	// The manager staged attempt 1 and marked it, then died before the
	// launch.
	steps, err := e.deps.bootstrap().plan(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	setCondition(s.ContainerMachine, e.clock.Now(), infrav1.BootstrappedCondition, metav1.ConditionUnknown, infrav1.InProgressReason, "")
	st := &stager{runtime: e.runtime, container: cpName, owner: clusterOwner.ForMachine("cp-0"), attempt: 1, files: provisioning.Script(steps)}
	for _, f := range st.files {
		if err := e.runtime.WriteFile(ctx, cpName, clusterOwner.ForMachine("cp-0"), f.Path, f.Content, f.Mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.runtime.WriteFile(ctx, cpName, clusterOwner.ForMachine("cp-0"), provisioning.AttemptPath, []byte("1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The next manager launches it; another launch of the same attempt,
	// as from a second leader, does not run it again.
	release := k.holdRuns()
	defer release()
	e.restartManager(0)
	e.reconcileBootstrap(s)
	k.waitStarted(cpName)
	if err := st.start(ctx); err != nil {
		t.Fatal(err)
	}
	release()
	e.notified(client.ObjectKeyFromObject(s.ContainerMachine))
	e.reconcileBootstrap(s)
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	if n := k.count(cpName); n != 1 {
		t.Fatalf("kubeadm ran %d times, want once", n)
	}
}

func TestBootstrapRetriesAnAttemptCutShortByAContainerRestart(t *testing.T) {
	e := newEnv(t, joinData)
	k := e.newKubeadm(container.ExecResult{})
	s := e.scope()
	ctx := context.Background()
	if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	setCondition(s.ContainerMachine, e.clock.Now(), infrav1.BootstrappedCondition, metav1.ConditionUnknown, infrav1.InProgressReason, "")
	// Attempt 1 started, then the container restarted: /run is empty, so
	// there is no alive mark, and the run left no exit mark.
	for path, content := range map[string]string{provisioning.AttemptPath: "1\n", provisioning.Marks(1).Started: "42\n"} {
		if err := e.runtime.WriteFile(ctx, cpName, clusterOwner.ForMachine("cp-0"), path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	key := client.ObjectKeyFromObject(s.ContainerMachine)
	e.reconcileBootstrap(s)
	if msg := condition(s, infrav1.BootstrappedCondition).Message; !strings.Contains(msg, "container restarted") || !strings.Contains(msg, "attempt 2 of 3") {
		t.Fatalf("want the interruption and the retry in the condition, got %q", msg)
	}
	e.notified(key)
	e.reconcileBootstrap(s)
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	if n := k.count(cpName); n != 1 {
		t.Fatalf("kubeadm ran %d times in attempt 2, want once", n)
	}
}

// TestWaitingForASlotWritesNothingNewWhileTheLineMoves: a waiting
// machine's condition stays the same while machines ahead of it leave the
// line, so that reconciling it again writes nothing (each write would be
// mirrored onto its Machine and wake it again: quadratic in a scale-out).
func TestWaitingForASlotWritesNothingNewWhileTheLineMoves(t *testing.T) {
	const limit = 1
	e := newEnv(t, joinData)
	e.restartManager(limit)
	k := e.newKubeadm(container.ExecResult{})
	release := k.holdRuns()
	defer release()
	machines := e.launchedNamed("cp-0", "cp-1", "cp-2")
	for _, s := range machines {
		e.reconcileBootstrap(s)
	}
	last := machines[2]
	wantCondition(t, last, infrav1.BootstrappedCondition, metav1.ConditionFalse, WaitingForBootstrapSlotReason)
	before := condition(last, infrav1.BootstrappedCondition)

	// cp-1, ahead of it, leaves the line (its machine was deleted).
	e.deps.Bootstraps.Release(client.ObjectKeyFromObject(machines[1].ContainerMachine))
	e.clock.Step(time.Minute)
	e.reconcileBootstrap(last)
	if after := condition(last, infrav1.BootstrappedCondition); !reflect.DeepEqual(after, before) {
		t.Fatalf("the waiting machine's condition changed while it waited:\nbefore %+v\nafter  %+v", before, after)
	}
}

func TestBootstrapSlotsBoundTheBootstrapsInFlight(t *testing.T) {
	const limit = 2
	e := newEnv(t, joinData)
	e.restartManager(limit)
	k := e.newKubeadm(container.ExecResult{})
	release := k.holdRuns()
	defer release()
	machines := e.launchedNamed("cp-0", "cp-1", "cp-2")
	for _, s := range machines {
		e.reconcileBootstrap(s)
	}
	for _, s := range machines[:limit] {
		wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionUnknown, infrav1.InProgressReason)
		k.waitStarted(s.ContainerName())
	}
	waiting := machines[limit]
	wantCondition(t, waiting, infrav1.BootstrappedCondition, metav1.ConditionFalse, WaitingForBootstrapSlotReason)
	if msg := condition(waiting, infrav1.BootstrappedCondition).Message; !strings.Contains(msg, "all 2 of the manager's engine are in use") {
		t.Fatalf("the wait must say why, got %q", msg)
	}
	if TerminalCondition(waiting.ContainerMachine) != nil {
		t.Fatal("waiting for a slot must not be terminal")
	}

	// Waiting for longer than the bootstrap timeout does not time it out.
	e.clock.Step(2 * DefaultBootstrapTimeout)
	e.reconcileBootstrap(waiting)
	wantCondition(t, waiting, infrav1.BootstrappedCondition, metav1.ConditionFalse, WaitingForBootstrapSlotReason)
	if n := k.count(waiting.ContainerName()); n != 0 {
		t.Fatalf("the waiting machine ran kubeadm %d times", n)
	}

	// The first machine finishes; its slot goes to the waiting one, which
	// is woken and starts, with the whole timeout ahead of it.
	release()
	first := machines[0]
	e.notified(client.ObjectKeyFromObject(first.ContainerMachine))
	e.reconcileBootstrap(first)
	wantCondition(t, first, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	e.notified(client.ObjectKeyFromObject(waiting.ContainerMachine))
	e.reconcileBootstrap(waiting)
	wantCondition(t, waiting, infrav1.BootstrappedCondition, metav1.ConditionUnknown, infrav1.InProgressReason)
	e.notified(client.ObjectKeyFromObject(waiting.ContainerMachine))
	e.reconcileBootstrap(waiting)
	wantCondition(t, waiting, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
}

func TestBootstrapRunsTheDataAsynchronously(t *testing.T) {
	e := newEnv(t, cloudConfig)
	s := e.scope()
	bootstrap(t, e, s)
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	got, err := e.runtime.ReadFile(context.Background(), cpName, clusterOwner.ForMachine("cp-0"), "/etc/capct/hostname")
	if err != nil || string(got) != cpName {
		t.Fatalf("want the hostname substituted into the file, got %q %v", got, err)
	}
	var ran bool
	for _, c := range e.runtime.ExecCalls() {
		ran = ran || strings.Contains(strings.Join(c.Cmd, " "), "echo hello")
	}
	if !ran {
		t.Fatal("runcmd did not run")
	}

	if _, err := (&Provision{}).Reconcile(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	cm := s.ContainerMachine
	if cm.Spec.ProviderID != "container:///"+cpName || !ptr.Deref(cm.Status.Initialization.Provisioned, false) || cm.Status.FailureDomain != "fd1" {
		t.Fatalf("not provisioned per the contract: providerID %q, provisioned %v, failure domain %q",
			cm.Spec.ProviderID, cm.Status.Initialization.Provisioned, cm.Status.FailureDomain)
	}
}

// TestBootstrapGivesTheDataTheMachinesAddress runs bootstrap data that
// uses {{ ds.meta_data.local_ipv4 }}, as the multihost flavor's node-ip and
// advertise addresses do: it must be the container's address on the
// cluster network, the one other engines' nodes reach.
func TestBootstrapGivesTheDataTheMachinesAddress(t *testing.T) {
	e := newEnv(t, `## template: jinja
#cloud-config
write_files:
- path: /etc/capct/node-ip
  content: "{{ ds.meta_data.local_ipv4 }}"
- path: /run/cluster-api/bootstrap-success.complete
  content: success
`)
	s := e.scope()
	bootstrap(t, e, s)
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	got, err := e.runtime.ReadFile(context.Background(), cpName, clusterOwner.ForMachine("cp-0"), "/etc/capct/node-ip")
	if want := s.Container.IPv4; err != nil || !want.IsValid() || string(got) != want.String() {
		t.Fatalf("want the container's address %s in the file, got %q %v", want, got, err)
	}
}

func TestBootstrapTrustsTheSentinelAfterARestart(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	s := e.scope()
	if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := e.runtime.WriteFile(ctx, cpName, clusterOwner.ForMachine("cp-0"), provisioning.SentinelPath, []byte("success"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.deps.bootstrap().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	if len(e.runtime.ExecCalls()) != 0 {
		t.Fatalf("bootstrap ran again: %v", e.runtime.ExecCalls())
	}
}

func TestBootstrapFailures(t *testing.T) {
	testCases := []struct {
		name   string
		data   string
		exec   fakeruntime.ExecHandler
		reason string
	}{
		{name: "malformed cloud-config", data: "#cloud-config\nwrite_files: {", reason: infrav1.InvalidSpecReason},
		{name: "a failing command", data: "#cloud-config\nruncmd:\n- kubeadm init\n", reason: infrav1.BootstrapFailedReason,
			exec: func(_ context.Context, _ container.Machine, _ map[string][]byte, in container.ExecInput, _ []byte) (container.ExecResult, bool) {
				if strings.Contains(strings.Join(in.Cmd, " "), "kubeadm") {
					return container.ExecResult{ExitCode: 1, Stderr: []byte("port 6443 is in use")}, true
				}
				return container.ExecResult{}, false
			}},
		{name: "no sentinel", data: "#cloud-config\nruncmd:\n- \"true\"\n", reason: infrav1.BootstrapFailedReason},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.data)
			if tc.exec != nil {
				e.runtime.SetExecHandler(tc.exec)
			}
			s := e.scope()
			ctx := context.Background()
			if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
				t.Fatal(err)
			}
			if _, err := e.deps.bootstrap().Reconcile(ctx, s); err != nil {
				t.Fatal(err)
			}
			if tc.reason != infrav1.InvalidSpecReason {
				e.waitForBootstrap(s)
				if _, err := e.deps.bootstrap().Reconcile(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionFalse, tc.reason)
			if TerminalCondition(s.ContainerMachine) == nil {
				t.Fatal("a failed bootstrap must be terminal")
			}
		})
	}
}

func TestBootstrapTimesOutOnTheInjectedClock(t *testing.T) {
	e := newEnv(t, "#cloud-config\nruncmd:\n- kubeadm init\n")
	release := make(chan struct{})
	defer close(release)
	e.runtime.SetExecHandler(func(ctx context.Context, _ container.Machine, _ map[string][]byte, in container.ExecInput, _ []byte) (container.ExecResult, bool) {
		if strings.Contains(strings.Join(in.Cmd, " "), "kubeadm") {
			select {
			case <-ctx.Done():
			case <-release:
			}
			return container.ExecResult{ExitCode: 1}, true
		}
		return container.ExecResult{}, false
	})
	s := e.scope()
	s.ContainerMachine.Spec.Lifecycle.BootstrapTimeout = &metav1.Duration{Duration: time.Minute}
	ctx := context.Background()
	if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	res, err := e.deps.bootstrap().Reconcile(ctx, s)
	if err != nil || res.RequeueAfter == 0 || res.RequeueAfter > time.Minute {
		t.Fatalf("want a requeue within the timeout, got %v %v", res, err)
	}
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionUnknown, infrav1.InProgressReason)
	e.clock.Step(59 * time.Second)
	if _, err := e.deps.bootstrap().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionUnknown, infrav1.InProgressReason)
	e.clock.Step(time.Second)
	if _, err := e.deps.bootstrap().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.TimedOutReason)
}
