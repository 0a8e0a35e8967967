//go:build e2e

package e2e

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/test/framework"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
)

// CAPCT's kinds, as the owner graph names them.
const (
	containerClusterKind             = "ContainerCluster"
	containerClusterTemplateKind     = "ContainerClusterTemplate"
	containerMachineKind             = "ContainerMachine"
	containerMachineTemplateKind     = "ContainerMachineTemplate"
	containerMachinePoolKind         = "ContainerMachinePool"
	containerMachinePoolTemplateKind = "ContainerMachinePoolTemplate"
)

// The owners HasExactOwners compares: API version, kind and whether it is
// the controller (the framework keeps its own copies of these unexported).
var (
	coreGroupVersion = clusterv1.GroupVersion.String()

	clusterOwner          = metav1.OwnerReference{Kind: "Cluster", APIVersion: coreGroupVersion}
	clusterController     = metav1.OwnerReference{Kind: "Cluster", APIVersion: coreGroupVersion, Controller: ptr.To(true)}
	clusterClassOwner     = metav1.OwnerReference{Kind: "ClusterClass", APIVersion: coreGroupVersion}
	machineController     = metav1.OwnerReference{Kind: "Machine", APIVersion: coreGroupVersion, Controller: ptr.To(true)}
	machinePoolController = metav1.OwnerReference{Kind: "MachinePool", APIVersion: coreGroupVersion, Controller: ptr.To(true)}
	// The ContainerMachinePool owns its ContainerMachines without being
	// their controller: CAPI's MachinePool controller makes the Machine it
	// creates for each one the controller (docs/machinepool.md).
	containerMachinePoolOwner = metav1.OwnerReference{Kind: containerMachinePoolKind, APIVersion: expinfrav1.GroupVersion.String()}
)

// containerInfraOwnerReferenceAssertions is CAPCT's counterpart of
// framework.DockerInfraOwnerReferenceAssertions: which owners each CAPCT
// object must have, and so must get back after the framework strips them.
// topologyManaged: the Cluster comes from a ClusterClass, whose topology
// controller makes the Cluster the ContainerCluster's controller.
func containerInfraOwnerReferenceAssertions(topologyManaged bool) map[string]func(types.NamespacedName, []metav1.OwnerReference) error {
	containerClusterOwner := clusterOwner
	if topologyManaged {
		containerClusterOwner = clusterController
	}
	return map[string]func(types.NamespacedName, []metav1.OwnerReference) error{
		containerMachineKind: func(_ types.NamespacedName, owners []metav1.OwnerReference) error {
			// A Machine's (KubeadmControlPlane, MachineSet) or a pool's.
			return framework.HasOneOfExactOwners(owners,
				[]metav1.OwnerReference{machineController},
				[]metav1.OwnerReference{machineController, containerMachinePoolOwner})
		},
		containerMachineTemplateKind: func(_ types.NamespacedName, owners []metav1.OwnerReference) error {
			// A Cluster's, or a ClusterClass's base template.
			return framework.HasOneOfExactOwners(owners, []metav1.OwnerReference{clusterOwner}, []metav1.OwnerReference{clusterClassOwner})
		},
		containerClusterKind: func(_ types.NamespacedName, owners []metav1.OwnerReference) error {
			return framework.HasExactOwners(owners, containerClusterOwner)
		},
		containerClusterTemplateKind: func(_ types.NamespacedName, owners []metav1.OwnerReference) error {
			return framework.HasExactOwners(owners, clusterClassOwner)
		},
		containerMachinePoolKind: func(_ types.NamespacedName, owners []metav1.OwnerReference) error {
			return framework.HasExactOwners(owners, machinePoolController, clusterOwner)
		},
		containerMachinePoolTemplateKind: func(_ types.NamespacedName, owners []metav1.OwnerReference) error {
			return framework.HasExactOwners(owners, clusterClassOwner)
		},
	}
}

// containerInfraFinalizersAssertion is CAPCT's counterpart of
// framework.DockerInfraFinalizersAssertion: the finalizer each CAPCT object
// must carry, and must get back after the framework removes it.
var containerInfraFinalizersAssertion = map[string]func(types.NamespacedName) []string{
	containerMachineKind:     func(_ types.NamespacedName) []string { return []string{infrav1.MachineFinalizer} },
	containerClusterKind:     func(_ types.NamespacedName) []string { return []string{infrav1.ClusterFinalizer} },
	containerMachinePoolKind: func(_ types.NamespacedName) []string { return []string{expinfrav1.MachinePoolFinalizer} },
}
