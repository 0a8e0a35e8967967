//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capie2e "sigs.k8s.io/cluster-api/test/e2e"
	"sigs.k8s.io/cluster-api/test/framework"
	"sigs.k8s.io/cluster-api/test/framework/clusterctl"
)

// What hack/e2e.sh hands the clusterctl upgrade spec.
var (
	previousReleaseDir string
	clusterctlBinary   string
)

func init() {
	flag.StringVar(&previousReleaseDir, "e2e.previous-release", "", "CAPCT's previous release as clusterctl's local repository lays it out (…/infrastructure-container/<version>), built by hack/e2e.sh from the commit its tag names; its manager image docker.io/capct/manager:<version> must be on the engine")
	flag.StringVar(&clusterctlBinary, "e2e.clusterctl", "", "the clusterctl binary that initialises the previous release (served to the spec on loopback: it takes a URL)")
}

// A provider upgrade with the real `clusterctl upgrade apply`: Cluster
// API's ClusterctlUpgradeSpec on CAPCT. A workload cluster of the
// self-hosted flavor becomes a second management cluster, initialised with
// CAPCT's previous release (same Cluster API, same contract); that release
// makes a workload cluster from its own default template; clusterctl then
// upgrades CAPCT to the current release. The spec checks that no Machine
// was replaced and scales the MachineDeployment 1 -> 2 -> 1 with the new
// manager; CAPCT's own check below adds that no node container was
// recreated either.
var _ = Describe("When upgrading CAPCT with clusterctl from its previous release", Label("clusterctl-upgrade"), func() {
	var (
		binaryServer *httptest.Server
		containers   map[string]string
	)

	capie2e.ClusterctlUpgradeSpec(ctx, func() capie2e.ClusterctlUpgradeSpecInput {
		Expect(previousReleaseDir).To(BeADirectory(), "-e2e.previous-release must name the previous release's folder (hack/e2e.sh builds it)")
		Expect(clusterctlBinary).To(BeAnExistingFile(), "-e2e.clusterctl must name a clusterctl binary")
		previous := filepath.Base(previousReleaseDir)
		current := e2eConfig.MustGetVariable("CAPCT_MANAGER_IMAGE")

		config, repository := previousReleaseRepository(previous)

		// The spec downloads the clusterctl that initialises the old
		// release; here the same clusterctl (the previous release was made
		// against the same Cluster API) is served on loopback.
		binaryServer = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.ServeFile(w, r, clusterctlBinary)
		}))
		DeferCleanup(binaryServer.Close)

		coreVersion := e2eConfig.GetProviderLatestVersionsByContract("*", "cluster-api")[0]
		kubeadmVersion := strings.TrimPrefix(coreVersion, "cluster-api:")
		return capie2e.ClusterctlUpgradeSpecInput{
			E2EConfig:                       config,
			ClusterctlConfigPath:            repository,
			BootstrapClusterProxy:           bootstrapClusterProxy,
			ArtifactFolder:                  artifactFolder,
			SkipCleanup:                     skipCleanup,
			InfrastructureProvider:          ptr.To("container"),
			InitWithBinary:                  binaryServer.URL + "/clusterctl",
			InitWithKubernetesVersion:       e2eConfig.MustGetVariable(capie2e.KubernetesVersion),
			WorkloadKubernetesVersion:       e2eConfig.MustGetVariable(capie2e.KubernetesVersion),
			InitWithCoreProvider:            coreVersion,
			InitWithBootstrapProviders:      []string{"kubeadm:" + kubeadmVersion},
			InitWithControlPlaneProviders:   []string{"kubeadm:" + kubeadmVersion},
			InitWithInfrastructureProviders: []string{"container:" + previous},
			// The new management cluster's machines mount the engine's
			// socket and preload the controllers: the flavor the
			// self-hosted spec uses. Its CAPCT_MANAGER_IMAGE is the
			// previous release's here.
			MgmtFlavor: "self-hosted",
			// The previous release's own default template.
			WorkloadFlavor: "",
			// Nothing is pulled: the current manager's image goes into the
			// new management cluster's nodes before clusterctl init, as
			// the quickstart loads its management node.
			PreInit: func(proxy framework.ClusterProxy) {
				loadImageIntoNodes(ctx, proxy, current)
			},
			// The upgrade installs the current release with its image.
			UpgradeClusterctlVariables: map[string]string{"CAPCT_MANAGER_IMAGE": current},
			PreUpgrade: func(proxy framework.ClusterProxy) {
				containers = workloadContainers(ctx, proxy)
			},
			PostUpgrade: func(proxy framework.ClusterProxy, namespace, _ string) {
				// The current release must adopt every container the
				// previous one made, not recreate them.
				Expect(containers).ToNot(BeEmpty(), "no node container was recorded before the upgrade")
				Consistently(func() map[string]string {
					return workloadContainers(ctx, proxy)
				}, "30s", "5s").Should(Equal(containers), "the upgraded manager recreated or removed node containers in %s", namespace)
			},
		}
	})
})

// previousReleaseRepository returns a copy of the suite's e2e config with
// CAPCT's previous release added as a second version of the container
// provider (after the current one, which stays the default), and the
// clusterctl configuration of a local repository written from it.
// CAPCT_MANAGER_IMAGE names the previous release's image, so that clusterctl
// init installs it and the self-hosted flavor preloads it; the upgrade sets
// the current one (UpgradeClusterctlVariables). metadata.yaml is the
// current one, which lists both release series.
func previousReleaseRepository(previous string) (*clusterctl.E2EConfig, string) {
	config := e2eConfig.DeepCopy()
	config.Variables["CAPCT_MANAGER_IMAGE"] = "docker.io/capct/manager:" + previous
	found := false
	for i := range config.Providers {
		p := &config.Providers[i]
		if p.Name != "container" || len(p.Versions) == 0 {
			continue
		}
		found = true
		files := []clusterctl.Files{{SourcePath: metadataOf(p.Versions[0]), TargetName: "metadata.yaml"}}
		templates, err := filepath.Glob(filepath.Join(previousReleaseDir, "cluster*.yaml"))
		Expect(err).ToNot(HaveOccurred())
		Expect(templates).ToNot(BeEmpty(), "the previous release %s has no templates", previousReleaseDir)
		for _, t := range templates {
			files = append(files, clusterctl.Files{SourcePath: t, TargetName: filepath.Base(t)})
		}
		p.Versions = append(p.Versions, clusterctl.ProviderVersionSource{
			Name:     previous,
			Value:    filepath.Join(previousReleaseDir, "infrastructure-components.yaml"),
			Type:     clusterctl.URLSource,
			Contract: p.Versions[0].Contract,
			Files:    files,
		})
	}
	Expect(found).To(BeTrue(), "the e2e config has no container provider")
	repository := clusterctl.CreateRepository(ctx, clusterctl.CreateRepositoryInput{
		E2EConfig:        config,
		RepositoryFolder: filepath.Join(artifactFolder, "repository-clusterctl-upgrade"),
	})
	if certManagerFrom != "" {
		Expect(copyCertManagerSource(certManagerFrom, repository)).To(Succeed())
	}
	return config, repository
}

// metadataOf is the metadata.yaml a provider version's files name.
func metadataOf(v clusterctl.ProviderVersionSource) string {
	for _, f := range v.Files {
		if f.TargetName == "metadata.yaml" {
			return f.SourcePath
		}
	}
	Fail(fmt.Sprintf("provider version %s lists no metadata.yaml", v.Name))
	return ""
}

// loadImageIntoNodes imports image from the host's engine into the
// containerd of every node of the cluster behind proxy (its Nodes are named
// after their containers).
func loadImageIntoNodes(ctx context.Context, proxy framework.ClusterProxy, image string) {
	nodes := &corev1.NodeList{}
	Expect(proxy.GetClient().List(ctx, nodes)).To(Succeed())
	Expect(nodes.Items).ToNot(BeEmpty())
	for _, n := range nodes.Items {
		By(fmt.Sprintf("Loading %s into node %s", image, n.Name))
		save := exec.CommandContext(ctx, "docker", "save", image)
		load := exec.CommandContext(ctx, "docker", "exec", "-i", n.Name, "ctr", "-n", "k8s.io", "images", "import", "--no-unpack", "-")
		pipe, err := save.StdoutPipe()
		Expect(err).ToNot(HaveOccurred())
		load.Stdin = pipe
		Expect(save.Start()).To(Succeed())
		out, err := load.CombinedOutput()
		Expect(err).ToNot(HaveOccurred(), "ctr import into %s: %s", n.Name, out)
		Expect(save.Wait()).To(Succeed())
	}
}

// workloadContainers maps the name of every container of the clusters
// that the management cluster behind proxy manages (nodes and load
// balancers, found by CAPCT's cluster label) to its ID on the engine.
func workloadContainers(ctx context.Context, proxy framework.ClusterProxy) map[string]string {
	clusters := &clusterv1.ClusterList{}
	Expect(proxy.GetClient().List(ctx, clusters)).To(Succeed())
	ids := map[string]string{}
	for _, c := range clusters.Items {
		out, err := exec.CommandContext(ctx, "docker", "ps", "-a", "--no-trunc", "--filter", "label=io.x-k8s.capct.cluster="+c.Name,
			"--format", "{{.Names}} {{.ID}}").CombinedOutput()
		Expect(err).ToNot(HaveOccurred(), "docker ps for cluster %s: %s", c.Name, out)
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if name, id, ok := strings.Cut(line, " "); ok {
				ids[name] = id
			}
		}
	}
	return ids
}
