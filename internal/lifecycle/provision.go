package lifecycle

import (
	"context"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// Provision reports the machine to Cluster API once its bootstrap data has
// run: spec.providerID, status.addresses, status.failureDomain and
// status.initialization.provisioned, as the InfraMachine contract asks. It
// derives everything from the container, so it also restores status after
// clusterctl move, which does not carry status.
type Provision struct{}

// Reconcile implements Phase.
func (p *Provision) Reconcile(_ context.Context, s *MachineScope) (ctrl.Result, error) {
	cm := s.ContainerMachine
	if s.Container == nil || !conditions.IsTrue(cm, infrav1.BootstrappedCondition) {
		return ctrl.Result{}, nil
	}
	cm.Spec.ProviderID = s.ProviderID()
	cm.Status.Addresses = Addresses(s.Container)
	if fd := s.FailureDomain(s.RequestedFailureDomain()); fd != "" {
		cm.Status.FailureDomain = fd
	}
	cm.Status.Initialization.Provisioned = ptr.To(true)
	return ctrl.Result{}, nil
}
