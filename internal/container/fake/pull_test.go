package fake_test

import (
	"testing"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/container/runtimetest"
)

// TestPullSuite: the fake's registry answers pulls as a real one does
// through Docker (internal/container/docker's TestPullSuite).
func TestPullSuite(t *testing.T) {
	rt := fake.New(nil)
	rt.AddRegistryImage("registry.test:5000/open/image:v1", []byte("open"))
	rt.AddRegistryImage("private.test/team/image:v1", []byte("private"))
	rt.RequireRegistryLogin("private.test", "capct", "s3cret")
	runtimetest.RunPullSuite(t, rt, runtimetest.PullFixture{
		Open:    "registry.test:5000/open/image:v1",
		Private: "private.test/team/image:v1",
		Auth:    container.RegistryAuth{ServerAddress: "private.test", Username: "capct", Password: "s3cret"},
		Missing: "registry.test:5000/open/absent:v1",
	})
	if got := rt.PullCalls(); len(got) != 6 {
		t.Fatalf("PullCalls = %v; want the suite's 6 pulls", got)
	}
}
