// Package v1alpha1 contains CAPCT's experimental API: ContainerMachinePool
// and its template, the InfraMachinePool of the Cluster API contract. It is
// served only while the MachinePool feature gate is on.
//
// +kubebuilder:object:generate=true
// +groupName=infrastructure.cluster.x-k8s.io
package v1alpha1
