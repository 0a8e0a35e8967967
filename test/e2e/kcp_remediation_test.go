//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	"k8s.io/utils/ptr"
	capie2e "sigs.k8s.io/cluster-api/test/e2e"
)

var _ = Describe("When testing KCP remediation", Label("kcp-remediation"), func() {
	capie2e.KCPRemediationSpec(ctx, func() capie2e.KCPRemediationSpecInput {
		return capie2e.KCPRemediationSpecInput{
			E2EConfig:              e2eConfig,
			ClusterctlConfigPath:   clusterctlConfigPath,
			BootstrapClusterProxy:  bootstrapClusterProxy,
			ArtifactFolder:         artifactFolder,
			SkipCleanup:            skipCleanup,
			InfrastructureProvider: ptr.To("container"),
			// Three control-plane machines, each held before kubeadm until
			// the spec signals it through the management cluster
			// (templates/e2e/kcp-remediation/wait-signal.yaml), and a
			// MachineHealthCheck on them.
			Flavor: ptr.To("kcp-remediation"),
		}
	})
})
