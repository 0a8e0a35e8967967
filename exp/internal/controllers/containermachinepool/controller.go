package containermachinepool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	capicontroller "sigs.k8s.io/cluster-api/util/controller"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/labels/format"
	"sigs.k8s.io/cluster-api/util/paused"
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
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/clusters"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/ssa"
)

const (
	// FieldOwner is the server-side apply field manager of the
	// ContainerMachines the pool creates.
	FieldOwner = "containermachinepool-controller"
	// MachineKind is the kind of the pool's machines, for
	// status.infrastructureMachineKind.
	MachineKind = "ContainerMachine"
	// VersionAnnotation records on each ContainerMachine the MachinePool's
	// Kubernetes version it was created for, so that a version change marks
	// it outdated.
	VersionAnnotation = infrav1.PoolVersionAnnotation
	// FailureDomainAnnotation records on each ContainerMachine the failure
	// domain the pool chose for it from the MachinePool's
	// spec.failureDomains (spreadOver), at creation. Cluster API makes a
	// pool's Machines with no failure domain, so this is how the pool asks
	// the machine provider, which places the machine (PlaceMachine), for
	// one: a cluster's engines are its failure domains.
	FailureDomainAnnotation = infrav1.FailureDomainAnnotation
	// nameSuffixLength is the length of the random part of machine names.
	nameSuffixLength = 5
	// memberChangeWindow is how long a change of a member waits before it
	// reconciles the pool, so that the changes of all members within it
	// make one reconcile and at most one status patch. During a scale-out
	// each of N machines changes status about ten times; reconciled one by
	// one they made 6.5 pool status patches per machine (make bench-capd,
	// CHANGELOG.md).
	// The pool's status is at most this late; its spec (the MachinePool's
	// replicas and template) is still acted on at once.
	memberChangeWindow = 2 * time.Second
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=containermachinepools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=containermachinepools/status;containermachinepools/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=containermachines,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters;machinepools,verbs=get;list;watch

// Reconciler reconciles ContainerMachinePools. It keeps one ContainerMachine
// per desired replica; the ContainerMachine controller runs the containers.
type Reconciler struct {
	Client client.Client
	// APIReader reads the API server directly. The pool re-reads its
	// machines with it before creating or deleting any, so that a cache that
	// has not yet seen its last writes never makes it create or delete twice.
	APIReader client.Reader
	// Engines are where containers left behind when the pool is deleted
	// are removed from.
	Engines engines.Set
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
	// WatchFilterValue limits the controller to objects with this
	// cluster.x-k8s.io/watch-filter label value.
	WatchFilterValue string
	// Recorder records the pool's events; it defaults to the manager's
	// recorder for "containermachinepool-controller".
	Recorder record.EventRecorder

	ssaCache *ssa.Cache
}

// SetupWithManager wires the controller.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil || r.APIReader == nil || r.Engines == nil {
		return errors.New("ContainerMachinePool controller needs a Client, an APIReader and Engines")
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Recorder == nil {
		// The core/v1 recorder, as the other controllers use (see
		// containercluster's SetupWithManager for why not the new one).
		r.Recorder = mgr.GetEventRecorderFor("containermachinepool-controller") //nolint:staticcheck // SA1019, above
	}
	r.ssaCache = ssa.NewCache("containermachinepool")
	log := ctrl.LoggerFrom(ctx)
	clusterToPools, err := util.ClusterToTypedObjectsMapper(r.Client, &expinfrav1.ContainerMachinePoolList{}, mgr.GetScheme())
	if err != nil {
		return fmt.Errorf("failed to create the Cluster to ContainerMachinePools mapper: %w", err)
	}
	err = capicontroller.NewControllerManagedBy(mgr, log).
		// Not on the pool's own status patches: a reconcile right after each
		// would undo the coalescing of its members' changes below.
		For(&expinfrav1.ContainerMachinePool{}, builder.WithPredicates(notOnlyStatusChanged)).
		WithOptions(options).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)).
		// The pool reads only the MachinePool's spec (replicas, template):
		// its status, which Cluster API rewrites as every machine comes
		// up, would only wake the pool for nothing.
		Watches(&clusterv1.MachinePool{},
			handler.EnqueueRequestsFromMapFunc(util.MachinePoolToInfrastructureMapFunc(ctx, expinfrav1.GroupVersion.WithKind("ContainerMachinePool"))),
			predicate.GenerationChangedPredicate{}).
		Watches(&infrav1.ContainerMachine{},
			coalesce(handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &expinfrav1.ContainerMachinePool{}), memberChangeWindow)).
		Watches(&clusterv1.Machine{},
			coalesce(handler.EnqueueRequestsFromMapFunc(r.machineToPool), memberChangeWindow)).
		Watches(&clusterv1.Cluster{},
			handler.EnqueueRequestsFromMapFunc(clusterToPools),
			predicates.ClusterPausedTransitions(mgr.GetScheme(), log)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("failed to set up the ContainerMachinePool controller: %w", err)
	}
	return nil
}

// machineToPool maps a MachinePool Machine to the pool of its
// ContainerMachine, so that a delete-machine annotation or a Machine going
// away is seen at once.
func (r *Reconciler) machineToPool(ctx context.Context, o client.Object) []reconcile.Request {
	m, ok := o.(*clusterv1.Machine)
	if !ok || m.Labels[clusterv1.MachinePoolNameLabel] == "" || m.Spec.InfrastructureRef.Kind != MachineKind {
		return nil
	}
	cm := &infrav1.ContainerMachine{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.InfrastructureRef.Name}, cm); err != nil {
		// No ContainerMachine (deleteOrphanMachines): the pool of the
		// MachinePool that owns the Machine.
		return r.machinePoolToPool(ctx, m)
	}
	for _, ref := range cm.OwnerReferences {
		if ref.Kind == "ContainerMachinePool" && refGroup(ref) == expinfrav1.GroupVersion.Group {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}}}
		}
	}
	return nil
}

// machinePoolToPool maps a Machine to the ContainerMachinePool of the
// MachinePool that owns it.
func (r *Reconciler) machinePoolToPool(ctx context.Context, m *clusterv1.Machine) []reconcile.Request {
	for _, ref := range m.OwnerReferences {
		if ref.Kind != "MachinePool" || refGroup(ref) != clusterv1.GroupVersion.Group {
			continue
		}
		mp := &clusterv1.MachinePool{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, mp); err != nil {
			return nil
		}
		infra := mp.Spec.Template.Spec.InfrastructureRef
		if infra.Kind == "ContainerMachinePool" && infra.APIGroup == expinfrav1.GroupVersion.Group {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: m.Namespace, Name: infra.Name}}}
		}
	}
	return nil
}

// notOnlyStatusChanged drops the updates of an object that changed nothing
// but its status; its spec (generation) and metadata (owner references,
// pause annotation, finalizers, deletion) still pass.
var notOnlyStatusChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld, e.ObjectNew
		return o.GetGeneration() != n.GetGeneration() ||
			!maps.Equal(o.GetLabels(), n.GetLabels()) ||
			!maps.Equal(o.GetAnnotations(), n.GetAnnotations()) ||
			!equality.Semantic.DeepEqual(o.GetOwnerReferences(), n.GetOwnerReferences()) ||
			!slices.Equal(o.GetFinalizers(), n.GetFinalizers()) ||
			!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp())
	},
}

// coalesce delays the reconciles h asks for by window. The work queue holds
// one entry per pool and keeps the earliest time it is due, so a burst of
// events within the window is one reconcile. controller-runtime has no such
// handler option.
func coalesce(h handler.EventHandler, window time.Duration) handler.EventHandler {
	delayed := func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		return delayedQueue{TypedRateLimitingInterface: q, delay: window}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Create(ctx, e, delayed(q))
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(ctx, e, delayed(q))
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Delete(ctx, e, delayed(q))
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Generic(ctx, e, delayed(q))
		},
	}
}

// delayedQueue turns Add into AddAfter.
type delayedQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	delay time.Duration
}

func (q delayedQueue) Add(r reconcile.Request) { q.AddAfter(r, q.delay) }

func refGroup(ref metav1.OwnerReference) string {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return ""
	}
	return gv.Group
}

// Reconcile brings the pool's ContainerMachines to the MachinePool's
// replicas and template.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	pool := &expinfrav1.ContainerMachinePool{}
	if err := r.Client.Get(ctx, req.NamespacedName, pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	mpName := ownerMachinePoolName(pool)
	if mpName == "" {
		// Cluster API sets the owner reference from the MachinePool's
		// infrastructureRef; the MachinePool watch brings the pool back.
		if !pool.DeletionTimestamp.IsZero() {
			return ctrl.Result{}, r.removeFinalizer(ctx, pool)
		}
		return ctrl.Result{}, nil
	}
	mp := &clusterv1.MachinePool{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: pool.Namespace, Name: mpName}, mp); err != nil {
		if !apierrors.IsNotFound(err) || pool.DeletionTimestamp.IsZero() {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		// The MachinePool is gone while the pool is being deleted: clean
		// up with what the owner reference still tells.
		mp = nil
	}
	clusterName := pool.Labels[clusterv1.ClusterNameLabel]
	if mp != nil {
		clusterName = mp.Spec.ClusterName
	}
	cluster := &clusterv1.Cluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: pool.Namespace, Name: clusterName}, cluster); err != nil {
		if !apierrors.IsNotFound(err) || pool.DeletionTimestamp.IsZero() {
			return ctrl.Result{}, fmt.Errorf("failed to get Cluster %s of ContainerMachinePool %s: %w", clusterName, klog.KObj(pool), err)
		}
		cluster = nil
	}
	if cluster != nil {
		log := ctrl.LoggerFrom(ctx).WithValues("Cluster", klog.KObj(cluster), "MachinePool", klog.KRef(pool.Namespace, mpName))
		ctx = ctrl.LoggerInto(ctx, log)
		// Carry on after the Paused condition changed to False: the pool's
		// own status patch no longer brings it back (notOnlyStatusChanged).
		if isPaused, _, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, pool); err != nil || isPaused {
			return ctrl.Result{}, err
		}
	}
	if pool.DeletionTimestamp.IsZero() {
		if added, err := finalizers.EnsureFinalizer(ctx, r.Client, pool, expinfrav1.MachinePoolFinalizer); err != nil || added {
			return ctrl.Result{}, err
		}
	}

	before := pool.DeepCopy()
	s := &scope{pool: pool, machinePool: mp, machinePoolName: mpName, cluster: cluster}
	defer func() {
		desired := 0
		if mp != nil && pool.DeletionTimestamp.IsZero() {
			desired = int(ptr.Deref(mp.Spec.Replicas, 1))
		}
		setStatus(pool, summary{
			desired: desired, members: s.members, warm: s.warm, cluster: cluster, deleting: !pool.DeletionTimestamp.IsZero(),
			generation: pool.Generation, machineKind: MachineKind,
		}, r.Clock.Now())
		if err := r.write(ctx, before, pool); err != nil {
			retErr = errors.Join(retErr, err)
		}
	}()

	if !pool.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return ctrl.Result{}, r.reconcileNormal(ctx, s)
}

// write sends what the reconcile changed of the pool: its spec
// (providerIDList) in one patch when it changed, then its status,
// conditions included, in one patch. Cluster API's patch helper would
// send the conditions and the rest of the status as two patches, on every
// change of the pool's members. The status patch is locked on the
// resourceVersion it was computed against, so that a status computed from
// a stale read never replaces a newer one (merge patches replace the
// conditions list whole); a conflict is an error, so the pool is
// reconciled again from what is there.
func (r *Reconciler) write(ctx context.Context, before, pool *expinfrav1.ContainerMachinePool) error {
	status := pool.Status
	if !equality.Semantic.DeepEqual(before.ObjectMeta, pool.ObjectMeta) || !equality.Semantic.DeepEqual(before.Spec, pool.Spec) {
		pool.Status = before.Status
		if err := r.Client.Patch(ctx, pool, client.MergeFrom(before)); err != nil {
			pool.Status = status
			return fmt.Errorf("failed to patch ContainerMachinePool %s: %w", klog.KObj(pool), err)
		}
		// The response is the API server's pool; the status patch locks on
		// its resourceVersion.
		before = pool.DeepCopy()
		pool.Status = status
	}
	if !pool.DeletionTimestamp.IsZero() && len(pool.Finalizers) == 0 {
		// The patch above removed the finalizer (reconcileDelete): the pool
		// is gone, and a status patch would only find it missing.
		return nil
	}
	if equality.Semantic.DeepEqual(before.Status, pool.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, pool, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("failed to patch the status of ContainerMachinePool %s: %w", klog.KObj(pool), err)
	}
	return nil
}

// scope is what one reconcile works on.
type scope struct {
	pool            *expinfrav1.ContainerMachinePool
	machinePool     *clusterv1.MachinePool // nil only while deleting
	machinePoolName string
	cluster         *clusterv1.Cluster // nil only while deleting
	// members are the pool's machines as last read.
	members []member
	// warm are the pool's warm machines as last read (warm.go).
	warm []member
}

// poolLabels select the pool's ContainerMachines and Machines, as Cluster
// API's MachinePool controller selects them.
func (s *scope) poolLabels() client.MatchingLabels {
	return client.MatchingLabels{
		clusterv1.ClusterNameLabel:     s.clusterName(),
		clusterv1.MachinePoolNameLabel: format.MustFormatValue(s.machinePoolName),
	}
}

func (s *scope) clusterName() string {
	switch {
	case s.machinePool != nil:
		return s.machinePool.Spec.ClusterName
	case s.cluster != nil:
		return s.cluster.Name
	}
	return s.pool.Labels[clusterv1.ClusterNameLabel]
}

func ownerMachinePoolName(pool *expinfrav1.ContainerMachinePool) string {
	for _, ref := range pool.OwnerReferences {
		if ref.Kind == "MachinePool" && refGroup(ref) == clusterv1.GroupVersion.Group {
			return ref.Name
		}
	}
	return ""
}

func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) error {
	desired := int(ptr.Deref(s.machinePool.Spec.Replicas, 1))
	st := resolveStrategy(s.pool.Spec.Strategy, desired)
	fd := newDomains(s.machinePool.Spec.FailureDomains, s.cluster)

	warmSize := int(s.pool.Spec.WarmPool.Size)

	members, err := r.members(ctx, r.Client, s)
	if err != nil {
		return err
	}
	s.members = members
	if s.warm, err = r.warmMembers(ctx, r.Client, s); err != nil {
		return err
	}
	if err := r.clearRemediation(ctx, members); err != nil {
		return err
	}
	if err := r.deleteOrphanMachines(ctx, s); err != nil {
		return err
	}
	p := computePlan(members, desired, st, fd)
	wp := computeWarmPlan(s.warm, warmSize, p.domains, p.empty() && settled(members, desired), fd)
	if p.empty() && wp.empty() {
		return nil
	}
	if err := r.readAgain(ctx, s, warmSize); err != nil {
		return err
	}
	members = s.members
	p = computePlan(members, desired, st, fd)

	log := ctrl.LoggerFrom(ctx)
	var errs []error
	if len(p.diagnose) > 0 {
		// A failed machine goes only once its diagnostics are kept; one
		// whose diagnostics could not be kept stays (not counted as
		// available) until a later reconcile keeps them.
		kept := map[string]bool{}
		for _, m := range p.diagnose {
			if err := r.keepDiagnostics(ctx, s, m); err != nil {
				errs = append(errs, err)
				continue
			}
			kept[m.name()] = true
		}
		for i := range members {
			if kept[members[i].name()] {
				members[i].diagnosed = true
			}
		}
		p = computePlan(members, desired, st, fd)
	}
	wp = computeWarmPlan(s.warm, warmSize, p.domains, p.empty() && settled(members, desired), fd)
	for _, m := range slices.Concat(p.delete, wp.delete) {
		if m.byHealthCheck && m.machine != nil {
			if err := r.markRemediating(ctx, m.machine); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := r.deleteMember(ctx, m); err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("Deleting pool machine", "ContainerMachine", klog.KObj(m.cm), "outdated", m.outdated, "deleteRequested", m.deleteRequested(), "failed", m.failed)
	}
	return errors.Join(append(errs, r.grow(ctx, s, wp))...)
}

// grow promotes the warm machines wp names, creates the members no warm
// machine was found for, then the new warm machines; each of the three
// stops at its first failed write.
func (r *Reconciler) grow(ctx context.Context, s *scope, wp warmPlan) error {
	log := ctrl.LoggerFrom(ctx)
	var errs []error
	for _, m := range wp.promote {
		cm, err := r.applyMachine(ctx, s, m.name(), m.cm.Annotations[FailureDomainAnnotation], false)
		if err != nil {
			errs = append(errs, err)
			break
		}
		log.Info("Promoted warm pool machine", "ContainerMachine", klog.KObj(cm), "failureDomain", m.domain, "booted", m.booted())
		s.members = append(s.members, member{cm: cm, domain: m.domain})
		s.warm = slices.DeleteFunc(s.warm, func(w member) bool { return w.name() == m.name() })
	}
	created, err := r.createMachines(ctx, s, wp.cold, false)
	s.members = append(s.members, created...)
	errs = append(errs, err)
	created, err = r.createMachines(ctx, s, wp.create, true)
	s.warm = append(s.warm, created...)
	return errors.Join(append(errs, err)...)
}

// createMachines creates a member, or a warm machine when warm, in each of
// domains, and stops at the first that fails.
func (r *Reconciler) createMachines(ctx context.Context, s *scope, domains []string, warm bool) ([]member, error) {
	var created []member
	for _, domain := range domains {
		cm, err := r.createMachine(ctx, s, domain, warm)
		if err != nil {
			return created, err
		}
		ctrl.LoggerFrom(ctx).Info("Created pool machine", "ContainerMachine", klog.KObj(cm), "failureDomain", domain, "warm", warm)
		created = append(created, member{cm: cm, domain: domain})
	}
	return created, nil
}

// readAgain reads the pool's members and warm machines again at the API
// server, about to write: the decision is then taken on what the API
// server holds, not on what the cache has seen so far. A pool that keeps
// no warm machines and had none in the cache has none to act on (one it
// made before its size went to 0 is deleted once the cache shows it), so
// its warm machines are not listed again.
func (r *Reconciler) readAgain(ctx context.Context, s *scope, warmSize int) error {
	members, err := r.members(ctx, r.APIReader, s)
	if err != nil {
		return err
	}
	s.members = members
	if warmSize > 0 || len(s.warm) > 0 {
		if s.warm, err = r.warmMembers(ctx, r.APIReader, s); err != nil {
			return err
		}
	}
	return nil
}

// deleteOrphanMachines deletes the pool's Machines whose ContainerMachine is
// gone. Cluster API's MachinePool controller makes a Machine for each
// ContainerMachine it lists, from its cache: a ContainerMachine the pool
// deleted before that cache caught up (a young machine made outdated by a
// version change a second later) still gets its Machine, which no
// controller would ever delete, and which keeps the MachinePool and the
// Cluster from being Ready. Each is confirmed gone at the API server, not
// only in this manager's cache, before its Machine is deleted.
func (r *Reconciler) deleteOrphanMachines(ctx context.Context, s *scope) error {
	machines := &clusterv1.MachineList{}
	if err := r.Client.List(ctx, machines, client.InNamespace(s.pool.Namespace), s.poolLabels()); err != nil {
		return fmt.Errorf("failed to list the Machines of ContainerMachinePool %s: %w", klog.KObj(s.pool), err)
	}
	known := make(map[string]bool, len(s.members))
	for _, m := range s.members {
		known[m.cm.Name] = true
	}
	var errs []error
	for i := range machines.Items {
		machine := &machines.Items[i]
		ref := machine.Spec.InfrastructureRef
		if ref.Kind != MachineKind || ref.APIGroup != infrav1.GroupVersion.Group || known[ref.Name] || !machine.DeletionTimestamp.IsZero() {
			continue
		}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: machine.Namespace, Name: ref.Name}, &infrav1.ContainerMachine{})
		if !apierrors.IsNotFound(err) {
			if err != nil {
				errs = append(errs, fmt.Errorf("failed to get ContainerMachine %s of Machine %s: %w", ref.Name, klog.KObj(machine), err))
			}
			continue
		}
		if err := r.Client.Delete(ctx, machine, client.Preconditions{UID: ptr.To(machine.UID)}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("failed to delete Machine %s, whose ContainerMachine is gone: %w", klog.KObj(machine), err))
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Deleted a pool Machine whose ContainerMachine is gone", "Machine", klog.KObj(machine), "ContainerMachine", ref.Name)
	}
	return errors.Join(errs...)
}

// members lists the pool's ContainerMachines (those owned by this pool)
// with their Machines, from reader.
func (r *Reconciler) members(ctx context.Context, reader client.Reader, s *scope) ([]member, error) {
	cms := &infrav1.ContainerMachineList{}
	if err := reader.List(ctx, cms, client.InNamespace(s.pool.Namespace), s.poolLabels()); err != nil {
		return nil, fmt.Errorf("failed to list the ContainerMachines of ContainerMachinePool %s: %w", klog.KObj(s.pool), err)
	}
	machines := &clusterv1.MachineList{}
	if err := reader.List(ctx, machines, client.InNamespace(s.pool.Namespace), s.poolLabels()); err != nil {
		return nil, fmt.Errorf("failed to list the Machines of ContainerMachinePool %s: %w", klog.KObj(s.pool), err)
	}
	byName := make(map[string]*clusterv1.Machine, len(machines.Items))
	for i := range machines.Items {
		byName[machines.Items[i].Name] = &machines.Items[i]
	}
	var out []member
	for i := range cms.Items {
		cm := &cms.Items[i]
		if !ownedBy(cm, s.pool) {
			continue
		}
		m := s.judge(cm, ownerMachine(cm, byName))
		// Cluster API's MachinePool controller makes each member's Machine
		// from its cache: a member deleted before it has one gets a Machine
		// no one deletes at once, a replica over maxSurge until the orphan
		// clean-up (seen in the ClusterClass upgrade spec, whose template
		// and version change a second apart). A young member waits for its
		// Machine before it is deleted; after awaitMachineFor it goes
		// anyway, so that a missing Machine never holds the pool.
		m.awaitingMachine = m.machine == nil && r.Clock.Since(cm.CreationTimestamp.Time) < awaitMachineFor
		out = append(out, m)
	}
	return out, nil
}

// judge makes the member of cm and its Machine (nil for none): whether it
// is outdated, has failed, and its failure domain.
func (s *scope) judge(cm *infrav1.ContainerMachine, machine *clusterv1.Machine) member {
	m := member{cm: cm, machine: machine, domain: memberDomain(cm)}
	if s.machinePool != nil {
		m.outdated = outdated(cm, s.pool, s.machinePool)
	}
	m.failed, m.byHealthCheck = failure(cm, machine)
	return m
}

func ownedBy(cm *infrav1.ContainerMachine, pool *expinfrav1.ContainerMachinePool) bool {
	for _, ref := range cm.OwnerReferences {
		if ref.UID == pool.UID {
			return true
		}
	}
	return false
}

// ownerMachine is the Machine named in the ContainerMachine's owner
// references; Cluster API names it like the ContainerMachine. Until Cluster
// API's Machine controller has set that reference, it is the Machine of the
// same name whose infrastructureRef names the ContainerMachine, so that a
// young machine is still deleted through its Machine.
func ownerMachine(cm *infrav1.ContainerMachine, machines map[string]*clusterv1.Machine) *clusterv1.Machine {
	for _, ref := range cm.OwnerReferences {
		if ref.Kind == "Machine" && refGroup(ref) == clusterv1.GroupVersion.Group {
			if m, ok := machines[ref.Name]; ok && m.UID == ref.UID {
				return m
			}
		}
	}
	if m, ok := machines[cm.Name]; ok && m.Spec.InfrastructureRef.Kind == MachineKind && m.Spec.InfrastructureRef.Name == cm.Name {
		return m
	}
	return nil
}

// memberDomain is the failure domain a member is in: the engine the
// machine provider placed it on (a cluster's engines are its failure
// domains), else the one the pool asked for (FailureDomainAnnotation),
// which a member has before it is placed and keeps on a cluster on the
// manager's own engine, where failure domains only label machines.
func memberDomain(cm *infrav1.ContainerMachine) string {
	if engine := cm.Annotations[infrav1.EngineAnnotation]; engine != "" {
		return engine
	}
	return cm.Annotations[FailureDomainAnnotation]
}

// outdated reports whether a machine no longer matches what the pool would
// create now: another spec (the image above all) or another Kubernetes
// version.
func outdated(cm *infrav1.ContainerMachine, pool *expinfrav1.ContainerMachinePool, mp *clusterv1.MachinePool) bool {
	if cm.Annotations[VersionAnnotation] != mp.Spec.Template.Spec.Version {
		return true
	}
	got := cm.Spec.DeepCopy()
	got.ProviderID = "" // set per machine by the ContainerMachine controller
	return !equality.Semantic.DeepEqual(*got, pool.Spec.Template)
}

// deleteMember deletes a machine through its Machine, so that Cluster API
// drains the Node first and then deletes the ContainerMachine; a
// ContainerMachine with no Machine yet has no Node and is deleted directly.
func (r *Reconciler) deleteMember(ctx context.Context, m member) error {
	var obj client.Object = m.cm
	if m.machine != nil {
		obj = m.machine
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return nil
	}
	// The UID precondition makes sure a newer object of the same name is
	// never deleted on the strength of an old read.
	err := r.Client.Delete(ctx, obj, client.Preconditions{UID: ptr.To(obj.GetUID())})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to delete %T %s of ContainerMachinePool: %w", obj, klog.KObj(obj), err)
	}
	return nil
}

// createMachine applies a new ContainerMachine for the pool, a warm one
// when warm, asking for failure domain domain when it is not "".
func (r *Reconciler) createMachine(ctx context.Context, s *scope, domain string, warm bool) (*infrav1.ContainerMachine, error) {
	name, err := r.freeName(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	return r.applyMachine(ctx, s, name, domain, warm)
}

// applyMachine applies the pool's ContainerMachine name, in failure domain
// domain when it is not "": a member, which Cluster API's machine-pool-name
// label makes a Machine for, or a warm machine, which carries the warm
// pool's label instead. Applied to a warm machine as a member, it promotes
// it: the apply drops the warm label this field manager set, and changes
// nothing else of a machine that is up to date.
func (r *Reconciler) applyMachine(ctx context.Context, s *scope, name, domain string, warm bool) (*infrav1.ContainerMachine, error) {
	poolLabel := clusterv1.MachinePoolNameLabel
	if warm {
		poolLabel = infrav1.WarmPoolLabel
	}
	cm := &infrav1.ContainerMachine{
		TypeMeta: metav1.TypeMeta{APIVersion: infrav1.GroupVersion.String(), Kind: MachineKind},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.pool.Namespace,
			Name:      name,
			Labels: map[string]string{
				clusterv1.ClusterNameLabel: s.clusterName(),
				poolLabel:                  format.MustFormatValue(s.machinePoolName),
			},
			Annotations: map[string]string{VersionAnnotation: s.machinePool.Spec.Template.Spec.Version},
			// An owner, not the controller: Cluster API's MachinePool
			// controller creates the Machine that becomes the controller.
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: expinfrav1.GroupVersion.String(),
				Kind:       "ContainerMachinePool",
				Name:       s.pool.Name,
				UID:        s.pool.UID,
			}},
		},
		Spec: *s.pool.Spec.Template.DeepCopy(),
	}
	cm.Spec.ProviderID = ""
	if domain != "" {
		cm.Annotations[FailureDomainAnnotation] = domain
	}
	if err := ssa.Apply(ctx, r.Client, FieldOwner, cm, ssa.WithCache(r.ssaCache)); err != nil {
		return nil, fmt.Errorf("failed to apply ContainerMachine %s of ContainerMachinePool %s: %w", name, klog.KObj(s.pool), err)
	}
	return cm, nil
}

// freeName picks <pool>-<random> that no ContainerMachine of the namespace
// uses: an apply to an existing name would take that object over.
func (r *Reconciler) freeName(ctx context.Context, pool *expinfrav1.ContainerMachinePool) (string, error) {
	for range 10 {
		name := pool.Name + "-" + util.RandomString(nameSuffixLength)
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: pool.Namespace, Name: name}, &metav1.PartialObjectMetadata{
			TypeMeta: metav1.TypeMeta{APIVersion: infrav1.GroupVersion.String(), Kind: MachineKind},
		})
		if apierrors.IsNotFound(err) {
			return name, nil
		}
		if err != nil {
			return "", fmt.Errorf("failed to check ContainerMachine name %s: %w", name, err)
		}
	}
	return "", fmt.Errorf("failed to find a free ContainerMachine name for ContainerMachinePool %s", klog.KObj(pool))
}

// reconcileDelete deletes every machine of the pool through its Machine,
// then any container still labelled with the pool, then the finalizer.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	members, err := r.members(ctx, r.APIReader, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	s.members = members
	if s.warm, err = r.warmMembers(ctx, r.APIReader, s); err != nil {
		return ctrl.Result{}, err
	}
	if len(members)+len(s.warm) > 0 {
		var errs []error
		for _, m := range append(slices.Clone(members), s.warm...) {
			if err := r.deleteMember(ctx, m); err != nil {
				errs = append(errs, err)
			}
		}
		// The ContainerMachine watch brings the pool back as they go.
		return ctrl.Result{}, errors.Join(errs...)
	}
	cc, err := clusters.ContainerCluster(ctx, r.Client, s.cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Without the ContainerCluster there is no owner to prove a container
	// the pool's: the cluster's own deletion removes what is left.
	if owner := naming.ClusterOwner(s.cluster, cc); cc != nil && owner.Valid() {
		leftovers, err := engines.ListOwned(ctx, r.Engines, cc, owner,
			map[string]string{container.LabelPool: format.MustFormatValue(s.machinePoolName)})
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to list the containers of ContainerMachinePool %s: %w", klog.KObj(s.pool), err)
		}
		for _, c := range leftovers {
			ctrl.LoggerFrom(ctx).Info("Deleting leftover container of the pool", "Container", c.Name)
			if err := c.Runtime.Delete(ctx, c.Name, owner.ForMachine(c.Labels[container.LabelMachine])); err != nil && !container.IsNotFound(err) {
				return ctrl.Result{}, fmt.Errorf("failed to delete container %s of ContainerMachinePool %s: %w", c.Name, klog.KObj(s.pool), err)
			}
		}
	}
	controllerutil.RemoveFinalizer(s.pool, expinfrav1.MachinePoolFinalizer)
	return ctrl.Result{}, nil
}

// removeFinalizer releases a pool that is deleted before Cluster API ever
// owned it: it never created anything.
func (r *Reconciler) removeFinalizer(ctx context.Context, pool *expinfrav1.ContainerMachinePool) error {
	if !controllerutil.ContainsFinalizer(pool, expinfrav1.MachinePoolFinalizer) {
		return nil
	}
	before := pool.DeepCopy()
	controllerutil.RemoveFinalizer(pool, expinfrav1.MachinePoolFinalizer)
	if err := r.Client.Patch(ctx, pool, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("failed to remove the finalizer of ContainerMachinePool %s: %w", klog.KObj(pool), err)
	}
	return nil
}

var _ reconcile.Reconciler = &Reconciler{}
