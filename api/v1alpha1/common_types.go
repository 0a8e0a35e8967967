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
	// IPv6Family gives containers IPv6 addresses only.
	IPv6Family IPFamily = "IPv6"
	// DualStackFamily gives containers one address of each family.
	DualStackFamily IPFamily = "DualStack"
)

// Mount is a host path mounted into a machine's container.
type Mount struct {
	// containerPath is where the mount appears inside the container.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^/`
	ContainerPath string `json:"containerPath"`

	// hostPath is the path on the host running the container runtime. It must
	// exist: the runtime reports an error otherwise.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^/`
	HostPath string `json:"hostPath"`

	// readOnly mounts the path read-only.
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
}

// MachineResources limits what a machine's container may use. Without it the
// container is unbounded, which is what CAPD always does.
// +kubebuilder:validation:MinProperties=1
type MachineResources struct {
	// cpus is the number of CPUs the container may use, e.g. "2" or "500m".
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="cpus must be greater than zero"
	CPUs *resource.Quantity `json:"cpus,omitempty"`

	// memory is the memory limit of the container, e.g. "2Gi". A node needs
	// at least 64Mi to boot.
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('64Mi')) >= 0",message="memory must be at least 64Mi"
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// MachineLifecycle holds the timeouts of a machine's lifecycle phases. Users
// of other providers need both longer and shorter values than any fixed
// default, so each can be set per machine or template.
type MachineLifecycle struct {
	// bootstrapTimeout bounds how long running the bootstrap data may take.
	// Defaults to 5m.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="bootstrapTimeout must be positive"
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
