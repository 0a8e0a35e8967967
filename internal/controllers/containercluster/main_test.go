package containercluster_test

import (
	"context"
	"os"
	"testing"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

// The package's external tests share one API server and manager. The tests
// on a real engine carry the engine build tag (docker_test.go and the files
// that use its runtime): docker_test.go sets setupEngine and afterEngine, so
// that without the tag the suite still starts the API server the tests on
// the fake runtime need, and `go test ./...` passes on a machine without an
// engine.
var (
	env *envtest.Environment
	// setupEngine, when not nil, adds to the manager what the engine tests
	// run against, before it starts.
	setupEngine func(ctx context.Context) error
	// afterEngine, when not nil, runs after the tests and the manager have
	// stopped: it sweeps what the tests left on the engine.
	afterEngine func()
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(klog.Background())
	os.Exit(envtest.Run(m, func(ctx context.Context, e *envtest.Environment) error {
		env = e
		if setupEngine == nil {
			return nil
		}
		return setupEngine(ctx)
	}, func() {
		if afterEngine != nil {
			afterEngine()
		}
	}))
}
