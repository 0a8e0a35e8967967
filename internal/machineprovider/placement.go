package machineprovider

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/engines"
)

// placementRecheck is how soon a machine that could not be placed looks
// again: a change to its cluster's engines does not wake it.
const placementRecheck = 30 * time.Second

// Placement is where a machine's container is: the engine, and that
// engine's runtime, through which the later phases reach the container.
type Placement struct {
	// Engine names the engine; engines.Local for the manager's own.
	Engine string
	// Runtime is the engine's; nil until the machine is placed.
	Runtime container.Runtime
}

// OnManagersEngine reports whether the container is on the manager's own
// engine, whose host is the manager's: when it does not answer, the manager
// is mostly gone too, so nothing gives up on it.
func (p Placement) OnManagersEngine() bool { return p.Engine == engines.Local }

// EngineDescription names the engine in a message.
func (p Placement) EngineDescription() string {
	if p.OnManagersEngine() {
		return "the manager's engine"
	}
	return fmt.Sprintf("engine %q", p.Engine)
}

// FailureDomain is the machine's failure domain as the InfraMachine
// contract reports it: the engine, for a machine on a cluster's engines;
// on the manager's own engine, the Machine's own failure domain only labels
// it (machineFailureDomain, possibly empty).
func (p Placement) FailureDomain(machineFailureDomain string) string {
	if !p.OnManagersEngine() {
		return p.Engine
	}
	return machineFailureDomain
}

// RecordedEngine returns the engine a machine's container is on, as far as
// the machine records it, and whether it does. A machine records its
// engine in infrav1.EngineAnnotation before its container is made; one
// whose container was made before CAPCT placed machines (it has a provider
// ID but no annotation) is on its cluster's first engine, where every
// machine was then. An annotation that names an engine the cluster does not
// list is a *WaitError: the annotation is set by CAPCT, and honouring one
// set by hand would let a machine use an engine its namespace was never
// allowed. A machine being deleted is where its annotation says, listed or
// not: its container is there to be removed. Without its ContainerCluster
// (not made yet, or deleted first) a machine is where its annotation says,
// or on the manager's own engine: nothing is launched then.
func RecordedEngine(cm *infrav1.ContainerMachine, cc *infrav1.ContainerCluster) (string, bool, error) {
	listed := engines.Listed(cc)
	engine, ok := cm.Annotations[infrav1.EngineAnnotation]
	switch {
	case cc == nil || ok && !cm.DeletionTimestamp.IsZero():
		return engine, true, nil
	case ok && (engine == engines.Local && len(listed) == 0 || slices.Contains(listed, engine)):
		return engine, true, nil
	case ok:
		return "", false, &WaitError{Reason: infrav1.FailureDomainNotFoundReason, RequeueAfter: placementRecheck, Message: fmt.Sprintf(
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
// and a lost host's machines are replaced on the others. Why it cannot be
// placed yet is a *WaitError.
func PlaceMachine(cc *infrav1.ContainerCluster, failureDomain string, controlPlane bool, perEngine map[string]int, answers map[string]bool) (string, error) {
	if len(cc.Spec.Engines) == 0 {
		return engines.Local, nil
	}
	wait := func(reason, message string) error {
		return &WaitError{Reason: reason, Message: message, RequeueAfter: placementRecheck}
	}
	if ready := conditions.Get(cc, infrav1.EnginesReadyCondition); ready == nil ||
		ready.Status != metav1.ConditionTrue && ready.Reason != infrav1.EngineUnreachableReason {
		message := "the engines of ContainerCluster " + cc.Name + " are not ready"
		if ready != nil && ready.Message != "" {
			message += ": " + ready.Message
		}
		return "", wait(infrav1.WaitingForClusterInfrastructureReason, message)
	}
	if failureDomain != "" {
		if !slices.Contains(engines.Listed(cc), failureDomain) {
			return "", wait(infrav1.FailureDomainNotFoundReason, fmt.Sprintf(
				"the Machine's failure domain %q is not an engine of ContainerCluster %s (spec.engines)", failureDomain, cc.Name))
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
		return "", wait(infrav1.FailureDomainNotFoundReason, fmt.Sprintf(
			"no engine of ContainerCluster %s runs control-plane machines: every entry of spec.engines sets controlPlane to false", cc.Name))
	case best == "":
		return "", wait(infrav1.WaitingForClusterInfrastructureReason, fmt.Sprintf(
			"no engine of ContainerCluster %s that may run the machine answers", cc.Name))
	}
	return best, nil
}

func firstEngine(listed []string) string {
	if len(listed) == 0 {
		return engines.Local
	}
	return listed[0]
}

// locate returns where c's container is, or would be looked for: its
// recorded engine; the first engine of its cluster for a machine being
// deleted that was never placed (no container was made, and the first
// engine will find none); placed false for a live machine not placed yet.
func (p *Provider) locate(c *Claim) (at Placement, placed bool, err error) {
	cm := c.ContainerMachine
	engine, recorded, err := RecordedEngine(cm, c.ContainerCluster)
	switch {
	case err != nil:
		return Placement{}, false, err
	case !recorded && cm.DeletionTimestamp.IsZero():
		return Placement{}, false, nil
	case !recorded:
		engine = p.Engines.ForCluster(c.ContainerCluster)[0]
	}
	rt, err := p.Engines.Get(engine)
	if err != nil {
		return Placement{}, false, fmt.Errorf("failed to reach the engine of ContainerMachine %s: %w", klog.KObj(cm), err)
	}
	return Placement{Engine: engine, Runtime: rt}, true, nil
}

// place returns where c's container is, placing it first when it is new:
// the choice (PlaceMachine) is recorded in infrav1.EngineAnnotation before
// any container is made, so that the machine is looked for on that engine
// only, after a restart or a move. Placements are made one at a time and
// count the machines through the API reader, so that two machines placed
// together see each other; that happens once in a machine's life, so one
// lock for every cluster is enough.
func (p *Provider) place(ctx context.Context, c *Claim) (Placement, error) {
	if at, placed, err := p.locate(c); err != nil || placed {
		return at, err
	}
	cm, cc := c.ContainerMachine, c.ContainerCluster
	p.placing.Lock()
	defer p.placing.Unlock()
	perEngine, err := p.machinesPerEngine(ctx, c)
	if err != nil {
		return Placement{}, err
	}
	answers, err := p.enginesAnswering(ctx, cc)
	if err != nil {
		return Placement{}, err
	}
	engine, err := PlaceMachine(cc, c.RequestedFailureDomain(), c.IsControlPlane(), perEngine, answers)
	if err != nil {
		return Placement{}, err
	}
	before := cm.DeepCopy()
	metav1.SetMetaDataAnnotation(&cm.ObjectMeta, infrav1.EngineAnnotation, engine)
	if err := p.Client.Patch(ctx, cm, client.MergeFrom(before)); err != nil {
		return Placement{}, fmt.Errorf("failed to record engine %s of ContainerMachine %s: %w", engine, klog.KObj(cm), err)
	}
	ctrl.LoggerFrom(ctx).Info("Placed the machine on an engine", "engine", engine)
	rt, err := p.Engines.Get(engine)
	if err != nil {
		return Placement{}, fmt.Errorf("failed to reach the engine of ContainerMachine %s: %w", klog.KObj(cm), err)
	}
	return Placement{Engine: engine, Runtime: rt}, nil
}

// machinesPerEngine counts the machines of c's cluster on each engine,
// when the cluster has engines to choose from.
func (p *Provider) machinesPerEngine(ctx context.Context, c *Claim) (map[string]int, error) {
	if len(c.ContainerCluster.Spec.Engines) < 2 {
		return nil, nil
	}
	machines := &infrav1.ContainerMachineList{}
	if err := p.APIReader.List(ctx, machines, client.InNamespace(c.ContainerMachine.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: c.Cluster.Name}); err != nil {
		return nil, fmt.Errorf("failed to list the ContainerMachines of Cluster %s: %w", klog.KObj(c.Cluster), err)
	}
	perEngine := map[string]int{}
	for i := range machines.Items {
		if engine, recorded, _ := RecordedEngine(&machines.Items[i], c.ContainerCluster); recorded {
			perEngine[engine]++
		}
	}
	return perEngine, nil
}

// enginesAnswering says which of cc's engines CAPCT reaches now.
func (p *Provider) enginesAnswering(ctx context.Context, cc *infrav1.ContainerCluster) (map[string]bool, error) {
	answers := make(map[string]bool, len(cc.Spec.Engines))
	for _, e := range cc.Spec.Engines {
		engine := &infrav1.ContainerEngine{}
		err := p.Client.Get(ctx, client.ObjectKey{Name: e.Name}, engine)
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
