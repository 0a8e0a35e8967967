package containermachine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	capicontroller "sigs.k8s.io/cluster-api/util/controller"
	"sigs.k8s.io/cluster-api/util/labels/format"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/clusters"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/imagecopy"
	"github.com/capct/cluster-api-provider-container/internal/lifecycle"
	"github.com/capct/cluster-api-provider-container/internal/loadbalancer"
	"github.com/capct/cluster-api-provider-container/internal/machineprovider"
	"github.com/capct/cluster-api-provider-container/internal/nodeipam"
	"github.com/capct/cluster-api-provider-container/internal/policy"
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=containermachines,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=containermachines/status;containermachines/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=containerclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters;machines;machinepools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconciler reconciles ContainerMachines.
type Reconciler struct {
	Client client.Client
	// Engines are the container engines machines run on.
	Engines      engines.Set
	ClusterCache clustercache.ClusterCache
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
	// NodeIPAM decides and records node pod CIDRs (CAPCT's node IPAM); nil
	// turns it off.
	NodeIPAM *nodeipam.Recorder
	// PodNetwork writes a node's CNI configuration as soon as node IPAM
	// assigned its pod CIDRs: the ContainerCluster controller's
	// podnetwork.Syncer, shared. nil leaves it to that controller's sync.
	PodNetwork lifecycle.NodeNetwork
	// WorkloadClient overrides ClusterCache.GetClient, for tests.
	WorkloadClient lifecycle.WorkloadClientFunc
	// WatchFilterValue limits the controller to objects with this
	// cluster.x-k8s.io/watch-filter label value.
	WatchFilterValue string
	// MachinePools makes the controller watch MachinePools, whose bootstrap
	// data their ContainerMachines run. Set it when the MachinePool feature
	// gate is on (the MachinePool CRD must exist).
	MachinePools bool
	// HostCapacity holds launches while the container host's limits leave
	// no room for another node; nil admits every launch.
	HostCapacity machineprovider.HostCapacity
	// MaxConcurrentBootstraps bounds the bootstraps in flight on the host;
	// 0 means no bound. Machines over it wait with Bootstrapped False,
	// WaitingForBootstrapSlot.
	MaxConcurrentBootstraps int
	// MaxImageCopySize bounds each image copied to a ContainerEngine that
	// lacks it (imagecopy); 0 means imagecopy.DefaultMaxSize.
	MaxImageCopySize int64
	// Policy is what machines may ask of the host (the manager's policy
	// flags), checked right before each container is created; the zero
	// Policy allows everything.
	Policy policy.Policy
	// UnreachableEngineDeletionTimeout is how long a machine's deletion
	// waits for a ContainerEngine that does not answer before it leaves the
	// container behind (lifecycle.Termination); 0 means the default.
	UnreachableEngineDeletionTimeout time.Duration

	// APIReader counts a cluster's machines when placing one
	// (machineprovider), uncached so that the last placement is seen, and
	// reads a machine whose status patch met a conflict (persister); nil
	// means mgr.GetAPIReader().
	APIReader client.Reader

	lifecycle   *lifecycle.Machine
	termination *lifecycle.Termination
	// controller receives the workload clusters' Node events (watchNodes).
	controller capicontroller.Controller
	// wakeups carries container events and finished bootstraps into the
	// work queue.
	wakeups chan event.GenericEvent
}

// SetupWithManager wires the controller; ctx bounds the background work it
// starts (bootstraps, the container event stream).
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.WorkloadClient == nil {
		if r.ClusterCache == nil {
			return errors.New("ContainerMachine controller needs a ClusterCache or a WorkloadClient")
		}
		r.WorkloadClient = r.ClusterCache.GetClient
	}
	r.wakeups = make(chan event.GenericEvent, 1024)
	// Recorder is the core/v1 recorder, deprecated for the events.k8s.io
	// one, whose Eventf takes other arguments and which needs other RBAC:
	// moving every controller's events over is a change of its own.
	provider := &machineprovider.Provider{
		Client:       r.Client,
		APIReader:    r.APIReader,
		Engines:      r.Engines,
		Images:       imagecopy.New(ctx, r.Engines, r.MaxImageCopySize, r.wake, nil),
		HostCapacity: r.HostCapacity,
		Policy:       r.Policy,
		LoadBalancer: &loadbalancer.LoadBalancer{Client: r.Client, Engines: r.Engines},
	}
	nodeRecheck := time.Duration(0)
	if r.ClusterCache != nil {
		// Node events wake the machines (watchNodes); polling stays as a
		// slow safety net.
		nodeRecheck = nodeSafetyNet
	}
	config := lifecycle.Config{
		Client:                           r.Client,
		Provider:                         provider,
		Clock:                            r.Clock,
		Recorder:                         mgr.GetEventRecorderFor("containermachine-controller"), //nolint:staticcheck // SA1019, above
		WorkloadClient:                   r.WorkloadClient,
		Bootstraps:                       lifecycle.NewBootstrapRunner(ctx, clock.RealClock{}, r.MaxConcurrentBootstraps, r.wake),
		NodeIPAM:                         r.NodeIPAM,
		PodNetwork:                       r.PodNetwork,
		NodeRecheck:                      nodeRecheck,
		UnreachableEngineDeletionTimeout: r.UnreachableEngineDeletionTimeout,
	}
	r.lifecycle = lifecycle.NewMachine(config)
	r.termination = lifecycle.NewTermination(config)

	log := ctrl.LoggerFrom(ctx)
	clusterToMachines, err := util.ClusterToTypedObjectsMapper(r.Client, &infrav1.ContainerMachineList{}, mgr.GetScheme())
	if err != nil {
		return fmt.Errorf("failed to create the Cluster to ContainerMachines mapper: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &infrav1.ContainerMachine{}, containerNameField, containerNameOf); err != nil {
		return fmt.Errorf("failed to index ContainerMachines by container name: %w", err)
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		r.pumpContainerEvents(ctx)
		return nil
	})); err != nil {
		return fmt.Errorf("failed to add the container event stream: %w", err)
	}
	b := capicontroller.NewControllerManagedBy(mgr, log).
		For(&infrav1.ContainerMachine{}).
		WithOptions(options).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)).
		Watches(&clusterv1.Machine{},
			handler.EnqueueRequestsFromMapFunc(util.MachineToInfrastructureMapFunc(infrav1.GroupVersion.WithKind("ContainerMachine")))).
		Watches(&clusterv1.Cluster{},
			handler.EnqueueRequestsFromMapFunc(clusterToMachines),
			predicates.ClusterPausedTransitionsOrInfrastructureProvisioned(mgr.GetScheme(), log)).
		WatchesRawSource(source.Channel(r.wakeups, &handler.EnqueueRequestForObject{}))
	if r.MachinePools {
		// A pool's machines wait for the bootstrap data the bootstrap
		// provider writes to the MachinePool, usually after they exist.
		b = b.Watches(&clusterv1.MachinePool{},
			handler.EnqueueRequestsFromMapFunc(r.machinePoolToContainerMachines),
			bootstrapDataChanged)
	}
	if r.ClusterCache != nil {
		// A workload cluster that is connected (again) gets its Node watch
		// from its machines' next reconcile.
		b = b.WatchesRawSource(r.ClusterCache.GetClusterSource("containermachine", clusterToMachines))
	}
	r.controller, err = b.Build(r)
	if err != nil {
		return fmt.Errorf("failed to set up the ContainerMachine controller: %w", err)
	}
	return nil
}

// machinePoolToContainerMachines maps a MachinePool to the ContainerMachines
// of its pool.
func (r *Reconciler) machinePoolToContainerMachines(ctx context.Context, o client.Object) []reconcile.Request {
	machines := &infrav1.ContainerMachineList{}
	if err := r.Client.List(ctx, machines, client.InNamespace(o.GetNamespace()),
		client.MatchingLabels{clusterv1.MachinePoolNameLabel: format.MustFormatValue(o.GetName())}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list the ContainerMachines of a MachinePool", "MachinePool", klog.KObj(o))
		return nil
	}
	requests := make([]reconcile.Request, 0, len(machines.Items))
	for _, m := range machines.Items {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&m)})
	}
	return requests
}

// bootstrapDataChanged passes MachinePool events that can matter to their
// machines' bootstrap: a new pool, and a change of its bootstrap data
// Secret. The pool's frequent status updates are dropped.
var bootstrapDataChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		oldPool, okOld := e.ObjectOld.(*clusterv1.MachinePool)
		newPool, okNew := e.ObjectNew.(*clusterv1.MachinePool)
		if !okOld || !okNew {
			return false
		}
		return !ptr.Equal(oldPool.Spec.Template.Spec.Bootstrap.DataSecretName, newPool.Spec.Template.Spec.Bootstrap.DataSecretName)
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// Reconcile fetches the ContainerMachine and its owners, then runs the
// machine's lifecycle phases or its termination.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	cm := &infrav1.ContainerMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if awaitsMachine(cm) {
		// Cluster API's MachineSet updates a ContainerMachine it has just
		// made before its Machine owns it; a write here first (the Paused
		// condition, the finalizer, a placement) makes that update fail,
		// and the MachineSet leaves the ContainerMachine behind (seen in
		// make test-multihost). The Machine's owner reference wakes it.
		return ctrl.Result{}, nil
	}
	cluster, err := util.GetClusterFromMetadata(ctx, r.Client, cm.ObjectMeta)
	if err != nil {
		if apierrors.IsNotFound(err) || errors.Is(err, util.ErrNoCluster) {
			return ctrl.Result{}, r.releaseWithoutCluster(ctx, cm)
		}
		return ctrl.Result{}, fmt.Errorf("failed to get the Cluster of ContainerMachine %s: %w", klog.KObj(cm), err)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("Cluster", klog.KObj(cluster))
	ctx = ctrl.LoggerInto(ctx, log)

	if annotations.IsPaused(cluster, cm) {
		_, _, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, cm)
		return ctrl.Result{}, err
	}
	w := newPersister(r.Client, r.APIReader, cm)
	// Not paused: the condition goes with the reconcile's one status patch
	// rather than a patch and a reconcile of its own.
	conditions.Set(cm, metav1.Condition{Type: clusterv1.PausedCondition, Status: metav1.ConditionFalse,
		Reason: clusterv1.NotPausedReason, LastTransitionTime: metav1.NewTime(r.Clock.Now())})
	if cm.DeletionTimestamp.IsZero() && controllerutil.AddFinalizer(cm, infrav1.MachineFinalizer) {
		// Written at once, so that no container is ever created for an
		// object that could vanish without cleaning it up; the reconcile
		// goes on, so the first status patch is this one's.
		if err := w.writeObject(ctx, cm); err != nil {
			return ctrl.Result{}, err
		}
	}
	defer func() {
		lifecycle.SetReadyCondition(cm, r.Clock.Now())
		cm.Status.Phase = lifecycle.DerivePhase(cm)
		stale, err := w.write(ctx, cm)
		if err != nil {
			retErr = errors.Join(retErr, err)
		}
		if stale {
			// The update that made the status stale wakes the machine; this
			// is only the safety net.
			res = util.LowestNonZeroResult(res, ctrl.Result{RequeueAfter: staleRecheck})
		}
	}()

	s, err := r.scope(ctx, cluster, cm)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !cm.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	if err := r.watchNodes(ctx, cluster); err != nil {
		return ctrl.Result{}, err
	}
	return r.lifecycle.Reconcile(ctx, s)
}

// awaitsMachine reports whether cm is a ContainerMachine that Cluster API
// made for a Machine that does not own it yet, so that CAPCT leaves it
// alone. Pool members and warm machines are CAPCT's own, made before any
// Machine exists; one being deleted was never launched, and goes as it is.
func awaitsMachine(cm *infrav1.ContainerMachine) bool {
	if !cm.DeletionTimestamp.IsZero() || cm.Labels[clusterv1.MachinePoolNameLabel] != "" || infrav1.IsWarm(cm) {
		return false
	}
	for _, ref := range cm.OwnerReferences {
		if ref.Kind == "Machine" && strings.HasPrefix(ref.APIVersion, clusterv1.GroupVersion.Group+"/") {
			return false
		}
	}
	return true
}

// staleRecheck is how soon a machine whose status patch lost to a newer
// write is reconciled again, should the event of that write not wake it.
const staleRecheck = 5 * time.Second

func (r *Reconciler) reconcileDelete(ctx context.Context, s *lifecycle.MachineScope) (ctrl.Result, error) {
	done, res, err := r.termination.Reconcile(ctx, s)
	if err != nil || !done {
		return res, err
	}
	controllerutil.RemoveFinalizer(s.ContainerMachine, infrav1.MachineFinalizer)
	return ctrl.Result{}, nil
}

// releaseWithoutCluster lets a ContainerMachine whose Cluster is gone be
// deleted: without the Cluster's UID no container can be proven ours, and
// the cluster's deletion removes its containers anyway.
func (r *Reconciler) releaseWithoutCluster(ctx context.Context, cm *infrav1.ContainerMachine) error {
	if cm.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(cm, infrav1.MachineFinalizer) {
		return nil
	}
	before := cm.DeepCopy()
	controllerutil.RemoveFinalizer(cm, infrav1.MachineFinalizer)
	if err := r.Client.Patch(ctx, cm, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("failed to remove the finalizer of ContainerMachine %s: %w", klog.KObj(cm), err)
	}
	return nil
}

// scope gathers the machine's objects. Where its container is, the
// machine provider finds out (Launch and Termination ask it).
func (r *Reconciler) scope(ctx context.Context, cluster *clusterv1.Cluster, cm *infrav1.ContainerMachine) (*lifecycle.MachineScope, error) {
	s := &lifecycle.MachineScope{Claim: machineprovider.Claim{Cluster: cluster, ContainerMachine: cm}}
	machine, err := util.GetOwnerMachine(ctx, r.Client, cm.ObjectMeta)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("failed to get the Machine of ContainerMachine %s: %w", klog.KObj(cm), err)
	}
	s.Machine = machine
	if machine != nil {
		s.Version = machine.Spec.Version
		if name := machine.Spec.Bootstrap.DataSecretName; name != nil && *name != "" {
			s.BootstrapDataSecretName = name
		}
	}
	if infrav1.IsWarm(cm) {
		// A warm machine has no Machine and no bootstrap data until its
		// pool promotes it: it boots the node image of the version it was
		// made for.
		s.Version = cm.Annotations[infrav1.PoolVersionAnnotation]
	}
	if _, inPool := cm.Labels[clusterv1.MachinePoolNameLabel]; inPool && s.BootstrapDataSecretName == nil {
		// MachinePool Machines carry no bootstrap data of their own: every
		// machine of a pool boots from the pool's.
		pool, err := util.GetMachinePoolByLabels(ctx, r.Client, cm.Namespace, cm.Labels)
		if err != nil {
			return nil, fmt.Errorf("failed to get the MachinePool of ContainerMachine %s: %w", klog.KObj(cm), err)
		}
		if pool != nil {
			s.Version = pool.Spec.Template.Spec.Version
			if name := pool.Spec.Template.Spec.Bootstrap.DataSecretName; name != nil && *name != "" {
				s.BootstrapDataSecretName = name
			}
		}
	}
	cc, err := clusters.ContainerCluster(ctx, r.Client, cluster)
	if err != nil {
		return nil, err
	}
	s.ContainerCluster = cc
	return s, nil
}

// wake queues a machine for reconciliation from outside the informers. It
// never blocks: when the queue is backed up the wakeup is dropped, and the
// phases' own RequeueAfter brings the machine back soon enough.
func (r *Reconciler) wake(key types.NamespacedName) {
	obj := &infrav1.ContainerMachine{}
	obj.Namespace, obj.Name = key.Namespace, key.Name
	select {
	case r.wakeups <- event.GenericEvent{Object: obj}:
	default:
	}
}

// pumpContainerEvents turns the runtime's container events into
// reconciles of the machines they concern, so that a container that stops,
// starts again or is removed out of band is noticed within seconds instead
// of at the next resync. It runs until ctx ends: an engine that is away,
// even when the manager starts, only delays it (container.WatchEvents).
func (r *Reconciler) pumpContainerEvents(ctx context.Context) {
	log := ctrl.LoggerFrom(ctx)
	r.Engines.Watch(ctx, func(ev container.Event) {
		role := container.Role(ev.Labels[container.LabelRole])
		ns, name := ev.Labels[container.LabelNamespace], ev.Labels[container.LabelMachine]
		if !role.IsNode() || ns == "" || name == "" {
			return
		}
		r.wake(types.NamespacedName{Namespace: ns, Name: name})
	}, func(err error) {
		log.Info("Container events are not available yet; retrying", "err", err.Error())
	})
}

var _ reconcile.Reconciler = &Reconciler{}
