package containermachinetemplate

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	capicontroller "sigs.k8s.io/cluster-api/util/controller"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/capacity"
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=containermachinetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=containermachinetemplates/status,verbs=get;update;patch

// Reconciler writes the autoscaling-from-zero status of
// ContainerMachineTemplates.
type Reconciler struct {
	Client client.Client
	// WatchFilterValue limits the controller to objects with this
	// cluster.x-k8s.io/watch-filter label value.
	WatchFilterValue string
}

// SetupWithManager wires the controller.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil {
		return errors.New("ContainerMachineTemplate controller needs a Client")
	}
	log := ctrl.LoggerFrom(ctx)
	// No predicate on the template's own status patches: the reconcile
	// each one brings finds the status current and writes nothing, and
	// without it a status that someone else changed would stay wrong.
	err := capicontroller.NewControllerManagedBy(mgr, log).
		For(&infrav1.ContainerMachineTemplate{}).
		WithOptions(options).
		WithEventFilter(predicates.ResourceNotPausedAndHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("failed to set up the ContainerMachineTemplate controller: %w", err)
	}
	return nil
}

// Reconcile sets status.capacity and status.nodeInfo from the template's
// machine spec. The patch helper sends nothing when they are already so.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	template := &infrav1.ContainerMachineTemplate{}
	if err := r.Client.Get(ctx, req.NamespacedName, template); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("failed to get ContainerMachineTemplate %s: %w", req.NamespacedName, err)
	}
	// A template being deleted is no longer a node group's to picture,
	// and CAPCT holds no finalizer on it.
	if !template.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	helper, err := patch.NewHelper(template, r.Client)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to create a patch helper for ContainerMachineTemplate %s: %w", klog.KObj(template), err)
	}
	template.Status.Capacity = capacity.Of(template.Spec.Template.Spec.Resources)
	template.Status.NodeInfo = capacity.NodeInfo()
	if err := helper.Patch(ctx, template); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to patch ContainerMachineTemplate %s: %w", klog.KObj(template), err)
	}
	return ctrl.Result{}, nil
}
