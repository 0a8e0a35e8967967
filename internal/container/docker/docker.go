// Package docker implements container.Runtime on the Docker Engine API. It is
// the only package of the repository that imports the Docker client.
package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/swarm"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/docker/go-connections/nat"
	"k8s.io/utils/clock"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// Runtime is container.Runtime on a Docker Engine.
type Runtime struct {
	cli   *client.Client
	clock clock.WithTicker
	// statHost reports whether a host path exists (for /lib/modules).
	statHost func(string) bool
	// podman hides where Podman's compatible API differs (podman.go).
	podman bool
}

var _ container.Runtime = (*Runtime)(nil)

// Option configures New.
type Option func(*options)

type options struct {
	clientOpts []client.Opt
	clock      clock.WithTicker
	podman     bool
	remoteHost bool
}

// WithClientOpts adds Docker client options after client.FromEnv (e.g.
// client.WithHost to point elsewhere than DOCKER_HOST).
func WithClientOpts(opts ...client.Opt) Option {
	return func(o *options) { o.clientOpts = append(o.clientOpts, opts...) }
}

// WithRemoteHost says the engine runs on another host than the manager, so
// that the manager's own files say nothing of the engine's host: a node
// container there always gets the host's /lib/modules (read-only), as kind
// gives it, since every Linux host Docker runs on has one and the API
// cannot look.
func WithRemoteHost() Option { return func(o *options) { o.remoteHost = true } }

// WithClock sets the clock used for event-stream backoff.
func WithClock(c clock.WithTicker) Option { return func(o *options) { o.clock = c } }

// New returns a Runtime talking to the engine named by the environment
// (DOCKER_HOST, DOCKER_API_VERSION, DOCKER_CERT_PATH, DOCKER_TLS_VERIFY),
// negotiating the API version down to what the engine speaks. It does not
// contact the engine.
func New(opts ...Option) (*Runtime, error) {
	o := options{clock: clock.RealClock{}}
	for _, opt := range opts {
		opt(&o)
	}
	copts := append([]client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}, o.clientOpts...)
	cli, err := client.NewClientWithOpts(copts...)
	if err != nil {
		return nil, container.NewError("create", "docker client", "", container.KindInvalid, err)
	}
	statHost := func(p string) bool {
		_, err := os.Stat(p)
		return err == nil
	}
	if o.remoteHost {
		statHost = func(string) bool { return true }
	}
	return &Runtime{cli: cli, clock: o.clock, podman: o.podman, statHost: statHost}, nil
}

// Client returns the underlying Docker client (for tests and benchmarks).
func (r *Runtime) Client() *client.Client { return r.cli }

// Close releases the client's resources.
func (r *Runtime) Close() error { return r.cli.Close() }

// wrap classifies an engine error.
func wrap(op, object, name string, err error) error {
	if err == nil {
		return nil
	}
	var ce *container.Error
	if errors.As(err, &ce) {
		return err
	}
	return container.NewError(op, object, name, classify(err), err)
}

func classify(err error) container.ErrorKind {
	switch {
	// The engine gives these the status codes of other kinds (forbidden,
	// invalid argument): only the message tells them apart.
	case isInUse(err):
		return container.KindInUse
	case strings.Contains(err.Error(), "user specified IP address is supported only"):
		return container.KindStaticAddressUnsupported
	case cerrdefs.IsNotFound(err):
		return container.KindNotFound
	case cerrdefs.IsConflict(err):
		return container.KindConflict
	case cerrdefs.IsInvalidArgument(err):
		if isPoolOverlap(err) {
			return container.KindPoolOverlap
		}
		return container.KindInvalid
	case isPoolOverlap(err):
		return container.KindPoolOverlap
	case client.IsErrConnectionFailed(err), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOENT):
		return container.KindUnreachable
	case cerrdefs.IsUnavailable(err), cerrdefs.IsDeadlineExceeded(err), errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF):
		return container.KindTransient
	}
	return container.KindUnknown
}

// isInUse recognises the engine's refusals of a static address ("Address
// already in use") and of a fixed host port ("Bind for 127.0.0.1:32768
// failed: port is already allocated"), which it reports at start.
func isInUse(err error) bool {
	m := strings.ToLower(err.Error())
	return strings.Contains(m, "address already in use") || strings.Contains(m, "port is already allocated") ||
		isPodmanInUse(err)
}

func isPoolOverlap(err error) bool {
	m := strings.ToLower(err.Error())
	return strings.Contains(m, "pool overlaps") || strings.Contains(m, "overlapping") ||
		strings.Contains(m, "overlaps with") || isPodmanSubnetUsed(m)
}

// ---- networks ----

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

// ---- containers ----

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

// owned inspects the container and checks that owner owns it before op
// changes it. The caller acts on the returned ID, not the name, so that a
// container re-created under the same name in between is not touched.
func (r *Runtime) owned(ctx context.Context, op, name string, owner container.Owner) (dcontainer.InspectResponse, error) {
	ci, err := r.cli.ContainerInspect(ctx, name)
	if err != nil {
		return ci, wrap(op, "container", name, err)
	}
	var labels map[string]string
	if ci.Config != nil {
		labels = ci.Config.Labels
	}
	if !owner.Owns(labels) {
		return ci, container.NotOwnedError(op, "container", name, owner, labels)
	}
	return ci, nil
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

func labelFilters(selector map[string]string) filters.Args {
	f := filters.NewArgs(filters.Arg("label", container.LabelClusterID))
	for k, v := range selector {
		f.Add("label", k+"="+v)
	}
	return f
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

// ---- exec and files ----

// Exec implements container.Runtime. On timeout it returns an error for which
// container.IsTimeout is true and closes the connection; the Docker API has no
// call to kill an exec'd process, so it may be left running in the container.
func (r *Runtime) Exec(ctx context.Context, name string, owner container.Owner, in container.ExecInput) (container.ExecResult, error) {
	ci, err := r.owned(ctx, execOp(in), name, owner)
	if err != nil {
		return container.ExecResult{}, err
	}
	return r.exec(ctx, ci.ID, name, in)
}

// execOp names an exec for errors by its program only: the arguments of
// `sh -c` are a script.
func execOp(in container.ExecInput) string {
	if len(in.Cmd) == 0 {
		return "exec in"
	}
	return "exec " + strconv.Quote(in.Cmd[0]) + " in"
}

// exec runs a command without the ownership check, for the calls that made
// it already: in the container id they checked (a container re-created
// under the same name since is not it); name is for errors.
func (r *Runtime) exec(ctx context.Context, id, name string, in container.ExecInput) (container.ExecResult, error) {
	if len(in.Cmd) == 0 {
		return container.ExecResult{}, container.NewError("exec in", "container", name, container.KindInvalid, errors.New("empty command"))
	}
	op := execOp(in)
	if in.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, in.Timeout)
		defer cancel()
	}
	timedOut := func(err error) error {
		if in.Timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return container.NewError(op, "container", name, container.KindTimeout,
				fmt.Errorf("command did not finish within %s: %w", in.Timeout, errors.Join(context.DeadlineExceeded, err)))
		}
		return wrap(op, "container", name, err)
	}
	created, err := r.cli.ContainerExecCreate(ctx, id, dcontainer.ExecOptions{
		Cmd: in.Cmd, Env: in.Env, User: in.User,
		AttachStdin: in.Stdin != nil, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return container.ExecResult{}, timedOut(err)
	}
	hj, err := r.cli.ContainerExecAttach(ctx, created.ID, dcontainer.ExecAttachOptions{})
	if err != nil {
		return container.ExecResult{}, timedOut(err)
	}
	defer hj.Close()

	stdinErr := make(chan error, 1)
	if in.Stdin != nil {
		go func() {
			_, err := io.Copy(hj.Conn, in.Stdin)
			if cerr := hj.CloseWrite(); err == nil {
				err = cerr
			}
			stdinErr <- err
		}()
	} else {
		stdinErr <- nil
	}
	stdout, stderr := &container.TailBuffer{Limit: in.OutputLimit()}, &container.TailBuffer{Limit: in.OutputLimit()}
	outDone := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(stdout, stderr, hj.Reader)
		outDone <- err
	}()
	select {
	case err = <-outDone:
	case <-ctx.Done():
		hj.Close()
		// The copy ends on the closed connection; its error says only
		// that, and ctx's says why.
		<-outDone //nolint:errcheck // the closed connection's error, explained by ctx's
		return container.ExecResult{}, timedOut(ctx.Err())
	}
	if err != nil {
		return container.ExecResult{}, timedOut(err)
	}
	select {
	case err = <-stdinErr:
		// A command that exits without reading all of stdin breaks the pipe;
		// that is its business, not an error of Exec.
		_ = err
	default:
	}
	ei, err := r.cli.ContainerExecInspect(ctx, created.ID)
	if err != nil {
		return container.ExecResult{}, timedOut(err)
	}
	return container.ExecResult{ExitCode: ei.ExitCode, Stdout: stdout.Bytes(), Stderr: stderr.Bytes(),
		Truncated: stdout.Truncated() || stderr.Truncated()}, nil
}

// WriteFile implements container.Runtime: it sends a tar holding the missing
// parent directories and the file to the engine's archive API.
func (r *Runtime) WriteFile(ctx context.Context, name string, owner container.Owner, p string, content []byte, mode os.FileMode) error {
	op := "write " + strconv.Quote(p) + " in"
	if !path.IsAbs(p) || path.Clean(p) == "/" {
		return container.NewError(op, "container", name, container.KindInvalid, errors.New("path must be absolute and name a file"))
	}
	p = path.Clean(p)
	ci, err := r.owned(ctx, op, name, owner)
	if err != nil {
		return err
	}
	// By ID from here on: a container re-created under the same name
	// since the check is not the one that was checked.
	if onTmpfs(ci, p) {
		return r.writeFileByExec(ctx, op, ci.ID, name, p, content, mode)
	}
	// Find the missing parents so existing directories keep their modes.
	var missing []string
	for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
		_, err := r.cli.ContainerStatPath(ctx, ci.ID, dir)
		if err == nil {
			break
		}
		if !cerrdefs.IsNotFound(err) {
			return wrap(op, "container", name, err)
		}
		missing = append(missing, dir)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	for i := len(missing) - 1; i >= 0; i-- {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(missing[i], "/") + "/", Mode: 0o755, ModTime: now}); err != nil {
			return container.NewError(op, "container", name, container.KindUnknown, err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: int64(mode.Perm()), Size: int64(len(content)), ModTime: now}); err != nil {
		return container.NewError(op, "container", name, container.KindUnknown, err)
	}
	if _, err := tw.Write(content); err != nil {
		return container.NewError(op, "container", name, container.KindUnknown, err)
	}
	if err := tw.Close(); err != nil {
		return container.NewError(op, "container", name, container.KindUnknown, err)
	}
	return wrap(op, "container", name, r.cli.CopyToContainer(ctx, ci.ID, "/", &buf, dcontainer.CopyToContainerOptions{}))
}

// ReadFile implements container.Runtime. It reads only a container that a
// CAPCT machine owns, and reads the one it checked, by ID.
func (r *Runtime) ReadFile(ctx context.Context, name, p string) ([]byte, error) {
	op := "read " + strconv.Quote(p) + " in"
	ci, err := r.cli.ContainerInspect(ctx, name)
	if err != nil {
		return nil, wrap(op, "container", name, err)
	}
	var labels map[string]string
	if ci.Config != nil {
		labels = ci.Config.Labels
	}
	if err := container.CheckMachineContainer(op, name, labels); err != nil {
		return nil, err
	}
	if onTmpfs(ci, path.Clean(p)) {
		return r.readFileByExec(ctx, op, ci.ID, name, path.Clean(p))
	}
	rc, _, err := r.cli.CopyFromContainer(ctx, ci.ID, p)
	if err != nil {
		return nil, wrap(op, "container", name, err)
	}
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("archive holds no file")
			}
			return nil, wrap(op, "container", name, err)
		}
		if h.Typeflag == tar.TypeDir {
			return nil, container.NewError(op, "container", name, container.KindInvalid, errors.New("is a directory"))
		}
		if h.Typeflag == tar.TypeReg {
			if h.Size > container.MaxFileSize {
				return nil, tooLarge(op, name)
			}
			b, err := io.ReadAll(io.LimitReader(tr, container.MaxFileSize+1))
			if err != nil {
				return nil, wrap(op, "container", name, err)
			}
			if len(b) > container.MaxFileSize {
				return nil, tooLarge(op, name)
			}
			return b, nil
		}
	}
}

// Info implements container.Runtime. An engine whose swarm state is
// anything but active (inactive, pending, error, locked) is in no swarm
// that CAPCT could use.
func (r *Runtime) Info(ctx context.Context) (container.EngineInfo, error) {
	info, err := r.cli.Info(ctx)
	if err != nil {
		return container.EngineInfo{}, wrap("inspect", "engine", r.cli.DaemonHost(), err)
	}
	out := container.EngineInfo{Version: info.ServerVersion}
	if info.Swarm.LocalNodeState == swarm.LocalNodeStateActive {
		out.Swarm = &container.SwarmInfo{NodeID: info.Swarm.NodeID, Manager: info.Swarm.ControlAvailable, NodeAddr: info.Swarm.NodeAddr}
		if info.Swarm.Cluster != nil {
			out.Swarm.ClusterID = info.Swarm.Cluster.ID
		}
	}
	return out, nil
}

// ---- images ----

// ImageExists implements container.Runtime.
func (r *Runtime) ImageExists(ctx context.Context, ref string) (bool, error) {
	_, err := r.cli.ImageInspect(ctx, ref)
	if err == nil {
		return true, nil
	}
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	return false, wrap("inspect", "image", ref, err)
}

// ImageID implements container.Runtime.
func (r *Runtime) ImageID(ctx context.Context, ref string) (string, error) {
	ii, err := r.cli.ImageInspect(ctx, ref)
	if err != nil {
		return "", wrap("inspect", "image", ref, err)
	}
	return ii.ID, nil
}

// TagImage implements container.Runtime. The check and the tag are two
// calls: a tag set by someone else in between is moved, which the caller's
// ImageID afterwards shows.
func (r *Runtime) TagImage(ctx context.Context, id, ref string) error {
	have, err := r.ImageID(ctx, ref)
	switch {
	case err == nil && have == id:
		return nil
	case err == nil:
		return container.NewError("tag", "image", ref, container.KindConflict,
			fmt.Errorf("refusing to move the tag to image %s: it names image %s", id, have))
	case !container.IsNotFound(err):
		return err
	}
	return wrap("tag", "image", ref, r.cli.ImageTag(ctx, id, ref))
}

// SaveImages implements container.Runtime.
func (r *Runtime) SaveImages(ctx context.Context, refs []string) (io.ReadCloser, error) {
	rc, err := r.cli.ImageSave(ctx, refs)
	if err != nil {
		return nil, wrap("save", "images", strings.Join(refs, ","), err)
	}
	return rc, nil
}

// LoadImages implements container.Runtime.
func (r *Runtime) LoadImages(ctx context.Context, tarball io.Reader) error {
	resp, err := r.cli.ImageLoad(ctx, tarball, client.ImageLoadWithQuiet(true))
	if err != nil {
		return wrap("load", "image", "archive", err)
	}
	defer func() { _ = resp.Body.Close() }()
	dec := json.NewDecoder(resp.Body)
	for {
		var msg struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err != nil {
			if err == io.EOF {
				return nil
			}
			return wrap("load", "image", "archive", err)
		}
		if msg.Error != "" {
			return container.NewError("load", "image", "archive", container.KindUnknown, errors.New(msg.Error))
		}
	}
}

// ---- events ----

// Events implements container.Runtime. Stream errors (the engine stopping
// or restarting among them) are retried with an exponential backoff (100ms
// doubling to 5s) timed by the injected clock, resuming from the last event
// seen, or from the moment the stream first opened when none was, so that
// the events in between are not lost as long as the engine still holds them
// (a restarted engine holds those since its start: the restarts of
// containers under their restart policies).
func (r *Runtime) Events(ctx context.Context, labelSelector map[string]string) (<-chan container.Event, error) {
	// Fail fast when the engine is not there at all; container.WatchEvents
	// retries. A versioned request, not a ping: it settles the client's API
	// version negotiation first, which the client's event stream reads
	// without the lock the negotiation writes under (a data race when the
	// stream opens before any other call, as on a newly connected engine).
	if _, err := r.cli.ServerVersion(ctx); err != nil {
		return nil, wrap("watch", "events", fmt.Sprint(labelSelector), err)
	}
	f := labelFilters(labelSelector)
	f.Add("type", string(events.ContainerEventType))
	for _, a := range []container.EventType{container.EventStart, container.EventDie, container.EventDestroy} {
		f.Add("event", r.eventName(a))
	}
	out := make(chan container.Event, 64)
	opened := r.clock.Now()
	since := ""
	go func() {
		defer close(out)
		backoff := 100 * time.Millisecond
		for {
			sctx, cancel := context.WithCancel(ctx)
			msgs, errs := r.cli.Events(sctx, events.ListOptions{Filters: f, Since: since})
			var received bool
			since, received = r.forwardEvents(ctx, msgs, errs, labelSelector, out, since)
			if received {
				backoff = 100 * time.Millisecond
			}
			cancel()
			if ctx.Err() != nil {
				return
			}
			if since == "" {
				since = fmt.Sprintf("%d.%09d", opened.Unix(), opened.Nanosecond())
			}
			t := r.clock.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
			backoff = min(backoff*2, 5*time.Second)
		}
	}()
	return out, nil
}

// forwardEvents sends the events of one stream that match labelSelector to
// out, until the stream or ctx ends. It returns where a new stream resumes,
// just after the last event received (since when none came), and whether
// any came, which resets the reconnects' backoff.
func (r *Runtime) forwardEvents(ctx context.Context, msgs <-chan events.Message, errs <-chan error,
	labelSelector map[string]string, out chan<- container.Event, since string) (string, bool) {
	received := false
	for {
		select {
		case <-ctx.Done():
			return since, received
		case <-errs: //nolint:errcheck // whatever ended the stream, Events reconnects from the last event seen
			return since, received
		case m := <-msgs:
			received = true
			// Resume strictly after this event after a reconnect.
			if m.TimeNano > 0 {
				since = fmt.Sprintf("%d.%09d", (m.TimeNano+1)/1e9, (m.TimeNano+1)%1e9)
			}
			ev, ok := r.event(m, labelSelector)
			if !ok {
				continue
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return since, received
			}
		}
	}
}

// event is the engine's event m as the seam's, and whether its container's
// labels match labelSelector. The event's attributes hold the container's
// labels and keys of the engine's own (notLabels).
func (r *Runtime) event(m events.Message, labelSelector map[string]string) (container.Event, bool) {
	attrs := m.Actor.Attributes
	labels := map[string]string{}
	for k, v := range attrs {
		if !notLabels[k] {
			labels[k] = v
		}
	}
	if !container.MatchesSelector(labels, labelSelector) {
		return container.Event{}, false
	}
	return container.Event{Type: r.eventType(string(m.Action)), Name: attrs["name"], ID: m.Actor.ID,
		Labels: labels, Time: time.Unix(0, m.TimeNano)}, true
}

// onTmpfs reports whether p lies on one of the container's tmpfs mounts
// (a node's /run and /tmp). The engine's archive API reads and writes the
// container's root file system underneath such mounts, where the container
// does not see them, so files there go through exec instead.
func onTmpfs(info dcontainer.InspectResponse, p string) bool {
	under := func(mount string) bool {
		mount = path.Clean(mount)
		return p == mount || strings.HasPrefix(p, strings.TrimSuffix(mount, "/")+"/")
	}
	if info.HostConfig != nil {
		for mount := range info.HostConfig.Tmpfs {
			if under(mount) {
				return true
			}
		}
	}
	for _, m := range info.Mounts {
		if m.Type == mount.TypeTmpfs && under(m.Destination) {
			return true
		}
	}
	return false
}

// writeFileByExec writes a file with the container's own shell. The path
// and mode are passed as arguments, never spliced into the script.
func (r *Runtime) writeFileByExec(ctx context.Context, op, id, name, p string, content []byte, mode os.FileMode) error {
	res, err := r.exec(ctx, id, name, container.ExecInput{
		Cmd:   []string{"sh", "-c", `mkdir -p "$(dirname "$1")" && cat > "$1" && chmod "$2" "$1"`, "sh", p, strconv.FormatUint(uint64(mode.Perm()), 8)},
		Stdin: bytes.NewReader(content),
	})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return container.NewError(op, "container", name, container.KindUnknown,
			fmt.Errorf("exit code %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr))))
	}
	return nil
}

// readFileByExec reads a file with the container's own cat.
func (r *Runtime) readFileByExec(ctx context.Context, op, id, name, p string) ([]byte, error) {
	res, err := r.exec(ctx, id, name, container.ExecInput{Cmd: []string{"cat", "--", p}, MaxOutput: container.MaxFileSize})
	if err != nil {
		return nil, err
	}
	if res.Truncated {
		return nil, tooLarge(op, name)
	}
	if res.ExitCode != 0 {
		kind := container.KindUnknown
		if strings.Contains(string(res.Stderr), "No such file") {
			kind = container.KindNotFound
		}
		return nil, container.NewError(op, "container", name, kind,
			fmt.Errorf("exit code %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr))))
	}
	return res.Stdout, nil
}

func tooLarge(op, name string) error {
	return container.NewError(op, "container", name, container.KindInvalid,
		fmt.Errorf("the file is larger than %d bytes", container.MaxFileSize))
}
