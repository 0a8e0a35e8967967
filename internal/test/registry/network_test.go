//go:build engine

package registry_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"

	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/test/registry"
)

// TestStartOnNetwork starts a registry that also joins a bridge network
// of its own (Options.Network) and asks its API root at NetworkHost, the
// address containers on that network use: test/mirror's nodes pull from
// it there. The host reaches a local bridge's addresses, as the nodes do.
func TestStartOnNetwork(t *testing.T) {
	rt := dockertest.NewRuntime(t)
	cli := rt.Client()
	name := "capct-test-registry-net-" + time.Now().Format("150405.000000")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cli.NetworkCreate(ctx, name, network.CreateOptions{Labels: map[string]string{"io.x-k8s.capct.test": "registry"}}); err != nil {
		t.Fatalf("failed to create network %s: %v", name, err)
	}
	// Registered before Start, so that it runs after the registry's own
	// cleanup has removed the container: a network with a container on it
	// cannot be removed.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cli.NetworkRemove(ctx, name); err != nil {
			t.Errorf("failed to remove network %s: %v", name, err)
		}
	})

	r := registry.Start(t, rt, registry.Options{Network: name})
	if r.NetworkHost == "" {
		t.Fatalf("registry %s on network %s has no NetworkHost", r.Container, name)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.NetworkHost+"/v2/", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("registry %s does not answer at %s on network %s: %v", r.Container, r.NetworkHost, name, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("registry %s at %s on network %s answered %s to GET /v2/, want 200 OK", r.Container, r.NetworkHost, name, resp.Status)
	}
	t.Logf("registry %s answers at %s on network %s and at %s", r.Container, r.NetworkHost, name, r.Host)
}
