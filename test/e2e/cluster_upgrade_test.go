//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	"k8s.io/utils/ptr"
	capie2e "sigs.k8s.io/cluster-api/test/e2e"
	"sigs.k8s.io/cluster-api/test/framework/clusterctl"
)

// A Kubernetes upgrade through Cluster API on real nodes: a ClusterClass
// cluster of 1 control plane, 1 MachineDeployment worker and 1 MachinePool
// worker on KUBERNETES_VERSION_UPGRADE_FROM, its topology's version then
// moved to KUBERNETES_VERSION_UPGRADE_TO. The control plane, the
// MachineDeployment and the MachinePool roll onto machines of the new
// version's node image (the ClusterClass derives the image from the
// version), and every Node must end on it. Conformance is skipped: its
// image would be pulled, and no registry is reachable here. Both versions'
// node images must be on the engine (make node-image KUBERNETES_VERSION=...).
var _ = Describe("When upgrading a workload cluster using ClusterClass", Label("cluster-upgrade"), func() {
	capie2e.ClusterUpgradeConformanceSpec(ctx, func() capie2e.ClusterUpgradeConformanceSpecInput {
		return upgradeInput(e2eConfig)
	})
})

// The same from the previous minor to the pinned version (the config's
// KUBERNETES_VERSION_PREVIOUS_UPGRADE_FROM to KUBERNETES_VERSION), the
// upgrade users of the current release make. Cluster API's spec reads its
// versions from fixed variables, so it runs on a copy of the config with
// them set.
var _ = Describe("When upgrading a workload cluster from the previous minor using ClusterClass", Label("cluster-upgrade-previous"), func() {
	capie2e.ClusterUpgradeConformanceSpec(ctx, func() capie2e.ClusterUpgradeConformanceSpecInput {
		config := e2eConfig.DeepCopy()
		config.Variables[capie2e.KubernetesVersionUpgradeFrom] = config.MustGetVariable("KUBERNETES_VERSION_PREVIOUS_UPGRADE_FROM")
		config.Variables[capie2e.KubernetesVersionUpgradeTo] = config.MustGetVariable(capie2e.KubernetesVersion)
		config.Variables[capie2e.EtcdVersionUpgradeTo] = config.MustGetVariable("ETCD_VERSION_PREVIOUS_UPGRADE_TO")
		config.Variables[capie2e.CoreDNSVersionUpgradeTo] = config.MustGetVariable("COREDNS_VERSION_PREVIOUS_UPGRADE_TO")
		return upgradeInput(config)
	})
})

// upgradeInput is both upgrade specs' input: the ClusterClass flavor
// upgrades with 1 control plane, 1 MachineDeployment and 1 MachinePool
// worker, conformance skipped, the versions taken from config.
func upgradeInput(config *clusterctl.E2EConfig) capie2e.ClusterUpgradeConformanceSpecInput {
	return capie2e.ClusterUpgradeConformanceSpecInput{
		E2EConfig:                config,
		ClusterctlConfigPath:     clusterctlConfigPath,
		BootstrapClusterProxy:    bootstrapClusterProxy,
		ArtifactFolder:           artifactFolder,
		SkipCleanup:              skipCleanup,
		SkipConformanceTests:     true,
		InfrastructureProvider:   ptr.To("container"),
		Flavor:                   ptr.To("upgrades"),
		ControlPlaneMachineCount: ptr.To[int64](1),
		WorkerMachineCount:       ptr.To[int64](1),
	}
}
