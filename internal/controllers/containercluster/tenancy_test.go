//go:build engine

package containercluster_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/loadbalancer"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

// tenant is one team's cluster: a load balancer, a control-plane machine and
// a worker, all on the real engine.
type tenant struct {
	cc       *infrav1.ContainerCluster
	cluster  *clusterv1.Cluster
	machines []*clusterv1.Machine
}

// newTenant creates, in a new namespace, a cluster called name with a
// control-plane machine and a worker.
func newTenant(ctx context.Context, g Gomega, name string) *tenant {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenant-"}}
	g.Expect(env.Client.Create(ctx, ns)).To(Succeed())
	tn := &tenant{
		cc: &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
			Spec: infrav1.ContainerClusterSpec{LoadBalancer: infrav1.LoadBalancerSpec{Image: lbImage}}},
		cluster: &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
			Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerCluster", Name: name}}},
	}
	g.Expect(env.Client.Create(ctx, tn.cc)).To(Succeed())
	g.Expect(env.Client.Create(ctx, tn.cluster)).To(Succeed())
	g.Expect(env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "bootstrap", Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
		Data:       map[string][]byte{"value": []byte(bootstrapData), "format": []byte("cloud-config")},
		Type:       clusterv1.ClusterSecretType,
	})).To(Succeed())
	for _, m := range []struct {
		name         string
		controlPlane bool
	}{{"cp-0", true}, {"md-0", false}} {
		labels := map[string]string{clusterv1.ClusterNameLabel: name}
		if m.controlPlane {
			labels[clusterv1.MachineControlPlaneLabel] = ""
		}
		g.Expect(env.Client.Create(ctx, &infrav1.ContainerMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: m.name, Labels: labels},
			Spec:       infrav1.ContainerMachineSpec{Image: nodeImage}})).To(Succeed())
		machine := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: m.name, Labels: labels,
				Annotations: map[string]string{clusterv1.ExcludeNodeDrainingAnnotation: "", clusterv1.ExcludeWaitForNodeVolumeDetachAnnotation: ""}},
			Spec: clusterv1.MachineSpec{
				ClusterName: name, Version: "v1.35.4",
				Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("bootstrap")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerMachine", Name: m.name},
			},
		}
		g.Expect(env.Client.Create(ctx, machine)).To(Succeed())
		tn.machines = append(tn.machines, machine)
	}
	return tn
}

// engineState is what a cluster has on the engine: container IDs by name,
// its network's ID and its load balancer's configuration.
type engineState struct {
	containers map[string]string
	network    string
	lbConfig   string
	hostPort   int32
}

func (tn *tenant) state(ctx context.Context, g Gomega) engineState {
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(tn.cc), tn.cc)).To(Succeed())
	owner := naming.ClusterOwner(tn.cluster, tn.cc)
	g.Expect(owner.Valid()).To(BeTrue(), "no cluster ID yet")
	s := engineState{containers: map[string]string{}, hostPort: tn.cc.Status.LoadBalancer.HostPort}
	cs, err := container.ListOwned(ctx, rt, owner, nil)
	g.Expect(err).NotTo(HaveOccurred())
	for _, c := range cs {
		g.Expect(c.State).To(Equal(container.StateRunning), "container %s", c.Name)
		s.containers[c.Name] = c.ID
	}
	n, err := rt.InspectNetwork(ctx, naming.NetworkName(tn.cluster, tn.cc))
	g.Expect(err).NotTo(HaveOccurred())
	s.network = n.ID
	cfg, err := rt.ReadFile(ctx, naming.LoadBalancerName(tn.cluster.Namespace, tn.cluster.Name),
		owner.ForMachine(naming.LoadBalancerMachine(tn.cluster.Name)), loadbalancer.ConfigPath)
	g.Expect(err).NotTo(HaveOccurred())
	s.lbConfig = string(cfg)
	return s
}

// ready waits until the tenant's two machines and load balancer run and
// the load balancer lists its control-plane machine.
func (tn *tenant) ready(ctx context.Context, g Gomega) engineState {
	var s engineState
	g.Eventually(func(g Gomega) {
		for _, m := range tn.machines {
			cm := &infrav1.ContainerMachine{}
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(m), cm)).To(Succeed())
			g.Expect(cm.Status.Initialization.Provisioned).To(Equal(ptr.To(true)), "ContainerMachine %s", klogName(cm))
		}
		s = tn.state(ctx, g)
		g.Expect(s.containers).To(HaveLen(3), "two machines and a load balancer")
		g.Expect(s.lbConfig).To(MatchRegexp(`server cp-0 [0-9.]+:6443 weight 100`))
	}, 90*time.Second, 250*time.Millisecond).Should(Succeed())
	return s
}

func klogName(o client.Object) string { return o.GetNamespace() + "/" + o.GetName() }

// TestSameClusterNameInTwoNamespaces runs two clusters of the same name in
// two namespaces, as two teams sharing a management cluster would, and
// deletes one: the other's containers, load-balancer configuration and
// network are untouched and its endpoint keeps answering.
func TestSameClusterNameInTwoNamespaces(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	name := "capct-twin-" + rand.String(5)
	testClusters = append(testClusters, name)
	a, b := newTenant(ctx, g, name), newTenant(ctx, g, name)
	before := a.ready(ctx, g)
	other := b.ready(ctx, g)
	for c := range before.containers {
		g.Expect(other.containers).NotTo(HaveKey(c), "the two clusters share container %s", c)
	}
	g.Expect(other.network).NotTo(Equal(before.network), "the two clusters share a network")

	for _, m := range b.machines {
		g.Expect(env.Client.Delete(ctx, m)).To(Succeed())
	}
	g.Expect(env.Client.Delete(ctx, b.cluster)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(b.cc), &infrav1.ContainerCluster{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the second cluster's ContainerCluster is still there: %v", err)
		left, err := container.ListOwned(ctx, rt, naming.ClusterOwner(b.cluster, b.cc), nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(left).To(BeEmpty())
		_, err = rt.InspectNetwork(ctx, naming.NetworkName(b.cluster, b.cc))
		g.Expect(container.IsNotFound(err)).To(BeTrue(), "the second cluster's network is still there: %v", err)
	}, 90*time.Second, 250*time.Millisecond).Should(Succeed())

	after := a.state(ctx, g)
	g.Expect(after).To(Equal(before), "deleting the other namespace's cluster changed this one")
	addr := fmt.Sprintf("127.0.0.1:%d", after.hostPort)
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred(), "the remaining cluster's endpoint %s does not answer", addr)
	_ = conn.Close()

	for _, m := range a.machines {
		g.Expect(env.Client.Delete(ctx, m)).To(Succeed())
	}
	g.Expect(env.Client.Delete(ctx, a.cluster)).To(Succeed())
	g.Eventually(func(g Gomega) {
		left, err := container.ListOwned(ctx, rt, naming.ClusterOwner(a.cluster, a.cc), nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(left).To(BeEmpty())
	}, 90*time.Second, 250*time.Millisecond).Should(Succeed())
}
