package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// ContainerMachinePoolTemplateSpec is the desired state of a
// ContainerMachinePoolTemplate.
type ContainerMachinePoolTemplateSpec struct {
	// template is stamped out as ContainerMachinePools by ClusterClass
	// topologies.
	// +required
	Template ContainerMachinePoolTemplateResource `json:"template"`
}

// ContainerMachinePoolTemplateResource is what a ContainerMachinePoolTemplate
// stamps out.
type ContainerMachinePoolTemplateResource struct {
	// metadata is added to the ContainerMachinePool.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// spec of the ContainerMachinePool.
	// +required
	Spec ContainerMachinePoolSpec `json:"spec"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=containermachinepooltemplates,scope=Namespaced,categories=cluster-api
// +kubebuilder:storageversion
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// ContainerMachinePoolTemplate is a template for ContainerMachinePools.
type ContainerMachinePoolTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ContainerMachinePoolTemplateSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// ContainerMachinePoolTemplateList is a list of ContainerMachinePoolTemplates.
type ContainerMachinePoolTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ContainerMachinePoolTemplate `json:"items"`
}

func init() {
	schemeBuilder.Register(&ContainerMachinePoolTemplate{}, &ContainerMachinePoolTemplateList{})
}
