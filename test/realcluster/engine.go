package realcluster

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	dockerclient "github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/docker/go-connections/nat"
)

// EngineTimeout bounds one call to an engine: a stopped engine refuses at
// once, a lost one does not answer at all.
const EngineTimeout = 5 * time.Second

// Engine is a Docker engine the clusters' containers run on, read through
// Docker's client: the tests look at containers as the engine has them,
// not as CAPCT reports them.
type Engine struct {
	// Name says which engine, in failure messages.
	Name string
	*dockerclient.Client
}

// NewEngine connects to the engine at host (a Docker host such as
// unix:///run/capct-mh/docker.sock), or to DOCKER_HOST's when host is
// empty.
func NewEngine(t testing.TB, name, host string) *Engine {
	t.Helper()
	opts := []dockerclient.Opt{dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation()}
	if host != "" {
		opts = append(opts, dockerclient.WithHost(host))
	}
	c, err := dockerclient.NewClientWithOpts(opts...)
	if err != nil {
		t.Fatalf("failed to build the client of %s: %v", name, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &Engine{Name: name, Client: c}
}

// Answers is nil when the engine answers a list of containers, which
// (unlike a ping) needs the daemon's state.
func (e *Engine) Answers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, EngineTimeout)
	defer cancel()
	if _, err := e.ContainerList(ctx, container.ListOptions{Limit: 1}); err != nil {
		return fmt.Errorf("%s does not answer: %w", e.Name, err)
	}
	return nil
}

// Inspect inspects the container name, within EngineTimeout.
func (e *Engine) Inspect(ctx context.Context, name string) (container.InspectResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, EngineTimeout)
	defer cancel()
	c, err := e.ContainerInspect(ctx, name)
	if err != nil {
		return c, fmt.Errorf("failed to inspect %s on %s: %w", name, e.Name, err)
	}
	return c, nil
}

// Containers lists every container (running or not) that carries each of
// labels ("key=value" or "key"), sorted by name.
func (e *Engine) Containers(ctx context.Context, labels ...string) ([]container.Summary, error) {
	ctx, cancel := context.WithTimeout(ctx, EngineTimeout)
	defer cancel()
	list, err := e.ContainerList(ctx, container.ListOptions{All: true, Filters: labelFilters(labels)})
	if err != nil {
		return nil, fmt.Errorf("failed to list the containers labelled %s on %s: %w", strings.Join(labels, ", "), e.Name, err)
	}
	slices.SortFunc(list, func(a, b container.Summary) int { return strings.Compare(Name(a), Name(b)) })
	return list, nil
}

// Name is a listed container's name without the leading slash.
func Name(c container.Summary) string {
	if len(c.Names) == 0 {
		return c.ID
	}
	return strings.TrimPrefix(c.Names[0], "/")
}

// OwnAddress is the container's IPv4 address on the network it was created
// on (its network mode), empty when it has none.
func OwnAddress(c container.InspectResponse) string {
	if c.HostConfig == nil || c.NetworkSettings == nil {
		return ""
	}
	return AddressOn(c, string(c.HostConfig.NetworkMode))
}

// AddressOn is the container's IPv4 address on network, empty when it is
// not attached.
func AddressOn(c container.InspectResponse, network string) string {
	if c.NetworkSettings == nil {
		return ""
	}
	if ep, ok := c.NetworkSettings.Networks[network]; ok && ep != nil {
		return ep.IPAddress
	}
	return ""
}

// LoopbackPort is the host port published on 127.0.0.1 for the
// container's port (e.g. "6443/tcp"), empty when there is none.
func LoopbackPort(c container.InspectResponse, port string) string {
	if c.NetworkSettings == nil {
		return ""
	}
	for _, b := range c.NetworkSettings.Ports[nat.Port(port)] {
		if b.HostIP == "127.0.0.1" {
			return b.HostPort
		}
	}
	return ""
}

// Exec runs command in the container name and returns its stdout; an exit
// code other than 0 is an error with its stderr.
func (e *Engine) Exec(ctx context.Context, name string, command ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	created, err := e.ContainerExecCreate(ctx, name, container.ExecOptions{Cmd: command, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return "", fmt.Errorf("failed to exec %q in %s on %s: %w", command, name, e.Name, err)
	}
	attached, err := e.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return "", fmt.Errorf("failed to attach to %q in %s on %s: %w", command, name, e.Name, err)
	}
	defer attached.Close()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, attached.Reader); err != nil {
		return "", fmt.Errorf("failed to read %q in %s on %s: %w", command, name, e.Name, err)
	}
	inspected, err := e.ContainerExecInspect(ctx, created.ID)
	if err != nil {
		return "", fmt.Errorf("failed to inspect %q in %s on %s: %w", command, name, e.Name, err)
	}
	if inspected.ExitCode != 0 {
		return stdout.String(), fmt.Errorf("%q in %s on %s exited with %d: %s", command, name, e.Name, inspected.ExitCode, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// HasImage is true when the engine holds ref.
func (e *Engine) HasImage(ctx context.Context, ref string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, EngineTimeout)
	defer cancel()
	if _, err := e.ImageInspect(ctx, ref); err != nil {
		if cerrdefs.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("failed to inspect image %s on %s: %w", ref, e.Name, err)
	}
	return true, nil
}

// Networks lists the names of the networks that carry each of labels.
func (e *Engine) Networks(ctx context.Context, labels ...string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, EngineTimeout)
	defer cancel()
	list, err := e.NetworkList(ctx, network.ListOptions{Filters: labelFilters(labels)})
	if err != nil {
		return nil, fmt.Errorf("failed to list the networks labelled %s on %s: %w", strings.Join(labels, ", "), e.Name, err)
	}
	names := make([]string, 0, len(list))
	for _, n := range list {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	return names, nil
}

// Volumes lists the names of the volumes that carry each of labels.
func (e *Engine) Volumes(ctx context.Context, labels ...string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, EngineTimeout)
	defer cancel()
	list, err := e.VolumeList(ctx, volume.ListOptions{Filters: labelFilters(labels)})
	if err != nil {
		return nil, fmt.Errorf("failed to list the volumes labelled %s on %s: %w", strings.Join(labels, ", "), e.Name, err)
	}
	names := make([]string, 0, len(list.Volumes))
	for _, v := range list.Volumes {
		names = append(names, v.Name)
	}
	slices.Sort(names)
	return names, nil
}

// labelFilters is a list filter on each of labels ("key=value" or "key").
func labelFilters(labels []string) filters.Args {
	f := filters.NewArgs()
	for _, l := range labels {
		f.Add("label", l)
	}
	return f
}
