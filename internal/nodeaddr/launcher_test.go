package nodeaddr_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/nodeaddr"
)

func spec(network, machine string) container.MachineSpec {
	return container.MachineSpec{Name: "c1-" + machine, Image: "img", Network: network,
		Labels: testOwner.ForMachine(machine).Labels(), Role: container.RoleWorker}
}

// testOwner owns the test's network and containers.
var testOwner = container.Owner{Namespace: "ns", Cluster: "c1", ClusterID: "id-1"}

func managedNetwork(t *testing.T, rt *fake.Runtime, family container.IPFamily) container.Network {
	t.Helper()
	n, err := rt.EnsureNetwork(context.Background(), container.NetworkSpec{Name: "capct-c1", Owner: testOwner, IPFamily: family})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// slowRuntime widens the window between reading the held addresses and
// starting the container, and counts starts refused as in use: with the
// launches serialised per network there are none.
type slowRuntime struct {
	*fake.Runtime
	inUse atomic.Int32
}

func (r *slowRuntime) List(ctx context.Context, sel map[string]string) ([]container.Machine, error) {
	ms, err := r.Runtime.List(ctx, sel)
	time.Sleep(5 * time.Millisecond)
	return ms, err
}

func (r *slowRuntime) Start(ctx context.Context, name string, owner container.Owner) error {
	err := r.Runtime.Start(ctx, name, owner)
	if container.IsInUse(err) {
		r.inUse.Add(1)
	}
	return err
}

func TestLaunchGivesEachMachineItsOwnStaticAddress(t *testing.T) {
	for _, family := range []container.IPFamily{container.IPv4, container.IPv6, container.DualStack} {
		t.Run(string(family), func(t *testing.T) {
			rt := fake.New(nil)
			n := managedNetwork(t, rt, family)
			slow := &slowRuntime{Runtime: rt}
			l := &nodeaddr.Launcher{Runtime: slow}
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for i := range 8 {
				wg.Go(func() {
					_, err := l.Launch(context.Background(), spec(n.Name, fmt.Sprintf("m%d", i)))
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			ms, _ := rt.List(context.Background(), nil)
			seen := checkStaticAddresses(t, n, family, ms)
			if n := slow.inUse.Load(); n != 0 {
				t.Fatalf("%d launches picked an address another launch was about to take", n)
			}
			want := 8
			if family.HasIPv6() {
				want = 16
			}
			if len(seen) != want {
				t.Fatalf("%d static addresses, want %d", len(seen), want)
			}
		})
	}
}

// checkStaticAddresses checks that each machine of ms runs on static
// addresses of its own, one per family of the network n (of family), out
// of the engine's dynamic range; it returns who holds each address.
func checkStaticAddresses(t *testing.T, n container.Network, family container.IPFamily, ms []container.Machine) map[netip.Addr]string {
	t.Helper()
	seen := map[netip.Addr]string{}
	for _, m := range ms {
		for _, pair := range [][2]netip.Addr{{m.StaticIPv4, m.IPv4}, {m.StaticIPv6, m.IPv6}} {
			static, current := pair[0], pair[1]
			if (static.Is4() && !n.IPv4Subnet.IsValid()) || (static.Is6() && !n.IPv6Subnet.IsValid()) {
				t.Fatalf("%s got %s in a family the network lacks", m.Name, static)
			}
			if static != current {
				t.Fatalf("%s runs on %s, not its static address %s", m.Name, current, static)
			}
			if !static.IsValid() {
				continue
			}
			if other, ok := seen[static]; ok {
				t.Fatalf("%s handed to %s and %s", static, other, m.Name)
			}
			seen[static] = m.Name
			if n.DynamicIPv4Range.Contains(static) || n.DynamicIPv6Range.Contains(static) {
				t.Fatalf("%s of %s lies in the engine's dynamic range", static, m.Name)
			}
		}
		if family.HasIPv6() && !m.StaticIPv6.IsValid() || !m.StaticIPv4.IsValid() {
			t.Fatalf("%s lacks a static address: %v %v", m.Name, m.StaticIPv4, m.StaticIPv6)
		}
	}
	return seen
}

func TestLaunchSkipsForeignAndStoppedHolders(t *testing.T) {
	rt := fake.New(nil)
	ctx := context.Background()
	// An Unmanaged network with no dynamic range: the engine hands out
	// the lowest addresses, where CAPCT looks too.
	rt.AddNetwork(container.Network{Name: "shared", IPv4Subnet: netip.MustParsePrefix("10.5.0.0/24")}, true)
	foreign := spec("shared", "foreign")
	other := container.Owner{Namespace: "ns", Cluster: "other", ClusterID: "id-other", Machine: "foreign"}
	foreign.Labels = other.Labels()
	if _, err := rt.CreateMachine(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, foreign.Name, other); err != nil {
		t.Fatal(err)
	}
	l := &nodeaddr.Launcher{Runtime: rt}
	a, err := l.Launch(ctx, spec("shared", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Machine.StaticIPv4.String(); got != "10.5.0.3" {
		t.Fatalf("got %s; 10.5.0.2 is the foreign container's", got)
	}
	if err := rt.Stop(ctx, a.Machine.Name, testOwner.ForMachine("a"), 0); err != nil {
		t.Fatal(err)
	}
	b, err := l.Launch(ctx, spec("shared", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Machine.StaticIPv4.String(); got != "10.5.0.4" {
		t.Fatalf("got %s; a stopped container keeps 10.5.0.3", got)
	}
	if err := rt.Start(ctx, a.Machine.Name, testOwner.ForMachine("a")); err != nil {
		t.Fatalf("the stopped container must get its address back: %v", err)
	}
}

// The engine refuses an address that nothing it reports holds (its IPAM
// kept it after a failed start, say): the launch picks another, and so do
// later launches, instead of picking the refused one again and again.
func TestLaunchPicksAgainWhenTheEngineSaysInUse(t *testing.T) {
	t.Cleanup(nodeaddr.ForgetRefused)
	rt := fake.New(nil)
	n := managedNetwork(t, rt, container.IPv4)
	first, err := nodeaddr.PickAll(nodeaddr.FamiliesOf(n), nil)
	if err != nil {
		t.Fatal(err)
	}
	rt.FailNext(fake.OpStart, container.NewError("start", "container", "c1-a", container.KindInUse, errors.New("Address already in use")))
	got, err := (&nodeaddr.Launcher{Runtime: rt}).Launch(context.Background(), spec(n.Name, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Machine.State != container.StateRunning || !got.Machine.StaticIPv4.IsValid() || got.Machine.StaticIPv4 == first.IPv4 {
		t.Fatalf("want a running container on another address than the refused %s, got %+v", first.IPv4, got.Machine)
	}
	// A later launch skips it too, though nothing holds it.
	if err := rt.Delete(context.Background(), got.Machine.Name, testOwner.ForMachine("a")); err != nil {
		t.Fatal(err)
	}
	again, err := (&nodeaddr.Launcher{Runtime: rt}).Launch(context.Background(), spec(n.Name, "b"))
	if err != nil {
		t.Fatal(err)
	}
	if again.Machine.StaticIPv4 == first.IPv4 {
		t.Fatalf("a later launch picked the refused address %s again", first.IPv4)
	}
}

func TestLaunchFallsBackWhereStaticAddressesAreRefused(t *testing.T) {
	rt := fake.New(nil)
	rt.AddNetwork(container.Network{Name: "auto", IPv4Subnet: netip.MustParsePrefix("10.6.0.0/24")}, false)
	got, err := (&nodeaddr.Launcher{Runtime: rt}).Launch(context.Background(), spec("auto", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if !got.StaticFallback || got.Machine.StaticIPv4.IsValid() || !got.Machine.IPv4.IsValid() || got.Machine.State != container.StateRunning {
		t.Fatalf("got %+v, fallback %v", got.Machine, got.StaticFallback)
	}
}

func TestLaunchReportsExhaustion(t *testing.T) {
	rt := fake.New(nil)
	rt.AddNetwork(container.Network{Name: "tiny", IPv4Subnet: netip.MustParsePrefix("10.7.0.0/30")}, true)
	l := &nodeaddr.Launcher{Runtime: rt}
	if _, err := l.Launch(context.Background(), spec("tiny", "a")); err != nil {
		t.Fatal(err)
	}
	_, err := l.Launch(context.Background(), spec("tiny", "b"))
	if !errors.Is(err, nodeaddr.ErrExhausted) {
		t.Fatalf("want exhaustion, got %v", err)
	}
}

func TestReplaceKeepsTheAddresses(t *testing.T) {
	rt := fake.New(nil)
	n := managedNetwork(t, rt, container.IPv4)
	l := &nodeaddr.Launcher{Runtime: rt}
	first, err := l.Launch(context.Background(), spec(n.Name, "lb"))
	if err != nil {
		t.Fatal(err)
	}
	s := spec(n.Name, "lb")
	s.StaticIPv4 = first.Machine.StaticIPv4
	s.PortMappings = []container.PortMapping{{ContainerPort: 6443, HostPort: 40000}}
	second, err := l.Replace(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if second.Machine.ID == first.Machine.ID || second.Machine.IPv4 != first.Machine.IPv4 || second.Machine.HostPort(6443) != 40000 {
		t.Fatalf("first %+v, second %+v", first.Machine, second.Machine)
	}
}

// blockingRuntime holds the start (or, with holdCreate, the create) of one
// container until released, as a node's start and create hold for seconds
// on a busy engine.
type blockingRuntime struct {
	*fake.Runtime
	name       string
	holdCreate bool
	started    chan struct{}
	release    chan struct{}
	creates    atomic.Int32
	held       atomic.Bool
}

func (r *blockingRuntime) Start(ctx context.Context, name string, owner container.Owner) error {
	if name == r.name && !r.holdCreate {
		close(r.started)
		<-r.release
	}
	return r.Runtime.Start(ctx, name, owner)
}

func (r *blockingRuntime) CreateMachine(ctx context.Context, spec container.MachineSpec) (*container.Machine, error) {
	if r.creates.Add(1); spec.Name == r.name && r.holdCreate && r.held.CompareAndSwap(false, true) {
		close(r.started)
		<-r.release
	}
	return r.Runtime.CreateMachine(ctx, spec)
}

// A launch whose start takes long does not hold up the other launches on
// its network (a scale-out's nodes would start one behind the other), nor
// do they pick its address: it holds it from its creation.
func TestLaunchesOnOneNetworkStartInParallel(t *testing.T) {
	rt := &blockingRuntime{Runtime: fake.New(nil), name: "c1-a", started: make(chan struct{}), release: make(chan struct{})}
	n := managedNetwork(t, rt.Runtime, container.IPv4)
	l := &nodeaddr.Launcher{Runtime: rt}
	type result struct {
		got *nodeaddr.Launched
		err error
	}
	slow := make(chan result, 1)
	go func() {
		got, err := l.Launch(context.Background(), spec(n.Name, "a"))
		slow <- result{got, err}
	}()
	<-rt.started

	fast := make(chan result, 1)
	go func() {
		got, err := l.Launch(context.Background(), spec(n.Name, "b"))
		fast <- result{got, err}
	}()
	var b result
	select {
	case b = <-fast:
	case <-time.After(10 * time.Second):
		close(rt.release)
		t.Fatal("the second launch waited for the first one's start")
	}
	close(rt.release)
	a := <-slow
	if a.err != nil || b.err != nil {
		t.Fatalf("launch errors: %v, %v", a.err, b.err)
	}
	if a.got.Machine.State != container.StateRunning || b.got.Machine.State != container.StateRunning {
		t.Fatalf("want both running, got %s and %s", a.got.Machine.State, b.got.Machine.State)
	}
	if a.got.Machine.StaticIPv4 == b.got.Machine.StaticIPv4 {
		t.Fatalf("both launches picked %s", a.got.Machine.StaticIPv4)
	}
}

// A launch whose create takes long holds up neither the other launches on
// its network nor the adoption of a container that exists (the load
// balancer's, on every pass of its cluster), and the address it picked is
// not picked again while the engine does not know it yet.
func TestLaunchesOnOneNetworkCreateInParallel(t *testing.T) {
	rt := &blockingRuntime{Runtime: fake.New(nil), name: "c1-a", holdCreate: true, started: make(chan struct{}), release: make(chan struct{})}
	n := managedNetwork(t, rt.Runtime, container.IPv4)
	l := &nodeaddr.Launcher{Runtime: rt}
	existing, err := l.Launch(context.Background(), spec(n.Name, "lb"))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		got *nodeaddr.Launched
		err error
	}
	slow := make(chan result, 1)
	go func() {
		got, err := l.Launch(context.Background(), spec(n.Name, "a"))
		slow <- result{got, err}
	}()
	<-rt.started

	others := make(chan result, 2)
	for _, name := range []string{"b", "lb"} {
		go func() {
			got, err := l.Launch(context.Background(), spec(n.Name, name))
			others <- result{got, err}
		}()
	}
	var b, lb result
	for range 2 {
		select {
		case r := <-others:
			if r.err != nil {
				close(rt.release)
				t.Fatalf("launch error: %v", r.err)
			}
			if r.got.Machine.Name == existing.Machine.Name {
				lb = r
			} else {
				b = r
			}
		case <-time.After(10 * time.Second):
			close(rt.release)
			t.Fatal("a launch waited for another one's create")
		}
	}
	close(rt.release)
	a := <-slow
	if a.err != nil {
		t.Fatalf("launch error: %v", a.err)
	}
	if lb.got.Machine.ID != existing.Machine.ID {
		t.Fatalf("the existing container %s was not adopted: %+v", existing.Machine.Name, lb.got.Machine)
	}
	addrs := map[netip.Addr]string{}
	for _, r := range []result{a, b, lb} {
		if other, ok := addrs[r.got.Machine.StaticIPv4]; ok {
			t.Fatalf("%s handed to %s and %s", r.got.Machine.StaticIPv4, other, r.got.Machine.Name)
		}
		addrs[r.got.Machine.StaticIPv4] = r.got.Machine.Name
	}
	// A launch that picked a held address is refused at its start and
	// creates its container again.
	if n := rt.creates.Load(); n != 3 {
		t.Fatalf("%d creates for 3 containers: a launch picked an address being created", n)
	}
}

// Adopting a container that exists takes no lock: the load balancer's
// cluster is reconciled while its machines pick their addresses.
func TestLaunchAdoptsWithoutTheNetworkLock(t *testing.T) {
	rt := fake.New(nil)
	n := managedNetwork(t, rt, container.IPv4)
	l := &nodeaddr.Launcher{Runtime: rt}
	if _, err := l.Launch(context.Background(), spec(n.Name, "lb")); err != nil {
		t.Fatal(err)
	}
	unlock := nodeaddr.LockNetwork(n.Name)
	defer unlock()
	done := make(chan error, 1)
	go func() {
		_, err := l.Launch(context.Background(), spec(n.Name, "lb"))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("adopting an existing container waited for the network's lock")
	}
}

// TestLaunchOnAnOverlayHoldsWhatEveryEngineHolds runs a launch on the
// second of two engines that share an overlay, as the swarm would: each
// reports only its own containers, and neither refuses the other's
// addresses. The pick must read both engines and the addresses machines
// recorded, and a container whose first start fails must go, not be
// started again onto a duplicate address.
func TestLaunchOnAnOverlayHoldsWhatEveryEngineHolds(t *testing.T) {
	t.Cleanup(nodeaddr.ForgetRefused)
	ctx := context.Background()
	overlay := container.Network{Name: "capct-c1", IPv4Subnet: netip.MustParsePrefix("10.7.0.0/24"),
		DynamicIPv4Range: netip.MustParsePrefix("10.7.0.128/25"), Overlay: true}
	a, b := fake.New(nil), fake.New(nil)
	a.AddNetwork(overlay, true)
	b.AddNetwork(overlay, true)
	onA, err := (&nodeaddr.Launcher{Runtime: a}).Launch(ctx, spec(overlay.Name, "on-a"))
	if err != nil {
		t.Fatal(err)
	}
	// A machine on an engine that does not answer, known only by what it
	// recorded.
	recorded := onA.Machine.StaticIPv4.Next()
	spans := []container.Runtime{a, b}

	onB, err := (&nodeaddr.Launcher{Runtime: b, Spans: spans, Recorded: []netip.Addr{recorded}}).Launch(ctx, spec(overlay.Name, "on-b"))
	if err != nil {
		t.Fatal(err)
	}
	if got := onB.Machine.StaticIPv4; got == onA.Machine.StaticIPv4 || got == recorded {
		t.Fatalf("the launch on engine b took %s; engine a's container holds %s and a machine recorded %s", got, onA.Machine.StaticIPv4, recorded)
	}

	// An engine of the overlay that does not answer is left to Recorded;
	// one that has not seen the overlay yet holds nothing on it.
	c := fake.New(nil)
	c.FailNext(fake.OpInspectNetwork, container.NewError("inspect", "network", overlay.Name, container.KindUnreachable, errors.New("no route to host")))
	if _, err := (&nodeaddr.Launcher{Runtime: b, Spans: []container.Runtime{a, b, c, fake.New(nil)}}).Launch(ctx, spec(overlay.Name, "next")); err != nil {
		t.Fatalf("a launch with one engine away and one that never saw the overlay: %v", err)
	}

	// The swarm's answer to a duplicate is a failed start that names no
	// address: the container goes, and its addresses are not picked again.
	b.FailNext(fake.OpStart, container.NewError("start", "container", "c1-dup", container.KindTimeout, errors.New("attaching to network failed: context deadline exceeded")))
	_, err = (&nodeaddr.Launcher{Runtime: b, Spans: spans}).Launch(ctx, spec(overlay.Name, "dup"))
	if err == nil {
		t.Fatal("want the failed start's error")
	}
	if _, err := b.Inspect(ctx, "c1-dup"); !container.IsNotFound(err) {
		t.Fatalf("the container whose first start failed on the overlay is still there (%v); starting it again would run it on a duplicate address", err)
	}
}
