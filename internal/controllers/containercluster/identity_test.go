//go:build engine

package containercluster_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

// ownedBy is the owner reference Cluster API's Cluster controller puts on a
// cluster's infrastructure.
func ownedBy(cluster *clusterv1.Cluster) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster",
		Name: cluster.Name, UID: cluster.UID, Controller: ptr.To(false)}
}

// infrastructure is what a cluster has on the engine: container IDs by
// name and its network's ID.
func infrastructure(ctx context.Context, g Gomega, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) (map[string]string, string) {
	made, err := container.ListOwned(ctx, rt, naming.ClusterOwner(cluster, cc), nil)
	g.Expect(err).NotTo(HaveOccurred())
	ids := map[string]string{}
	for _, c := range made {
		ids[c.Name] = c.ID
	}
	n, err := rt.InspectNetwork(ctx, naming.NetworkName(cluster, cc))
	g.Expect(err).NotTo(HaveOccurred())
	return ids, n.ID
}

// TestASecondContainerClusterOfTheClusterIsNotActedOn gives a running
// cluster's Cluster a second ContainerCluster, which would get the same
// identity: it is reported as not the cluster's infrastructure and never
// acted on, and deleting it, even holding CAPCT's finalizer, leaves the
// cluster's load balancer and network as they were.
func TestASecondContainerClusterOfTheClusterIsNotActedOn(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cc, cluster := createCluster(ctx, g, "identity-", infrav1.NetworkSpec{})
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), cc)).To(Succeed())
		g.Expect(cc.Status.Initialization.Provisioned).To(Equal(ptr.To(true)), "LoadBalancerAvailable: %v", conditions.Get(cc, infrav1.LoadBalancerAvailableCondition))
	}, 60*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)).To(Succeed())
	containersBefore, networkBefore := infrastructure(ctx, g, cluster, cc)
	g.Expect(containersBefore).To(HaveKey(naming.LoadBalancerName(cluster.Namespace, cluster.Name)))

	impostor := func(name string) *infrav1.ContainerCluster {
		return &infrav1.ContainerCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: name,
				OwnerReferences: []metav1.OwnerReference{ownedBy(cluster)},
				// Anyone who creates the object may add the finalizer too.
				Finalizers: []string{infrav1.ClusterFinalizer}},
			Spec: infrav1.ContainerClusterSpec{LoadBalancer: infrav1.LoadBalancerSpec{Image: lbImage}},
		}
	}
	second := impostor(cluster.Name + "-second")
	g.Expect(env.Client.Create(ctx, second)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(second), second)).To(Succeed())
		ready := conditions.Get(second, infrav1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(infrav1.NotClusterInfrastructureReason), "Ready: %s", ready.Message)
		g.Expect(ready.Message).To(ContainSubstring("ContainerCluster " + cluster.Name + " "))
		g.Expect(second.Finalizers).NotTo(ContainElement(infrav1.ClusterFinalizer))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(second), second)).To(Succeed())
		g.Expect(second.Spec.ClusterID).To(BeEmpty(), "the second ContainerCluster took the cluster's identity")
		g.Expect(second.Spec.ControlPlaneEndpoint.Host).To(BeEmpty())
		g.Expect(second.Status.Initialization.Provisioned).To(BeNil())
	}, 2*time.Second, 250*time.Millisecond).Should(Succeed())

	g.Expect(env.Client.Delete(ctx, second)).To(Succeed())
	gone := func(o *infrav1.ContainerCluster) {
		g.Eventually(func() bool {
			return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(o), &infrav1.ContainerCluster{}))
		}, 30*time.Second, 200*time.Millisecond).Should(BeTrue(), "ContainerCluster %s is not deleted", o.Name)
	}
	gone(second)

	// One deleted before CAPCT ever acted on it reaches the deletion path
	// holding CAPCT's finalizer: it is paused while it is made and deleted.
	// Its creator copied the cluster's ID, which names the cluster's
	// containers and network, from the real one.
	third := impostor(cluster.Name + "-third")
	third.Annotations = map[string]string{clusterv1.PausedAnnotation: ""}
	third.Spec.ClusterID = cc.Spec.ClusterID
	g.Expect(env.Client.Create(ctx, third)).To(Succeed())
	g.Expect(env.Client.Delete(ctx, third)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(third), third)).To(Succeed())
		g.Expect(conditions.IsTrue(third, infrav1.PausedCondition)).To(BeTrue())
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(third.Finalizers).To(ContainElement(infrav1.ClusterFinalizer))
	unpaused := third.DeepCopy()
	unpaused.Annotations = nil
	g.Expect(env.Client.Patch(ctx, unpaused, client.MergeFrom(third))).To(Succeed())
	gone(third)

	g.Consistently(func(g Gomega) {
		containers, network := infrastructure(ctx, g, cluster, cc)
		g.Expect(containers).To(Equal(containersBefore), "a second ContainerCluster changed the cluster's containers")
		g.Expect(network).To(Equal(networkBefore), "a second ContainerCluster changed the cluster's network")
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), cc)).To(Succeed())
		g.Expect(conditions.IsTrue(cc, infrav1.ReadyCondition)).To(BeTrue(), "Ready: %v", conditions.Get(cc, infrav1.ReadyCondition))
	}, 3*time.Second, 500*time.Millisecond).Should(Succeed())
	deleteCluster(ctx, g, cc, cluster)
}

// TestAContainerClusterWaitsForItsClusterToNameIt follows ClusterClass's
// topology controller, which creates the ContainerCluster owned by the
// Cluster and names it in spec.infrastructureRef afterwards: until then
// nothing is made and nothing is refused, and then the cluster comes up.
func TestAContainerClusterWaitsForItsClusterToNameIt(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	name := "capct-it-" + rand.String(5)
	testClusters = append(testClusters, name)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "identity-"}}
	g.Expect(env.Client.Create(ctx, ns)).To(Succeed())
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
		Spec: clusterv1.ClusterSpec{Paused: ptr.To(false)}}
	g.Expect(env.Client.Create(ctx, cluster)).To(Succeed())
	cc := &infrav1.ContainerCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name + "-abcde",
			OwnerReferences: []metav1.OwnerReference{ownedBy(cluster)}},
		Spec: infrav1.ContainerClusterSpec{LoadBalancer: infrav1.LoadBalancerSpec{Image: lbImage}},
	}
	g.Expect(env.Client.Create(ctx, cc)).To(Succeed())

	expectNothingMade(ctx, g, cc, cluster)
	g.Expect(cc.Finalizers).To(BeEmpty())
	g.Expect(cc.Spec.ClusterID).To(BeEmpty())
	g.Expect(conditions.Get(cc, infrav1.ReadyCondition)).To(BeNil(), "a ContainerCluster waiting to be named was refused")

	patched := cluster.DeepCopy()
	patched.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{
		APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerCluster", Name: cc.Name}
	g.Expect(env.Client.Patch(ctx, patched, client.MergeFrom(cluster))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), cc)).To(Succeed())
		g.Expect(cc.Status.Initialization.Provisioned).To(Equal(ptr.To(true)), "LoadBalancerAvailable: %v", conditions.Get(cc, infrav1.LoadBalancerAvailableCondition))
	}, 60*time.Second, 200*time.Millisecond).Should(Succeed())
	deleteCluster(ctx, g, cc, patched)
}
