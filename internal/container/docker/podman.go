package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"

	"github.com/docker/docker/client"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// Podman serves the Docker Engine API too (`podman system service`), and
// this backend drives it through that API: the calls CAPCT makes are the
// same, and one implementation of the seam is one place for each concern.
// Where Podman 4.3's compatible API behaves differently, the functions of
// this file hide it; docs/runtime.md lists the differences:
//
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

// libpodGet reads path of Podman's own API (v4, which Podman 4.x serves)
// into out, on the connection of the Docker client.
func (r *Runtime) libpodGet(ctx context.Context, path string, out any) error {
	host, err := client.ParseHostURL(r.cli.DaemonHost())
	if err != nil {
		return err
	}
	u := url.URL{Scheme: "http", Host: host.Host, Path: "/v4.0.0/libpod" + path}
	if host.Scheme == "unix" || host.Scheme == "npipe" {
		// The client's transport dials the socket whatever the URL's host.
		u.Host = "podman"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := r.cli.HTTPClient().Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var msg struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(body, &msg)
		if resp.StatusCode == http.StatusNotFound {
			// Gone since the compatible API answered: what callers branch on.
			return container.NewError("read", "podman API", path, container.KindNotFound, errors.New(msg.Message))
		}
		return fmt.Errorf("failed to read podman API %s: %s: %s", path, resp.Status, msg.Message)
	}
	if err := json.Unmarshal(body, out); err != nil {
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
