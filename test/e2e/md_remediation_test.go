//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	"k8s.io/utils/ptr"
	capie2e "sigs.k8s.io/cluster-api/test/e2e"
)

var _ = Describe("When testing MachineDeployment remediation", Label("md-remediation"), func() {
	capie2e.MachineDeploymentRemediationSpec(ctx, func() capie2e.MachineDeploymentRemediationSpecInput {
		return capie2e.MachineDeploymentRemediationSpecInput{
			E2EConfig:              e2eConfig,
			ClusterctlConfigPath:   clusterctlConfigPath,
			BootstrapClusterProxy:  bootstrapClusterProxy,
			ArtifactFolder:         artifactFolder,
			SkipCleanup:            skipCleanup,
			InfrastructureProvider: ptr.To("container"),
			// The default flavor and a MachineHealthCheck on md-0's workers
			// (templates/e2e/md-remediation/mhc.yaml).
			Flavor: ptr.To("md-remediation"),
		}
	})
})
