//go:build engine

package clusterctl

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/test/capi"
	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
	"github.com/capct/cluster-api-provider-container/internal/test/images"
)

// moveBootstrap counts its runs in a file on the node, so that a bootstrap
// run again after the move shows.
const moveBootstrap = `#cloud-config
runcmd:
- echo ran >> /etc/capct-bootstrap-runs
- echo success > /run/cluster-api/bootstrap-success.complete
`

// startEnvWithProvider starts an envtest API server whose manager runs
// CAPCT's ContainerCluster and ContainerMachine controllers on rt, as a
// management cluster after clusterctl init would (without Cluster API's
// controllers: the test plays their part).
func startEnvWithProvider(t *testing.T, rt container.Runtime) *envtest.Environment {
	t.Helper()
	env, err := envtest.New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	workload := func(context.Context, crclient.ObjectKey) (crclient.Client, error) { return env.Client, nil }
	if err := capi.SetupProvider(ctx, env.Manager, rt, nil, workload); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	if err := env.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return env
}

// TestMoveKeepsTheClustersContainers moves a running cluster (a load
// balancer and two machines on the real engine) between two management API
// servers, each running CAPCT, with clusterctl's own move. The target's CAPCT
// adopts every container (none is recreated, no bootstrap runs again),
// launches a machine added afterwards, and deletes the cluster cleanly.
func TestMoveKeepsTheClustersContainers(t *testing.T) {
	requireRelease(t)
	unsetClusterctlEnv(t)
	g := NewWithT(t)
	ctx := context.Background()
	d, err := images.NewDocker(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	rt := d.Runtime
	name := "capct-mv-" + rand.String(5)
	t.Cleanup(func() { dockertest.RemoveClusters(context.Background(), rt, []string{name}) })

	source, target := startEnvWithProvider(t, rt), startEnvWithProvider(t, rt)
	cc := newClusterctl(t, nil, envtestClusterClients(t))
	components, err := cc.GenerateProvider(ctx, "container", clusterctlv1.InfrastructureProviderType, client.ComponentsOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	prepareManagementCluster(ctx, t, source, components)
	prepareManagementCluster(ctx, t, target, components)

	// The cluster, made in the source as Cluster API would have left it.
	c := source.Client
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerCluster", Name: name}}}
	g.Expect(c.Create(ctx, cluster)).To(Succeed())
	containerCluster := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
		OwnerReferences: []metav1.OwnerReference{ownerRef(cluster, clusterv1.GroupVersion.String(), "Cluster")}},
		Spec: infrav1.ContainerClusterSpec{LoadBalancer: infrav1.LoadBalancerSpec{Image: d.LBImage}}}
	g.Expect(c.Create(ctx, containerCluster)).To(Succeed())
	g.Expect(c.Create(ctx, &corev1.Secret{
		// Owned, so that move takes it along, as it takes a KubeadmConfig's.
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-bootstrap", Labels: map[string]string{clusterv1.ClusterNameLabel: name},
			OwnerReferences: []metav1.OwnerReference{ownerRef(cluster, clusterv1.GroupVersion.String(), "Cluster")}},
		Data: map[string][]byte{"value": []byte(moveBootstrap), "format": []byte("cloud-config")},
		Type: clusterv1.ClusterSecretType,
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, crclient.ObjectKeyFromObject(containerCluster), containerCluster)).To(Succeed())
		g.Expect(containerCluster.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	g.Expect(c.Get(ctx, crclient.ObjectKeyFromObject(cluster), cluster)).To(Succeed())
	cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	// Move also wants the control plane initialized; this cluster's
	// machines are its whole story, so the test says so for it.
	cluster.Status.Conditions = []metav1.Condition{{Type: clusterv1.ClusterControlPlaneInitializedCondition,
		Status: metav1.ConditionTrue, Reason: "Initialized", LastTransitionTime: metav1.Now()}}
	g.Expect(c.Status().Update(ctx, cluster)).To(Succeed())
	for _, m := range []string{"m-0", "m-1"} {
		addMachine(ctx, g, c, cluster, m, d.NodeImage)
	}
	machinesReady := func(env *envtest.Environment, machines ...string) {
		g.Eventually(func(g Gomega) {
			for _, m := range machines {
				cm := &infrav1.ContainerMachine{}
				g.Expect(env.Client.Get(ctx, crclient.ObjectKey{Namespace: namespace, Name: m}, cm)).To(Succeed())
				g.Expect(cm.Status.Initialization.Provisioned).To(Equal(ptr.To(true)), "ContainerMachine %s: %v", m, cm.Status.Conditions)
			}
		}, 90*time.Second, 250*time.Millisecond).Should(Succeed())
	}
	machinesReady(source, "m-0", "m-1")
	owner := naming.ClusterOwner(cluster, containerCluster)
	before := engineIDs(ctx, g, rt, owner, naming.NetworkName(cluster, containerCluster))
	g.Expect(before).To(HaveLen(4), "a network, a load balancer and two machines")

	// What Cluster API reports once the machines are Nodes, which move
	// requires; then the move itself.
	for _, m := range []string{"m-0", "m-1"} {
		machine := &clusterv1.Machine{}
		g.Expect(c.Get(ctx, crclient.ObjectKey{Namespace: namespace, Name: m}, machine)).To(Succeed())
		machine.Status.NodeRef = clusterv1.MachineNodeReference{Name: m}
		g.Expect(c.Status().Update(ctx, machine)).To(Succeed())
	}
	fromKC, toKC := kubeconfig(t, source.Config), kubeconfig(t, target.Config)
	g.Expect(cc.Move(ctx, client.MoveOptions{FromKubeconfig: fromKC, ToKubeconfig: toKC, Namespace: namespace})).To(Succeed())
	g.Expect(apierrors.IsNotFound(c.Get(ctx, crclient.ObjectKeyFromObject(containerCluster), &infrav1.ContainerCluster{}))).To(BeTrue(),
		"the ContainerCluster is still in the source")

	// The target's CAPCT carries on with the same containers.
	c = target.Client
	g.Eventually(func(g Gomega) {
		moved := &infrav1.ContainerCluster{}
		g.Expect(c.Get(ctx, crclient.ObjectKeyFromObject(containerCluster), moved)).To(Succeed())
		g.Expect(moved.Spec.ClusterID).To(Equal(containerCluster.Spec.ClusterID), "the move lost the cluster ID")
		g.Expect(moved.Status.Initialization.Provisioned).To(Equal(ptr.To(true)), "ContainerCluster: %v", moved.Status.Conditions)
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	machinesReady(target, "m-0", "m-1")
	g.Expect(engineIDs(ctx, g, rt, owner, naming.NetworkName(cluster, containerCluster))).To(Equal(before), "a container or the network was recreated")
	for _, m := range []string{"m-0", "m-1"} {
		runs, err := rt.ReadFile(ctx, naming.ContainerName(namespace, name, m), owner.ForMachine(m), "/etc/capct-bootstrap-runs")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(strings.Count(string(runs), "ran")).To(Equal(1), "the bootstrap of %s ran again after the move", m)
	}

	// It scales the cluster, once Cluster API's Cluster controller (played
	// by the test) has seen the ContainerCluster provisioned again: move
	// does not carry status.
	movedCluster := &clusterv1.Cluster{}
	g.Expect(c.Get(ctx, crclient.ObjectKeyFromObject(cluster), movedCluster)).To(Succeed())
	g.Expect(movedCluster.UID).NotTo(Equal(cluster.UID), "the move is expected to give the Cluster a new UID")
	movedCluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	g.Expect(c.Status().Update(ctx, movedCluster)).To(Succeed())
	addMachine(ctx, g, c, movedCluster, "m-2", d.NodeImage)
	machinesReady(target, "m-2")
	after := engineIDs(ctx, g, rt, owner, naming.NetworkName(cluster, containerCluster))
	g.Expect(after).To(HaveLen(5))
	for k, id := range before {
		g.Expect(after).To(HaveKeyWithValue(k, id))
	}

	// ... and deletes it, leaving nothing.
	for _, m := range []string{"m-0", "m-1", "m-2"} {
		g.Expect(c.Delete(ctx, &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: m}})).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		left, err := container.ListOwned(ctx, rt, owner, map[string]string{container.LabelRole: string(container.RoleWorker)})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(left).To(BeEmpty())
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	g.Expect(c.Delete(ctx, &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(c.Get(ctx, crclient.ObjectKeyFromObject(containerCluster), &infrav1.ContainerCluster{}))).To(BeTrue())
		g.Expect(engineIDs(ctx, g, rt, owner, naming.NetworkName(cluster, containerCluster))).To(BeEmpty())
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
}

// addMachine creates a worker Machine and its ContainerMachine running
// image (the tests' busybox node: bootstrap data runs, no kubelet starts),
// owned as Cluster API owns them.
func addMachine(ctx context.Context, g Gomega, c crclient.Client, cluster *clusterv1.Cluster, name, image string) {
	labels := map[string]string{clusterv1.ClusterNameLabel: cluster.Name}
	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{ownerRef(cluster, clusterv1.GroupVersion.String(), "Cluster")}},
		Spec: clusterv1.MachineSpec{
			ClusterName: cluster.Name, Version: kubernetesVersion,
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(cluster.Name + "-bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerMachine", Name: name},
		},
	}
	g.Expect(c.Create(ctx, machine)).To(Succeed())
	g.Expect(c.Create(ctx, &infrav1.ContainerMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{ownerRef(machine, clusterv1.GroupVersion.String(), "Machine")}},
		Spec: infrav1.ContainerMachineSpec{Image: image},
	})).To(Succeed())
}

func ownerRef(o metav1.Object, apiVersion, kind string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: o.GetName(), UID: o.GetUID(), Controller: ptr.To(true)}
}

// engineIDs maps everything owner has on the engine (its containers by
// name, and its network) to the engine's IDs.
func engineIDs(ctx context.Context, g Gomega, rt *docker.Runtime, owner container.Owner, network string) map[string]string {
	ids := map[string]string{}
	cs, err := container.ListOwned(ctx, rt, owner, nil)
	g.Expect(err).NotTo(HaveOccurred())
	for _, c := range cs {
		ids["container/"+c.Name] = c.ID
	}
	n, err := rt.InspectNetwork(ctx, network)
	if err == nil && owner.Owns(n.Labels) {
		ids["network/"+n.Name] = n.ID
	}
	return ids
}
