//go:build e2e

package e2e

import (
	"slices"

	. "github.com/onsi/ginkgo/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	capie2e "sigs.k8s.io/cluster-api/test/e2e"
)

// The order in which a Cluster's objects go, with CAPCT's kind where Cluster
// API's own test names CAPD's: the workers' Machines and their
// MachineDeployment and MachineSet, then the control plane's, then the
// ContainerCluster (its load balancer and network) before the Cluster
// itself. Each phase is held by a
// finalizer on its blocking objects until the spec has checked that nothing
// of a later phase has started to go.
var _ = Describe("When performing cluster deletion", Label("cluster-deletion"), func() {
	capie2e.ClusterDeletionSpec(ctx, func() capie2e.ClusterDeletionSpecInput {
		return capie2e.ClusterDeletionSpecInput{
			E2EConfig:              e2eConfig,
			ClusterctlConfigPath:   clusterctlConfigPath,
			BootstrapClusterProxy:  bootstrapClusterProxy,
			ArtifactFolder:         artifactFolder,
			SkipCleanup:            skipCleanup,
			InfrastructureProvider: ptr.To("container"),
			// One control-plane machine, not Cluster API's three: the phases
			// are the same, and three etcd members cost minutes on two cores.
			ControlPlaneMachineCount: ptr.To[int64](1),
			WorkerMachineCount:       ptr.To[int64](1),
			ClusterDeletionPhases: []capie2e.ClusterDeletionPhase{
				{
					ObjectFilter: func(ref corev1.ObjectReference, owners []metav1.OwnerReference) bool {
						if ref.Kind == "Machine" {
							return ownedBy(owners, "MachineDeployment", "MachineSet")
						}
						return ref.Kind == "MachineDeployment" || ref.Kind == "MachineSet"
					},
					BlockingObjectFilter: isMachine,
				},
				{
					ObjectFilter: func(ref corev1.ObjectReference, owners []metav1.OwnerReference) bool {
						if ref.Kind == "Machine" {
							return ownedBy(owners, "KubeadmControlPlane")
						}
						return ref.Kind == "KubeadmControlPlane"
					},
					BlockingObjectFilter: isMachine,
				},
				{
					ObjectFilter: func(ref corev1.ObjectReference, _ []metav1.OwnerReference) bool {
						return ref.Kind == containerClusterKind
					},
					BlockingObjectFilter: func(ref corev1.ObjectReference, _ []metav1.OwnerReference) bool {
						return ref.Kind == containerClusterKind
					},
				},
			},
		}
	})
})

func isMachine(ref corev1.ObjectReference, _ []metav1.OwnerReference) bool {
	return ref.Kind == "Machine"
}

func ownedBy(owners []metav1.OwnerReference, kinds ...string) bool {
	return slices.ContainsFunc(owners, func(o metav1.OwnerReference) bool { return slices.Contains(kinds, o.Kind) })
}
