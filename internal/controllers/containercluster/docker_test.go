//go:build engine

package containercluster_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/loadbalancer"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/test/capi"
	"github.com/capct/cluster-api-provider-container/internal/test/images"
)

// With the engine build tag the suite (main_test.go) runs CAPCT's
// controllers against a real Docker engine and a real API server, with
// Cluster API's Cluster and Machine controllers in the same process.
// Machines use a small busybox image, so bootstrap data runs for real but
// no kubelet starts; the node-image tests boot kubelets.
var (
	rt        *docker.Runtime
	nodeImage string
	lbImage   string
)

func init() {
	setupEngine = func(ctx context.Context) error {
		d, err := images.NewDocker(ctx)
		if err != nil {
			return err
		}
		rt, nodeImage, lbImage = d.Runtime, d.NodeImage, d.LBImage
		clusterCache, err := capi.SetupCore(ctx, env.Manager)
		if err != nil {
			return err
		}
		return capi.SetupProvider(ctx, env.Manager, rt, clusterCache, nil)
	}
	afterEngine = func() { dockertest.RemoveClusters(context.Background(), rt, testClusters) }
}

// testClusters are the clusters the tests made, for the final sweep.
var testClusters []string

// createCluster creates, in a new namespace, a ContainerCluster with the
// test load balancer image and the given network, changed by each mutate,
// and its Cluster.
func createCluster(ctx context.Context, g Gomega, namespacePrefix string, network infrav1.NetworkSpec, mutate ...func(*infrav1.ContainerCluster)) (*infrav1.ContainerCluster, *clusterv1.Cluster) {
	name := "capct-it-" + rand.String(5)
	testClusters = append(testClusters, name)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: namespacePrefix}}
	g.Expect(env.Client.Create(ctx, ns)).To(Succeed())
	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
		Spec: infrav1.ContainerClusterSpec{LoadBalancer: infrav1.LoadBalancerSpec{Image: lbImage}, Network: network}}
	for _, m := range mutate {
		m(cc)
	}
	g.Expect(env.Client.Create(ctx, cc)).To(Succeed())
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerCluster", Name: name}}}
	g.Expect(env.Client.Create(ctx, cluster)).To(Succeed())
	return cc, cluster
}

const bootstrapData = `#cloud-config
write_files:
- path: /etc/capct/greeting
  content: aGVsbG8gZnJvbSBjbG91ZC1jb25maWc=
  encoding: b64
  permissions: "0600"
runcmd:
- echo "{{ ds.meta_data.hostname }}" > /etc/capct/hostname
- [ sh, -c, "echo success > /run/cluster-api/bootstrap-success.complete" ]
`

// TestControlPlaneMachineOnDocker creates a cluster and a control-plane
// machine on the real engine: the machine's cloud-config runs inside its
// container, the machine becomes an HAProxy backend, and the load balancer
// answers on its published port. Deleting them leaves nothing behind.
func TestControlPlaneMachineOnDocker(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cc, cluster := createCluster(ctx, g, "docker-", infrav1.NetworkSpec{})
	name, ns := cluster.Name, cluster.Namespace

	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), cc)).To(Succeed())
		g.Expect(cc.Status.Initialization.Provisioned).To(Equal(ptr.To(true)), "LoadBalancerAvailable: %v", conditions.Get(cc, infrav1.LoadBalancerAvailableCondition))
		g.Expect(cc.Status.LoadBalancer.HostPort).NotTo(BeZero())
	}, 60*time.Second, 200*time.Millisecond).Should(Succeed())
	owner := naming.ClusterOwner(cluster, cc)
	g.Expect(owner.ClusterID).To(Equal(string(cluster.UID)), "the cluster ID is recorded from the Cluster's UID")

	labels := map[string]string{clusterv1.ClusterNameLabel: name, clusterv1.MachineControlPlaneLabel: ""}
	g.Expect(env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cp-0-bootstrap", Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
		Data:       map[string][]byte{"value": []byte(bootstrapData), "format": []byte("cloud-config")},
		Type:       clusterv1.ClusterSecretType,
	})).To(Succeed())
	cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cp-0", Labels: labels},
		Spec: infrav1.ContainerMachineSpec{Image: nodeImage}}
	g.Expect(env.Client.Create(ctx, cm)).To(Succeed())
	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cp-0", Labels: labels,
			Annotations: map[string]string{clusterv1.ExcludeNodeDrainingAnnotation: "", clusterv1.ExcludeWaitForNodeVolumeDetachAnnotation: ""}},
		Spec: clusterv1.MachineSpec{
			ClusterName: name, Version: "v1.35.4",
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("cp-0-bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerMachine", Name: "cp-0"},
		},
	}
	g.Expect(env.Client.Create(ctx, machine)).To(Succeed())

	containerName := naming.ContainerName(ns, name, "cp-0")
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
		g.Expect(cm.Status.Initialization.Provisioned).To(Equal(ptr.To(true)), "Bootstrapped: %v", conditions.Get(cm, infrav1.BootstrappedCondition))
		g.Expect(cm.Spec.ProviderID).To(Equal("container:///" + containerName))
	}, 90*time.Second, 200*time.Millisecond).Should(Succeed())

	greeting, err := rt.ReadFile(ctx, containerName, owner.ForMachine("cp-0"), "/etc/capct/greeting")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(greeting)).To(Equal("hello from cloud-config"))
	hostname, err := rt.ReadFile(ctx, containerName, owner.ForMachine("cp-0"), "/etc/capct/hostname")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(string(hostname))).To(Equal(containerName))
	mode, err := dockertest.FileMode(ctx, rt, containerName, "/etc/capct/greeting")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fmt.Sprintf("%#o", mode)).To(Equal("0600"), "the mode of write_files' permissions")

	// The machine is an HAProxy backend, and HAProxy answers on the port
	// published on the host's loopback.
	lbName := naming.LoadBalancerName(ns, name)
	g.Eventually(func(g Gomega) {
		cfg, err := rt.ReadFile(ctx, lbName, owner.ForMachine(naming.LoadBalancerMachine(name)), loadbalancer.ConfigPath)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(cfg)).To(MatchRegexp(`server cp-0 [0-9.]+:6443 weight 100`))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	lb, err := rt.Inspect(ctx, lbName)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lb.State).To(Equal(container.StateRunning), "HAProxy must survive the reload")
	// HAProxy keeps running its old configuration when it cannot load a new
	// one, so ask the running process, through its stats page, whether it
	// knows the backend.
	g.Eventually(func(g Gomega) {
		resp, err := http.Get(fmt.Sprintf("http://%s/stats;csv", net.JoinHostPort(lb.IPv4.String(), "8404")))
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(body)).To(ContainSubstring("kube-apiservers,cp-0,"), "HAProxy did not load the configuration with the machine")
	}, 30*time.Second, 500*time.Millisecond).Should(Succeed())
	addr := fmt.Sprintf("127.0.0.1:%d", cc.Status.LoadBalancer.HostPort)
	g.Eventually(func() error {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
		}
		return err
	}, 10*time.Second, 200*time.Millisecond).Should(Succeed(), "the load balancer does not answer on %s", addr)

	// Deletion removes the machine's container, then the load balancer and
	// the network.
	g.Expect(env.Client.Delete(ctx, machine)).To(Succeed())
	g.Eventually(func(g Gomega) {
		_, err := rt.Inspect(ctx, containerName)
		g.Expect(container.IsNotFound(err)).To(BeTrue(), "container still there: %v", err)
	}, 60*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(env.Client.Delete(ctx, cluster)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(cc), &infrav1.ContainerCluster{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
		left, err := container.ListOwned(ctx, rt, owner, nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(left).To(BeEmpty())
	}, 60*time.Second, 200*time.Millisecond).Should(Succeed())
}

// TestOrphansAreRemovedAndNothingElse leaves a container of the cluster
// whose ContainerMachine does not exist, and a same-labelled container of
// another cluster ID, and expects only the first to be removed.
func TestOrphansAreRemovedAndNothingElse(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cc, cluster := createCluster(ctx, g, "orphans-", infrav1.NetworkSpec{})
	name := cluster.Name
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), cc)).To(Succeed())
		g.Expect(cc.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
	}, 60*time.Second, 200*time.Millisecond).Should(Succeed())
	owner := naming.ClusterOwner(cluster, cc)

	// The orphan is only created: the sweep (its grace period is 1 ns here)
	// may remove it at once, so starting it could race the behaviour under
	// test. The stranger runs, as a live container of another cluster would.
	create := func(machine string, owner container.Owner, run bool) (string, container.Owner) {
		owner = owner.ForMachine(machine)
		spec := container.MachineSpec{Name: name + "-" + machine, Image: nodeImage, Network: naming.NetworkName(cluster, cc),
			Labels: owner.Labels(), Role: container.RoleWorker, Privileged: ptr.To(false), Cmd: dockertest.LoopCmd}
		_, err := rt.CreateMachine(ctx, spec)
		g.Expect(err).NotTo(HaveOccurred())
		if run {
			g.Expect(rt.Start(ctx, spec.Name, owner)).To(Succeed())
		}
		return spec.Name, owner
	}
	orphan, _ := create("ghost", owner, false)
	stranger := owner
	stranger.ClusterID = "another-cluster-id"
	foreign, foreignOwner := create("stranger", stranger, true)
	t.Cleanup(func() { _ = rt.Delete(context.Background(), foreign, foreignOwner) })

	// Any change to the ContainerCluster brings a reconcile, and with it
	// the orphan sweep.
	wake(ctx, g, cc, "sweep")
	g.Eventually(func() bool {
		_, err := rt.Inspect(ctx, orphan)
		return container.IsNotFound(err)
	}, 30*time.Second, 200*time.Millisecond).Should(BeTrue(), "the orphan was not removed")
	_, err := rt.Inspect(ctx, foreign)
	g.Expect(err).NotTo(HaveOccurred(), "a container of another cluster was touched")

	// The stranger sits on this cluster's network; while it is attached the
	// network cannot go, and CAPCT never deletes what is not its own.
	g.Expect(rt.Delete(ctx, foreign, foreignOwner)).To(Succeed())
	g.Expect(env.Client.Delete(ctx, cluster)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), &infrav1.ContainerCluster{}))
	}, 60*time.Second, 200*time.Millisecond).Should(BeTrue())
}

// TestUnmanagedNetworkIsUsedAndKept points a cluster at a network it does
// not own, as the quickstart does with the management cluster's: the
// cluster waits with a clear message while the network is missing, attaches
// its load balancer once it exists, and leaves it in place on deletion.
func TestUnmanagedNetworkIsUsedAndKept(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	shared := "capct-it-shared-" + rand.String(5)
	cc, cluster := createCluster(ctx, g, "unmanaged-", infrav1.NetworkSpec{Name: shared, Mode: infrav1.NetworkUnmanaged})
	name := cluster.Name

	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), cc)).To(Succeed())
		c := conditions.Get(cc, infrav1.LoadBalancerAvailableCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Message).To(ContainSubstring(fmt.Sprintf("the Unmanaged network %q does not exist", shared)))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	// Someone else's network: labels that are not this cluster's.
	someoneElse := container.Owner{Namespace: "elsewhere", Cluster: shared, ClusterID: "someone-else"}
	_, err := rt.EnsureNetwork(ctx, container.NetworkSpec{Name: shared, Owner: someoneElse})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = rt.DeleteNetwork(context.Background(), shared, someoneElse) })

	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), cc)).To(Succeed())
		g.Expect(cc.Status.Initialization.Provisioned).To(Equal(ptr.To(true)), "LoadBalancerAvailable: %v", conditions.Get(cc, infrav1.LoadBalancerAvailableCondition))
	}, 90*time.Second, 200*time.Millisecond).Should(Succeed())
	lb, err := rt.Inspect(ctx, naming.LoadBalancerName(cluster.Namespace, name))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lb.Network).To(Equal(shared))
	g.Expect(cc.Spec.ControlPlaneEndpoint.Host).To(Equal(lb.IPv4.String()))

	g.Expect(env.Client.Delete(ctx, cluster)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(cc), &infrav1.ContainerCluster{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
		left, err := container.ListOwned(ctx, rt, naming.ClusterOwner(cluster, cc), nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(left).To(BeEmpty())
	}, 60*time.Second, 200*time.Millisecond).Should(Succeed())
	_, err = rt.InspectNetwork(ctx, shared)
	g.Expect(err).NotTo(HaveOccurred(), "the Unmanaged network was deleted with the cluster")
}

// TestAnIPv6ClusterIsReachedOverIPv4 makes a cluster of family IPv6 on a
// Managed network: its load balancer gets both families (a bridge network
// always has IPv4), and the control-plane endpoint is the IPv4 address,
// which a management cluster whose pods are IPv4 only reaches; the
// frontend serves IPv6 too.
func TestAnIPv6ClusterIsReachedOverIPv4(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cc, cluster := createCluster(ctx, g, "ipv6-", infrav1.NetworkSpec{IPFamily: infrav1.IPv6Family})
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), cc)).To(Succeed())
		g.Expect(cc.Status.Initialization.Provisioned).To(Equal(ptr.To(true)), "LoadBalancerAvailable: %v", conditions.Get(cc, infrav1.LoadBalancerAvailableCondition))
	}, 90*time.Second, 200*time.Millisecond).Should(Succeed())
	lb, err := rt.Inspect(ctx, naming.LoadBalancerName(cluster.Namespace, cluster.Name))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lb.IPv6.IsValid()).To(BeTrue(), "the load balancer of an IPv6 cluster has no IPv6 address")
	g.Expect(lb.IPv4.IsValid()).To(BeTrue(), "the load balancer has no IPv4 address")
	g.Expect(cc.Spec.ControlPlaneEndpoint.Host).To(Equal(lb.IPv4.String()))
	g.Expect(env.Client.Delete(ctx, cluster)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(cc), &infrav1.ContainerCluster{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
	}, 60*time.Second, 200*time.Millisecond).Should(Succeed())
}

// wake changes an annotation of cc, which brings a reconcile, with a merge
// patch: a Get and Update would conflict with the controller's own status
// writes now and then, and fail the test.
func wake(ctx context.Context, g Gomega, cc *infrav1.ContainerCluster, value string) {
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"test":"`+value+`"}}}`))
	g.Expect(env.Client.Patch(ctx, cc, patch)).To(Succeed())
}
