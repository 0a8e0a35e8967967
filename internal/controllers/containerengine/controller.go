package containerengine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/cluster-api/util/conditions"
	capicontroller "sigs.k8s.io/cluster-api/util/controller"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/engines"
)

const (
	// availableRecheck is how often an engine that answers is asked again,
	// so that one that goes away is reported within about a minute.
	availableRecheck = time.Minute
	// unreachableRecheck is how soon an engine that did not answer is
	// asked again.
	unreachableRecheck = 10 * time.Second
	// credentialsRecheck is how soon an engine whose Secret was missing or
	// unusable is looked at again. The manager does not watch Secrets in
	// its own namespace (its cache holds only clusters'), so a fixed Secret
	// is seen then, or at once when the engine changes.
	credentialsRecheck = 30 * time.Second
	// inUseRecheck is how soon an engine being deleted looks again for the
	// clusters that hold it, besides being woken when one of them changes.
	inUseRecheck = 30 * time.Second
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=containerengines,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=containerengines/status;containerengines/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=containerclusters,verbs=get;list;watch

// Reconciler reconciles ContainerEngines.
type Reconciler struct {
	Client client.Client
	// Engines holds the engines' clients.
	Engines *engines.Registry
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
	// WatchFilterValue limits the controller to objects with this
	// cluster.x-k8s.io/watch-filter label value.
	WatchFilterValue string
}

// SetupWithManager wires the controller.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	err := capicontroller.NewControllerManagedBy(mgr, ctrl.LoggerFrom(ctx)).
		// The controller's own status patches would wake it again; an
		// engine that does not answer would then be asked in a loop.
		For(&infrav1.ContainerEngine{}, builder.WithPredicates(predicate.Or[client.Object](
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		WithOptions(options).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), ctrl.LoggerFrom(ctx), r.WatchFilterValue)).
		// A cluster that goes may free an engine being deleted. Other
		// changes to clusters do not concern their engines.
		Watches(&infrav1.ContainerCluster{}, handler.EnqueueRequestsFromMapFunc(clusterToEngines),
			predicate.Funcs{
				CreateFunc:  func(event.CreateEvent) bool { return false },
				UpdateFunc:  func(event.UpdateEvent) bool { return false },
				GenericFunc: func(event.GenericEvent) bool { return false },
			}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("failed to set up the ContainerEngine controller: %w", err)
	}
	return nil
}

// Reconcile asks the engine what it is and reports the answer. An engine
// being deleted is kept, and served, until no ContainerCluster lists it.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	engine := &infrav1.ContainerEngine{}
	if err := r.Client.Get(ctx, req.NamespacedName, engine); err != nil {
		if apierrors.IsNotFound(err) {
			r.Engines.Forget(req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("failed to get ContainerEngine %s: %w", req.Name, err)
	}
	if engine.DeletionTimestamp.IsZero() {
		// Go on after adding it: the update that adds it changes no
		// generation, so it would not bring the engine back.
		if _, err := finalizers.EnsureFinalizer(ctx, r.Client, engine, infrav1.EngineFinalizer); err != nil {
			return ctrl.Result{}, err
		}
	}
	helper, err := patch.NewHelper(engine, r.Client)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to create a patch helper for ContainerEngine %s: %w", engine.Name, err)
	}
	defer func() {
		if err := helper.Patch(ctx, engine, patch.WithOwnedConditions{Conditions: []string{
			infrav1.EngineAvailableCondition, infrav1.EngineDeletingCondition,
		}}); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("failed to patch ContainerEngine %s: %w", engine.Name, err))
		}
	}()
	if !engine.DeletionTimestamp.IsZero() {
		users, err := r.clustersListing(ctx, engine.Name)
		if err != nil {
			return ctrl.Result{}, err
		}
		if len(users) == 0 {
			r.Engines.Forget(engine.Name)
			controllerutil.RemoveFinalizer(engine, infrav1.EngineFinalizer)
			return ctrl.Result{}, nil
		}
		// Served as before, so that the clusters can still be deleted
		// and their containers removed.
		conditions.Set(engine, metav1.Condition{
			Type: infrav1.EngineDeletingCondition, Status: metav1.ConditionTrue, Reason: infrav1.InUseReason,
			Message:            "Waiting for the ContainerClusters that list the engine to be deleted: " + users,
			ObservedGeneration: engine.Generation, LastTransitionTime: metav1.NewTime(r.Clock.Now()),
		})
		res, err := r.reconcileNormal(ctx, engine)
		return ctrl.Result{RequeueAfter: min(inUseRecheck, res.RequeueAfter)}, err
	}
	return r.reconcileNormal(ctx, engine)
}

// reconcileNormal connects the engine, asks it what it is, and reports the
// answer.
func (r *Reconciler) reconcileNormal(ctx context.Context, engine *infrav1.ContainerEngine) (ctrl.Result, error) {
	rt, err := r.Engines.Ensure(ctx, engine)
	var invalid *engines.InvalidCredentialsError
	if errors.As(err, &invalid) {
		setAvailable(engine, r.Clock.Now(), metav1.ConditionFalse, infrav1.InvalidCredentialsReason, invalid.Error())
		return ctrl.Result{RequeueAfter: credentialsRecheck}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	info, err := rt.Info(ctx)
	if err != nil {
		// Unreachable or not, an engine that does not answer Info cannot
		// run machines; the error says why.
		setAvailable(engine, r.Clock.Now(), metav1.ConditionFalse, infrav1.EngineUnreachableReason, fmt.Sprintf("The engine does not answer: %v", err))
		if container.IsUnreachable(err) {
			return ctrl.Result{RequeueAfter: unreachableRecheck}, nil
		}
		return ctrl.Result{}, err
	}
	setObserved(engine, info)
	setAvailable(engine, r.Clock.Now(), metav1.ConditionTrue, infrav1.SucceededReason, "")
	return ctrl.Result{RequeueAfter: availableRecheck}, nil
}

// maxNamedClusters bounds the clusters a Deleting message names.
const maxNamedClusters = 10

// clustersListing returns the ContainerClusters, in every namespace, that
// list the engine, as "namespace/name" for a message (at most
// maxNamedClusters named, then how many more); empty when none does.
// Engines are deleted rarely: a list is cheaper than an index kept for it.
func (r *Reconciler) clustersListing(ctx context.Context, engine string) (string, error) {
	list := &infrav1.ContainerClusterList{}
	if err := r.Client.List(ctx, list); err != nil {
		return "", fmt.Errorf("failed to list the ContainerClusters that may list ContainerEngine %s: %w", engine, err)
	}
	var users []string
	for i := range list.Items {
		if slices.Contains(engines.Listed(&list.Items[i]), engine) {
			users = append(users, klog.KObj(&list.Items[i]).String())
		}
	}
	if len(users) > maxNamedClusters {
		users = append(users[:maxNamedClusters], fmt.Sprintf("and %d more", len(users)-maxNamedClusters))
	}
	return strings.Join(users, ", "), nil
}

// clusterToEngines maps a ContainerCluster to the engines it lists.
func clusterToEngines(_ context.Context, o client.Object) []reconcile.Request {
	cc, ok := o.(*infrav1.ContainerCluster)
	if !ok {
		return nil
	}
	var requests []reconcile.Request
	for _, name := range engines.Listed(cc) {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKey{Name: name}})
	}
	return requests
}

// setAvailable sets the Available condition; its transition time changes
// only with its status.
func setAvailable(engine *infrav1.ContainerEngine, now time.Time, status metav1.ConditionStatus, reason, message string) {
	conditions.Set(engine, metav1.Condition{
		Type: infrav1.EngineAvailableCondition, Status: status, Reason: reason, Message: message,
		ObservedGeneration: engine.Generation, LastTransitionTime: metav1.NewTime(now),
	})
}

// setObserved records what the engine said about itself.
func setObserved(engine *infrav1.ContainerEngine, info container.EngineInfo) {
	engine.Status.Version = info.Version
	engine.Status.Swarm = nil
	if s := info.Swarm; s != nil {
		engine.Status.Swarm = &infrav1.SwarmMembership{NodeID: s.NodeID, ClusterID: s.ClusterID, Manager: s.Manager, NodeAddr: s.NodeAddr}
	}
}
