package docker_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/docker/docker/client"

	"github.com/capct/cluster-api-provider-container/internal/container/docker"
)

// runtimeOnFakeEngine returns a Runtime whose engine is serve, behind a
// plain HTTP server of the test's own: for what a real engine will not do
// on demand (answer an overlay's first inspect without subnets) and for
// counting the calls a method makes (remote_test.go has the TLS one). It
// answers the version ping itself.
func runtimeOnFakeEngine(t *testing.T, serve http.HandlerFunc) *docker.Runtime {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/_ping") {
			w.Header().Set("API-Version", "1.47")
			return
		}
		serve(w, r)
	}))
	t.Cleanup(s.Close)
	rt, err := docker.New(docker.WithClientOpts(client.WithHost("tcp://"+s.Listener.Addr().String()), client.WithVersion("1.47")))
	if err != nil {
		t.Fatal(err)
	}
	return rt
}
