package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EngineFinalizer keeps a ContainerEngine that ContainerClusters still list
// from going: their machines' containers are on it, and without the engine
// CAPCT could neither reach nor remove them.
const EngineFinalizer = "containerengine.infrastructure.cluster.x-k8s.io"

// EngineType is the kind of container engine behind an endpoint.
// +kubebuilder:validation:Enum=Docker;Podman
type EngineType string

const (
	// DockerEngine is dockerd's API.
	DockerEngine EngineType = "Docker"
	// PodmanEngine is `podman system service`'s Docker-compatible API.
	PodmanEngine EngineType = "Podman"
)

// ContainerEngineSpec is how CAPCT reaches one container engine, and who
// may run machines on it.
//
// The rules below refuse an engine CAPCT could only reach insecurely: a
// plain TCP engine socket is root on its host for anyone who reaches it, so
// tcp:// needs TLS; ssh:// needs a known_hosts, because CAPCT never skips
// the host-key check; Podman 4's service offers no TLS, so a Podman engine
// is reached over unix:// or ssh:// only.
// +kubebuilder:validation:XValidation:rule="!self.endpoint.startsWith('tcp://') || has(self.tls)",message="an engine at a tcp:// endpoint needs tls: a plain engine socket is root on its host for anyone who reaches it",fieldPath=".tls"
// +kubebuilder:validation:XValidation:rule="!has(self.tls) || self.endpoint.startsWith('tcp://')",message="tls applies only to a tcp:// endpoint",fieldPath=".tls"
// +kubebuilder:validation:XValidation:rule="!self.endpoint.startsWith('ssh://') || has(self.ssh)",message="an engine at an ssh:// endpoint needs ssh, with the key and known_hosts that authenticate both sides",fieldPath=".ssh"
// +kubebuilder:validation:XValidation:rule="!has(self.ssh) || self.endpoint.startsWith('ssh://')",message="ssh applies only to an ssh:// endpoint",fieldPath=".ssh"
// +kubebuilder:validation:XValidation:rule="!has(self.type) || self.type != 'Podman' || !self.endpoint.startsWith('tcp://')",message="a Podman engine is reached over unix:// or ssh://: Podman's service offers no TLS",fieldPath=".endpoint"
type ContainerEngineSpec struct {
	// type of the engine. Defaults to Docker.
	// +optional
	// +kubebuilder:default=Docker
	Type EngineType `json:"type,omitempty"`

	// endpoint of the engine's API. Empty means the manager's own engine
	// (its --container-engine flag and environment, as for clusters that
	// name no engine); otherwise unix:///path/to.sock,
	// tcp://host:port (with tls) or ssh://user@host[:port][/path/to.sock]
	// (with ssh).
	// +required
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^(unix:///[^[:space:]]+|tcp://[^/@[:space:]]+|ssh://[^/@[:space:]]+@[^/@[:space:]]+(/[^[:space:]]*)?)$')",message="endpoint must be empty (the manager's own engine), unix:///path, tcp://host:port or ssh://user@host[:port][/socket path]"
	Endpoint string `json:"endpoint"`

	// tls authenticates CAPCT to a tcp:// engine and the engine to CAPCT.
	// +optional
	TLS *EngineTLS `json:"tls,omitempty"`

	// ssh reaches an engine's local socket through SSH.
	// +optional
	SSH *EngineSSH `json:"ssh,omitempty"`

	// allowedNamespaces says whose ContainerClusters may run machines on
	// this engine. Unset allows none; an empty object ({}) allows all;
	// `list: []` allows none, and stays `list: []` when written back.
	// +optional
	AllowedNamespaces *AllowedNamespaces `json:"allowedNamespaces,omitempty"`
}

// EngineTLS names the TLS material for a tcp:// engine.
type EngineTLS struct {
	// secretRef names a Secret in the manager's namespace with ca.crt (the
	// engine's CA), tls.crt and tls.key (CAPCT's client certificate). The
	// Secret stays in the manager's namespace: a client certificate for an
	// engine is root on its host, out of tenants' reach.
	// +required
	SecretRef LocalObjectReference `json:"secretRef"`

	// serverName the engine's certificate must carry, when it is not the
	// endpoint's host.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ServerName string `json:"serverName,omitempty"`
}

// EngineSSH names the SSH material for an ssh:// engine.
type EngineSSH struct {
	// secretRef names a Secret in the manager's namespace with
	// ssh-privatekey and known_hosts.
	// +required
	SecretRef LocalObjectReference `json:"secretRef"`
}

// AllowedNamespaces selects namespaces by name, by label, or both (a
// namespace matching either is allowed); an empty object allows all. An
// empty list or a selector without terms selects none: access to an engine
// is granted, never assumed.
//
// "None" and "all" differ only in whether list is present, so list carries
// no omitempty: with it, `list: []` written by any Go client (the
// controllers' own updates, a mutating webhook's patch) would go out as
// {}, and the engine would open to every namespace. Removing the list
// (rather than emptying it) is what allows all.
type AllowedNamespaces struct {
	// list of namespace names. Absent, with no selector, allows every
	// namespace; empty (`list: []`) allows none of its own.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	List []string `json:"list"`

	// selector over namespaces' labels.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// ContainerEngineStatus is the observed state of a ContainerEngine.
type ContainerEngineStatus struct {
	// conditions of the ContainerEngine.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// version of the engine, as it last reported it.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Version string `json:"version,omitempty"`

	// swarm is the engine's place in a Docker swarm, whose overlay
	// networks will connect machines on several engines; unset when the
	// engine is in none.
	// +optional
	Swarm *SwarmMembership `json:"swarm,omitempty"`
}

// SwarmMembership is an engine's membership of a swarm, as it reports it.
type SwarmMembership struct {
	// nodeID of the engine in the swarm.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	NodeID string `json:"nodeID,omitempty"`

	// clusterID of the swarm; only managers report it.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	ClusterID string `json:"clusterID,omitempty"`

	// manager: the engine manages the swarm, so it can create overlay
	// networks.
	// +optional
	Manager bool `json:"manager,omitempty"`

	// nodeAddr is the address the swarm's other engines reach it on.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	NodeAddr string `json:"nodeAddr,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=containerengines,scope=Cluster,categories=cluster-api,shortName=ceng
// +kubebuilder:storageversion
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:metadata:labels="clusterctl.cluster.x-k8s.io/move-hierarchy="
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Type",type="string",JSONPath=".spec.type"
// +kubebuilder:printcolumn:name="Endpoint",type="string",JSONPath=".spec.endpoint"
// +kubebuilder:printcolumn:name="Available",type="string",JSONPath=`.status.conditions[?(@.type=="Available")].status`
// +kubebuilder:printcolumn:name="Version",type="string",JSONPath=".status.version"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// ContainerEngine is a container engine a ContainerCluster may run machines
// on, named in its spec.engines (docs/multihost.md). It is cluster-scoped
// so that an engine's credentials stay with the admin who made it, and one
// engine serves many clusters.
//
// CAPCT reports in its Available condition whether it reaches the engine.
// An engine that ContainerClusters list is not removed when deleted: it
// stays, served, with Deleting True (InUse) naming them, until they go.
// A cluster on one engine runs on that engine's own bridge network; a
// cluster on several runs on an overlay network of the swarm they are in
// (docs/multihost.md).
type ContainerEngine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ContainerEngineSpec `json:"spec"`
	// +optional
	Status ContainerEngineStatus `json:"status,omitempty"`
}

// GetConditions returns the conditions, for CAPI's condition utilities.
func (e *ContainerEngine) GetConditions() []metav1.Condition { return e.Status.Conditions }

// SetConditions sets the conditions, for CAPI's condition utilities.
func (e *ContainerEngine) SetConditions(conditions []metav1.Condition) {
	e.Status.Conditions = conditions
}

// +kubebuilder:object:root=true

// ContainerEngineList is a list of ContainerEngines.
type ContainerEngineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ContainerEngine `json:"items"`
}

func init() {
	schemeBuilder.Register(&ContainerEngine{}, &ContainerEngineList{})
}
