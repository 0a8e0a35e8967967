package main

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expcontrollers "github.com/capct/cluster-api-provider-container/exp/controllers"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/controllers/containercluster"
	"github.com/capct/cluster-api-provider-container/internal/controllers/containermachine"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/loadbalancer"
	"github.com/capct/cluster-api-provider-container/internal/nodeipam"
	"github.com/capct/cluster-api-provider-container/internal/podnetwork"
	"github.com/capct/cluster-api-provider-container/internal/test/capi"
	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

// User agents: the counter tells the two managers apart by them.
const (
	capctAgent  = "capct-manager"
	capiAgent   = "capi-manager"
	driverAgent = "bench-driver"
	nodeImage   = "capct/node:v1.35.4"
	version     = "v1.35.4"
	// managerSyncPeriod is main.go's --sync-period default.
	managerSyncPeriod = 10 * time.Minute
)

const bootstrapData = `#cloud-config
write_files:
- path: /run/cluster-api/bootstrap-success.complete
  content: success
`

// bench is one run: the API server, CAPCT's manager, the fake engine, the
// workload proxy and the kubelets in this process, and Cluster API's
// process.
type bench struct {
	o        options
	env      *envtest.Environment
	rt       *fake.Runtime
	requests *requestCounter
	proxy    *workloadProxy
	// direct writes the benchmark's own objects, outside the counter.
	direct      client.Client
	stopManager context.CancelFunc
	// capi is Cluster API's process, nil until started.
	capi *capiProcess

	execMu sync.Mutex
	execs  int
}

func newBench(ctx context.Context, o options) (*bench, error) {
	b := &bench{o: o, requests: newRequestCounter(), rt: fake.New(nil)}
	// The manager as main.go builds it (managerCacheOptions,
	// managerClientOptions): its rate limits and user agent, its sync
	// period, Secrets and ConfigMaps never cached (envtest's client
	// options), managedFields stripped from every cached object.
	var err error
	b.env, err = envtest.NewWith(envtest.Options{
		Config: func(c *rest.Config) { managerConfig(c, capctAgent, 100, 200, b.requests) },
		Manager: func(mo *ctrl.Options) {
			mo.Cache.SyncPeriod = ptr.To(managerSyncPeriod)
			if o.stripManagedFields {
				mo.Cache.DefaultTransform = cache.TransformStripManagedFields()
			}
		},
	})
	if err != nil {
		return nil, err
	}
	mctx, stop := context.WithCancel(ctx)
	b.stopManager = stop
	if err := b.setup(mctx); err != nil {
		b.stop()
		return nil, err
	}
	if err := b.env.Start(mctx); err != nil {
		b.stop()
		return nil, fmt.Errorf("failed to start the manager: %w", err)
	}
	if err := b.capi.waitReady(ctx); err != nil {
		b.stop()
		return nil, err
	}
	return b, nil
}

// stop ends Cluster API's process (killing it if it still runs: a failed
// or timed-out run leaves no child behind), then the manager and the API
// server, which the child's requests need as long as it runs.
func (b *bench) stop() {
	if b.capi != nil {
		b.capi.kill()
	}
	b.stopManager()
	if err := b.env.Stop(); err != nil {
		fmt.Printf("failed to stop envtest: %v\n", err)
	}
}

func (b *bench) setup(ctx context.Context) error {
	mgr := b.env.Manager
	b.rt.AddImage(nodeImage, nil)
	b.rt.AddImage(loadbalancer.DefaultImage, nil)
	// The fake keeps every Exec for tests to inspect: tens of MiB at 1,000
	// machines that a real engine keeps in its own process.
	b.rt.ForgetExecCalls()
	// Count the commands run in nodes (bootstrap, pod network) without
	// answering them: the fake's built-ins still do.
	b.rt.SetExecHandler(func(context.Context, container.Machine, map[string][]byte, container.ExecInput, []byte) (container.ExecResult, bool) {
		b.execMu.Lock()
		b.execs++
		b.execMu.Unlock()
		return container.ExecResult{}, false
	})

	direct := rest.CopyConfig(b.env.Config)
	direct.QPS, direct.Burst, direct.UserAgent = -1, 0, driverAgent
	var err error
	if b.direct, err = client.New(direct, client.Options{Scheme: b.env.Scheme}); err != nil {
		return fmt.Errorf("failed to create the benchmark's client: %w", err)
	}
	if b.proxy, err = startWorkloadProxy(ctx, b.env.Config, b.requests); err != nil {
		return err
	}
	// Started now, it sets up while CAPCT's manager does; newBench waits
	// for it once CAPCT's runs.
	if b.capi, err = startClusterAPIProcess(ctx, b.env.Config); err != nil {
		return err
	}
	if err := b.setupCAPCT(ctx, mgr); err != nil {
		return err
	}
	return startKubelets(ctx, mgr.GetCache(), b.direct, 4)
}

// setupCAPCT adds CAPCT's reconcilers as main.go does (concurrency 10, the
// ClusterCache's 100, node IPAM on, at most 4 bootstraps at once), on the
// fake engine; the load balancer's statistics come from the configuration
// written, as the envtest suites read them.
func (b *bench) setupCAPCT(ctx context.Context, mgr ctrl.Manager) error {
	var transform toolscache.TransformFunc
	if b.o.stripManagedFields {
		transform = cache.TransformStripManagedFields()
	}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		// Kubeconfigs read uncached, as main.go does.
		SecretClient: mgr.GetAPIReader(),
		Cache:        clustercache.CacheOptions{DefaultTransform: transform},
		Client: clustercache.ClientOptions{QPS: 20, Burst: 30, UserAgent: capctAgent,
			Cache: clustercache.ClientCacheOptions{DisableFor: []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}}}},
	}, controller.Options{MaxConcurrentReconciles: 100, SkipNameValidation: ptr.To(true)})
	if err != nil {
		return fmt.Errorf("failed to set up CAPCT's ClusterCache: %w", err)
	}
	opts := controller.Options{MaxConcurrentReconciles: 10}
	ipam := nodeipam.NewRecorder(mgr.GetClient(), mgr.GetAPIReader())
	podNetwork := podnetwork.NewSyncer(engines.Single(b.rt), mgr.GetClient(), nil)
	if err := (&containercluster.Reconciler{
		Client: mgr.GetClient(), Engines: engines.Single(b.rt), NodeIPAM: ipam,
		PodNetwork:        podNetwork,
		LoadBalancerStats: capi.LoadBalancerStats(b.rt),
	}).SetupWithManager(ctx, mgr, opts); err != nil {
		return err
	}
	if err := (&containermachine.Reconciler{
		Client: mgr.GetClient(), Engines: engines.Single(b.rt), ClusterCache: cc, NodeIPAM: ipam, PodNetwork: podNetwork, MachinePools: true,
		MaxConcurrentBootstraps: b.o.maxConcurrentBootstraps,
	}).SetupWithManager(ctx, mgr, opts); err != nil {
		return err
	}
	return (&expcontrollers.ContainerMachinePoolReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Engines: engines.Single(b.rt),
	}).SetupWithManager(ctx, mgr, opts)
}

// measure creates the clusters and machines and waits until every machine
// is Ready and every Machine Running.
func (b *bench) measure(ctx context.Context) (*result, error) {
	res := newResult(b.o)
	// What the manager holds before the first object: the fixed cost, the
	// rest of the peak grows with the machines.
	goruntime.GC()
	var m goruntime.MemStats
	goruntime.ReadMemStats(&m)
	res.BaselineHeapMiB, res.BaselineRSSMiB = toMiB(m.HeapAlloc), toMiB(procStatus("VmRSS"))
	start := time.Now()
	prog := newProgress(start, b.o.machines)
	if err := prog.watch(ctx, b.env.Manager.GetCache()); err != nil {
		return res, err
	}
	if err := b.create(ctx); err != nil {
		return res, err
	}
	res.Seconds["created"] = time.Since(start).Seconds()
	fmt.Printf("%d machines in %d clusters created in %.1fs\n", b.o.machines, b.o.clusters, res.Seconds["created"])

	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	var waitErr error
wait:
	for {
		select {
		case <-prog.done:
			break wait
		case <-ctx.Done():
			waitErr = fmt.Errorf("failed to get %d machines Ready within -timeout %s: %w", b.o.machines, b.o.timeout, ctx.Err())
			break wait
		case <-b.capi.exited:
			waitErr = fmt.Errorf("failed to get %d machines Ready: Cluster API's process exited: %w", b.o.machines, b.capi.exitErr())
			break wait
		case <-tick.C:
			n, _ := prog.counts()
			fmt.Printf("%5.0fs provisioned %d, initialized %d, ready %d, Machines Running %d of %d\n",
				time.Since(start).Seconds(), n[provisioned], n[initialized], n[ready], n[running], b.o.machines)
		}
	}
	n, all := prog.counts()
	for i, name := range milestoneNames {
		res.Reached[name] = n[i]
		if all[i] > 0 {
			res.Seconds[name] = all[i].Seconds()
		}
	}
	// Cluster API's process reports when it stops: before the manager and
	// the API server do, and on a timeout too (its requests so far).
	capi, stopErr := b.capi.stop(capiStopGrace)
	res.collect(b, capi)
	return res, errors.Join(waitErr, stopErr)
}

// create makes the clusters, then each cluster's control-plane machine,
// then the workers, with a few writers in parallel, as a MachineDeployment
// would create them all at once.
func (b *bench) create(ctx context.Context) error {
	var clusters []*clusterv1.Cluster
	for i := range b.o.clusters {
		c, err := b.createCluster(ctx, i)
		if err != nil {
			return err
		}
		clusters = append(clusters, c)
	}
	type job struct {
		cluster *clusterv1.Cluster
		name    string
		cp      bool
	}
	var jobs []job
	for _, c := range clusters {
		jobs = append(jobs, job{c, "cp-0", true})
	}
	perCluster := b.o.machines / b.o.clusters
	for i, c := range clusters {
		n := perCluster
		if i < b.o.machines%b.o.clusters {
			n++
		}
		for w := 1; w < n; w++ {
			jobs = append(jobs, job{c, fmt.Sprintf("md-%04d", w), false})
		}
	}
	ch := make(chan job)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for j := range ch {
				if err := b.createMachine(ctx, j.cluster, j.name, j.cp); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var err error
feed:
	for _, j := range jobs {
		select {
		case ch <- j:
		case err = <-errs:
			break feed
		}
	}
	close(ch)
	wg.Wait()
	close(errs)
	for e := range errs {
		err = errors.Join(err, e)
	}
	return err
}

func (b *bench) createCluster(ctx context.Context, i int) (*clusterv1.Cluster, error) {
	ns, name := fmt.Sprintf("bench-%02d", i), fmt.Sprintf("c%02d", i)
	if err := b.direct.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return nil, fmt.Errorf("failed to create namespace %s: %w", ns, err)
	}
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clusterv1.ClusterSpec{
			// A /16 per cluster: node IPAM hands out /24s, 256 nodes.
			ClusterNetwork:    clusterv1.ClusterNetwork{Pods: clusterv1.NetworkRanges{CIDRBlocks: []string{fmt.Sprintf("10.%d.0.0/16", 100+i)}}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerCluster", Name: name},
		},
	}
	kubeconfig, err := b.proxy.kubeconfig(cluster)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{clusterv1.ClusterNameLabel: name}
	for _, obj := range []client.Object{
		&infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		cluster,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-kubeconfig", Labels: labels},
			Data: map[string][]byte{"value": kubeconfig}, Type: clusterv1.ClusterSecretType},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bootstrap", Labels: labels},
			Data: map[string][]byte{"value": []byte(bootstrapData), "format": []byte("cloud-config")}, Type: clusterv1.ClusterSecretType},
	} {
		if err := b.direct.Create(ctx, obj); err != nil {
			return nil, fmt.Errorf("failed to create %T %s/%s: %w", obj, ns, obj.GetName(), err)
		}
	}
	return cluster, nil
}

func (b *bench) createMachine(ctx context.Context, cluster *clusterv1.Cluster, name string, controlPlane bool) error {
	ns := cluster.Namespace
	labels := map[string]string{clusterv1.ClusterNameLabel: cluster.Name}
	if controlPlane {
		labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: infrav1.ContainerMachineSpec{Image: nodeImage}}
	if err := b.direct.Create(ctx, cm); err != nil {
		return fmt.Errorf("failed to create ContainerMachine %s/%s: %w", ns, name, err)
	}
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: clusterv1.MachineSpec{
			ClusterName:       cluster.Name,
			Version:           version,
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerMachine", Name: name},
		},
	}
	if err := b.direct.Create(ctx, m); err != nil {
		return fmt.Errorf("failed to create Machine %s/%s: %w", ns, name, err)
	}
	return nil
}
