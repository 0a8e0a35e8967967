package containermachine_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/podnetwork"
)

// holdFinalizer keeps a Node in the API server after its deletion, as a
// kubelet or a slow garbage collector can.
const holdFinalizer = "test.capct.io/hold"

// TestNodeIPAMWithClusterAPI runs node IPAM inside the controllers, on a
// real API server, with Cluster API's Machine controller: machines get
// distinct pod CIDRs recorded on their ContainerMachines and set on their
// Nodes (which enforce podCIDR immutability and field ownership), the
// cluster controller writes each node's CNI configuration and routes the
// others to it, and a CIDR is handed out again only once both the machine's
// container and its Node are gone.
func TestNodeIPAMWithClusterAPI(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	_, cluster := newCluster(t, g, ctx, "ipam")
	// Room for two nodes' CIDRs only.
	// A merge patch without the resourceVersion: Cluster API's own
	// controller writes the Cluster meanwhile.
	before := cluster.DeepCopy()
	cluster.Spec.ClusterNetwork.Pods.CIDRBlocks = []string{"10.250.0.0/23"}
	g.Expect(env.Client.Patch(ctx, cluster, client.MergeFrom(before))).To(Succeed())

	register := func(name string) *corev1.Node {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: naming.ContainerName(cluster.Namespace, cluster.Name, name), Finalizers: []string{holdFinalizer}}}
		g.Expect(env.Client.Create(ctx, node)).To(Succeed())
		t.Cleanup(func() { release(ctx, node) })
		reportNode(g, ctx, node.Name, corev1.ConditionTrue)
		return node
	}
	cidrOf := func(g Gomega, cm *infrav1.ContainerMachine, node *corev1.Node) string {
		get(g, ctx, cm)
		g.Expect(conditions.IsTrue(cm, infrav1.PodCIDRAllocatedCondition)).To(BeTrue(), "PodCIDRAllocated: %v; conditions %+v", conditions.Get(cm, infrav1.PodCIDRAllocatedCondition), cm.Status.Conditions)
		record := cm.Annotations[infrav1.PodCIDRsAnnotation]
		g.Expect(cm.Status.PodCIDRs).To(Equal([]string{record}))
		get(g, ctx, node)
		g.Expect(node.Spec.PodCIDRs).To(Equal([]string{record}))
		return record
	}

	// A control plane, for the worker to register with, and a worker.
	var cms []*infrav1.ContainerMachine
	var nodes []*corev1.Node
	for _, name := range []string{"cp-0", "w-0"} {
		_, cm := newMachineOfRole(g, ctx, cluster, name, name == "cp-0")
		g.Eventually(func(g Gomega) {
			get(g, ctx, cm)
			g.Expect(conditions.IsTrue(cm, infrav1.BootstrappedCondition)).To(BeTrue())
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
		cms, nodes = append(cms, cm), append(nodes, register(name))
	}
	cidrs := make([]string, 2)
	g.Eventually(func(g Gomega) {
		cidrs[0], cidrs[1] = cidrOf(g, cms[0], nodes[0]), cidrOf(g, cms[1], nodes[1])
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Expect(cidrs).To(ConsistOf("10.250.0.0/24", "10.250.1.0/24"))

	// The pod network: each node has its CNI configuration, and cp-0 was
	// told to route w-0's CIDR through w-0's address.
	cp0, w0 := naming.ContainerName(cluster.Namespace, cluster.Name, "cp-0"), naming.ContainerName(cluster.Namespace, cluster.Name, "w-0")
	m0, err := runtime.Inspect(ctx, w0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		for i, name := range []string{cp0, w0} {
			conf, err := runtime.ReadFile(ctx, name, owned(g, ctx, name), podnetwork.CNIConfigPath)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(conf)).To(ContainSubstring(`"subnet": "` + cidrs[i] + `"`))
		}
		g.Expect(routeCommands(cp0, "replace")).To(ContainElement(cidrs[1] + " via " + m0.IPv4.String()))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())

	// w-0 goes, but its Node stays: w-1 waits for a CIDR, and cp-0 stops
	// routing to w-0's.
	machine0 := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: "w-0"}}
	g.Expect(env.Client.Delete(ctx, machine0)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(cms[1]), &infrav1.ContainerMachine{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "ContainerMachine w-0 still there: %v", err)
		_, err = runtime.Inspect(ctx, w0)
		g.Expect(container.IsNotFound(err)).To(BeTrue())
		g.Expect(routeCommands(cp0, "del")).To(ContainElement(cidrs[1] + " via " + m0.IPv4.String()))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	_, cm2 := newMachineOfRole(g, ctx, cluster, "w-1", false)
	g.Eventually(func(g Gomega) {
		get(g, ctx, cm2)
		g.Expect(conditions.IsTrue(cm2, infrav1.BootstrappedCondition)).To(BeTrue())
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	node2 := register("w-1")
	g.Eventually(func(g Gomega) {
		get(g, ctx, cm2)
		g.Expect(conditions.GetReason(cm2, infrav1.PodCIDRAllocatedCondition)).To(Equal(infrav1.ExhaustedReason))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Consistently(func(g Gomega) {
		get(g, ctx, cm2)
		g.Expect(cm2.Annotations).NotTo(HaveKey(infrav1.PodCIDRsAnnotation))
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())

	// The Node goes too: its CIDR is free, and w-1 gets it.
	release(ctx, nodes[1])
	g.Eventually(func(g Gomega) {
		g.Expect(cidrOf(g, cm2, node2)).To(Equal(cidrs[1]))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
}

// TestANodesCNIConfigIsWrittenOnceItsCIDRsAreAssigned holds the cluster's
// pod network sync: the kubelet reports a Node Ready only once its CNI
// configuration is there, and the ContainerMachine controller writes it
// right after it assigns the Node its pod CIDRs, without waiting for a
// sync busy with the routes of every other node of a scale-out.
func TestANodesCNIConfigIsWrittenOnceItsCIDRsAreAssigned(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	_, cluster := newCluster(t, g, ctx, "cni")
	routes.hold(cluster)
	before := cluster.DeepCopy()
	cluster.Spec.ClusterNetwork.Pods.CIDRBlocks = []string{"10.250.0.0/16"}
	g.Expect(env.Client.Patch(ctx, cluster, client.MergeFrom(before))).To(Succeed())
	_, cm := newMachine(g, ctx, cluster, "cp-0")
	g.Eventually(func(g Gomega) {
		get(g, ctx, cm)
		g.Expect(conditions.IsTrue(cm, infrav1.BootstrappedCondition)).To(BeTrue())
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	name := naming.ContainerName(cluster.Namespace, cluster.Name, "cp-0")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	g.Expect(env.Client.Create(ctx, node)).To(Succeed())
	t.Cleanup(func() { release(ctx, node) })
	reportNode(g, ctx, name, corev1.ConditionFalse)

	g.Eventually(func(g Gomega) {
		get(g, ctx, cm)
		g.Expect(conditions.IsTrue(cm, infrav1.PodCIDRAllocatedCondition)).To(BeTrue(), "PodCIDRAllocated: %v", conditions.Get(cm, infrav1.PodCIDRAllocatedCondition))
		conf, err := runtime.ReadFile(ctx, name, owned(g, ctx, name), podnetwork.CNIConfigPath)
		g.Expect(err).NotTo(HaveOccurred(), "no CNI configuration in %s", name)
		g.Expect(string(conf)).To(ContainSubstring(`"subnet": "` + cm.Status.PodCIDRs[0] + `"`))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Expect(routes.count(cluster)).To(BeNumerically(">", 0), "the cluster's sync never ran, so it was not what the test held")
}

// release deletes a Node and lets it go.
func release(ctx context.Context, node *corev1.Node) {
	_ = env.Client.Delete(ctx, node)
	n := &corev1.Node{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(node), n); err != nil {
		return
	}
	n.Finalizers = slices.DeleteFunc(n.Finalizers, func(f string) bool { return f == holdFinalizer })
	_ = env.Client.Update(ctx, n)
}

// routeCommands returns the routes ("<dst> via <gateway>") that the pod
// network sync asked container name to apply with op (replace or del).
func routeCommands(name, op string) []string {
	var out []string
	for _, c := range runtime.ExecCalls() {
		if c.Container != name || len(c.Cmd) < 4 || c.Cmd[0] != "sh" {
			continue
		}
		args := c.Cmd[4:]
		for i := 0; i+3 < len(args); i += 4 {
			if args[i] == "-4" || args[i] == "-6" {
				if args[i+1] == op {
					out = append(out, strings.Join([]string{args[i+2], "via", args[i+3]}, " "))
				}
			}
		}
	}
	return out
}
