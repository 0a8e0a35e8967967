//go:build engine

package multihost_test

import (
	"context"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/container/runtimetest"
)

// TestOverlayAcrossEngines settles what the design (docs/multihost.md,
// section 4) takes from swarm mode before any controller relies on it, on
// the two engines engine.sh joined in a swarm: an attachable overlay
// network made on the manager (engine 1) can be joined from the worker
// (engine 2); privileged containers on fixed addresses, as CAPCT's nodes
// are, reach each other across the engines; and an address held on one
// engine is not refused on the other: the first start of a container asking
// for it on engine 2 fails after 20 s with a timeout that does not name the
// address, and starting it again runs it on the duplicate address. So CAPCT
// must pick every overlay address itself, from what all the cluster's
// engines hold, and never retry a start in the hope that the engine
// refuses a taken address (as one engine's bridge network does).
func TestOverlayAcrossEngines(t *testing.T) {
	ctx := runtimetest.Ctx(t)
	cidr := netip.MustParsePrefix(os.Getenv("MH_OVERLAY_CIDR"))
	one, two := dockertest.NewRuntime(t), engine2(t).Runtime
	image, err := dockertest.BusyboxImage(ctx, two)
	if err != nil {
		t.Fatalf("building the test image on engine 2: %v", err)
	}
	copyImage(t, two, one, image)

	suffix := runtimetest.RandomSuffix()
	name := "capct-mh-overlay-" + suffix
	if _, err := one.Client().NetworkCreate(ctx, name, network.CreateOptions{Driver: "overlay", Attachable: true,
		IPAM: &network.IPAM{Config: []network.IPAMConfig{{Subnet: cidr.String()}}}}); err != nil {
		t.Fatalf("creating overlay network %s on engine 1: %v", name, err)
	}
	t.Cleanup(func() { _ = one.Client().NetworkRemove(context.Background(), name) })
	owner := container.Owner{Namespace: "multihost", Cluster: "overlay", ClusterID: suffix}

	addrA, addrB := nthAddr(cidr, 10), nthAddr(cidr, 20)
	a := run(t, one, owner, "a-"+suffix, name, image, addrA)
	b := run(t, two, owner, "b-"+suffix, name, image, addrB)
	ping(t, one, owner, a, addrB)
	ping(t, two, owner, b, addrA)

	// A's address, asked for on engine 2: the first start waits 20 s for
	// the manager and fails without saying why, and the next one runs it on
	// the address A holds.
	machine := "c-" + suffix
	c := create(t, two, owner, machine, name, image, addrA)
	err = two.Start(ctx, c, owner.ForMachine(machine))
	if err == nil || container.IsInUse(err) {
		t.Fatalf("first start of %s on engine 1's address %s: %v; want an error that does not say the address is in use", c, addrA, err)
	}
	t.Logf("first start of %s on engine 1's address: %v", c, err)
	if err := two.Start(ctx, c, owner.ForMachine(machine)); err != nil {
		t.Fatalf("second start of %s: %v; swarm mode now refuses a duplicate address again, and docs/multihost.md section 4 may rely on it", c, err)
	}
	if got := overlayAddr(t, two, c, name); got != addrA {
		t.Fatalf("%s runs on %s, want the duplicate %s this test documents", c, got, addrA)
	}
}

// overlayAddr is the container's address on the overlay network.
func overlayAddr(t *testing.T, rt *docker.Runtime, name, net string) netip.Addr {
	t.Helper()
	raw, err := rt.Client().ContainerInspect(runtimetest.Ctx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	if raw.NetworkSettings == nil || raw.NetworkSettings.Networks[net] == nil {
		t.Fatalf("%s is not on %s", name, net)
	}
	addr, _ := netip.ParseAddr(raw.NetworkSettings.Networks[net].IPAddress)
	return addr
}

// copyImage loads ref into to from from, as CAPCT's image copy will.
func copyImage(t *testing.T, from, to *docker.Runtime, ref string) {
	t.Helper()
	ctx := runtimetest.Ctx(t)
	if ok, err := to.ImageExists(ctx, ref); err != nil || ok {
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	tar, err := from.SaveImages(ctx, []string{ref})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tar.Close() }()
	if err := to.LoadImages(ctx, tar); err != nil {
		t.Fatalf("loading %s: %v", ref, err)
	}
}

// run starts a privileged container of owner on the overlay network at
// addr, and removes it at the end of the test.
func run(t *testing.T, rt *docker.Runtime, owner container.Owner, machine, net, image string, addr netip.Addr) string {
	t.Helper()
	name := create(t, rt, owner, machine, net, image, addr)
	if err := rt.Start(runtimetest.Ctx(t), name, owner.ForMachine(machine)); err != nil {
		t.Fatalf("starting %s at %s: %v", name, addr, err)
	}
	return name
}

// create creates a privileged container of owner on the overlay network at
// addr, and removes it at the end of the test.
func create(t *testing.T, rt *docker.Runtime, owner container.Owner, machine, net, image string, addr netip.Addr) string {
	t.Helper()
	ctx := runtimetest.Ctx(t)
	name := "capct-mh-" + machine
	_, err := rt.Client().ContainerCreate(ctx,
		&dcontainer.Config{Image: image, Cmd: runtimetest.LoopCmd, Labels: owner.ForMachine(machine).Labels()},
		&dcontainer.HostConfig{Privileged: true},
		&network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			net: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: addr.String()}},
		}}, nil, name)
	if err != nil {
		t.Fatalf("creating %s at %s: %v", name, addr, err)
	}
	t.Cleanup(func() { _ = rt.Delete(context.Background(), name, owner.ForMachine(machine)) })
	return name
}

// ping checks that the container reaches addr.
func ping(t *testing.T, rt *docker.Runtime, owner container.Owner, name string, addr netip.Addr) {
	t.Helper()
	machine := strings.TrimPrefix(name, "capct-mh-")
	res, err := rt.Exec(runtimetest.Ctx(t), name, owner.ForMachine(machine), container.ExecInput{Cmd: []string{"ping", "-c", "3", "-W", "2", addr.String()}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s could not reach %s over the overlay: %v, exit %d: %s%s", name, addr, err, res.ExitCode, res.Stdout, res.Stderr)
	}
}

// nthAddr is the n-th address of p.
func nthAddr(p netip.Prefix, n int) netip.Addr {
	a := p.Masked().Addr()
	for range n {
		a = a.Next()
	}
	return a
}

// TestEnsureNetworkMakesAnOverlay makes a cluster's network as CAPCT makes
// that of a cluster on several engines: EnsureNetwork with Overlay on the
// swarm's manager, avoiding engine 2's local networks. The network must be
// an attachable overlay that engine 2's containers join, reported as one,
// and adopted again by its owner.
func TestEnsureNetworkMakesAnOverlay(t *testing.T) {
	ctx := runtimetest.Ctx(t)
	one, two := dockertest.NewRuntime(t), engine2(t).Runtime
	suffix := runtimetest.RandomSuffix()
	owner := container.Owner{Namespace: "multihost", Cluster: "ensure", ClusterID: suffix}
	var avoid []netip.Prefix
	for _, rt := range []*docker.Runtime{one, two} {
		if n, err := rt.InspectNetwork(ctx, "docker_gwbridge"); err == nil {
			avoid = append(avoid, n.IPv4Subnet)
		}
	}
	spec := container.NetworkSpec{Name: "capct-mh-ensure-" + suffix, Owner: owner, Overlay: true, Avoid: avoid}
	// The swarm allocates a new overlay's subnets a moment after creating
	// it; EnsureNetwork says so with a transient error, and the cluster's
	// reconcile tries again as this loop does.
	var n container.Network
	var err error
	for range 50 {
		if n, err = one.EnsureNetwork(ctx, spec); !container.IsTransient(err) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("EnsureNetwork of an overlay on engine 1: %v", err)
	}
	t.Cleanup(func() { _ = one.DeleteNetwork(context.Background(), spec.Name, owner) })
	if !n.Overlay || !n.IPv4Subnet.IsValid() || n.MTU != container.OverlayMTU {
		t.Fatalf("want an overlay with a subnet and an MTU of %d, got %+v", container.OverlayMTU, n)
	}
	for _, p := range avoid {
		if n.IPv4Subnet.Overlaps(p) {
			t.Fatalf("the overlay %s overlaps a docker_gwbridge (%s)", n.IPv4Subnet, p)
		}
	}
	if again, err := one.EnsureNetwork(ctx, spec); err != nil || again.ID != n.ID {
		t.Fatalf("ensuring it again: %+v, %v; want the same network adopted", again, err)
	}

	image, err := dockertest.BusyboxImage(ctx, two)
	if err != nil {
		t.Fatal(err)
	}
	addr := nthAddr(n.IPv4Subnet, 10)
	b := run(t, two, owner, "b-"+suffix, spec.Name, image, addr)
	if got := overlayAddr(t, two, b, spec.Name); got != addr {
		t.Fatalf("%s runs on %s on engine 2, want %s", b, got, addr)
	}
	seen, err := two.InspectNetwork(ctx, spec.Name)
	if err != nil || !seen.Overlay {
		t.Fatalf("engine 2 sees %+v, %v; want the overlay", seen, err)
	}
}
