package lifecycle

import (
	"context"
	"errors"
	"time"

	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/cluster-api/util"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/nodeipam"
)

// Phase is one step of a machine's life. Reconcile is idempotent: it looks
// at its own condition first and does nothing once its work is done.
type Phase interface {
	Reconcile(ctx context.Context, s *MachineScope) (ctrl.Result, error)
}

// Machine runs the phases of a machine's life in order.
type Machine struct {
	phases []Phase
}

// Config is what the lifecycle is built from. Each phase receives only the
// parts it uses.
type Config struct {
	// Client reads the management cluster (the bootstrap data Secret).
	Client client.Client
	// Provider creates, finds and deletes the machines' containers
	// (machineprovider.Provider).
	Provider Provider
	// Clock is the only source of time for timeouts.
	Clock clock.PassiveClock
	// Recorder emits Kubernetes events on the ContainerMachine.
	Recorder record.EventRecorder
	// WorkloadClient reaches the workload cluster's API server.
	WorkloadClient WorkloadClientFunc
	// Bootstraps runs bootstrap data asynchronously.
	Bootstraps *BootstrapRunner
	// NodeIPAM decides and records node pod CIDRs; nil when node IPAM is
	// off.
	NodeIPAM *nodeipam.Recorder
	// PodNetwork writes a node's CNI configuration once node IPAM assigned
	// its pod CIDRs; nil leaves it to the cluster's pod network sync.
	PodNetwork NodeNetwork
	// NodeRecheck is how often a machine waiting on its Node looks again
	// when nothing wakes it: the safety net under the workload cluster's
	// Node events, when the controller watches them; 0 polls every 5 s.
	NodeRecheck time.Duration
	// UnreachableEngineDeletionTimeout is how long a deletion waits for a
	// ContainerEngine that does not answer (Termination); 0 means
	// DefaultUnreachableEngineDeletionTimeout.
	UnreachableEngineDeletionTimeout time.Duration
}

// NewMachine returns the lifecycle of CAPCT machines.
func NewMachine(c Config) *Machine {
	return &Machine{phases: []Phase{
		&Launch{Provider: c.Provider, Clock: c.Clock, Recorder: c.Recorder},
		&Bootstrap{Client: c.Client, Runner: c.Bootstraps, Clock: c.Clock, Recorder: c.Recorder},
		&Provision{},
		&Registration{WorkloadClient: c.WorkloadClient, NodeRecheck: c.NodeRecheck, Clock: c.Clock},
		&Initialization{WorkloadClient: c.WorkloadClient, NodeIPAM: c.NodeIPAM, PodNetwork: c.PodNetwork, NodeRecheck: c.NodeRecheck, Clock: c.Clock, Recorder: c.Recorder},
		&Liveness{NodeRecheck: c.NodeRecheck, Clock: c.Clock, Recorder: c.Recorder},
	}}
}

// NewTermination returns the deletion of CAPCT machines.
func NewTermination(c Config) *Termination {
	return &Termination{
		Provider: c.Provider, Bootstraps: c.Bootstraps, Clock: c.Clock, Recorder: c.Recorder,
		UnreachableEngineDeletionTimeout: c.UnreachableEngineDeletionTimeout,
	}
}

// Reconcile runs every phase, even after one fails, so that Liveness can
// still judge timeouts; it returns the soonest requeue and all errors.
// Phases further along are gated on the conditions that earlier ones set, so
// running them does nothing until those are true.
func (m *Machine) Reconcile(ctx context.Context, s *MachineScope) (ctrl.Result, error) {
	var result ctrl.Result
	var errs []error
	for _, p := range m.phases {
		res, err := p.Reconcile(ctx, s)
		if container.IsUnreachable(err) {
			// The engine being away is waiting, not failing (Launch reports
			// it on ContainerRunning): look again soon rather than back off
			// for minutes after it is back.
			ctrl.LoggerFrom(ctx).V(4).Info("The container engine does not answer; looking again soon", "err", err.Error())
			res, err = util.LowestNonZeroResult(res, ctrl.Result{RequeueAfter: containerRecheck}), nil
		}
		if err != nil {
			errs = append(errs, err)
		}
		result = util.LowestNonZeroResult(result, res)
	}
	return result, errors.Join(errs...)
}
