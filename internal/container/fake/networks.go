// Networks: the fake's networks, on subnets derived from their names as
// the engine backend derives them, LocalSubnets of those that are not
// overlays, and AddNetwork for a network that someone else made.

package fake

import (
	"context"
	"fmt"
	"net/netip"
	"sort"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

type fakeNetwork struct {
	net  container.Network
	next map[bool]netip.Addr // per family (true = v6): last assigned address
	// noStatic marks a network whose subnet its creator did not choose,
	// on which the Docker engine refuses static addresses.
	noStatic bool
}

// EnsureNetwork implements container.Runtime.
func (r *Runtime) EnsureNetwork(ctx context.Context, spec container.NetworkSpec) (container.Network, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpEnsureNetwork); err != nil {
		return container.Network{}, err
	}
	if err := spec.Validate(); err != nil {
		return container.Network{}, err
	}
	if n, ok := r.networks[spec.Name]; ok {
		if err := spec.CheckAdopt(n.net); err != nil {
			return container.Network{}, err
		}
		return n.net, nil
	}
	family := spec.IPFamily
	if family == "" {
		family = container.IPv4
	}
	for attempt := range container.MaxSubnetAttempts {
		v4, v6 := container.Subnets(spec.Name, attempt)
		if r.overlapsLocked(v4, spec.Avoid) || (family.HasIPv6() && r.overlapsLocked(v6, spec.Avoid)) {
			continue
		}
		n := container.Network{Name: spec.Name, ID: r.newID(), Labels: spec.Owner.Labels(), Overlay: spec.Overlay, Encrypted: spec.Encrypted}
		if spec.Overlay {
			n.MTU = container.OverlayMTU
		}
		if family.HasIPv4() || family == container.IPv6 { // bridge networks always get IPv4
			n.IPv4Subnet, n.IPv4Gateway, n.DynamicIPv4Range = v4, container.Gateway(v4), container.DynamicRange(v4)
		}
		if family.HasIPv6() {
			n.IPv6Subnet, n.IPv6Gateway, n.DynamicIPv6Range = v6, container.Gateway(v6), container.DynamicRange(v6)
		}
		r.networks[spec.Name] = &fakeNetwork{net: n, next: map[bool]netip.Addr{}}
		return n, nil
	}
	return container.Network{}, container.NewError("create", "network", spec.Name, container.KindPoolOverlap,
		fmt.Errorf("all %d derived subnets overlap existing networks", container.MaxSubnetAttempts))
}

// overlapsLocked reports whether p overlaps a network of the engine or one
// of avoid.
func (r *Runtime) overlapsLocked(p netip.Prefix, avoid []netip.Prefix) bool {
	for _, q := range avoid {
		if q.Overlaps(p) {
			return true
		}
	}
	for _, n := range r.networks {
		for _, q := range []netip.Prefix{n.net.IPv4Subnet, n.net.IPv6Subnet} {
			if q.IsValid() && q.Overlaps(p) {
				return true
			}
		}
	}
	return false
}

// AddNetwork adds a network made by someone else, as an Unmanaged network
// is. Its gateways default to the first address of each subnet. When
// staticAddresses is false, containers created on it with static addresses
// fail to start as on a Docker network whose subnet the engine chose.
func (r *Runtime) AddNetwork(n container.Network, staticAddresses bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n.ID == "" {
		n.ID = r.newID()
	}
	if n.IPv4Subnet.IsValid() && !n.IPv4Gateway.IsValid() {
		n.IPv4Gateway = container.Gateway(n.IPv4Subnet)
	}
	if n.IPv6Subnet.IsValid() && !n.IPv6Gateway.IsValid() {
		n.IPv6Gateway = container.Gateway(n.IPv6Subnet)
	}
	n.Endpoints = nil
	r.networks[n.Name] = &fakeNetwork{net: n, next: map[bool]netip.Addr{}, noStatic: !staticAddresses}
}

// InspectNetwork implements container.Runtime.
func (r *Runtime) InspectNetwork(ctx context.Context, name string) (container.Network, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpInspectNetwork); err != nil {
		return container.Network{}, err
	}
	n, ok := r.networks[name]
	if !ok {
		return container.Network{}, notFound("inspect", "network", name)
	}
	out := n.net
	out.Endpoints = nil
	for _, c := range r.containers {
		if c.m.Network == name && c.m.State == container.StateRunning {
			out.Endpoints = append(out.Endpoints, container.Endpoint{Name: c.m.Name, IPv4: c.m.IPv4, IPv6: c.m.IPv6})
		}
	}
	sort.Slice(out.Endpoints, func(i, j int) bool { return out.Endpoints[i].Name < out.Endpoints[j].Name })
	return out, nil
}

// OpLocalSubnets names LocalSubnets for FailNext.
const OpLocalSubnets Op = "LocalSubnets"

// LocalSubnets implements container.Runtime: the subnets of the fake's
// networks that are not overlays, sorted by network name.
func (r *Runtime) LocalSubnets(ctx context.Context) ([]netip.Prefix, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpLocalSubnets); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(r.networks))
	for name, n := range r.networks {
		if !n.net.Overlay {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var out []netip.Prefix
	for _, name := range names {
		for _, p := range []netip.Prefix{r.networks[name].net.IPv4Subnet, r.networks[name].net.IPv6Subnet} {
			if p.IsValid() {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// DeleteNetwork implements container.Runtime.
func (r *Runtime) DeleteNetwork(ctx context.Context, name string, owner container.Owner) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpDeleteNetwork); err != nil {
		return err
	}
	n, ok := r.networks[name]
	if !ok {
		return nil
	}
	if !owner.ClusterOwner().Owns(n.net.Labels) {
		return container.NotOwnedError("delete", "network", name, owner.ClusterOwner(), n.net.Labels)
	}
	for _, c := range r.containers {
		if c.m.Network == name {
			return container.NewError("delete", "network", name, container.KindConflict,
				fmt.Errorf("network has active endpoint %q", c.m.Name))
		}
	}
	delete(r.networks, name)
	return nil
}
