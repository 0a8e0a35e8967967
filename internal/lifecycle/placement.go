package lifecycle

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/engines"
)

// PlacementError says why a machine cannot be placed on an engine yet. It
// is waiting, not failure: the machine launches once its cluster's engines
// or its failure domain change. Reason is the Launched condition's.
type PlacementError struct {
	Reason  string
	Message string
}

func (e *PlacementError) Error() string { return e.Message }

// RecordedEngine returns the engine a machine's container is on, as far as
// the machine records it, and whether it does. A machine records its
// engine in infrav1.EngineAnnotation before its container is made; one
// whose container was made before CAPCT placed machines (it has a provider
// ID but no annotation) is on its cluster's first engine, where every
// machine was then. An annotation that names an engine the cluster does not
// list is an error: the annotation is set by CAPCT, and honouring one set by
// hand would let a machine use an engine its namespace was never allowed.
// A machine being deleted is where its annotation says, listed or not:
// its container is there to be removed. Without its ContainerCluster (not
// made yet, or deleted first) a machine is where its annotation says, or
// on the manager's own engine: nothing is launched then.
func RecordedEngine(cm *infrav1.ContainerMachine, cc *infrav1.ContainerCluster) (string, bool, error) {
	listed := engines.Listed(cc)
	engine, ok := cm.Annotations[infrav1.EngineAnnotation]
	switch {
	case cc == nil || ok && !cm.DeletionTimestamp.IsZero():
		return engine, true, nil
	case ok && (engine == engines.Local && len(listed) == 0 || slices.Contains(listed, engine)):
		return engine, true, nil
	case ok:
		return "", false, &PlacementError{Reason: infrav1.FailureDomainNotFoundReason, Message: fmt.Sprintf(
			"annotation %s names engine %q, which ContainerCluster %s does not list in spec.engines", infrav1.EngineAnnotation, engine, cc.Name)}
	case cm.Spec.ProviderID != "" || len(listed) == 0:
		return firstEngine(listed), true, nil
	}
	return "", false, nil
}

// PlaceMachine picks the engine a new machine runs on, the one place that
// choice is made. A cluster on the manager's own engine has nothing to
// choose. Otherwise the machine waits while its cluster's engines are not
// ready (the ContainerCluster's EnginesReady), so that no machine starts on
// an engine that is gone or no longer allows its namespace; only engines
// that do not answer (EngineUnreachable) let the others go on. A failure
// domain names the engine, as the InfraMachine contract asks; it must be
// one the cluster lists, and the machine waits there for it to answer.
// Without one, the machine goes to an engine that answers (answers) and
// may run it (controlPlane for control-plane machines) and holds the
// fewest of the cluster's machines (perEngine), the first listed on a tie,
// so that a MachineDeployment without failure domains spreads its workers,
// and a lost host's machines are replaced on the others.
func PlaceMachine(cc *infrav1.ContainerCluster, failureDomain string, controlPlane bool, perEngine map[string]int, answers map[string]bool) (string, error) {
	if len(cc.Spec.Engines) == 0 {
		return engines.Local, nil
	}
	if ready := conditions.Get(cc, infrav1.EnginesReadyCondition); ready == nil ||
		ready.Status != metav1.ConditionTrue && ready.Reason != infrav1.EngineUnreachableReason {
		message := "the engines of ContainerCluster " + cc.Name + " are not ready"
		if ready != nil && ready.Message != "" {
			message += ": " + ready.Message
		}
		return "", &PlacementError{Reason: infrav1.WaitingForClusterInfrastructureReason, Message: message}
	}
	if failureDomain != "" {
		if !slices.Contains(engines.Listed(cc), failureDomain) {
			return "", &PlacementError{Reason: infrav1.FailureDomainNotFoundReason, Message: fmt.Sprintf(
				"the Machine's failure domain %q is not an engine of ContainerCluster %s (spec.engines)", failureDomain, cc.Name)}
		}
		return failureDomain, nil
	}
	best, mayRun := "", false
	for _, e := range cc.Spec.Engines {
		if controlPlane && !ptr.Deref(e.ControlPlane, true) {
			continue
		}
		mayRun = true
		if answers[e.Name] && (best == "" || perEngine[e.Name] < perEngine[best]) {
			best = e.Name
		}
	}
	switch {
	case !mayRun:
		return "", &PlacementError{Reason: infrav1.FailureDomainNotFoundReason, Message: fmt.Sprintf(
			"no engine of ContainerCluster %s runs control-plane machines: every entry of spec.engines sets controlPlane to false", cc.Name)}
	case best == "":
		return "", &PlacementError{Reason: infrav1.WaitingForClusterInfrastructureReason, Message: fmt.Sprintf(
			"no engine of ContainerCluster %s that may run the machine answers", cc.Name)}
	}
	return best, nil
}

func firstEngine(listed []string) string {
	if len(listed) == 0 {
		return engines.Local
	}
	return listed[0]
}
