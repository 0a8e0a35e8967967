package containermachine_test

import (
	"context"
	"os"
	"testing"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capct/cluster-api-provider-container/internal/container/fake"
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
	clusterCache, err := capi.SetupCore(ctx, mgr)
	if err != nil {
		return err
	}
	// The envtest API server is the workload cluster; a direct client reads
	// Nodes without waiting for a cache.
	workload := func(context.Context, client.ObjectKey) (client.Client, error) { return env.Client, nil }
	return capi.SetupProvider(ctx, mgr, runtime, clusterCache, workload)
}
