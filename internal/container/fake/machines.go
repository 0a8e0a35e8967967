// Machines: the fake's containers, from CreateMachine through Start (which
// takes addresses and host ports as the engine does), Stop, Signal and
// Delete to Inspect and List, and RunForeign and RemoveOutOfBand, which act
// as a user of the engine would.

package fake

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"sort"
	"time"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

type fakeContainer struct {
	m     container.Machine
	spec  container.MachineSpec
	files map[string][]byte
}

// RunForeign starts a container that CAPCT did not make (no CAPCT labels)
// on network, as a user's docker run would, and returns a func removing
// it (runtimetest.ForeignRunner).
func (r *Runtime) RunForeign(_ context.Context, name, network, image string) (remove func(), err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.containers[name]; ok {
		return nil, container.NewError("create", "container", name, container.KindConflict, errors.New("the name is taken"))
	}
	r.containers[name] = &fakeContainer{files: map[string][]byte{}, m: container.Machine{
		Name: name, ID: r.newID(), Image: image, Labels: map[string]string{}, State: container.StateRunning,
		Network: network, Created: r.clock.Now(), Started: r.clock.Now(),
	}}
	return func() { r.RemoveOutOfBand(name) }, nil
}

// RemoveOutOfBand removes the container as `docker rm -f` would behind the
// controllers' back: it emits die (if running) and destroy events.
func (r *Runtime) RemoveOutOfBand(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[name]
	if !ok {
		return false
	}
	r.removeLocked(c)
	return true
}

func (r *Runtime) removeLocked(c *fakeContainer) {
	if c.m.State == container.StateRunning {
		c.m.State = container.StateExited
		r.emitLocked(container.EventDie, c)
	}
	delete(r.containers, c.m.Name)
	r.emitLocked(container.EventDestroy, c)
}

// CreateMachine implements container.Runtime.
func (r *Runtime) CreateMachine(ctx context.Context, spec container.MachineSpec) (*container.Machine, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpCreateMachine); err != nil {
		return nil, err
	}
	if spec.Name == "" || spec.Image == "" {
		return nil, container.NewError("create", "container", spec.Name, container.KindInvalid, errors.New("name and image are required"))
	}
	owner := container.OwnerOf(spec.Labels)
	if !owner.Valid() || owner.Machine == "" {
		return nil, container.NewError("create", "container", spec.Name, container.KindInvalid,
			fmt.Errorf("labels must name a complete owner with a machine, got %s", owner))
	}
	if c, ok := r.containers[spec.Name]; ok {
		if !owner.Owns(c.m.Labels) {
			return nil, container.NotOwnedError("adopt", "container", spec.Name, owner, c.m.Labels)
		}
		return snapshot(c), nil
	}
	if _, ok := r.networks[spec.Network]; !ok && spec.Network != "" {
		return nil, container.NewError("create", "container", spec.Name, container.KindNotFound,
			fmt.Errorf("network %s not found", spec.Network))
	}
	labels := maps.Clone(spec.Labels)
	if spec.Role != "" {
		labels[container.LabelRole] = string(spec.Role)
	}
	c := &fakeContainer{spec: spec, files: map[string][]byte{}, m: container.Machine{
		Name: spec.Name, ID: r.newID(), Image: spec.Image, Labels: labels, State: container.StateCreated,
		Network: spec.Network, Created: r.clock.Now(), StaticIPv4: spec.StaticIPv4, StaticIPv6: spec.StaticIPv6,
	}}
	for _, p := range spec.PortMappings {
		if p.HostIP == "" {
			p.HostIP = container.DefaultHostIP
		}
		if p.Protocol == "" {
			p.Protocol = "tcp"
		}
		c.m.PortMappings = append(c.m.PortMappings, p)
	}
	r.containers[spec.Name] = c
	return snapshot(c), nil
}

func snapshot(c *fakeContainer) *container.Machine {
	m := c.m
	m.Labels = maps.Clone(c.m.Labels)
	m.Ports = append([]container.PortBinding(nil), c.m.Ports...)
	m.PortMappings = append([]container.PortMapping(nil), c.m.PortMappings...)
	return &m
}

// Start implements container.Runtime.
func (r *Runtime) Start(ctx context.Context, name string, owner container.Owner) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpStart); err != nil {
		return err
	}
	c, err := r.owned("start", name, owner)
	if err != nil {
		return err
	}
	if c.m.State == container.StateRunning {
		return nil
	}
	// Like the engine, claim static addresses and fixed host ports only
	// now, and refuse those another running container holds.
	n, onNetwork := r.networks[c.m.Network]
	if err := r.checkStaticLocked(c, n); err != nil {
		return err
	}
	var ports []container.PortBinding
	for _, p := range c.m.PortMappings {
		hp := p.HostPort
		if hp == 0 {
			// Like the engine, pick another free port at every start.
			r.nextPort++
			hp = 32768 + r.nextPort%28000
		} else if holder := r.portHolderLocked(p); holder != "" {
			return container.NewError("start", "container", name, container.KindHostPortInUse, &container.HostPortInUseError{
				HostIP: p.HostIP, HostPort: hp, Protocol: p.Protocol,
				Err: fmt.Errorf("bind for %s:%d failed: port is already allocated (by %s)", p.HostIP, hp, holder)})
		}
		ports = append(ports, container.PortBinding{ContainerPort: p.ContainerPort, Protocol: p.Protocol, HostIP: p.HostIP, HostPort: hp})
	}
	if onNetwork {
		c.m.IPv4, c.m.IPv6 = c.m.StaticIPv4, c.m.StaticIPv6
		if !c.m.IPv4.IsValid() {
			c.m.IPv4 = r.allocLocked(n, n.net.IPv4Subnet, n.net.DynamicIPv4Range, false)
		}
		if !c.m.IPv6.IsValid() {
			c.m.IPv6 = r.allocLocked(n, n.net.IPv6Subnet, n.net.DynamicIPv6Range, true)
		}
	}
	c.m.Ports = ports
	c.m.State = container.StateRunning
	c.m.Started = r.clock.Now()
	r.emitLocked(container.EventStart, c)
	return nil
}

// checkStaticLocked refuses c's static addresses when its network does not
// take them, when they lie outside its subnets, or when a running
// container holds them.
func (r *Runtime) checkStaticLocked(c *fakeContainer, n *fakeNetwork) error {
	static := []netip.Addr{c.m.StaticIPv4, c.m.StaticIPv6}
	if !static[0].IsValid() && !static[1].IsValid() {
		return nil
	}
	if n == nil || n.noStatic {
		return container.NewError("start", "container", c.m.Name, container.KindStaticAddressUnsupported,
			errors.New("user specified IP address is supported only when connecting to networks with user configured subnets"))
	}
	for _, a := range static {
		if !a.IsValid() {
			continue
		}
		subnet := n.net.IPv4Subnet
		if a.Is6() {
			subnet = n.net.IPv6Subnet
		}
		if !subnet.Contains(a) {
			return container.NewError("start", "container", c.m.Name, container.KindInvalid,
				fmt.Errorf("address %s is not in the subnet %s of network %s", a, subnet, n.net.Name))
		}
		for _, o := range r.containers {
			if o != c && o.m.State == container.StateRunning && (o.m.IPv4 == a || o.m.IPv6 == a) {
				return container.NewError("start", "container", c.m.Name, container.KindInUse,
					fmt.Errorf("address already in use: %s is held by %s", a, o.m.Name))
			}
		}
	}
	return nil
}

// portHolderLocked names the running container that publishes p's host
// port with p's protocol on p's address, or on the unspecified address
// (0.0.0.0, ::) when either is: the engine refuses those as taken too.
func (r *Runtime) portHolderLocked(p container.PortMapping) string {
	want := &container.HostPortInUseError{HostIP: p.HostIP, HostPort: p.HostPort, Protocol: p.Protocol}
	for _, o := range r.containers {
		if o.m.State != container.StateRunning {
			continue
		}
		for _, b := range o.m.Ports {
			if want.Matches(container.PortMapping{HostIP: b.HostIP, HostPort: b.HostPort, Protocol: b.Protocol}) {
				return o.m.Name
			}
		}
	}
	return ""
}

// allocLocked returns the next free address of p, inside dynamic when it is
// valid, as the engine does for containers that ask for no address (skipping
// the gateway).
func (r *Runtime) allocLocked(n *fakeNetwork, p, dynamic netip.Prefix, v6 bool) netip.Addr {
	if !p.IsValid() {
		return netip.Addr{}
	}
	pool := p
	if dynamic.IsValid() {
		pool = dynamic
	}
	used := map[netip.Addr]bool{container.Gateway(p): true}
	for _, c := range r.containers {
		used[c.m.IPv4], used[c.m.IPv6] = true, true
	}
	a := n.next[v6]
	if !a.IsValid() || !pool.Contains(a) {
		a = pool.Masked().Addr()
	}
	for range 1 << 16 {
		a = a.Next()
		if !pool.Contains(a) {
			a = pool.Masked().Addr().Next()
		}
		if !used[a] {
			n.next[v6] = a
			return a
		}
	}
	return netip.Addr{}
}

// Stop implements container.Runtime.
func (r *Runtime) Stop(ctx context.Context, name string, owner container.Owner, timeout time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpStop); err != nil {
		return err
	}
	c, err := r.owned("stop", name, owner)
	if err != nil {
		return err
	}
	if c.m.State == container.StateRunning {
		c.m.State = container.StateExited
		c.m.IPv4, c.m.IPv6 = netip.Addr{}, netip.Addr{}
		r.emitLocked(container.EventDie, c)
	}
	return nil
}

// Signal implements container.Runtime: it records the signal (see Signals).
func (r *Runtime) Signal(ctx context.Context, name string, owner container.Owner, signal string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpSignal); err != nil {
		return err
	}
	c, err := r.owned("signal "+signal+" to", name, owner)
	if err != nil {
		return err
	}
	if c.m.State != container.StateRunning {
		return container.NewError("signal "+signal+" to", "container", name, container.KindConflict, fmt.Errorf("container %s is not running", name))
	}
	r.signals = append(r.signals, name+":"+signal)
	return nil
}

// Signals returns the signals sent so far, as "container:SIGNAL".
func (r *Runtime) Signals() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.signals...)
}

// Delete implements container.Runtime. Deleting a missing container is not an
// error.
func (r *Runtime) Delete(ctx context.Context, name string, owner container.Owner) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpDelete); err != nil {
		return err
	}
	c, err := r.owned("delete", name, owner)
	if container.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	r.removeLocked(c)
	return nil
}

// Inspect implements container.Runtime.
func (r *Runtime) Inspect(ctx context.Context, name string) (*container.Machine, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpInspect); err != nil {
		return nil, err
	}
	c, err := r.get("inspect", name)
	if err != nil {
		return nil, err
	}
	return snapshot(c), nil
}

// List implements container.Runtime.
func (r *Runtime) List(ctx context.Context, labelSelector map[string]string) ([]container.Machine, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpList); err != nil {
		return nil, err
	}
	var out []container.Machine
	for _, c := range r.containers {
		if _, ok := c.m.Labels[container.LabelClusterID]; ok && container.MatchesSelector(c.m.Labels, labelSelector) {
			out = append(out, *snapshot(c))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
