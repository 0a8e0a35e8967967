package lifecycle

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
)

const (
	// DefaultRegistrationTTL bounds the time from launch to registration.
	DefaultRegistrationTTL = 15 * time.Minute
	// DefaultInitializationTTL bounds the time from registration to a
	// Ready, initialized Node.
	DefaultInitializationTTL = 15 * time.Minute
)

// Liveness marks a machine failed for good when its Node does not register
// within the registration TTL after launch, or does not become Ready within
// the initialization TTL after registering. A failed machine is reported
// through a terminal condition reason (so Ready turns False with it), an
// event and a metric; a MachineHealthCheck or its pool replaces it, and its
// container goes with it on deletion, so nothing leaks.
//
// Once the machine is initialized, Liveness decides when it is back after
// its container stopped or restarted: ContainerRunning turns True again
// only when the container runs and its Node has reported Ready since the
// container started (see runningCondition).
type Liveness struct {
	// NodeRecheck is how soon a machine whose Node is not back looks again
	// (Config.NodeRecheck).
	NodeRecheck time.Duration
	Clock       clock.PassiveClock
	Recorder    record.EventRecorder
}

// Reconcile implements Phase.
func (l *Liveness) Reconcile(_ context.Context, s *MachineScope) (ctrl.Result, error) {
	cm := s.ContainerMachine
	now := l.Clock.Now()
	if TerminalCondition(cm) != nil {
		return ctrl.Result{}, nil
	}
	if conditions.IsTrue(cm, infrav1.InitializedCondition) {
		return l.nodeBack(s, now), nil
	}
	if !conditions.IsTrue(cm, infrav1.RegisteredCondition) {
		if s.Machine == nil {
			// A warm machine, or one its pool has just promoted: it is
			// asked to register only once it is a Machine's.
			return ctrl.Result{}, nil
		}
		return l.check(s, now, infrav1.LaunchedCondition, infrav1.RegisteredCondition, "registration",
			durationOr(cm.Spec.Lifecycle.RegistrationTTL, DefaultRegistrationTTL), s.Machine.CreationTimestamp.Time)
	}
	return l.check(s, now, infrav1.RegisteredCondition, infrav1.InitializedCondition, "initialization",
		durationOr(cm.Spec.Lifecycle.InitializationTTL, DefaultInitializationTTL), time.Time{})
}

// check fails the pending condition when the TTL has passed, counted from
// the start condition turning True or from notBefore, whichever is later,
// and otherwise asks to be called again when it will have. notBefore is
// the Machine's creation for registration: a warm machine launched long
// before its pool promoted it is asked to register from its promotion.
func (l *Liveness) check(s *MachineScope, now time.Time, start, pending, what string, ttl time.Duration, notBefore time.Time) (ctrl.Result, error) {
	cm := s.ContainerMachine
	if !conditions.IsTrue(cm, start) {
		return ctrl.Result{}, nil
	}
	elapsed, _ := since(cm, now, start)
	if fromNotBefore := now.Sub(notBefore); !notBefore.IsZero() && fromNotBefore < elapsed {
		elapsed = fromNotBefore
	}
	if elapsed < ttl {
		return ctrl.Result{RequeueAfter: ttl - elapsed}, nil
	}
	msg := fmt.Sprintf("The Node did not complete %s within %s; the machine must be replaced", what, ttl)
	setCondition(cm, now, pending, metav1.ConditionFalse, infrav1.TimedOutReason, msg)
	l.Recorder.Event(cm, corev1.EventTypeWarning, infrav1.TimedOutReason, msg)
	livenessTerminations.WithLabelValues(what).Inc()
	return ctrl.Result{}, nil
}

// nodeBack sets ContainerRunning of an initialized machine whose container
// runs (Launch reports one that does not), from its Node as Registration
// found it in the workload cluster this pass, and looks again soon while
// the Node is not back.
func (l *Liveness) nodeBack(s *MachineScope, now time.Time) ctrl.Result {
	cm := s.ContainerMachine
	if s.Container == nil {
		return ctrl.Result{}
	}
	wasRunning := conditions.IsTrue(cm, infrav1.ContainerRunningCondition)
	status, reason, msg := runningCondition(s.Container, s.Node, wasRunning)
	setCondition(cm, now, infrav1.ContainerRunningCondition, status, reason, msg)
	if status != metav1.ConditionTrue {
		return ctrl.Result{RequeueAfter: nodeRecheck(l.NodeRecheck)}
	}
	return ctrl.Result{}
}

// runningCondition is ContainerRunning of an initialized machine whose
// container c runs. The machine is back when its Node has reported Ready
// after the container last started: the Node's Ready condition from
// before a restart is stale, and only a kubelet that runs again reports
// anew (it reports at once when it starts). A Node that reported since the
// start but is not Ready keeps a running machine running: that is the
// Node's health, which Cluster API's NodeHealthy reports, not the
// infrastructure's. node is nil when the workload cluster is out of reach;
// nothing then says a running machine changed.
func runningCondition(c *container.Machine, node *corev1.Node, wasRunning bool) (metav1.ConditionStatus, string, string) {
	switch {
	case node == nil && wasRunning:
		return metav1.ConditionTrue, infrav1.RunningReason, ""
	case node == nil:
		return metav1.ConditionFalse, infrav1.NodeNotReadyReason,
			fmt.Sprintf("Container %s runs again; waiting to reach its Node in the workload cluster", c.Name)
	}
	reported, ready := nodeReport(node)
	switch {
	case reported.Before(c.Started.Truncate(time.Second)):
		return metav1.ConditionFalse, infrav1.NodeNotReadyReason,
			fmt.Sprintf("Container %s started at %s; waiting for Node %s to report Ready since", c.Name, c.Started.UTC().Format(time.RFC3339), node.Name)
	case wasRunning || ready:
		return metav1.ConditionTrue, infrav1.RunningReason, ""
	}
	return metav1.ConditionFalse, infrav1.NodeNotReadyReason,
		fmt.Sprintf("Container %s runs again; Node %s is not Ready yet", c.Name, node.Name)
}

// nodeReport returns when the Node's kubelet last reported its Ready
// condition (metav1 times have whole seconds) and whether it is Ready.
func nodeReport(n *corev1.Node) (time.Time, bool) {
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		at := c.LastHeartbeatTime.Time
		if c.LastTransitionTime.After(at) {
			at = c.LastTransitionTime.Time
		}
		return at, c.Status == corev1.ConditionTrue
	}
	return time.Time{}, false
}

func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}
