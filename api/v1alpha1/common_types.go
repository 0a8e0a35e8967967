package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProviderIDPrefix starts every provider ID that CAPCT sets: the machine's
// container name follows it, as in container:///demo-md-0-abcde.
const ProviderIDPrefix = "container:///"

// IPFamily is the IP family of a cluster's container network.
// +kubebuilder:validation:Enum=IPv4;IPv6;DualStack
type IPFamily string

const (
	// IPv4Family gives containers IPv4 addresses only.
	IPv4Family IPFamily = "IPv4"
	// IPv6Family gives containers IPv6 addresses, and the cluster IPv6
	// pods, Services and Node addresses only. A Docker bridge network has
	// IPv4 as well, so the load balancer keeps an IPv4 address, which is
	// the control-plane endpoint (what a management cluster reaches).
	IPv6Family IPFamily = "IPv6"
	// DualStackFamily gives containers one address of each family.
	DualStackFamily IPFamily = "DualStack"
)

// Mount is a host path mounted into a machine's container.
type Mount struct {
	// containerPath is where the mount appears inside the container. It may
	// not hide what the node needs (/, /var, /run, /tmp, /etc, /usr, /lib,
	// /lib/modules, /kind and others; the webhook lists them) and, like
	// hostPath, may not contain ':', which the engine reads as the start of
	// bind options.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^/[^:]*$`
	ContainerPath string `json:"containerPath"`

	// hostPath is the path on the host running the container runtime. The
	// manager's --allowed-host-path-prefixes may restrict it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^/[^:]*$`
	HostPath string `json:"hostPath"`

	// readOnly mounts the path read-only.
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
}

// DefaultListenAddress is the host address a port mapping or the load
// balancer listens on when none is given: the host's IPv4 loopback, which
// only the host itself reaches.
const DefaultListenAddress = "127.0.0.1"

// PortProtocol is the transport protocol of a published port.
// +kubebuilder:validation:Enum=TCP;UDP;SCTP
type PortProtocol string

const (
	// ProtocolTCP publishes a TCP port; the default.
	ProtocolTCP PortProtocol = "TCP"
	// ProtocolUDP publishes a UDP port.
	ProtocolUDP PortProtocol = "UDP"
	// ProtocolSCTP publishes an SCTP port.
	ProtocolSCTP PortProtocol = "SCTP"
)

// PortMapping publishes a port of a machine's container on the container
// host, as `docker run -p listenAddress:hostPort:containerPort/protocol`
// does. A NodePort Service of the workload cluster is reached this way from
// the host: map the node port (containerPort) to a host port.
type PortMapping struct {
	// listenAddress is the host address the port is published on: an IPv4
	// or IPv6 address, no name. Defaults to 127.0.0.1, which only the host
	// itself reaches. The manager's --allowed-host-listen-addresses decides
	// which addresses may be used (the loopback ones by default), so that a
	// tenant cannot open the host to the network without the admin.
	// +optional
	// +kubebuilder:default="127.0.0.1"
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:Pattern=`^[0-9a-fA-F.:]+$`
	ListenAddress string `json:"listenAddress,omitempty"`

	// hostPort is the port on the container host. One host port (on one
	// address, with one protocol) serves one container of the engine: a
	// ContainerMachine whose host port another machine that may run on the
	// same engine publishes is refused. Ports below the manager's
	// --min-host-port (1024 by default, the host's privileged ports) are
	// refused.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	HostPort int32 `json:"hostPort"`

	// containerPort is the port inside the machine's container, for
	// example a NodePort Service's node port.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	ContainerPort int32 `json:"containerPort"`

	// protocol of the port: TCP (the default), UDP or SCTP.
	// +optional
	// +kubebuilder:default=TCP
	Protocol PortProtocol `json:"protocol,omitempty"`
}

// EffectiveListenAddress is listenAddress, or its default when it is empty
// (an object that met no API server, as in unit tests).
func (p PortMapping) EffectiveListenAddress() string {
	if p.ListenAddress == "" {
		return DefaultListenAddress
	}
	return p.ListenAddress
}

// EffectiveProtocol is protocol, or its default when it is empty.
func (p PortMapping) EffectiveProtocol() PortProtocol {
	if p.Protocol == "" {
		return ProtocolTCP
	}
	return p.Protocol
}

// MachineResources limits what a machine's container may use. Without it the
// container is unbounded, which is what CAPD always does.
// +kubebuilder:validation:MinProperties=1
type MachineResources struct {
	// cpus is the number of CPUs the container may use, e.g. "2" or "500m":
	// at least 10m, the smallest limit Docker takes, and at most 1024.
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('10m')) >= 0",message="cpus must be at least 10m (0.01 CPU), the smallest limit the engine takes"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('1024')) <= 0",message="cpus must be at most 1024"
	CPUs *resource.Quantity `json:"cpus,omitempty"`

	// memory is the memory limit of the container, e.g. "2Gi": at least
	// 512Mi, below which a Kubernetes node does not come up, and at most 1Ti.
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('512Mi')) >= 0",message="memory must be at least 512Mi: a Kubernetes node does not come up with less"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('1Ti')) <= 0",message="memory must be at most 1Ti"
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// MachineLifecycle holds the timeouts of a machine's lifecycle phases. Users
// of other providers need both longer and shorter values than any fixed
// default, so each can be set per machine or template.
type MachineLifecycle struct {
	// bootstrapTimeout bounds how long running the bootstrap data may take.
	// Defaults to 5m; at most 1h. A machine holds one of its engine's
	// bootstrap slots (--max-concurrent-bootstraps) for as long as its
	// bootstrap runs, so an unbounded timeout would let bootstrap data that
	// never ends hold slots for good and keep every other machine on the
	// engine waiting. A kubeadm join or init takes minutes even on a loaded
	// host, with its images preloaded; an hour is far beyond any real one.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="bootstrapTimeout must be positive"
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('1h')",message="bootstrapTimeout must be at most 1h: a bootstrap holds one of its engine's bootstrap slots while it runs"
	BootstrapTimeout *metav1.Duration `json:"bootstrapTimeout,omitempty"`

	// registrationTTL bounds the time from launch to the Node registering.
	// A machine that does not register in time is marked failed so that a
	// MachineHealthCheck or its pool replaces it. Defaults to 15m.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('30s')",message="registrationTTL must be at least 30s"
	RegistrationTTL *metav1.Duration `json:"registrationTTL,omitempty"`

	// initializationTTL bounds the time from registration to the Node being
	// Ready and initialized. Defaults to 15m.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('30s')",message="initializationTTL must be at least 30s"
	InitializationTTL *metav1.Duration `json:"initializationTTL,omitempty"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// name of the referenced object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// NodeInfo describes the operating system and architecture of the nodes that
// a template makes, for autoscaling from zero.
type NodeInfo struct {
	// architecture of the node's binaries.
	// +optional
	// +kubebuilder:validation:Enum=amd64;arm64;s390x;ppc64le
	Architecture string `json:"architecture,omitempty"`

	// operatingSystem of the node.
	// +optional
	// +kubebuilder:validation:Enum=linux
	OperatingSystem string `json:"operatingSystem,omitempty"`
}
