// Package docker implements container.Runtime on the Docker Engine API (and
// Podman's compatible one). It is the only package of the repository that
// imports the Docker client. It also makes the clients of ContainerEngines,
// from their endpoint (unix://, tcp:// with TLS both ways, ssh://) and
// Secret: Connect, the engines.Connector that only the manager's
// composition root, main.go, hands to the engine registry, so that the
// controllers and the registry depend on no backend.
package docker

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/swarm"
	"github.com/docker/docker/client"
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
	kind := classify(err)
	if kind == container.KindHostPortInUse {
		err = hostPortInUse(err)
	}
	return container.NewError(op, object, name, kind, err)
}

func classify(err error) container.ErrorKind {
	switch {
	// The engine gives these the status codes of other kinds (forbidden,
	// invalid argument): only the message tells them apart. A host port
	// first: its refusal can say "address already in use" too.
	case isHostPortInUse(err):
		return container.KindHostPortInUse
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

// isInUse recognises the engine's refusal of a static address ("Address
// already in use"), which it reports at start; isHostPortInUse has been
// asked first.
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

func labelFilters(selector map[string]string) filters.Args {
	f := filters.NewArgs(filters.Arg("label", container.LabelClusterID))
	for k, v := range selector {
		f.Add("label", k+"="+v)
	}
	return f
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
