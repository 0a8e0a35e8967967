package containermachine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/hostcapacity"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

// reportNode makes the Node's kubelet report its Ready condition now,
// creating the Node (as a kubelet registers it) when it is not there.
func reportNode(g *WithT, ctx context.Context, name string, status corev1.ConditionStatus) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
		g.Expect(env.Client.Create(ctx, node)).To(Succeed())
	}
	// CAPCT may be patching the Node at the same time: retry on conflict.
	g.Eventually(func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
			return err
		}
		now := metav1.Now()
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: now, LastTransitionTime: now}}
		return env.Client.Status().Update(ctx, node)
	}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
}

// TestAStoppedContainerTakesTheMachineOutAndBack stops a Ready machine's
// container behind CAPCT's back and starts it again, as an engine restart
// does: the machine says at once that its container does not run (not
// failed: a MachineHealthCheck has nothing to replace), and is Ready again
// once the container runs and its Node has reported Ready since.
func TestAStoppedContainerTakesTheMachineOutAndBack(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	_, cluster := newCluster(t, g, ctx, "c3")
	machine, cm := newMachine(g, ctx, cluster, "cp-0")
	name := naming.ContainerName(cluster.Namespace, "c3", "cp-0")
	t.Cleanup(func() { _ = env.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}) })
	g.Eventually(func(g Gomega) {
		get(g, ctx, cm)
		g.Expect(cm.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	reportNode(g, ctx, name, corev1.ConditionTrue)
	g.Eventually(func(g Gomega) {
		get(g, ctx, cm)
		g.Expect(conditions.IsTrue(cm, infrav1.ReadyCondition)).To(BeTrue(), "Ready: %v", conditions.Get(cm, infrav1.ReadyCondition))
		g.Expect(conditions.GetReason(cm, infrav1.ContainerRunningCondition)).To(Equal(infrav1.RunningReason))
		get(g, ctx, machine)
		g.Expect(conditions.IsTrue(machine, clusterv1.MachineInfrastructureReadyCondition)).To(BeTrue())
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())

	// Stopped: a Ready machine has nothing queued, so only the die event
	// can bring it back this fast.
	g.Expect(runtime.Stop(ctx, name, owned(g, ctx, name), 0)).To(Succeed())
	g.Eventually(func(g Gomega) {
		get(g, ctx, cm)
		g.Expect(conditions.GetReason(cm, infrav1.ContainerRunningCondition)).To(Equal(infrav1.StoppedReason))
		g.Expect(conditions.IsFalse(cm, infrav1.ReadyCondition)).To(BeTrue())
		g.Expect(conditions.GetReason(cm, infrav1.ReadyCondition)).To(Equal(infrav1.StoppedReason))
		get(g, ctx, machine)
		g.Expect(conditions.IsFalse(machine, clusterv1.MachineInfrastructureReadyCondition)).To(BeTrue())
	}, 5*time.Second, 50*time.Millisecond).Should(Succeed())
	get(g, ctx, cm)
	g.Expect(cm.Status.Phase).NotTo(Equal(infrav1.MachinePhaseFailed))
	g.Expect(conditions.IsTrue(cm, infrav1.LaunchedCondition)).To(BeTrue())
	g.Expect(cm.Status.Initialization.Provisioned).To(Equal(ptr.To(true)), "the contract keeps provisioned once set")

	// Started again: the Node's Ready is from before, so the machine waits
	// for its kubelet. The start event wakes it well before its own recheck.
	time.Sleep(time.Second) // the Node's report is in whole seconds
	g.Expect(runtime.Start(ctx, name, owned(g, ctx, name))).To(Succeed())
	startedAt := time.Now()
	g.Eventually(func(g Gomega) {
		get(g, ctx, cm)
		g.Expect(conditions.GetReason(cm, infrav1.ContainerRunningCondition)).To(Equal(infrav1.NodeNotReadyReason))
		g.Expect(conditions.GetReason(cm, infrav1.ReadyCondition)).To(Equal(infrav1.NodeNotReadyReason))
	}, 3*time.Second, 50*time.Millisecond).Should(Succeed())
	t.Logf("Start noticed within %s", time.Since(startedAt).Round(time.Millisecond))

	reportNode(g, ctx, name, corev1.ConditionTrue)
	g.Eventually(func(g Gomega) {
		get(g, ctx, cm)
		g.Expect(conditions.GetReason(cm, infrav1.ContainerRunningCondition)).To(Equal(infrav1.RunningReason))
		g.Expect(conditions.IsTrue(cm, infrav1.ReadyCondition)).To(BeTrue(), "Ready: %v", conditions.Get(cm, infrav1.ReadyCondition))
		get(g, ctx, machine)
		g.Expect(conditions.IsTrue(machine, clusterv1.MachineInfrastructureReadyCondition)).To(BeTrue())
	}, 15*time.Second, 100*time.Millisecond).Should(Succeed())
}

// TestAMachineWaitsForHostCapacity lowers the host's inotify limit so that
// one node fits and two more do not: those two wait, non-terminally, with a
// condition that names the sysctl, and the ContainerCluster gets one event;
// raising the limit lets them go on by themselves.
func TestAMachineWaitsForHostCapacity(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, cluster := newCluster(t, g, ctx, "c4")
	t.Cleanup(func() { hostLimits.set(roomy) })

	// What the nodes of earlier tests use, as the Gate counts it once it
	// forgets the nodes it admitted whose containers are gone already.
	gateClock.Step(time.Hour)
	all, err := runtime.List(ctx, nil)
	g.Expect(err).NotTo(HaveOccurred())
	var used int64
	for _, m := range all {
		if r := container.Role(m.Labels[container.LabelRole]); r.IsNode() && m.State != container.StateExited {
			used += nodeCosts[r][hostcapacity.InotifyInstances]
		}
	}
	cpCost := nodeCosts[container.RoleControlPlane][hostcapacity.InotifyInstances]
	hostLimits.set(hostcapacity.Values{hostcapacity.InotifyInstances: used + cpCost})

	_, first := newMachine(g, ctx, cluster, "cp-0")
	g.Eventually(func(g Gomega) {
		get(g, ctx, first)
		g.Expect(conditions.IsTrue(first, infrav1.LaunchedCondition)).To(BeTrue(), "Launched: %v", conditions.Get(first, infrav1.LaunchedCondition))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())

	_, second := newMachine(g, ctx, cluster, "cp-1")
	_, third := newMachine(g, ctx, cluster, "cp-2")
	for _, cm := range []*infrav1.ContainerMachine{second, third} {
		g.Eventually(func(g Gomega) {
			get(g, ctx, cm)
			c := conditions.Get(cm, infrav1.LaunchedCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(infrav1.WaitingForHostCapacityReason))
			g.Expect(c.Message).To(ContainSubstring("sysctl -w fs.inotify.max_user_instances="))
			g.Expect(cm.Status.Phase).To(Equal(infrav1.MachinePhasePending))
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
		_, err := runtime.Inspect(ctx, naming.ContainerName(cluster.Namespace, "c4", cm.Name))
		g.Expect(container.IsNotFound(err)).To(BeTrue(), "a container was created without room")
	}
	// One event on the ContainerCluster, however many machines wait and
	// however often they look.
	capacityEvents := func(g Gomega) []corev1.Event {
		events := &corev1.EventList{}
		g.Expect(env.Client.List(ctx, events, client.InNamespace(ns.Name))).To(Succeed())
		var out []corev1.Event
		for _, e := range events.Items {
			if e.Reason == infrav1.WaitingForHostCapacityReason {
				out = append(out, e)
			}
		}
		return out
	}
	g.Eventually(func(g Gomega) { g.Expect(capacityEvents(g)).To(HaveLen(1)) }, 10*time.Second, 100*time.Millisecond).Should(Succeed())
	ev := capacityEvents(g)[0]
	g.Expect(ev.InvolvedObject.Kind).To(Equal("ContainerCluster"))
	g.Expect(ev.Type).To(Equal(corev1.EventTypeWarning))
	g.Expect(strings.Contains(ev.Message, "fs.inotify.max_user_instances")).To(BeTrue(), ev.Message)
	g.Consistently(func(g Gomega) {
		events := capacityEvents(g)
		g.Expect(events).To(HaveLen(1))
		g.Expect(events[0].Count).To(BeNumerically("<=", 1))
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())

	// The limit is raised: both go on without anyone touching them.
	hostLimits.set(hostcapacity.Values{hostcapacity.InotifyInstances: used + 3*cpCost})
	for _, cm := range []*infrav1.ContainerMachine{second, third} {
		g.Eventually(func(g Gomega) {
			get(g, ctx, cm)
			g.Expect(conditions.IsTrue(cm, infrav1.LaunchedCondition)).To(BeTrue(), "Launched: %v", conditions.Get(cm, infrav1.LaunchedCondition))
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	}
}

// TestContainerStartsWakeTheirCluster restarts a node container and stops
// the load balancer of a cluster whose ContainerCluster has nothing queued
// for two minutes: the node's start re-syncs the cluster's routes and the
// load balancer runs again, within seconds.
func TestContainerStartsWakeTheirCluster(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	_, cluster := newCluster(t, g, ctx, "c5")
	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: "c5"}}
	// A worker: its status changes do not wake the ContainerCluster, only
	// its container's events can.
	_, cm := newMachineOfRole(g, ctx, cluster, "md-0", false)
	g.Eventually(func(g Gomega) {
		get(g, ctx, cc)
		g.Expect(cc.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
		get(g, ctx, cm)
		g.Expect(conditions.IsTrue(cm, infrav1.BootstrappedCondition)).To(BeTrue())
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	quiet := func() int {
		// Wait until the cluster's reconciles settle.
		var before int
		g.Eventually(func(g Gomega) {
			before = routes.count(cluster)
			g.Consistently(func() int { return routes.count(cluster) }, 2*time.Second, 100*time.Millisecond).Should(Equal(before))
		}, 30*time.Second).Should(Succeed())
		return before
	}

	before := quiet()
	worker := naming.ContainerName(cluster.Namespace, "c5", "md-0")
	g.Expect(runtime.Stop(ctx, worker, owned(g, ctx, worker), 0)).To(Succeed())
	g.Expect(runtime.Start(ctx, worker, owned(g, ctx, worker))).To(Succeed())
	g.Eventually(func() int { return routes.count(cluster) }, 5*time.Second, 50*time.Millisecond).Should(BeNumerically(">", before))

	quiet()
	lb := naming.LoadBalancerName(cluster.Namespace, "c5")
	g.Expect(runtime.Stop(ctx, lb, owned(g, ctx, lb), 0)).To(Succeed())
	g.Eventually(func(g Gomega) {
		m, err := runtime.Inspect(ctx, lb)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(m.State).To(Equal(container.StateRunning))
	}, 5*time.Second, 50*time.Millisecond).Should(Succeed())
}

// owned is the owner of the container name, as its labels say: the test
// stops and starts containers as the engine would, for whoever owns them.
func owned(g Gomega, ctx context.Context, name string) container.Owner {
	m, err := runtime.Inspect(ctx, name)
	g.Expect(err).NotTo(HaveOccurred())
	return container.OwnerOf(m.Labels)
}
