package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

const (
	// MachineFinalizer lets the ContainerMachine controller delete the
	// container, and release the machine's pod CIDRs, before the object goes.
	MachineFinalizer = "containermachine.infrastructure.cluster.x-k8s.io"

	// PodCIDRsAnnotation records the pod CIDRs allocated to a machine, comma
	// separated. It lives in metadata, not status, because clusterctl move
	// does not carry status and the allocator is rebuilt from it.
	PodCIDRsAnnotation = "container.infrastructure.cluster.x-k8s.io/pod-cidrs"

	// EngineAnnotation records the ContainerEngine a machine of a cluster
	// on engines is placed on, before its container is made; the machine
	// is looked for there only. It is metadata for the reason
	// PodCIDRsAnnotation is, set by CAPCT, and never changed once set.
	EngineAnnotation = "container.infrastructure.cluster.x-k8s.io/engine"

	// FailureDomainAnnotation is the failure domain a ContainerMachinePool
	// chose for its member from the MachinePool's spec.failureDomains:
	// Cluster API makes a pool's Machines with none, so placement takes
	// this as the Machine's spec.failureDomain (docs/machinepool.md).
	FailureDomainAnnotation = "containermachinepool.infrastructure.cluster.x-k8s.io/failure-domain"

	// PoolVersionAnnotation records on each member of a ContainerMachinePool
	// the MachinePool's Kubernetes version it was created for: a version
	// change makes it outdated, and a warm member, which has no Machine to
	// carry a version, is launched with the node image of this one.
	PoolVersionAnnotation = "containermachinepool.infrastructure.cluster.x-k8s.io/version"

	// WarmPoolLabel marks a warm member of a ContainerMachinePool, whose
	// value is the MachinePool's name as its machine-pool-name label would
	// carry it: a container booted and kept ready without bootstrap data,
	// and without Cluster API's machine-pool-name label, so that Cluster
	// API makes no Machine for it. The pool promotes it when it scales out
	// by swapping this label for the machine-pool-name label; it then
	// joins the cluster as every member does (docs/machinepool.md).
	WarmPoolLabel = "containermachinepool.infrastructure.cluster.x-k8s.io/warm-pool"
)

// IsWarm reports whether cm is a warm member of a pool, not yet promoted.
func IsWarm(cm *ContainerMachine) bool {
	return cm.Labels[WarmPoolLabel] != "" && cm.Labels[clusterv1.MachinePoolNameLabel] == ""
}

// ContainerMachineSpec is the desired state of a ContainerMachine.
type ContainerMachineSpec struct {
	// providerID is container:///<container name>; CAPCT sets it once the
	// container runs, and the Node carries the same value.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.startsWith('container:///')",message="providerID must start with container:///"
	ProviderID string `json:"providerID,omitempty"`

	// image of the node container. When empty CAPCT picks the node image of
	// the Machine's Kubernetes version.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[^\s]+$`
	Image string `json:"image,omitempty"`

	// extraMounts are host paths mounted into the container.
	// +optional
	// +listType=map
	// +listMapKey=containerPath
	// +kubebuilder:validation:MaxItems=32
	ExtraMounts []Mount `json:"extraMounts,omitempty"`

	// extraPortMappings publish ports of the machine's container on the
	// container host (docs/port-mappings.md). A host port serves one
	// container per engine, so a template or pool with host ports runs one
	// machine per engine: a second machine that may run on the same engine
	// is refused when it is created. Immutable: the engine sets a
	// container's ports when it makes it; replace the machine to change
	// them.
	// +optional
	// +listType=map
	// +listMapKey=listenAddress
	// +listMapKey=hostPort
	// +listMapKey=protocol
	// +kubebuilder:validation:MaxItems=32
	ExtraPortMappings []PortMapping `json:"extraPortMappings,omitempty"`

	// preLoadImages are copied from the container host into the node's
	// containerd before bootstrap, so that nodes need no registry for them.
	// imagePullPolicy decides whether one the host lacks is pulled there
	// first.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	PreLoadImages []string `json:"preLoadImages,omitempty"`

	// imagePullPolicy says whether the engine pulls the node image (image,
	// or its default) and the preLoadImages that it lacks: IfNotPresent
	// (empty means IfNotPresent) or Never. An image the engine holds is
	// never pulled again, whatever the policy. Credentials come from the
	// ContainerCluster's imagePullSecretRef (docs/registries.md).
	// +optional
	ImagePullPolicy ImagePullPolicy `json:"imagePullPolicy,omitempty"`

	// resources limit the container's CPUs and memory.
	// +optional
	Resources *MachineResources `json:"resources,omitempty"`

	// lifecycle holds the timeouts of the machine's lifecycle phases.
	// +optional
	Lifecycle MachineLifecycle `json:"lifecycle,omitempty,omitzero"`
}

// ImagePullPolicy says whether CAPCT has a container engine pull an image
// that it lacks, from the image's registry.
//
// IfNotPresent is the default. Users of CAPD and kind expect a missing
// image to be pulled, and templates written for them name images on public
// registries. It changes nothing for an image the engine holds: one loaded
// by hand or built on the host (capct/node, capct/haproxy) is used as it is,
// without asking any registry, so an offline host runs exactly as under
// Never, and a missing image there ends in ImagePullFailed, whose message
// carries the registry's answer, until it is loaded. Which images can be
// pulled at all, and so which registries are asked, is the manager's
// --allowed-image-prefixes to decide (docs/security.md). Always is not
// offered: machines of one spec would run whatever the tag named at each
// launch.
// +kubebuilder:validation:Enum=Never;IfNotPresent
type ImagePullPolicy string

const (
	// ImagePullIfNotPresent pulls an image that the engine lacks; the
	// default.
	ImagePullIfNotPresent ImagePullPolicy = "IfNotPresent"
	// ImagePullNever never pulls: an image the engine lacks waits
	// (ImageNotOnHost) until someone loads it there.
	ImagePullNever ImagePullPolicy = "Never"
)

// Pulls reports whether the policy lets the engine pull a missing image;
// empty is the default, IfNotPresent.
func (p ImagePullPolicy) Pulls() bool { return p != ImagePullNever }

// ContainerMachineStatus is the observed state of a ContainerMachine.
type ContainerMachineStatus struct {
	// conditions of the machine: Launched, Bootstrapped, Registered,
	// Initialized, PodCIDRAllocated, Ready and Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// initialization reports the machine's provisioning, per the Cluster API
	// contract.
	// +optional
	Initialization MachineInitializationStatus `json:"initialization,omitempty,omitzero"`

	// addresses of the machine: its hostname and one InternalIP per family.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Addresses []clusterv1.MachineAddress `json:"addresses,omitempty"`

	// failureDomain the machine was placed in, from its Machine.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	FailureDomain string `json:"failureDomain,omitempty"`

	// podCIDRs allocated to the machine's Node, one per family.
	// +optional
	// +kubebuilder:validation:MaxItems=2
	PodCIDRs []string `json:"podCIDRs,omitempty"`

	// phase summarises the conditions for people; it is derived from them
	// and drives nothing.
	// +optional
	Phase MachinePhase `json:"phase,omitempty"`
}

// MachineInitializationStatus reports a ContainerMachine's provisioning.
// +kubebuilder:validation:MinProperties=1
type MachineInitializationStatus struct {
	// provisioned is true once the container runs its bootstrap data
	// successfully and providerID and addresses are set.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// MachinePhase is a one-word summary of a ContainerMachine's conditions.
type MachinePhase string

const (
	// MachinePhasePending: nothing has been launched yet.
	MachinePhasePending MachinePhase = "Pending"
	// MachinePhaseLaunched: the container runs; bootstrap has not finished.
	MachinePhaseLaunched MachinePhase = "Launched"
	// MachinePhaseBootstrapped: bootstrap finished; no Node yet.
	MachinePhaseBootstrapped MachinePhase = "Bootstrapped"
	// MachinePhaseRegistered: the Node exists but is not initialized.
	MachinePhaseRegistered MachinePhase = "Registered"
	// MachinePhaseRunning: the Node is Ready and initialized.
	MachinePhaseRunning MachinePhase = "Running"
	// MachinePhaseStopped: the container was launched but does not run
	// now (stopped, restarting, or the engine does not answer); Ready is
	// False until it runs again.
	MachinePhaseStopped MachinePhase = "Stopped"
	// MachinePhaseFailed: a phase failed for good; the machine must be
	// replaced.
	MachinePhaseFailed MachinePhase = "Failed"
	// MachinePhaseDeleting: deletion has started.
	MachinePhaseDeleting MachinePhase = "Deleting"
)

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=containermachines,scope=Namespaced,categories=cluster-api,shortName=cm
// +kubebuilder:storageversion
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster"
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase",description="Lifecycle phase"
// +kubebuilder:printcolumn:name="Provider ID",type="string",JSONPath=".spec.providerID",priority=10
// +kubebuilder:printcolumn:name="IP",type="string",JSONPath=`.status.addresses[?(@.type=="InternalIP")].address`,priority=10
// +kubebuilder:printcolumn:name="Pod CIDRs",type="string",JSONPath=".status.podCIDRs",priority=10
// +kubebuilder:printcolumn:name="Engine",type="string",JSONPath=".metadata.annotations['container\\.infrastructure\\.cluster\\.x-k8s\\.io/engine']",description="The ContainerEngine the machine is placed on; empty: the manager's own",priority=10
// +kubebuilder:printcolumn:name="Container",type="string",JSONPath=`.status.conditions[?(@.type=="ContainerRunning")].reason`,description="Whether the container runs (Running, Stopped, Restarting, EngineUnreachable)",priority=10
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// ContainerMachine is a Cluster API Machine's infrastructure: one container
// running a Kubernetes node.
type ContainerMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	// +kubebuilder:validation:XValidation:rule="has(self.image) == has(oldSelf.image) && (!has(self.image) || self.image == oldSelf.image)",message="image is immutable: replace the machine to change it"
	// +kubebuilder:validation:XValidation:rule="!has(oldSelf.providerID) || (has(self.providerID) && self.providerID == oldSelf.providerID)",message="providerID is immutable once set"
	// +kubebuilder:validation:XValidation:rule="has(self.extraPortMappings) == has(oldSelf.extraPortMappings) && (!has(self.extraPortMappings) || self.extraPortMappings == oldSelf.extraPortMappings)",message="extraPortMappings are immutable: the engine publishes a container's ports when it makes it; replace the machine to change them",fieldPath=".extraPortMappings"
	Spec ContainerMachineSpec `json:"spec,omitempty"`
	// +optional
	Status ContainerMachineStatus `json:"status,omitempty"`
}

// GetConditions returns the conditions, for CAPI's condition utilities.
func (m *ContainerMachine) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions sets the conditions, for CAPI's condition utilities.
func (m *ContainerMachine) SetConditions(conditions []metav1.Condition) {
	m.Status.Conditions = conditions
}

// +kubebuilder:object:root=true

// ContainerMachineList is a list of ContainerMachines.
type ContainerMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ContainerMachine `json:"items"`
}

func init() {
	schemeBuilder.Register(&ContainerMachine{}, &ContainerMachineList{})
}
