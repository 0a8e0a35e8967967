// Package kubeversion is what differs between the Kubernetes releases CAPCT
// knows, in one place: the kubeadm configuration API version, the etcd,
// CoreDNS and pause image tags kubeadm of each release expects, the images
// a node image preloads, and the KubeletConfiguration fields CAPCT's nodes
// set. Callers (the node image build, through hack/kubeversion) ask this
// package instead of comparing version strings by hand, so that a new
// Kubernetes minor is one row of one table.
//
// The facts are kubeadm's own: each row was read from the release's
// cmd/kubeadm sources, and TestTableMatchesKubeadm reads them again for
// every release of k8s.io/kubernetes in the Go module cache. The node image
// build also asks the compiled kubeadm (`kubeadm config images list`) and
// stops when it disagrees with this package.
package kubeversion

import (
	"fmt"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
)

const (
	// registry is where kubeadm looks for every image it lists:
	// DefaultImageRepository of kubeadm's configuration API
	// (cmd/kubeadm/app/apis/kubeadm/v1beta4/defaults.go). CAPCT's node image
	// preloads its images under these names, so nothing is pulled.
	registry = "registry.k8s.io"
	// kubeadmV1Beta4 is kubeadm's configuration API since Kubernetes 1.31.
	kubeadmV1Beta4 = "kubeadm.k8s.io/v1beta4"
)

// etcdSince is the etcd image tag kubeadm lists from a patch release of a
// minor on: kubeadm moves etcd within a minor when etcd fixes are
// backported.
type etcdSince struct {
	patch uint64
	tag   string
}

// minorFacts is what kubeadm of one Kubernetes minor expects. Where each
// fact comes from, in that release's k8s.io/kubernetes module:
type minorFacts struct {
	// kubeadmAPI: the version cmd/kubeadm/app/apis/kubeadm/scheme/scheme.go
	// puts first in SetVersionPriority, the one kubeadm prints and that
	// Cluster API's bootstrap provider renders.
	kubeadmAPI string
	// etcd: SupportedEtcdVersion[minor] in cmd/kubeadm/app/constants/constants.go
	// (or the nearest minor's when it lacks one, as kubeadm does), the tag
	// `kubeadm config images list` gives etcd, by patch release (ascending;
	// the first starts at patch 0).
	etcd []etcdSince
	// coreDNS: CoreDNSVersion in the same constants.go.
	coreDNS string
	// pause: PauseVersion in the same constants.go.
	pause string
}

// minors is the table: one row per Kubernetes minor CAPCT knows, keyed by
// the minor of 1.x. Each comment names the releases the row was read from.
// Adding a minor is one row here; TestTableMatchesKubeadm then checks it
// against the release's sources once its module is in the module cache.
var minors = map[uint64]minorFacts{
	// v1.34.0 to v1.34.4; etcd 3.6.5 arrived with v1.34.2.
	34: {kubeadmAPI: kubeadmV1Beta4, etcd: []etcdSince{{0, "3.6.4-0"}, {2, "3.6.5-0"}}, coreDNS: "v1.12.1", pause: "3.10.1"},
	// v1.35.4 (the Go module proxy serves no other 1.35 release).
	35: {kubeadmAPI: kubeadmV1Beta4, etcd: []etcdSince{{0, "3.6.6-0"}}, coreDNS: "v1.13.1", pause: "3.10.1"},
	// v1.36.1 and v1.36.3.
	36: {kubeadmAPI: kubeadmV1Beta4, etcd: []etcdSince{{0, "3.6.8-0"}}, coreDNS: "v1.14.2", pause: "3.10.2"},
	// v1.37.2: kubeadm adds kubeadm.k8s.io/v1 and drops v1beta3, but still
	// prefers and prints v1beta4. Its SupportedEtcdVersion lists minors 34
	// to 36 only, so kubeadm takes the nearest one's etcd (3.7.0-0, also its
	// DefaultEtcdVersion).
	37: {kubeadmAPI: kubeadmV1Beta4, etcd: []etcdSince{{0, "3.7.0-0"}}, coreDNS: "v1.14.6", pause: "3.10.2"},
}

// KubeletField is one field of the kubelet's KubeletConfiguration
// (kubelet.config.k8s.io/v1beta1) that CAPCT's nodes set, with its value as
// YAML writes it.
type KubeletField struct {
	// Name is the field's name in YAML and JSON, e.g. failCgroupV1.
	Name string
	// Value is the field's value as YAML, e.g. false.
	Value string
}

// kubeletConfiguration is what a node container needs of its kubelet, the
// same for every release in the table (each field is in the
// KubeletConfiguration of 1.34 to 1.37; TestTableMatchesKubeadm checks it
// in every cached release). The templates and hack/quickstart write these
// fields; test/clusterctl checks that the templates have them.
var kubeletConfiguration = []KubeletField{
	// containerd runs runc with SystemdCgroup = true
	// (images/node/files/containerd-config.toml); the kubelet must agree.
	{Name: "cgroupDriver", Value: "systemd"},
	// The pods go under a cgroup of their own, apart from the node's
	// systemd units, as kind's node boot files (in the image) expect.
	{Name: "cgroupRoot", Value: "/kubelet"},
	// The container host may have swap.
	{Name: "failSwapOn", Value: "false"},
	// The container hosts may be cgroup v1, which the kubelet refuses by
	// default from 1.35 on (its default of failCgroupV1 became true).
	{Name: "failCgroupV1", Value: "false"},
}

// Release is a Kubernetes release CAPCT knows, from Parse.
type Release struct {
	version semver.Version
	facts   minorFacts
}

// Parse parses a Kubernetes release version, with or without its leading
// "v" (v1.36.3 or 1.36.3), and refuses what CAPCT does not know: anything
// but a major.minor.patch release (no pre-release, no build metadata), and
// a minor outside the table, naming the range it knows.
func Parse(version string) (Release, error) {
	v, err := semver.Parse(strings.TrimPrefix(strings.TrimSpace(version), "v"))
	if err != nil {
		return Release{}, fmt.Errorf("failed to parse Kubernetes version %q: %w", version, err)
	}
	if len(v.Pre) > 0 || len(v.Build) > 0 {
		return Release{}, fmt.Errorf("version %q is not a Kubernetes release (vMAJOR.MINOR.PATCH): CAPCT knows releases only", version)
	}
	facts, ok := minors[v.Minor]
	if v.Major != 1 || !ok {
		lo, hi := knownRange()
		return Release{}, fmt.Errorf("version v%s is outside the Kubernetes releases CAPCT knows (1.%d to 1.%d): a new minor needs its row in internal/kubeversion's table", v, lo, hi)
	}
	return Release{version: v, facts: facts}, nil
}

// knownRange is the lowest and highest minor of the table.
func knownRange() (lo, hi uint64) {
	keys := make([]uint64, 0, len(minors))
	for m := range minors {
		keys = append(keys, m)
	}
	return slices.Min(keys), slices.Max(keys)
}

// String is the release as Kubernetes writes it, e.g. v1.36.3.
func (r Release) String() string {
	return "v" + r.version.String()
}

// Minor is the release's minor version, e.g. 36 for v1.36.3 (the gitMinor
// its binaries are stamped with).
func (r Release) Minor() uint64 {
	return r.version.Minor
}

// StagingVersion is the version of k8s.io/kubernetes's staging modules
// (k8s.io/api, k8s.io/client-go, ...) released with it: v0.36.3 for
// v1.36.3.
func (r Release) StagingVersion() string {
	return fmt.Sprintf("v0.%d.%d", r.version.Minor, r.version.Patch)
}

// KubeadmAPIVersion is the apiVersion of the kubeadm configuration the
// release's kubeadm prefers, e.g. kubeadm.k8s.io/v1beta4.
func (r Release) KubeadmAPIVersion() string {
	return r.facts.kubeadmAPI
}

// Etcd is the tag of the etcd image kubeadm of this release runs, e.g.
// 3.6.8-0 (the etcd.local.imageTag of an upgrade to it).
func (r Release) Etcd() string {
	tag := ""
	for _, s := range r.facts.etcd {
		if r.version.Patch >= s.patch {
			tag = s.tag
		}
	}
	return tag
}

// CoreDNS is the tag of the CoreDNS image kubeadm of this release deploys,
// e.g. v1.14.2 (the dns.imageTag of an upgrade to it).
func (r Release) CoreDNS() string {
	return r.facts.coreDNS
}

// Pause is the tag of the pause image kubeadm of this release lists, e.g.
// 3.10.2.
func (r Release) Pause() string {
	return r.facts.pause
}

// PauseImage is the pause image as kubeadm lists it, which the node image
// preloads and names as containerd's sandbox image.
func (r Release) PauseImage() string {
	return registry + "/pause:" + r.facts.pause
}

// Images are the images kubeadm of this release runs, named and ordered as
// `kubeadm config images list --kubernetes-version` prints them with the
// default configuration: the node image preloads exactly these.
func (r Release) Images() []string {
	return []string{
		registry + "/kube-apiserver:" + r.String(),
		registry + "/kube-controller-manager:" + r.String(),
		registry + "/kube-scheduler:" + r.String(),
		registry + "/kube-proxy:" + r.String(),
		registry + "/coredns/coredns:" + r.CoreDNS(),
		r.PauseImage(),
		registry + "/etcd:" + r.Etcd(),
	}
}

// KubeletConfiguration is the KubeletConfiguration fields CAPCT's nodes set
// for this release's kubelet, in the order the templates write them.
func (r Release) KubeletConfiguration() []KubeletField {
	return slices.Clone(kubeletConfiguration)
}
