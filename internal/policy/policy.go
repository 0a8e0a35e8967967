package policy

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/distribution/reference"
	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// The manager flags that set a Policy. Messages name them so that a user
// who is refused knows which setting an administrator would have to change.
const (
	FlagAllowedHostPathPrefixes = "allowed-host-path-prefixes"
	FlagAllowedNetworks         = "allowed-unmanaged-networks"
	FlagAllowedImagePrefixes    = "allowed-image-prefixes"
	FlagMaxMachinesPerCluster   = "max-machines-per-cluster"

	FlagAllowedHostListenAddresses = "allowed-host-listen-addresses"
	FlagMinHostPort                = "min-host-port"

	FlagLocalEngineAllowedNamespaces = "local-engine-allowed-namespaces"
	FlagLocalEngineNamespaceSelector = "local-engine-namespace-selector"
)

// DefaultMaxMachinesPerCluster is the default cap on a cluster's
// ContainerMachines. It is far above what one host runs well and far below
// what would exhaust the engine's or the manager's memory by accident.
const DefaultMaxMachinesPerCluster = 100

// ReservedNetworks are the engine's own networks. Attaching a node to `host`
// gives it the host's network stack, `none` leaves it unreachable, and the
// default `bridge` (Podman's is `podman`) is shared by every container on
// the host that was started without a network; `docker_gwbridge` connects
// every swarm service's containers to the host. Each is refused unless
// listed in AllowedNetworks.
var ReservedNetworks = []string{"bridge", "host", "none", "podman", "docker_gwbridge"}

// Policy is what the manager allows objects to ask of the container host. A
// nil list allows everything (but ReservedNetworks); an empty, non-nil list
// allows nothing.
type Policy struct {
	// HostPathPrefixes are the host paths extraMounts may bind: a mount's
	// host path must be one of them or lie below one. Compared after
	// cleaning, by whole path elements.
	HostPathPrefixes []string
	// AllowedNetworks are the names of existing (Unmanaged) networks a
	// cluster may join. Listing a reserved network allows it, for Managed
	// and Unmanaged clusters alike.
	AllowedNetworks []string
	// ImagePrefixes are the prefixes of the images nodes, load balancers and
	// preloads may use, matched against the image as written and as the
	// engine normalizes it (capct/node:v1 is docker.io/capct/node:v1).
	ImagePrefixes []string
	// MaxMachinesPerCluster caps the ContainerMachines of one cluster; 0 means
	// no cap.
	MaxMachinesPerCluster int
	// LocalEngineNamespaces are the namespaces whose ContainerClusters may
	// list no engines, and so run on the manager's own engine, the one on
	// the host the manager runs on; read as a ContainerEngine's
	// allowedNamespaces (engines.LocalAllowsNamespace decides), except that
	// nil allows every namespace.
	LocalEngineNamespaces *infrav1.AllowedNamespaces
	// HostListenAddresses are the host addresses that machines'
	// extraPortMappings and load balancers may publish ports on, compared
	// as addresses (::1 is 0::1). The flag's default is
	// DefaultHostListenAddresses; nil allows every address.
	HostListenAddresses []string
	// MinHostPort is the lowest host port extraPortMappings may publish;
	// 0 allows every port. The flag's default is DefaultMinHostPort.
	MinHostPort int
}

// Default is the policy of a manager started without policy flags: every
// host path, image and network but the reserved ones, at most
// DefaultMaxMachinesPerCluster machines per cluster, and ports published on
// the host's loopback addresses only, from DefaultMinHostPort up. The
// quickstart and the templates work with it.
func Default() Policy {
	return Policy{
		MaxMachinesPerCluster: DefaultMaxMachinesPerCluster,
		HostListenAddresses:   slices.Clone(DefaultHostListenAddresses),
		MinHostPort:           DefaultMinHostPort,
	}
}

// HostPath decides whether extraMounts may bind hostPath.
func (p Policy) HostPath(fld *field.Path, hostPath string) *field.Error {
	if p.HostPathPrefixes == nil {
		return nil
	}
	clean := path.Clean(hostPath)
	for _, prefix := range p.HostPathPrefixes {
		if under(clean, path.Clean(prefix)) {
			return nil
		}
	}
	return field.Forbidden(fld, fmt.Sprintf("host path %q is not under any allowed prefix (%s): the manager's --%s decides",
		hostPath, listOrNone(p.HostPathPrefixes), FlagAllowedHostPathPrefixes))
}

// Network decides whether a cluster may use the network name. Unmanaged
// networks must be listed when a list is set; reserved networks must be
// listed whatever the mode.
func (p Policy) Network(fld *field.Path, name string, unmanaged bool) *field.Error {
	if slices.Contains(p.AllowedNetworks, name) {
		return nil
	}
	if slices.Contains(ReservedNetworks, name) {
		return field.Forbidden(fld, fmt.Sprintf("network %q is the engine's own network and is refused unless the manager's --%s lists it",
			name, FlagAllowedNetworks))
	}
	if unmanaged && p.AllowedNetworks != nil {
		return field.Forbidden(fld, fmt.Sprintf("Unmanaged network %q is not allowed (%s): the manager's --%s decides",
			name, listOrNone(p.AllowedNetworks), FlagAllowedNetworks))
	}
	return nil
}

// Image decides whether ref may run or be preloaded. It also refuses what is
// not an image reference the engine would accept.
func (p Policy) Image(fld *field.Path, ref string) *field.Error {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return field.Invalid(fld, ref, fmt.Sprintf("not an image reference: %v", err))
	}
	if p.ImagePrefixes == nil {
		return nil
	}
	full, familiar := named.String(), reference.FamiliarString(named)
	for _, prefix := range p.ImagePrefixes {
		if strings.HasPrefix(full, prefix) || strings.HasPrefix(familiar, prefix) {
			return nil
		}
	}
	return field.Forbidden(fld, fmt.Sprintf("image %q is not under any allowed prefix (%s): the manager's --%s decides",
		ref, listOrNone(p.ImagePrefixes), FlagAllowedImagePrefixes))
}

// MachineCount decides whether a cluster that has existing ContainerMachines
// may get one more.
func (p Policy) MachineCount(fld *field.Path, cluster string, existing int) *field.Error {
	if p.MaxMachinesPerCluster <= 0 || existing < p.MaxMachinesPerCluster {
		return nil
	}
	return field.Forbidden(fld, fmt.Sprintf("Cluster %s already has %d ContainerMachines, the most the manager's --%s=%d allows",
		cluster, existing, FlagMaxMachinesPerCluster, p.MaxMachinesPerCluster))
}

// under reports whether p is dir or lies below it, by whole path elements:
// /srv/data is under /srv but /srvx is not.
func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}
