package lifecycle

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// setCondition sets a condition on the machine with the clock's time as its
// transition time, so that timeouts measured from it are testable. The time
// only changes when the status does (metav1 semantics).
func setCondition(m *infrav1.ContainerMachine, now time.Time, conditionType string, status metav1.ConditionStatus, reason, message string) {
	conditions.Set(m, metav1.Condition{
		Type:               conditionType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		LastTransitionTime: metav1.NewTime(now),
	})
}

// since is how long ago the condition last changed status, or false when the
// machine does not have it.
func since(m *infrav1.ContainerMachine, now time.Time, conditionType string) (time.Duration, bool) {
	c := conditions.Get(m, conditionType)
	if c == nil {
		return 0, false
	}
	return now.Sub(c.LastTransitionTime.Time), true
}

// terminalReasons are reasons after which a phase never succeeds: the
// machine must be replaced.
var terminalReasons = map[string]bool{
	infrav1.TimedOutReason:         true,
	infrav1.InvalidSpecReason:      true,
	infrav1.LaunchFailedReason:     true,
	infrav1.ContainerMissingReason: true,
	infrav1.BootstrapFailedReason:  true,
}

// phaseConditions are the conditions Ready summarises, in the order the
// phases set them. ContainerRunning follows Launched: once launched, a
// machine whose container does not run is not Ready whatever it reached.
var phaseConditions = []string{
	infrav1.LaunchedCondition,
	infrav1.ContainerRunningCondition,
	infrav1.BootstrappedCondition,
	infrav1.RegisteredCondition,
	infrav1.InitializedCondition,
}

// TerminalCondition returns the first lifecycle condition that failed for
// good, or nil.
func TerminalCondition(m *infrav1.ContainerMachine) *metav1.Condition {
	for _, t := range phaseConditions {
		if c := conditions.Get(m, t); c != nil && c.Status == metav1.ConditionFalse && terminalReasons[c.Reason] {
			return c
		}
	}
	return nil
}
