// Networks: EnsureNetwork creates a cluster's network on a subnet derived
// from its name, or adopts the one there; InspectNetwork reads a network
// back, LocalSubnets lists the subnets an overlay must keep clear of, and
// DeleteNetwork removes one that its owner owns.

package docker

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/network"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// EnsureNetwork implements container.Runtime.
func (r *Runtime) EnsureNetwork(ctx context.Context, spec container.NetworkSpec) (container.Network, error) {
	if err := spec.Validate(); err != nil {
		return container.Network{}, err
	}
	family := spec.IPFamily
	if family == "" {
		family = container.IPv4
	}
	if n, err := r.adoptNetwork(ctx, spec); err == nil || !container.IsNotFound(err) {
		return n, err
	}
	var lastErr error
	avoid := append(r.defaultBridgeSubnets(ctx), spec.Avoid...)
	for attempt := range container.MaxSubnetAttempts {
		v4, v6 := container.Subnets(spec.Name, attempt)
		if overlapsAny(v4, avoid) || family.HasIPv6() && overlapsAny(v6, avoid) {
			// The bridge driver takes a new network over the default
			// bridge's subnet for proof that the default bridge is stale,
			// and drops it: every container started on it afterwards fails
			// ("network ... does not exist") until the engine restarts. The
			// swarm does not check an overlay against any engine's local
			// networks at all.
			lastErr = container.NewError("create", "network", spec.Name, container.KindPoolOverlap,
				fmt.Errorf("subnet %s overlaps the engine's default bridge or a network to avoid", v4))
			continue
		}
		_, err := r.cli.NetworkCreate(ctx, spec.Name, createOptions(spec, family, v4, v6))
		if err == nil {
			return r.adoptNetwork(ctx, spec)
		}
		if cerrdefs.IsConflict(err) || strings.Contains(err.Error(), "already exists") {
			// Lost a race with another creator: adopt (or refuse) theirs.
			return r.adoptNetwork(ctx, spec)
		}
		lastErr = wrap("create", "network", spec.Name, err)
		if !container.IsPoolOverlap(lastErr) {
			return container.Network{}, lastErr
		}
	}
	return container.Network{}, container.NewError("create", "network", spec.Name, container.KindPoolOverlap,
		fmt.Errorf("all %d derived subnets overlap existing networks: %w", container.MaxSubnetAttempts, lastErr))
}

// encryptedOption is the overlay driver's option that encrypts the
// network's traffic between hosts with IPsec.
const encryptedOption = "encrypted"

// createOptions is what EnsureNetwork asks the engine to create for spec,
// with the subnets v4 and v6.
func createOptions(spec container.NetworkSpec, family container.IPFamily, v4, v6 netip.Prefix) network.CreateOptions {
	ipam := &network.IPAM{Driver: "default"}
	// The engine hands out addresses only from DynamicRange; the rest of
	// each subnet is for the static addresses CAPCT picks.
	if family.HasIPv4() {
		ipam.Config = append(ipam.Config, network.IPAMConfig{Subnet: v4.String(), Gateway: container.Gateway(v4).String(),
			IPRange: container.DynamicRange(v4).String()})
	}
	enable6 := family.HasIPv6()
	if enable6 {
		ipam.Config = append(ipam.Config, network.IPAMConfig{Subnet: v6.String(), Gateway: container.Gateway(v6).String(),
			IPRange: container.DynamicRange(v6).String()})
	}
	opts := network.CreateOptions{
		Driver:     "bridge",
		EnableIPv6: &enable6,
		IPAM:       ipam,
		Labels:     spec.Owner.Labels(),
		Options:    map[string]string{"com.docker.network.bridge.enable_ip_masquerade": "true"},
	}
	if spec.Overlay {
		// Attachable, so that standalone containers (CAPCT's machines, not
		// swarm services) join it. Egress leaves through each host's
		// docker_gwbridge, so there is nothing to masquerade.
		opts.Driver, opts.Attachable, opts.Scope, opts.Options = "overlay", true, "swarm", nil
		if spec.Encrypted {
			opts.Options = map[string]string{encryptedOption: ""}
		}
	}
	return opts
}

// defaultBridgeSubnets are the subnets of the engine's default bridge
// network, or none when it cannot be read.
func (r *Runtime) defaultBridgeSubnets(ctx context.Context) []netip.Prefix {
	ni, err := r.cli.NetworkInspect(ctx, network.NetworkBridge, network.InspectOptions{})
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, c := range ni.IPAM.Config {
		if p, err := netip.ParsePrefix(c.Subnet); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func overlapsAny(p netip.Prefix, others []netip.Prefix) bool {
	for _, o := range others {
		if p.IsValid() && p.Overlaps(o) {
			return true
		}
	}
	return false
}

func (r *Runtime) adoptNetwork(ctx context.Context, spec container.NetworkSpec) (container.Network, error) {
	n, err := r.InspectNetwork(ctx, spec.Name)
	if err != nil {
		return container.Network{}, err
	}
	if err := spec.CheckAdopt(n); err != nil {
		return container.Network{}, err
	}
	if n.Overlay && !n.IPv4Subnet.IsValid() && !n.IPv6Subnet.IsValid() {
		// The swarm's allocator fills an overlay's subnets in a moment
		// after its creation, and the engine reports none until then:
		// handing back a network without them would place no address.
		return container.Network{}, container.NewError("inspect", "network", spec.Name, container.KindTransient,
			errors.New("the swarm has not allocated the overlay's subnets yet"))
	}
	return n, nil
}

// InspectNetwork implements container.Runtime.
func (r *Runtime) InspectNetwork(ctx context.Context, name string) (container.Network, error) {
	ni, err := r.cli.NetworkInspect(ctx, name, network.InspectOptions{})
	if err != nil {
		return container.Network{}, wrap("inspect", "network", name, err)
	}
	if ni.Name != name {
		// NetworkInspect also matches ID prefixes.
		return container.Network{}, container.NewError("inspect", "network", name, container.KindNotFound, errors.New("no such network"))
	}
	n := container.Network{Name: ni.Name, ID: ni.ID, Labels: ni.Labels, Overlay: ni.Scope == "swarm"}
	_, n.Encrypted = ni.Options[encryptedOption]
	if mtu, err := strconv.Atoi(ni.Options["com.docker.network.driver.mtu"]); err == nil && mtu > 0 && mtu != 1500 {
		n.MTU = mtu
	} else if n.Overlay {
		n.MTU = container.OverlayMTU
	}
	for _, c := range ni.IPAM.Config {
		p, err := netip.ParsePrefix(c.Subnet)
		if err != nil {
			continue
		}
		gw, _ := netip.ParseAddr(c.Gateway)
		if !gw.IsValid() {
			// The engine takes the first address when its creator named none.
			gw = container.Gateway(p)
		}
		r, _ := netip.ParsePrefix(c.IPRange)
		if p.Addr().Is4() {
			n.IPv4Subnet, n.IPv4Gateway, n.DynamicIPv4Range = p, gw, r
		} else {
			n.IPv6Subnet, n.IPv6Gateway, n.DynamicIPv6Range = p, gw, r
		}
	}
	for _, ep := range ni.Containers {
		e := container.Endpoint{Name: ep.Name}
		if p, err := netip.ParsePrefix(ep.IPv4Address); err == nil {
			e.IPv4 = p.Addr()
		}
		if p, err := netip.ParsePrefix(ep.IPv6Address); err == nil {
			e.IPv6 = p.Addr()
		}
		n.Endpoints = append(n.Endpoints, e)
	}
	sort.Slice(n.Endpoints, func(i, j int) bool { return n.Endpoints[i].Name < n.Endpoints[j].Name })
	if r.podman {
		if err := r.podmanDynamicRanges(ctx, &n); err != nil {
			return container.Network{}, wrap("inspect", "network", name, err)
		}
	}
	return n, nil
}

// LocalSubnets implements container.Runtime.
func (r *Runtime) LocalSubnets(ctx context.Context) ([]netip.Prefix, error) {
	list, err := r.cli.NetworkList(ctx, network.ListOptions{})
	if err != nil {
		return nil, wrap("list", "networks", "", err)
	}
	return localSubnets(list), nil
}

// localSubnets returns the subnets of the networks in list that are local
// to the engine. It reads only the name, scope and IPAM subnets, which
// Podman's compatible API fills as Docker does (its networks are all
// "local").
func localSubnets(list []network.Summary) []netip.Prefix {
	var out []netip.Prefix
	for _, n := range list {
		// "swarm" networks are the swarm's overlays (ingress and the
		// clusters'), which the swarm keeps apart itself; "global" ones
		// (an overlay of a key-value store) span engines too.
		if n.Scope == "swarm" || n.Scope == "global" {
			continue
		}
		for _, c := range n.IPAM.Config {
			if p, err := netip.ParsePrefix(c.Subnet); err == nil {
				out = append(out, p.Masked())
			}
		}
	}
	return out
}

// DeleteNetwork implements container.Runtime.
func (r *Runtime) DeleteNetwork(ctx context.Context, name string, owner container.Owner) error {
	n, err := r.InspectNetwork(ctx, name)
	if container.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !owner.ClusterOwner().Owns(n.Labels) {
		return container.NotOwnedError("delete", "network", name, owner.ClusterOwner(), n.Labels)
	}
	// By ID: a network re-created under the same name since the inspect is
	// not the one that was checked.
	err = r.cli.NetworkRemove(ctx, n.ID)
	if err != nil && cerrdefs.IsNotFound(err) {
		return nil
	}
	return wrap("delete", "network", name, err)
}
