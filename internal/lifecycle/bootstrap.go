package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/provisioning"
)

const (
	// DefaultBootstrapTimeout bounds a bootstrap when the machine does not
	// set spec.lifecycle.bootstrapTimeout.
	DefaultBootstrapTimeout = 5 * time.Minute
	// bootstrapPoll is how often a running bootstrap is looked at, in case
	// its completion notice is lost.
	bootstrapPoll = 30 * time.Second
)

// Bootstrap runs the machine's bootstrap data inside its container. The run
// goes on a goroutine of its own (BootstrapRunner); this phase starts it,
// reads its outcome and enforces the timeout. Bad bootstrap data is a
// terminal condition, not a crash.
type Bootstrap struct{ *Deps }

// Reconcile implements Phase.
func (b *Bootstrap) Reconcile(ctx context.Context, s *MachineScope) (ctrl.Result, error) {
	cm := s.ContainerMachine
	now := b.Clock.Now()
	if conditions.IsTrue(cm, infrav1.BootstrappedCondition) {
		return ctrl.Result{}, nil
	}
	if c := conditions.Get(cm, infrav1.BootstrappedCondition); c != nil && c.Status == metav1.ConditionFalse && terminalReasons[c.Reason] {
		return ctrl.Result{}, nil
	}
	if s.Container == nil {
		setCondition(cm, now, infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.WaitingForLaunchReason, "Waiting for the container to run")
		return ctrl.Result{}, nil
	}

	key := client.ObjectKeyFromObject(cm)
	timeout := DefaultBootstrapTimeout
	if d := cm.Spec.Lifecycle.BootstrapTimeout; d != nil {
		timeout = d.Duration
	}
	known, done, runErr := b.Bootstraps.Status(key)
	switch {
	case known && done:
		b.Bootstraps.Forget(key)
		return b.finished(s, now, runErr, timeout)
	case known:
		elapsed, _ := since(cm, now, infrav1.BootstrappedCondition)
		if elapsed >= timeout {
			b.Bootstraps.Forget(key)
			return b.finished(s, now, context.DeadlineExceeded, timeout)
		}
		return ctrl.Result{RequeueAfter: min(bootstrapPoll, timeout-elapsed)}, nil
	}

	// No run in memory: either it never started, or the manager restarted.
	// The sentinel tells whether an earlier run finished.
	if _, err := b.Runtime.ReadFile(ctx, s.Container.Name, provisioning.SentinelPath); err == nil {
		return b.finished(s, now, nil, timeout)
	} else if !container.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("failed to look for the bootstrap sentinel of ContainerMachine %s: %w", key, err)
	}

	steps, err := b.plan(ctx, s)
	if err != nil {
		var invalid *InvalidSpecError
		if errors.As(err, &invalid) {
			setCondition(cm, now, infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.InvalidSpecReason, err.Error())
			b.Recorder.Event(cm, corev1.EventTypeWarning, infrav1.InvalidSpecReason, err.Error())
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !conditions.IsUnknown(cm, infrav1.BootstrappedCondition) || conditions.Get(cm, infrav1.BootstrappedCondition) == nil {
		// Unknown marks the start of the run: the timeout counts from it.
		setCondition(cm, now, infrav1.BootstrappedCondition, metav1.ConditionUnknown, infrav1.InProgressReason, "Running the bootstrap data")
	}
	elapsed, _ := since(cm, now, infrav1.BootstrappedCondition)
	exec := &executor{runtime: b.Runtime, container: s.Container.Name, owner: s.Owner(), preload: cm.Spec.PreLoadImages, steps: steps}
	// The run's own deadline is wall-clock time: it bounds a real process.
	// The decision that the phase timed out above uses the injected clock.
	b.Bootstraps.Start(key, time.Now().Add(timeout-elapsed), exec.run)
	b.Recorder.Eventf(cm, corev1.EventTypeNormal, "Bootstrapping", "Running %d bootstrap steps in container %s", len(steps), s.Container.Name)
	return ctrl.Result{RequeueAfter: min(bootstrapPoll, timeout)}, nil
}

// finished records the outcome of a run. A failed or timed out bootstrap is
// final: kubeadm cannot be re-run safely on a half-initialised node, so the
// machine must be replaced.
func (b *Bootstrap) finished(s *MachineScope, now time.Time, err error, timeout time.Duration) (ctrl.Result, error) {
	cm := s.ContainerMachine
	switch {
	case err == nil:
		if elapsed, ok := since(cm, now, infrav1.BootstrappedCondition); ok {
			bootstrapDuration.Observe(elapsed.Seconds())
		}
		setCondition(cm, now, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason, "")
		b.Recorder.Event(cm, corev1.EventTypeNormal, "Bootstrapped", "Bootstrap data ran to completion")
	case errors.Is(err, context.DeadlineExceeded):
		msg := fmt.Sprintf("Bootstrap did not finish within %s", timeout)
		setCondition(cm, now, infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.TimedOutReason, msg)
		b.Recorder.Event(cm, corev1.EventTypeWarning, infrav1.TimedOutReason, msg)
	default:
		setCondition(cm, now, infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.BootstrapFailedReason, err.Error())
		b.Recorder.Event(cm, corev1.EventTypeWarning, infrav1.BootstrapFailedReason, err.Error())
	}
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
		return nil, &InvalidSpecError{Err: fmt.Errorf("bootstrap data Secret %s has no key \"value\"", key)}
	}
	format := provisioning.Format(secret.Data["format"])
	if format == "" {
		format = provisioning.FormatCloudConfig
	}
	steps, err := provisioning.Plan(format, data, provisioning.Vars{Hostname: s.Container.Name})
	if err != nil {
		return nil, &InvalidSpecError{Err: fmt.Errorf("failed to read bootstrap data Secret %s: %w", key, err)}
	}
	return steps, nil
}

// executor runs a plan inside a container.
type executor struct {
	runtime   container.Runtime
	container string
	owner     container.Owner
	preload   []string
	steps     []provisioning.Step
}

// prepare waits for the node's init system to finish starting services
// (containerd among them), so that kubeadm does not run before its runtime
// is up (CAPI#2223); images without systemd go straight on. Right after the
// container starts, systemctl cannot reach systemd yet and `--wait` returns
// at once ("offline"), so it is asked again each second until boot is over
// (running, or degraded when some unit failed), for at most five minutes.
// It also makes the sentinel's folder: /run is a fresh tmpfs in a node
// container, where cloud-init would have made it.
var prepare = []string{"/bin/sh", "-c", `mkdir -p /run/cluster-api
command -v systemctl >/dev/null 2>&1 || exit 0
i=0
while [ $i -lt 300 ]; do
  case "$(systemctl is-system-running --wait 2>/dev/null)" in running|degraded) exit 0 ;; esac
  i=$((i + 1))
  sleep 1
done`}

func (e *executor) run(ctx context.Context) error {
	if err := e.exec(ctx, "prepare for bootstrap", prepare, nil); err != nil {
		return err
	}
	if len(e.preload) > 0 {
		if err := container.PreloadImages(ctx, e.runtime, e.container, e.owner, e.preload); err != nil {
			return fmt.Errorf("failed to preload images into %s: %w", e.container, err)
		}
	}
	for _, step := range e.steps {
		if step.File != nil {
			if err := e.writeFile(ctx, step.File); err != nil {
				return err
			}
			continue
		}
		if err := e.exec(ctx, step.Description, step.Command, nil); err != nil {
			return err
		}
	}
	if _, err := e.runtime.ReadFile(ctx, e.container, provisioning.SentinelPath); err != nil {
		return fmt.Errorf("bootstrap data ran but did not write %s: %w", provisioning.SentinelPath, err)
	}
	return nil
}

func (e *executor) writeFile(ctx context.Context, f *provisioning.File) error {
	content := f.Content
	if f.Append {
		existing, err := e.runtime.ReadFile(ctx, e.container, f.Path)
		if err != nil && !container.IsNotFound(err) {
			return fmt.Errorf("failed to read %s in %s to append to it: %w", f.Path, e.container, err)
		}
		content = append(existing, content...)
	}
	if err := e.runtime.WriteFile(ctx, e.container, e.owner, f.Path, content, f.Mode); err != nil {
		return fmt.Errorf("failed to write %s in %s: %w", f.Path, e.container, err)
	}
	if f.Owner != "" && f.Owner != "root" && f.Owner != "root:root" {
		return e.exec(ctx, "chown "+f.Path, []string{"chown", f.Owner, f.Path}, nil)
	}
	return nil
}

func (e *executor) exec(ctx context.Context, what string, cmd []string, stdin []byte) error {
	in := container.ExecInput{Cmd: cmd}
	if stdin != nil {
		in.Stdin = bytes.NewReader(stdin)
	}
	res, err := e.runtime.Exec(ctx, e.container, e.owner, in)
	if err != nil {
		return fmt.Errorf("failed to %s in %s: %w", what, e.container, err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("failed to %s in %s: exit code %d: %s", what, e.container, res.ExitCode, tail(res.Stderr, res.Stdout))
	}
	return nil
}

// tail keeps the end of a command's output for a condition message: the
// cause of a kubeadm failure is in its last lines.
func tail(outputs ...[]byte) string {
	const keep = 1024
	for _, out := range outputs {
		s := strings.TrimSpace(string(out))
		if s == "" {
			continue
		}
		if len(s) > keep {
			s = "…" + s[len(s)-keep:]
		}
		return s
	}
	return "no output"
}
