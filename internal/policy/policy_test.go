package policy

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

var fld = field.NewPath("spec", "x")

// check runs one decision and compares it with the wanted outcome: "" for
// allowed, else a fragment of the error message.
func check(t *testing.T, err *field.Error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("want allowed, got %v", err)
	case want != "" && err == nil:
		t.Fatalf("want refused with %q, got allowed", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("want an error containing %q, got %v", want, err)
	case err != nil && !strings.HasPrefix(err.Error(), fld.String()+": "):
		t.Fatalf("the error does not start with the field %s: %v", fld, err)
	}
}

func TestHostPath(t *testing.T) {
	testCases := []struct {
		name     string
		prefixes []string
		hostPath string
		want     string
	}{
		{name: "no list allows any path", hostPath: "/", want: ""},
		{name: "the prefix itself", prefixes: []string{"/srv/capct"}, hostPath: "/srv/capct", want: ""},
		{name: "below the prefix", prefixes: []string{"/srv/capct/"}, hostPath: "/srv/capct/data", want: ""},
		{name: "a sibling sharing the prefix's letters", prefixes: []string{"/srv/capct"}, hostPath: "/srv/capctx", want: "--allowed-host-path-prefixes"},
		{name: "dot-dot escaping the prefix", prefixes: []string{"/srv/capct"}, hostPath: "/srv/capct/../../etc", want: "not under any allowed prefix (/srv/capct)"},
		{name: "the engine socket", prefixes: []string{"/srv/capct"}, hostPath: "/var/run/docker.sock", want: "not under"},
		{name: "an empty list forbids everything", prefixes: []string{}, hostPath: "/srv/capct", want: "(none)"},
		{name: "a second prefix", prefixes: []string{"/a", "/b"}, hostPath: "/b/c", want: ""},
		{name: "root as a prefix", prefixes: []string{"/"}, hostPath: "/etc", want: ""},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			p := &Policy{HostPathPrefixes: tc.prefixes}
			check(t, p.HostPath(fld, tc.hostPath), tc.want)
		})
	}
}

func TestNetwork(t *testing.T) {
	testCases := []struct {
		name      string
		allowed   []string
		network   string
		unmanaged bool
		want      string
	}{
		{name: "the quickstart's network by default", network: "capct-mgmt", unmanaged: true, want: ""},
		{name: "host by default", network: "host", unmanaged: true, want: "engine's own network"},
		{name: "none by default", network: "none", unmanaged: true, want: "--allowed-unmanaged-networks"},
		{name: "bridge by default", network: "bridge", unmanaged: true, want: "engine's own network"},
		{name: "Podman's default network", network: "podman", unmanaged: true, want: "engine's own network"},
		{name: "the swarm's gateway bridge", network: "docker_gwbridge", unmanaged: true, want: "engine's own network"},
		{name: "a Managed network named podman", network: "podman", want: "engine's own network"},
		{name: "a Managed network named host", network: "host", want: "engine's own network"},
		{name: "host when listed", allowed: []string{"host"}, network: "host", unmanaged: true, want: ""},
		{name: "an unlisted Unmanaged network", allowed: []string{"capct-mgmt"}, network: "kind", unmanaged: true, want: "not allowed (capct-mgmt)"},
		{name: "a listed Unmanaged network", allowed: []string{"capct-mgmt"}, network: "capct-mgmt", unmanaged: true, want: ""},
		{name: "a Managed network needs no listing", allowed: []string{"capct-mgmt"}, network: "mine", want: ""},
		{name: "an empty list forbids every Unmanaged network", allowed: []string{}, network: "capct-mgmt", unmanaged: true, want: "(none)"},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			p := &Policy{AllowedNetworks: tc.allowed}
			check(t, p.Network(fld, tc.network, tc.unmanaged), tc.want)
		})
	}
}

func TestImage(t *testing.T) {
	quickstart := []string{"capct/", "kindest/haproxy:"}
	testCases := []struct {
		name     string
		prefixes []string
		image    string
		want     string
	}{
		{name: "no list allows any image", image: "evil.example.com/x:1", want: ""},
		{name: "uppercase is no reference", image: "capct/Node:v1", want: "not an image reference"},
		{name: "an option is no reference", image: "--privileged", want: "not an image reference"},
		{name: "the quickstart's node image", prefixes: quickstart, image: "capct/node:v1.35.4", want: ""},
		{name: "the node image with its registry", prefixes: quickstart, image: "docker.io/capct/node:v1.35.4", want: ""},
		{name: "the node image by its legacy registry", prefixes: quickstart, image: "index.docker.io/capct/node:v1.35.4", want: ""},
		{name: "the default load balancer", prefixes: quickstart, image: "kindest/haproxy:v20230606-42a2262b", want: ""},
		{name: "a registry whose name starts like the prefix", prefixes: quickstart, image: "capct.evil.com/node:v1", want: "--allowed-image-prefixes"},
		{name: "another repository of the same owner", prefixes: quickstart, image: "kindest/node:v1.35.0", want: "not under any allowed prefix"},
		{name: "a library image", prefixes: quickstart, image: "busybox", want: "not under"},
		{name: "a full prefix", prefixes: []string{"registry.example.com/team/"}, image: "registry.example.com/team/node@sha256:" + strings.Repeat("a", 64), want: ""},
		{name: "an empty list forbids every image", prefixes: []string{}, image: "capct/node:v1", want: "(none)"},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			p := &Policy{ImagePrefixes: tc.prefixes}
			check(t, p.Image(fld, tc.image), tc.want)
		})
	}
}

func TestMachineCount(t *testing.T) {
	p := &Policy{MaxMachinesPerCluster: 3}
	check(t, p.MachineCount(fld, "demo", 2), "")
	check(t, p.MachineCount(fld, "demo", 3), "--max-machines-per-cluster=3")
	check(t, (&Policy{}).MachineCount(fld, "demo", 1_000_000), "")
}

func TestContainerPath(t *testing.T) {
	testCases := []struct {
		path string
		want string
	}{
		{path: "/data", want: ""},
		{path: "/var/log/app", want: ""},
		{path: "/dev/fuse", want: ""},
		{path: "/opt/x", want: ""},
		{path: "/", want: "would hide /"},
		{path: "/var", want: "would hide /var"},
		{path: "/var/", want: "would hide /var"},
		{path: "//var/./", want: "would hide /var"},
		{path: "/run", want: "would hide /run"},
		{path: "/tmp", want: "would hide /tmp"},
		{path: "/etc", want: "would hide /etc"},
		{path: "/usr", want: "would hide /usr"},
		{path: "/lib", want: "would hide /lib"},
		{path: "/lib/modules", want: "would hide /lib/modules"},
		{path: "/kind", want: "would hide /kind"},
		{path: "/kind/manifests", want: "part of /kind"},
		{path: "/sys/fs/cgroup", want: "part of /sys"},
		{path: "/proc/sys", want: "part of /proc"},
		{path: "/var/lib/kubelet/pods", want: "part of /var/lib/kubelet"},
		{path: "/var/lib/containerd", want: "part of /var/lib/containerd"},
		{path: "/etc/kubernetes/pki", want: "part of /etc/kubernetes"},
		{path: "/run/cluster-api", want: "part of /run/cluster-api"},
		{path: "/data:ro", want: "must not contain ':'"},
		{path: "relative", want: "must be an absolute path"},
	}
	for _, tc := range testCases {
		t.Run(tc.path, func(t *testing.T) {
			check(t, ContainerPath(fld, tc.path), tc.want)
		})
	}
}

func TestPodCIDRs(t *testing.T) {
	v4, v6 := netip.MustParsePrefix("172.18.0.0/20"), netip.MustParsePrefix("fc00:f853:ccd:e793::/64")
	testCases := []struct {
		name  string
		cidrs []string
		want  []string
	}{
		{name: "kind's pod network", cidrs: []string{"10.244.0.0/16", "fd00:10:244::/56"}},
		{name: "pods around the nodes", cidrs: []string{"172.16.0.0/12"}, want: []string{"[0]"}},
		{name: "pods inside the nodes", cidrs: []string{"10.0.0.0/8", "172.18.4.0/24"}, want: []string{"[1]"}},
		{name: "IPv6 pods on the nodes' /64", cidrs: []string{"fc00:f853:ccd:e793::/48"}, want: []string{"[0]"}},
		{name: "unparsable CIDRs are Cluster API's", cidrs: []string{"nonsense"}},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			errs := PodCIDRs(field.NewPath("cidrBlocks"), tc.cidrs, "capct-demo", v4, v6, netip.Prefix{})
			if len(errs) != len(tc.want) {
				t.Fatalf("want %d errors, got %v", len(tc.want), errs)
			}
			for i, w := range tc.want {
				if !strings.Contains(errs[i].Error(), "cidrBlocks"+w) || !strings.Contains(errs[i].Error(), `node network "capct-demo"`) {
					t.Fatalf("error %d does not name cidrBlocks%s and the network: %v", i, w, errs[i])
				}
			}
		})
	}
	if err := CheckPodCIDRs([]string{"172.18.0.0/16"}, "capct-demo", v4); !IsViolation(err) ||
		!strings.Contains(err.Error(), "spec.clusterNetwork.pods.cidrBlocks[0]") {
		t.Fatalf("CheckPodCIDRs: want a Violation naming the Cluster's field, got %v", err)
	}
}

func restricted() *Policy {
	return &Policy{
		HostPathPrefixes: []string{"/srv/capct"},
		AllowedNetworks:  []string{"capct-mgmt"},
		ImagePrefixes:    []string{"capct/"},
	}
}

// TestMachineSpecRatchets shows that an update re-checks only what changed:
// objects admitted under a looser policy keep taking Cluster API's and
// CAPCT's own updates.
func TestMachineSpecRatchets(t *testing.T) {
	p := restricted()
	admitted := &infrav1.ContainerMachineSpec{
		Image:         "evil/node:1",
		ExtraMounts:   []infrav1.Mount{{ContainerPath: "/data", HostPath: "/etc"}},
		PreLoadImages: []string{"evil/preload:1"},
	}
	create := p.MachineSpec(field.NewPath("spec"), admitted, nil)
	wantFields(t, create, "spec.image", "spec.extraMounts[0].hostPath", "spec.preLoadImages[0]")

	same := admitted.DeepCopy()
	same.ProviderID = "container:///demo-md-0-abcde"
	if errs := p.MachineSpec(field.NewPath("spec"), same, admitted); len(errs) != 0 {
		t.Fatalf("an update that changed only providerID was refused: %v", errs)
	}
	grown := admitted.DeepCopy()
	grown.ExtraMounts = append(grown.ExtraMounts, infrav1.Mount{ContainerPath: "/more", HostPath: "/root"})
	grown.PreLoadImages = append(grown.PreLoadImages, "capct/ok:1", "evil/more:1")
	wantFields(t, p.MachineSpec(field.NewPath("spec"), grown, admitted), "spec.extraMounts[1].hostPath", "spec.preLoadImages[2]")
}

func TestClusterSpec(t *testing.T) {
	p := restricted()
	spec := &infrav1.ContainerClusterSpec{
		Network:      infrav1.NetworkSpec{Name: "kind", Mode: infrav1.NetworkUnmanaged},
		LoadBalancer: infrav1.LoadBalancerSpec{Image: "haproxy:2"},
	}
	wantFields(t, p.ClusterSpec(field.NewPath("spec"), spec, nil), "spec.network.name", "spec.loadBalancer.image")
	if errs := p.ClusterSpec(field.NewPath("spec"), spec, spec.DeepCopy()); len(errs) != 0 {
		t.Fatalf("an unchanged spec was refused: %v", errs)
	}
	ok := &infrav1.ContainerClusterSpec{Network: infrav1.NetworkSpec{Name: "capct-mgmt", Mode: infrav1.NetworkUnmanaged}}
	if errs := p.ClusterSpec(field.NewPath("spec"), ok, nil); len(errs) != 0 {
		t.Fatalf("the allowed network was refused: %v", errs)
	}
}

// TestLaunchChecks covers what the launch path calls: everything is checked
// again, defaults included, and the error names the field and the flag.
func TestLaunchChecks(t *testing.T) {
	p := restricted()
	err := p.CheckMachine(&infrav1.ContainerMachineSpec{}, "kindest/node:v1.35.0")
	if !IsViolation(err) || !strings.Contains(err.Error(), "spec.image") ||
		!strings.Contains(err.Error(), "its default is refused") || !strings.Contains(err.Error(), "--allowed-image-prefixes") {
		t.Fatalf("want a Violation naming spec.image, its default and the flag, got %v", err)
	}
	if err := p.CheckMachine(&infrav1.ContainerMachineSpec{}, "capct/node:v1.35.4"); err != nil {
		t.Fatalf("the allowed default image was refused: %v", err)
	}
	err = p.CheckCluster(&infrav1.ContainerClusterSpec{}, "kindest/haproxy:v20230606-42a2262b")
	if !IsViolation(err) || !strings.Contains(err.Error(), "spec.loadBalancer.image") {
		t.Fatalf("want a Violation naming spec.loadBalancer.image, got %v", err)
	}
	if err := Default().CheckCluster(&infrav1.ContainerClusterSpec{Network: infrav1.NetworkSpec{Name: "bridge"}}, "capct/haproxy:2.6"); !IsViolation(err) {
		t.Fatalf("the default policy accepted the bridge network at launch: %v", err)
	}
}

func TestMissingImages(t *testing.T) {
	host := map[string]bool{"capct/node:v1.35.4": true}
	exists := func(_ context.Context, ref string) (bool, error) { return host[ref], nil }
	spec := &infrav1.ContainerMachineSpec{PreLoadImages: []string{"capct/node:v1.35.4", "app:1"}}
	err := MissingImages(context.Background(), exists, MachineImages(spec, "capct/node:v1.35.4"))
	var notOnHost *NotOnHostError
	if !errors.As(err, &notOnHost) || len(notOnHost.Missing) != 1 || !strings.Contains(err.Error(), `spec.preLoadImages[1]: image "app:1"`) {
		t.Fatalf("want the missing preload named, got %v", err)
	}
	spec.Image = "gone:1"
	err = MissingImages(context.Background(), exists, MachineImages(spec, "capct/node:v1.35.4"))
	if !strings.Contains(err.Error(), `spec.image: image "gone:1"`) {
		t.Fatalf("want spec.image named, got %v", err)
	}
	broken := func(context.Context, string) (bool, error) { return false, errors.New("engine down") }
	if err := MissingImages(context.Background(), broken, MachineImages(spec, "")); errors.As(err, &notOnHost) || !strings.Contains(err.Error(), "engine down") {
		t.Fatalf("an engine error must not read as a missing image: %v", err)
	}
}

func TestFlags(t *testing.T) {
	testCases := []struct {
		name string
		args []string
		want Policy
	}{
		{name: "no flags", args: nil, want: Default()},
		{name: "lists", args: []string{"--allowed-host-path-prefixes=/srv/a,/srv/b", "--allowed-image-prefixes=capct/", "--allowed-image-prefixes=kindest/", "--max-machines-per-cluster=7"},
			want: with(Policy{HostPathPrefixes: []string{"/srv/a", "/srv/b"}, ImagePrefixes: []string{"capct/", "kindest/"}, MaxMachinesPerCluster: 7})},
		{name: "an empty value forbids", args: []string{"--allowed-unmanaged-networks="},
			want: with(Policy{AllowedNetworks: []string{}, MaxMachinesPerCluster: DefaultMaxMachinesPerCluster})},
		{name: "listen addresses replace the loopback default", args: []string{"--allowed-host-listen-addresses=192.0.2.10", "--allowed-host-listen-addresses= ::1 ,127.0.0.1", "--min-host-port=80"},
			want: Policy{MaxMachinesPerCluster: DefaultMaxMachinesPerCluster, HostListenAddresses: []string{"192.0.2.10", "::1", "127.0.0.1"}, MinHostPort: 80}},
		{name: "every listen address", args: []string{"--allowed-host-listen-addresses=*", "--min-host-port=1"},
			want: Policy{MaxMachinesPerCluster: DefaultMaxMachinesPerCluster, MinHostPort: 1}},
		{name: "no listen address", args: []string{"--allowed-host-listen-addresses="},
			want: Policy{MaxMachinesPerCluster: DefaultMaxMachinesPerCluster, HostListenAddresses: []string{}, MinHostPort: DefaultMinHostPort}},
		{name: "* allows all", args: []string{"--allowed-unmanaged-networks=*", "--allowed-host-path-prefixes=*", "--allowed-image-prefixes=*"},
			want: Default()},
		{name: "the local engine for every namespace", args: []string{"--local-engine-allowed-namespaces=*", "--local-engine-namespace-selector=*"},
			want: Default()},
		{name: "the local engine for every namespace, given empty", args: []string{"--local-engine-allowed-namespaces=", "--local-engine-namespace-selector="},
			want: Default()},
		{name: "the local engine for some", args: []string{"--local-engine-allowed-namespaces=platform, ops", "--local-engine-namespace-selector=capct.io/local-engine=allowed"},
			want: with(Policy{MaxMachinesPerCluster: DefaultMaxMachinesPerCluster, LocalEngineNamespaces: &infrav1.AllowedNamespaces{
				List: []string{"platform", "ops"}, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"capct.io/local-engine": "allowed"}}}})},
		{name: "the local engine by label only", args: []string{"--local-engine-allowed-namespaces=*", "--local-engine-namespace-selector=capct.io/local-engine"},
			want: with(Policy{MaxMachinesPerCluster: DefaultMaxMachinesPerCluster, LocalEngineNamespaces: &infrav1.AllowedNamespaces{
				Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "capct.io/local-engine", Operator: metav1.LabelSelectorOpExists}}}}})},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			var p Policy
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			p.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if got, want := describe(p), describe(tc.want); got != want {
				t.Fatalf("got %s, want %s", got, want)
			}
		})
	}
}

// with is p with the port flags' defaults, as a manager that was given
// none of them has.
func with(p Policy) Policy {
	p.HostListenAddresses, p.MinHostPort = slices.Clone(DefaultHostListenAddresses), DefaultMinHostPort
	return p
}

// TestAHostListenAddressThatDoesNotParseStopsTheManager: a name or a typo
// in the list fails the flag, rather than refusing every mapping later.
func TestAHostListenAddressThatDoesNotParseStopsTheManager(t *testing.T) {
	for _, v := range []string{"localhost", "127.0.0.300", "fe80::1%eth0", "::ffff:127.0.0.1"} {
		var p Policy
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		p.AddFlags(fs)
		if err := fs.Parse([]string{"--allowed-host-listen-addresses=" + v}); err == nil {
			t.Errorf("%q was taken: %v", v, p.HostListenAddresses)
		}
	}
}

// describe tells nil lists from empty ones, which reflect.DeepEqual would
// also do but with a less readable failure.
func describe(p Policy) string {
	l := func(s []string) string {
		if s == nil {
			return "nil"
		}
		return "[" + strings.Join(s, " ") + "]"
	}
	local := "all"
	if a := p.LocalEngineNamespaces; a != nil {
		local = l(a.List)
		if a.Selector != nil {
			local += " selector=" + metav1.FormatLabelSelector(a.Selector)
		}
	}
	return "paths=" + l(p.HostPathPrefixes) + " networks=" + l(p.AllowedNetworks) + " images=" + l(p.ImagePrefixes) +
		" max=" + strings.Repeat("|", min(p.MaxMachinesPerCluster, 200)) + " local=" + local +
		" listen=" + l(p.HostListenAddresses) + " minport=" + strconv.Itoa(p.MinHostPort)
}

func wantFields(t *testing.T, errs field.ErrorList, fields ...string) {
	t.Helper()
	if len(errs) != len(fields) {
		t.Fatalf("want errors on %v, got %v", fields, errs)
	}
	for i, f := range fields {
		if errs[i].Field != f {
			t.Fatalf("error %d: want field %s, got %v", i, f, errs[i])
		}
	}
}

// FuzzMachineSpec feeds arbitrary strings to every decision about a machine:
// none may panic, and each refusal names a field under spec.
func FuzzMachineSpec(f *testing.F) {
	f.Add("capct/node:v1", "/data", "/srv/capct/x", "kindest/haproxy:1", "capct-mgmt")
	f.Add("", "/", "/", "", "host")
	f.Add("a@sha256:xyz", "/var/../etc", "//", "::", "")
	f.Fuzz(func(t *testing.T, image, containerPath, hostPath, preload, network string) {
		for _, p := range []*Policy{{}, restricted(), ptrTo(Default())} {
			spec := &infrav1.ContainerMachineSpec{
				Image:         image,
				ExtraMounts:   []infrav1.Mount{{ContainerPath: containerPath, HostPath: hostPath}},
				PreLoadImages: []string{preload},
				ExtraPortMappings: []infrav1.PortMapping{
					{ListenAddress: network, HostPort: int32(len(hostPath)), ContainerPort: 1},
					{ListenAddress: preload, HostPort: int32(len(hostPath)), ContainerPort: 2, Protocol: infrav1.PortProtocol(image)},
				},
			}
			errs := p.MachineSpec(field.NewPath("spec"), spec, nil)
			errs = append(errs, p.ClusterSpec(field.NewPath("spec"), &infrav1.ContainerClusterSpec{
				Network: infrav1.NetworkSpec{Name: network, Mode: infrav1.NetworkUnmanaged}, LoadBalancer: infrav1.LoadBalancerSpec{Image: image, ListenAddress: network},
			}, nil)...)
			for _, err := range errs {
				if !strings.HasPrefix(err.Field, "spec.") {
					t.Fatalf("an error does not name a field under spec: %v", err)
				}
			}
			_ = p.CheckMachine(spec, image)
		}
	})
}

// TestALocalEngineSelectorThatDoesNotParseStopsTheManager: a typo in the
// selector fails the flag, rather than refusing every cluster later.
func TestALocalEngineSelectorThatDoesNotParseStopsTheManager(t *testing.T) {
	var p Policy
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	p.AddFlags(fs)
	if err := fs.Parse([]string{"--local-engine-namespace-selector=team in a"}); err == nil {
		t.Fatalf("a selector that does not parse was taken: %+v", p.LocalEngineNamespaces)
	}
}

func ptrTo[T any](v T) *T { return &v }
