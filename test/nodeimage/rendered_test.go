//go:build engine

package nodeimage

import (
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	kubeadmtypes "sigs.k8s.io/cluster-api/bootstrap/kubeadm/types"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/types/upstream"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/ipam"
	"github.com/capct/cluster-api-provider-container/internal/nodeipam"
	"github.com/capct/cluster-api-provider-container/internal/podnetwork"
	"github.com/capct/cluster-api-provider-container/internal/provisioning"
)

// The test boots nodes with the configurations CAPCT gives real clusters,
// taken from where CAPCT takes them, not written again here:
//
//   - kubeadm: CAPCT renders no kubeadm configuration of its own; Cluster
//     API's kubeadm bootstrap provider renders it from the KubeadmConfigSpec
//     of CAPCT's cluster template. So the test reads the default flavor
//     (templates/cluster-template.yaml, what clusterctl generates clusters
//     from), substitutes its variables with clusterctl's processor, and
//     renders the spec with the bootstrap provider's own kubeadm marshalling
//     (sigs.k8s.io/cluster-api/bootstrap/kubeadm/types), adding what the
//     provider adds from the Cluster (endpoint, name, networks, version) and
//     laying the result out as its cloud-config does. CAPCT's bootstrap
//     (internal/provisioning) then runs that cloud-config in the node, as
//     it does for every machine. What KubeadmControlPlane adds to a machine's
//     spec beyond the flavor (its defaults) is left out: the node image must
//     boot what the flavor asks for.
//   - CNI, pod CIDRs, routes and masquerade: internal/nodeipam and
//     internal/ipam, from the flavor's Cluster and ContainerCluster.
//   - HAProxy: internal/loadbalancer.Configuration, what CAPCT writes.

// flavor is the default cluster template as clusterctl would generate it.
type flavor struct {
	cluster *clusterv1.Cluster
	cc      *infrav1.ContainerCluster
	kcp     *controlplanev1.KubeadmControlPlane
	workers *bootstrapv1.KubeadmConfigTemplate
	version semver.Version
}

// repoRoot is the repository's root folder, found from this file.
func repoRoot() string {
	return filepath.Join(testDir(), "..", "..")
}

// loadFlavor reads templates/cluster-template.yaml with the variables
// clusterctl asks for set as `clusterctl generate cluster <name>
// --kubernetes-version <v> --control-plane-machine-count 1
// --worker-machine-count 1` would, the images set to the ones under test,
// and every other variable at its default.
func loadFlavor(t *testing.T, name, version string) flavor {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "templates", "cluster-template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"CLUSTER_NAME":                name,
		"NAMESPACE":                   "default",
		"KUBERNETES_VERSION":          version,
		"CONTROL_PLANE_MACHINE_COUNT": "1",
		"WORKER_MACHINE_COUNT":        "1",
		"CAPCT_NODE_IMAGE":            nodeImage,
		"CAPCT_LB_IMAGE":              lbImage,
	}
	out, err := yamlprocessor.NewSimpleProcessor().Process(raw, func(k string) (string, error) {
		if v, ok := vars[k]; ok {
			return v, nil
		}
		return "", fmt.Errorf("variable %s is not set", k)
	})
	if err != nil {
		t.Fatalf("templates/cluster-template.yaml: %v", err)
	}
	f := flavor{cluster: &clusterv1.Cluster{}, cc: &infrav1.ContainerCluster{},
		kcp: &controlplanev1.KubeadmControlPlane{}, workers: &bootstrapv1.KubeadmConfigTemplate{}}
	into := map[string]any{"Cluster": f.cluster, "ContainerCluster": f.cc, "KubeadmControlPlane": f.kcp, "KubeadmConfigTemplate": f.workers}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("templates/cluster-template.yaml: %v", err)
		}
		obj, ok := into[meta.Kind]
		if !ok {
			continue
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("templates/cluster-template.yaml: %s: %v", meta.Kind, err)
		}
		delete(into, meta.Kind)
	}
	if len(into) > 0 {
		t.Fatalf("templates/cluster-template.yaml lacks %v", slices.Sorted(maps.Keys(into)))
	}
	if f.version, err = semver.ParseTolerant(f.kcp.Spec.Version); err != nil {
		t.Fatal(err)
	}
	return f
}

// initData is the bootstrap data of the first control-plane machine, as the
// bootstrap provider renders it: the spec's ClusterConfiguration with what
// it takes from the Cluster, and its InitConfiguration.
func (f flavor) initData(t *testing.T) []byte {
	t.Helper()
	spec := f.kcp.Spec.KubeadmConfigSpec.DeepCopy()
	if spec.ClusterConfiguration.ControlPlaneEndpoint == "" {
		spec.ClusterConfiguration.ControlPlaneEndpoint = f.cluster.Spec.ControlPlaneEndpoint.String()
	}
	network := f.cluster.Spec.ClusterNetwork
	data := &upstream.AdditionalData{
		KubernetesVersion: ptr.To(f.kcp.Spec.Version),
		ClusterName:       ptr.To(f.cluster.Name),
		DNSDomain:         ptr.To(network.ServiceDomain),
		ServiceSubnet:     ptr.To(network.Services.String()),
		PodSubnet:         ptr.To(network.Pods.String()),
	}
	cluster, err := kubeadmtypes.MarshalClusterConfigurationForVersion(&spec.ClusterConfiguration, f.version, data)
	if err != nil {
		t.Fatal(err)
	}
	init, err := kubeadmtypes.MarshalInitConfigurationForVersion(&spec.InitConfiguration, f.version)
	if err != nil {
		t.Fatal(err)
	}
	return cloudConfig(t, spec, "/run/kubeadm/kubeadm.yaml", "---\n"+cluster+"---\n"+init,
		"kubeadm init --config /run/kubeadm/kubeadm.yaml")
}

// joinData is the bootstrap data of a worker, with the discovery the
// bootstrap provider fills in: the Cluster's endpoint, a bootstrap token
// and the hash of the cluster's CA.
func (f flavor) joinData(t *testing.T, token, caCertHash string) []byte {
	t.Helper()
	spec := f.workers.Spec.Template.Spec.DeepCopy()
	spec.JoinConfiguration.Discovery.BootstrapToken = bootstrapv1.BootstrapTokenDiscovery{
		APIServerEndpoint: f.cluster.Spec.ControlPlaneEndpoint.String(),
		Token:             token,
		CACertHashes:      []string{caCertHash},
	}
	join, err := kubeadmtypes.MarshalJoinConfigurationForVersion(&spec.JoinConfiguration, f.version)
	if err != nil {
		t.Fatal(err)
	}
	return cloudConfig(t, spec, "/run/kubeadm/kubeadm-join-config.yaml", join,
		"kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml")
}

type cloudFile struct {
	Path        string `json:"path"`
	Owner       string `json:"owner,omitempty"`
	Permissions string `json:"permissions,omitempty"`
	Encoding    string `json:"encoding,omitempty"`
	Append      bool   `json:"append,omitempty"`
	Content     string `json:"content"`
}

type cloudConfigData struct {
	WriteFiles []cloudFile `json:"write_files"`
	RunCmd     []string    `json:"runcmd"`
}

// cloudConfig lays the spec out as the bootstrap provider's cloud-config
// does: the spec's files, then the kubeadm configuration; the spec's
// pre-kubeadm commands, kubeadm, which writes the sentinel when it
// succeeds, then the post-kubeadm commands.
func cloudConfig(t *testing.T, spec *bootstrapv1.KubeadmConfigSpec, configPath, config, kubeadm string) []byte {
	t.Helper()
	var c cloudConfigData
	for _, f := range spec.Files {
		if f.ContentFrom.IsDefined() {
			t.Fatalf("file %s: contentFrom needs a management cluster's Secret", f.Path)
		}
		c.WriteFiles = append(c.WriteFiles, cloudFile{Path: f.Path, Owner: f.Owner, Permissions: f.Permissions,
			Encoding: string(f.Encoding), Append: ptr.Deref(f.Append, false), Content: f.Content})
	}
	c.WriteFiles = append(c.WriteFiles, cloudFile{Path: configPath, Owner: "root:root", Permissions: "0640", Content: config})
	c.RunCmd = append(c.RunCmd, spec.PreKubeadmCommands...)
	c.RunCmd = append(c.RunCmd, kubeadm+" && echo success > "+provisioning.SentinelPath)
	c.RunCmd = append(c.RunCmd, spec.PostKubeadmCommands...)
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte("## template: jinja\n#cloud-config\n"), out...)
}

// bootstrap runs bootstrap data in a node as CAPCT's Bootstrap phase does:
// provisioning.Plan turns it into steps (the hostname variables replaced,
// kubeadm's preflight checks adapted to containers), Script renders them as
// staged files and a script, LaunchCommand starts attempt 1 detached, and
// the attempt's exit mark says how it ended.
func bootstrap(t *testing.T, node string, data []byte) {
	t.Helper()
	steps, err := provisioning.Plan(provisioning.FormatCloudConfig, data, provisioning.Vars{Hostname: node})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range provisioning.Script(steps) {
		writeFileMode(t, node, f.Path, string(f.Content), f.Mode)
	}
	writeFileMode(t, node, provisioning.AttemptPath, "1\n", 0o600)
	must(t, append([]string{"exec", node}, provisioning.LaunchCommand(1)...)...)
	marks := provisioning.Marks(1)
	var exit provisioning.Exit
	eventually(t, 5*time.Minute, node+"'s bootstrap", func() error {
		out, err := dockerRaw(nil, "exec", node, "cat", marks.Exit)
		if err != nil {
			return err
		}
		var ok bool
		if exit, ok = provisioning.ParseExit([]byte(out)); !ok {
			return fmt.Errorf("no exit mark yet")
		}
		return nil
	})
	if exit.Code != 0 {
		log, _ := docker("exec", node, "sh", "-c", "tail -n 60 "+marks.Log+"; tail -n 60 "+marks.Diagnostics)
		t.Fatalf("%s's bootstrap failed: %s\n%s", node, strings.TrimSpace(exit.String()), log)
	}
}

// podNetwork is CAPCT's node IPAM for the test's nodes: pod CIDRs from the
// allocator configured by the flavor's Cluster and ContainerCluster.
type podNetwork struct {
	cfg   ipam.Config
	alloc *ipam.Allocator
	nodes []podnetwork.Node
}

func newPodNetwork(t *testing.T, f flavor) *podNetwork {
	t.Helper()
	cfg, enabled, why, err := nodeipam.ClusterConfig(f.cluster, f.cc)
	if err != nil || !enabled {
		t.Fatalf("node IPAM of the flavor: enabled=%t %s %v", enabled, why, err)
	}
	alloc, err := ipam.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &podNetwork{cfg: cfg, alloc: alloc}
}

// add gives a node its pod CIDRs and CNI configuration, then brings every
// node's routes and masquerade rule up to date with the commands CAPCT's
// pod network sync runs (podnetwork.Syncer, which needs the runtime's
// owner labels these docker-CLI nodes do not carry).
func (p *podNetwork) add(t *testing.T, name, address string) {
	t.Helper()
	cidrs, err := p.alloc.Allocate(name)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := podnetwork.CNIConfig(cidrs, 0)
	if err != nil {
		t.Fatal(err)
	}
	writeFileMode(t, name, podnetwork.CNIConfigPath, string(conf), 0o644)
	p.nodes = append(p.nodes, podnetwork.Node{Name: name, IPv4: netip.MustParseAddr(address), PodCIDRs: cidrs})
	routes := podnetwork.DesiredRoutes(p.nodes)
	for _, n := range p.nodes {
		current := podnetwork.ParseRoutes(must(t, append([]string{"exec", n.Name}, podnetwork.ProbeCommand(n.PodCIDRs, p.cfg.ClusterCIDRs)...)...))
		if cmd := podnetwork.ApplyCommand(podnetwork.DiffRoutes(current, routes[n.Name], p.cfg.ClusterCIDRs)); cmd != nil {
			must(t, append([]string{"exec", n.Name}, cmd...)...)
		}
	}
}

// serviceIP is the n-th address of the flavor's service CIDR: kubeadm gives
// the kubernetes Service the first, CoreDNS's kube-dns the tenth.
func (f flavor) serviceIP(t *testing.T, n int) string {
	t.Helper()
	cidr, err := netip.ParsePrefix(f.cluster.Spec.ClusterNetwork.Services.CIDRBlocks[0])
	if err != nil {
		t.Fatal(err)
	}
	a := cidr.Masked().Addr()
	for range n {
		a = a.Next()
	}
	return a.String()
}
