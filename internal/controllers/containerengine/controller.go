package containerengine

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

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
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=containerengines,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=containerengines/status,verbs=get;update;patch

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
	err := ctrl.NewControllerManagedBy(mgr).
		// The controller's own status patches would wake it again; an
		// engine that does not answer would then be asked in a loop.
		For(&infrav1.ContainerEngine{}, builder.WithPredicates(predicate.Or[client.Object](
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		WithOptions(options).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), ctrl.LoggerFrom(ctx), r.WatchFilterValue)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("failed to set up the ContainerEngine controller: %w", err)
	}
	return nil
}

// Reconcile asks the engine what it is and reports the answer.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	engine := &infrav1.ContainerEngine{}
	if err := r.Client.Get(ctx, req.NamespacedName, engine); err != nil {
		if apierrors.IsNotFound(err) {
			r.Engines.Forget(req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("failed to get ContainerEngine %s: %w", req.Name, err)
	}
	if !engine.DeletionTimestamp.IsZero() {
		r.Engines.Forget(engine.Name)
		return ctrl.Result{}, nil
	}
	helper, err := patch.NewHelper(engine, r.Client)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to create a patch helper for ContainerEngine %s: %w", engine.Name, err)
	}
	defer func() {
		if err := helper.Patch(ctx, engine, patch.WithOwnedConditions{Conditions: []string{infrav1.EngineAvailableCondition}}); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("failed to patch ContainerEngine %s: %w", engine.Name, err))
		}
	}()

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
