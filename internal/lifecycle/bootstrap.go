package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/machineprovider"
	"github.com/capct/cluster-api-provider-container/internal/provisioning"
	"github.com/capct/cluster-api-provider-container/internal/registryconfig"
)

const (
	// DefaultBootstrapTimeout bounds a bootstrap when the machine does not
	// set spec.lifecycle.bootstrapTimeout. It counts from the machine's
	// first attempt, so it spans the retries, but not the wait for a slot.
	DefaultBootstrapTimeout = 5 * time.Minute
	// MaxBootstrapAttempts bounds the attempts of one machine's bootstrap.
	MaxBootstrapAttempts = 3
	// WaitingForBootstrapSlotReason: the machine's engine runs as many
	// bootstraps as --max-concurrent-bootstraps allows, or gives its free
	// slots to namespaces under their share first (BootstrapRunner); the
	// machine waits for one to end.
	// Not terminal, and the wait does not count toward the timeout.
	WaitingForBootstrapSlotReason = "WaitingForBootstrapSlot"
	// bootstrapPoll is how often a running bootstrap is looked at, in case
	// its completion notice is lost.
	bootstrapPoll = 30 * time.Second
	// slotPoll is how often a machine waiting for a slot looks again, in
	// case its wake-up is lost.
	slotPoll = 30 * time.Second
	// bootstrapExecTimeout bounds the short execs of a bootstrap: the
	// launch of an attempt and stopping one.
	bootstrapExecTimeout = 30 * time.Second
	// bootWaitTimeout bounds the wait for the node's init system before
	// images are preloaded.
	bootWaitTimeout = 6 * time.Minute
)

// Bootstrap runs the machine's bootstrap data inside its container, at most
// once per attempt however often the manager restarts. Each attempt runs
// detached in the container (provisioning.Script) and leaves marks there;
// this phase decides only from those marks (readRun), so a new manager or
// leader picks up where the last one stopped instead of starting kubeadm
// again. A failure that may pass on a retry (the runtime not ready, the
// control plane still starting, an interrupted attempt) is retried, up to
// MaxBootstrapAttempts within the timeout; one that cannot pass (bad
// bootstrap data or script) is terminal. At most --max-concurrent-bootstraps
// machines bootstrap at once on each engine; the others wait,
// non-terminally.
type Bootstrap struct {
	// Client reads the bootstrap data Secret.
	Client client.Client
	// Runner runs the bootstrap data on its own goroutines.
	Runner   *BootstrapRunner
	Clock    clock.PassiveClock
	Recorder record.EventRecorder
	// LookupEnv reads the manager's proxy settings, which its nodes get
	// (registryconfig.ProxyFromEnvironment); nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
}

// Reconcile implements Phase.
func (b *Bootstrap) Reconcile(ctx context.Context, s *MachineScope) (ctrl.Result, error) {
	cm := s.ContainerMachine
	key := client.ObjectKeyFromObject(cm)
	now := b.Clock.Now()
	if conditions.IsTrue(cm, infrav1.BootstrappedCondition) {
		b.Runner.Release(key)
		return ctrl.Result{}, nil
	}
	if TerminalCondition(cm) != nil {
		b.Runner.Release(key)
		return ctrl.Result{}, nil
	}
	if s.Container == nil {
		b.Runner.Release(key)
		setCondition(cm, now, infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.WaitingForLaunchReason, "Waiting for the container to run")
		return ctrl.Result{}, nil
	}
	if s.BootstrapDataSecretName == nil {
		// Only a warm machine is launched before its bootstrap data exist
		// (waitingFor); its promotion wakes it.
		b.Runner.Release(key)
		setCondition(cm, now, infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.WarmReason,
			"Booted and kept warm: the bootstrap data run when the pool promotes the machine")
		return ctrl.Result{}, nil
	}
	if s.Container.State != container.StateRunning {
		// Marks can be read from a stopped container, but an attempt
		// cannot run in it; Launch and Liveness report the state. A run
		// cut short by the stop shows as interrupted once it runs again.
		return ctrl.Result{RequeueAfter: bootstrapPoll}, nil
	}

	name, owner := s.Container.Name, s.Owner()
	r, err := readRun(ctx, s.Runtime, name, owner)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to read the bootstrap marks of ContainerMachine %s: %w", key, err)
	}
	timeout := DefaultBootstrapTimeout
	if d := cm.Spec.Lifecycle.BootstrapTimeout; d != nil {
		timeout = d.Duration
	}
	switch r.state {
	case runNone:
		// Machines bootstrapped before CAPCT left marks only have the
		// sentinel (on /run: it does not survive a container restart).
		if _, err := s.Runtime.ReadFile(ctx, name, owner, provisioning.SentinelPath); err == nil {
			return b.succeeded(s, now)
		} else if !container.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("failed to look for the bootstrap sentinel of ContainerMachine %s: %w", key, err)
		}
		return b.startFirst(ctx, s, now, timeout)
	case runLaunched, runRunning:
		b.Runner.Hold(key, s.Engine)
		return b.watch(ctx, s, now, timeout, r)
	case runEnded:
		if r.exit.Code == 0 {
			return b.succeeded(s, now)
		}
		f, err := readFailure(ctx, s.Runtime, name, owner, r)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to read how bootstrap attempt %d of ContainerMachine %s failed: %w", r.attempt, key, err)
		}
		return b.failed(ctx, s, now, timeout, r.attempt, f)
	case runInterrupted:
		return b.failed(ctx, s, now, timeout, r.attempt, attemptFailure{Exit: provisioning.Exit{Code: 1, Where: whereInterrupted}})
	}
	return ctrl.Result{}, fmt.Errorf("unknown bootstrap state %d of ContainerMachine %s", r.state, key)
}

// timeLeft is how much of the bootstrap timeout is left; the timeout
// counts from Bootstrapped turning Unknown, the start of the first attempt.
func timeLeft(cm *infrav1.ContainerMachine, now time.Time, timeout time.Duration) time.Duration {
	elapsed, _ := since(cm, now, infrav1.BootstrappedCondition)
	return timeout - elapsed
}

// startFirst starts attempt 1 once the machine holds a slot.
func (b *Bootstrap) startFirst(ctx context.Context, s *MachineScope, now time.Time, timeout time.Duration) (ctrl.Result, error) {
	cm := s.ContainerMachine
	key := client.ObjectKeyFromObject(cm)
	ok, usage := b.Runner.Acquire(key, s.Engine)
	if !ok {
		// The message names nothing that changes while the machine waits
		// (its place in line, the slots in flight): every change would be
		// a status write, which Cluster API mirrors onto the Machine and
		// which wakes the machine again, for each machine each time the
		// line moves, quadratic in a scale-out (make bench-scale, CHANGELOG.md).
		msg := fmt.Sprintf("Waiting for a bootstrap slot: all %d of %s are in use, or go first to machines of namespaces that hold less than half of them (--max-concurrent-bootstraps); machines get them in the order they asked",
			usage.Limit, s.EngineDescription())
		setCondition(cm, now, infrav1.BootstrappedCondition, metav1.ConditionFalse, WaitingForBootstrapSlotReason, msg)
		return ctrl.Result{RequeueAfter: slotPoll}, nil
	}
	if !conditions.IsUnknown(cm, infrav1.BootstrappedCondition) || conditions.Get(cm, infrav1.BootstrappedCondition) == nil {
		// Unknown marks the start of the first attempt: the timeout
		// counts from its transition time.
		setCondition(cm, now, infrav1.BootstrappedCondition, metav1.ConditionUnknown, infrav1.InProgressReason,
			fmt.Sprintf("Running the bootstrap data (attempt 1 of %d)", MaxBootstrapAttempts))
	}
	left := timeLeft(cm, now, timeout)
	if left <= 0 {
		return b.timedOut(ctx, s, now, timeout, runState{})
	}
	res, _, err := b.start(ctx, s, now, 1, left)
	return res, err
}

// start plans the bootstrap data and starts attempt n on the runner; started
// tells whether it started a job (not one that ran already).
func (b *Bootstrap) start(ctx context.Context, s *MachineScope, now time.Time, n int, left time.Duration) (res ctrl.Result, started bool, err error) {
	cm := s.ContainerMachine
	key := client.ObjectKeyFromObject(cm)
	steps, err := b.plan(ctx, s)
	if err != nil {
		var invalid *machineprovider.InvalidSpecError
		if errors.As(err, &invalid) {
			b.Runner.Forget(key)
			setCondition(cm, now, infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.InvalidSpecReason, err.Error())
			b.Recorder.Event(cm, corev1.EventTypeWarning, infrav1.InvalidSpecReason, err.Error())
			return ctrl.Result{}, false, nil
		}
		return ctrl.Result{}, false, err
	}
	st := &stager{runtime: s.Runtime, container: s.Container.Name, owner: s.Owner(), attempt: n, files: provisioning.Script(steps)}
	if n == 1 {
		st.preload = cm.Spec.PreLoadImages
	}
	// The run's deadline is wall-clock time: it bounds real work. The
	// decision that the bootstrap timed out uses the injected clock.
	started, err = b.Runner.Run(key, n, time.Now().Add(left), st.launch, exitMarked(s.Runtime, s.Container.Name, s.Owner(), n))
	if err != nil {
		return ctrl.Result{}, false, fmt.Errorf("failed to start bootstrap attempt %d of ContainerMachine %s: %w", n, key, err)
	}
	return ctrl.Result{RequeueAfter: min(bootstrapPoll, left)}, started, nil
}

// watch follows an attempt that was launched or is running: it launches it
// again when it was never claimed (launching twice is harmless: only one
// run claims an attempt), and times it out.
func (b *Bootstrap) watch(ctx context.Context, s *MachineScope, now time.Time, timeout time.Duration, r runState) (ctrl.Result, error) {
	cm := s.ContainerMachine
	key := client.ObjectKeyFromObject(cm)
	left := timeLeft(cm, now, timeout)
	if !conditions.IsUnknown(cm, infrav1.BootstrappedCondition) {
		// A run the marks show but the status does not (status lost, as
		// after clusterctl move): the timeout counts from now.
		setCondition(cm, now, infrav1.BootstrappedCondition, metav1.ConditionUnknown, infrav1.InProgressReason,
			fmt.Sprintf("Running the bootstrap data (attempt %d of %d)", r.attempt, MaxBootstrapAttempts))
		left = timeout
	}
	if left <= 0 {
		return b.timedOut(ctx, s, now, timeout, r)
	}
	var launch func(context.Context) error
	if r.state == runLaunched {
		st := &stager{runtime: s.Runtime, container: s.Container.Name, owner: s.Owner(), attempt: r.attempt}
		launch = st.start
	}
	if _, err := b.Runner.Run(key, r.attempt, time.Now().Add(left), launch, exitMarked(s.Runtime, s.Container.Name, s.Owner(), r.attempt)); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to follow bootstrap attempt %d of ContainerMachine %s: %w", r.attempt, key, err)
	}
	return ctrl.Result{RequeueAfter: min(bootstrapPoll, left)}, nil
}

// failed decides what follows a failed attempt: the next attempt when the
// failure may pass and attempts and time are left, else a terminal failure.
func (b *Bootstrap) failed(ctx context.Context, s *MachineScope, now time.Time, timeout time.Duration, n int, f attemptFailure) (ctrl.Result, error) {
	cm := s.ContainerMachine
	key := client.ObjectKeyFromObject(cm)
	b.Runner.Hold(key, s.Engine)
	msg := f.summary(n, MaxBootstrapAttempts)
	left := timeLeft(cm, now, timeout)
	switch {
	case !retryable(f):
		msg += ". This failure cannot pass on a retry"
	case n >= MaxBootstrapAttempts:
		msg += ". No attempts are left"
	case left <= 0:
		msg += fmt.Sprintf(". No time is left to retry within %s", timeout)
	default:
		setCondition(cm, now, infrav1.BootstrappedCondition, metav1.ConditionUnknown, infrav1.InProgressReason,
			fmt.Sprintf("%s; retrying (attempt %d of %d)", msg, n+1, MaxBootstrapAttempts))
		// The marks of attempt n are read again until attempt n+1 is
		// staged: the event goes with the start of the job, once.
		res, started, err := b.start(ctx, s, now, n+1, left)
		if started {
			b.Recorder.Event(cm, corev1.EventTypeWarning, "BootstrapRetry", msg)
		}
		return res, err
	}
	b.Runner.Forget(key)
	setCondition(cm, now, infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.BootstrapFailedReason, msg)
	b.Recorder.Event(cm, corev1.EventTypeWarning, infrav1.BootstrapFailedReason, msg)
	return ctrl.Result{}, nil
}

// succeeded marks the machine bootstrapped.
func (b *Bootstrap) succeeded(s *MachineScope, now time.Time) (ctrl.Result, error) {
	cm := s.ContainerMachine
	b.Runner.Forget(client.ObjectKeyFromObject(cm))
	if elapsed, ok := since(cm, now, infrav1.BootstrappedCondition); ok && conditions.IsUnknown(cm, infrav1.BootstrappedCondition) {
		bootstrapDuration.Observe(elapsed.Seconds())
	}
	setCondition(cm, now, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason, "")
	return ctrl.Result{}, nil
}

// timedOut marks the machine failed for good and stops a run that is still
// going, so that it stops using the host.
func (b *Bootstrap) timedOut(ctx context.Context, s *MachineScope, now time.Time, timeout time.Duration, r runState) (ctrl.Result, error) {
	cm := s.ContainerMachine
	b.Runner.Forget(client.ObjectKeyFromObject(cm))
	if r.state == runRunning && r.pid > 0 {
		// Best effort: the machine is failed whether or not this works.
		_, _ = s.Runtime.Exec(ctx, s.Container.Name, s.Owner(), container.ExecInput{
			Cmd:     []string{"/bin/sh", "-c", `kill -TERM -"$1" 2>/dev/null || kill -TERM "$1"`, "capct-stop", strconv.Itoa(r.pid)},
			Timeout: bootstrapExecTimeout,
		})
	}
	msg := fmt.Sprintf("Bootstrap did not finish within %s", timeout)
	if r.attempt > 0 {
		msg += fmt.Sprintf(" (attempt %d of %d)", r.attempt, MaxBootstrapAttempts)
	}
	setCondition(cm, now, infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.TimedOutReason, msg)
	b.Recorder.Event(cm, corev1.EventTypeWarning, infrav1.TimedOutReason, msg)
	return ctrl.Result{}, nil
}

// plan reads the bootstrap data secret and turns it into steps.
func (b *Bootstrap) plan(ctx context.Context, s *MachineScope) ([]provisioning.Step, error) {
	cm := s.ContainerMachine
	secret := &corev1.Secret{}
	key := types.NamespacedName{Namespace: cm.Namespace, Name: *s.BootstrapDataSecretName}
	if err := b.Client.Get(ctx, key, secret); err != nil {
		return nil, fmt.Errorf("failed to get bootstrap data Secret %s for ContainerMachine %s/%s: %w", key, cm.Namespace, cm.Name, err)
	}
	data, ok := secret.Data["value"]
	if !ok {
		return nil, &machineprovider.InvalidSpecError{Err: fmt.Errorf("bootstrap data Secret %s has no key \"value\"", key)}
	}
	format := provisioning.Format(secret.Data["format"])
	if format == "" {
		format = provisioning.FormatCloudConfig
	}
	vars := provisioning.Vars{Hostname: s.Container.Name}
	if s.Container.IPv4.IsValid() {
		// Data that uses the address fails to plan without one (an IPv6
		// network) rather than giving the node an empty one.
		vars.LocalIPv4 = s.Container.IPv4.String()
	}
	steps, err := provisioning.Plan(format, data, vars)
	if err != nil {
		return nil, &machineprovider.InvalidSpecError{Err: fmt.Errorf("failed to read bootstrap data Secret %s: %w", key, err)}
	}
	registries, err := b.registrySteps(ctx, s)
	if err != nil {
		return nil, err
	}
	return append(registries, steps...), nil
}

// registrySteps are the node's registry mirrors and proxy settings
// (internal/registryconfig), which go before the bootstrap data's steps so
// that they are in place before kubeadm makes containerd pull.
func (b *Bootstrap) registrySteps(ctx context.Context, s *MachineScope) ([]provisioning.Step, error) {
	cc := s.ContainerCluster
	steps, err := registryconfig.HostsSteps(cc.Spec.RegistryMirrors)
	if err != nil {
		return nil, &machineprovider.InvalidSpecError{Err: fmt.Errorf("failed to render spec.registryMirrors of ContainerCluster %s/%s: %w", cc.Namespace, cc.Name, err)}
	}
	lookup := b.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	proxy := registryconfig.ProxyFromEnvironment(lookup)
	if proxy.IsZero() {
		return steps, nil
	}
	network, err := s.Runtime.InspectNetwork(ctx, s.Container.Network)
	if err != nil {
		return nil, fmt.Errorf("failed to inspect network %s for the NO_PROXY of ContainerMachine %s/%s: %w", s.Container.Network, s.ContainerMachine.Namespace, s.ContainerMachine.Name, err)
	}
	// The manager's settings, not the machine's: an error is not the
	// machine's to fail for, and names the variable, never its value.
	ps, err := registryconfig.ProxySteps(proxy, registryconfig.NoProxy(proxy.NoProxy, s.Cluster, cc, network.IPv4Subnet, network.IPv6Subnet))
	if err != nil {
		return nil, fmt.Errorf("failed to give ContainerMachine %s/%s the manager's proxy settings: %w", s.ContainerMachine.Namespace, s.ContainerMachine.Name, err)
	}
	return append(steps, ps...), nil
}

// runStates of a machine's bootstrap, as its marks show them.
const (
	// runNone: no attempt was asked for.
	runNone = iota
	// runLaunched: attempt n was asked for but not claimed yet.
	runLaunched
	// runRunning: attempt n runs in this boot of the container.
	runRunning
	// runEnded: attempt n wrote its exit mark.
	runEnded
	// runInterrupted: attempt n started but the container restarted
	// before it ended.
	runInterrupted
)

// runState is what the marks in the container say.
type runState struct {
	state   int
	attempt int
	exit    provisioning.Exit
	// pid is the running attempt's process (group).
	pid int
}

// readRun reads the marks of the latest attempt, cheapest first: the
// attempt number, its exit mark, its start mark and its alive mark.
func readRun(ctx context.Context, rt container.Runtime, name string, owner container.Owner) (runState, error) {
	b, err := rt.ReadFile(ctx, name, owner, provisioning.AttemptPath)
	if container.IsNotFound(err) {
		return runState{state: runNone}, nil
	}
	if err != nil {
		return runState{}, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 1 {
		// Written by WriteFile in one piece; anything else is not ours.
		return runState{}, fmt.Errorf("%s holds %q, not an attempt number", provisioning.AttemptPath, b)
	}
	marks := provisioning.Marks(n)
	r := runState{attempt: n}
	if b, err := rt.ReadFile(ctx, name, owner, marks.Exit); err == nil {
		if exit, ok := provisioning.ParseExit(b); ok {
			r.state, r.exit = runEnded, exit
			return r, nil
		}
	} else if !container.IsNotFound(err) {
		return runState{}, err
	}
	started, err := rt.ReadFile(ctx, name, owner, marks.Started)
	if container.IsNotFound(err) {
		r.state = runLaunched
		return r, nil
	}
	if err != nil {
		return runState{}, err
	}
	r.pid, _ = strconv.Atoi(strings.TrimSpace(string(started)))
	if _, err := rt.ReadFile(ctx, name, owner, marks.Alive); container.IsNotFound(err) {
		r.state = runInterrupted
		return r, nil
	} else if err != nil {
		return runState{}, err
	}
	r.state = runRunning
	return r, nil
}

// readFailure reads what a failed attempt left besides its exit mark.
func readFailure(ctx context.Context, rt container.Runtime, name string, owner container.Owner, r runState) (attemptFailure, error) {
	f := attemptFailure{Exit: r.exit}
	marks := provisioning.Marks(r.attempt)
	for path, into := range map[string]*string{marks.Output: &f.Output, marks.Diagnostics: &f.Diagnostics} {
		b, err := rt.ReadFile(ctx, name, owner, path)
		if err != nil && !container.IsNotFound(err) {
			return attemptFailure{}, err
		}
		*into = string(b)
	}
	return f, nil
}

// exitMarked returns a watch that ends when attempt n's exit mark is there.
func exitMarked(rt container.Runtime, name string, owner container.Owner, n int) func(context.Context) (bool, error) {
	path := provisioning.Marks(n).Exit
	return func(ctx context.Context) (bool, error) {
		b, err := rt.ReadFile(ctx, name, owner, path)
		if container.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		_, ok := provisioning.ParseExit(b)
		return ok, nil
	}
}

// stager puts attempt n of a bootstrap into a container and starts it. All
// its engine calls are here.
type stager struct {
	runtime   container.Runtime
	container string
	owner     container.Owner
	attempt   int
	// files are the staged run (provisioning.Script); nil when it is in
	// the container already and only the launch is left.
	files   []provisioning.StagedFile
	preload []string
}

// waitForBoot waits for the node's init system to finish starting
// services, containerd among them, before images are imported into it.
// Right after the container starts systemctl cannot reach systemd yet and
// `--wait` returns at once, so it is asked again each second, for at most
// five minutes. It fails, saying why, on an image without systemctl (no
// init system would start containerd) and when systemd never gets there:
// going on would only fail later, less clearly, in ctr.
var waitForBoot = []string{"/bin/sh", "-c", `if ! command -v systemctl >/dev/null 2>&1; then
  echo "the node image has no systemctl: preloading images needs systemd to start containerd" >&2
  exit 1
fi
i=0
while [ $i -lt 300 ]; do
  state=$(systemctl is-system-running --wait 2>/dev/null)
  case "$state" in running|degraded) exit 0 ;; esac
  i=$((i + 1))
  sleep 1
done
echo "systemd did not finish starting within 300 s (systemctl is-system-running: ${state:-no answer})" >&2
exit 1`}

// launch preloads images (first attempt only), writes the staged run, then
// the attempt mark, and starts the attempt. The order matters: an attempt
// mark is only ever written once the run it starts is in place.
func (st *stager) launch(ctx context.Context) error {
	if len(st.preload) > 0 {
		res, err := st.runtime.Exec(ctx, st.container, st.owner, container.ExecInput{Cmd: waitForBoot, Timeout: bootWaitTimeout})
		if err != nil {
			return fmt.Errorf("failed to wait for the init system of %s: %w", st.container, err)
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("failed to wait for the init system of %s before preloading images: exit code %d: %s", st.container, res.ExitCode, tail(res.Stderr, res.Stdout))
		}
		if err := container.PreloadImages(ctx, st.runtime, st.container, st.owner, st.preload); err != nil {
			return fmt.Errorf("failed to preload images into %s: %w", st.container, err)
		}
	}
	for _, f := range st.files {
		if err := st.runtime.WriteFile(ctx, st.container, st.owner, f.Path, f.Content, f.Mode); err != nil {
			return fmt.Errorf("failed to stage the bootstrap of %s: %w", st.container, err)
		}
	}
	if err := st.runtime.WriteFile(ctx, st.container, st.owner, provisioning.AttemptPath, []byte(strconv.Itoa(st.attempt)+"\n"), 0o600); err != nil {
		return fmt.Errorf("failed to mark bootstrap attempt %d in %s: %w", st.attempt, st.container, err)
	}
	return st.start(ctx)
}

// start starts the staged attempt, detached; a second start of the same
// attempt exits at once.
func (st *stager) start(ctx context.Context) error {
	res, err := st.runtime.Exec(ctx, st.container, st.owner, container.ExecInput{Cmd: provisioning.LaunchCommand(st.attempt), Timeout: bootstrapExecTimeout})
	if err != nil {
		return fmt.Errorf("failed to start bootstrap attempt %d in %s: %w", st.attempt, st.container, err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("failed to start bootstrap attempt %d in %s: exit code %d: %s", st.attempt, st.container, res.ExitCode, tail(res.Stderr, res.Stdout))
	}
	return nil
}
