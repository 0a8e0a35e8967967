// Command manager runs CAPCT's controllers and webhooks: the Cluster API
// infrastructure provider whose machines are containers.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsv1 "k8s.io/component-base/logs/api/v1"
	// Registers --logging-format=json, as Cluster API's managers do.
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/feature"
	"sigs.k8s.io/cluster-api/util/flags"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/controllers"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
	expcontrollers "github.com/capct/cluster-api-provider-container/exp/controllers"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
	"github.com/capct/cluster-api-provider-container/internal/hostcapacity"
	"github.com/capct/cluster-api-provider-container/internal/imagecopy"
	"github.com/capct/cluster-api-provider-container/internal/lifecycle"
	"github.com/capct/cluster-api-provider-container/internal/policy"
	"github.com/capct/cluster-api-provider-container/internal/webhooks"
)

// podNamespaceEnv names the manager's own namespace (set from the Pod's in
// config/manager/manager.yaml), which holds ContainerEngines' Secrets.
const podNamespaceEnv = "POD_NAMESPACE"

// options are the manager's flags. Their names and defaults follow CAPD's so
// that users can move their deployment settings across.
type options struct {
	leaderElect                bool
	leaderElectLeaseDuration   time.Duration
	leaderElectRenewDeadline   time.Duration
	leaderElectRetryPeriod     time.Duration
	watchNamespace             string
	watchFilter                string
	profilerAddress            string
	defaultNetwork             string
	healthAddr                 string
	concurrency                int
	clusterCacheConcurrency    int
	syncPeriod                 time.Duration
	kubeAPIQPS                 float32
	kubeAPIBurst               int
	clusterCacheClientQPS      float32
	clusterCacheClientBurst    int
	webhookPort                int
	webhookCertDir             string
	webhookCertName            string
	webhookKeyName             string
	managerOptions             flags.ManagerOptions
	logOptions                 *logs.Options
	gracefulShutdownTimeout    time.Duration
	containerRuntimeAPITimeout time.Duration
	containerEngine            string
	engine                     container.Engine
	policy                     policy.Policy
	hostCapacityCheck          bool
	hostCapacityReserve        map[string]int64
	controlPlaneNodeCost       map[string]int64
	workerNodeCost             map[string]int64
	maxConcurrentBootstraps    int
	maxImageCopySize           int64
	unreachableEngineDeletion  time.Duration
}

func (o *options) addFlags(fs *pflag.FlagSet) {
	logsv1.AddFlags(o.logOptions, fs)
	fs.BoolVar(&o.leaderElect, "leader-elect", false,
		"Enable leader election for the controller manager, so that only one replica reconciles at a time.")
	fs.DurationVar(&o.leaderElectLeaseDuration, "leader-elect-lease-duration", 15*time.Second,
		"How long non-leader candidates wait before trying to take over an unrenewed lease.")
	fs.DurationVar(&o.leaderElectRenewDeadline, "leader-elect-renew-deadline", 10*time.Second,
		"How long the leader keeps trying to renew its lease before giving it up.")
	fs.DurationVar(&o.leaderElectRetryPeriod, "leader-elect-retry-period", 2*time.Second,
		"How long clients wait between leader-election attempts.")
	fs.StringVar(&o.watchNamespace, "namespace", "",
		"Namespace the controllers watch. Empty watches every namespace.")
	fs.StringVar(&o.watchFilter, "watch-filter", "",
		fmt.Sprintf("Reconcile only objects whose %s label has this value. Empty reconciles all.", clusterv1.WatchLabel))
	fs.StringVar(&o.defaultNetwork, "default-network", "",
		"An existing network that a ContainerCluster created without spec.network.name and spec.network.mode joins, Unmanaged: the network of the manager's own container, which reaches only the networks it is on. Empty or none (Docker's network of that name, which no cluster may use): such a cluster gets a Managed network of its own.")
	fs.StringVar(&o.profilerAddress, "profiler-address", "",
		"Bind address of the pprof profiler, e.g. localhost:6060. Empty disables it.")
	fs.StringVar(&o.healthAddr, "health-addr", ":9440",
		"Bind address of the health and readiness probes.")
	fs.IntVar(&o.concurrency, "concurrency", 10,
		"Number of objects of each kind reconciled at once.")
	fs.IntVar(&o.clusterCacheConcurrency, "clustercache-concurrency", 100,
		"Number of workload clusters whose connections are checked at once.")
	fs.DurationVar(&o.syncPeriod, "sync-period", 10*time.Minute,
		"Minimum interval at which every watched object is reconciled again.")
	fs.Float32Var(&o.kubeAPIQPS, "kube-api-qps", 100,
		"Maximum queries per second to the management cluster's API server.")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", 200,
		"Maximum burst of queries to the management cluster's API server.")
	fs.Float32Var(&o.clusterCacheClientQPS, "clustercache-client-qps", 20,
		"Maximum queries per second to each workload cluster's API server.")
	fs.IntVar(&o.clusterCacheClientBurst, "clustercache-client-burst", 30,
		"Maximum burst of queries to each workload cluster's API server.")
	fs.IntVar(&o.webhookPort, "webhook-port", 9443,
		"Port the webhook server listens on.")
	fs.StringVar(&o.webhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs/",
		"Folder holding the webhook server's certificate and key.")
	fs.StringVar(&o.webhookCertName, "webhook-cert-name", "tls.crt",
		"File name of the webhook server's certificate.")
	fs.StringVar(&o.webhookKeyName, "webhook-key-name", "tls.key",
		"File name of the webhook server's key.")
	fs.DurationVar(&o.gracefulShutdownTimeout, "graceful-shutdown-timeout", 30*time.Second,
		"How long the manager waits for reconciles to finish on shutdown.")
	fs.StringVar(&o.containerEngine, "container-engine", "",
		fmt.Sprintf("Container engine that runs the machines: %v. Empty reads %s, then %s (as kind does), then uses docker. "+
			"Docker is reached through DOCKER_HOST or /var/run/docker.sock, Podman through %s or %s (docs/runtime.md).",
			container.Engines, container.EngineEnv, container.KindProviderEnv, docker.PodmanHostEnv, docker.DefaultPodmanHost))
	fs.DurationVar(&o.containerRuntimeAPITimeout, "container-runtime-timeout", 30*time.Second,
		"Bound on each call to the container runtime, so that a stuck engine cannot hold a worker. "+
			"A call it cuts off counts as the engine being unreachable, which never fails a machine. 0 leaves calls unbounded.")
	fs.BoolVar(&o.hostCapacityCheck, "host-capacity-check", true,
		"Hold a machine's launch, without failing it, while the container host's kernel limits (read from the manager's /proc/sys) "+
			"leave no room for another node. Turn it off when the manager does not run on the container engine's host.")
	fs.StringToInt64Var(&o.hostCapacityReserve, "host-capacity-reserve", hostcapacity.DefaultReserve,
		"Use of each host limit that CAPCT does not create (the host's services, a management cluster on the same host), by sysctl.")
	fs.StringToInt64Var(&o.controlPlaneNodeCost, "control-plane-node-cost", hostcapacity.DefaultCosts[container.RoleControlPlane],
		"What one control-plane node container consumes of each host limit, by sysctl; measured on capct/node (docs/lifecycle.md).")
	fs.StringToInt64Var(&o.workerNodeCost, "worker-node-cost", hostcapacity.DefaultCosts[container.RoleWorker],
		"What one worker node container consumes of each host limit, by sysctl; measured on capct/node (docs/lifecycle.md).")
	o.policy.AddFlags(fs)
	fs.IntVar(&o.maxConcurrentBootstraps, "max-concurrent-bootstraps", lifecycle.DefaultMaxConcurrentBootstraps,
		"Most machine bootstraps (kubeadm init/join) in flight on the host at once; machines over it wait. 0 means no limit.")
	fs.Int64Var(&o.maxImageCopySize, "max-image-copy-size", imagecopy.DefaultMaxSize,
		"Most bytes of a node or load-balancer image CAPCT copies to a ContainerEngine that lacks it, from another engine that holds it (docs/multihost.md); a larger image is refused.")
	fs.DurationVar(&o.unreachableEngineDeletion, "unreachable-engine-deletion-timeout", lifecycle.DefaultUnreachableEngineDeletionTimeout,
		"How long the deletion of a machine or cluster on a ContainerEngine that does not answer waits for it: a machine's then leaves its container for its cluster to remove once the engine answers again, so that a lost host's machines can be replaced; a cluster's then ends, abandoning what the cluster has on that engine (docs/multihost.md).")
	flags.AddManagerOptions(fs, &o.managerOptions)
	feature.MutableGates.AddFlag(fs)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
}

// version is the manager's version, stamped in at build time
// (-ldflags -X main.version=..., make build and make docker-build: git
// describe of the tree built). Logged at start, so a log says which code
// wrote it.
var version = "unknown"

func run() error {
	o := &options{logOptions: logs.NewOptions()}
	fs := pflag.CommandLine
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	o.addFlags(fs)
	fs.AddGoFlagSet(flag.CommandLine)
	if err := fs.Set("v", "2"); err != nil {
		return fmt.Errorf("failed to set the default log level: %w", err)
	}
	pflag.Parse()
	if o.maxConcurrentBootstraps < 0 {
		return fmt.Errorf("--max-concurrent-bootstraps must be 0 (no limit) or more, not %d", o.maxConcurrentBootstraps)
	}
	engine, err := selectEngine(o.containerEngine)
	if err != nil {
		return err
	}
	o.engine = engine
	if err := logsv1.ValidateAndApply(o.logOptions, nil); err != nil {
		return fmt.Errorf("failed to apply the log options: %w", err)
	}
	ctrl.SetLogger(klog.Background())
	log := ctrl.Log.WithName("setup")

	scheme, err := newScheme()
	if err != nil {
		return err
	}
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("failed to load the management cluster's kubeconfig: %w", err)
	}
	restConfig.QPS = o.kubeAPIQPS
	restConfig.Burst = o.kubeAPIBurst
	restConfig.UserAgent = "capct-manager"

	tlsOptions, metricsOptions, err := flags.GetManagerOptions(o.managerOptions)
	if err != nil {
		return fmt.Errorf("failed to read the diagnostics and TLS flags: %w", err)
	}
	cacheOpts := managerCacheOptions(o.watchNamespace, &o.syncPeriod)

	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                     scheme,
		LeaderElection:             o.leaderElect,
		LeaderElectionID:           "controller-leader-election-capct",
		LeaderElectionResourceLock: resourcelock.LeasesResourceLock,
		LeaseDuration:              &o.leaderElectLeaseDuration,
		RenewDeadline:              &o.leaderElectRenewDeadline,
		RetryPeriod:                &o.leaderElectRetryPeriod,
		HealthProbeBindAddress:     o.healthAddr,
		PprofBindAddress:           o.profilerAddress,
		Metrics:                    *metricsOptions,
		GracefulShutdownTimeout:    &o.gracefulShutdownTimeout,
		Controller:                 config.Controller{CacheSyncTimeout: 5 * time.Minute},
		Cache:                      cacheOpts,
		Client:                     managerClientOptions(),
		WebhookServer: webhook.NewServer(webhook.Options{
			Port:     o.webhookPort,
			CertDir:  o.webhookCertDir,
			CertName: o.webhookCertName,
			KeyName:  o.webhookKeyName,
			TLSOpts:  tlsOptions,
		}),
	})
	if err != nil {
		return fmt.Errorf("failed to create the manager: %w", err)
	}

	ctx := ctrl.SetupSignalHandler()
	if err := setupChecks(mgr); err != nil {
		return err
	}
	if err := setupReconcilers(ctx, mgr, o); err != nil {
		return err
	}
	defaults := webhooks.Defaults{Network: o.defaultNetwork}
	if defaults.Network == "none" {
		defaults.Network = ""
	}
	if err := webhooks.SetupWithManager(mgr, &o.policy, defaults); err != nil {
		return err
	}
	log.Info("Starting manager", "version", version, "containerEngine", o.engine, "machinePools", feature.Gates.Enabled(feature.MachinePool),
		"allowedHostPathPrefixes", o.policy.HostPathPrefixes, "allowedUnmanagedNetworks", o.policy.AllowedNetworks,
		"allowedImagePrefixes", o.policy.ImagePrefixes, "maxMachinesPerCluster", o.policy.MaxMachinesPerCluster,
		"localEngineNamespaces", o.policy.LocalEngineNamespaces,
		"allowedHostListenAddresses", o.policy.HostListenAddresses, "minHostPort", o.policy.MinHostPort)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("manager stopped with an error: %w", err)
	}
	return nil
}

// managerCacheOptions are the options of the manager's cache. No cached
// object keeps its metadata.managedFields: nothing in CAPCT reads them
// (server-side apply builds its bodies from scratch, and an update without
// them keeps the server's), and they were about a quarter of the manager's
// live heap in make bench-scale (docs/bench.md). Secrets and ConfigMaps
// are never cached (managerClientOptions).
func managerCacheOptions(watchNamespace string, syncPeriod *time.Duration) cache.Options {
	var namespaces map[string]cache.Config
	if watchNamespace != "" {
		namespaces = map[string]cache.Config{watchNamespace: {}}
	}
	return cache.Options{
		DefaultNamespaces: namespaces,
		SyncPeriod:        syncPeriod,
		DefaultTransform:  cache.TransformStripManagedFields(),
	}
}

// managerClientOptions are the options of the manager's client. It reads
// Secrets and ConfigMaps from the API server, one by name, never from a
// cache: a cache of either would list and watch every one in the cluster,
// and need the RBAC to, when CAPCT only ever gets a handful by name (a
// machine's bootstrap data, a cluster's kubeconfig on connecting, an
// engine's credentials, a load balancer's template). The manager's role
// grants get alone on both.
func managerClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}}}}
}

// selectEngine resolves --container-engine: the flag's value when set,
// else the environment's (container.EngineFromEnv).
func selectEngine(flagValue string) (container.Engine, error) {
	if flagValue == "" {
		return container.EngineFromEnv()
	}
	e, err := container.ParseEngine(flagValue)
	if err != nil {
		return "", fmt.Errorf("failed to read --container-engine: %w", err)
	}
	return e, nil
}

func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme, expinfrav1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("failed to build the scheme: %w", err)
		}
	}
	return scheme, nil
}

func setupChecks(mgr ctrl.Manager) error {
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return fmt.Errorf("failed to add the readiness check: %w", err)
	}
	if err := mgr.AddHealthzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return fmt.Errorf("failed to add the health check: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("failed to add the ping check: %w", err)
	}
	return nil
}

// setupReconcilers registers CAPCT's controllers. The MachinePool controller
// runs only behind its feature gate, as in Cluster API.
func setupReconcilers(ctx context.Context, mgr ctrl.Manager, o *options) error {
	engine, err := docker.NewEngine(o.engine)
	if err != nil {
		return fmt.Errorf("failed to create the %s runtime client: %w", o.engine, err)
	}
	// Every controller reaches the engine through this bound.
	runtime := container.WithCallTimeout(engine, o.containerRuntimeAPITimeout)
	// The manager's own engine, and every ContainerEngine the engine
	// controller connects (docs/multihost.md).
	set := controllers.NewEngines(runtime, docker.Connect, mgr.GetAPIReader(), os.Getenv(podNamespaceEnv), o.containerRuntimeAPITimeout, nil)
	var capacity *hostcapacity.Gate
	if o.hostCapacityCheck {
		capacity = &hostcapacity.Gate{
			Runtime: runtime,
			Limits:  hostcapacity.ProcSys{},
			Costs: hostcapacity.Costs{
				container.RoleControlPlane: o.controlPlaneNodeCost,
				container.RoleWorker:       o.workerNodeCost,
			},
			Reserve: o.hostCapacityReserve,
		}
	}
	clusterCache, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		// Kubeconfigs are read only when a cluster is connected, so
		// uncached, as every Secret (managerClientOptions).
		SecretClient:     mgr.GetAPIReader(),
		WatchFilterValue: o.watchFilter,
		// The workload clusters' Nodes without managedFields, as in the
		// manager's own cache (managerCacheOptions).
		Cache: clustercache.CacheOptions{DefaultTransform: cache.TransformStripManagedFields()},
		Client: clustercache.ClientOptions{
			QPS:       o.clusterCacheClientQPS,
			Burst:     o.clusterCacheClientBurst,
			UserAgent: "capct-manager",
			Cache:     clustercache.ClientCacheOptions{DisableFor: []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}}},
		},
	}, controller.Options{MaxConcurrentReconciles: o.clusterCacheConcurrency})
	if err != nil {
		return fmt.Errorf("failed to set up the ClusterCache: %w", err)
	}
	options := controller.Options{MaxConcurrentReconciles: o.concurrency}
	// Node IPAM reads the cache, with what it wrote laid over it, and the
	// API reader once per cluster in the manager's life: a new leader's
	// cache may lag the previous leader's records (docs/node-ipam.md).
	nodeIPAM := controllers.NewNodeIPAM(mgr.GetClient(), mgr.GetAPIReader())
	podNetwork := controllers.NewPodNetwork(set, mgr.GetClient())
	if err := (&controllers.ContainerClusterReconciler{
		Client: mgr.GetClient(), Engines: set, WatchFilterValue: o.watchFilter, NodeIPAM: nodeIPAM, PodNetwork: podNetwork, MaxImageCopySize: o.maxImageCopySize, Policy: o.policy,
		UnreachableEngineDeletionTimeout: o.unreachableEngineDeletion,
	}).SetupWithManager(ctx, mgr, options); err != nil {
		return err
	}
	if err := (&controllers.ContainerMachineReconciler{
		Client: mgr.GetClient(), Engines: set, ClusterCache: clusterCache, WatchFilterValue: o.watchFilter, NodeIPAM: nodeIPAM, PodNetwork: podNetwork,
		MachinePools: feature.Gates.Enabled(feature.MachinePool), HostCapacity: capacity, MaxConcurrentBootstraps: o.maxConcurrentBootstraps,
		MaxImageCopySize: o.maxImageCopySize, UnreachableEngineDeletionTimeout: o.unreachableEngineDeletion,
		Policy: o.policy,
	}).SetupWithManager(ctx, mgr, options); err != nil {
		return err
	}
	if err := (&controllers.ContainerEngineReconciler{
		Client: mgr.GetClient(), Engines: set, WatchFilterValue: o.watchFilter,
	}).SetupWithManager(ctx, mgr, options); err != nil {
		return err
	}
	if err := (&controllers.ContainerMachineTemplateReconciler{
		Client: mgr.GetClient(), WatchFilterValue: o.watchFilter,
	}).SetupWithManager(ctx, mgr, options); err != nil {
		return err
	}
	if feature.Gates.Enabled(feature.MachinePool) {
		// The pool controller reads through the API reader right before it
		// creates or deletes machines, so a stale cache or a restart never
		// makes it do either twice.
		if err := (&expcontrollers.ContainerMachinePoolReconciler{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Engines: set, WatchFilterValue: o.watchFilter,
		}).SetupWithManager(ctx, mgr, options); err != nil {
			return err
		}
	}
	return nil
}
