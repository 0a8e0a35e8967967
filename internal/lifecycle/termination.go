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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/machineprovider"
)

// deletionPoll is how soon a deletion looks again for a container that is
// still there.
const deletionPoll = time.Second

// Termination deletes a machine's container. A control-plane machine leaves
// the load balancer first (its weight drops to 0 as soon as it is being
// deleted), so that no request goes to an API server that is going away.
// The container's disappearance is confirmed before the caller removes the
// finalizer; a container that is already gone never blocks deletion.
//
// A machine on a ContainerEngine that does not answer, as when its host is
// lost, cannot have its container removed; waiting for it would hold the
// Machine, and with it the MachineSet's replacement, until the host came
// back. So after UnreachableEngineDeletionTimeout from the start of the
// deletion, Termination gives up on the container: the ContainerCluster
// removes it as an orphan once its engine answers again. The load balancer
// is waited for no longer (loadBalancerNotSynced).
type Termination struct {
	// Provider deletes the container and takes a control-plane machine out
	// of the load balancer.
	Provider Provider
	// Bootstraps forgets the machine's bootstrap.
	Bootstraps *BootstrapRunner
	Clock      clock.PassiveClock
	Recorder   record.EventRecorder
	// UnreachableEngineDeletionTimeout is how long a deletion waits for a
	// ContainerEngine that does not answer; 0 means
	// DefaultUnreachableEngineDeletionTimeout. The manager's own engine is
	// always waited for: when it is gone, so is the host the manager runs
	// on, mostly.
	UnreachableEngineDeletionTimeout time.Duration
}

// DefaultUnreachableEngineDeletionTimeout is the default of
// --unreachable-engine-deletion-timeout: longer than an engine restart, so
// that a restart never leaves an orphan behind.
const DefaultUnreachableEngineDeletionTimeout = 5 * time.Minute

// Reconcile returns done once the container is gone.
func (t *Termination) Reconcile(ctx context.Context, s *MachineScope) (done bool, result ctrl.Result, err error) {
	cm := s.ContainerMachine
	t.Bootstraps.Forget(client.ObjectKeyFromObject(cm))
	if err := t.Provider.LeaveLoadBalancer(ctx, &s.Claim); err != nil {
		if res, wait, err := t.loadBalancerNotSynced(s, err); wait {
			return false, res, err
		}
	}
	deleted, err := t.Provider.Delete(ctx, &s.Claim)
	s.Placement = deleted.Placement
	switch {
	case container.IsUnreachable(err) && !s.OnManagersEngine():
		return t.engineAway(s, err)
	case err != nil:
		return false, ctrl.Result{}, err
	case deleted.Gone:
		// The other nodes' routes to its pod CIDRs go when the
		// ContainerCluster controller sees the ContainerMachine go.
		return true, ctrl.Result{}, nil
	}
	// Confirm on the next pass rather than trusting the delete call.
	return false, ctrl.Result{RequeueAfter: deletionPoll}, nil
}

// loadBalancerNotSynced decides whether the deletion waits for the load
// balancer, which could not be synced (err) to take the machine out. The
// drain only spares clients of the API server a moment of errors; the
// machine's deletion, and the remediation or rollout behind it, must not
// hang on it. So what waiting does not fix (the configuration refused, the
// custom template's ConfigMap or the load-balancer container gone) lets the
// deletion go on at once, and anything else (the API server or the load
// balancer's engine away) is waited for up to
// UnreachableEngineDeletionTimeout from the start of the deletion, as the
// machine's container is. The ContainerCluster controller syncs the load
// balancer once it can, the machine gone.
func (t *Termination) loadBalancerNotSynced(s *MachineScope, err error) (res ctrl.Result, wait bool, _ error) {
	cm := s.ContainerMachine
	var permanent *machineprovider.PermanentError
	if !errors.As(err, &permanent) {
		now := t.Clock.Now()
		left := t.deletionTimeLeft(cm, now)
		switch {
		case left > 0 && container.IsUnreachable(err):
			// Waiting, not failing: as engineAway, and without the
			// controller's backoff, which could outlast the timeout.
			setCondition(cm, now, infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.EngineUnreachableReason, fmt.Sprintf(
				"Deleting: the engine of the load balancer does not answer (%v); deleting container %s without taking it out of the load balancer in %s",
				err, s.ContainerName(), left.Round(time.Second)))
			return ctrl.Result{RequeueAfter: min(left, containerRecheck)}, true, nil
		case left > 0:
			return ctrl.Result{}, true, fmt.Errorf("failed to take ContainerMachine %s/%s out of the load balancer: %w", cm.Namespace, cm.Name, err)
		}
	}
	t.Recorder.Eventf(cm, corev1.EventTypeWarning, "LoadBalancerNotSynced",
		"Deleting container %s without taking it out of the load balancer of Cluster %s first: %v; the load balancer is synced once it can be",
		s.ContainerName(), s.Cluster.Name, err)
	return ctrl.Result{}, false, nil
}

// deletionTimeLeft is how much of UnreachableEngineDeletionTimeout is left
// of cm's deletion at now.
func (t *Termination) deletionTimeLeft(cm *infrav1.ContainerMachine, now time.Time) time.Duration {
	timeout := t.UnreachableEngineDeletionTimeout
	if timeout <= 0 {
		timeout = DefaultUnreachableEngineDeletionTimeout
	}
	return cm.DeletionTimestamp.Add(timeout).Sub(now)
}

// engineAway waits for the machine's engine, which does not answer (err),
// until UnreachableEngineDeletionTimeout from the start of the deletion,
// saying so in ContainerRunning; then it gives up on the container and
// says where it was left.
func (t *Termination) engineAway(s *MachineScope, err error) (bool, ctrl.Result, error) {
	cm := s.ContainerMachine
	now := t.Clock.Now()
	left := t.deletionTimeLeft(cm, now)
	if left > 0 {
		setCondition(cm, now, infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.EngineUnreachableReason, fmt.Sprintf(
			"Deleting: engine %s does not answer (%v); giving up on container %s in %s", s.Engine, err, s.ContainerName(), left.Round(time.Second)))
		return false, ctrl.Result{RequeueAfter: min(left, containerRecheck)}, nil
	}
	t.Recorder.Eventf(cm, corev1.EventTypeWarning, infrav1.EngineUnreachableReason,
		"Gave up deleting container %s: engine %s has not answered for %s since the deletion began; Cluster %s removes the container once the engine answers again",
		s.ContainerName(), s.Engine, now.Sub(cm.DeletionTimestamp.Time).Round(time.Second), s.Cluster.Name)
	return true, ctrl.Result{}, nil
}
