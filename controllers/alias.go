// Package controllers exports CAPCT's reconcilers, so that other programs
// (test suites, a combined manager) can run them while their
// implementations stay free to change under internal/.
package controllers

import (
	"context"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/controllers/containercluster"
	"github.com/capct/cluster-api-provider-container/internal/controllers/containerengine"
	"github.com/capct/cluster-api-provider-container/internal/controllers/containermachine"
	"github.com/capct/cluster-api-provider-container/internal/controllers/containermachinetemplate"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/hostcapacity"
	"github.com/capct/cluster-api-provider-container/internal/nodeipam"
	"github.com/capct/cluster-api-provider-container/internal/podnetwork"
	"github.com/capct/cluster-api-provider-container/internal/policy"
)

// NodeIPAM is CAPCT's node IPAM: it decides and records node pod CIDRs.
// One serves both reconcilers, so that a cluster's allocations share one
// lock and a deleted cluster is forgotten.
type NodeIPAM = nodeipam.Recorder

// NewNodeIPAM returns node IPAM on c. reader must read the API server
// directly (mgr.GetAPIReader()): a cache that has not yet seen another
// machine's fresh allocation would let the same CIDR be handed out twice.
func NewNodeIPAM(c client.Client, reader client.Reader) *NodeIPAM {
	return nodeipam.NewRecorder(c, reader)
}

// PodNetwork programs the clusters' pod networks into their node
// containers. One serves both reconcilers: the ContainerCluster controller
// syncs each cluster's routes, and the ContainerMachine controller writes a
// node's CNI configuration as soon as its pod CIDRs are assigned.
type PodNetwork = podnetwork.Syncer

// NewPodNetwork returns the pod network of the clusters on set's engines,
// reading ContainerMachines through reader (the manager's cache).
func NewPodNetwork(set engines.Set, reader client.Reader) *PodNetwork {
	return podnetwork.NewSyncer(set, reader, nil)
}

// NewEngines returns the container engines of a manager: local, its own
// engine, already bounded by its call timeout, and every ContainerEngine the
// ContainerEngineReconciler connects, whose clients connect makes: the
// backend's constructor (docker.Connect), which the program passes so that
// these reconcilers depend on no backend. Engines' Secrets are read through
// reader (mgr.GetAPIReader()) from namespace, the manager's own
// (POD_NAMESPACE; empty fails every engine that needs a Secret), and each
// call to an engine is bounded by callTimeout, as
// --container-runtime-timeout bounds the manager's own.
func NewEngines[C engines.Client](local container.Runtime, connect engines.Connector[C], reader client.Reader, namespace string, callTimeout time.Duration, clk clock.PassiveClock) *engines.Registry {
	return engines.NewRegistry(local, connect, reader, namespace, callTimeout, clk)
}

// ContainerClusterReconciler reconciles ContainerClusters.
type ContainerClusterReconciler struct {
	Client client.Client
	// Engines are the container engines clusters run on: the manager's
	// Registry, or engines.Single(runtime) for the manager's own alone.
	Engines engines.Set
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
	// WatchFilterValue limits the controller to objects with this
	// cluster.x-k8s.io/watch-filter label value.
	WatchFilterValue string
	// NodeIPAM is CAPCT's node IPAM; nil turns it off. With it, the
	// controller programs each cluster's pod network into its nodes.
	NodeIPAM *NodeIPAM
	// PodNetwork is that pod network, shared with the
	// ContainerMachineReconciler; nil with NodeIPAM set makes one of this
	// reconciler's own.
	PodNetwork *PodNetwork
	// MaxImageCopySize bounds the load balancer's image copied to a
	// ContainerEngine that lacks it; 0 means imagecopy.DefaultMaxSize.
	MaxImageCopySize int64
	// Policy is what clusters may ask of the host; the zero Policy allows
	// everything but the engine's own networks.
	Policy policy.Policy
	// UnreachableEngineDeletionTimeout is how long a cluster's deletion
	// waits for a ContainerEngine that does not answer before it abandons
	// what the cluster has there; 0 means the default.
	UnreachableEngineDeletionTimeout time.Duration
}

// SetupWithManager sets up the reconciler with the manager.
func (r *ContainerClusterReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	rec := &containercluster.Reconciler{
		Client:           r.Client,
		Engines:          r.Engines,
		Clock:            r.Clock,
		WatchFilterValue: r.WatchFilterValue,
		MaxImageCopySize: r.MaxImageCopySize,
		Policy:           r.Policy,

		UnreachableEngineDeletionTimeout: r.UnreachableEngineDeletionTimeout,
	}
	if r.NodeIPAM != nil {
		rec.NodeIPAM = r.NodeIPAM
		syncer := r.PodNetwork
		if syncer == nil {
			syncer = podnetwork.NewSyncer(r.Engines, r.Client, r.Clock)
		}
		rec.PodNetwork = syncer
	}
	return rec.SetupWithManager(ctx, mgr, options)
}

// ContainerMachineReconciler reconciles ContainerMachines, including the
// machines of ContainerMachinePools.
type ContainerMachineReconciler struct {
	Client client.Client
	// Engines are the container engines machines run on.
	Engines      engines.Set
	ClusterCache clustercache.ClusterCache
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
	// WatchFilterValue limits the controller to objects with this
	// cluster.x-k8s.io/watch-filter label value.
	WatchFilterValue string
	// NodeIPAM is CAPCT's node IPAM; nil turns it off.
	NodeIPAM *NodeIPAM
	// PodNetwork, the ContainerClusterReconciler's, writes a node's CNI
	// configuration as soon as node IPAM assigned its pod CIDRs; nil leaves
	// it to that reconciler's sync.
	PodNetwork *PodNetwork
	// MachinePools makes the controller watch MachinePools for their
	// machines' bootstrap data; set it when the MachinePool gate is on.
	MachinePools bool
	// HostCapacity holds launches while the container host's limits leave
	// no room for another node; nil admits every launch.
	HostCapacity *hostcapacity.Gate
	// MaxConcurrentBootstraps bounds the bootstraps in flight on the host;
	// 0 means no bound.
	MaxConcurrentBootstraps int
	// MaxImageCopySize bounds each image copied to a ContainerEngine that
	// lacks it; 0 means imagecopy.DefaultMaxSize.
	MaxImageCopySize int64
	// Policy is what machines may ask of the host; the zero Policy allows
	// everything.
	Policy policy.Policy
	// UnreachableEngineDeletionTimeout is how long a machine's deletion
	// waits for a ContainerEngine that does not answer; 0 means the
	// default.
	UnreachableEngineDeletionTimeout time.Duration
}

// SetupWithManager sets up the reconciler with the manager.
func (r *ContainerMachineReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	rec := &containermachine.Reconciler{
		Client:           r.Client,
		Engines:          r.Engines,
		ClusterCache:     r.ClusterCache,
		Clock:            r.Clock,
		WatchFilterValue: r.WatchFilterValue,
		MachinePools:     r.MachinePools,

		MaxConcurrentBootstraps: r.MaxConcurrentBootstraps,
		MaxImageCopySize:        r.MaxImageCopySize,
		Policy:                  r.Policy,

		UnreachableEngineDeletionTimeout: r.UnreachableEngineDeletionTimeout,
	}
	rec.NodeIPAM = r.NodeIPAM
	if r.PodNetwork != nil {
		rec.PodNetwork = r.PodNetwork
	}
	if r.HostCapacity != nil {
		rec.HostCapacity = r.HostCapacity
	}
	return rec.SetupWithManager(ctx, mgr, options)
}

// ContainerEngineReconciler reports, in each ContainerEngine's Available
// condition, whether CAPCT reaches the engine.
type ContainerEngineReconciler struct {
	Client client.Client
	// Engines holds the engines' clients: the Registry the other
	// reconcilers are given as their Set (NewEngines).
	Engines *engines.Registry
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
	// WatchFilterValue limits the controller to objects with this
	// cluster.x-k8s.io/watch-filter label value.
	WatchFilterValue string
}

// SetupWithManager sets up the reconciler with the manager.
func (r *ContainerEngineReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	return (&containerengine.Reconciler{
		Client:           r.Client,
		Engines:          r.Engines,
		Clock:            r.Clock,
		WatchFilterValue: r.WatchFilterValue,
	}).SetupWithManager(ctx, mgr, options)
}

// ContainerMachineTemplateReconciler writes each ContainerMachineTemplate's
// status.capacity and status.nodeInfo, which the cluster autoscaler reads
// to scale a MachineDeployment from zero.
type ContainerMachineTemplateReconciler struct {
	Client client.Client
	// WatchFilterValue limits the controller to objects with this
	// cluster.x-k8s.io/watch-filter label value.
	WatchFilterValue string
}

// SetupWithManager sets up the reconciler with the manager.
func (r *ContainerMachineTemplateReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	return (&containermachinetemplate.Reconciler{
		Client:           r.Client,
		WatchFilterValue: r.WatchFilterValue,
	}).SetupWithManager(ctx, mgr, options)
}
