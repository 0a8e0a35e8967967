package docker

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/docker/docker/api/types/network"
)

// TestLocalSubnetsSkipOverlaysAndNetworksWithoutSubnets checks which of
// an engine's networks LocalSubnets reports: every subnet of a network
// local to the engine, whatever its driver, and nothing of the swarm's
// overlays or of host and none.
func TestLocalSubnetsSkipOverlaysAndNetworksWithoutSubnets(t *testing.T) {
	summary := func(name, driver, scope string, subnets ...string) network.Summary {
		n := network.Summary{Name: name, Driver: driver, Scope: scope}
		for _, s := range subnets {
			n.IPAM.Config = append(n.IPAM.Config, network.IPAMConfig{Subnet: s})
		}
		return n
	}
	tests := []struct {
		name string
		list []network.Summary
		want []string
	}{
		{"none", nil, nil},
		{"docker's own", []network.Summary{
			summary("bridge", "bridge", "local", "172.17.0.0/16"),
			summary("host", "host", "local"),
			summary("none", "null", "local"),
			summary("docker_gwbridge", "bridge", "local", "172.18.0.0/16"),
			summary("ingress", "overlay", "swarm", "10.0.0.0/24"),
		}, []string{"172.17.0.0/16", "172.18.0.0/16"}},
		{"another cluster's bridge, dual-stack", []network.Summary{
			summary("capct-other", "bridge", "local", "172.19.16.0/20", "fd12:3456::/64"),
		}, []string{"172.19.16.0/20", "fd12:3456::/64"}},
		{"macvlan and ipvlan", []network.Summary{
			summary("mv", "macvlan", "local", "192.168.5.0/24"),
			summary("iv", "ipvlan", "local", "192.168.6.0/24"),
		}, []string{"192.168.5.0/24", "192.168.6.0/24"}},
		{"overlays of the swarm or a key-value store", []network.Summary{
			summary("capct-c1", "overlay", "swarm", "172.20.0.0/20"),
			summary("kv", "overlay", "global", "172.21.0.0/20"),
		}, nil},
		{"podman's, and a subnet that does not parse", []network.Summary{
			summary("podman", "bridge", "local", "10.88.0.0/16"),
			summary("odd", "bridge", "local", "not-a-subnet"),
		}, []string{"10.88.0.0/16"}},
		{"a subnet with host bits", []network.Summary{
			summary("loose", "bridge", "local", "172.22.0.1/24"),
		}, []string{"172.22.0.0/24"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var want []netip.Prefix
			for _, s := range tc.want {
				want = append(want, netip.MustParsePrefix(s))
			}
			if got := localSubnets(tc.list); !slices.Equal(got, want) {
				t.Fatalf("localSubnets() = %v, want %v", got, want)
			}
		})
	}
}
