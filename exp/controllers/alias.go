// Package controllers exports CAPCT's experimental reconcilers, so that
// other programs (test suites, a combined manager) can run them while their
// implementations stay free to change under exp/internal/.
package controllers

import (
	"context"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/capct/cluster-api-provider-container/exp/internal/controllers/containermachinepool"
	"github.com/capct/cluster-api-provider-container/internal/engines"
)

// ContainerMachinePoolReconciler reconciles ContainerMachinePools. Register
// it only when the MachinePool feature gate is on.
type ContainerMachinePoolReconciler struct {
	Client client.Client
	// APIReader reads the API server without the cache (mgr.GetAPIReader()).
	APIReader client.Reader
	// Engines are where containers left behind by a deleted pool are
	// removed from.
	Engines engines.Set
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
	// WatchFilterValue limits the controller to objects with this
	// cluster.x-k8s.io/watch-filter label value.
	WatchFilterValue string
}

// SetupWithManager sets up the reconciler with the manager.
func (r *ContainerMachinePoolReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	return (&containermachinepool.Reconciler{
		Client:           r.Client,
		APIReader:        r.APIReader,
		Engines:          r.Engines,
		Clock:            r.Clock,
		WatchFilterValue: r.WatchFilterValue,
	}).SetupWithManager(ctx, mgr, options)
}
