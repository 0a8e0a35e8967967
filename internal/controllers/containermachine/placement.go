package containermachine

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/lifecycle"
)

// placementRecheck is how soon a machine that could not be placed looks
// again: a change to its cluster's engines does not wake it.
const placementRecheck = 30 * time.Second

// engineOf returns the engine s's machine is on, placing it first when it
// is new: the choice (lifecycle.PlaceMachine) is recorded in
// infrav1.EngineAnnotation before any container is made, so that the
// machine is looked for on that engine only, after a restart or a move.
// Placements are made one at a time and count the machines through the
// API reader, so that two machines placed together see each other; that
// happens once in a machine's life, so one lock for every cluster is
// enough. A *lifecycle.PlacementError says why the machine must wait.
func (r *Reconciler) engineOf(ctx context.Context, s *lifecycle.MachineScope) (string, error) {
	cm, cc := s.ContainerMachine, s.ContainerCluster
	engine, recorded, err := lifecycle.RecordedEngine(cm, cc)
	if err != nil || recorded {
		return engine, err
	}
	if !cm.DeletionTimestamp.IsZero() {
		// Never placed, so no container was made: the first engine will
		// find none.
		return r.Engines.ForCluster(cc)[0], nil
	}
	r.placing.Lock()
	defer r.placing.Unlock()
	perEngine, err := r.machinesPerEngine(ctx, s)
	if err != nil {
		return "", err
	}
	answers, err := r.enginesAnswering(ctx, cc)
	if err != nil {
		return "", err
	}
	failureDomain := ""
	if s.Machine != nil {
		failureDomain = s.Machine.Spec.FailureDomain
	}
	if engine, err = lifecycle.PlaceMachine(cc, failureDomain, s.IsControlPlane(), perEngine, answers); err != nil {
		return "", err
	}
	before := cm.DeepCopy()
	metav1.SetMetaDataAnnotation(&cm.ObjectMeta, infrav1.EngineAnnotation, engine)
	if err := r.Client.Patch(ctx, cm, client.MergeFrom(before)); err != nil {
		return "", fmt.Errorf("failed to record engine %s of ContainerMachine %s: %w", engine, klog.KObj(cm), err)
	}
	ctrl.LoggerFrom(ctx).Info("Placed the machine on an engine", "engine", engine)
	return engine, nil
}

// machinesPerEngine counts the machines of s's cluster on each engine,
// when the cluster has engines to choose from.
func (r *Reconciler) machinesPerEngine(ctx context.Context, s *lifecycle.MachineScope) (map[string]int, error) {
	if len(s.ContainerCluster.Spec.Engines) < 2 {
		return nil, nil
	}
	machines := &infrav1.ContainerMachineList{}
	if err := r.APIReader.List(ctx, machines, client.InNamespace(s.ContainerMachine.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: s.Cluster.Name}); err != nil {
		return nil, fmt.Errorf("failed to list the ContainerMachines of Cluster %s: %w", klog.KObj(s.Cluster), err)
	}
	perEngine := map[string]int{}
	for i := range machines.Items {
		if engine, recorded, _ := lifecycle.RecordedEngine(&machines.Items[i], s.ContainerCluster); recorded {
			perEngine[engine]++
		}
	}
	return perEngine, nil
}

// enginesAnswering says which of cc's engines CAPCT reaches now.
func (r *Reconciler) enginesAnswering(ctx context.Context, cc *infrav1.ContainerCluster) (map[string]bool, error) {
	answers := make(map[string]bool, len(cc.Spec.Engines))
	for _, e := range cc.Spec.Engines {
		engine := &infrav1.ContainerEngine{}
		err := r.Client.Get(ctx, client.ObjectKey{Name: e.Name}, engine)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("failed to get ContainerEngine %s of ContainerCluster %s: %w", e.Name, klog.KObj(cc), err)
		}
		answers[e.Name] = engines.Answers(engine)
	}
	return answers, nil
}

// waitForPlacement reports, in Launched, why the machine cannot be placed
// yet, and looks again soon.
func (r *Reconciler) waitForPlacement(cm *infrav1.ContainerMachine, err error) (ctrl.Result, bool) {
	var unplaced *lifecycle.PlacementError
	if !errors.As(err, &unplaced) {
		return ctrl.Result{}, false
	}
	conditions.Set(cm, metav1.Condition{
		Type: infrav1.LaunchedCondition, Status: metav1.ConditionFalse, Reason: unplaced.Reason, Message: unplaced.Message,
		LastTransitionTime: metav1.NewTime(r.Clock.Now()),
	})
	return ctrl.Result{RequeueAfter: placementRecheck}, true
}
