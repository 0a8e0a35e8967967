package docker

import (
	"fmt"
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

func TestPodmanSpecKeepsWhatANodeGets(t *testing.T) {
	r := &Runtime{podman: true, statHost: func(string) bool { return true }}
	spec := container.MachineSpec{
		Name: "c1-cp", Image: "capct/node:v1.35.4", Network: "net", Role: container.RoleControlPlane, KindNode: true,
		Labels:       container.Owner{Namespace: "ns", Cluster: "c1", ClusterID: "id", Machine: "cp"}.Labels(),
		StaticIPv4:   netip.MustParseAddr("172.30.16.10"),
		PortMappings: []container.PortMapping{{ContainerPort: 6443}},
		Resources:    container.Resources{MilliCPUs: 1500, MemoryBytes: 1 << 30},
		Env:          []string{"A=b=c"},
	}
	cfg, hc, nc := r.configs(spec)
	s, err := podmanSpecFrom(spec.Name, cfg, hc, nc)
	if err != nil {
		t.Fatal(err)
	}
	if s.CgroupNS == nil || s.CgroupNS.NSMode != "private" {
		t.Errorf("cgroup namespace %+v, want private: Podman's compatible API drops it", s.CgroupNS)
	}
	if !s.Privileged || s.Seccomp != "unconfined" || s.AppArmor != "unconfined" || s.Hostname != spec.Name || s.Init {
		t.Errorf("node flags: %+v", s)
	}
	if s.RestartPolicy != "unless-stopped" || s.Env["A"] != "b=c" || s.Labels[labelRequested] == "" {
		t.Errorf("restart %q, env %v, labels %v", s.RestartPolicy, s.Env, s.Labels)
	}
	if got := s.Networks["net"].StaticIPs; len(got) != 1 || got[0] != "172.30.16.10" || s.NetNS == nil || s.NetNS.NSMode != "bridge" {
		t.Errorf("network %+v %+v", s.NetNS, s.Networks)
	}
	if len(s.PortMappings) != 1 || s.PortMappings[0] != (podmanPortMapping{HostIP: "127.0.0.1", ContainerPort: 6443, Protocol: "tcp"}) {
		t.Errorf("ports %+v", s.PortMappings)
	}
	var dests []string
	for _, m := range s.Mounts {
		dests = append(dests, m.Type+":"+m.Destination)
	}
	if want := "[bind:/lib/modules tmpfs:/run tmpfs:/tmp]"; fmt.Sprint(dests) != want {
		t.Errorf("mounts %v, want %s", dests, want)
	}
	if len(s.Volumes) != 1 || s.Volumes[0].Dest != "/var" || s.Volumes[0].Name != "" {
		t.Errorf("volumes %+v, want an anonymous /var", s.Volumes)
	}
	if l := s.ResourceLimits; l == nil || l.Memory.Limit != 1<<30 || l.CPU.Quota != 150_000 || l.CPU.Period != 100_000 {
		t.Errorf("limits %+v", l)
	}
}
