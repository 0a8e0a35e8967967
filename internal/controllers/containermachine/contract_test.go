package containermachine_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/lifecycle"
	"github.com/capct/cluster-api-provider-container/internal/loadbalancer"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

const bootstrapData = `#cloud-config
write_files:
- path: /run/cluster-api/bootstrap-success.complete
  content: success
`

// newCluster creates a namespace with a Cluster, its ContainerCluster and a
// kubeconfig Secret that points Cluster API at the test API server.
func newCluster(t *testing.T, g *WithT, ctx context.Context, name string) (*corev1.Namespace, *clusterv1.Cluster) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "contract-"}}
	g.Expect(env.Client.Create(ctx, ns)).To(Succeed())
	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name}}
	g.Expect(env.Client.Create(ctx, cc)).To(Succeed())
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
		Spec: clusterv1.ClusterSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerCluster", Name: name},
		},
	}
	g.Expect(env.Client.Create(ctx, cluster)).To(Succeed())
	g.Expect(env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name + "-kubeconfig", Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
		Data:       map[string][]byte{"value": env.KubeConfig()},
		Type:       clusterv1.ClusterSecretType,
	})).To(Succeed())
	return ns, cluster
}

// newMachine creates a control-plane Machine with bootstrap data and its
// ContainerMachine.
func newMachine(g *WithT, ctx context.Context, cluster *clusterv1.Cluster, name string) (*clusterv1.Machine, *infrav1.ContainerMachine) {
	return newMachineOfRole(g, ctx, cluster, name, true)
}

// newMachineOfRole creates a Machine with bootstrap data and its
// ContainerMachine, a control-plane one or a worker.
func newMachineOfRole(g *WithT, ctx context.Context, cluster *clusterv1.Cluster, name string, controlPlane bool) (*clusterv1.Machine, *infrav1.ContainerMachine) {
	ns := cluster.Namespace
	labels := map[string]string{clusterv1.ClusterNameLabel: cluster.Name}
	if controlPlane {
		labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	g.Expect(env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-bootstrap", Labels: map[string]string{clusterv1.ClusterNameLabel: cluster.Name}},
		Data:       map[string][]byte{"value": []byte(bootstrapData), "format": []byte("cloud-config")},
		Type:       clusterv1.ClusterSecretType,
	})).To(Succeed())
	cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: infrav1.ContainerMachineSpec{Image: "capct/node:v1.35.4"}}
	g.Expect(env.Client.Create(ctx, cm)).To(Succeed())
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels,
			// There is no control-plane provider here to drain nodes for.
			Annotations: map[string]string{clusterv1.ExcludeNodeDrainingAnnotation: "", clusterv1.ExcludeWaitForNodeVolumeDetachAnnotation: ""}},
		Spec: clusterv1.MachineSpec{
			ClusterName:       cluster.Name,
			Version:           "v1.35.4",
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(name + "-bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerMachine", Name: name},
		},
	}
	g.Expect(env.Client.Create(ctx, m)).To(Succeed())
	return m, cm
}

func get[T client.Object](g Gomega, ctx context.Context, obj T) T {
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	return obj
}

// TestMachineLifecycleWithClusterAPI drives a control-plane machine from
// creation to Ready and back to deletion, with Cluster API's Cluster and
// Machine controllers consuming what CAPCT reports.
func TestMachineLifecycleWithClusterAPI(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, cluster := newCluster(t, g, ctx, "c1")

	// The cluster's infrastructure: network, load balancer, endpoint.
	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "c1"}}
	g.Eventually(func(g Gomega) {
		get(g, ctx, cc)
		g.Expect(cc.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
		g.Expect(cc.Spec.ControlPlaneEndpoint.Host).NotTo(BeEmpty())
		g.Expect(cc.Spec.ControlPlaneEndpoint.Port).To(BeEquivalentTo(6443))
		g.Expect(conditions.IsTrue(cc, infrav1.LoadBalancerAvailableCondition)).To(BeTrue())
		get(g, ctx, cluster)
		g.Expect(cluster.Status.Initialization.InfrastructureProvisioned).To(Equal(ptr.To(true)))
		g.Expect(cluster.Spec.ControlPlaneEndpoint.Host).To(Equal(cc.Spec.ControlPlaneEndpoint.Host))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	lb, err := runtime.Inspect(ctx, naming.LoadBalancerName(ns.Name, "c1"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lb.Labels[container.LabelRole]).To(Equal(string(container.RoleLoadBalancer)))

	// The machine launches, bootstraps and reports itself provisioned.
	machine, cm := newMachine(g, ctx, cluster, "cp-0")
	g.Eventually(func(g Gomega) {
		get(g, ctx, cm)
		g.Expect(conditions.IsTrue(cm, infrav1.BootstrappedCondition)).To(BeTrue(), "Bootstrapped: %v", conditions.Get(cm, infrav1.BootstrappedCondition))
		g.Expect(cm.Spec.ProviderID).To(Equal("container:///" + naming.ContainerName(ns.Name, "c1", "cp-0")))
		g.Expect(cm.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
		get(g, ctx, machine)
		g.Expect(machine.Spec.ProviderID).To(Equal(cm.Spec.ProviderID))
		g.Expect(machine.Status.Initialization.InfrastructureProvisioned).To(Equal(ptr.To(true)))
		g.Expect(machine.Status.Addresses).To(ContainElement(HaveField("Type", clusterv1.MachineInternalIP)))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())

	// The control-plane machine is a load balancer backend, and the load
	// balancer was reloaded for it.
	g.Eventually(func(g Gomega) {
		lb := naming.LoadBalancerName(ns.Name, "c1")
		cfg, err := runtime.ReadFile(ctx, lb, owned(g, ctx, lb), loadbalancer.ConfigPath)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(cfg)).To(ContainSubstring("server cp-0 "))
		g.Expect(string(cfg)).To(ContainSubstring("weight 100"))
	}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
	reloads := len(runtime.Signals())

	// A kubelet registers a Node without a providerID, tainted until a
	// cloud provider initialises it; CAPCT sets both right.
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: naming.ContainerName(ns.Name, "c1", "cp-0")},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: lifecycle.UninitializedTaint, Effect: corev1.TaintEffectNoSchedule}}},
	}
	g.Expect(env.Client.Create(ctx, node)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(ctx, node) })
	reportNode(g, ctx, node.Name, corev1.ConditionTrue)

	g.Eventually(func(g Gomega) {
		get(g, ctx, node)
		g.Expect(node.Spec.ProviderID).To(Equal("container:///" + naming.ContainerName(ns.Name, "c1", "cp-0")))
		g.Expect(node.Spec.Taints).NotTo(ContainElement(HaveField("Key", lifecycle.UninitializedTaint)))
		get(g, ctx, cm)
		g.Expect(conditions.IsTrue(cm, infrav1.InitializedCondition)).To(BeTrue(), "Initialized: %v", conditions.Get(cm, infrav1.InitializedCondition))
		g.Expect(conditions.IsTrue(cm, infrav1.ReadyCondition)).To(BeTrue())
		g.Expect(cm.Status.Phase).To(Equal(infrav1.MachinePhaseRunning))
		get(g, ctx, machine)
		g.Expect(machine.Status.NodeRef.Name).To(Equal(naming.ContainerName(ns.Name, "c1", "cp-0")))
		g.Expect(conditions.IsTrue(machine, clusterv1.MachineInfrastructureReadyCondition)).To(BeTrue())
		get(g, ctx, cluster)
		g.Expect(conditions.IsTrue(cluster, clusterv1.ClusterControlPlaneInitializedCondition)).To(BeTrue())
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())

	// Steady state: reconciling again does not reload the load balancer.
	g.Consistently(func() int { return len(runtime.Signals()) }, 2*time.Second, 200*time.Millisecond).Should(Equal(reloads))

	// Deleting the Machine deletes the ContainerMachine and its container.
	g.Expect(env.Client.Delete(ctx, machine)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(cm), &infrav1.ContainerMachine{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "ContainerMachine still there: %v", err)
		_, err = runtime.Inspect(ctx, naming.ContainerName(ns.Name, "c1", "cp-0"))
		g.Expect(container.IsNotFound(err)).To(BeTrue())
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())

	// Deleting the Cluster removes the load balancer and the network.
	g.Expect(env.Client.Delete(ctx, cluster)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(cc), &infrav1.ContainerCluster{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "ContainerCluster still there: %v", err)
		_, err = runtime.Inspect(ctx, naming.LoadBalancerName(ns.Name, "c1"))
		g.Expect(container.IsNotFound(err)).To(BeTrue())
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
}

// TestMissingContainerIsSeenFromEvents removes a machine's container behind
// CAPCT's back and expects the machine to say so within seconds, through
// the runtime's event stream rather than a resync.
func TestMissingContainerIsSeenFromEvents(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	_, cluster := newCluster(t, g, ctx, "c2")
	_, cm := newMachine(g, ctx, cluster, "cp-0")
	name := naming.ContainerName(cluster.Namespace, cluster.Name, cm.Name)
	t.Cleanup(func() { _ = env.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}) })
	g.Eventually(func(g Gomega) {
		get(g, ctx, cm)
		g.Expect(cm.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	// Ready first: a Ready machine has nothing queued (no node poll), so
	// only the container's destroy event can bring it back within seconds.
	reportNode(g, ctx, name, corev1.ConditionTrue)
	g.Eventually(func(g Gomega) {
		get(g, ctx, cm)
		g.Expect(conditions.IsTrue(cm, infrav1.ReadyCondition)).To(BeTrue(), "Ready: %v", conditions.Get(cm, infrav1.ReadyCondition))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	// And settled: Cluster API's reaction to the Ready machine (Machine
	// status, which the controller watches) is over once neither object
	// has changed for 3 s.
	settledFor := func(d time.Duration) func() bool {
		machine := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: cm.Name}}
		var last string
		var since time.Time
		return func() bool {
			if env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm) != nil || env.Client.Get(ctx, client.ObjectKeyFromObject(machine), machine) != nil {
				return false
			}
			if v := cm.ResourceVersion + "/" + machine.ResourceVersion; v != last {
				last, since = v, time.Now()
			}
			return time.Since(since) >= d
		}
	}
	g.Eventually(settledFor(3*time.Second), 30*time.Second, 200*time.Millisecond).Should(BeTrue())

	removed := time.Now()
	g.Expect(runtime.RemoveOutOfBand(name)).To(BeTrue())
	g.Eventually(func(g Gomega) {
		get(g, ctx, cm)
		c := conditions.Get(cm, infrav1.LaunchedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(infrav1.ContainerMissingReason))
		// Gone is the one terminal state of a launched container.
		g.Expect(conditions.GetReason(cm, infrav1.ContainerRunningCondition)).To(Equal(infrav1.ContainerMissingReason))
		g.Expect(conditions.GetReason(cm, infrav1.ReadyCondition)).To(Equal(infrav1.ContainerMissingReason))
		g.Expect(cm.Status.Phase).To(Equal(infrav1.MachinePhaseFailed))
	}, 5*time.Second, 50*time.Millisecond).Should(Succeed())
	t.Logf("Missing container reported %s after its removal", time.Since(removed).Round(time.Millisecond))
	_, err := runtime.Inspect(ctx, name)
	g.Expect(container.IsNotFound(err)).To(BeTrue(), "the container was recreated")
}

// TestAContainerMachineIsLeftAloneUntilItsMachineOwnsIt creates a
// ContainerMachine as a MachineSet does, before the Machine that will own
// it: CAPCT must not write to it (the MachineSet updates it right after,
// and a write in between made that update fail and the ContainerMachine
// leak), and must take it up once the Machine owns it.
func TestAContainerMachineIsLeftAloneUntilItsMachineOwnsIt(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, cluster := newCluster(t, g, ctx, "alone")
	cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "alone-0",
		Labels: map[string]string{clusterv1.ClusterNameLabel: cluster.Name}},
		Spec: infrav1.ContainerMachineSpec{Image: "capct/node:v1.35.4"}}
	g.Expect(env.Client.Create(ctx, cm)).To(Succeed())
	created := cm.ResourceVersion
	g.Consistently(func(g Gomega) {
		got := get(g, ctx, &infrav1.ContainerMachine{ObjectMeta: cm.ObjectMeta})
		g.Expect(got.ResourceVersion).To(Equal(created), "CAPCT wrote to a ContainerMachine no Machine owns yet: finalizers %v, conditions %v", got.Finalizers, got.Status.Conditions)
	}, 3*time.Second, 200*time.Millisecond).Should(Succeed())

	g.Expect(env.Client.Delete(ctx, cm)).To(Succeed())
	m, owned := newMachineOfRole(g, ctx, cluster, "alone-1", false)
	g.Eventually(func(g Gomega) {
		got := get(g, ctx, &infrav1.ContainerMachine{ObjectMeta: owned.ObjectMeta})
		g.Expect(got.Finalizers).To(ContainElement(infrav1.MachineFinalizer), "the ContainerMachine of Machine %s was not taken up", m.Name)
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
}
