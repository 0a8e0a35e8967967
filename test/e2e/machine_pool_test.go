//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	"k8s.io/utils/ptr"
	capie2e "sigs.k8s.io/cluster-api/test/e2e"
)

var _ = Describe("When testing MachinePools", Label("machine-pool"), func() {
	capie2e.MachinePoolSpec(ctx, func() capie2e.MachinePoolInput {
		return capie2e.MachinePoolInput{
			E2EConfig:              e2eConfig,
			ClusterctlConfigPath:   clusterctlConfigPath,
			BootstrapClusterProxy:  bootstrapClusterProxy,
			ArtifactFolder:         artifactFolder,
			SkipCleanup:            skipCleanup,
			InfrastructureProvider: ptr.To("container"),
			// CAPCT's flavor name (templates/cluster-template-machinepool.yaml);
			// the spec's default is CAPD's "machine-pool".
			Flavor: ptr.To("machinepool"),
		}
	})
})
