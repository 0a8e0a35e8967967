// Package naming derives the names and identities of what CAPCT makes on a
// container engine: container, load-balancer and network names, provider
// IDs, owners and a cluster's IP family and default node image. Everything
// here is a pure function of the API objects, so the controllers, the
// machine lifecycle, the load balancer and the pools derive the same answer
// without asking each other.
//
// Container and network names are global on an engine, while Cluster API
// names are only unique within a namespace. Every name therefore ends in a
// short hash of the cluster's namespace and name: two clusters called "demo"
// in two namespaces never share a container or network name. Names are valid
// hostnames (a container's name is its node's hostname): at most 63
// characters of [a-z0-9-], shortened with a hash of what was cut when they
// would be longer. docs/runtime.md has the scheme with examples.
package naming

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/netip"
	"strings"

	"github.com/blang/semver/v4"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
)

const (
	// MaxNameLength is the longest container or network name CAPCT derives:
	// a hostname label.
	MaxNameLength = 63
	// clusterHashLength is the length of the namespace/cluster hash that ends
	// every name.
	clusterHashLength = 5
	// cutHashLength is the length of the hash that replaces what is cut from
	// a name that would be too long.
	cutHashLength = 6
	// DefaultNodeImageRepository is where CAPCT's node images live; the tag
	// is the Kubernetes version (make node-image builds capct/node:v1.35.4).
	DefaultNodeImageRepository = "capct/node"
	// DefaultLoadBalancerImage is the load balancer's image when a
	// ContainerCluster names none: the one make lb-image builds (its tag is
	// Debian bookworm's HAProxy major.minor; test/nodeimage fails when the
	// build and this name part). A default CAPCT does not build would have to
	// be pulled, and CAPCT's hosts are offline.
	DefaultLoadBalancerImage = "capct/haproxy:2.6"
	// networkPrefix starts the default name of a cluster's network.
	networkPrefix = "capct-"
	// loadBalancerSuffix ends the readable part of a load balancer's name.
	loadBalancerSuffix = "-lb"
)

// lowerBase32 has no padding, so hashes are plain [a-z2-7].
var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

func hash(n int, parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "/")))
	return lowerBase32.EncodeToString(sum[:])[:n]
}

// ClusterHash is the short hash of a cluster's namespace and name that ends
// every name of the cluster.
func ClusterHash(namespace, cluster string) string {
	return hash(clusterHashLength, namespace, cluster)
}

// name joins a readable part and the cluster hash into a valid hostname;
// key is what the readable part was derived from (the machine's name). A
// readable part that is not already a valid label, or is too long, or that
// the caller says is ambiguous, is sanitized and shortened, and a
// hash of the original stands in for what changed, so two different inputs
// never derive the same name.
func name(kind, key, readable, namespace, cluster string, ambiguous bool) string {
	suffix := "-" + ClusterHash(namespace, cluster)
	clean := sanitize(readable)
	if !ambiguous && clean == readable && len(clean)+len(suffix) <= MaxNameLength {
		return clean + suffix
	}
	keep := MaxNameLength - len(suffix) - 1 - cutHashLength
	if len(clean) > keep {
		clean = strings.TrimRight(clean[:keep], "-")
	}
	if clean == "" {
		clean = "x"
	}
	return clean + "-" + hash(cutHashLength, kind, namespace, cluster, key) + suffix
}

// sanitize lowercases s and turns every character a hostname may not have
// into '-', trimming '-' at the ends.
func sanitize(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b), "-")
}

// ContainerName is the name (and hostname) of a machine's container: the
// machine's name, led by the cluster's name unless it already starts with
// it as Cluster API's generated names do, then the cluster hash. A machine
// whose name gained the cluster's in front also gets a hash of its own
// name, or "md-0" and "demo-md-0" of cluster "demo" would meet.
func ContainerName(namespace, cluster, machine string) string {
	if strings.HasPrefix(machine, cluster+"-") {
		return name("machine", machine, machine, namespace, cluster, false)
	}
	return name("machine", machine, cluster+"-"+machine, namespace, cluster, true)
}

// LoadBalancerName is the name of a cluster's load-balancer container. It
// always carries a hash of its own, so that a machine named "<cluster>-lb"
// does not take it.
func LoadBalancerName(namespace, cluster string) string {
	return name("load-balancer", "", cluster+loadBalancerSuffix, namespace, cluster, true)
}

// DefaultNetworkName is the name of a cluster's own network when its
// ContainerCluster does not name one.
func DefaultNetworkName(namespace, cluster string) string {
	return name("network", "", networkPrefix+cluster, namespace, cluster, false)
}

// NetworkName is the container network of a cluster: spec.network.name, or
// DefaultNetworkName.
func NetworkName(cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) string {
	if cc != nil && cc.Spec.Network.Name != "" {
		return cc.Spec.Network.Name
	}
	return DefaultNetworkName(cluster.Namespace, cluster.Name)
}

// ProviderID is the provider ID of the machine whose container is
// containerName.
func ProviderID(containerName string) string {
	return infrav1.ProviderIDPrefix + containerName
}

// ClusterOwner is the owner of a cluster's networks and the selector of all
// its containers. It is incomplete (see container.Owner.Valid), and so owns
// nothing, until the ContainerCluster has its spec.clusterID.
func ClusterOwner(cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) container.Owner {
	o := container.Owner{Namespace: cluster.Namespace, Cluster: cluster.Name}
	if cc != nil {
		o.ClusterID = cc.Spec.ClusterID
	}
	return o
}

// LoadBalancerMachine is the machine label of a cluster's load balancer.
func LoadBalancerMachine(cluster string) string { return cluster + loadBalancerSuffix }

// IPFamily is the IP family of a cluster's container network:
// spec.network.ipFamily, else the families of the Cluster's pod CIDRs, else
// IPv4.
func IPFamily(cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) container.IPFamily {
	family := infrav1.IPFamily("")
	if cc != nil {
		family = cc.Spec.Network.IPFamily
	}
	if family == "" && cluster != nil {
		var v4, v6 bool
		for _, cidr := range cluster.Spec.ClusterNetwork.Pods.CIDRBlocks {
			if p, err := netip.ParsePrefix(cidr); err == nil {
				v4 = v4 || p.Addr().Is4()
				v6 = v6 || !p.Addr().Is4()
			}
		}
		switch {
		case v4 && v6:
			family = infrav1.DualStackFamily
		case v6:
			family = infrav1.IPv6Family
		}
	}
	switch family {
	case infrav1.IPv6Family:
		return container.IPv6
	case infrav1.DualStackFamily:
		return container.DualStack
	}
	return container.IPv4
}

// DefaultNodeImage is CAPCT's node image for a Kubernetes version.
func DefaultNodeImage(version string) (string, error) {
	v, err := semver.ParseTolerant(version)
	if err != nil {
		return "", fmt.Errorf("failed to parse Kubernetes version %q: %w", version, err)
	}
	return fmt.Sprintf("%s:v%d.%d.%d", DefaultNodeImageRepository, v.Major, v.Minor, v.Patch), nil
}
