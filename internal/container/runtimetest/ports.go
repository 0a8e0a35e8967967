package runtimetest

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// hostPortForTest returns a fixed host port for one behaviour: random in
// 20000-29999, below the range engines pick ports from (32768 and up), so
// that a port the engine picked for another behaviour running in parallel
// is never hit, and two runs of the suite on one host seldom meet.
func hostPortForTest() int { return 20000 + rand.IntN(10000) }

// sortedMappings returns ms ordered by container port, then protocol: the
// engine reports a container's ports in an order of its own.
func sortedMappings(ms []container.PortMapping) []container.PortMapping {
	out := slices.Clone(ms)
	slices.SortFunc(out, func(a, b container.PortMapping) int {
		if a.ContainerPort != b.ContainerPort {
			return a.ContainerPort - b.ContainerPort
		}
		switch {
		case a.Protocol < b.Protocol:
			return -1
		case a.Protocol > b.Protocol:
			return 1
		}
		return 0
	})
	return out
}

// fixedHostPortsArePublishedAndReported: fixed host ports, TCP and UDP on
// one port number, are kept in the container's configuration (its address
// and protocol defaulted), published when it runs, and published again on
// the same ports when it starts again, as a machine's extraPortMappings
// are after an engine restart.
func fixedHostPortsArePublishedAndReported(t *testing.T, e *Env) {
	ctx := Ctx(t)
	port := hostPortForTest()
	s := e.Spec("ports")
	s.PortMappings = []container.PortMapping{
		{ContainerPort: 8080, HostPort: port, HostIP: "127.0.0.1", Protocol: "tcp"},
		{ContainerPort: 8053, HostPort: port, Protocol: "udp"},
	}
	want := []container.PortMapping{
		{ContainerPort: 8053, HostPort: port, HostIP: container.DefaultHostIP, Protocol: "udp"},
		{ContainerPort: 8080, HostPort: port, HostIP: "127.0.0.1", Protocol: "tcp"},
	}
	if _, err := e.RT.CreateMachine(ctx, s); err != nil {
		t.Fatal(err)
	}
	check := func(when string, running bool) {
		t.Helper()
		m, err := e.RT.Inspect(ctx, s.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got := sortedMappings(m.PortMappings); !slices.Equal(got, want) {
			t.Fatalf("%s: configured ports %+v, want %+v", when, got, want)
		}
		if !running {
			return
		}
		if got := m.HostPort(8080); got != port {
			t.Fatalf("%s: 8080/tcp is published on host port %d, want %d (ports %+v)", when, got, port, m.Ports)
		}
		if !slices.ContainsFunc(m.Ports, func(b container.PortBinding) bool {
			return b.ContainerPort == 8053 && b.Protocol == "udp" && b.HostPort == port && b.HostIP == container.DefaultHostIP
		}) {
			t.Fatalf("%s: 8053/udp is not published on %s:%d: %+v", when, container.DefaultHostIP, port, m.Ports)
		}
	}
	check("created", false)
	if err := e.RT.Start(ctx, s.Name, container.OwnerOf(s.Labels)); err != nil {
		t.Fatal(err)
	}
	check("running", true)
	if err := e.RT.Stop(ctx, s.Name, container.OwnerOf(s.Labels), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	check("stopped", false)
	if err := e.RT.Start(ctx, s.Name, container.OwnerOf(s.Labels)); err != nil {
		t.Fatal(err)
	}
	check("started again", true)
}

// hostPortHeldByAnotherIsHostPortInUse: a container whose fixed host port
// another running container publishes is refused at start with the typed
// error naming the port, not the one of a taken address (another address
// would not help), and is left as it was; the same port with another
// protocol is free; once the holder is gone the container starts.
func hostPortHeldByAnotherIsHostPortInUse(t *testing.T, e *Env) {
	ctx := Ctx(t)
	port := hostPortForTest()
	holder := e.Spec("port-holder")
	holder.PortMappings = []container.PortMapping{{ContainerPort: 8080, HostPort: port, HostIP: "127.0.0.1", Protocol: "tcp"}}
	taker := e.Spec("port-taker")
	taker.PortMappings = []container.PortMapping{{ContainerPort: 8081, HostPort: port}}
	udp := e.Spec("port-udp")
	udp.PortMappings = []container.PortMapping{{ContainerPort: 8082, HostPort: port, Protocol: "udp"}}
	for _, s := range []container.MachineSpec{holder, taker, udp} {
		if _, err := e.RT.CreateMachine(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.RT.Start(ctx, holder.Name, container.OwnerOf(holder.Labels)); err != nil {
		t.Fatal(err)
	}
	err := e.RT.Start(ctx, taker.Name, container.OwnerOf(taker.Labels))
	if !container.IsHostPortInUse(err) || container.IsInUse(err) {
		t.Fatalf("starting a second container on host port %d: want HostPortInUse, got %v (kind %s)", port, err, container.KindOf(err))
	}
	refused, ok := container.HostPortInUse(err)
	if !ok || refused.HostPort != port || !refused.Matches(taker.PortMappings[0]) {
		t.Fatalf("the refusal does not name host port %d: %+v", port, refused)
	}
	if m, err := e.RT.Inspect(ctx, taker.Name); err != nil || m.State == container.StateRunning {
		t.Fatalf("the refused container: %+v, %v", m, err)
	}
	if err := e.RT.Start(ctx, udp.Name, container.OwnerOf(udp.Labels)); err != nil {
		t.Fatalf("the same port over UDP: %v", err)
	}
	if err := e.RT.Delete(ctx, holder.Name, container.OwnerOf(holder.Labels)); err != nil {
		t.Fatal(err)
	}
	if err := e.RT.Start(ctx, taker.Name, container.OwnerOf(taker.Labels)); err != nil {
		t.Fatalf("starting it once the holder is gone: %v", err)
	}
	if m, err := e.RT.Inspect(ctx, taker.Name); err != nil || m.HostPort(8081) != port {
		t.Fatalf("once the holder is gone: %+v, %v", m, err)
	}
}
