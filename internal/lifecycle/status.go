package lifecycle

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// SetReadyCondition summarises the lifecycle conditions into Ready, the
// condition Cluster API mirrors into the Machine's InfrastructureReady. Ready
// is True only when every phase succeeded; otherwise it carries the first
// phase that did not, with its reason, so the Machine shows why.
func SetReadyCondition(m *infrav1.ContainerMachine, now time.Time) {
	if !m.DeletionTimestamp.IsZero() {
		setCondition(m, now, infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.DeletingReason, "Deleting the container")
		return
	}
	if c := TerminalCondition(m); c != nil {
		setCondition(m, now, infrav1.ReadyCondition, metav1.ConditionFalse, c.Reason, c.Type+": "+c.Message)
		return
	}
	for _, t := range phaseConditions {
		c := conditions.Get(m, t)
		if c == nil {
			setCondition(m, now, infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.InProgressReason, fmt.Sprintf("%s: not started", t))
			return
		}
		if c.Status != metav1.ConditionTrue {
			msg := t
			if c.Message != "" {
				msg += ": " + c.Message
			}
			setCondition(m, now, infrav1.ReadyCondition, metav1.ConditionFalse, c.Reason, msg)
			return
		}
	}
	setCondition(m, now, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.SucceededReason, "")
}

// DerivePhase names where the machine is, for kubectl's printed column. It
// is derived from the conditions and never drives any logic.
func DerivePhase(m *infrav1.ContainerMachine) infrav1.MachinePhase {
	switch {
	case !m.DeletionTimestamp.IsZero():
		return infrav1.MachinePhaseDeleting
	case TerminalCondition(m) != nil:
		return infrav1.MachinePhaseFailed
	case conditions.IsFalse(m, infrav1.ContainerRunningCondition):
		return infrav1.MachinePhaseStopped
	case conditions.IsTrue(m, infrav1.InitializedCondition):
		return infrav1.MachinePhaseRunning
	case conditions.IsTrue(m, infrav1.RegisteredCondition):
		return infrav1.MachinePhaseRegistered
	case conditions.IsTrue(m, infrav1.BootstrappedCondition):
		return infrav1.MachinePhaseBootstrapped
	case conditions.IsTrue(m, infrav1.LaunchedCondition):
		return infrav1.MachinePhaseLaunched
	}
	return infrav1.MachinePhasePending
}
