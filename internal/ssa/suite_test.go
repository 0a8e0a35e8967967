package ssa

import (
	"context"
	"fmt"
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

var (
	env *envtest.Environment
	// watchClient is env's API server behind a client.WithWatch, which the
	// interceptor wraps to count writes.
	watchClient client.WithWatch
)

// TestMain starts one API server for the package. The unit tests run under
// it too: the harness refuses to run without KUBEBUILDER_ASSETS rather than
// skip.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	env, err = envtest.New()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "failed to stop envtest: %v\n", err)
		}
	}()
	if err := env.Start(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	watchClient, err = client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: failed to create the test client: %v\n", err)
		return 1
	}
	return m.Run()
}
