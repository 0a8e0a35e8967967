package loadbalancer

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"sort"

	"k8s.io/utils/clock"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/nodeaddr"
)

const (
	// DefaultImage is the load balancer's image when the ContainerCluster
	// names none (naming.DefaultLoadBalancerImage).
	DefaultImage = naming.DefaultLoadBalancerImage
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
	// ListenAddress is the host address the API server port is published
	// on (spec.loadBalancer.listenAddress); empty means
	// container.DefaultHostIP. A load balancer that exists keeps the
	// address it was made with: the field is immutable.
	ListenAddress string
}

// owner is the owner of a cluster's load-balancer container.
func owner(cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) container.Owner {
	return naming.ClusterOwner(cluster, cc).ForMachine(naming.LoadBalancerMachine(cluster.Name))
}

// LoadBalancer manages clusters' HAProxy containers.
type LoadBalancer struct {
	Client client.Client
	// Engines holds each cluster's load balancer on its first engine,
	// beside its network.
	Engines engines.Set
	// Stats reads HAProxy's statistics to confirm a reload; nil means
	// HTTPStats.
	Stats StatsFunc
	// Clock times the waits for a reload; nil means the real clock.
	Clock clock.Clock
}

// ImageOrDefault is the image a load balancer runs: the one its
// ContainerCluster names, or DefaultImage.
func ImageOrDefault(image string) string {
	if image == "" {
		return DefaultImage
	}
	return image
}

// Ensure creates and starts the load balancer container if needed and
// returns it as the runtime reports it.
//
// Its address on the cluster network is static (nodeaddr), and so is its
// published API port: the container is created with host port 0, and once
// the engine has picked one it is replaced by the same container with that
// port fixed. The load balancer holds no state, and its configuration
// records the port, so the port survives engine restarts and clusterctl
// move (containers stay where they are) without being read back from any
// object's status. A load balancer made before ports were fixed keeps its
// port and address the same way.
//
// The restart policy is always, not kind's on-failure:1: the load balancer
// must come back when the engine restarts, which on-failure does not do,
// and after any crash, however many. Not unless-stopped, as the nodes: CAPCT
// reloads HAProxy with a SIGHUP through the engine, which Docker 20.10
// counts as a manual stop, so an unless-stopped load balancer that was ever
// reloaded stayed down when the engine started again (seen in
// make test-restart until CAPCT started it itself, 43 s later).
func (lb *LoadBalancer) Ensure(ctx context.Context, spec Spec) (*container.Machine, error) {
	name := naming.LoadBalancerName(spec.Cluster.Namespace, spec.Cluster.Name)
	image := ImageOrDefault(spec.Image)
	privileged := false
	mspec := container.MachineSpec{
		Name:          name,
		Image:         image,
		Network:       spec.Network,
		Labels:        owner(spec.Cluster, spec.ContainerCluster).Labels(),
		Role:          container.RoleLoadBalancer,
		Privileged:    &privileged,
		IPFamily:      spec.IPFamily,
		RestartPolicy: container.RestartAlways,
		PortMappings:  []container.PortMapping{{ContainerPort: APIServerPort, HostIP: listenAddress(spec.ListenAddress)}},
	}
	rt, err := lb.runtime(spec.ContainerCluster)
	if err != nil {
		return nil, err
	}
	// On an overlay the machines of the other engines hold addresses too.
	// The load balancer is launched before any machine, and its
	// replacement keeps its addresses, so what machines recorded is not
	// needed here.
	spans, err := engines.Spanning(lb.Engines, spec.ContainerCluster)
	if err != nil {
		return nil, err
	}
	launcher := &nodeaddr.Launcher{Runtime: rt, Spans: spans}
	launched, err := launcher.Launch(ctx, mspec)
	if err != nil {
		return nil, fmt.Errorf("failed to launch load balancer container %s: %w", name, err)
	}
	m := launched.Machine
	port := m.HostPort(APIServerPort)
	if configuredHostPort(m) != 0 || port == 0 {
		return m, nil
	}
	mspec.PortMappings[0].HostPort = port
	mspec.StaticIPv4, mspec.StaticIPv6 = m.StaticIPv4, m.StaticIPv6
	if !m.StaticIPv4.IsValid() && !m.StaticIPv6.IsValid() && !launched.StaticFallback {
		// Made before addresses were static: keep the address it has.
		mspec.StaticIPv4, mspec.StaticIPv6 = m.IPv4, m.IPv6
	}
	if launched, err = launcher.Replace(ctx, mspec); err != nil {
		return nil, fmt.Errorf("failed to fix host port %d of load balancer container %s: %w", port, name, err)
	}
	return launched.Machine, nil
}

// listenAddress is the host address a load balancer publishes its port on.
func listenAddress(addr string) string {
	if addr == "" {
		return container.DefaultHostIP
	}
	return addr
}

// configuredHostPort is the host port the container was created with for
// the API server port; 0 means the engine picks one at every start.
func configuredHostPort(m *container.Machine) int {
	for _, p := range m.PortMappings {
		if p.ContainerPort == APIServerPort && (p.Protocol == "" || p.Protocol == "tcp") {
			return p.HostPort
		}
	}
	return 0
}

// Delete removes the cluster's load-balancer container; a missing one is
// fine, and one of another owner is refused by the runtime.
func (lb *LoadBalancer) Delete(ctx context.Context, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) error {
	rt, err := lb.runtime(cc)
	if err != nil {
		return err
	}
	name := naming.LoadBalancerName(cluster.Namespace, cluster.Name)
	if err := rt.Delete(ctx, name, owner(cluster, cc)); err != nil && !container.IsNotFound(err) {
		return fmt.Errorf("failed to delete load balancer container %s: %w", name, err)
	}
	return nil
}

// Sync renders the configuration for the cluster's control-plane machines
// and, only when it differs from what the container has, checks it with
// HAProxy, writes it and makes HAProxy reload it. It reports whether it
// reloaded. A configuration HAProxy refuses is never written: the previous
// one keeps serving, and the error is a *ReloadError.
func (lb *LoadBalancer) Sync(ctx context.Context, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) (bool, error) {
	rt, err := lb.runtime(cc)
	if err != nil {
		return false, err
	}
	reloaded, _, err := lb.sync(ctx, rt, cluster, cc)
	return reloaded, err
}

// SyncAndVerify is Sync, then it confirms that HAProxy runs the wanted
// configuration, reloading it again once when it does not (a reload the
// previous pass signalled may have failed). When HAProxy still runs
// another, the error is a *ReloadError and the previous configuration
// keeps serving.
func (lb *LoadBalancer) SyncAndVerify(ctx context.Context, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster, m *container.Machine) (bool, error) {
	rt, err := lb.runtime(cc)
	if err != nil {
		return false, err
	}
	reloaded, marker, err := lb.sync(ctx, rt, cluster, cc)
	if err != nil {
		return reloaded, err
	}
	loaded, err := lb.runs(ctx, m, marker, reloaded)
	if (err != nil || !loaded) && !reloaded {
		if err := rt.Signal(ctx, m.Name, owner(cluster, cc), "SIGHUP"); err != nil {
			return false, fmt.Errorf("failed to reload load balancer %s: %w", m.Name, err)
		}
		reloaded = true
		loaded, err = lb.runs(ctx, m, marker, true)
	}
	if err != nil {
		return reloaded, &ReloadError{Reason: infrav1.LoadBalancerReloadFailedReason,
			Err: fmt.Errorf("failed to ask load balancer %s which configuration it runs: %w", m.Name, err)}
	}
	if !loaded {
		return reloaded, &ReloadError{Reason: infrav1.LoadBalancerReloadFailedReason,
			Err: fmt.Errorf("load balancer %s did not load its new configuration %s after a reload; the previous one keeps serving", m.Name, marker)}
	}
	return reloaded, nil
}

// sync does Sync's work through rt and returns the marker of the wanted
// configuration.
func (lb *LoadBalancer) sync(ctx context.Context, rt container.Runtime, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) (bool, string, error) {
	name := naming.LoadBalancerName(cluster.Namespace, cluster.Name)
	backends, err := lb.backends(ctx, cluster)
	if err != nil {
		return false, "", err
	}
	custom, err := lb.customTemplate(ctx, cc)
	if err != nil {
		return false, "", err
	}
	want, marker, err := Configuration(custom, Config{
		FrontendPort: APIServerPort,
		BackendPort:  APIServerPort,
		// The same derivation as the network's, so that a dual-stack
		// cluster that leaves ipFamily empty still gets an IPv6 frontend.
		IPv6:     naming.IPFamily(cluster, cc).HasIPv6(),
		Backends: backends,
	})
	if err != nil {
		return false, "", &ReloadError{Reason: infrav1.LoadBalancerConfigInvalidReason, Err: err}
	}
	have, err := rt.ReadFile(ctx, name, owner(cluster, cc), ConfigPath)
	if err != nil && !container.IsNotFound(err) {
		return false, "", fmt.Errorf("failed to read the configuration of load balancer %s: %w", name, err)
	}
	if bytes.Equal(have, want) {
		return false, marker, nil
	}
	if err := check(ctx, rt, name, owner(cluster, cc), want); err != nil {
		return false, "", err
	}
	if err := rt.WriteFile(ctx, name, owner(cluster, cc), ConfigPath, want, 0o644); err != nil {
		return false, "", fmt.Errorf("failed to write the configuration of load balancer %s: %w", name, err)
	}
	if err := rt.Signal(ctx, name, owner(cluster, cc), "SIGHUP"); err != nil {
		return false, "", fmt.Errorf("failed to reload load balancer %s: %w", name, err)
	}
	return true, marker, nil
}

// runtime is the engine of cc's load balancer: the cluster's first, which
// holds its network.
func (lb *LoadBalancer) runtime(cc *infrav1.ContainerCluster) (container.Runtime, error) {
	rt, err := engines.FirstEngine(lb.Engines, cc)
	if err != nil {
		return nil, fmt.Errorf("failed to reach the engine of the load balancer of ContainerCluster %s: %w", klog.KObj(cc), err)
	}
	return rt, nil
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
