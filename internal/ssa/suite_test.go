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
	os.Exit(envtest.Run(m, func(_ context.Context, e *envtest.Environment) error {
		env = e
		var err error
		if watchClient, err = client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme}); err != nil {
			return fmt.Errorf("failed to create the test client: %w", err)
		}
		return nil
	}, nil))
}
