//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	capie2e "sigs.k8s.io/cluster-api/test/e2e"
	"sigs.k8s.io/cluster-api/test/framework"
	"sigs.k8s.io/cluster-api/test/framework/clusterctl"

	"github.com/capct/cluster-api-provider-container/internal/kubeversion"
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
// While the version changes, CoreDNS is probed and the MachinePool's
// rollout is held to its maxSurge and maxUnavailable
// (upgrade_probes_test.go).
var _ = Describe("When upgrading a workload cluster using ClusterClass", Label("cluster-upgrade"), func() {
	watch := watchUpgrade()
	capie2e.ClusterUpgradeConformanceSpec(ctx, func() capie2e.ClusterUpgradeConformanceSpecInput {
		return upgradeInput(upgradeConfig(
			e2eConfig.MustGetVariable(capie2e.KubernetesVersionUpgradeFrom),
			e2eConfig.MustGetVariable(capie2e.KubernetesVersionUpgradeTo)), watch)
	})
})

// The same from the previous minor to the pinned version (the config's
// KUBERNETES_VERSION_PREVIOUS_UPGRADE_FROM to KUBERNETES_VERSION), the
// upgrade users of the current release make.
var _ = Describe("When upgrading a workload cluster from the previous minor using ClusterClass", Label("cluster-upgrade-previous"), func() {
	watch := watchUpgrade()
	capie2e.ClusterUpgradeConformanceSpec(ctx, func() capie2e.ClusterUpgradeConformanceSpecInput {
		return upgradeInput(upgradeConfig(
			e2eConfig.MustGetVariable("KUBERNETES_VERSION_PREVIOUS_UPGRADE_FROM"),
			e2eConfig.MustGetVariable(capie2e.KubernetesVersion)), watch)
	})
})

// upgradeConfig is a copy of the suite's config for an upgrade from one
// Kubernetes release to another: Cluster API's spec reads the versions, and
// the etcd and CoreDNS tags the control plane moves to, from fixed
// variables. The tags are what kubeadm of the target release runs, which
// its node image preloads (internal/kubeversion), so nothing is pulled.
func upgradeConfig(from, to string) *clusterctl.E2EConfig {
	target, err := kubeversion.Parse(to)
	Expect(err).ToNot(HaveOccurred())
	config := e2eConfig.DeepCopy()
	config.Variables[capie2e.KubernetesVersionUpgradeFrom] = from
	config.Variables[capie2e.KubernetesVersionUpgradeTo] = target.String()
	config.Variables[capie2e.EtcdVersionUpgradeTo] = target.Etcd()
	config.Variables[capie2e.CoreDNSVersionUpgradeTo] = target.CoreDNS()
	return config
}

// upgradeInput is both upgrade specs' input: the ClusterClass flavor
// upgrades with 1 control plane, 1 MachineDeployment and 1 MachinePool
// worker, conformance skipped, the versions taken from config. Its hook,
// run right after the topology's version changed, starts watch's probe and
// MachinePool sampler; the JustAfterEach that watchUpgrade registered in
// the same Describe ends them once the spec has seen the upgrade finished,
// before the spec's AfterEach deletes the cluster.
func upgradeInput(config *clusterctl.E2EConfig, watch *upgradeWatch) capie2e.ClusterUpgradeConformanceSpecInput {
	version := config.MustGetVariable(capie2e.KubernetesVersionUpgradeTo)
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
		PreWaitForControlPlaneToBeUpgraded: func(mgmt framework.ClusterProxy, namespace, clusterName string) {
			watch.start(mgmt, namespace, clusterName, version)
		},
	}
}
