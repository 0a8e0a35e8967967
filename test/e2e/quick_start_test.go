//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterctlcluster "sigs.k8s.io/cluster-api/cmd/clusterctl/client/cluster"
	capie2e "sigs.k8s.io/cluster-api/test/e2e"
	"sigs.k8s.io/cluster-api/test/framework"
)

var _ = Describe("When following the Cluster API quick-start", Label("quick-start"), func() {
	capie2e.QuickStartSpec(ctx, func() capie2e.QuickStartSpecInput {
		return capie2e.QuickStartSpecInput{
			E2EConfig:              e2eConfig,
			ClusterctlConfigPath:   clusterctlConfigPath,
			BootstrapClusterProxy:  bootstrapClusterProxy,
			ArtifactFolder:         artifactFolder,
			SkipCleanup:            skipCleanup,
			InfrastructureProvider: ptr.To("container"),
			PostMachinesProvisioned: func(proxy framework.ClusterProxy, namespace, clusterName string) {
				validateResilience(proxy, namespace, clusterName, false, "quick-start")
			},
		}
	})
})

var _ = Describe("When following the Cluster API quick-start with ClusterClass", Label("quick-start-clusterclass"), func() {
	capie2e.QuickStartSpec(ctx, func() capie2e.QuickStartSpecInput {
		return capie2e.QuickStartSpecInput{
			E2EConfig:              e2eConfig,
			ClusterctlConfigPath:   clusterctlConfigPath,
			BootstrapClusterProxy:  bootstrapClusterProxy,
			ArtifactFolder:         artifactFolder,
			SkipCleanup:            skipCleanup,
			InfrastructureProvider: ptr.To("container"),
			// templates/cluster-template-topology.yaml with ClusterClass
			// quick-start; its variables networkName and networkMode put the
			// cluster on the management cluster's network.
			Flavor: ptr.To("topology"),
			PostMachinesProvisioned: func(proxy framework.ClusterProxy, namespace, clusterName string) {
				validateResilience(proxy, namespace, clusterName, true, "quick-start")
			},
		}
	})
})

// validateResilience runs the checks CAPI's own quick-start runs once the
// machines are provisioned, with CAPCT's assertion maps beside CAPI's:
// owner references and finalizers that come back after they are stripped,
// owner references moved to the current API version, and no write churn
// once the cluster is stable.
func validateResilience(proxy framework.ClusterProxy, namespace, clusterName string, topologyManaged bool, spec string) {
	filter := clusterctlcluster.FilterClusterObjectsWithNameFilter(clusterName)
	owners := []map[string]func(types.NamespacedName, []metav1.OwnerReference) error{
		framework.CoreOwnerReferenceAssertion,
		framework.ExpOwnerReferenceAssertions,
		containerInfraOwnerReferenceAssertions(topologyManaged),
		framework.KubeadmBootstrapOwnerReferenceAssertions,
		framework.KubeadmControlPlaneOwnerReferenceAssertions(topologyManaged),
		framework.KubernetesReferenceAssertions,
	}
	By("Checking that owner references are resilient")
	framework.ValidateOwnerReferencesResilience(ctx, proxy, namespace, clusterName, filter, owners...)
	By("Checking that owner references are updated to the correct API version")
	framework.ValidateOwnerReferencesOnUpdate(ctx, proxy, namespace, clusterName, filter, owners...)
	By("Checking that finalizers are resilient")
	core := framework.CoreFinalizersAssertionWithLegacyClusters
	if topologyManaged {
		core = framework.CoreFinalizersAssertionWithClassyClusters
	}
	framework.ValidateFinalizersResilience(ctx, proxy, namespace, clusterName, filter,
		core,
		framework.KubeadmControlPlaneFinalizersAssertion,
		framework.ExpFinalizersAssertion,
		containerInfraFinalizersAssertion,
	)
	By("Checking that resourceVersions are stable")
	framework.ValidateResourceVersionStable(ctx, framework.ValidateResourceVersionStableInput{
		ClusterProxy:             proxy,
		Namespace:                namespace,
		OwnerGraphFilterFunction: filter,
		WaitToBecomeStable:       e2eConfig.GetIntervals(spec, "wait-resource-versions-become-stable"),
		WaitToRemainStable:       e2eConfig.GetIntervals(spec, "wait-resource-versions-remain-stable"),
	})
}
