package containermachine_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/hostcapacity"
	"github.com/capct/cluster-api-provider-container/internal/loadbalancer"
	"github.com/capct/cluster-api-provider-container/internal/podnetwork"
	"github.com/capct/cluster-api-provider-container/internal/test/capi"
	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

// The suite runs CAPCT's controllers against a real API server with Cluster
// API's own Cluster and Machine reconcilers in the same process, so the
// InfraCluster and InfraMachine contracts are exercised by their real
// consumer. The same API server plays the workload cluster: the tests create
// Nodes in it as a kubelet would. Containers live in the fake runtime, which
// passes the same behaviour suite as the Docker one.
var (
	env     *envtest.Environment
	runtime *fake.Runtime
	// hostLimits are the host's limits as the capacity check reads them:
	// out of the way unless a test lowers them.
	hostLimits = &settableLimits{v: roomy}
	// routes counts the pod network syncs of each cluster.
	routes = &countingPodNetwork{calls: map[string]int{}}
	// gateClock times how long the capacity check counts a node it
	// admitted before the engine lists it.
	gateClock = clocktesting.NewFakeClock(time.Now())
)

var (
	roomy     = hostcapacity.Values{hostcapacity.InotifyInstances: 1 << 30}
	nodeCosts = hostcapacity.Costs{
		container.RoleControlPlane: {hostcapacity.InotifyInstances: 20},
		container.RoleWorker:       {hostcapacity.InotifyInstances: 10},
	}
)

func TestMain(m *testing.M) {
	// Controller logs go to klog's stderr only with -v, e.g.
	// go test ./internal/controllers/containermachine -args -v=4.
	ctrl.SetLogger(klog.Background())
	os.Exit(envtest.Run(m, func(ctx context.Context, e *envtest.Environment) error {
		env = e
		return setup(ctx)
	}, nil))
}

func setup(ctx context.Context) error {
	mgr := env.Manager
	runtime = fake.New(nil)
	// CAPCT never pulls: the images the machines and load balancers run
	// are on the host.
	runtime.AddImage("capct/node:v1.35.4", nil)
	runtime.AddImage(loadbalancer.DefaultImage, nil)
	// The engine is away when the manager starts: both controllers' event
	// streams must open once it answers (the tests that wait on events
	// depend on it), and the manager must not stop.
	for range 2 {
		runtime.FailNext(fake.OpEvents, container.NewError("watch", "events", "", container.KindUnreachable, errors.New("connection refused")))
	}
	clusterCache, err := capi.SetupCore(ctx, mgr)
	if err != nil {
		return err
	}
	// The envtest API server is the workload cluster; a direct client reads
	// Nodes without waiting for a cache.
	workload := func(context.Context, client.ObjectKey) (client.Client, error) { return env.Client, nil }
	gate := &hostcapacity.Gate{Runtime: runtime, Limits: hostLimits, Costs: nodeCosts, Clock: gateClock}
	routes.Syncer = podnetwork.NewSyncer(engines.Single(runtime), mgr.GetClient(), nil)
	return capi.SetupProviderWith(ctx, mgr, runtime, clusterCache, workload,
		capi.ProviderOptions{HostCapacity: gate, NodeIPAM: true, PodNetwork: routes, NodeNetwork: routes})
}

// settableLimits are host limits a test changes.
type settableLimits struct {
	mu sync.Mutex
	v  hostcapacity.Values
}

func (l *settableLimits) Read() (hostcapacity.Values, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.v, nil
}

func (l *settableLimits) set(v hostcapacity.Values) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.v = v
}

// countingPodNetwork is node IPAM's pod network, counting its syncs, and
// skipping those of the clusters a test holds.
type countingPodNetwork struct {
	*podnetwork.Syncer
	mu    sync.Mutex
	calls map[string]int
	held  map[string]bool
}

func (r *countingPodNetwork) Sync(ctx context.Context, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) error {
	key := cluster.Namespace + "/" + cluster.Name
	r.mu.Lock()
	r.calls[key]++
	held := r.held[key]
	r.mu.Unlock()
	if held {
		return nil
	}
	return r.Syncer.Sync(ctx, cluster, cc)
}

// hold makes the cluster's syncs do nothing.
func (r *countingPodNetwork) hold(cluster *clusterv1.Cluster) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held == nil {
		r.held = map[string]bool{}
	}
	r.held[cluster.Namespace+"/"+cluster.Name] = true
}

func (r *countingPodNetwork) count(cluster *clusterv1.Cluster) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[cluster.Namespace+"/"+cluster.Name]
}
