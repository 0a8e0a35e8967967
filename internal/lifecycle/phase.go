package lifecycle

import (
	"context"
	"errors"

	"sigs.k8s.io/cluster-api/util"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/capct/cluster-api-provider-container/internal/container"
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

// NewMachine returns the lifecycle of CAPCT machines.
func NewMachine(d *Deps) *Machine {
	return &Machine{phases: []Phase{
		&Launch{d},
		&Bootstrap{d},
		&Provision{d},
		&Registration{d},
		&Initialization{d},
		&Liveness{d},
	}}
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
