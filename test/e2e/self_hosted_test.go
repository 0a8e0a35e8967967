//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	"k8s.io/utils/ptr"
	capie2e "sigs.k8s.io/cluster-api/test/e2e"
)

// The workload cluster becomes its own management cluster: clusterctl init
// into it (cert-manager and the providers from the same local sources, see
// -e2e.cert-manager-from), clusterctl move of its own objects into it, and
// back again before it is deleted. CAPCT's manager in the workload cluster
// drives the same engine through the socket the flavor mounts.
var _ = Describe("When testing Cluster API working on self-hosted clusters", Label("self-hosted"), func() {
	capie2e.SelfHostedSpec(ctx, func() capie2e.SelfHostedSpecInput {
		return capie2e.SelfHostedSpecInput{
			E2EConfig:              e2eConfig,
			ClusterctlConfigPath:   clusterctlConfigPath,
			BootstrapClusterProxy:  bootstrapClusterProxy,
			ArtifactFolder:         artifactFolder,
			SkipCleanup:            skipCleanup,
			InfrastructureProvider: ptr.To("container"),
			Flavor:                 "self-hosted",
			// One Kubernetes version is built (the node image's).
			SkipUpgrade: true,
		}
	})
})
