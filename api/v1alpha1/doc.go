// Package v1alpha1 contains the CAPCT infrastructure API: ContainerCluster and
// ContainerMachine, and their templates. They implement the Cluster API v1beta2
// InfraCluster and InfraMachine contracts; every CRD carries the label
// cluster.x-k8s.io/v1beta2: v1alpha1 so that Cluster API resolves
// version-less references to this version. ContainerEngine, cluster-scoped
// and outside the contracts, names an engine a cluster's machines may run
// on (docs/multihost.md).
//
// +kubebuilder:object:generate=true
// +groupName=infrastructure.cluster.x-k8s.io
package v1alpha1
