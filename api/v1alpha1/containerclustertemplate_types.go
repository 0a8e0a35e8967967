package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// ContainerClusterTemplateSpec is the desired state of a
// ContainerClusterTemplate.
type ContainerClusterTemplateSpec struct {
	// template is stamped out as a ContainerCluster by ClusterClass topologies.
	// +required
	Template ContainerClusterTemplateResource `json:"template"`
}

// ContainerClusterTemplateResource is what a ContainerClusterTemplate stamps
// out.
// +kubebuilder:validation:XValidation:rule="!has(self.spec.clusterID)",message="spec.clusterID is set by CAPCT for each cluster; a template shared by many clusters must not set it"
type ContainerClusterTemplateResource struct {
	// metadata is added to the ContainerCluster.
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	// spec of the ContainerCluster.
	// +required
	Spec ContainerClusterSpec `json:"spec"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=containerclustertemplates,scope=Namespaced,categories=cluster-api
// +kubebuilder:storageversion
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// ContainerClusterTemplate is a template for ContainerClusters, used by
// ClusterClasses.
type ContainerClusterTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ContainerClusterTemplateSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// ContainerClusterTemplateList is a list of ContainerClusterTemplates.
type ContainerClusterTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ContainerClusterTemplate `json:"items"`
}

func init() {
	schemeBuilder.Register(&ContainerClusterTemplate{}, &ContainerClusterTemplateList{})
}
