//go:build e2e

package e2e

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
	"sigs.k8s.io/cluster-api/test/framework"
	"sigs.k8s.io/cluster-api/test/framework/clusterctl"
)

// The flags CAPI's own suites take, so that its documentation applies.
var (
	configPath         string
	artifactFolder     string
	skipCleanup        bool
	useExistingCluster bool
	kubeconfigPath     string
	certManagerFrom    string
)

func init() {
	flag.StringVar(&configPath, "e2e.config", "config/container.yaml", "the e2e test configuration")
	flag.StringVar(&artifactFolder, "e2e.artifacts-folder", "../../out/e2e/artifacts", "where the test writes logs, the clusterctl repository and the junit report")
	flag.BoolVar(&skipCleanup, "e2e.skip-resource-cleanup", false, "leave the workload clusters after the specs")
	// Only an existing management cluster is supported: CAPI's bootstrap
	// helpers would create a kind cluster, whose node image is pulled.
	flag.BoolVar(&useExistingCluster, "e2e.use-existing-cluster", false, "run against the management cluster of -e2e.kubeconfig (required)")
	flag.StringVar(&kubeconfigPath, "e2e.kubeconfig", os.Getenv("KUBECONFIG"), "the existing management cluster's kubeconfig")
	flag.StringVar(&certManagerFrom, "e2e.cert-manager-from", "", "a clusterctl configuration whose cert-manager source (url, version) the specs' clusterctl init uses, so that nothing is fetched")
}

// What SynchronizedBeforeSuite prepares, shared by every spec.
var (
	ctx                   = ctrl.SetupSignalHandler()
	e2eConfig             *clusterctl.E2EConfig
	clusterctlConfigPath  string
	bootstrapClusterProxy framework.ClusterProxy
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "capct-e2e")
}

var _ = SynchronizedBeforeSuite(func() []byte {
	Expect(useExistingCluster).To(BeTrue(), "only -e2e.use-existing-cluster is supported: a kind bootstrap cluster would pull its node image")
	Expect(kubeconfigPath).To(BeAnExistingFile(), "-e2e.kubeconfig (or KUBECONFIG) must name the management cluster's kubeconfig")
	Expect(filepath.Abs(artifactFolder)).To(WithTransform(func(p string) error { artifactFolder = p; return nil }, Succeed()))
	Expect(os.MkdirAll(artifactFolder, 0o750)).To(Succeed())

	By("Loading the e2e config " + configPath)
	cfg := clusterctl.LoadE2EConfig(ctx, clusterctl.LoadE2EConfigInput{ConfigPath: configPath})
	Expect(cfg).ToNot(BeNil())

	By("Creating the clusterctl repository from the config's local files")
	repo := clusterctl.CreateRepository(ctx, clusterctl.CreateRepositoryInput{
		E2EConfig:        cfg,
		RepositoryFolder: filepath.Join(artifactFolder, "repository"),
	})

	if certManagerFrom != "" {
		// The self-hosted spec runs clusterctl init on a workload cluster,
		// which installs cert-manager first.
		Expect(copyCertManagerSource(certManagerFrom, repo)).To(Succeed())
	}

	proxy := framework.NewClusterProxy(cfg.ManagementClusterName, kubeconfigPath, scheme())
	Expect(proxy).ToNot(BeNil())

	// The providers are installed by hack/e2e.sh with clusterctl init from
	// the same local repositories (and cert-manager from the quickstart's
	// local copy: CreateRepository writes no cert-manager source, so the
	// framework's own init would fetch it from GitHub). This finds them,
	// skips the init and streams the controllers' logs into the artifacts.
	By("Finding the providers and watching their logs")
	clusterctl.InitManagementClusterAndWatchControllerLogs(ctx, clusterctl.InitManagementClusterAndWatchControllerLogsInput{
		ClusterProxy:            proxy,
		ClusterctlConfigPath:    repo,
		InfrastructureProviders: cfg.InfrastructureProviders(),
		LogFolder:               filepath.Join(artifactFolder, "clusters", proxy.GetName()),
	}, cfg.GetIntervals(proxy.GetName(), "wait-controllers")...)

	return []byte(configPath + "\n" + repo + "\n" + artifactFolder + "\n" + kubeconfigPath)
}, func(data []byte) {
	parts := strings.Split(string(data), "\n")
	Expect(parts).To(HaveLen(4))
	configPath, clusterctlConfigPath, artifactFolder, kubeconfigPath = parts[0], parts[1], parts[2], parts[3]
	e2eConfig = clusterctl.LoadE2EConfig(ctx, clusterctl.LoadE2EConfigInput{ConfigPath: configPath})
	bootstrapClusterProxy = framework.NewClusterProxy(e2eConfig.ManagementClusterName, kubeconfigPath, scheme(),
		framework.WithMachineLogCollector(containerLogCollector{}))
})

var _ = SynchronizedAfterSuite(func() {
	if bootstrapClusterProxy != nil {
		// Only the proxy's connections: the management cluster belongs to
		// hack/e2e.sh, which removes it.
		bootstrapClusterProxy.Dispose(ctx)
	}
}, func() {})

// copyCertManagerSource sets the cert-manager section of the clusterctl
// configuration dst to that of src. CreateRepository writes none, and
// clusterctl init would then fetch cert-manager's manifest from GitHub.
func copyCertManagerSource(src, dst string) error {
	var from, to map[string]any
	for path, into := range map[string]*map[string]any{src: &from, dst: &to} {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("failed to read clusterctl configuration %s: %w", path, err)
		}
		if err := yaml.Unmarshal(data, into); err != nil {
			return fmt.Errorf("failed to parse clusterctl configuration %s: %w", path, err)
		}
	}
	source, ok := from["cert-manager"]
	if !ok {
		return fmt.Errorf("clusterctl configuration %s has no cert-manager section", src)
	}
	to["cert-manager"] = source
	data, err := yaml.Marshal(to)
	if err != nil {
		return fmt.Errorf("failed to encode clusterctl configuration %s: %w", dst, err)
	}
	return os.WriteFile(dst, data, 0o600)
}

// scheme is CAPI's test scheme with CAPCT's kinds.
func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	framework.TryAddDefaultSchemes(s)
	Expect(infrav1.AddToScheme(s)).To(Succeed())
	Expect(expinfrav1.AddToScheme(s)).To(Succeed())
	return s
}
