package webhooks_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/policy"
)

// testPolicy is the hardened policy: the manager's in these tests (in the
// default namespace), as if started with
//
//	--allowed-host-path-prefixes=/srv/capct
//	--allowed-unmanaged-networks=capct-mgmt,shared
//	--allowed-image-prefixes=capct/,kindest/haproxy:,registry.example.com/team/
//	--max-machines-per-cluster=3
//	--allowed-host-listen-addresses=127.0.0.1
//	--min-host-port=10000
//	--local-engine-allowed-namespaces=default
//	--local-engine-namespace-selector=capct.io/local-engine=allowed
//
// hostileCases also run under the shipped defaults (shippedPolicy, in
// shippedNamespace).
var testPolicy = policy.Policy{
	HostPathPrefixes:      []string{"/srv/capct"},
	AllowedNetworks:       []string{"capct-mgmt", "shared"},
	ImagePrefixes:         []string{"capct/", "kindest/haproxy:", "registry.example.com/team/"},
	MaxMachinesPerCluster: 3,
	HostListenAddresses:   []string{"127.0.0.1"},
	MinHostPort:           10000,
	LocalEngineNamespaces: &infrav1.AllowedNamespaces{
		List:     []string{metav1.NamespaceDefault},
		Selector: &metav1.LabelSelector{MatchLabels: localEngineAllowed},
	},
}

// localEngineAllowed labels a namespace that testPolicy's
// --local-engine-namespace-selector selects: its clusters may list no
// engines and run on the manager's own.
var localEngineAllowed = map[string]string{"capct.io/local-engine": "allowed"}

// Clusters the table's machines belong to: one paused as clusterctl move
// leaves it, one whose machines count against the cap, and names of
// clusters that do not exist (yet).
const (
	pausedCluster = "moving"
	cappedCluster = "capped"
	ghostCluster  = "ghost"
)

// userFinalizer is a finalizer someone other than CAPCT put on an object,
// which holds it, deleted, for as long as they like.
const userFinalizer = "example.com/hold"

// createFixtureClusters creates the table's Clusters in each namespace the
// table runs in.
func createFixtureClusters(ctx context.Context, c client.Client) error {
	for _, ns := range []string{metav1.NamespaceDefault, shippedNamespace} {
		for _, cl := range []*clusterv1.Cluster{
			{ObjectMeta: metav1.ObjectMeta{Name: pausedCluster, Namespace: ns}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(true)}},
			{ObjectMeta: metav1.ObjectMeta{Name: cappedCluster, Namespace: ns}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(false)}},
		} {
			if err := c.Create(ctx, cl); err != nil {
				return fmt.Errorf("failed to create the fixture Cluster %s/%s: %w", ns, cl.Name, err)
			}
		}
	}
	return nil
}

// Builders: each starts from an object the API server accepts (see
// TestValidObjectsAreAccepted) and changes it.

func cluster(change func(*infrav1.ContainerCluster)) client.Object {
	c := validCluster("")
	change(c)
	return c
}

func clusterTemplate(change func(*infrav1.ContainerClusterSpec)) client.Object {
	t := &infrav1.ContainerClusterTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault},
		Spec:       infrav1.ContainerClusterTemplateSpec{Template: infrav1.ContainerClusterTemplateResource{Spec: validCluster("").Spec}},
	}
	change(&t.Spec.Template.Spec)
	return t
}

func machine(change func(*infrav1.ContainerMachine)) client.Object {
	m := validMachine("")
	change(m)
	return m
}

func machineTemplate(change func(*infrav1.ContainerMachineSpec)) client.Object {
	t := validMachineTemplate("")
	change(&t.Spec.Template.Spec)
	return t
}

func pool(change func(*infrav1.ContainerMachineSpec)) client.Object {
	p := validPool("")
	change(&p.Spec.Template)
	return p
}

func poolTemplate(change func(*infrav1.ContainerMachineSpec)) client.Object {
	t := &expinfrav1.ContainerMachinePoolTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault},
		Spec: expinfrav1.ContainerMachinePoolTemplateSpec{Template: expinfrav1.ContainerMachinePoolTemplateResource{
			Spec: validPool("").Spec,
		}},
	}
	change(&t.Spec.Template.Spec.Template)
	return t
}

func mount(containerPath, hostPath string) func(*infrav1.ContainerMachineSpec) {
	return func(s *infrav1.ContainerMachineSpec) {
		s.ExtraMounts = []infrav1.Mount{{ContainerPath: containerPath, HostPath: hostPath}}
	}
}

func image(ref string) func(*infrav1.ContainerMachineSpec) {
	return func(s *infrav1.ContainerMachineSpec) { s.Image = ref }
}

func machineSpec(change func(*infrav1.ContainerMachineSpec)) func(*infrav1.ContainerMachine) {
	return func(m *infrav1.ContainerMachine) { change(&m.Spec) }
}

func inCluster(name string) func(*infrav1.ContainerMachine) {
	return func(m *infrav1.ContainerMachine) {
		m.Labels = map[string]string{clusterv1.ClusterNameLabel: name}
	}
}

// relabel is an update that moves an object to the cluster name.
func relabel(name string) func(client.Object) {
	return func(o client.Object) { o.SetLabels(map[string]string{clusterv1.ClusterNameLabel: name}) }
}

func network(name string, mode infrav1.NetworkMode) func(*infrav1.ContainerCluster) {
	return func(c *infrav1.ContainerCluster) { c.Spec.Network.Name, c.Spec.Network.Mode = name, mode }
}

func quantity(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }

// publish is a machine spec change that publishes one port: host port
// hostPort on listenAddress (empty: the default) to the node's 30080.
func publish(listenAddress string, hostPort int32, protocol infrav1.PortProtocol) func(*infrav1.ContainerMachineSpec) {
	return func(s *infrav1.ContainerMachineSpec) {
		s.ExtraPortMappings = []infrav1.PortMapping{{ListenAddress: listenAddress, HostPort: hostPort, ContainerPort: 30080, Protocol: protocol}}
	}
}

func lbListenAddress(addr string) func(*infrav1.ContainerCluster) {
	return func(c *infrav1.ContainerCluster) { c.Spec.LoadBalancer.ListenAddress = addr }
}

// mirrors sets a cluster's spec.registryMirrors.
func mirrors(m ...infrav1.RegistryMirror) func(*infrav1.ContainerCluster) {
	return func(c *infrav1.ContainerCluster) { c.Spec.RegistryMirrors = m }
}

// mirrorAt is registry mirrored at the endpoint url.
func mirrorAt(registry, url string) infrav1.RegistryMirror {
	return infrav1.RegistryMirror{Registry: registry, Endpoints: []infrav1.RegistryEndpoint{{URL: url}}}
}

// pemKey is what a private key pasted into a caBundle starts with.
const pemKey = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIA==\n-----END EC PRIVATE KEY-----\n"

// hostileCase is one hostile or mistaken object and what becomes of it.
type hostileCase struct {
	kind  string
	input string
	// existing objects are created first (and deleted after).
	existing []client.Object
	// obj is created; with update set, it is created as given and then
	// updated with update applied.
	obj    client.Object
	update func(client.Object)
	// deleted makes obj carry userFinalizer and deletes it before the
	// update, which then meets an object being deleted.
	deleted bool
	// namespaceLabels, when not nil, puts the case's objects in a
	// namespace of their own that carries these labels (and that neither
	// policy lists by name), rather than in the run's namespace.
	namespaceLabels map[string]string
	// want is the outcome under each policy.
	want outcomes
}

// outcome is what the API server does with a hostile case.
type outcome struct {
	// refused is the field path the API server's refusal must name; empty
	// when the object is accepted.
	refused string
	// atLaunch says, for an accepted object, what reports the problem when
	// CAPCT launches it.
	atLaunch string
}

func refused(fieldPath string) outcome { return outcome{refused: fieldPath} }

func accepted(atLaunch string) outcome { return outcome{atLaunch: atLaunch} }

// outcomes are a case's outcome under the shipped defaults and under the
// hardened flags (testPolicy).
type outcomes struct {
	shipped, hardened outcome
}

// both is the same outcome under either policy.
func both(o outcome) outcomes { return outcomes{shipped: o, hardened: o} }

// belowShippedCap is what becomes of a machine the hardened cap of 3
// refuses, under the shipped cap.
const belowShippedCap = "launched like any machine: the shipped --max-machines-per-cluster is 100, and the 101st is refused"

// hostileCases is the list docs/security.md shows as a table: keep the two
// in step.
func hostileCases() []hostileCase {
	cp := func(s string) func(*infrav1.ContainerMachineSpec) { return mount(s, "/srv/capct/data") }
	hp := func(s string) func(*infrav1.ContainerMachineSpec) { return mount("/data", s) }
	return []hostileCase{
		// ContainerCluster: the network and the endpoint.
		{kind: "ContainerCluster", input: "Unmanaged network host (the host's network stack)",
			obj: cluster(network("host", infrav1.NetworkUnmanaged)), want: both(refused("spec.network.name"))},
		{kind: "ContainerCluster", input: "Unmanaged network bridge (the engine's default network)",
			obj: cluster(network("bridge", infrav1.NetworkUnmanaged)), want: both(refused("spec.network.name"))},
		{kind: "ContainerCluster", input: "Managed network named none",
			obj: cluster(network("none", infrav1.NetworkManaged)), want: both(refused("spec.network.name"))},
		{kind: "ContainerCluster", input: "Unmanaged network kind (another cluster's network)",
			obj: cluster(network("kind", infrav1.NetworkUnmanaged)), want: outcomes{
				shipped: accepted("the cluster joins kind beside the containers already on it; if kind does not exist, " +
					"LoadBalancerAvailable False, Failed: the Unmanaged network \"kind\" does not exist"),
				hardened: refused("spec.network.name"),
			}},
		{kind: "ContainerCluster", input: "network container:victim-lb (another container's network namespace)",
			obj: cluster(network("container:victim-lb", infrav1.NetworkUnmanaged)), want: both(refused("spec.network.name"))},
		{kind: "ContainerCluster", input: "spec.network.name added after create",
			obj:    cluster(func(c *infrav1.ContainerCluster) { c.Spec.Network = infrav1.NetworkSpec{} }),
			update: func(o client.Object) { o.(*infrav1.ContainerCluster).Spec.Network.Name = "capct-other" },
			want:   both(refused("spec.network.name"))},
		{kind: "ContainerCluster", input: "spec.network removed after create",
			obj:    cluster(network("shared", infrav1.NetworkUnmanaged)),
			update: func(o client.Object) { o.(*infrav1.ContainerCluster).Spec.Network = infrav1.NetworkSpec{} },
			want:   both(refused("spec.network.mode"))},
		{kind: "ContainerCluster", input: "ipFamily changed from DualStack to IPv4 on a live cluster",
			obj:    cluster(func(*infrav1.ContainerCluster) {}),
			update: func(o client.Object) { o.(*infrav1.ContainerCluster).Spec.Network.IPFamily = infrav1.IPv4Family },
			want:   both(refused("spec.network.ipFamily"))},
		{kind: "ContainerCluster", input: "ipFamily added after create (the family was derived)",
			obj:    cluster(func(c *infrav1.ContainerCluster) { c.Spec.Network = infrav1.NetworkSpec{} }),
			update: func(o client.Object) { o.(*infrav1.ContainerCluster).Spec.Network.IPFamily = infrav1.IPv6Family },
			want:   both(refused("spec.network.ipFamily"))},
		{kind: "ContainerCluster", input: "controlPlaneEndpoint port 8443, which CAPCT does not serve",
			obj: cluster(func(c *infrav1.ContainerCluster) {
				c.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: "10.0.0.1", Port: 8443}
			}), want: both(refused("spec.controlPlaneEndpoint.port"))},
		{kind: "ContainerCluster", input: "load balancer image haproxy:latest, not under an allowed prefix",
			obj:  cluster(func(c *infrav1.ContainerCluster) { c.Spec.LoadBalancer.Image = "haproxy:latest" }),
			want: both(refused("spec.loadBalancer.image"))},
		{kind: "ContainerCluster", input: "load balancer image Capct/HAProxy (not a reference)",
			obj:  cluster(func(c *infrav1.ContainerCluster) { c.Spec.LoadBalancer.Image = "Capct/HAProxy" }),
			want: both(refused("spec.loadBalancer.image"))},
		{kind: "ContainerCluster", input: "load balancer listenAddress 0.0.0.0 (every interface of the host)",
			obj: cluster(lbListenAddress("0.0.0.0")), want: both(refused("spec.loadBalancer.listenAddress"))},
		{kind: "ContainerCluster", input: "load balancer listenAddress ::1 (the host's IPv6 loopback)",
			obj: cluster(lbListenAddress("::1")), want: outcomes{
				shipped:  accepted("the API server port is published on the host's ::1, which only the host reaches"),
				hardened: refused("spec.loadBalancer.listenAddress"),
			}},
		{kind: "ContainerCluster", input: "load balancer listenAddress localhost (a name, not an address)",
			obj: cluster(lbListenAddress("localhost")), want: both(refused("spec.loadBalancer.listenAddress"))},
		{kind: "ContainerCluster", input: "load balancer listenAddress changed after create",
			obj:    cluster(func(*infrav1.ContainerCluster) {}),
			update: func(o client.Object) { o.(*infrav1.ContainerCluster).Spec.LoadBalancer.ListenAddress = "127.0.0.2" },
			want:   both(refused("spec.loadBalancer.listenAddress"))},
		{kind: "ContainerCluster", input: "101 failure domains",
			obj: cluster(func(c *infrav1.ContainerCluster) {
				c.Spec.FailureDomains = nil
				for i := range 101 {
					c.Spec.FailureDomains = append(c.Spec.FailureDomains, clusterv1.FailureDomain{Name: fmt.Sprintf("fd%d", i)})
				}
			}), want: both(refused("spec.failureDomains"))},
		// ContainerCluster: the manager's own engine, which a cluster that
		// lists no engines runs on.
		{kind: "ContainerCluster", input: "no spec.engines (the manager's own engine) in a namespace that --local-engine-allowed-namespaces does not list " +
			"and --local-engine-namespace-selector does not select",
			namespaceLabels: map[string]string{}, obj: cluster(func(*infrav1.ContainerCluster) {}), want: outcomes{
				shipped:  accepted("runs on the manager's own engine: the shipped --local-engine-* flags are *, which lets every namespace"),
				hardened: refused("spec.engines"),
			}},
		{kind: "ContainerCluster", input: "no spec.engines in a namespace labelled capct.io/local-engine=allowed, which the selector selects",
			namespaceLabels: localEngineAllowed, obj: cluster(func(*infrav1.ContainerCluster) {}),
			want: both(accepted("runs on the manager's own engine"))},
		{kind: "ContainerCluster", input: "a ContainerEngine that does not exist yet listed, in a namespace the --local-engine-* flags leave out",
			namespaceLabels: map[string]string{}, obj: cluster(func(c *infrav1.ContainerCluster) {
				c.Spec.FailureDomains = nil
				c.Spec.Engines = []infrav1.ClusterEngine{{Name: "not-yet-created"}}
			}), want: both(accepted("EnginesReady False, EngineNotFound, and nothing is made, until an admin creates the engine and lets the namespace use it"))},
		{kind: "Cluster", input: "pod CIDRs 172.16.0.0/12, around every network CAPCT derives",
			obj: &clusterv1.Cluster{
				ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault},
				Spec: clusterv1.ClusterSpec{ClusterNetwork: clusterv1.ClusterNetwork{
					Pods: clusterv1.NetworkRanges{CIDRBlocks: []string{"172.16.0.0/12"}},
				}},
			},
			want: both(accepted("the ContainerCluster's LoadBalancerAvailable False, InvalidSpec, once the network's subnets are known: names spec.clusterNetwork.pods.cidrBlocks[i] and the network; no load balancer"))},

		// ContainerClusterTemplate: the same rules inside the template.
		{kind: "ContainerClusterTemplate", input: "Unmanaged network host",
			obj: clusterTemplate(func(s *infrav1.ContainerClusterSpec) {
				s.Network.Name, s.Network.Mode = "host", infrav1.NetworkUnmanaged
			}), want: both(refused("spec.template.spec.network.name"))},
		{kind: "ContainerClusterTemplate", input: "load balancer image evil/haproxy:1",
			obj:  clusterTemplate(func(s *infrav1.ContainerClusterSpec) { s.LoadBalancer.Image = "evil/haproxy:1" }),
			want: both(refused("spec.template.spec.loadBalancer.image"))},
		{kind: "ContainerClusterTemplate", input: "load balancer listenAddress 192.168.1.10 (an interface's address)",
			obj:  clusterTemplate(func(s *infrav1.ContainerClusterSpec) { s.LoadBalancer.ListenAddress = "192.168.1.10" }),
			want: both(refused("spec.template.spec.loadBalancer.listenAddress"))},
		{kind: "ContainerClusterTemplate", input: "controlPlaneEndpoint port 443",
			obj: clusterTemplate(func(s *infrav1.ContainerClusterSpec) {
				s.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: "api.example.com", Port: 443}
			}), want: both(refused("spec.template.spec.controlPlaneEndpoint.port"))},

		// ContainerCluster: registry mirrors, written into every node as
		// containerd's hosts files (docs/registries.md).
		{kind: "ContainerCluster", input: "registry mirror for ../../etc (a folder outside containerd's hosts folder)",
			obj: cluster(mirrors(mirrorAt("../../etc", "http://mirror.example"))), want: both(refused("spec.registryMirrors[0].registry"))},
		{kind: "ContainerCluster", input: "registry mirror for docker.io/library (a path, not a host)",
			obj: cluster(mirrors(mirrorAt("docker.io/library", "http://mirror.example"))), want: both(refused("spec.registryMirrors[0].registry"))},
		{kind: "ContainerCluster", input: "registry docker.io listed twice",
			obj:  cluster(mirrors(mirrorAt("docker.io", "http://a.example"), mirrorAt("docker.io", "http://b.example"))),
			want: both(refused("spec.registryMirrors[1]"))},
		{kind: "ContainerCluster", input: "mirror endpoint file:///etc/shadow",
			obj: cluster(mirrors(mirrorAt("docker.io", "file:///etc/shadow"))), want: both(refused("spec.registryMirrors[0].endpoints[0].url"))},
		{kind: "ContainerCluster", input: "mirror endpoint with credentials (https://user:password@mirror.example)",
			obj:  cluster(mirrors(mirrorAt("docker.io", "https://user:password@mirror.example"))),
			want: both(refused("spec.registryMirrors[0].endpoints[0].url"))},
		{kind: "ContainerCluster", input: "mirror endpoint that closes its TOML table and opens another (`http://m']` and a new line)",
			obj:  cluster(mirrors(mirrorAt("docker.io", "http://m.example']\n[host.'http://evil.example"))),
			want: both(refused("spec.registryMirrors[0].endpoints[0].url"))},
		{kind: "ContainerCluster", input: "registry mirror with neither endpoints nor server",
			obj:  cluster(mirrors(infrav1.RegistryMirror{Registry: "docker.io"})),
			want: both(refused("spec.registryMirrors[0]"))},
		{kind: "ContainerCluster", input: "_default given a server (every registry sent to one host)",
			obj: cluster(mirrors(infrav1.RegistryMirror{Registry: "_default",
				Server: &infrav1.RegistryEndpoint{URL: "https://evil.example"}})),
			want: both(refused("spec.registryMirrors[0].server"))},
		{kind: "ContainerCluster", input: "caBundle holding a private key",
			obj: cluster(mirrors(infrav1.RegistryMirror{Registry: "docker.io", Endpoints: []infrav1.RegistryEndpoint{{
				URL: "https://mirror.example", CABundle: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n" + pemKey}}})),
			want: both(refused("spec.registryMirrors[0].endpoints[0].caBundle"))},
		{kind: "ContainerCluster", input: "caBundle and insecureSkipVerify on one endpoint",
			obj: cluster(mirrors(infrav1.RegistryMirror{Registry: "docker.io", Endpoints: []infrav1.RegistryEndpoint{{
				URL: "https://mirror.example", CABundle: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", InsecureSkipVerify: true}}})),
			want: both(refused("spec.registryMirrors[0].endpoints[0].insecureSkipVerify"))},
		{kind: "ContainerCluster", input: "5 mirrors for one registry",
			obj: cluster(mirrors(infrav1.RegistryMirror{Registry: "docker.io", Endpoints: []infrav1.RegistryEndpoint{
				{URL: "http://m1.example"}, {URL: "http://m2.example"}, {URL: "http://m3.example"}, {URL: "http://m4.example"}, {URL: "http://m5.example"}}})),
			want: both(refused("spec.registryMirrors[0].endpoints"))},
		{kind: "ContainerCluster", input: "17 registries mirrored",
			obj: cluster(func(c *infrav1.ContainerCluster) {
				for i := range 17 {
					c.Spec.RegistryMirrors = append(c.Spec.RegistryMirrors, mirrorAt(fmt.Sprintf("r%d.example", i), "http://mirror.example"))
				}
			}), want: both(refused("spec.registryMirrors"))},
		{kind: "ContainerCluster", input: "mirror endpoint with insecureSkipVerify (a test registry's self-signed certificate)",
			obj: cluster(mirrors(infrav1.RegistryMirror{Registry: "docker.io", Endpoints: []infrav1.RegistryEndpoint{{
				URL: "https://172.18.0.2:5000", InsecureSkipVerify: true}}})),
			want: both(accepted("machines made after it pull docker.io's images from the mirror first, trusting any certificate it shows " +
				"(for a test registry only), then from docker.io; running machines keep their configuration"))},
		{kind: "ContainerClusterTemplate", input: "mirror endpoint ftp://mirror.example",
			obj: clusterTemplate(func(s *infrav1.ContainerClusterSpec) {
				s.RegistryMirrors = []infrav1.RegistryMirror{mirrorAt("docker.io", "ftp://mirror.example")}
			}), want: both(refused("spec.template.spec.registryMirrors[0].endpoints[0].url"))},

		// ContainerMachine: resources.
		{kind: "ContainerMachine", input: "cpus 1m, below the engine's 0.01",
			obj:  machine(func(m *infrav1.ContainerMachine) { m.Spec.Resources.CPUs = quantity("1m") }),
			want: both(refused("spec.resources.cpus"))},
		{kind: "ContainerMachine", input: "cpus 2000",
			obj:  machine(func(m *infrav1.ContainerMachine) { m.Spec.Resources.CPUs = quantity("2000") }),
			want: both(refused("spec.resources.cpus"))},
		{kind: "ContainerMachine", input: "memory 256Mi, too little for a node",
			obj:  machine(func(m *infrav1.ContainerMachine) { m.Spec.Resources.Memory = quantity("256Mi") }),
			want: both(refused("spec.resources.memory"))},
		{kind: "ContainerMachine", input: "memory 2Ti",
			obj:  machine(func(m *infrav1.ContainerMachine) { m.Spec.Resources.Memory = quantity("2Ti") }),
			want: both(refused("spec.resources.memory"))},

		// ContainerMachine: mounts.
		{kind: "ContainerMachine", input: "mount onto /",
			obj: machine(machineSpec(cp("/"))), want: both(refused("spec.extraMounts[0].containerPath"))},
		{kind: "ContainerMachine", input: "mount onto /var/ (the node's volume)",
			obj: machine(machineSpec(cp("/var/"))), want: both(refused("spec.extraMounts[0].containerPath"))},
		{kind: "ContainerMachine", input: "mount onto /var/lib/kubelet/pods",
			obj: machine(machineSpec(cp("/var/lib/kubelet/pods"))), want: both(refused("spec.extraMounts[0].containerPath"))},
		{kind: "ContainerMachine", input: "mount onto /run/cluster-api (would fake the bootstrap sentinel)",
			obj: machine(machineSpec(cp("/run/cluster-api"))), want: both(refused("spec.extraMounts[0].containerPath"))},
		{kind: "ContainerMachine", input: "mount onto /lib/modules",
			obj: machine(machineSpec(cp("/lib/modules"))), want: both(refused("spec.extraMounts[0].containerPath"))},
		{kind: "ContainerMachine", input: "container path /data:Z (relabels the host directory)",
			obj: machine(machineSpec(cp("/data:Z"))), want: both(refused("spec.extraMounts[0].containerPath"))},
		{kind: "ContainerMachine", input: "host path /srv/capct:/etc (a second bind in one)",
			obj: machine(machineSpec(hp("/srv/capct:/etc"))), want: both(refused("spec.extraMounts[0].hostPath"))},
		{kind: "ContainerMachine", input: "host path / (the host's root)",
			obj: machine(machineSpec(hp("/"))), want: both(refused("spec.extraMounts[0].hostPath"))},
		{kind: "ContainerMachine", input: "host path /var/run/docker.sock (the engine)",
			obj: machine(machineSpec(hp("/var/run/docker.sock"))), want: both(refused("spec.extraMounts[0].hostPath"))},
		{kind: "ContainerMachine", input: "host path /srv/capct/../../etc (escapes the allowed prefix)",
			obj: machine(machineSpec(hp("/srv/capct/../../etc"))), want: both(refused("spec.extraMounts[0].hostPath"))},
		{kind: "ContainerMachine", input: "33 mounts",
			obj: machine(func(m *infrav1.ContainerMachine) {
				m.Spec.ExtraMounts = nil
				for i := range 33 {
					m.Spec.ExtraMounts = append(m.Spec.ExtraMounts, infrav1.Mount{ContainerPath: fmt.Sprintf("/d%d", i), HostPath: "/srv/capct"})
				}
			}), want: both(refused("spec.extraMounts"))},
		{kind: "ContainerMachine", input: "host path under an allowed prefix that does not exist",
			obj:  machine(machineSpec(hp("/srv/capct/missing"))),
			want: both(accepted("Launched False, HostPathNotFound (not final), naming spec.extraMounts[0].hostPath: CAPCT binds it as a mount, which the engine refuses instead of creating the directory"))},
		{kind: "ContainerMachine", input: "mount added by an update onto /etc",
			obj: machine(func(*infrav1.ContainerMachine) {}),
			update: func(o client.Object) {
				m := o.(*infrav1.ContainerMachine)
				m.Spec.ExtraMounts = append(m.Spec.ExtraMounts, infrav1.Mount{ContainerPath: "/etc", HostPath: "/srv/capct"})
			}, want: both(refused("spec.extraMounts[1].containerPath"))},

		// ContainerMachine: images.
		{kind: "ContainerMachine", input: "image evil.example.com/node:1, not under an allowed prefix",
			obj: machine(machineSpec(image("evil.example.com/node:1"))), want: both(refused("spec.image"))},
		{kind: "ContainerMachine", input: "image capct.evil.com/node:1 (a registry named like the prefix)",
			obj: machine(machineSpec(image("capct.evil.com/node:1"))), want: both(refused("spec.image"))},
		{kind: "ContainerMachine", input: "image capct/Node:v1 (uppercase: not a reference)",
			obj: machine(machineSpec(image("capct/Node:v1"))), want: both(refused("spec.image"))},
		{kind: "ContainerMachine", input: "preloaded image busybox, not under an allowed prefix",
			obj:  machine(machineSpec(func(s *infrav1.ContainerMachineSpec) { s.PreLoadImages = []string{"capct/ok:1", "busybox"} })),
			want: both(refused("spec.preLoadImages[1]"))},
		{kind: "ContainerMachine", input: "preloaded image --all (an option, not a reference)",
			obj:  machine(machineSpec(func(s *infrav1.ContainerMachineSpec) { s.PreLoadImages = []string{"--all"} })),
			want: both(refused("spec.preLoadImages[0]"))},
		{kind: "ContainerMachine", input: "preloaded image added by an update",
			obj:    machine(func(*infrav1.ContainerMachine) {}),
			update: func(o client.Object) { o.(*infrav1.ContainerMachine).Spec.PreLoadImages = []string{"evil/tool:1"} },
			want:   both(refused("spec.preLoadImages[0]"))},
		{kind: "ContainerMachine", input: "image allowed but not on the container host",
			obj:  machine(machineSpec(image("capct/node:v0.0.0-missing"))),
			want: both(accepted("Launched False, PullingImage then ImagePullFailed (not final) naming spec.image and the registry's answer, or ImageNotOnHost under imagePullPolicy Never; launches once the image is on the host"))},

		// ContainerMachine: ports published on the host.
		{kind: "ContainerMachine", input: "port published on 0.0.0.0 (every interface of the host)",
			obj: machine(machineSpec(publish("0.0.0.0", 30080, ""))), want: both(refused("spec.extraPortMappings[0].listenAddress"))},
		{kind: "ContainerMachine", input: "port published on :: (every interface, both families)",
			obj: machine(machineSpec(publish("::", 30080, ""))), want: both(refused("spec.extraPortMappings[0].listenAddress"))},
		{kind: "ContainerMachine", input: "port published on 192.168.1.10 (an interface's address)",
			obj: machine(machineSpec(publish("192.168.1.10", 30080, ""))), want: both(refused("spec.extraPortMappings[0].listenAddress"))},
		{kind: "ContainerMachine", input: "port published on ::1 (the host's IPv6 loopback)",
			obj: machine(machineSpec(publish("::1", 30080, ""))), want: outcomes{
				shipped:  accepted("the port is published on the host's ::1, which only the host reaches"),
				hardened: refused("spec.extraPortMappings[0].listenAddress"),
			}},
		{kind: "ContainerMachine", input: "port published on ::ffff:127.0.0.1 (IPv4 written as IPv6)",
			obj: machine(machineSpec(publish("::ffff:127.0.0.1", 30080, ""))), want: both(refused("spec.extraPortMappings[0].listenAddress"))},
		{kind: "ContainerMachine", input: "port published on localhost (a name, not an address)",
			obj: machine(machineSpec(publish("localhost", 30080, ""))), want: both(refused("spec.extraPortMappings[0].listenAddress"))},
		{kind: "ContainerMachine", input: "host port 80 (a privileged port of the host)",
			obj: machine(machineSpec(publish("", 80, ""))), want: both(refused("spec.extraPortMappings[0].hostPort"))},
		{kind: "ContainerMachine", input: "host port 8080",
			obj: machine(machineSpec(publish("", 8080, ""))), want: outcomes{
				shipped:  accepted("published on the host's 127.0.0.1:8080 when the container starts"),
				hardened: refused("spec.extraPortMappings[0].hostPort"),
			}},
		{kind: "ContainerMachine", input: "host port 0",
			obj: machine(machineSpec(publish("", 0, ""))), want: both(refused("spec.extraPortMappings[0].hostPort"))},
		{kind: "ContainerMachine", input: "protocol ICMP",
			obj: machine(machineSpec(publish("", 30080, "ICMP"))), want: both(refused("spec.extraPortMappings[0].protocol"))},
		{kind: "ContainerMachine", input: "one host port published twice",
			obj: machine(machineSpec(func(s *infrav1.ContainerMachineSpec) {
				s.ExtraPortMappings = []infrav1.PortMapping{{HostPort: 30080, ContainerPort: 30080}, {HostPort: 30080, ContainerPort: 30081}}
			})), want: both(refused("spec.extraPortMappings[1]"))},
		{kind: "ContainerMachine", input: "host port another machine on the same engine publishes",
			existing: []client.Object{machine(machineSpec(publish("", 30180, "")))},
			obj:      machine(machineSpec(publish("127.0.0.1", 30180, infrav1.ProtocolTCP))),
			want:     both(refused("spec.extraPortMappings[0].hostPort"))},
		{kind: "ContainerMachine", input: "host port another machine on the same engine publishes over UDP, here TCP",
			existing: []client.Object{machine(machineSpec(publish("", 30181, infrav1.ProtocolUDP)))},
			obj:      machine(machineSpec(publish("", 30181, ""))),
			want:     both(accepted("both are published: a TCP and a UDP port of one number are apart"))},
		{kind: "ContainerMachine", input: "host port a program of the container host listens on",
			obj: machine(machineSpec(publish("", 30182, ""))),
			want: both(accepted("Launched False, HostPortInUse (not final), naming spec.extraPortMappings[0]: " +
				"the engine refuses to start the container until the port is free"))},
		{kind: "ContainerMachine", input: "extraPortMappings added by an update",
			obj:    machine(func(*infrav1.ContainerMachine) {}),
			update: func(o client.Object) { publish("", 30183, "")(&o.(*infrav1.ContainerMachine).Spec) },
			want:   both(refused("spec.extraPortMappings"))},

		// ContainerMachine: identity and count.
		{kind: "ContainerMachine", input: "providerID preset on create",
			obj:  machine(func(m *infrav1.ContainerMachine) { m.Spec.ProviderID = "container:///demo-control-plane-abcde" }),
			want: both(refused("spec.providerID"))},
		{kind: "ContainerMachine", input: "providerID preset on create in a running cluster",
			obj: machine(func(m *infrav1.ContainerMachine) {
				inCluster(cappedCluster)(m)
				m.Spec.ProviderID = "container:///victim-cp-0"
			}), want: both(refused("spec.providerID"))},
		{kind: "ContainerMachine", input: "providerID preset on create while the Cluster is paused (clusterctl move)",
			obj: machine(func(m *infrav1.ContainerMachine) {
				inCluster(pausedCluster)(m)
				m.Spec.ProviderID = "container:///moving-md-0-abcde"
			}), want: both(accepted("adopted as the moved machine's container"))},
		{kind: "ContainerMachine", input: "engine annotation preset on create (choosing an engine the namespace may not use)",
			obj: machine(func(m *infrav1.ContainerMachine) {
				inCluster(cappedCluster)(m)
				m.Annotations = map[string]string{infrav1.EngineAnnotation: "someone-elses-engine"}
			}), want: both(refused("metadata.annotations[" + infrav1.EngineAnnotation + "]"))},
		{kind: "ContainerMachine", input: "a 4th machine in a Cluster",
			existing: []client.Object{
				machine(inCluster(cappedCluster)), machine(inCluster(cappedCluster)), machine(inCluster(cappedCluster)),
			},
			obj: machine(inCluster(cappedCluster)), want: outcomes{
				shipped:  accepted(belowShippedCap),
				hardened: refused("metadata.labels[cluster.x-k8s.io/cluster-name]"),
			}},
		{kind: "ContainerMachine", input: "a 4th machine for a Cluster that does not exist yet",
			existing: []client.Object{
				machine(inCluster(ghostCluster)), machine(inCluster(ghostCluster)), machine(inCluster(ghostCluster)),
			},
			obj: machine(inCluster(ghostCluster)), want: outcomes{
				shipped:  accepted(belowShippedCap),
				hardened: refused("metadata.labels[cluster.x-k8s.io/cluster-name]"),
			}},
		{kind: "ContainerMachine", input: "cluster-name label changed from a Cluster that does not exist to a running one (bypassing its cap)",
			obj:    machine(inCluster(ghostCluster + "-1")),
			update: relabel(cappedCluster),
			want:   both(refused("metadata.labels[cluster.x-k8s.io/cluster-name]"))},
		{kind: "ContainerMachine", input: "cluster-name label removed",
			obj:    machine(inCluster(cappedCluster)),
			update: func(o client.Object) { o.SetLabels(nil) },
			want:   both(refused("metadata.labels[cluster.x-k8s.io/cluster-name]"))},
		{kind: "ContainerMachine", input: "cluster-name label added to an unlabelled machine, making it a Cluster's 4th",
			existing: []client.Object{
				machine(inCluster(cappedCluster)), machine(inCluster(cappedCluster)), machine(inCluster(cappedCluster)),
			},
			obj:    machine(func(*infrav1.ContainerMachine) {}),
			update: relabel(cappedCluster),
			want: outcomes{
				shipped:  accepted(belowShippedCap),
				hardened: refused("metadata.labels[cluster.x-k8s.io/cluster-name]"),
			}},
		{kind: "ContainerMachine", input: "a 253-character name with dots (too long and invalid for a hostname)",
			obj: machine(func(m *infrav1.ContainerMachine) {
				m.Name = strings.Repeat("a.", 126) + "b"
			}), want: both(accepted("internal/naming makes the container name a valid hostname: sanitized, shortened, with a hash"))},

		// ContainerMachineTemplate: the machine rules inside the template.
		{kind: "ContainerMachineTemplate", input: "mount onto /etc/kubernetes",
			obj:  machineTemplate(mount("/etc/kubernetes", "/srv/capct/pki")),
			want: both(refused("spec.template.spec.extraMounts[0].containerPath"))},
		{kind: "ContainerMachineTemplate", input: "host path /etc/shadow",
			obj:  machineTemplate(mount("/data", "/etc/shadow")),
			want: both(refused("spec.template.spec.extraMounts[0].hostPath"))},
		{kind: "ContainerMachineTemplate", input: "image kindest/node:v1.35.0, kind's node image",
			obj: machineTemplate(image("kindest/node:v1.35.0")), want: outcomes{
				shipped: accepted("its machines pull the image (Launched False, PullingImage, or ImagePullFailed naming spec.image " +
					"and the registry's answer, not final); once it is on the host they run as docs/node-image.md describes"),
				hardened: refused("spec.template.spec.image"),
			}},
		{kind: "ContainerMachineTemplate", input: "port published on 0.0.0.0",
			obj: machineTemplate(publish("0.0.0.0", 30080, "")), want: both(refused("spec.template.spec.extraPortMappings[0].listenAddress"))},
		{kind: "ContainerMachineTemplate", input: "host port 443",
			obj: machineTemplate(publish("", 443, "")), want: both(refused("spec.template.spec.extraPortMappings[0].hostPort"))},
		{kind: "ContainerMachineTemplate", input: "cpus 0.001",
			obj:  machineTemplate(func(s *infrav1.ContainerMachineSpec) { s.Resources.CPUs = quantity("0.001") }),
			want: both(refused("spec.template.spec.resources.cpus"))},

		// ContainerMachinePool and its template.
		{kind: "ContainerMachinePool", input: "mount onto /proc/sys",
			obj: pool(mount("/proc/sys", "/srv/capct/x")), want: both(refused("spec.template.extraMounts[0].containerPath"))},
		{kind: "ContainerMachinePool", input: "host path /root",
			obj: pool(mount("/data", "/root")), want: both(refused("spec.template.extraMounts[0].hostPath"))},
		{kind: "ContainerMachinePool", input: "preloaded image evil/miner:1",
			obj:  pool(func(s *infrav1.ContainerMachineSpec) { s.PreLoadImages = []string{"evil/miner:1"} }),
			want: both(refused("spec.template.preLoadImages[0]"))},
		{kind: "ContainerMachinePool", input: "memory 100Mi",
			obj:  pool(func(s *infrav1.ContainerMachineSpec) { s.Resources.Memory = quantity("100Mi") }),
			want: both(refused("spec.template.resources.memory"))},
		{kind: "ContainerMachinePool", input: "host port 22 (the host's ssh)",
			obj: pool(publish("", 22, "")), want: both(refused("spec.template.extraPortMappings[0].hostPort"))},
		{kind: "ContainerMachinePool", input: "cluster-name label changed to another cluster",
			obj: func() client.Object {
				p := validPool("")
				p.Labels = map[string]string{clusterv1.ClusterNameLabel: ghostCluster}
				return p
			}(),
			update: relabel(cappedCluster), want: both(refused("metadata.labels[cluster.x-k8s.io/cluster-name]"))},
		{kind: "ContainerMachinePoolTemplate", input: "image evil/node:1",
			obj: poolTemplate(image("evil/node:1")), want: both(refused("spec.template.spec.template.image"))},
		{kind: "ContainerMachinePoolTemplate", input: "mount onto /usr",
			obj: poolTemplate(mount("/usr", "/srv/capct/usr")), want: both(refused("spec.template.spec.template.extraMounts[0].containerPath"))},
		{kind: "ContainerMachinePoolTemplate", input: "port published on ::",
			obj: poolTemplate(publish("::", 30080, "")), want: both(refused("spec.template.spec.template.extraPortMappings[0].listenAddress"))},

		// Objects being deleted, held by a finalizer that is not CAPCT's:
		// the checks still apply, and only what the deletion needs (the
		// finalizers' removal) passes.
		{kind: "ContainerCluster", input: "load balancer image evil/haproxy:1 set while deleted under a user's finalizer",
			obj: cluster(func(*infrav1.ContainerCluster) {}), deleted: true,
			update: func(o client.Object) { o.(*infrav1.ContainerCluster).Spec.LoadBalancer.Image = "evil/haproxy:1" },
			want:   both(refused("spec.loadBalancer.image"))},
		{kind: "ContainerMachine", input: "mount onto /etc added while deleted under a user's finalizer",
			obj: machine(func(*infrav1.ContainerMachine) {}), deleted: true,
			update: func(o client.Object) {
				m := o.(*infrav1.ContainerMachine)
				m.Spec.ExtraMounts = append(m.Spec.ExtraMounts, infrav1.Mount{ContainerPath: "/etc", HostPath: "/srv/capct"})
			}, want: both(refused("spec.extraMounts[1].containerPath"))},
		{kind: "ContainerMachine", input: "cluster-name label changed while deleted under a user's finalizer",
			obj: machine(inCluster(ghostCluster + "-2")), deleted: true,
			update: relabel(cappedCluster), want: both(refused("metadata.labels[cluster.x-k8s.io/cluster-name]"))},
		{kind: "ContainerMachineTemplate", input: "spec.template.spec changed (to an allowed image) while deleted under a user's finalizer",
			obj: machineTemplate(func(*infrav1.ContainerMachineSpec) {}), deleted: true,
			update: func(o client.Object) {
				o.(*infrav1.ContainerMachineTemplate).Spec.Template.Spec.Image = "capct/node:v1.35.5"
			}, want: both(refused("spec.template.spec"))},
		{kind: "ContainerMachinePool", input: "preloaded image evil/miner:1 added while deleted under a user's finalizer",
			obj: pool(func(*infrav1.ContainerMachineSpec) {}), deleted: true,
			update: func(o client.Object) {
				o.(*expinfrav1.ContainerMachinePool).Spec.Template.PreLoadImages = []string{"evil/miner:1"}
			}, want: both(refused("spec.template.preLoadImages[0]"))},
	}
}

// TestHostileInputs sends each hostile or mistaken object of hostileCases
// to a real API server with CAPCT's CRDs and webhooks, once under the
// shipped defaults (in shippedNamespace) and once under the hardened flags
// (testPolicy, in the default namespace): each is refused with an error that
// names the field, or accepted when the policy allows it or only the launch
// can judge it, as the case says for that policy. A panic in a webhook would
// fail the request, and so the row.
func TestHostileInputs(t *testing.T) {
	if n := len(hostileCases()); n < 40 {
		t.Fatalf("the table must hold at least 40 hostile inputs, it holds %d", n)
	}
	for _, run := range []struct {
		name      string
		namespace string
		want      func(outcomes) outcome
	}{
		{name: "shipped defaults", namespace: shippedNamespace, want: func(o outcomes) outcome { return o.shipped }},
		{name: "hardened flags", namespace: metav1.NamespaceDefault, want: func(o outcomes) outcome { return o.hardened }},
	} {
		t.Run(run.name, func(t *testing.T) {
			for i, tc := range hostileCases() {
				t.Run(tc.kind+": "+tc.input, func(t *testing.T) {
					runHostileCase(t, i, tc, run.namespace, run.want(tc.want))
				})
			}
		})
	}
}

// runHostileCase sends tc, its objects put in namespace, and checks that
// the API server does what want says.
func runHostileCase(t *testing.T, i int, tc hostileCase, namespace string, want outcome) {
	ctx := context.Background()
	if tc.namespaceLabels != nil {
		namespace = caseNamespace(ctx, t, namespace, i, tc.namespaceLabels)
	}
	create := func(obj client.Object) error {
		obj.SetNamespace(namespace)
		err := env.Client.Create(ctx, obj)
		if err == nil {
			t.Cleanup(func() { _ = env.Client.Delete(ctx, obj) })
		}
		return err
	}
	for j, obj := range tc.existing {
		obj.SetName(fmt.Sprintf("hostile-%d-existing-%d", i, j))
		if err := create(obj); err != nil {
			t.Fatalf("failed to create an existing object: %v", err)
		}
	}
	obj := tc.obj
	if obj.GetName() == "" {
		obj.SetName(fmt.Sprintf("hostile-%d", i))
	}
	if tc.deleted {
		obj.SetFinalizers(append(obj.GetFinalizers(), userFinalizer))
	}
	err := create(obj)
	if tc.deleted {
		if err != nil {
			t.Fatalf("failed to create the object to delete: %v", err)
		}
		deleteHeld(ctx, t, obj)
	}
	if tc.update != nil {
		if err != nil {
			t.Fatalf("failed to create the object to update: %v", err)
		}
		tc.update(obj)
		err = env.Client.Update(ctx, obj)
	}
	if want.refused == "" {
		if err != nil {
			t.Fatalf("want accepted (%s), got %v", want.atLaunch, err)
		}
		return
	}
	if err == nil {
		t.Fatalf("the API server accepted it; want a refusal naming %s", want.refused)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want an Invalid error naming %s, got %v", want.refused, err)
	}
	if !namesField(err.Error(), want.refused) {
		t.Fatalf("the error does not name %s: %v", want.refused, err)
	}
}

// caseNamespace creates the namespace of its own that case i asks for in
// the run in namespace run, with labels, and returns its name. The
// namespace meets the run's policy: one made in the shipped run carries
// shippedLabel. It stays: envtest runs no namespace controller, so a
// deleted namespace would only be left terminating.
func caseNamespace(ctx context.Context, t *testing.T, run string, i int, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-hostile-%d", run, i), Labels: maps.Clone(labels)}}
	if run == shippedNamespace {
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[shippedLabel] = shippedLabelValue
	}
	if err := env.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("failed to create Namespace %s: %v", ns.Name, err)
	}
	return ns.Name
}

// deleteHeld deletes obj, which userFinalizer holds, and reads it back
// being deleted. Once the test ends it removes the finalizer, which must be
// accepted: it is all a deletion needs.
func deleteHeld(ctx context.Context, t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Delete(ctx, obj); err != nil {
		t.Fatalf("failed to delete the object: %v", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatalf("failed to read the deleted object: %v", err)
	}
	if obj.GetDeletionTimestamp().IsZero() {
		t.Fatalf("the object was deleted but has no deletion timestamp")
	}
	t.Cleanup(func() {
		held := obj.DeepCopyObject().(client.Object)
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), held); err != nil {
			t.Errorf("failed to read the deleted object: %v", err)
			return
		}
		held.SetFinalizers(nil)
		if err := env.Client.Update(ctx, held); err != nil {
			t.Errorf("the removal of the last finalizer of an object being deleted was refused: %v", err)
		}
	})
}

// namesField reports whether msg names the field path exactly: as
// "path:" or "path " or at the end, so that spec.extraMounts[1] does not
// pass for spec.extraMounts[1].hostPath or the other way round.
func namesField(msg, path string) bool {
	for rest := msg; ; {
		i := strings.Index(rest, path)
		if i < 0 {
			return false
		}
		after := rest[i+len(path):]
		if after == "" || after[0] == ':' || after[0] == ' ' || after[0] == ',' {
			return true
		}
		rest = after
	}
}
