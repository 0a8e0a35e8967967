//go:build engine

package docker_test

import (
	"testing"

	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/container/runtimetest"
	"github.com/capct/cluster-api-provider-container/internal/test/registry"
)

// TestPullSuite pulls from two registries built from source and run on
// the engine's loopback (internal/test/registry): an open one, and one
// behind basic authentication.
func TestPullSuite(t *testing.T) {
	rt := dockertest.NewRuntime(t)
	open := registry.Start(t, rt, registry.Options{})
	private := registry.Start(t, rt, registry.Options{Username: "capct", Password: "s3cret-" + runtimetest.RandomSuffix()})
	runtimetest.RunPullSuite(t, rt, runtimetest.PullFixture{
		Open:    open.Push(t, "capct-test/open", "v1"),
		Private: private.Push(t, "capct-test/private", "v1"),
		Auth:    *private.Auth(),
		Missing: open.Host + "/capct-test/absent:v1",
	})
}
