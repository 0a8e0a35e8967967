// Machines: the containers of machines and load balancers, from
// CreateMachine (and the engine configuration it builds from a
// MachineSpec) through Start, Stop, Signal and Delete to Inspect and List.

package docker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/go-connections/nat"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// CreateMachine implements container.Runtime.
func (r *Runtime) CreateMachine(ctx context.Context, spec container.MachineSpec) (*container.Machine, error) {
	if spec.Name == "" || spec.Image == "" {
		return nil, container.NewError("create", "container", spec.Name, container.KindInvalid, errors.New("name and image are required"))
	}
	if owner := container.OwnerOf(spec.Labels); !owner.Valid() || owner.Machine == "" {
		return nil, container.NewError("create", "container", spec.Name, container.KindInvalid,
			fmt.Errorf("labels must name a complete owner with a machine, got %s", owner))
	}
	if m, err := r.adopt(ctx, spec); err == nil || !container.IsNotFound(err) {
		return m, err
	}
	cfg, hc, nc := r.configs(spec)
	var err error
	if r.podman {
		err = r.podmanCreate(ctx, spec.Name, cfg, hc, nc)
	} else {
		_, err = r.cli.ContainerCreate(ctx, cfg, hc, nc, nil, spec.Name)
	}
	if err != nil {
		if cerrdefs.IsConflict(err) || container.IsConflict(err) {
			// Lost a race with another creator of the same name.
			return r.adopt(ctx, spec)
		}
		if path, ok := missingBindSource(err); ok {
			return nil, container.NewError("create", "container", spec.Name, container.KindInvalid, &container.HostPathNotFoundError{Path: path})
		}
		return nil, wrap("create", "container", spec.Name, err)
	}
	return r.Inspect(ctx, spec.Name)
}

// missingBindSource reads the host path out of the engine's refusal of a
// bind mount whose source does not exist. The engine says it only in the
// message of an invalid-argument error.
func missingBindSource(err error) (string, bool) {
	const marker = "bind source path does not exist: "
	msg := err.Error()
	i := strings.Index(msg, marker)
	if !cerrdefs.IsInvalidArgument(err) || i < 0 {
		return "", false
	}
	return strings.TrimSpace(msg[i+len(marker):]), true
}

func (r *Runtime) adopt(ctx context.Context, spec container.MachineSpec) (*container.Machine, error) {
	m, err := r.Inspect(ctx, spec.Name)
	if err != nil {
		return nil, err
	}
	if owner := container.OwnerOf(spec.Labels); !owner.Owns(m.Labels) {
		return nil, container.NotOwnedError("adopt", "container", spec.Name, owner, m.Labels)
	}
	return m, nil
}

func (r *Runtime) configs(spec container.MachineSpec) (*dcontainer.Config, *dcontainer.HostConfig, *network.NetworkingConfig) {
	labels := maps.Clone(spec.Labels)
	if spec.Role != "" {
		labels[container.LabelRole] = string(spec.Role)
	}
	if r.podman {
		podmanLabels(labels, spec)
	}
	cfg := &dcontainer.Config{
		Image:        spec.Image,
		Labels:       labels,
		Env:          spec.Env,
		Entrypoint:   spec.Entrypoint,
		Cmd:          spec.Cmd,
		ExposedPorts: nat.PortSet{},
	}
	hc := &dcontainer.HostConfig{
		NetworkMode:  dcontainer.NetworkMode(spec.Network),
		Privileged:   spec.EffectivePrivileged(),
		PortBindings: nat.PortMap{},
		Resources: dcontainer.Resources{
			NanoCPUs: spec.Resources.MilliCPUs * 1_000_000,
			Memory:   spec.Resources.MemoryBytes,
		},
	}
	// Mounts, not Binds: the engine creates the missing host path of a
	// bind as an empty root-owned directory, and refuses a mount's.
	for _, m := range spec.ExtraMounts {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: m.HostPath, Target: m.ContainerPath, ReadOnly: m.ReadOnly})
	}
	for _, p := range spec.PortMappings {
		proto := p.Protocol
		if proto == "" {
			proto = "tcp"
		}
		hostIP := p.HostIP
		if hostIP == "" {
			hostIP = "127.0.0.1"
		}
		port := nat.Port(fmt.Sprintf("%d/%s", p.ContainerPort, proto))
		cfg.ExposedPorts[port] = struct{}{}
		hp := ""
		if p.HostPort != 0 {
			hp = strconv.Itoa(p.HostPort)
		}
		hc.PortBindings[port] = append(hc.PortBindings[port], nat.PortBinding{HostIP: hostIP, HostPort: hp})
	}
	if spec.KindNode {
		cfg.Hostname = spec.Name
		cfg.Volumes = map[string]struct{}{"/var": {}}
		hc.SecurityOpt = []string{"seccomp=unconfined", "apparmor=unconfined"}
		hc.Tmpfs = map[string]string{"/run": "", "/tmp": ""}
		hc.CgroupnsMode = dcontainer.CgroupnsModePrivate
		init := false
		hc.Init = &init
		if r.statHost("/lib/modules") {
			hc.Binds = append(hc.Binds, bind(container.Mount{HostPath: "/lib/modules", ContainerPath: "/lib/modules", ReadOnly: true}))
		}
		if spec.IPFamily.HasIPv6() {
			hc.Sysctls = map[string]string{
				"net.ipv6.conf.all.disable_ipv6": "0",
				"net.ipv6.conf.all.forwarding":   "1",
			}
		}
	}
	switch spec.EffectiveRestartPolicy() {
	case container.RestartUnlessStopped:
		hc.RestartPolicy = dcontainer.RestartPolicy{Name: dcontainer.RestartPolicyUnlessStopped}
	case container.RestartAlways:
		hc.RestartPolicy = dcontainer.RestartPolicy{Name: dcontainer.RestartPolicyAlways}
	}
	nc := &network.NetworkingConfig{}
	if spec.Network != "" && (spec.StaticIPv4.IsValid() || spec.StaticIPv6.IsValid()) {
		ipam := &network.EndpointIPAMConfig{}
		if spec.StaticIPv4.IsValid() {
			ipam.IPv4Address = spec.StaticIPv4.String()
		}
		if spec.StaticIPv6.IsValid() {
			ipam.IPv6Address = spec.StaticIPv6.String()
		}
		nc.EndpointsConfig = map[string]*network.EndpointSettings{spec.Network: {IPAMConfig: ipam}}
	}
	return cfg, hc, nc
}

func bind(m container.Mount) string {
	b := m.HostPath + ":" + m.ContainerPath
	if m.ReadOnly {
		b += ":ro"
	}
	return b
}

// Start implements container.Runtime. The engine claims static addresses
// and fixed host ports only now, so this is where they can be taken.
func (r *Runtime) Start(ctx context.Context, name string, owner container.Owner) error {
	ci, err := r.owned(ctx, "start", name, owner)
	if err != nil {
		return err
	}
	return wrap("start", "container", name, r.cli.ContainerStart(ctx, ci.ID, dcontainer.StartOptions{}))
}

// Stop implements container.Runtime.
func (r *Runtime) Stop(ctx context.Context, name string, owner container.Owner, timeout time.Duration) error {
	ci, err := r.owned(ctx, "stop", name, owner)
	if err != nil {
		return err
	}
	secs := int((timeout + time.Second - 1) / time.Second)
	return wrap("stop", "container", name, r.cli.ContainerStop(ctx, ci.ID, dcontainer.StopOptions{Timeout: &secs}))
}

// Signal implements container.Runtime.
func (r *Runtime) Signal(ctx context.Context, name string, owner container.Owner, signal string) error {
	op := "signal " + signal + " to"
	ci, err := r.owned(ctx, op, name, owner)
	if err != nil {
		return err
	}
	return wrap(op, "container", name, r.cli.ContainerKill(ctx, ci.ID, signal))
}

// Delete implements container.Runtime. Deleting a missing container is not an
// error.
func (r *Runtime) Delete(ctx context.Context, name string, owner container.Owner) error {
	ci, err := r.owned(ctx, "delete", name, owner)
	if container.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	err = r.cli.ContainerRemove(ctx, ci.ID, dcontainer.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil && cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress") {
		return nil
	}
	return wrap("delete", "container", name, err)
}

// Inspect implements container.Runtime.
func (r *Runtime) Inspect(ctx context.Context, name string) (*container.Machine, error) {
	ci, err := r.cli.ContainerInspect(ctx, name)
	if err != nil {
		return nil, wrap("inspect", "container", name, err)
	}
	m := &container.Machine{
		Name: strings.TrimPrefix(ci.Name, "/"),
		ID:   ci.ID,
	}
	if ci.Config != nil {
		m.Image = ci.Config.Image
		m.Labels = ci.Config.Labels
	}
	if ci.State != nil {
		m.State = container.MachineState(ci.State.Status)
		// The engine reports a container that never started with the zero
		// time of its own, which parses to a year-1 time: zero enough.
		m.Started, _ = time.Parse(time.RFC3339Nano, ci.State.StartedAt)
	}
	m.Created, _ = time.Parse(time.RFC3339Nano, ci.Created)
	if ci.HostConfig != nil {
		m.Network = string(ci.HostConfig.NetworkMode)
		m.PortMappings = portMappings(ci.HostConfig.PortBindings)
	}
	if ns := ci.NetworkSettings; ns != nil {
		if r.podman {
			podmanMachine(m, slices.Collect(maps.Keys(ns.Networks)), true)
		}
		setAddresses(m, ns.Networks[m.Network])
		m.Ports = ports(ns.Ports)
	}
	return m, nil
}

// setAddresses reads the container's addresses on its network, and the
// static ones it was created with, which the engine keeps while it is
// stopped.
func setAddresses(m *container.Machine, ep *network.EndpointSettings) {
	if ep == nil {
		return
	}
	m.IPv4, _ = netip.ParseAddr(ep.IPAddress)
	m.IPv6, _ = netip.ParseAddr(ep.GlobalIPv6Address)
	if ep.IPAMConfig != nil {
		m.StaticIPv4, _ = netip.ParseAddr(ep.IPAMConfig.IPv4Address)
		m.StaticIPv6, _ = netip.ParseAddr(ep.IPAMConfig.IPv6Address)
	}
}

// portMappings reads a port map, sorted by container port and host address.
func portMappings(pm nat.PortMap) []container.PortMapping {
	var out []container.PortMapping
	for p, bs := range pm {
		for _, b := range bs {
			hp, _ := strconv.Atoi(b.HostPort)
			out = append(out, container.PortMapping{ContainerPort: p.Int(), Protocol: p.Proto(), HostIP: b.HostIP, HostPort: hp})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ContainerPort != out[j].ContainerPort {
			return out[i].ContainerPort < out[j].ContainerPort
		}
		return out[i].HostIP < out[j].HostIP
	})
	return out
}

// ports reads the bindings the engine made: the same map as the requested
// mappings, reported as PortBindings.
func ports(pm nat.PortMap) []container.PortBinding {
	mappings := portMappings(pm)
	out := make([]container.PortBinding, 0, len(mappings))
	for _, m := range mappings {
		out = append(out, container.PortBinding{ContainerPort: m.ContainerPort, Protocol: m.Protocol, HostIP: m.HostIP, HostPort: m.HostPort})
	}
	return out
}

// List implements container.Runtime.
func (r *Runtime) List(ctx context.Context, labelSelector map[string]string) ([]container.Machine, error) {
	cs, err := r.cli.ContainerList(ctx, dcontainer.ListOptions{All: true, Filters: labelFilters(labelSelector)})
	if err != nil {
		return nil, wrap("list", "containers", fmt.Sprint(labelSelector), err)
	}
	out := make([]container.Machine, 0, len(cs))
	for _, c := range cs {
		if _, ok := c.Labels[container.LabelClusterID]; !ok || !container.MatchesSelector(c.Labels, labelSelector) {
			continue
		}
		m := container.Machine{ID: c.ID, Image: c.Image, Labels: c.Labels, State: container.MachineState(c.State),
			Created: time.Unix(c.Created, 0)}
		if len(c.Names) > 0 {
			m.Name = strings.TrimPrefix(c.Names[0], "/")
		}
		m.Network = c.HostConfig.NetworkMode
		if c.NetworkSettings != nil {
			if r.podman {
				podmanMachine(&m, slices.Collect(maps.Keys(c.NetworkSettings.Networks)), false)
			}
			setAddresses(&m, c.NetworkSettings.Networks[m.Network])
		}
		for _, p := range c.Ports {
			if p.PublicPort != 0 {
				m.Ports = append(m.Ports, container.PortBinding{ContainerPort: int(p.PrivatePort), Protocol: p.Type, HostIP: p.IP, HostPort: int(p.PublicPort)})
			}
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
