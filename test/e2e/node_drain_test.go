//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	"k8s.io/utils/ptr"
	capie2e "sigs.k8s.io/cluster-api/test/e2e"
)

var _ = Describe("When testing Node drain", Label("node-drain"), func() {
	capie2e.NodeDrainTimeoutSpec(ctx, func() capie2e.NodeDrainTimeoutSpecInput {
		return capie2e.NodeDrainTimeoutSpecInput{
			E2EConfig:              e2eConfig,
			ClusterctlConfigPath:   clusterctlConfigPath,
			BootstrapClusterProxy:  bootstrapClusterProxy,
			ArtifactFolder:         artifactFolder,
			SkipCleanup:            skipCleanup,
			InfrastructureProvider: ptr.To("container"),
			// The ClusterClass flavor (the spec sets drain timeouts and
			// labels through the topology); its Pods run the pause image
			// that the node image carries.
			Flavor: ptr.To("topology"),
		}
	})
})
