package docker

import (
	"net/netip"
	"testing"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

func TestSpanningGivesThePrefixPodmanWasAskedFor(t *testing.T) {
	for _, p := range []netip.Prefix{
		container.DynamicRange(netip.MustParsePrefix("172.30.16.0/20")),
		container.DynamicRange(netip.MustParsePrefix("fc42:2e54:d359:bc0e::/64")),
	} {
		// Podman keeps a range as its first host address and its last one.
		start := p.Addr().Next()
		end := lastAddr(p)
		if got := spanning(start, end); got != p {
			t.Errorf("spanning(%s, %s) = %s, want %s", start, end, got, p)
		}
	}
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func TestPodmanMachineReportsTheRequestAndHidesItsLabel(t *testing.T) {
	spec := container.MachineSpec{
		Image:        "capct/node:v1.35.4",
		StaticIPv4:   netip.MustParseAddr("172.30.16.10"),
		PortMappings: []container.PortMapping{{ContainerPort: 6443}},
	}
	labels := map[string]string{container.LabelMachine: "m"}
	podmanLabels(labels, spec)
	m := &container.Machine{Image: "docker.io/capct/node:v1.35.4", Network: "bridge", Labels: labels,
		PortMappings: []container.PortMapping{{ContainerPort: 6443, Protocol: "tcp", HostIP: "127.0.0.1", HostPort: 33543}}}
	podmanMachine(m, []string{"cluster-net"}, true)
	if m.Network != "cluster-net" || m.Image != spec.Image || m.StaticIPv4 != spec.StaticIPv4 || m.StaticIPv6.IsValid() {
		t.Fatalf("machine %+v", m)
	}
	if len(m.PortMappings) != 1 || m.PortMappings[0] != (container.PortMapping{ContainerPort: 6443, Protocol: "tcp", HostIP: "127.0.0.1"}) {
		t.Fatalf("port mappings %+v, want the one asked for, with host port 0", m.PortMappings)
	}
	if _, ok := m.Labels[labelRequested]; ok || m.Labels[container.LabelMachine] != "m" {
		t.Fatalf("labels %v", m.Labels)
	}
	if _, ok := labels[labelRequested]; !ok {
		t.Fatal("podmanMachine changed the caller's map")
	}
}
