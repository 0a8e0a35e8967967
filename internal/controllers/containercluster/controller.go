package containercluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	capicontroller "sigs.k8s.io/cluster-api/util/controller"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
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
	"github.com/capct/cluster-api-provider-container/internal/loadbalancer"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/policy"
)

const (
	// DefaultOrphanGracePeriod is how long a container may exist without
	// its ContainerMachine before it is removed. It covers the window in
	// which a cache has not yet seen a new ContainerMachine.
	DefaultOrphanGracePeriod = time.Minute
	// orphanCheckInterval is how often a provisioned cluster looks for
	// orphans.
	orphanCheckInterval = 2 * time.Minute
	// deletionPoll is how often a deleting cluster looks again for machines
	// that are still there.
	deletionPoll = 2 * time.Second
	// engineRetry is how soon a cluster looks again while the container
	// engine does not answer. Returning the error instead would back off
	// for minutes, long after the engine is back.
	engineRetry = 10 * time.Second
	// hostRecheck is how soon a cluster waiting for its load balancer's
	// image to appear on the host looks again: nothing on the host wakes it.
	hostRecheck = 30 * time.Second
)

// PodNetwork programs a cluster's pod network into its node containers
// (podnetwork.Syncer).
type PodNetwork interface {
	// Sync brings the cluster's node containers to their pod network.
	Sync(ctx context.Context, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) error
	// NodeStarted says that a node container of the cluster started
	// (again) and lost what lived in its network namespace.
	NodeStarted(cluster types.NamespacedName, containerName string)
	// ForgetCluster drops what is kept in memory for a deleted cluster.
	ForgetCluster(cluster *clusterv1.Cluster)
}

// ClusterForgetter drops what is kept in memory for a deleted cluster
// (nodeipam.Recorder).
type ClusterForgetter interface {
	ForgetCluster(cluster *clusterv1.Cluster)
}

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=containerclusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=containerclusters/status;containerclusters/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=containermachines,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=containerengines,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

// Reconciler reconciles ContainerClusters.
type Reconciler struct {
	Client client.Client
	// APIReader reads the Namespaces of clusters on engines, which the
	// manager does not cache; nil means mgr.GetAPIReader().
	APIReader client.Reader
	// Engines are the container engines clusters run on; a cluster's
	// network and load balancer are on its first.
	Engines engines.Set
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
	// WatchFilterValue limits the controller to objects with this
	// cluster.x-k8s.io/watch-filter label value.
	WatchFilterValue string
	// PodNetwork keeps the node containers' CNI configuration, routes and
	// masquerade rules current (CAPCT's node IPAM); nil turns it off.
	PodNetwork PodNetwork
	// NodeIPAM is told when a cluster is gone; nil when node IPAM is off.
	NodeIPAM ClusterForgetter
	// OrphanGracePeriod defaults to DefaultOrphanGracePeriod.
	OrphanGracePeriod time.Duration
	// LoadBalancerStats reads HAProxy's statistics to confirm reloads; nil
	// means loadbalancer.HTTPStats. Tests with the fake runtime, whose
	// containers run nothing, replace it.
	LoadBalancerStats loadbalancer.StatsFunc
	// MaxImageCopySize bounds the load balancer's image copied to a
	// ContainerEngine that lacks it; 0 means imagecopy.DefaultMaxSize.
	MaxImageCopySize int64
	// Policy is what clusters may ask of the host (the manager's policy
	// flags); the zero Policy allows everything but the engine's own
	// networks.
	Policy policy.Policy
	// UnreachableEngineDeletionTimeout is how long a cluster's deletion
	// waits for a ContainerEngine that does not answer before it abandons
	// what the cluster has there; 0 means
	// lifecycle.DefaultUnreachableEngineDeletionTimeout.
	UnreachableEngineDeletionTimeout time.Duration

	recorder record.EventRecorder
	lb       *loadbalancer.LoadBalancer
	// images copies the load balancer's image to a first engine that lacks
	// it.
	images *imagecopy.Copier
	// wakeups carries container events into the work queue, as Clusters
	// whose ContainerCluster to reconcile.
	wakeups chan event.GenericEvent
}

// SetupWithManager wires the controller.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.OrphanGracePeriod == 0 {
		r.OrphanGracePeriod = DefaultOrphanGracePeriod
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	// The core/v1 recorder, deprecated for the events.k8s.io one, whose
	// Eventf takes other arguments and which needs other RBAC: moving every
	// controller's events over is a change of its own.
	r.recorder = mgr.GetEventRecorderFor("containercluster-controller") //nolint:staticcheck // SA1019, above
	r.lb = &loadbalancer.LoadBalancer{Client: r.Client, Engines: r.Engines, Stats: r.LoadBalancerStats}
	if c, ok := r.Clock.(clock.Clock); ok {
		r.lb.Clock = c
	}
	r.wakeups = make(chan event.GenericEvent, 1024)
	r.images = imagecopy.New(ctx, r.Engines, r.MaxImageCopySize, r.wakeCluster, nil)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		r.pumpContainerEvents(ctx)
		return nil
	})); err != nil {
		return fmt.Errorf("failed to add the container event stream: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &infrav1.ContainerCluster{}, enginesIndex, listedEngines); err != nil {
		return fmt.Errorf("failed to index ContainerClusters by their engines: %w", err)
	}
	log := ctrl.LoggerFrom(ctx)
	err := capicontroller.NewControllerManagedBy(mgr, log).
		For(&infrav1.ContainerCluster{}).
		WithOptions(options).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)).
		Watches(&clusterv1.Cluster{},
			handler.EnqueueRequestsFromMapFunc(util.ClusterToInfrastructureMapFunc(ctx, infrav1.GroupVersion.WithKind("ContainerCluster"), mgr.GetClient(), &infrav1.ContainerCluster{}))).
		// Control-plane machines come, get addresses and go: each change may
		// change the load balancer's backends. Any machine that comes, gets
		// its pod CIDRs recorded or goes changes the pod network.
		// An engine that is created, reached, lost or narrowed changes
		// whether its clusters may run.
		Watches(&infrav1.ContainerEngine{}, handler.EnqueueRequestsFromMapFunc(r.engineToClusters)).
		Watches(&infrav1.ContainerMachine{}, handler.EnqueueRequestsFromMapFunc(r.machineToCluster),
			machineChangesCluster()).
		// A container of the cluster that starts (again) has lost what lived
		// only in its memory; a load balancer that stops must run again.
		WatchesRawSource(source.Channel(r.wakeups, handler.EnqueueRequestsFromMapFunc(r.wokenClusterToContainerCluster))).
		Complete(r)
	if err != nil {
		return fmt.Errorf("failed to set up the ContainerCluster controller: %w", err)
	}
	return nil
}

// Reconcile ensures the network and load balancer of a ContainerCluster,
// or removes them once the cluster is deleted.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	cc := &infrav1.ContainerCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cluster, err := util.GetOwnerCluster(ctx, r.Client, cc.ObjectMeta)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to get the owner Cluster of ContainerCluster %s: %w", klog.KObj(cc), err)
	}
	if cluster == nil {
		// Cluster API sets the owner reference; the Cluster watch brings
		// the object back then.
		return ctrl.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("Cluster", klog.KObj(cluster)))
	if annotations.IsExternallyManaged(cc) {
		return ctrl.Result{}, nil
	}
	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, cc); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}
	if stop, err := r.ensureClusterInfrastructure(ctx, cluster, cc); stop || err != nil {
		return ctrl.Result{}, err
	}
	if cc.DeletionTimestamp.IsZero() {
		if added, err := finalizers.EnsureFinalizer(ctx, r.Client, cc, infrav1.ClusterFinalizer); err != nil || added {
			return ctrl.Result{}, err
		}
	}
	helper, err := patch.NewHelper(cc, r.Client)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to create a patch helper for ContainerCluster %s: %w", klog.KObj(cc), err)
	}
	defer func() {
		setReadyCondition(cc, r.Clock.Now())
		if err := helper.Patch(ctx, cc, patch.WithOwnedConditions{Conditions: []string{
			infrav1.ReadyCondition, infrav1.LoadBalancerAvailableCondition, infrav1.EnginesReadyCondition,
		}}); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("failed to patch ContainerCluster %s: %w", klog.KObj(cc), err))
		}
	}()

	var res ctrl.Result
	if !cc.DeletionTimestamp.IsZero() {
		res, err = r.reconcileDelete(ctx, cluster, cc)
	} else {
		if cc.Spec.ClusterID == "" {
			// The ID that labels the cluster's containers is recorded before
			// any is made, and kept from then on: clusterctl move carries it,
			// while the Cluster's UID changes.
			cc.Spec.ClusterID = string(cluster.UID)
		}
		res, err = r.reconcileNormal(ctx, cluster, cc)
	}
	if container.IsUnreachable(err) {
		// LoadBalancerAvailable carries the error; the engine being away is
		// waiting, not failing.
		ctrl.LoggerFrom(ctx).V(2).Info("The container engine does not answer; looking again soon", "err", err.Error())
		return ctrl.Result{RequeueAfter: engineRetry}, nil
	}
	return res, err
}

func (r *Reconciler) reconcileNormal(ctx context.Context, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) (ctrl.Result, error) {
	now := r.Clock.Now()
	// Until the cluster is provisioned, its spec is checked against the
	// policy and the host: the webhooks checked the policy at admission but
	// may not have run, and the flags may have changed since. Once it runs,
	// a policy tightened later never takes its load balancer away.
	provisioned := ptr.Deref(cc.Status.Initialization.Provisioned, false)
	if res, stop, err := r.reconcileEngines(ctx, cc, now, provisioned); stop || err != nil {
		return res, err
	}
	family := naming.IPFamily(cluster, cc)
	network := naming.NetworkName(cluster, cc)
	if !provisioned {
		if reason, recheck, err := r.admit(ctx, cluster, cc); reason != "" {
			return r.refused(cc, now, infrav1.LoadBalancerAvailableCondition, reason, err, recheck)
		} else if err != nil {
			return ctrl.Result{}, err
		}
	}
	subnets, err := r.ensureNetwork(ctx, cluster, cc, network, family)
	if err != nil {
		setLoadBalancerCondition(cc, now, metav1.ConditionFalse, infrav1.FailedReason, err.Error())
		return ctrl.Result{}, fmt.Errorf("failed to ensure network %s of ContainerCluster %s: %w", network, klog.KObj(cc), err)
	}
	// Only now are the node network's subnets known.
	if !provisioned {
		if err := policy.CheckPodCIDRs(cluster.Spec.ClusterNetwork.Pods.CIDRBlocks, network, subnets...); err != nil {
			return r.refused(cc, now, infrav1.LoadBalancerAvailableCondition, infrav1.InvalidSpecReason, fmt.Errorf("in Cluster %s: %w", klog.KObj(cluster), err), 0)
		}
	}
	lbContainer, err := r.lb.Ensure(ctx, loadbalancer.Spec{
		Cluster: cluster, ContainerCluster: cc, Network: network, IPFamily: family, Image: cc.Spec.LoadBalancer.Image,
		ListenAddress: cc.Spec.LoadBalancer.ListenAddress,
	})
	if err != nil {
		setLoadBalancerCondition(cc, now, metav1.ConditionFalse, infrav1.FailedReason, err.Error())
		return ctrl.Result{}, err
	}
	if cc.Spec.ControlPlaneEndpoint.Host == "" {
		// The load balancer's IPv4 address whenever it has one, whatever
		// the cluster's family: the management cluster's controllers must
		// reach the endpoint, and their pods are usually IPv4 only. What
		// runs in an IPv6 cluster (pods, Services, Nodes' addresses) is
		// IPv6 all the same. IPv6 where the network has no IPv4 (Podman).
		host := lbContainer.IPv4
		if !host.IsValid() {
			host = lbContainer.IPv6
		}
		if !host.IsValid() {
			return ctrl.Result{}, fmt.Errorf("load balancer container %s of ContainerCluster %s has no address", lbContainer.Name, klog.KObj(cc))
		}
		cc.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: host.String(), Port: loadbalancer.APIServerPort}
	}
	if port := lbContainer.HostPort(loadbalancer.APIServerPort); port != 0 {
		cc.Status.LoadBalancer.HostPort = int32(port)
	}
	// An error here is retried with the controller's backoff; until then
	// HAProxy serves the configuration it has.
	reloaded, err := r.lb.SyncAndVerify(ctx, cluster, cc, lbContainer)
	if err != nil {
		reason := infrav1.FailedReason
		var reloadErr *loadbalancer.ReloadError
		if errors.As(err, &reloadErr) {
			reason = reloadErr.Reason
		}
		setLoadBalancerCondition(cc, now, metav1.ConditionFalse, reason, err.Error())
		return ctrl.Result{}, err
	}
	if reloaded {
		r.recorder.Event(cc, corev1.EventTypeNormal, "LoadBalancerReloaded", "Rewrote the HAProxy configuration for a changed control plane")
	}
	setLoadBalancerCondition(cc, now, metav1.ConditionTrue, infrav1.SucceededReason, "")
	cc.Status.Initialization.Provisioned = ptr.To(true)

	if err := r.removeOrphans(ctx, cluster, cc, now); err != nil {
		return ctrl.Result{}, err
	}
	// Woken by a change of the cluster's nodes, the sync programs what
	// changed; on the periodic pass it also reads back nodes it has not
	// looked at for a while.
	if r.PodNetwork != nil {
		if err := r.PodNetwork.Sync(ctx, cluster, cc); err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to sync the pod network of Cluster %s: %w", klog.KObj(cluster), err)
		}
	}
	return ctrl.Result{RequeueAfter: orphanCheckInterval}, nil
}

// admit checks the cluster's spec against the policy and its load
// balancer's image against the host. It returns the reason to refuse the
// cluster for, with how soon to look again, or an error to retry.
func (r *Reconciler) admit(ctx context.Context, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) (reason string, recheck time.Duration, err error) {
	image := loadbalancer.ImageOrDefault(cc.Spec.LoadBalancer.Image)
	if err := r.Policy.CheckCluster(&cc.Spec, image); err != nil {
		return infrav1.RefusedByPolicyReason, 0, err
	}
	rt, err := engines.FirstEngine(r.Engines, cc)
	if err != nil {
		return "", 0, err
	}
	// A missing image is waited for, not failed on: on a ContainerEngine
	// it is copied from an engine that holds it, else pulled where
	// spec.loadBalancer.imagePullPolicy allows (imagecopy.Obtain).
	imageField := field.NewPath("spec", "loadBalancer", "image")
	err = policy.MissingImages(ctx, rt.ImageExists, []policy.FieldValue{{Field: imageField, Value: image}})
	var notOnHost *policy.NotOnHostError
	if !errors.As(err, &notOnHost) {
		return "", 0, err
	}
	req := imagecopy.Request{
		Target: r.Engines.ForCluster(cc)[0],
		Missing: []imagecopy.Missing{{Field: imageField.String(), Ref: image, Pull: cc.Spec.LoadBalancer.ImagePullPolicy.Pulls(),
			PolicyField: field.NewPath("spec", "loadBalancer", "imagePullPolicy").String()}},
		Auth:   imagecopy.PullSecretAuth(ctx, r.APIReader, cc),
		Waiter: client.ObjectKeyFromObject(cluster),
	}
	if req.Target != engines.Local {
		req.Sources = imagecopy.Sources(cc)
	}
	wait := r.images.Obtain(req)
	return wait.Reason, hostRecheck, errors.New(wait.Message)
}

// refused records, in the condition it names, a cluster whose spec the
// policy, validation or the host refuses, or that asks for what is not
// built. Nothing more is made until the object, the manager's flags or the
// host change; the first two reconcile it again, the host is looked at again
// after recheck (0: never). The error is not returned: retrying it with
// backoff would change nothing.
func (r *Reconciler) refused(cc *infrav1.ContainerCluster, now time.Time, condition, reason string, err error, recheck time.Duration) (ctrl.Result, error) {
	if c := conditions.Get(cc, condition); c == nil || c.Reason != reason || c.Message != err.Error() {
		eventType := corev1.EventTypeWarning
		if reason == infrav1.CopyingImageReason || reason == infrav1.PullingImageReason {
			// Progress, not a problem.
			eventType = corev1.EventTypeNormal
		}
		r.recorder.Event(cc, eventType, reason, err.Error())
	}
	conditions.Set(cc, metav1.Condition{
		Type: condition, Status: metav1.ConditionFalse, Reason: reason, Message: err.Error(),
		LastTransitionTime: metav1.NewTime(now),
	})
	return ctrl.Result{RequeueAfter: recheck}, nil
}

// ensureNetwork creates the cluster's own network, or checks that the
// Unmanaged network it shares exists and carries the families it needs. It
// returns the network's subnets.
func (r *Reconciler) ensureNetwork(ctx context.Context, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster, name string, family container.IPFamily) ([]netip.Prefix, error) {
	rt, err := engines.FirstEngine(r.Engines, cc)
	if err != nil {
		return nil, err
	}
	var n container.Network
	overlay := len(r.Engines.ForCluster(cc)) > 1
	if cc.Spec.Network.Mode != infrav1.NetworkUnmanaged {
		spec := container.NetworkSpec{Name: name, Owner: naming.ClusterOwner(cluster, cc), IPFamily: family, Overlay: overlay,
			Encrypted: cc.Spec.Network.Encrypted}
		// The other engines' networks matter only to pick the subnet of a
		// new overlay; asking them on every pass would also stop the
		// cluster's reconcile while one of them is away.
		if _, err := rt.InspectNetwork(ctx, name); overlay && container.IsNotFound(err) {
			if spec.Avoid, err = r.localSubnets(ctx, cc); err != nil {
				return nil, err
			}
		}
		n, err = rt.EnsureNetwork(ctx, spec)
		if err != nil {
			return nil, err
		}
	} else {
		n, err = rt.InspectNetwork(ctx, name)
		if container.IsNotFound(err) {
			return nil, fmt.Errorf("the Unmanaged network %q does not exist; create it first or use mode Managed: %w", name, err)
		}
		if err != nil {
			return nil, err
		}
		if family.HasIPv4() && !n.IPv4Subnet.IsValid() || family.HasIPv6() && !n.IPv6Subnet.IsValid() {
			return nil, fmt.Errorf("the Unmanaged network %q (subnets %v %v) lacks a subnet for IP family %s", name, n.IPv4Subnet, n.IPv6Subnet, family)
		}
		if overlay && !n.Overlay {
			return nil, fmt.Errorf("the Unmanaged network %q is local to the first engine, and a cluster on several engines needs an attachable overlay network of their swarm (docker network create --driver overlay --attachable)", name)
		}
	}
	return []netip.Prefix{n.IPv4Subnet, n.IPv6Subnet}, nil
}

// localSubnets lists the subnets of the local networks of every engine of
// cc, the first one's included, that its new overlay network must not
// overlap: the swarm checks an overlay against no engine's local networks,
// and an overlay on the subnet of another cluster's bridge would send the
// manager's requests for the cluster's load balancer address to whichever
// container holds it on that bridge.
func (r *Reconciler) localSubnets(ctx context.Context, cc *infrav1.ContainerCluster) ([]netip.Prefix, error) {
	var subnets []netip.Prefix
	for _, engine := range r.Engines.ForCluster(cc) {
		rt, err := r.Engines.Get(engine)
		if err != nil {
			return nil, fmt.Errorf("failed to reach engine %q of ContainerCluster %s: %w", engine, klog.KObj(cc), err)
		}
		local, err := rt.LocalSubnets(ctx)
		if err != nil {
			return nil, fmt.Errorf("failed to list the local networks of engine %q of ContainerCluster %s: %w", engine, klog.KObj(cc), err)
		}
		subnets = append(subnets, local...)
	}
	return subnets, nil
}

// removeOrphans deletes the cluster's node containers whose ContainerMachine
// no longer exists, for example after its finalizer was removed by hand.
// Only containers this cluster owns are ever considered.
func (r *Reconciler) removeOrphans(ctx context.Context, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster, now time.Time) error {
	owner := naming.ClusterOwner(cluster, cc)
	// An engine that does not answer keeps its orphans until it does: the
	// containers of machines whose deletion gave up on it are removed here
	// then (lifecycle.Termination).
	containers, _, err := engines.ListReachable(ctx, r.Engines, cc, owner, nil)
	if err != nil {
		return fmt.Errorf("failed to list the containers of Cluster %s: %w", klog.KObj(cluster), err)
	}
	for _, c := range containers {
		if !container.Role(c.Labels[container.LabelRole]).IsNode() || now.Sub(c.Created) < r.OrphanGracePeriod {
			continue
		}
		key := client.ObjectKey{Namespace: cluster.Namespace, Name: c.Labels[container.LabelMachine]}
		err := r.Client.Get(ctx, key, &infrav1.ContainerMachine{})
		if !apierrors.IsNotFound(err) {
			if err != nil {
				return fmt.Errorf("failed to get ContainerMachine %s: %w", key, err)
			}
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Deleting orphaned container", "Container", c.Name, "ContainerMachine", key)
		if err := c.Runtime.Delete(ctx, c.Name, owner.ForMachine(key.Name)); err != nil && !container.IsNotFound(err) {
			return fmt.Errorf("failed to delete orphaned container %s: %w", c.Name, err)
		}
	}
	return nil
}

// pumpContainerEvents wakes a cluster's ContainerCluster when one of its
// node containers starts, as after the engine restarted it: the routes and
// masquerade rules of node IPAM live in the node's network namespace and
// are gone, and a node that comes back on another address needs the
// others' routes changed. The load balancer's start and stop wake it too,
// so that a stopped load balancer is started again (Ensure) within seconds
// rather than at the next periodic pass.
func (r *Reconciler) pumpContainerEvents(ctx context.Context) {
	log := ctrl.LoggerFrom(ctx)
	r.Engines.Watch(ctx, func(ev container.Event) {
		role := container.Role(ev.Labels[container.LabelRole])
		ns, name := ev.Labels[container.LabelNamespace], ev.Labels[container.LabelCluster]
		if ns == "" || name == "" || !wakesCluster(ev.Type, role) {
			return
		}
		if role.IsNode() && r.PodNetwork != nil {
			// Before the wakeup, so that the sync it causes programs the
			// node in full.
			r.PodNetwork.NodeStarted(types.NamespacedName{Namespace: ns, Name: name}, ev.Name)
		}
		// Never block the event stream.
		r.wakeCluster(types.NamespacedName{Namespace: ns, Name: name})
	}, func(err error) {
		log.Info("Container events are not available yet; retrying", "err", err.Error())
	})
}

// wakesCluster reports whether a container event of role concerns its
// cluster's infrastructure.
func wakesCluster(t container.EventType, role container.Role) bool {
	switch {
	case role == container.RoleLoadBalancer:
		return t == container.EventStart || t == container.EventDie
	case role.IsNode():
		return t == container.EventStart
	}
	return false
}

// wakeCluster queues the ContainerCluster of the Cluster key from outside
// the informers. It never blocks: when the queue is backed up the wakeup is
// dropped, and the periodic pass comes soon enough.
func (r *Reconciler) wakeCluster(key types.NamespacedName) {
	cluster := &clusterv1.Cluster{}
	cluster.Namespace, cluster.Name = key.Namespace, key.Name
	select {
	case r.wakeups <- event.GenericEvent{Object: cluster}:
	default:
	}
}

// wokenClusterToContainerCluster maps a Cluster woken by a container
// event, known by its key only, to its ContainerCluster. Raw sources skip
// the controller's event filter, so the watch filter is applied here.
func (r *Reconciler) wokenClusterToContainerCluster(ctx context.Context, o client.Object) []reconcile.Request {
	cluster := &clusterv1.Cluster{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(o), cluster); err != nil {
		return nil
	}
	if r.WatchFilterValue != "" && cluster.Labels[clusterv1.WatchLabel] != r.WatchFilterValue {
		return nil
	}
	return infrastructureRequest(cluster)
}

// machineToCluster maps a ContainerMachine to its cluster's
// ContainerCluster.
func (r *Reconciler) machineToCluster(ctx context.Context, o client.Object) []reconcile.Request {
	clusterName := o.GetLabels()[clusterv1.ClusterNameLabel]
	if clusterName == "" {
		return nil
	}
	cluster := &clusterv1.Cluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: clusterName}, cluster); err != nil {
		return nil
	}
	return infrastructureRequest(cluster)
}

// machineChangesCluster passes the ContainerMachine events that change
// what the cluster's infrastructure serves: any change of a control-plane
// machine (the load balancer's backends), and for every machine its
// coming, its going, and its pod CIDRs being recorded (the pod network).
// The status updates of a worker's phases pass nothing.
func machineChangesCluster() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			if _, ok := e.ObjectNew.GetLabels()[clusterv1.MachineControlPlaneLabel]; ok {
				return true
			}
			return e.ObjectOld.GetAnnotations()[infrav1.PodCIDRsAnnotation] != e.ObjectNew.GetAnnotations()[infrav1.PodCIDRsAnnotation] ||
				e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
		},
	}
}

// infrastructureRequest is the reconcile of the Cluster's ContainerCluster,
// if that is its infrastructure.
func infrastructureRequest(cluster *clusterv1.Cluster) []reconcile.Request {
	name, ok := clusters.InfrastructureName(cluster)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: cluster.Namespace, Name: name}}}
}

func setLoadBalancerCondition(cc *infrav1.ContainerCluster, now time.Time, status metav1.ConditionStatus, reason, message string) {
	conditions.Set(cc, metav1.Condition{
		Type: infrav1.LoadBalancerAvailableCondition, Status: status, Reason: reason, Message: message,
		LastTransitionTime: metav1.NewTime(now),
	})
}

// setReadyCondition mirrors LoadBalancerAvailable into Ready: the load
// balancer and its network are all the cluster's infrastructure. Before
// there is any, engines that are not ready are what holds it back, and
// Ready says so; after, an engine away that does not hold the load balancer
// does not make the cluster unready (docs/multihost.md).
func setReadyCondition(cc *infrav1.ContainerCluster, now time.Time) {
	source := conditions.Get(cc, infrav1.LoadBalancerAvailableCondition)
	if engines := conditions.Get(cc, infrav1.EnginesReadyCondition); source == nil && engines != nil && engines.Status != metav1.ConditionTrue {
		source = engines
	}
	ready := metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.InProgressReason,
		Message: "Waiting for the load balancer", LastTransitionTime: metav1.NewTime(now)}
	if source != nil {
		ready.Status, ready.Reason, ready.Message = source.Status, source.Reason, source.Message
	}
	conditions.Set(cc, ready)
}
