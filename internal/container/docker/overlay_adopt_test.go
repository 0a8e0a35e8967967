package docker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/docker/docker/api/types/network"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// TestAnOverlayWithoutSubnetsYetIsTransient: the swarm fills a new
// overlay's subnets a moment after its creation, and an engine reports
// none until then. EnsureNetwork must say "not yet" with a transient
// error, never hand back a network without addresses, and adopt it once
// the subnets are there. A fake engine answers the inspects, the first
// without IPAM config.
func TestAnOverlayWithoutSubnetsYetIsTransient(t *testing.T) {
	owner := container.Owner{Namespace: "ns", Cluster: "c1", ClusterID: "id-1"}
	const name = "capct-c1"
	var inspects atomic.Int32
	rt := runtimeOnFakeEngine(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/networks/"+name) {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotImplemented)
			return
		}
		n := network.Inspect{Name: name, ID: "swarm-id", Scope: "swarm", Driver: "overlay", Labels: owner.Labels()}
		if inspects.Add(1) > 1 {
			n.IPAM.Config = []network.IPAMConfig{{Subnet: "10.10.0.0/24", Gateway: "10.10.0.1"}}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(n)
	})
	spec := container.NetworkSpec{Name: name, Owner: owner, Overlay: true}

	n, err := rt.EnsureNetwork(context.Background(), spec)
	if !container.IsTransient(err) {
		t.Fatalf("an overlay without subnets yet: want a transient error, got %+v, %v", n, err)
	}
	n, err = rt.EnsureNetwork(context.Background(), spec)
	if err != nil || !n.Overlay || n.IPv4Subnet.String() != "10.10.0.0/24" {
		t.Fatalf("once the swarm allocated it: want the overlay on 10.10.0.0/24, got %+v, %v", n, err)
	}
}
