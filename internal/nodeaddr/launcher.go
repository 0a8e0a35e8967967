package nodeaddr

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// maxInUseRetries bounds how often one launch picks again after the engine
// refused an address as taken.
const maxInUseRetries = 3

// networkLocks serialises the picking of addresses per network name. It is
// one for the whole process, not one per Launcher, because the node and
// load-balancer controllers each make their own Launcher and share
// networks.
var networkLocks keyedMutex

// refused holds, per network, the addresses the engine refused as in use
// although nothing it reported held them when they were picked: an address
// its IPAM kept after a failed start, or a holder CAPCT cannot see. Picks
// skip them for the life of the process, so that a launch does not pick the
// same refused address again and again. It only grows by refusals, which
// are rare, and never past the subnet.
var refused addrSets

// creating holds, per network, the addresses of the containers being
// created, from the pick (under the network's lock) until the engine has
// the container and so reports its addresses itself. The creates run
// outside the lock: on a busy engine a node's create takes seconds, and a
// scale-out's creates, and every adoption of an existing container such as
// the load balancer's, would otherwise queue one behind the other.
var creating addrSets

// Refused records that the engine refused addrs on network as in use; the
// next picks skip them. Launch records its own refusals; callers that start
// a container outside Launch and meet the refusal record it here.
func Refused(network string, addrs ...netip.Addr) { refused.add(network, addrs...) }

// addrSets is a counted set of addresses per network, safe for concurrent
// use.
type addrSets struct {
	mu        sync.Mutex
	byNetwork map[string]map[netip.Addr]int
}

func (r *addrSets) add(network string, addrs ...netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byNetwork == nil {
		r.byNetwork = map[string]map[netip.Addr]int{}
	}
	for _, a := range addrs {
		if !a.IsValid() {
			continue
		}
		if r.byNetwork[network] == nil {
			r.byNetwork[network] = map[netip.Addr]int{}
		}
		r.byNetwork[network][a]++
	}
}

// remove takes back one add of each address.
func (r *addrSets) remove(network string, addrs ...netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.byNetwork[network]
	for _, a := range addrs {
		if set[a]--; set[a] <= 0 {
			delete(set, a)
		}
	}
	if len(set) == 0 {
		delete(r.byNetwork, network)
	}
}

func (r *addrSets) list(network string) []netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]netip.Addr, 0, len(r.byNetwork[network]))
	for a := range r.byNetwork[network] {
		out = append(out, a)
	}
	return out
}

// Launcher creates and starts containers with static addresses.
type Launcher struct {
	// Runtime is the engine the container runs on.
	Runtime container.Runtime
	// Spans are, for a network that spans engines (a swarm overlay), the
	// runtimes of every engine of the cluster, the one that made the
	// network first; empty for a network local to Runtime. An engine
	// reports only its own containers on an overlay, and does not refuse an
	// address another engine's container holds: the start waits 20 s and
	// fails without naming the address, and a second start runs the
	// container on the duplicate (test/multihost TestOverlayAcrossEngines).
	// So each pick reads every engine, and a container whose first start
	// fails is removed, never started again.
	Spans []container.Runtime
	// Recorded are addresses the cluster's machines reported, held by every
	// pick on a spanning network: an engine that does not answer cannot
	// tell what its containers hold.
	Recorded []netip.Addr
}

// Launch creates spec's container with the lowest free address in every
// family of its network and starts it. Only the picking is serialised per
// network with every other Launch of the process; creating and starting are
// not: the addresses of a container being created are held in memory until
// the engine has it, and a created container holds its static addresses
// for every later pick (Held lists them, running or not). A node's create
// and start take seconds on a busy engine, which would otherwise queue a
// scale-out's launches one behind the other, and every other user of the
// lock behind them. Addresses spec already names are kept. A container that
// exists already is adopted and started as it is, without the lock.
//
// On a network that takes no static addresses (Docker's networks whose
// subnet their creator did not choose), the container is created again
// without them and Launch returns it with StaticFallback true: its address
// may change when it restarts.
func (l *Launcher) Launch(ctx context.Context, spec container.MachineSpec) (*Launched, error) {
	return l.launch(ctx, spec, nil)
}

// Replace removes the container spec.Name and launches it again from spec,
// removing and creating in one step for the other launches on its network,
// so that the addresses spec names (the old container's) cannot be picked
// by another launch in between. It is for stateless containers only (the
// load balancer).
func (l *Launcher) Replace(ctx context.Context, spec container.MachineSpec) (*Launched, error) {
	return l.launch(ctx, spec, func() error {
		if err := l.Runtime.Delete(ctx, spec.Name, container.OwnerOf(spec.Labels)); err != nil {
			return fmt.Errorf("failed to remove container %s to replace it: %w", spec.Name, err)
		}
		return nil
	})
}

// launch creates (after first, when given, under the same lock) and starts
// spec's container, picking again when the engine refuses a picked address
// as in use.
func (l *Launcher) launch(ctx context.Context, spec container.MachineSpec, first func() error) (*Launched, error) {
	picked := spec.StaticIPv4.IsValid() || spec.StaticIPv6.IsValid()
	for attempt := 0; ; attempt++ {
		s, m, created, err := l.create(ctx, spec, picked, first)
		if err != nil {
			return nil, err
		}
		first = nil
		launched, err := l.start(ctx, s, m, created)
		if created && container.IsInUse(err) && !picked && attempt < maxInUseRetries {
			// Someone CAPCT does not know took the address between the pick
			// and the start; it holds it now, so the next pick skips it.
			continue
		}
		return launched, err
	}
}

// create adopts spec's container when it exists, or picks its addresses
// (unless spec names them) under the network's lock and creates it. It
// returns the spec the container was created from and whether this call
// created it.
func (l *Launcher) create(ctx context.Context, spec container.MachineSpec, picked bool, first func() error) (container.MachineSpec, *container.Machine, bool, error) {
	if first == nil {
		// The common case, every reconcile of a launched machine and of the
		// load balancer: nothing to pick, so nothing to wait for.
		if m, err := l.Runtime.Inspect(ctx, spec.Name); err == nil {
			return spec, m, false, nil
		} else if !container.IsNotFound(err) {
			return spec, nil, false, err
		}
	}
	spec, err := l.reserve(ctx, spec, picked, first)
	if err != nil {
		return spec, nil, false, err
	}
	defer creating.remove(spec.Network, spec.StaticIPv4, spec.StaticIPv6)
	m, err := l.Runtime.CreateMachine(ctx, spec)
	if err != nil {
		return spec, nil, false, err
	}
	return spec, m, true, nil
}

// reserve runs first, when given, then picks spec's addresses unless spec
// names them, and holds them in creating for the caller's create, all under
// the network's lock, so that no other pick can take them in between.
func (l *Launcher) reserve(ctx context.Context, spec container.MachineSpec, picked bool, first func() error) (container.MachineSpec, error) {
	unlock := networkLocks.lock(spec.Network)
	defer unlock()
	if first != nil {
		if err := first(); err != nil {
			return spec, err
		}
	}
	if !picked {
		addrs, err := l.pick(ctx, spec.Network, spec.Name)
		if err != nil {
			return spec, err
		}
		spec.StaticIPv4, spec.StaticIPv6 = addrs.IPv4, addrs.IPv6
	}
	creating.add(spec.Network, spec.StaticIPv4, spec.StaticIPv6)
	return spec, nil
}

// Launched is what Launch made.
type Launched struct {
	// Machine is the running container.
	Machine *container.Machine
	// StaticFallback says the network took no static address, so the
	// engine picked the container's address.
	StaticFallback bool
}

// start starts m; created says this launch created it, so that it may be
// removed again when the engine refuses its addresses: it never ran.
func (l *Launcher) start(ctx context.Context, spec container.MachineSpec, m *container.Machine, created bool) (*Launched, error) {
	fallback := false
	if m.State != container.StateRunning {
		err := l.Runtime.Start(ctx, spec.Name, container.OwnerOf(spec.Labels))
		if created && container.IsStaticAddressUnsupported(err) {
			if err := l.Runtime.Delete(ctx, spec.Name, container.OwnerOf(spec.Labels)); err != nil {
				return nil, fmt.Errorf("failed to remove container %s after its network refused a static address: %w", spec.Name, err)
			}
			spec.StaticIPv4, spec.StaticIPv6 = netip.Addr{}, netip.Addr{}
			if _, err := l.Runtime.CreateMachine(ctx, spec); err != nil {
				return nil, err
			}
			err = l.Runtime.Start(ctx, spec.Name, container.OwnerOf(spec.Labels))
			fallback = true
		}
		if err != nil {
			if created && (container.IsInUse(err) || len(l.Spans) > 0) {
				refused.add(spec.Network, spec.StaticIPv4, spec.StaticIPv6)
				if derr := l.Runtime.Delete(ctx, spec.Name, container.OwnerOf(spec.Labels)); derr != nil {
					return nil, errors.Join(err, fmt.Errorf("failed to remove container %s whose address was taken: %w", spec.Name, derr))
				}
			}
			return nil, err
		}
	}
	m, err := l.Runtime.Inspect(ctx, spec.Name)
	if err != nil {
		return nil, err
	}
	return &Launched{Machine: m, StaticFallback: fallback}, nil
}

// pick reads what the engine holds on the network and picks the lowest
// free addresses for the container name.
func (l *Launcher) pick(ctx context.Context, network, name string) (Addresses, error) {
	// The creates in flight before what the engine holds: a create's
	// addresses leave creating only once the engine has its container, so
	// read in this order no address falls between the two.
	inFlight := creating.list(network)
	engines := l.Spans
	if len(engines) == 0 {
		engines = []container.Runtime{l.Runtime}
	}
	var (
		n    container.Network
		held []netip.Addr
	)
	for i, rt := range engines {
		seen, err := rt.InspectNetwork(ctx, network)
		switch {
		case i == 0 && err != nil:
			return Addresses{}, fmt.Errorf("failed to read the addresses held on network %s: %w", network, err)
		case i == 0:
			n = seen
		case container.IsNotFound(err):
			// An engine sees an attachable overlay only once one of its
			// containers uses it; it holds nothing on it then, but its
			// stopped containers, which List finds.
			seen = container.Network{Name: network}
		case container.IsUnreachable(err):
			// What it holds is in Recorded.
			continue
		case err != nil:
			return Addresses{}, fmt.Errorf("failed to read the addresses held on network %s: %w", network, err)
		}
		// Every CAPCT container, of any cluster, that sits on the network:
		// stopped ones hold their static addresses too.
		machines, err := rt.List(ctx, nil)
		if i > 0 && container.IsUnreachable(err) {
			continue
		}
		if err != nil {
			return Addresses{}, fmt.Errorf("failed to list the containers on network %s: %w", network, err)
		}
		held = append(held, Held(seen, machines)...)
	}
	held = append(held, refused.list(network)...)
	held = append(held, l.Recorded...)
	addrs, err := PickAll(FamiliesOf(n), append(held, inFlight...))
	if err != nil {
		return Addresses{}, fmt.Errorf("failed to pick an address for container %s on network %s: %w", name, network, err)
	}
	return addrs, nil
}

// FamiliesOf turns what the engine reports of a network into the families
// to allocate from.
func FamiliesOf(n container.Network) Network {
	return Network{
		IPv4: Family{Subnet: n.IPv4Subnet, Gateway: n.IPv4Gateway, Dynamic: n.DynamicIPv4Range},
		IPv6: Family{Subnet: n.IPv6Subnet, Gateway: n.IPv6Gateway, Dynamic: n.DynamicIPv6Range},
	}
}

// Held lists the addresses held on network n: its endpoints' and every
// address, static or current, of the machines attached to it.
func Held(n container.Network, machines []container.Machine) []netip.Addr {
	var held []netip.Addr
	for _, e := range n.Endpoints {
		held = append(held, e.IPv4, e.IPv6)
	}
	for _, m := range machines {
		if m.Network == n.Name {
			held = append(held, m.IPv4, m.IPv6, m.StaticIPv4, m.StaticIPv6)
		}
	}
	return held
}

// keyedMutex is a mutex per key; entries go when nobody holds or waits.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedEntry{}
	}
	e := k.locks[key]
	if e == nil {
		e = &keyedEntry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
