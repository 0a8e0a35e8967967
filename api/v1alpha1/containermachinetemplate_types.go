package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// ContainerMachineTemplateSpec is the desired state of a
// ContainerMachineTemplate.
type ContainerMachineTemplateSpec struct {
	// template is stamped out as ContainerMachines.
	// +required
	Template ContainerMachineTemplateResource `json:"template"`
}

// ContainerMachineTemplateResource is what a ContainerMachineTemplate stamps
// out.
type ContainerMachineTemplateResource struct {
	// metadata is added to each ContainerMachine.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// spec of each ContainerMachine. providerID is set per machine and must
	// stay empty here.
	// +required
	// +kubebuilder:validation:XValidation:rule="!has(self.providerID)",message="providerID is set per machine and cannot be templated"
	Spec ContainerMachineSpec `json:"spec"`
}

// ContainerMachineTemplateStatus reports what machines of this template
// provide, so that the cluster autoscaler can scale from zero (Cluster
// API's opt-in autoscaling from zero). CAPCT fills it from the spec.
type ContainerMachineTemplateStatus struct {
	// capacity of one machine: cpu and memory, from
	// spec.template.spec.resources, each only when set. Empty when the
	// template sets no limits: such a container shares the whole host with
	// every other node on it, so no figure is its own.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`

	// nodeInfo describes the machines' nodes: their operating system.
	// +optional
	NodeInfo *NodeInfo `json:"nodeInfo,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=containermachinetemplates,scope=Namespaced,categories=cluster-api
// +kubebuilder:storageversion
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// ContainerMachineTemplate is a template for ContainerMachines, used by
// MachineDeployments, KubeadmControlPlanes and ClusterClasses.
type ContainerMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ContainerMachineTemplateSpec `json:"spec"`
	// +optional
	Status ContainerMachineTemplateStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ContainerMachineTemplateList is a list of ContainerMachineTemplates.
type ContainerMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ContainerMachineTemplate `json:"items"`
}

func init() {
	schemeBuilder.Register(&ContainerMachineTemplate{}, &ContainerMachineTemplateList{})
}
