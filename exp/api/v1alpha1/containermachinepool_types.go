package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// MachinePoolFinalizer lets the ContainerMachinePool controller remove its
// machines before the object goes.
const MachinePoolFinalizer = "containermachinepool.infrastructure.cluster.x-k8s.io"

// ContainerMachinePoolSpec is the desired state of a ContainerMachinePool.
// +kubebuilder:validation:XValidation:rule="!has(self.warmPool) || !has(self.warmPool.size) || self.warmPool.size == 0 || !has(self.template.extraPortMappings) || size(self.template.extraPortMappings) == 0",message="warmPool cannot be used with template.extraPortMappings: one host port serves one container per engine, and warm machines would publish the members' ports"
type ContainerMachinePoolSpec struct {
	// template is the spec of every ContainerMachine of the pool. Changing
	// its image replaces the machines according to strategy.
	// +required
	// +kubebuilder:validation:XValidation:rule="!has(self.providerID)",message="providerID is set per machine and cannot be templated"
	Template infrav1.ContainerMachineSpec `json:"template"`

	// strategy bounds how a rolling replacement proceeds.
	// +optional
	Strategy RollingUpdate `json:"strategy,omitempty,omitzero"`

	// warmPool keeps machines booted ahead of a scale-out, as cloud
	// auto-scaling groups' warm pools do.
	// +optional
	WarmPool WarmPool `json:"warmPool,omitempty,omitzero"`

	// providerID identifies the pool as a whole.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// providerIDList is the sorted list of the pool's machines' provider
	// IDs. CAPCT keeps it current; Cluster API uses it to match Nodes.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10000
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	ProviderIDList []string `json:"providerIDList,omitempty"`
}

// WarmPool is how many machines a pool keeps booted and not joined.
type WarmPool struct {
	// size is how many warm machines the pool keeps: containers created
	// from the template and booted (systemd and containerd up), with no
	// bootstrap data, no Machine and no Node. A scale-out takes warm
	// machines first and joins them, which skips the container's creation
	// and boot; the pool makes new warm machines once every member is
	// Ready again, so that warming never competes with a scale-out for
	// the host. They count against the engines' and namespaces' machine
	// limits like every machine. 0, the default, keeps none.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Size int32 `json:"size,omitempty"`
}

// RollingUpdate bounds a rolling replacement of a pool's machines.
// +kubebuilder:validation:XValidation:rule="!has(self.maxSurge) || !has(self.maxUnavailable) || self.maxSurge != 0 || self.maxUnavailable != 0",message="maxSurge and maxUnavailable cannot both be zero"
type RollingUpdate struct {
	// maxSurge is how many machines may exist above the desired replicas
	// during a replacement, as a number or a percentage. Defaults to 1.
	// +optional
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`

	// maxUnavailable is how many machines may be unavailable during a
	// replacement, as a number or a percentage. Defaults to 0.
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// ContainerMachinePoolStatus is the observed state of a ContainerMachinePool.
type ContainerMachinePoolStatus struct {
	// conditions of the pool: Ready and Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// initialization reports the pool's provisioning, per the Cluster API
	// contract.
	// +optional
	Initialization PoolInitializationStatus `json:"initialization,omitempty,omitzero"`

	// ready is true when the replicas match and all are provisioned. Cluster
	// API v1.13 still reads it for MachinePools, so it is kept beside
	// initialization.provisioned.
	// +optional
	Ready bool `json:"ready"`

	// replicas is the number of machines of the pool.
	// +optional
	Replicas int32 `json:"replicas"`

	// warmReplicas is the number of warm machines whose container runs,
	// ready to join the pool (spec.warmPool).
	// +optional
	WarmReplicas int32 `json:"warmReplicas,omitempty"`

	// infrastructureMachineKind tells Cluster API that the pool's machines are
	// ContainerMachines (MachinePool Machines).
	// +optional
	InfrastructureMachineKind string `json:"infrastructureMachineKind,omitempty"`

	// instances describes each machine of the pool.
	// +optional
	// +listType=map
	// +listMapKey=instanceName
	// +kubebuilder:validation:MaxItems=10000
	Instances []ContainerMachinePoolInstance `json:"instances,omitempty"`

	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// capacity of one machine of the pool: cpu and memory, from
	// spec.template.resources, each only when set, which the cluster
	// autoscaler reads to scale the MachinePool from zero. Empty when the
	// template sets no limits: such a container shares the whole host with
	// every other node on it, so no figure is its own.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`

	// nodeInfo describes the pool's nodes: their operating system.
	// +optional
	NodeInfo *infrav1.NodeInfo `json:"nodeInfo,omitempty"`
}

// PoolInitializationStatus reports a ContainerMachinePool's provisioning.
// +kubebuilder:validation:MinProperties=1
type PoolInitializationStatus struct {
	// provisioned is true when the replicas match and all are provisioned.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// ContainerMachinePoolInstance describes one machine of a pool.
type ContainerMachinePoolInstance struct {
	// instanceName is the name of the machine's container.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	InstanceName string `json:"instanceName"`

	// providerID of the machine.
	// +optional
	ProviderID string `json:"providerID,omitempty"`

	// addresses of the machine.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Addresses []clusterv1.MachineAddress `json:"addresses,omitempty"`

	// version is the Kubernetes version the machine runs.
	// +optional
	Version string `json:"version,omitempty"`

	// ready is true when the machine is provisioned.
	// +optional
	Ready bool `json:"ready"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=containermachinepools,scope=Namespaced,categories=cluster-api,shortName=cmp
// +kubebuilder:storageversion
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster"
// +kubebuilder:printcolumn:name="Replicas",type="integer",JSONPath=".status.replicas"
// +kubebuilder:printcolumn:name="Warm",type="integer",JSONPath=".status.warmReplicas",priority=1
// +kubebuilder:printcolumn:name="Ready",type="boolean",JSONPath=".status.ready"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// ContainerMachinePool is the infrastructure of a MachinePool: a set of
// ContainerMachines, one container each.
type ContainerMachinePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec ContainerMachinePoolSpec `json:"spec,omitempty"`
	// +optional
	Status ContainerMachinePoolStatus `json:"status,omitempty"`
}

// GetConditions returns the conditions, for CAPI's condition utilities.
func (p *ContainerMachinePool) GetConditions() []metav1.Condition { return p.Status.Conditions }

// SetConditions sets the conditions, for CAPI's condition utilities.
func (p *ContainerMachinePool) SetConditions(conditions []metav1.Condition) {
	p.Status.Conditions = conditions
}

// +kubebuilder:object:root=true

// ContainerMachinePoolList is a list of ContainerMachinePools.
type ContainerMachinePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ContainerMachinePool `json:"items"`
}

func init() {
	schemeBuilder.Register(&ContainerMachinePool{}, &ContainerMachinePoolList{})
}
