package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// ClusterFinalizer lets the ContainerCluster controller remove the load
// balancer and the network before the object goes.
const ClusterFinalizer = "containercluster.infrastructure.cluster.x-k8s.io"

// ContainerClusterSpec is the desired state of a ContainerCluster.
// +kubebuilder:validation:XValidation:rule="!has(self.engines) || !has(self.failureDomains)",message="engines and failureDomains exclude each other: a cluster's engines are its failure domains",fieldPath=".engines"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.clusterID) || (has(self.clusterID) && self.clusterID == oldSelf.clusterID)",message="clusterID is immutable once set: it names the cluster's containers on the engine"
// +kubebuilder:validation:XValidation:rule="!has(self.network) || !has(self.network.encrypted) || !self.network.encrypted || (has(self.engines) && size(self.engines) > 1)",message="network.encrypted needs a cluster on several engines: only their overlay network leaves a host",fieldPath=".network.encrypted"
type ContainerClusterSpec struct {
	// clusterID identifies the cluster's containers and networks on the
	// container engine (their io.x-k8s.capct.cluster-id label). CAPCT sets it
	// once, from the Cluster's UID, and it never changes. clusterctl move
	// carries it to the target management cluster, whose CAPCT then owns the
	// same containers; a same-named cluster created anew elsewhere gets
	// another ID and owns none of them. Leave it unset.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`
	ClusterID string `json:"clusterID,omitempty"`
	// controlPlaneEndpoint is where the workload cluster's API server is
	// reached. CAPCT sets it to its load balancer's address when it is empty.
	// Its port, when set, must be 6443: the only one CAPCT's load balancer and
	// nodes serve.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.port) || self.port == 6443",message="port must be 6443, the only port CAPCT's load balancer serves",fieldPath=".port"
	ControlPlaneEndpoint clusterv1.APIEndpoint `json:"controlPlaneEndpoint,omitempty,omitzero"`

	// failureDomains are copied to status. On one container host they only
	// label containers; they are kept so that templates from other providers
	// work unchanged. They exclude engines, whose names are the failure
	// domains of a cluster on several engines.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	FailureDomains []clusterv1.FailureDomain `json:"failureDomains,omitempty"`

	// loadBalancer configures the HAProxy container in front of the control
	// plane.
	// +optional
	LoadBalancer LoadBalancerSpec `json:"loadBalancer,omitempty,omitzero"`

	// engines are the ContainerEngines the cluster's machines run on, each a
	// failure domain; the first holds the load balancer. Empty: the
	// manager's own engine, as always. The first engine never changes, and
	// the list cannot be added to a cluster that has none, or removed.
	// Nothing is made for the cluster until every engine exists, allows
	// its namespace and is reached (EnginesReady). The manager must reach
	// the first engine's container network, where the load balancer is.
	// A cluster on one engine runs on that engine's own bridge network; a
	// cluster on several, on an attachable overlay network of the swarm
	// they are in, whose manager is the first engine (docs/multihost.md).
	// So a cluster created on one engine stays on one, and one created on
	// several keeps several.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Engines []ClusterEngine `json:"engines,omitempty"`

	// network configures the cluster's container network and pod CIDR
	// allocation.
	// +optional
	Network NetworkSpec `json:"network,omitempty,omitzero"`

	// imagePullSecretRef names a Secret of type
	// kubernetes.io/dockerconfigjson in the cluster's namespace whose
	// credentials the engines present when they pull the cluster's node,
	// preloaded and load-balancer images: for each image, those of the
	// entry for its registry's host (docs/registries.md). An image whose
	// registry has no entry is pulled anonymously. The manager reads the
	// Secret by name when a pull starts, and never writes its data to a
	// log, an event or a condition.
	// +optional
	ImagePullSecretRef *LocalObjectReference `json:"imagePullSecretRef,omitempty"`

	// registryMirrors say how the nodes' containerd reaches image
	// registries: mirrors tried in order before the registry itself, and
	// the address and CA of a private registry. CAPCT writes each entry as
	// containerd's /etc/containerd/certs.d/<registry>/hosts.toml (with its
	// CA files) into a node before the node bootstraps (docs/registries.md).
	// A change reaches the machines made after it, not the running ones:
	// roll the machines to give them the new configuration. Credentials are
	// not set here: pods pull from a private registry with their
	// imagePullSecrets.
	// +optional
	// +listType=map
	// +listMapKey=registry
	// +kubebuilder:validation:MaxItems=16
	RegistryMirrors []RegistryMirror `json:"registryMirrors,omitempty"`
}

// RegistryMirror is how nodes reach one image registry.
// +kubebuilder:validation:XValidation:rule="has(self.endpoints) || has(self.server)",message="set endpoints, server or both: an entry with neither changes nothing"
// +kubebuilder:validation:XValidation:rule="self.registry != '_default' || !has(self.server)",message="_default has no server: it applies to every registry without an entry of its own, each of which keeps its own address",fieldPath=".server"
type RegistryMirror struct {
	// registry is the host, with its port if it has one, that image names
	// carry: docker.io (for nginx:1.27 too), registry.k8s.io,
	// localhost:5000, [fd00::1]:5000. _default applies to every registry
	// without an entry of its own. Lower case: a folder is named after it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^(_default|([a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:.]+\])(:[0-9]{1,5})?)$`
	Registry string `json:"registry"`

	// endpoints are the mirrors, tried in this order for pulls and tag
	// lookups (containerd's capabilities pull and resolve) before server.
	// The registry itself (or server) is always tried last.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	Endpoints []RegistryEndpoint `json:"endpoints,omitempty"`

	// server replaces the registry's own address as the one tried last
	// (containerd's server), for a registry reached at another URL or with
	// its own CA. Unset: the registry's own address, https (docker.io:
	// https://registry-1.docker.io).
	// +optional
	Server *RegistryEndpoint `json:"server,omitempty"`
}

// RegistryEndpoint is one address of a registry or of a mirror.
// +kubebuilder:validation:XValidation:rule="!has(self.caBundle) || !has(self.insecureSkipVerify) || !self.insecureSkipVerify",message="caBundle and insecureSkipVerify exclude each other: one trusts a CA, the other trusts any certificate",fieldPath=".insecureSkipVerify"
type RegistryEndpoint struct {
	// url of the endpoint: http:// or https://, a host name or address, an
	// optional port and path; no credentials, query or fragment.
	// +required
	// +kubebuilder:validation:MinLength=8
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:.]+\])(:[0-9]{1,5})?(/[a-zA-Z0-9._~%+:@/-]*)?$`
	// +kubebuilder:validation:XValidation:rule="isURL(self)",message="url must be a URL"
	URL string `json:"url"`

	// caBundle is the PEM certificates that the endpoint's TLS certificate
	// must chain to, besides the node's system CAs: for a registry with a
	// private CA.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=16384
	// +kubebuilder:validation:XValidation:rule="self.contains('-----BEGIN CERTIFICATE-----')",message="caBundle must hold PEM certificates (-----BEGIN CERTIFICATE-----)"
	// +kubebuilder:validation:XValidation:rule="!self.contains('PRIVATE KEY')",message="caBundle must not hold a private key: it is written to every node, and only the CA's certificate is needed"
	CABundle string `json:"caBundle,omitempty"`

	// insecureSkipVerify accepts any TLS certificate from the endpoint
	// (containerd's skip_verify). For a test registry only: anyone on the
	// way can then serve the nodes' images.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`

	// overridePath: url's path is the registry API's root, used as it is,
	// rather than the path to which /v2 is added (containerd's
	// override_path), for a registry served under another path.
	// +optional
	OverridePath bool `json:"overridePath,omitempty"`
}

// ClusterEngine is one ContainerEngine a cluster's machines may run on.
type ClusterEngine struct {
	// name of the ContainerEngine.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// controlPlane: control-plane machines may run on this engine.
	// Defaults to true.
	// +optional
	ControlPlane *bool `json:"controlPlane,omitempty"`
}

// LoadBalancerSpec configures the control-plane load balancer.
type LoadBalancerSpec struct {
	// image of the HAProxy container. Defaults to capct/haproxy:2.6, which
	// make lb-image builds. One the cluster's first engine lacks is pulled
	// there unless imagePullPolicy is Never.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[^\s]+$`
	Image string `json:"image,omitempty"`

	// imagePullPolicy says whether the engine pulls the load balancer's
	// image when it lacks it: IfNotPresent (empty means IfNotPresent) or
	// Never (see ImagePullPolicy for why IfNotPresent is the default).
	// Credentials come from the cluster's imagePullSecretRef.
	// +optional
	ImagePullPolicy ImagePullPolicy `json:"imagePullPolicy,omitempty"`

	// listenAddress is the container host's address on which the load
	// balancer publishes the API server port (status.loadBalancer.hostPort):
	// an IPv4 or IPv6 address. Empty means 127.0.0.1, which only the host
	// itself reaches and which is always allowed; another address must be
	// one the manager's --allowed-host-listen-addresses allows (the
	// loopback ones by default). The management cluster reaches the API
	// servers on the cluster network, not through this port. Immutable:
	// the engine publishes the port when it makes the container.
	// +optional
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:Pattern=`^[0-9a-fA-F.:]+$`
	ListenAddress string `json:"listenAddress,omitempty"`

	// customHAProxyConfigTemplateRef names a ConfigMap whose key "value" holds
	// a Go template that replaces the default HAProxy configuration.
	// +optional
	CustomHAProxyConfigTemplateRef *LocalObjectReference `json:"customHAProxyConfigTemplateRef,omitempty"`
}

// NetworkSpec configures a cluster's container network. Its name, mode,
// ipFamily and encrypted are immutable (ContainerCluster's rules, which also
// see spec.network added or removed).
// +kubebuilder:validation:XValidation:rule="!has(self.encrypted) || !self.encrypted || !has(self.mode) || self.mode != 'Unmanaged'",message="encrypted needs mode Managed: CAPCT does not create an Unmanaged network",fieldPath=".encrypted"
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'Unmanaged' || (has(self.name) && size(self.name) > 0)",message="name is required when mode is Unmanaged"
type NetworkSpec struct {
	// name of the container network. Empty (the default) derives a name
	// from the cluster's namespace and name, "capct-<cluster>-<hash>", that
	// no other cluster's derives: a name joined from the two, such as
	// capct-<namespace>-<cluster>, is the same for namespace a with cluster
	// b-c and namespace a-b with cluster c. Empty is accepted so that
	// templates can default to it.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([a-zA-Z0-9][a-zA-Z0-9_.-]*)?$`
	Name string `json:"name,omitempty"`

	// mode says who owns the network. Managed (the default): CAPCT creates
	// it, labels it as this cluster's, and deletes it with the cluster.
	// Unmanaged: the network called name already exists and may be shared,
	// for example with the management cluster, whose controllers must reach
	// the cluster's load balancer; CAPCT attaches the cluster's containers
	// to it and never changes or deletes it.
	// +optional
	Mode NetworkMode `json:"mode,omitempty"`

	// ipFamily of the container network. Defaults to the families of the
	// Cluster's pod CIDRs, or IPv4.
	// +optional
	IPFamily IPFamily `json:"ipFamily,omitempty"`

	// encrypted makes CAPCT create the overlay network of a cluster on
	// several engines with Docker's encryption (the overlay driver's
	// "encrypted" option: IPsec between the engines' hosts), so that node
	// traffic, which otherwise crosses the hosts' network as clear VXLAN,
	// cannot be read or injected on the way (docs/multihost.md). It needs
	// engines that allow IPsec (ESP, IP protocol 50) between them. Only a
	// Managed network of a cluster on several engines can be encrypted: a
	// bridge never leaves its host, and CAPCT does not create an Unmanaged
	// network. Immutable: an overlay cannot change its encryption while
	// nodes are on it.
	// +optional
	Encrypted bool `json:"encrypted,omitempty"`

	// podCIDRAllocation configures CAPCT's node IPAM.
	// +optional
	PodCIDRAllocation PodCIDRAllocation `json:"podCIDRAllocation,omitempty,omitzero"`
}

// NetworkMode says who owns a cluster's container network.
// +kubebuilder:validation:Enum=Managed;Unmanaged
type NetworkMode string

const (
	// NetworkManaged networks are created and deleted by CAPCT.
	NetworkManaged NetworkMode = "Managed"
	// NetworkUnmanaged networks exist beforehand and outlive the cluster.
	NetworkUnmanaged NetworkMode = "Unmanaged"
)

// PodCIDRAllocation configures how CAPCT hands each node a slice of the
// Cluster's pod network (spec.clusterNetwork.pods.cidrBlocks).
type PodCIDRAllocation struct {
	// enabled turns CAPCT's node IPAM on. When it is off, another allocator
	// (for example kube-controller-manager) must assign pod CIDRs. Defaults to
	// true.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// nodeMaskSizeIPv4 is the prefix length of each node's IPv4 pod CIDR.
	// Defaults to 24.
	// +optional
	// +kubebuilder:validation:Minimum=8
	// +kubebuilder:validation:Maximum=30
	NodeMaskSizeIPv4 int32 `json:"nodeMaskSizeIPv4,omitempty"`

	// nodeMaskSizeIPv6 is the prefix length of each node's IPv6 pod CIDR.
	// Defaults to 64.
	// +optional
	// +kubebuilder:validation:Minimum=48
	// +kubebuilder:validation:Maximum=126
	NodeMaskSizeIPv6 int32 `json:"nodeMaskSizeIPv6,omitempty"`
}

// ContainerClusterStatus is the observed state of a ContainerCluster.
type ContainerClusterStatus struct {
	// conditions of the ContainerCluster: Ready, LoadBalancerAvailable, Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// initialization reports the cluster's provisioning, per the Cluster API
	// contract.
	// +optional
	Initialization ClusterInitializationStatus `json:"initialization,omitempty,omitzero"`

	// failureDomains are the failure domains machines may be placed in.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	FailureDomains []clusterv1.FailureDomain `json:"failureDomains,omitempty"`

	// loadBalancer reports where the load balancer can be reached.
	// +optional
	LoadBalancer LoadBalancerStatus `json:"loadBalancer,omitempty,omitzero"`
}

// ClusterInitializationStatus reports a ContainerCluster's provisioning.
// +kubebuilder:validation:MinProperties=1
type ClusterInitializationStatus struct {
	// provisioned is true once the network and load balancer exist and the
	// control-plane endpoint is set.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// LoadBalancerStatus reports the load balancer's addresses.
// +kubebuilder:validation:MinProperties=1
type LoadBalancerStatus struct {
	// hostPort is the port published on the container host's
	// spec.loadBalancer.listenAddress (127.0.0.1 by default), for reaching
	// the API server from the host itself.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	HostPort int32 `json:"hostPort,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=containerclusters,scope=Namespaced,categories=cluster-api,shortName=ccl
// +kubebuilder:storageversion
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster"
// +kubebuilder:printcolumn:name="Endpoint",type="string",JSONPath=".spec.controlPlaneEndpoint.host",description="Control-plane endpoint host"
// +kubebuilder:printcolumn:name="Port",type="integer",JSONPath=".spec.controlPlaneEndpoint.port",description="Control-plane endpoint port"
// +kubebuilder:printcolumn:name="Host Port",type="integer",JSONPath=".status.loadBalancer.hostPort",description="The load balancer's API port on the container host (on spec.loadBalancer.listenAddress, 127.0.0.1 by default)",priority=10
// +kubebuilder:printcolumn:name="Provisioned",type="string",JSONPath=".status.initialization.provisioned",description="Network and load balancer are ready"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// ContainerCluster is the infrastructure of a Cluster whose machines are
// containers: a container network and a load balancer in front of the
// control plane.
type ContainerCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// The network rules treat an absent spec.network like an empty one, so
	// that adding or removing the whole block cannot change the network of a
	// live cluster either.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(oldSelf.controlPlaneEndpoint) || !has(oldSelf.controlPlaneEndpoint.host) || (has(self.controlPlaneEndpoint) && self.controlPlaneEndpoint == oldSelf.controlPlaneEndpoint)",message="controlPlaneEndpoint is immutable once set"
	// +kubebuilder:validation:XValidation:rule="(has(self.network) && has(self.network.name) ? self.network.name : '') == (has(oldSelf.network) && has(oldSelf.network.name) ? oldSelf.network.name : '')",message="network.name is immutable, also by adding or removing spec.network: the cluster's containers are attached to the network",fieldPath=".network.name"
	// +kubebuilder:validation:XValidation:rule="(has(self.network) && has(self.network.mode) ? self.network.mode : 'Managed') == (has(oldSelf.network) && has(oldSelf.network.mode) ? oldSelf.network.mode : 'Managed')",message="network.mode is immutable, also by adding or removing spec.network: CAPCT would delete or leak a network it did not make",fieldPath=".network.mode"
	// +kubebuilder:validation:XValidation:rule="(has(self.network) && has(self.network.ipFamily) ? self.network.ipFamily : '') == (has(oldSelf.network) && has(oldSelf.network.ipFamily) ? oldSelf.network.ipFamily : '')",message="network.ipFamily is immutable, also by adding or removing spec.network: the network and the nodes' addresses cannot change family on a live cluster",fieldPath=".network.ipFamily"
	// +kubebuilder:validation:XValidation:rule="(has(self.network) && has(self.network.encrypted) ? self.network.encrypted : false) == (has(oldSelf.network) && has(oldSelf.network.encrypted) ? oldSelf.network.encrypted : false)",message="network.encrypted is immutable, also by adding or removing spec.network: an overlay cannot change its encryption while nodes are on it",fieldPath=".network.encrypted"
	// +kubebuilder:validation:XValidation:rule="(has(self.loadBalancer) && has(self.loadBalancer.listenAddress) ? self.loadBalancer.listenAddress : '127.0.0.1') == (has(oldSelf.loadBalancer) && has(oldSelf.loadBalancer.listenAddress) ? oldSelf.loadBalancer.listenAddress : '127.0.0.1')",message="loadBalancer.listenAddress is immutable: the engine publishes the load balancer's port when it makes the container",fieldPath=".loadBalancer.listenAddress"
	// +kubebuilder:validation:XValidation:rule="has(self.engines) == has(oldSelf.engines) && (!has(self.engines) || self.engines[0].name == oldSelf.engines[0].name)",message="engines cannot be added to a cluster or removed from it, and its first engine, which holds the load balancer, never changes",fieldPath=".engines"
	// +kubebuilder:validation:XValidation:rule="!has(self.engines) || !has(oldSelf.engines) || (size(self.engines) > 1) == (size(oldSelf.engines) > 1)",message="a cluster on one engine stays on one, and a cluster on several keeps several: the first runs on the engine's own bridge network, the second on an overlay network that spans the engines",fieldPath=".engines"
	Spec ContainerClusterSpec `json:"spec,omitempty"`
	// +optional
	Status ContainerClusterStatus `json:"status,omitempty"`
}

// GetConditions returns the conditions, for CAPI's condition utilities.
func (c *ContainerCluster) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions sets the conditions, for CAPI's condition utilities.
func (c *ContainerCluster) SetConditions(conditions []metav1.Condition) {
	c.Status.Conditions = conditions
}

// +kubebuilder:object:root=true

// ContainerClusterList is a list of ContainerClusters.
type ContainerClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ContainerCluster `json:"items"`
}

func init() {
	schemeBuilder.Register(&ContainerCluster{}, &ContainerClusterList{})
}
