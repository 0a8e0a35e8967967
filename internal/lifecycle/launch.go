package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/machineprovider"
)

const (
	// LaunchTimeout bounds the attempts to create and start a container once
	// everything it needs is there.
	LaunchTimeout = 5 * time.Minute
	// launchRetry is how soon a failed launch is tried again.
	launchRetry = 10 * time.Second
	// containerRecheck is how soon a machine whose container does not run,
	// or whose engine does not answer, looks again. The container's start
	// event usually wakes it sooner.
	containerRecheck = 10 * time.Second
)

// Provider creates, finds and deletes machines' containers
// (machineprovider.Provider).
type Provider interface {
	Create(ctx context.Context, c *machineprovider.Claim) (*machineprovider.Created, error)
	Get(ctx context.Context, c *machineprovider.Claim) (machineprovider.Placement, *container.Machine, error)
	Delete(ctx context.Context, c *machineprovider.Claim) (machineprovider.Deleted, error)
	LeaveLoadBalancer(ctx context.Context, c *machineprovider.Claim) error
}

// Launch has the machine's container created and started once its Machine,
// the cluster's infrastructure and the bootstrap data are there, in one
// call to the machine provider, and writes Launched. Afterwards it reports
// whether the container runs (ContainerRunning): a stopped or restarting
// container makes the machine not Ready without failing it, and only a
// container that is gone fails it for good. Such a machine is reported,
// not silently recreated, because recreating hid real failures from CAPD's
// users.
type Launch struct {
	Provider Provider
	Clock    clock.PassiveClock
	Recorder record.EventRecorder
}

// Reconcile implements Phase.
func (l *Launch) Reconcile(ctx context.Context, s *MachineScope) (ctrl.Result, error) {
	cm := s.ContainerMachine
	now := l.Clock.Now()
	if c := conditions.Get(cm, infrav1.LaunchedCondition); c != nil && c.Status == metav1.ConditionFalse && terminalReasons[c.Reason] {
		return ctrl.Result{}, nil
	}
	at, existing, err := l.Provider.Get(ctx, &s.Claim)
	s.Placement = at
	launched := conditions.IsTrue(cm, infrav1.LaunchedCondition)
	switch {
	case err == nil && (launched || existing.State == container.StateRunning):
		return l.observe(s, existing, now)
	case err == nil, container.IsNotFound(err) && !launched:
	case container.IsNotFound(err):
		msg := fmt.Sprintf("Container %s disappeared; CAPCT does not recreate it, delete the Machine to replace it", s.ContainerName())
		setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.ContainerMissingReason, msg)
		setCondition(cm, now, infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.ContainerMissingReason, msg)
		l.Recorder.Event(cm, corev1.EventTypeWarning, infrav1.ContainerMissingReason, msg)
		return ctrl.Result{}, nil
	default:
		return l.notLaunched(s, now, nil, fmt.Errorf("failed to inspect the container of ContainerMachine %s/%s: %w", cm.Namespace, cm.Name, err))
	}
	if reason, msg := waitingFor(s); reason != "" {
		setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionFalse, reason, msg)
		return ctrl.Result{}, nil
	}
	// Kept from before the attempt, so that a machine that keeps waiting
	// for the same thing writes nothing (see notLaunched).
	was := conditions.Get(cm, infrav1.LaunchedCondition)
	if was != nil {
		was = was.DeepCopy()
	}
	created, err := l.Provider.Create(ctx, &s.Claim)
	if err != nil {
		return l.notLaunched(s, now, was, err)
	}
	s.Placement = created.Placement
	if created.StaticFallback {
		l.Recorder.Eventf(cm, corev1.EventTypeWarning, StaticAddressUnsupportedReason,
			"The network of container %s takes no static addresses (its subnet was not configured when it was created), so it may come back on another address after a restart", created.Machine.Name)
	}
	return l.observe(s, created.Machine, now)
}

// waitingFor names what the launch still waits for, or returns "". A warm
// machine waits only for the cluster's infrastructure: it boots without a
// Machine and bootstrap data, which it gets when its pool promotes it.
func waitingFor(s *MachineScope) (reason, message string) {
	switch {
	case s.Machine == nil && !s.Warm():
		return infrav1.WaitingForOwnerReason, "Waiting for a Machine to own the ContainerMachine"
	case s.ContainerCluster == nil || s.ContainerCluster.Spec.ClusterID == "" ||
		s.Cluster.Status.Initialization.InfrastructureProvisioned == nil || !*s.Cluster.Status.Initialization.InfrastructureProvisioned:
		return infrav1.WaitingForClusterInfrastructureReason, "Waiting for the cluster's infrastructure"
	case s.BootstrapDataSecretName == nil && !s.Warm():
		return infrav1.WaitingForBootstrapDataReason, "Waiting for the bootstrap provider to write the bootstrap data"
	}
	return "", ""
}

// notLaunched records why the container was not created or found (err).
//
// A *machineprovider.WaitError is waiting, never final: Launched turns
// False with its reason, so that LaunchTimeout counts again from the next
// attempt. One the machine already reported (was, the condition from
// before this attempt) is put back as it was, transition time included, so
// that waiting writes nothing: a write would wake the machine at once, not
// after the wait's requeue. An engine that does not answer is waiting too.
//
// Anything else is a failed attempt: Launched is Unknown from the first
// one, and past LaunchTimeout from then the failure is final. An
// *machineprovider.InvalidSpecError is final at once.
func (l *Launch) notLaunched(s *MachineScope, now time.Time, was *metav1.Condition, err error) (ctrl.Result, error) {
	cm := s.ContainerMachine
	var invalid *machineprovider.InvalidSpecError
	var retry *machineprovider.RetryError
	switch wait, waiting := machineprovider.AsWait(err); {
	case container.IsUnreachable(err):
		return l.engineAway(s, now, err)
	case waiting && was != nil && was.Status == metav1.ConditionFalse && was.Reason == wait.Reason && was.Message == wait.Message:
		conditions.Set(cm, *was)
		return ctrl.Result{RequeueAfter: wait.RequeueAfter}, nil
	case waiting:
		l.recordWait(s, wait)
		setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionFalse, wait.Reason, wait.Message)
		return ctrl.Result{RequeueAfter: wait.RequeueAfter}, nil
	case errors.As(err, &invalid):
		setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.InvalidSpecReason, err.Error())
		l.Recorder.Event(cm, corev1.EventTypeWarning, infrav1.InvalidSpecReason, err.Error())
		return ctrl.Result{}, reconcile.TerminalError(err)
	case errors.As(err, &retry):
		l.Recorder.Event(cm, corev1.EventTypeWarning, LaunchRetriedReason, err.Error())
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	if c := conditions.Get(cm, infrav1.LaunchedCondition); c == nil || c.Status != metav1.ConditionUnknown {
		// Unknown marks the start of the launch: its transition time is
		// what LaunchTimeout counts from.
		setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionUnknown, infrav1.InProgressReason, "Creating the container")
	}
	l.Recorder.Event(cm, corev1.EventTypeWarning, infrav1.LaunchFailedReason, err.Error())
	if elapsed, _ := since(cm, now, infrav1.LaunchedCondition); elapsed >= LaunchTimeout {
		setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.LaunchFailedReason,
			fmt.Sprintf("Launch did not succeed within %s: %v", LaunchTimeout, err))
		return ctrl.Result{}, reconcile.TerminalError(err)
	}
	setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionUnknown, infrav1.FailedReason, err.Error())
	if errors.Is(err, context.Canceled) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: launchRetry}, nil
}

// recordWait tells a person of a new wait where one can act on it, as a
// Warning: on the machine, or once on its ContainerCluster for a full host.
// Placement waits and an image copy or pull in progress are the
// condition's alone (the ContainerCluster's EnginesReady says why the
// engines are not ready).
func (l *Launch) recordWait(s *MachineScope, wait *machineprovider.WaitError) {
	switch wait.Reason {
	case infrav1.WaitingForClusterInfrastructureReason:
	case infrav1.WaitingForHostCapacityReason:
		if wait.Announce {
			l.Recorder.Event(s.ContainerCluster, corev1.EventTypeWarning, wait.Reason, wait.Message)
		}
	case infrav1.CopyingImageReason, infrav1.PullingImageReason:
		// Progress, which the condition shows; nothing to act on.
	default:
		l.Recorder.Event(s.ContainerMachine, corev1.EventTypeWarning, wait.Reason, wait.Message)
	}
}

// The reasons of Launch's warning events that no condition carries.
const (
	// StaticAddressUnsupportedReason: a container that could not get a
	// static address.
	StaticAddressUnsupportedReason = "StaticAddressUnsupported"
	// LaunchRetriedReason: a container that never started, removed to be
	// launched again on other addresses.
	LaunchRetriedReason = "LaunchRetried"
)
