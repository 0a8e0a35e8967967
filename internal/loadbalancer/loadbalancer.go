package loadbalancer

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

const (
	// DefaultImage is the HAProxy image users of container providers
	// already have. make lb-image builds capct/haproxy for machines with no
	// registry.
	DefaultImage = "kindest/haproxy:v20230606-42a2262b"
	// APIServerPort is the port of the API servers and of the frontend.
	APIServerPort = 6443
	// maxWeight is HAProxy's weight for a healthy member.
	maxWeight = 100
)

// Spec says where and how to run a cluster's load balancer.
type Spec struct {
	Cluster          *clusterv1.Cluster
	ContainerCluster *infrav1.ContainerCluster
	Network          string
	IPFamily         container.IPFamily
	Image            string
}

// owner is the owner of a cluster's load-balancer container.
func owner(cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) container.Owner {
	return naming.ClusterOwner(cluster, cc).ForMachine(naming.LoadBalancerMachine(cluster.Name))
}

// LoadBalancer manages clusters' HAProxy containers.
type LoadBalancer struct {
	Client  client.Client
	Runtime container.Runtime
}

// Ensure creates and starts the load balancer container if needed and
// returns it as the runtime reports it.
func (lb *LoadBalancer) Ensure(ctx context.Context, spec Spec) (*container.Machine, error) {
	name := naming.LoadBalancerName(spec.Cluster.Namespace, spec.Cluster.Name)
	owner := owner(spec.Cluster, spec.ContainerCluster)
	image := spec.Image
	if image == "" {
		image = DefaultImage
	}
	privileged := false
	if _, err := lb.Runtime.CreateMachine(ctx, container.MachineSpec{
		Name:         name,
		Image:        image,
		Network:      spec.Network,
		Labels:       owner.Labels(),
		Role:         container.RoleLoadBalancer,
		Privileged:   &privileged,
		IPFamily:     spec.IPFamily,
		PortMappings: []container.PortMapping{{ContainerPort: APIServerPort, HostIP: "127.0.0.1"}},
	}); err != nil {
		return nil, fmt.Errorf("failed to create load balancer container %s: %w", name, err)
	}
	m, err := lb.Runtime.Inspect(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("failed to inspect load balancer container %s: %w", name, err)
	}
	if m.State != container.StateRunning {
		if err := lb.Runtime.Start(ctx, name, owner); err != nil {
			return nil, fmt.Errorf("failed to start load balancer container %s: %w", name, err)
		}
		if m, err = lb.Runtime.Inspect(ctx, name); err != nil {
			return nil, fmt.Errorf("failed to inspect load balancer container %s: %w", name, err)
		}
	}
	return m, nil
}

// Delete removes the cluster's load-balancer container; a missing one is
// fine, and one of another owner is refused by the runtime.
func (lb *LoadBalancer) Delete(ctx context.Context, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) error {
	name := naming.LoadBalancerName(cluster.Namespace, cluster.Name)
	if err := lb.Runtime.Delete(ctx, name, owner(cluster, cc)); err != nil && !container.IsNotFound(err) {
		return fmt.Errorf("failed to delete load balancer container %s: %w", name, err)
	}
	return nil
}

// Sync renders the configuration for the cluster's control-plane machines
// and, only when it differs from what the container has, writes it and
// makes HAProxy reload it. It reports whether it reloaded.
func (lb *LoadBalancer) Sync(ctx context.Context, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) (bool, error) {
	name := naming.LoadBalancerName(cluster.Namespace, cluster.Name)
	backends, err := lb.backends(ctx, cluster)
	if err != nil {
		return false, err
	}
	custom, err := lb.customTemplate(ctx, cc)
	if err != nil {
		return false, err
	}
	want, err := Render(custom, Config{
		FrontendPort: APIServerPort,
		BackendPort:  APIServerPort,
		// The same derivation as the network's, so that a dual-stack
		// cluster that leaves ipFamily empty still gets an IPv6 frontend.
		IPv6:     naming.IPFamily(cluster, cc).HasIPv6(),
		Backends: backends,
	})
	if err != nil {
		return false, err
	}
	have, err := lb.Runtime.ReadFile(ctx, name, ConfigPath)
	if err != nil && !container.IsNotFound(err) {
		return false, fmt.Errorf("failed to read the configuration of load balancer %s: %w", name, err)
	}
	if bytes.Equal(have, want) {
		return false, nil
	}
	if err := lb.Runtime.WriteFile(ctx, name, owner(cluster, cc), ConfigPath, want, 0o644); err != nil {
		return false, fmt.Errorf("failed to write the configuration of load balancer %s: %w", name, err)
	}
	if err := lb.Runtime.Signal(ctx, name, owner(cluster, cc), "SIGHUP"); err != nil {
		return false, fmt.Errorf("failed to reload load balancer %s: %w", name, err)
	}
	return true, nil
}

// backends are the cluster's control-plane machines that have an address,
// sorted by name so that the rendering is stable.
func (lb *LoadBalancer) backends(ctx context.Context, cluster *clusterv1.Cluster) ([]Backend, error) {
	machines := &infrav1.ContainerMachineList{}
	if err := lb.Client.List(ctx, machines, client.InNamespace(cluster.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: cluster.Name}, client.HasLabels{clusterv1.MachineControlPlaneLabel}); err != nil {
		return nil, fmt.Errorf("failed to list the control-plane ContainerMachines of Cluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	var out []Backend
	for i := range machines.Items {
		m := &machines.Items[i]
		addr := internalIP(m.Status.Addresses)
		if addr == "" {
			continue
		}
		weight := maxWeight
		if !m.DeletionTimestamp.IsZero() {
			weight = 0
		}
		out = append(out, Backend{Name: m.Name, Address: addr, Weight: weight})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// internalIP picks the machine's IPv4 address, or its IPv6 one.
func internalIP(addrs []clusterv1.MachineAddress) string {
	var v6 string
	for _, a := range addrs {
		if a.Type != clusterv1.MachineInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
			return a.Address
		}
		v6 = a.Address
	}
	return v6
}

func (lb *LoadBalancer) customTemplate(ctx context.Context, cc *infrav1.ContainerCluster) (string, error) {
	ref := cc.Spec.LoadBalancer.CustomHAProxyConfigTemplateRef
	if ref == nil {
		return "", nil
	}
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: cc.Namespace, Name: ref.Name}
	if err := lb.Client.Get(ctx, key, cm); err != nil {
		return "", fmt.Errorf("failed to get the custom HAProxy template ConfigMap %s: %w", key, err)
	}
	value, ok := cm.Data["value"]
	if !ok {
		return "", fmt.Errorf("custom HAProxy template ConfigMap %s has no key \"value\"", key)
	}
	return value, nil
}
