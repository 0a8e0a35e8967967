package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"

	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// Podman serves the Docker Engine API too (`podman system service`), and
// this backend drives it through that API: the calls CAPCT makes are the
// same, and one implementation of the seam is one place for each concern.
// Where Podman 4.3's compatible API behaves differently, the functions of
// this file hide it; docs/runtime.md lists the differences:
//
//   - It ignores the cgroup namespace asked for at create, which a node
//     needs on a cgroup v1 host: containers are created through Podman's
//     own API instead (see podmanSpec), from the same configuration.
//   - It does not report what a container was created with: the image
//     reference as given (it qualifies short names), the static
//     addresses (IPAMConfig is always null) and the host ports asked for
//     (it picks a port for HostPort 0 at create, and reports that one as
//     configured). The backend records the request in a label of its own
//     (labelRequested) and reports from it.
//   - It reports NetworkMode "bridge" for a container on a user-defined
//     network: the network is the one key of NetworkSettings.Networks.
//   - It does not report a network's IPRange through the compatible API;
//     its own (libpod) API has it as the subnet's lease range.
//   - Its events are Podman's: "died" and "remove" where Docker says "die"
//     and "destroy", with attributes that are not labels.
//   - It refuses a static address held by another container, and a subnet
//     that is in use, with messages of its own (isPodmanInUse,
//     isPodmanSubnetUsed).

// DefaultPodmanHost is where rootful `podman system service` listens by
// default (podman.socket, and hack/ensure-podman.sh).
const DefaultPodmanHost = "unix:///run/podman/podman.sock"

// PodmanHostEnv names the engine's socket as Podman's own remote client
// reads it, so that a user of podman --remote needs no second setting.
const PodmanHostEnv = "CONTAINER_HOST"

// WithPodman makes the Runtime speak to Podman's Docker-compatible API,
// hiding where it differs from Docker's (see the top of podman.go).
func WithPodman() Option { return func(o *options) { o.podman = true } }

// NewPodman returns a Runtime on the Podman service named by CONTAINER_HOST,
// or on DefaultPodmanHost. DOCKER_HOST does not apply: both engines may run
// on one host, and the Docker one keeps its variable. It does not contact
// the engine.
func NewPodman(opts ...Option) (*Runtime, error) {
	host := os.Getenv(PodmanHostEnv)
	if host == "" {
		host = DefaultPodmanHost
	}
	return New(append([]Option{WithClientOpts(client.WithHost(host)), WithPodman()}, opts...)...)
}

// labelRequested records, on a container that the Podman backend creates,
// what it asked the engine for and the engine does not report back.
const labelRequested = "io.x-k8s.capct.podman.requested"

// requested is the value of labelRequested.
type requested struct {
	// Image is the reference as CAPCT gave it: Podman reports short names
	// qualified (docker.io/capct/node:v1.35.4 for capct/node:v1.35.4).
	Image        string                  `json:"image,omitempty"`
	StaticIPv4   netip.Addr              `json:"ipv4,omitzero"`
	StaticIPv6   netip.Addr              `json:"ipv6,omitzero"`
	PortMappings []container.PortMapping `json:"ports,omitempty"`
}

// podmanLabels adds labelRequested to the labels of a container about to be
// created from spec, with the port mappings as Docker would report them
// (the defaults filled in).
func podmanLabels(labels map[string]string, spec container.MachineSpec) {
	req := requested{Image: spec.Image, StaticIPv4: spec.StaticIPv4, StaticIPv6: spec.StaticIPv6}
	for _, p := range spec.PortMappings {
		if p.Protocol == "" {
			p.Protocol = "tcp"
		}
		if p.HostIP == "" {
			p.HostIP = "127.0.0.1"
		}
		req.PortMappings = append(req.PortMappings, p)
	}
	// Addresses and numbers always marshal.
	b, _ := json.Marshal(req)
	labels[labelRequested] = string(b)
}

// podmanMachine corrects a machine read from Podman: the network it is on,
// its static addresses and configured ports from labelRequested, and its
// labels without that one. networks are the keys of the container's
// NetworkSettings.Networks; configured says whether m reports PortMappings
// (Inspect does, List does not).
func podmanMachine(m *container.Machine, networks []string, configured bool) {
	if (m.Network == "" || m.Network == "bridge" || m.Network == "default") && len(networks) == 1 {
		m.Network = networks[0]
	}
	raw, ok := m.Labels[labelRequested]
	if !ok {
		return
	}
	m.Labels = maps.Clone(m.Labels)
	delete(m.Labels, labelRequested)
	var req requested
	if json.Unmarshal([]byte(raw), &req) != nil {
		return
	}
	m.StaticIPv4, m.StaticIPv6 = req.StaticIPv4, req.StaticIPv6
	if req.Image != "" {
		m.Image = req.Image
	}
	if configured {
		m.PortMappings = req.PortMappings
	}
}

// podmanEvents maps the events CAPCT watches to Podman's names for them.
var podmanEvents = map[container.EventType]string{
	container.EventStart:   "start",
	container.EventDie:     "died",
	container.EventDestroy: "remove",
}

// eventName is the engine's name of event t.
func (r *Runtime) eventName(t container.EventType) string {
	if r.podman {
		return podmanEvents[t]
	}
	return string(t)
}

// eventType is the container.EventType of the engine's action.
func (r *Runtime) eventType(action string) container.EventType {
	if r.podman {
		for t, name := range podmanEvents {
			if name == action {
				return t
			}
		}
	}
	return container.EventType(action)
}

// notLabels are event attributes that are not container labels: Docker's,
// and those Podman adds.
var notLabels = map[string]bool{
	"name": true, "image": true, "exitCode": true, "signal": true, "execDuration": true,
	"containerExitCode": true, "podId": true, labelRequested: true,
}

// podmanNetwork is the part of libpod's network inspect that the compatible
// API leaves out.
type podmanNetwork struct {
	Subnets []struct {
		Subnet     string `json:"subnet"`
		LeaseRange *struct {
			StartIP string `json:"start_ip"`
			EndIP   string `json:"end_ip"`
		} `json:"lease_range"`
	} `json:"subnets"`
}

// podmanDynamicRanges reads the lease ranges of network name through
// Podman's own API and sets them on n as the prefixes they span.
func (r *Runtime) podmanDynamicRanges(ctx context.Context, n *container.Network) error {
	var pn podmanNetwork
	// By ID: Podman answers the compatible API's "bridge" with its default
	// network, whose name is "podman".
	if err := r.libpodGet(ctx, "/networks/"+url.PathEscape(n.ID)+"/json", &pn); err != nil {
		return err
	}
	for _, s := range pn.Subnets {
		if s.LeaseRange == nil {
			continue
		}
		start, err1 := netip.ParseAddr(s.LeaseRange.StartIP)
		end, err2 := netip.ParseAddr(s.LeaseRange.EndIP)
		if err1 != nil || err2 != nil {
			continue
		}
		p := spanning(start, end)
		if start.Is4() {
			n.DynamicIPv4Range = p
		} else {
			n.DynamicIPv6Range = p
		}
	}
	return nil
}

// spanning is the smallest prefix holding both a and b. Podman keeps a range
// as its first and last address (the first host address of the prefix
// asked for, and the last one).
func spanning(a, b netip.Addr) netip.Prefix {
	bits := a.BitLen()
	for ; bits > 0; bits-- {
		p, err := a.Prefix(bits)
		if err == nil && p.Contains(b) {
			return p
		}
	}
	p, _ := a.Prefix(0)
	return p
}

// libpodGet reads path of Podman's own API into out.
func (r *Runtime) libpodGet(ctx context.Context, path string, out any) error {
	return r.libpod(ctx, http.MethodGet, path, nil, out)
}

// libpod calls path of Podman's own API (v4, which Podman 4.x serves) on
// the connection of the Docker client, sending in as JSON when not nil and
// decoding the answer into out when not nil. A refusal is a *container.Error
// of the kind its status says (404 not found, 409 conflict).
func (r *Runtime) libpod(ctx context.Context, method, path string, in, out any) error {
	host, err := client.ParseHostURL(r.cli.DaemonHost())
	if err != nil {
		return err
	}
	u := url.URL{Scheme: "http", Host: host.Host, Path: "/v4.0.0/libpod" + path}
	if host.Scheme == "unix" || host.Scheme == "npipe" {
		// The client's transport dials the socket whatever the URL's host.
		u.Host = "podman"
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.cli.HTTPClient().Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var msg struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(answer, &msg)
		kind := container.KindUnknown
		switch {
		case resp.StatusCode == http.StatusNotFound:
			kind = container.KindNotFound
		case resp.StatusCode == http.StatusConflict, strings.Contains(msg.Message, "name is already in use"):
			kind = container.KindConflict
		}
		return container.NewError(strings.ToLower(method), "podman API", path, kind,
			fmt.Errorf("%s: %s", resp.Status, msg.Message))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(answer, out); err != nil {
		return fmt.Errorf("failed to decode podman API %s: %w", path, err)
	}
	return nil
}

// isPodmanInUse recognises Podman's refusal of a static address that another
// container holds ("IPAM error: requested ip address ... is already
// allocated to container ID ...").
func isPodmanInUse(err error) bool {
	return strings.Contains(strings.ToLower(err.Error()), "is already allocated to container")
}

// NewEngine returns a Runtime on engine: New for Docker, NewPodman for
// Podman.
func NewEngine(engine container.Engine, opts ...Option) (*Runtime, error) {
	switch engine {
	case container.EngineDocker, "":
		return New(opts...)
	case container.EnginePodman:
		return NewPodman(opts...)
	}
	return nil, container.NewError("create", "engine client", string(engine), container.KindInvalid,
		fmt.Errorf("unknown container engine %q", engine))
}

// isPodmanSubnetUsed recognises Podman's refusal of a subnet that another
// network or a route of the host holds ("subnet 172.17.64.0/20 is already
// used on the host or by another config"): Podman checks the host's routes,
// so a Docker network on the same host counts, and the next derived subnet
// is tried. m is the lower-cased message.
func isPodmanSubnetUsed(m string) bool {
	return strings.Contains(m, "is already used on the host or by another config")
}

// ---- create through libpod ----

// Podman 4.3's compatible API ignores HostConfig.CgroupnsMode, and on a
// cgroup v1 host a node container then shares the host's cgroup namespace,
// where its kubelet fails ("cgroup [kubelet] has some missing paths").
// Podman's own create call honours it, so the Podman backend creates
// containers there, from the very configuration that configs builds for
// Docker: what a machine gets is decided in one place, and podmanSpec only
// translates it.

// podmanSpec is the part of libpod's SpecGenerator (Podman 4.x) that CAPCT
// sets.
type podmanSpec struct {
	Name           string                       `json:"name"`
	Image          string                       `json:"image"`
	Hostname       string                       `json:"hostname,omitempty"`
	Labels         map[string]string            `json:"labels,omitempty"`
	Env            map[string]string            `json:"env,omitempty"`
	Entrypoint     []string                     `json:"entrypoint,omitempty"`
	Command        []string                     `json:"command,omitempty"`
	Privileged     bool                         `json:"privileged,omitempty"`
	Seccomp        string                       `json:"seccomp_profile_path,omitempty"`
	AppArmor       string                       `json:"apparmor_profile,omitempty"`
	CgroupNS       *podmanNamespace             `json:"cgroupns,omitempty"`
	NetNS          *podmanNamespace             `json:"netns,omitempty"`
	Networks       map[string]podmanNetworkOpts `json:"Networks,omitempty"`
	PortMappings   []podmanPortMapping          `json:"portmappings,omitempty"`
	Mounts         []podmanMount                `json:"mounts,omitempty"`
	Volumes        []podmanVolume               `json:"volumes,omitempty"`
	RestartPolicy  string                       `json:"restart_policy,omitempty"`
	Sysctl         map[string]string            `json:"sysctl,omitempty"`
	ResourceLimits *podmanResources             `json:"resource_limits,omitempty"`
	Init           bool                         `json:"init,omitempty"`
}

type podmanNamespace struct {
	NSMode string `json:"nsmode"`
	Value  string `json:"value,omitempty"`
}

type podmanNetworkOpts struct {
	StaticIPs []string `json:"static_ips,omitempty"`
}

type podmanPortMapping struct {
	HostIP        string `json:"host_ip,omitempty"`
	ContainerPort uint16 `json:"container_port"`
	HostPort      uint16 `json:"host_port,omitempty"`
	Protocol      string `json:"protocol,omitempty"`
}

type podmanMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type podmanVolume struct {
	Name    string   `json:"Name"`
	Dest    string   `json:"Dest"`
	Options []string `json:"Options"`
}

type podmanResources struct {
	Memory *struct {
		Limit int64 `json:"limit"`
	} `json:"memory,omitempty"`
	CPU *struct {
		Quota  int64  `json:"quota"`
		Period uint64 `json:"period"`
	} `json:"cpu,omitempty"`
}

// podmanCreate creates container name from the Docker configuration of it
// through Podman's own API (see podmanSpec).
func (r *Runtime) podmanCreate(ctx context.Context, name string, cfg *dcontainer.Config, hc *dcontainer.HostConfig, nc *network.NetworkingConfig) error {
	spec, err := podmanSpecFrom(name, cfg, hc, nc)
	if err != nil {
		return container.NewError("create", "container", name, container.KindInvalid, err)
	}
	err = r.libpod(ctx, http.MethodPost, "/containers/create", spec, nil)
	if path, ok := podmanMissingBindSource(err, spec); ok {
		return container.NewError("create", "container", name, container.KindInvalid, &container.HostPathNotFoundError{Path: path})
	}
	return err
}

// podmanMissingBindSource reads the host path out of Podman's refusal of a
// bind mount whose source does not exist ("statfs PATH: no such file or
// directory"), as missingBindSource does Docker's; only a bind source of
// spec counts.
func podmanMissingBindSource(err error, spec *podmanSpec) (string, bool) {
	if err == nil || !strings.Contains(err.Error(), "no such file or directory") {
		return "", false
	}
	for _, m := range spec.Mounts {
		if m.Type == "bind" && strings.Contains(err.Error(), "statfs "+m.Source+":") {
			return m.Source, true
		}
	}
	return "", false
}

// podmanSpecFrom translates what configs builds for Docker into libpod's
// terms, field by field.
func podmanSpecFrom(name string, cfg *dcontainer.Config, hc *dcontainer.HostConfig, nc *network.NetworkingConfig) (*podmanSpec, error) {
	s := &podmanSpec{
		Name: name, Image: cfg.Image, Hostname: cfg.Hostname, Labels: cfg.Labels,
		Entrypoint: cfg.Entrypoint, Command: cfg.Cmd, Privileged: hc.Privileged,
		RestartPolicy: string(hc.RestartPolicy.Name), Sysctl: hc.Sysctls,
	}
	if hc.Init != nil {
		s.Init = *hc.Init
	}
	if len(cfg.Env) > 0 {
		s.Env = map[string]string{}
		for _, kv := range cfg.Env {
			k, v, _ := strings.Cut(kv, "=")
			s.Env[k] = v
		}
	}
	for _, opt := range hc.SecurityOpt {
		switch opt {
		case "seccomp=unconfined":
			s.Seccomp = "unconfined"
		case "apparmor=unconfined":
			s.AppArmor = "unconfined"
		default:
			return nil, fmt.Errorf("security option %q has no Podman translation", opt)
		}
	}
	if hc.CgroupnsMode != "" {
		s.CgroupNS = &podmanNamespace{NSMode: string(hc.CgroupnsMode)}
	}
	if hc.NetworkMode != "" {
		s.NetNS = &podmanNamespace{NSMode: "bridge"}
		s.Networks = map[string]podmanNetworkOpts{string(hc.NetworkMode): podmanNetworkOptsFrom(nc.EndpointsConfig[string(hc.NetworkMode)])}
	}
	for port, bindings := range hc.PortBindings {
		for _, b := range bindings {
			hp, _ := strconv.Atoi(b.HostPort)
			s.PortMappings = append(s.PortMappings, podmanPortMapping{HostIP: b.HostIP, ContainerPort: uint16(port.Int()),
				HostPort: uint16(hp), Protocol: port.Proto()})
		}
	}
	s.Mounts = podmanMountsFrom(hc)
	for dest := range cfg.Volumes {
		// No name: an anonymous volume, removed with the container.
		s.Volumes = append(s.Volumes, podmanVolume{Dest: dest, Options: []string{}})
	}
	if hc.Memory > 0 || hc.NanoCPUs > 0 {
		s.ResourceLimits = &podmanResources{}
		if hc.Memory > 0 {
			s.ResourceLimits.Memory = &struct {
				Limit int64 `json:"limit"`
			}{Limit: hc.Memory}
		}
		if hc.NanoCPUs > 0 {
			// What Docker does with NanoCPUs: a CFS quota over a 100ms period.
			const period = 100_000
			s.ResourceLimits.CPU = &struct {
				Quota  int64  `json:"quota"`
				Period uint64 `json:"period"`
			}{Quota: hc.NanoCPUs * period / 1e9, Period: period}
		}
	}
	return s, nil
}

// podmanNetworkOptsFrom carries the static addresses of the container's
// endpoint on its network (ep may be nil) over to libpod.
func podmanNetworkOptsFrom(ep *network.EndpointSettings) podmanNetworkOpts {
	opts := podmanNetworkOpts{}
	if ep == nil || ep.IPAMConfig == nil {
		return opts
	}
	for _, a := range []string{ep.IPAMConfig.IPv4Address, ep.IPAMConfig.IPv6Address} {
		if a != "" {
			opts.StaticIPs = append(opts.StaticIPs, a)
		}
	}
	return opts
}

// podmanMountsFrom translates Docker's three ways of mounting (mounts,
// binds, tmpfs) into libpod's one list, sorted by destination.
func podmanMountsFrom(hc *dcontainer.HostConfig) []podmanMount {
	var mounts []podmanMount
	for _, m := range hc.Mounts {
		opts := []string{"rbind"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		mounts = append(mounts, podmanMount{Destination: m.Target, Type: "bind", Source: m.Source, Options: opts})
	}
	for _, b := range hc.Binds {
		parts := strings.Split(b, ":")
		opts := []string{"rbind"}
		if len(parts) == 3 {
			opts = append(opts, parts[2])
		}
		mounts = append(mounts, podmanMount{Destination: parts[1], Type: "bind", Source: parts[0], Options: opts})
	}
	for dest, opts := range hc.Tmpfs {
		m := podmanMount{Destination: dest, Type: "tmpfs", Source: "tmpfs", Options: []string{"rw", "nosuid", "nodev"}}
		if opts != "" {
			m.Options = strings.Split(opts, ",")
		}
		mounts = append(mounts, m)
	}
	sort.Slice(mounts, func(i, j int) bool { return mounts[i].Destination < mounts[j].Destination })
	return mounts
}
