package lifecycle

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
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
type Liveness struct{ *Deps }

// Reconcile implements Phase.
func (l *Liveness) Reconcile(_ context.Context, s *MachineScope) (ctrl.Result, error) {
	cm := s.ContainerMachine
	now := l.Clock.Now()
	if conditions.IsTrue(cm, infrav1.InitializedCondition) || TerminalCondition(cm) != nil {
		return ctrl.Result{}, nil
	}
	if !conditions.IsTrue(cm, infrav1.RegisteredCondition) {
		return l.check(s, now, infrav1.LaunchedCondition, infrav1.RegisteredCondition, "registration",
			durationOr(cm.Spec.Lifecycle.RegistrationTTL, DefaultRegistrationTTL))
	}
	return l.check(s, now, infrav1.RegisteredCondition, infrav1.InitializedCondition, "initialization",
		durationOr(cm.Spec.Lifecycle.InitializationTTL, DefaultInitializationTTL))
}

// check fails the pending condition when the TTL counted from the start
// condition turning True has passed, and otherwise asks to be called again
// when it will have.
func (l *Liveness) check(s *MachineScope, now time.Time, start, pending, what string, ttl time.Duration) (ctrl.Result, error) {
	cm := s.ContainerMachine
	if !conditions.IsTrue(cm, start) {
		return ctrl.Result{}, nil
	}
	elapsed, _ := since(cm, now, start)
	if elapsed < ttl {
		return ctrl.Result{RequeueAfter: ttl - elapsed}, nil
	}
	msg := fmt.Sprintf("The Node did not complete %s within %s; the machine must be replaced", what, ttl)
	setCondition(cm, now, pending, metav1.ConditionFalse, infrav1.TimedOutReason, msg)
	l.Recorder.Event(cm, corev1.EventTypeWarning, infrav1.TimedOutReason, msg)
	livenessTerminations.WithLabelValues(what).Inc()
	return ctrl.Result{}, nil
}

func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}
