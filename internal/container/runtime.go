package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"
)

// Runtime runs CAPCT's machines as containers on one engine. Every method
// takes a context first and returns errors of type *Error (see IsNotFound,
// IsConflict, IsUnreachable, IsTransient, IsTimeout). Implementations must be
// safe for concurrent use.
type Runtime interface {
	// EnsureNetwork creates the user-defined network spec.Name (a bridge,
	// or with spec.Overlay an attachable overlay of the engine's swarm), or
	// adopts an existing one that spec.Owner owns. An existing network of
	// another owner is a conflict error.
	EnsureNetwork(ctx context.Context, spec NetworkSpec) (Network, error)
	// InspectNetwork returns the existing network name whoever owns it, for
	// clusters that attach to a network they do not manage, with its
	// endpoints (the addresses running containers hold on it). A missing
	// network is a not-found error.
	InspectNetwork(ctx context.Context, name string) (Network, error)
	// DeleteNetwork removes the network if owner owns it; a network of
	// another owner is a conflict error and stays. Deleting a missing
	// network is not an error.
	DeleteNetwork(ctx context.Context, name string, owner Owner) error
	// LocalSubnets returns the subnets of every network of the engine
	// whose scope is the engine alone (bridge, macvlan, ipvlan and the
	// like, whoever made them; not the swarm's overlays, and host and none
	// have none). A new overlay must not overlap them on any engine it
	// spans: the swarm does not check it against any engine's local
	// networks, and a node on both would not know which interface an
	// address is behind (NetworkSpec.Avoid).
	LocalSubnets(ctx context.Context) ([]netip.Prefix, error)

	// CreateMachine creates (but does not start) the container spec.Name.
	// It is idempotent: an existing container that the owner named by
	// spec.Labels owns is adopted and returned; one with other owners is a
	// conflict error naming the container.
	CreateMachine(ctx context.Context, spec MachineSpec) (*Machine, error)

	// The calls below change a container. Each names the owner it expects
	// and is refused with a conflict error, changing nothing, when the
	// container's labels name another (see Owner.Owns). Each resolves the
	// name once and acts on the container it checked (by ID), so that one
	// re-created under the same name in between is never touched.

	// Start starts the container. Starting a running container is not an
	// error. A static address held by another container is an error for
	// which IsInUse is true; a fixed host port held by another container or
	// a program of the host, one for which IsHostPortInUse is true, whose
	// cause (HostPortInUse) names the port. The container is left as it
	// was, and starts once the port is free.
	Start(ctx context.Context, name string, owner Owner) error
	// Delete removes the container by force, with its anonymous volumes.
	// Deleting a missing container is not an error.
	Delete(ctx context.Context, name string, owner Owner) error
	// Signal sends signal (e.g. "SIGHUP") to the container's main process.
	Signal(ctx context.Context, name string, owner Owner, signal string) error
	// Exec runs in.Cmd in the running container and captures its exit
	// code and the last bytes of its stdout and stderr (see
	// ExecInput.MaxOutput). A non-zero exit code is not an error. When
	// in.Timeout passes first, Exec returns an error for which IsTimeout is
	// true; the process may be left running in the container. Errors name
	// the command's program only, never its arguments or stdin, which may
	// hold bootstrap scripts and secrets.
	Exec(ctx context.Context, name string, owner Owner, in ExecInput) (ExecResult, error)
	// WriteFile writes content to path in the container (running or not),
	// creating missing parent directories, without exec.
	WriteFile(ctx context.Context, name string, owner Owner, path string, content []byte, mode os.FileMode) error

	// Inspect returns the container's current state.
	Inspect(ctx context.Context, name string) (*Machine, error)
	// List returns the containers created by CAPCT (carrying LabelClusterID)
	// whose labels contain every key/value of labelSelector. Use ListOwned,
	// not List, to find containers to delete.
	List(ctx context.Context, labelSelector map[string]string) ([]Machine, error)
	// ReadFile reads the regular file path from the container, without exec.
	// A file larger than MaxFileSize is an error for which IsInvalid is true.
	// Like the calls that change a container, it names the owner it expects
	// and refuses a container of another with a conflict error (see
	// Owner.Owns), so that a machine's files are read only by whoever acts
	// for that machine; it reads the container it checked, by ID.
	ReadFile(ctx context.Context, name string, owner Owner, path string) ([]byte, error)

	// Info says what the engine is: its version, and its part in a swarm.
	// It is the cheapest call that proves the engine answers.
	Info(ctx context.Context) (EngineInfo, error)

	// ImageExists reports whether the engine holds the image ref.
	ImageExists(ctx context.Context, ref string) (bool, error)
	// ImageID returns the ID of the image ref (a reference, or an ID): the
	// digest the engine computes from the image's content, so that images
	// of the same ID on two engines are the same image, whatever their
	// tags say. A missing image is a not-found error.
	ImageID(ctx context.Context, ref string) (string, error)
	// TagImage tags the image id as ref. A ref that already names another
	// image is a conflict error and stays: CAPCT never moves a tag that
	// someone else set. Tagging the image ref already names is not an
	// error.
	TagImage(ctx context.Context, id, ref string) error
	// SaveImages returns a `docker save` style tar of the images refs
	// (references or IDs; an image saved by ID carries no tag). The caller
	// closes it.
	SaveImages(ctx context.Context, refs []string) (io.ReadCloser, error)
	// LoadImages loads a `docker save` style tar, as SaveImages makes, into
	// the engine: how CAPCT puts an image on an engine that lacks it
	// without a registry (imagecopy). A tar that is not one is an error.
	LoadImages(ctx context.Context, tar io.Reader) error
	// PullImage has the engine pull the image ref from its registry, with
	// opts.Auth's credentials when set, and returns once the engine holds
	// it. An image the registry does not have is a not-found error; a
	// refusal (wrong credentials, no access) or a registry that cannot be
	// reached is an error whose message carries the registry's answer as
	// the engine reports it, never the credentials. Only the engine's own
	// unreachability is an error for which IsUnreachable is true.
	PullImage(ctx context.Context, ref string, opts PullOptions) error

	// Events streams start, die and destroy events of CAPCT containers
	// whose labels contain labelSelector. The channel is closed when ctx
	// ends; stream errors are retried with backoff in between.
	Events(ctx context.Context, labelSelector map[string]string) (<-chan Event, error)
}

// EngineInfo is what an engine says about itself.
type EngineInfo struct {
	// Version of the engine, as it reports it (e.g. 20.10.24+dfsg1).
	Version string
	// Swarm is the engine's place in a swarm; nil when it is in none.
	Swarm *SwarmInfo
}

// SwarmInfo is an engine's membership of a swarm, whose overlay networks
// connect containers on different engines (docs/multihost.md).
type SwarmInfo struct {
	// NodeID of the engine in the swarm.
	NodeID string
	// ClusterID of the swarm; only managers know it.
	ClusterID string
	// Manager: the engine manages the swarm, so it can create overlay
	// networks.
	Manager bool
	// NodeAddr is the address the swarm's other engines reach it on.
	NodeAddr string
}

// OverlayMTU is the MTU of Docker's overlay networks unless their creator
// set another: 1500 less the 50 bytes of VXLAN's encapsulation.
const OverlayMTU = 1450

// IPFamily selects the address families of a network.
type IPFamily string

const (
	// IPv4 networks have an IPv4 subnet only.
	IPv4 IPFamily = "IPv4"
	// IPv6 networks have IPv6 enabled. Engines that always assign IPv4 (the
	// Docker bridge driver does) also give them an IPv4 subnet.
	IPv6 IPFamily = "IPv6"
	// DualStack networks have an IPv4 and an IPv6 subnet.
	DualStack IPFamily = "DualStack"
)

// HasIPv4 reports whether the family includes an IPv4 subnet request.
func (f IPFamily) HasIPv4() bool { return f != IPv6 }

// HasIPv6 reports whether the family includes IPv6.
func (f IPFamily) HasIPv6() bool { return f == IPv6 || f == DualStack }

// NetworkSpec describes a cluster's network.
type NetworkSpec struct {
	// Name is the network's name; its subnets are derived from it.
	Name string
	// Owner is the cluster that owns the network (Machine empty); its labels
	// go on the network, and an existing network is adopted only if Owner
	// owns it.
	Owner Owner
	// IPFamily selects the families; empty means IPv4.
	IPFamily IPFamily
	// Overlay makes an attachable overlay network of the engine's swarm
	// (MTU OverlayMTU),
	// which connects containers on every engine of the swarm
	// (docs/multihost.md), instead of a bridge local to the engine. Only a
	// swarm manager creates one.
	Overlay bool
	// Encrypted, with Overlay, encrypts the overlay's traffic between the
	// engines' hosts (Docker's IPsec, the overlay driver's "encrypted"
	// option), which otherwise crosses their network in clear VXLAN. An
	// existing network without it is not adopted (a conflict error): that
	// would quietly downgrade what was asked. Without Overlay it is an
	// invalid argument: a bridge never leaves its host.
	Encrypted bool
	// Avoid are subnets the network must not overlap besides the engine's
	// own default bridge: for an overlay, the local networks of every
	// engine it spans, the first one's included (LocalSubnets), such as
	// each one's docker_gwbridge and the bridges of clusters on one
	// engine, since a node with both would not know which interface an
	// address is behind.
	Avoid []netip.Prefix
}

// Validate returns the invalid-argument error of a spec that no runtime
// can ensure.
func (s NetworkSpec) Validate() error {
	switch {
	case s.Name == "":
		return NewError("ensure", "network", "", KindInvalid, errors.New("name is empty"))
	case !s.Owner.Valid() || s.Owner.Machine != "":
		return NewError("ensure", "network", s.Name, KindInvalid,
			fmt.Errorf("a network needs a cluster owner without a machine, got %s", s.Owner))
	case s.Encrypted && !s.Overlay:
		return NewError("ensure", "network", s.Name, KindInvalid, errors.New("only an overlay network can be encrypted"))
	}
	return nil
}

// CheckAdopt returns the conflict error of adopting the existing network n
// for s: n belongs to another owner, or s asks for encryption that n lacks
// (an overlay's encryption cannot be turned on after it is made, and
// adopting it would quietly downgrade what was asked).
func (s NetworkSpec) CheckAdopt(n Network) error {
	if !s.Owner.Owns(n.Labels) {
		return NotOwnedError("adopt", "network", s.Name, s.Owner, n.Labels)
	}
	if s.Encrypted && !n.Encrypted {
		return NewError("adopt", "network", s.Name, KindConflict,
			errors.New("the network exists unencrypted, and an overlay's encryption cannot be turned on after it is made"))
	}
	return nil
}

// Network is a network as the engine reports it.
type Network struct {
	// Name of the network.
	Name string
	// ID the engine gave it.
	ID string
	// Labels on the network.
	Labels map[string]string
	// Overlay says the network spans the engines of a swarm: an engine
	// reports only its own containers among Endpoints, and does not refuse
	// an address another engine's container holds (docs/multihost.md).
	Overlay bool
	// Encrypted says the overlay encrypts its traffic between engines.
	Encrypted bool
	// MTU of the containers' interfaces on the network when it is not the
	// usual 1500: an overlay's, smaller by its encapsulation; 0 otherwise.
	MTU int
	// IPv4Subnet is the IPv4 subnet, invalid if none.
	IPv4Subnet netip.Prefix
	// IPv6Subnet is the IPv6 subnet, invalid if none.
	IPv6Subnet netip.Prefix
	// IPv4Gateway and IPv6Gateway are the bridge's addresses in each
	// subnet, invalid if none.
	IPv4Gateway, IPv6Gateway netip.Addr
	// DynamicIPv4Range and DynamicIPv6Range are the parts of the subnets
	// from which the engine hands out addresses to containers that ask for
	// none; invalid means the whole subnet. Networks that EnsureNetwork
	// creates reserve part of each subnet this way (see DynamicRange), so
	// that static addresses CAPCT picks outside it are never given to
	// another container.
	DynamicIPv4Range, DynamicIPv6Range netip.Prefix
	// Endpoints are the containers attached to the network that hold
	// addresses now (running ones), whoever owns them, sorted by name.
	Endpoints []Endpoint
}

// Endpoint is a container's attachment to a network.
type Endpoint struct {
	// Name of the container.
	Name string
	// IPv4 and IPv6 are its addresses on the network, invalid if none.
	IPv4, IPv6 netip.Addr
}

// Role is what a machine container is for.
type Role string

const (
	// RoleControlPlane runs a control-plane node.
	RoleControlPlane Role = "control-plane"
	// RoleWorker runs a worker node.
	RoleWorker Role = "worker"
	// RoleLoadBalancer runs the cluster's API load balancer.
	RoleLoadBalancer Role = "load-balancer"
)

// IsNode reports whether the role runs a Kubernetes node.
func (r Role) IsNode() bool { return r == RoleControlPlane || r == RoleWorker }

// Mount is a bind mount from the host.
type Mount struct {
	// HostPath is the path on the engine's host.
	HostPath string
	// ContainerPath is where it appears in the container.
	ContainerPath string
	// ReadOnly mounts it read-only.
	ReadOnly bool
}

// DefaultHostIP is the host address a port is published on when its
// mapping names none: the loopback, which only the host reaches.
const DefaultHostIP = "127.0.0.1"

// PortMapping publishes a container port on the host. The engine keeps it
// in the container's configuration, so a fixed host port is published
// again whenever the container starts, also after the engine restarts.
type PortMapping struct {
	// ContainerPort is the port inside the container.
	ContainerPort int
	// HostPort is the port on the host; 0 lets the engine pick a free one.
	HostPort int
	// HostIP is the host address to listen on; empty means DefaultHostIP.
	HostIP string
	// Protocol is "tcp" (the default when empty), "udp" or "sctp".
	Protocol string
}

// Resources limits what a container may use. Zero values mean no limit.
type Resources struct {
	// MilliCPUs is the CPU limit in thousandths of a CPU (1500 = 1.5 CPUs).
	MilliCPUs int64
	// MemoryBytes is the memory limit in bytes.
	MemoryBytes int64
}

// MachineSpec describes a machine container.
type MachineSpec struct {
	// Name is the container's name (deterministic, e.g. "<cluster>-<machine>");
	// it is also its hostname under KindNode.
	Name string
	// Image is the image reference to run.
	Image string
	// Network is the name of the cluster network to attach to.
	Network string
	// Labels must contain the owner labels of a valid Owner with a machine
	// (see Owner.Labels); more labels may be added (LabelPool). LabelRole is
	// added from Role.
	Labels map[string]string
	// Role is what the container is for.
	Role Role
	// Privileged runs the container privileged. Nil means true for nodes
	// (RoleControlPlane, RoleWorker) and false otherwise.
	Privileged *bool
	// KindNode applies what a kind node image needs: seccomp and AppArmor
	// unconfined, tmpfs on /run and /tmp, an anonymous volume on /var,
	// /lib/modules bound read-only when the host has it, a private cgroup
	// namespace, hostname = Name and, when IPFamily has IPv6, the IPv6
	// sysctls. It implies RestartUnlessStopped.
	KindNode bool
	// RestartPolicy says whether the engine restarts the container; empty
	// means RestartUnlessStopped for KindNode and RestartNo otherwise.
	RestartPolicy RestartPolicy
	// StaticIPv4 and StaticIPv6 are the container's fixed addresses on
	// Network, kept across restarts of the container and of the engine;
	// invalid means the engine picks one at every start. The engine checks
	// that an address is free only when the container starts: Start then
	// fails with an error for which IsInUse is true, or, on a network
	// whose subnet the engine chose itself, IsStaticAddressUnsupported.
	StaticIPv4, StaticIPv6 netip.Addr
	// IPFamily is the network's family; it decides the IPv6 sysctls.
	IPFamily IPFamily
	// ExtraMounts are bind mounts from the host.
	ExtraMounts []Mount
	// PortMappings publish ports, e.g. the API server port on 127.0.0.1
	// with HostPort 0, or a machine's extraPortMappings with fixed ones.
	// A fixed host port is claimed only when the container starts (see
	// Start).
	PortMappings []PortMapping
	// Resources limit CPU and memory.
	Resources Resources
	// Env is the environment, as "KEY=value" strings.
	Env []string
	// Entrypoint overrides the image's entrypoint when not nil.
	Entrypoint []string
	// Cmd overrides the image's command when not nil.
	Cmd []string
}

// RestartPolicy says whether the engine restarts a container.
type RestartPolicy string

const (
	// RestartNo never restarts the container.
	RestartNo RestartPolicy = "no"
	// RestartUnlessStopped restarts the container whenever it exits and
	// when the engine starts again, unless it was stopped through the
	// engine (Stop).
	RestartUnlessStopped RestartPolicy = "unless-stopped"
	// RestartAlways restarts the container whenever it exits and whenever
	// the engine starts again, even after it was stopped or signalled
	// through the engine. It is for containers that CAPCT signals: Docker
	// 20.10 counts any signal sent through the engine (a SIGHUP reload) as
	// a manual stop, and then does not start an unless-stopped container
	// when the engine starts again.
	RestartAlways RestartPolicy = "always"
)

// EffectiveRestartPolicy resolves RestartPolicy with its default.
func (s MachineSpec) EffectiveRestartPolicy() RestartPolicy {
	if s.RestartPolicy != "" {
		return s.RestartPolicy
	}
	if s.KindNode {
		return RestartUnlessStopped
	}
	return RestartNo
}

// EffectivePrivileged resolves Privileged with its default.
func (s MachineSpec) EffectivePrivileged() bool {
	if s.Privileged != nil {
		return *s.Privileged
	}
	return s.Role.IsNode()
}

// MachineState is a container's state.
type MachineState string

// Container states, as engines report them.
const (
	StateCreated    MachineState = "created"
	StateRunning    MachineState = "running"
	StatePaused     MachineState = "paused"
	StateRestarting MachineState = "restarting"
	StateRemoving   MachineState = "removing"
	StateExited     MachineState = "exited"
	StateDead       MachineState = "dead"
)

// PortBinding is a published port.
type PortBinding struct {
	// ContainerPort is the port inside the container.
	ContainerPort int
	// Protocol is "tcp", "udp" or "sctp".
	Protocol string
	// HostIP is the host address it listens on.
	HostIP string
	// HostPort is the host port (the engine's pick when 0 was asked).
	HostPort int
}

// Machine is a container as the engine reports it.
type Machine struct {
	// Name of the container.
	Name string
	// ID the engine gave it.
	ID string
	// Image it runs.
	Image string
	// Labels on the container.
	Labels map[string]string
	// State of the container.
	State MachineState
	// Network is the cluster network it is attached to.
	Network string
	// IPv4 is its IPv4 address on Network; invalid when it has none (e.g.
	// not running).
	IPv4 netip.Addr
	// IPv6 is its IPv6 address on Network; invalid when it has none.
	IPv6 netip.Addr
	// StaticIPv4 and StaticIPv6 are the fixed addresses it was created
	// with (MachineSpec.StaticIPv4/StaticIPv6), reported whether it runs or
	// not; invalid when the engine picks its address.
	StaticIPv4, StaticIPv6 netip.Addr
	// Ports are the published ports (host side known once running).
	Ports []PortBinding
	// PortMappings are the ports as configured at create: HostPort 0 means
	// the engine picks a host port at every start. Inspect reports them;
	// List leaves them empty.
	PortMappings []PortMapping
	// Created is when the container was created.
	Created time.Time
	// Started is when the container last started (zero if it never did). A
	// node that has not reported to its API server since then has not come
	// back from a restart yet.
	Started time.Time
}

// HostPort returns the host port published for containerPort/tcp, or 0.
func (m *Machine) HostPort(containerPort int) int {
	for _, p := range m.Ports {
		if p.ContainerPort == containerPort && (p.Protocol == "" || p.Protocol == "tcp") && p.HostPort != 0 {
			return p.HostPort
		}
	}
	return 0
}

// ExecInput is a command to run in a container.
type ExecInput struct {
	// Cmd is the command and its arguments; required.
	Cmd []string
	// Stdin, when not nil, is copied to the command's standard input,
	// which is closed at its end.
	Stdin io.Reader
	// Timeout bounds the command; 0 means only ctx bounds it.
	Timeout time.Duration
	// Env adds "KEY=value" variables to the command's environment.
	Env []string
	// User runs the command as this user; empty means the container's.
	User string
	// MaxOutput bounds each of stdout and stderr: Exec keeps their last
	// MaxOutput bytes. 0 means MaxExecOutput.
	MaxOutput int
}

// ExecResult is what a command did.
type ExecResult struct {
	// ExitCode is the command's exit code.
	ExitCode int
	// Stdout is its standard output.
	Stdout []byte
	// Stderr is its standard error.
	Stderr []byte
	// Truncated is true when Stdout or Stderr lost its beginning to
	// ExecInput's output bound.
	Truncated bool
}

// EventType is the kind of a container event.
type EventType string

// Event types streamed by Events.
const (
	EventStart   EventType = "start"
	EventDie     EventType = "die"
	EventDestroy EventType = "destroy"
)

// Event is a container life-cycle event.
type Event struct {
	// Type of the event.
	Type EventType
	// Name of the container.
	Name string
	// ID of the container.
	ID string
	// Labels of the container.
	Labels map[string]string
	// Time of the event.
	Time time.Time
}
