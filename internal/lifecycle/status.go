package lifecycle

import (
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// deletingCondition is the type of the condition the summary counts while
// the machine is being deleted. It is never set on the ContainerMachine:
// deletion is told by the deletion timestamp, and it is added only to what
// Ready summarises, so that Ready says Deleting first, in Cluster API's
// manner (its Machine's Ready summarises a Deleting condition too).
const deletingCondition = "Deleting"

// maxConditionMessage is metav1.Condition's limit on a message: a summary
// joins several phases' messages, and a longer one would make the API
// server refuse the whole status patch.
const maxConditionMessage = 32768

// waitingReasons are the reasons of a phase that only waits for the one
// before it. Behind a phase that is not True they repeat what that phase's
// line says, so the summary leaves them out of Ready's message.
var waitingReasons = map[string]bool{
	infrav1.WaitingForLaunchReason:       true,
	infrav1.WaitingForBootstrapReason:    true,
	infrav1.WaitingForRegistrationReason: true,
	conditions.NotYetReportedReason:      true,
}

// SetReadyCondition summarises the lifecycle conditions into Ready, the
// condition Cluster API mirrors into the Machine's InfrastructureReady, with
// Cluster API's summary helpers, so that its message reads as Cluster API's
// own ("* Bootstrapped: ...", a line per phase that is not True, leaving
// out those that only wait for an earlier one).
//
// Ready is True only when every phase condition is True. Otherwise it is
// False (also while a phase is Unknown: Cluster API would say Unknown, but
// Ready has always been False until the machine is ready, and the Machine's
// InfrastructureReady with it) and its reason is, in this order: Deleting
// while the machine is deleted; the reason of a phase that failed for good
// (TerminalCondition); the reason of the first phase that is not True, or
// InProgress when that phase has not started. The reasons are the phases'
// own rather than Cluster API's generic NotReady, because they are what
// docs/troubleshooting.md is indexed by.
func SetReadyCondition(m *infrav1.ContainerMachine, now time.Time) {
	ready, err := readySummary(m)
	if err != nil {
		// Cannot happen: the condition types are never empty and missing
		// phases are counted as not started. Should it, Ready stays False so
		// that a bug here never reports a machine ready.
		ready = &metav1.Condition{Status: metav1.ConditionFalse, Reason: infrav1.InProgressReason,
			Message: fmt.Sprintf("failed to summarise the lifecycle conditions: %v", err)}
	}
	setCondition(m, now, infrav1.ReadyCondition, ready.Status, ready.Reason, truncateMessage(ready.Message))
}

// readySummary computes Ready with conditions.NewSummaryCondition.
func readySummary(m *infrav1.ContainerMachine) (*metav1.Condition, error) {
	source := summarySource(slices.Clone(m.GetConditions()))
	if !m.DeletionTimestamp.IsZero() {
		source = append(source, metav1.Condition{Type: deletingCondition, Status: metav1.ConditionTrue,
			Reason: infrav1.DeletingReason, Message: "Deleting the container"})
	}
	return conditions.NewSummaryCondition(source, infrav1.ReadyCondition,
		// The order is the phases' order: the first phase not True is
		// the one Ready names.
		conditions.ForConditionTypes(append([]string{deletingCondition}, phaseConditions...)),
		// Missing phases count as not started, but Deleting exists only
		// while deleting.
		conditions.IgnoreTypesIfMissing{deletingCondition},
		conditions.CustomMergeStrategy{MergeStrategy: readyMergeStrategy(m)},
	)
}

// summarySource is the list of conditions Ready summarises: the machine's,
// plus Deleting while it is deleted.
type summarySource []metav1.Condition

// GetConditions implements conditions.Getter.
func (s summarySource) GetConditions() []metav1.Condition { return s }

// readyMergeStrategy is Cluster API's default merge with two changes:
//   - every phase that is not True is an issue (False or Unknown alike),
//     except one that only waits behind an earlier phase that is not True,
//     which counts as info and so is left out of the message; Deleting,
//     whose polarity is negative, is an issue while it is there. Since the
//     first phase that is not True never waits behind another, Ready is True
//     exactly when every phase is;
//   - the reason is computed by readyReason rather than Cluster API's
//     generic NotReady.
func readyMergeStrategy(m *infrav1.ContainerMachine) conditions.MergeStrategy {
	behind := waitingBehind(m)
	terminal := TerminalCondition(m)
	return conditions.DefaultMergeStrategy(
		conditions.GetPriorityFunc(func(c metav1.Condition) conditions.MergePriority {
			switch {
			case c.Type == deletingCondition:
				return conditions.IssueMergePriority
			case c.Status == metav1.ConditionTrue, behind[c.Type]:
				return conditions.InfoMergePriority
			}
			return conditions.IssueMergePriority
		}),
		conditions.ComputeReasonFunc(func(issues, _, _ []conditions.ConditionWithOwnerInfo) string {
			return readyReason(issues, terminal)
		}),
	)
}

// waitingBehind returns the phases whose condition only says they wait for
// an earlier phase that is not True, or that have not started behind one.
func waitingBehind(m *infrav1.ContainerMachine) map[string]bool {
	behind := map[string]bool{}
	earlierNotTrue := false
	for _, t := range phaseConditions {
		c := conditions.Get(m, t)
		reason := conditions.NotYetReportedReason
		if c != nil {
			reason = c.Reason
		}
		if earlierNotTrue && (c == nil || c.Status != metav1.ConditionTrue) && waitingReasons[reason] {
			behind[t] = true
		}
		if c == nil || c.Status != metav1.ConditionTrue {
			earlierNotTrue = true
		}
	}
	return behind
}

// readyReason is Ready's reason given the issues in the phases' order
// (Deleting first) and the phase that failed for good, if any.
func readyReason(issues []conditions.ConditionWithOwnerInfo, terminal *metav1.Condition) string {
	if len(issues) == 0 {
		return infrav1.SucceededReason
	}
	first := issues[0]
	switch {
	case first.Type == deletingCondition:
		return infrav1.DeletingReason
	case terminal != nil:
		return terminal.Reason
	case first.Reason == conditions.NotYetReportedReason:
		return infrav1.InProgressReason
	}
	return first.Reason
}

// truncateMessage cuts a message to what the API server accepts, on a
// character boundary.
func truncateMessage(msg string) string {
	const ellipsis = "..."
	if len(msg) <= maxConditionMessage {
		return msg
	}
	cut := maxConditionMessage - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + ellipsis
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
	case !conditions.IsTrue(m, infrav1.BootstrappedCondition):
		// The Node registers, and may be initialized, while the bootstrap
		// data still runs; the machine is Launched until it has run.
		if conditions.IsTrue(m, infrav1.LaunchedCondition) {
			return infrav1.MachinePhaseLaunched
		}
		return infrav1.MachinePhasePending
	case conditions.IsTrue(m, infrav1.InitializedCondition):
		return infrav1.MachinePhaseRunning
	case conditions.IsTrue(m, infrav1.RegisteredCondition):
		return infrav1.MachinePhaseRegistered
	}
	return infrav1.MachinePhaseBootstrapped
}
