package lifecycle

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
)

// This file is what Launch observes of a container that exists: whether it
// runs (ContainerRunning), and whether its engine answers.

// engineAway records that the engine did not answer. That never fails the
// machine and never counts toward a timeout: a launch in progress turns
// Launched False, so that LaunchTimeout counts again from the next attempt
// (Launched Unknown) once the engine answers, and a launched machine turns
// ContainerRunning False until its container is seen running again. The
// machine looks again soon instead of returning the error, which would back
// off for minutes while the engine is away.
func (l *Launch) engineAway(s *MachineScope, now time.Time, err error) (ctrl.Result, error) {
	cm := s.ContainerMachine
	msg := fmt.Sprintf("The container engine does not answer: %v", err)
	if conditions.IsTrue(cm, infrav1.LaunchedCondition) {
		setCondition(cm, now, infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.EngineUnreachableReason, msg)
	} else {
		setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.EngineUnreachableReason, msg)
	}
	return ctrl.Result{RequeueAfter: containerRecheck}, nil
}

// observe records a container that exists and is the machine's. One that
// ran and stopped is reported, not started: the engine's restart policy or
// a person decides whether it runs again, and its start event brings the
// machine back here within seconds.
func (l *Launch) observe(s *MachineScope, m *container.Machine, now time.Time) (ctrl.Result, error) {
	cm := s.ContainerMachine
	if !s.Owner().Owns(m.Labels) {
		return l.notLaunched(s, now, nil, container.NotOwnedError("use", "container", m.Name, s.Owner(), m.Labels))
	}
	if m.State != container.StateRunning {
		reason, msg := notRunning(m)
		if conditions.IsTrue(cm, infrav1.ContainerRunningCondition) {
			l.Recorder.Event(cm, corev1.EventTypeWarning, reason, msg)
		}
		setCondition(cm, now, infrav1.ContainerRunningCondition, metav1.ConditionFalse, reason, msg)
		return ctrl.Result{RequeueAfter: containerRecheck}, nil
	}
	s.Container = m
	cm.Status.Addresses = Addresses(m)
	if !conditions.IsTrue(cm, infrav1.LaunchedCondition) {
		setCondition(cm, now, infrav1.LaunchedCondition, metav1.ConditionTrue, infrav1.SucceededReason, "")
		launchDuration.Observe(now.Sub(cm.CreationTimestamp.Time).Seconds())
	}
	// Once the Node is initialized, whether the machine is back after a
	// stop also depends on the Node: Liveness decides then.
	if !conditions.IsTrue(cm, infrav1.InitializedCondition) {
		setCondition(cm, now, infrav1.ContainerRunningCondition, metav1.ConditionTrue, infrav1.RunningReason, "")
	}
	return ctrl.Result{}, nil
}

// notRunning names the state of a container that exists but does not run.
func notRunning(m *container.Machine) (reason, message string) {
	if m.State == container.StateRestarting {
		return infrav1.RestartingReason, fmt.Sprintf("Container %s is restarting under its restart policy", m.Name)
	}
	return infrav1.StoppedReason, fmt.Sprintf("Container %s is %s; CAPCT does not start it again, its restart policy or a person does", m.Name, m.State)
}

// Addresses are a machine's addresses: its hostname and one InternalIP per
// family, published from launch on because the load balancer needs a
// control-plane machine's address before kubeadm init finishes.
func Addresses(m *container.Machine) []clusterv1.MachineAddress {
	addrs := []clusterv1.MachineAddress{{Type: clusterv1.MachineHostName, Address: m.Name}}
	if m.IPv4.IsValid() {
		addrs = append(addrs, clusterv1.MachineAddress{Type: clusterv1.MachineInternalIP, Address: m.IPv4.String()})
	}
	if m.IPv6.IsValid() {
		addrs = append(addrs, clusterv1.MachineAddress{Type: clusterv1.MachineInternalIP, Address: m.IPv6.String()})
	}
	return addrs
}
