// Package capi runs Cluster API's own controllers in a test manager, beside
// CAPCT's, so that CAPCT's integration tests exercise the provider contract
// through its real consumer rather than through assumptions about it.
// Orphaned containers are swept at once in tests (no grace period).
package capi

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	capicontrollers "sigs.k8s.io/cluster-api/controllers"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/controllers/containercluster"
	"github.com/capct/cluster-api-provider-container/internal/controllers/containerengine"
	"github.com/capct/cluster-api-provider-container/internal/controllers/containermachine"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/lifecycle"
	"github.com/capct/cluster-api-provider-container/internal/loadbalancer"
	"github.com/capct/cluster-api-provider-container/internal/machineprovider"
	"github.com/capct/cluster-api-provider-container/internal/nodeipam"
	"github.com/capct/cluster-api-provider-container/internal/podnetwork"
)

// Options returns controller options for tests: several managers in one
// process would otherwise collide on controller names.
func Options() controller.Options {
	return controller.Options{MaxConcurrentReconciles: 5, SkipNameValidation: ptr.To(true)}
}

// SetupCore adds a ClusterCache and Cluster API's Cluster and Machine
// reconcilers to mgr and returns the ClusterCache.
func SetupCore(ctx context.Context, mgr ctrl.Manager) (clustercache.ClusterCache, error) {
	clusterCache, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: mgr.GetClient(),
		// Cluster API's Machine controller finds Nodes through this index.
		Cache: clustercache.CacheOptions{Indexes: []clustercache.CacheOptionsIndex{clustercache.NodeProviderIDIndex}},
		Client: clustercache.ClientOptions{
			UserAgent: "capct-test",
			Cache:     clustercache.ClientCacheOptions{DisableFor: []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}}},
		},
	}, Options())
	if err != nil {
		return nil, fmt.Errorf("failed to set up the ClusterCache: %w", err)
	}
	if err := (&capicontrollers.ClusterReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: clusterCache, RemoteConnectionGracePeriod: time.Minute,
	}).SetupWithManager(ctx, mgr, Options()); err != nil {
		return nil, fmt.Errorf("failed to set up Cluster API's Cluster controller: %w", err)
	}
	if err := (&capicontrollers.MachineReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: clusterCache, RemoteConditionsGracePeriod: 5 * time.Minute,
	}).SetupWithManager(ctx, mgr, Options()); err != nil {
		return nil, fmt.Errorf("failed to set up Cluster API's Machine controller: %w", err)
	}
	return clusterCache, nil
}

// SetupProvider adds CAPCT's ContainerCluster, ContainerMachine and
// ContainerEngine reconcilers to mgr, with rt as the manager's own engine.
// workload, when not nil, replaces the ClusterCache for reaching workload
// clusters (tests use the test API server itself as the workload cluster).
func SetupProvider(ctx context.Context, mgr ctrl.Manager, rt container.Runtime, clusterCache clustercache.ClusterCache, workload lifecycle.WorkloadClientFunc) error {
	return SetupProviderWith(ctx, mgr, rt, clusterCache, workload, ProviderOptions{})
}

// ProviderOptions are the optional parts of the provider's reconcilers.
type ProviderOptions struct {
	// HostCapacity holds launches while the host has no room.
	HostCapacity machineprovider.HostCapacity
	// NodeIPAM turns CAPCT's node IPAM on, as the manager does: a
	// nodeipam.Recorder on the API reader for the machines, and PodNetwork
	// for the clusters.
	NodeIPAM bool
	// PodNetwork is what the ContainerCluster controller syncs the pod
	// network with when NodeIPAM is on; nil means a podnetwork.Syncer on
	// rt, which the ContainerMachine controller then shares.
	PodNetwork containercluster.PodNetwork
	// NodeNetwork writes a node's CNI configuration from the
	// ContainerMachine controller when PodNetwork is set; nil leaves it to
	// PodNetwork's sync.
	NodeNetwork lifecycle.NodeNetwork
	// EngineSecretsNamespace holds the Secrets of ContainerEngines, as the
	// manager's own namespace does; empty fails every engine that needs
	// one.
	EngineSecretsNamespace string
}

// engineCallTimeout bounds each call to a ContainerEngine in tests.
const engineCallTimeout = 30 * time.Second

// SetupProviderWith is SetupProvider with optional parts.
func SetupProviderWith(ctx context.Context, mgr ctrl.Manager, rt container.Runtime, clusterCache clustercache.ClusterCache, workload lifecycle.WorkloadClientFunc, opts ProviderOptions) error {
	// As in the manager: rt is the Local engine, and the ContainerEngine
	// controller connects every other into the same Registry.
	set := engines.NewRegistry(rt, docker.Connect, mgr.GetAPIReader(), opts.EngineSecretsNamespace, engineCallTimeout, nil)
	if err := (&containerengine.Reconciler{Client: mgr.GetClient(), Engines: set}).SetupWithManager(ctx, mgr, Options()); err != nil {
		return err
	}
	cc := &containercluster.Reconciler{
		Client: mgr.GetClient(), Engines: set, OrphanGracePeriod: time.Nanosecond,
		LoadBalancerStats: LoadBalancerStats(rt),
	}
	cm := &containermachine.Reconciler{
		Client: mgr.GetClient(), Engines: set, ClusterCache: clusterCache, WorkloadClient: workload, MachinePools: true,
		HostCapacity: opts.HostCapacity,
	}
	if opts.NodeIPAM {
		cm.NodeIPAM = nodeipam.NewRecorder(mgr.GetClient(), mgr.GetAPIReader())
		cc.NodeIPAM = cm.NodeIPAM
		cc.PodNetwork, cm.PodNetwork = opts.PodNetwork, opts.NodeNetwork
		if cc.PodNetwork == nil {
			syncer := podnetwork.NewSyncer(set, mgr.GetClient(), nil)
			cc.PodNetwork, cm.PodNetwork = syncer, syncer
		}
	}
	if err := cc.SetupWithManager(ctx, mgr, Options()); err != nil {
		return err
	}
	return cm.SetupWithManager(ctx, mgr, Options())
}

// LoadBalancerStats returns how the ContainerCluster controller reads
// HAProxy's statistics on rt: through the network on a real engine (nil),
// and, on the fake, whose containers run nothing, as if HAProxy had loaded
// the configuration file the controller wrote: its backends are listed.
func LoadBalancerStats(rt container.Runtime) loadbalancer.StatsFunc {
	if _, ok := rt.(*fake.Runtime); !ok {
		return nil
	}
	return func(ctx context.Context, m *container.Machine) ([]byte, error) {
		// The load balancer's own owner, as its labels name it.
		cfg, err := rt.ReadFile(ctx, m.Name, container.OwnerOf(m.Labels), loadbalancer.ConfigPath)
		if err != nil {
			return nil, err
		}
		var csv strings.Builder
		csv.WriteString("# pxname,svname,\n")
		for _, line := range strings.Split(string(cfg), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "backend" {
				fmt.Fprintf(&csv, "%s,BACKEND,\n", f[1])
			}
		}
		return []byte(csv.String()), nil
	}
}
