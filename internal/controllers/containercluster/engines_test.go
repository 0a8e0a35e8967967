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

// enginesReady waits until cc's EnginesReady condition has status and
// reason, leaving cc as it was read then.
func enginesReady(ctx context.Context, g Gomega, cc *infrav1.ContainerCluster, status metav1.ConditionStatus, reason string) {
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), cc)).To(Succeed())
		c := conditions.Get(cc, infrav1.EnginesReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(status), "EnginesReady: %s", c.Message)
		g.Expect(c.Reason).To(Equal(reason), "EnginesReady: %s", c.Message)
	}, 60*time.Second, 200*time.Millisecond).Should(Succeed())
}

// expectNothingMade checks, for a while, that nothing was made for a
// cluster its engines do not let run.
func expectNothingMade(ctx context.Context, g Gomega, cc *infrav1.ContainerCluster, cluster *clusterv1.Cluster) {
	g.Consistently(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), cc)).To(Succeed())
		g.Expect(cc.Status.Initialization.Provisioned).To(BeNil())
		g.Expect(cc.Spec.ControlPlaneEndpoint.Host).To(BeEmpty())
		made, err := rt.List(ctx, map[string]string{container.LabelClusterID: string(cluster.UID)})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(made).To(BeEmpty(), "a container was made for a cluster whose engines do not let it run")
		_, err = rt.InspectNetwork(ctx, naming.NetworkName(cluster, cc))
		g.Expect(container.IsNotFound(err)).To(BeTrue(), "a network was made for a cluster whose engines do not let it run: %v", err)
	}, 3*time.Second, 500*time.Millisecond).Should(Succeed())
}

func deleteCluster(ctx context.Context, g Gomega, cc *infrav1.ContainerCluster, cluster *clusterv1.Cluster) {
	g.Expect(env.Client.Delete(ctx, cluster)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), &infrav1.ContainerCluster{}))
	}, 60*time.Second, 200*time.Millisecond).Should(BeTrue())
}

// createWorker creates a worker Machine and its ContainerMachine in
// cluster, with bootstrap data that only writes the success sentinel.
func createWorker(ctx context.Context, g Gomega, cluster *clusterv1.Cluster, name string) *infrav1.ContainerMachine {
	labels := map[string]string{clusterv1.ClusterNameLabel: cluster.Name}
	g.Expect(env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: name + "-bootstrap", Labels: labels},
		Data:       map[string][]byte{"value": []byte(bootstrapData), "format": []byte("cloud-config")},
		Type:       clusterv1.ClusterSecretType,
	})).To(Succeed())
	cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: name, Labels: labels},
		Spec: infrav1.ContainerMachineSpec{Image: nodeImage}}
	g.Expect(env.Client.Create(ctx, cm)).To(Succeed())
	g.Expect(env.Client.Create(ctx, &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: name, Labels: labels,
			Annotations: map[string]string{clusterv1.ExcludeNodeDrainingAnnotation: "", clusterv1.ExcludeWaitForNodeVolumeDetachAnnotation: ""}},
		Spec: clusterv1.MachineSpec{
			ClusterName: cluster.Name, Version: "v1.35.4",
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(name + "-bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerMachine", Name: name},
		},
	})).To(Succeed())
	return cm
}

// createEngine creates a ContainerEngine on the manager's own Docker
// engine (an empty endpoint) that allows the given namespaces, or every
// namespace when none is given.
func createEngine(ctx context.Context, g Gomega, t *testing.T, allowed ...string) *infrav1.ContainerEngine {
	engine := &infrav1.ContainerEngine{ObjectMeta: metav1.ObjectMeta{Name: "engine-" + rand.String(5)},
		Spec: infrav1.ContainerEngineSpec{AllowedNamespaces: &infrav1.AllowedNamespaces{List: allowed}}}
	g.Expect(env.Client.Create(ctx, engine)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), engine) })
	return engine
}

// TestClusterRunsOnTheEngineItLists lists a ContainerEngine on a cluster
// before the engine exists: the cluster waits, making nothing, until the
// engine is created and reached; then its load balancer runs on that
// engine and the engine is its failure domain, and its machines are placed
// there. An admin narrowing the engine afterwards is reported, takes
// nothing away, and keeps new machines from starting there.
func TestClusterRunsOnTheEngineItLists(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	engineName := "engine-" + rand.String(5)
	cc, cluster := createCluster(ctx, g, "engines-", infrav1.NetworkSpec{}, func(cc *infrav1.ContainerCluster) {
		cc.Spec.Engines = []infrav1.ClusterEngine{{Name: engineName}}
	})

	enginesReady(ctx, g, cc, metav1.ConditionFalse, infrav1.EngineNotFoundReason)
	g.Expect(conditions.Get(cc, infrav1.EnginesReadyCondition).Message).To(ContainSubstring(engineName))
	g.Expect(conditions.Get(cc, infrav1.ReadyCondition).Reason).To(Equal(infrav1.EngineNotFoundReason), "Ready must say why the cluster has no infrastructure")
	expectNothingMade(ctx, g, cc, cluster)

	engine := &infrav1.ContainerEngine{ObjectMeta: metav1.ObjectMeta{Name: engineName},
		Spec: infrav1.ContainerEngineSpec{AllowedNamespaces: &infrav1.AllowedNamespaces{List: []string{cc.Namespace}}}}
	g.Expect(env.Client.Create(ctx, engine)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), engine) })

	// The engine's watch wakes the cluster: nothing else would.
	enginesReady(ctx, g, cc, metav1.ConditionTrue, infrav1.SucceededReason)
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), cc)).To(Succeed())
		g.Expect(cc.Status.Initialization.Provisioned).To(Equal(ptr.To(true)), "LoadBalancerAvailable: %v", conditions.Get(cc, infrav1.LoadBalancerAvailableCondition))
	}, 60*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(cc.Status.FailureDomains).To(Equal([]clusterv1.FailureDomain{
		{Name: engineName, ControlPlane: ptr.To(true), Attributes: map[string]string{"type": "docker"}},
	}))
	made, err := rt.List(ctx, map[string]string{container.LabelClusterID: string(cluster.UID)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(made).To(HaveLen(1), "the load balancer runs on the engine")

	// A worker is placed on the engine, records it before its container
	// exists, and reports it as its failure domain.
	worker := createWorker(ctx, g, cluster, "worker-0")
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(worker), worker)).To(Succeed())
		g.Expect(worker.Annotations).To(HaveKeyWithValue(infrav1.EngineAnnotation, engineName))
		g.Expect(worker.Status.Initialization.Provisioned).To(Equal(ptr.To(true)), "Launched: %v, Bootstrapped: %v",
			conditions.Get(worker, infrav1.LaunchedCondition), conditions.Get(worker, infrav1.BootstrappedCondition))
		g.Expect(worker.Status.FailureDomain).To(Equal(engineName))
	}, 90*time.Second, 200*time.Millisecond).Should(Succeed())
	// The placement never changes: the container is on that engine.
	moved := worker.DeepCopy()
	moved.Annotations[infrav1.EngineAnnotation] = "engine-elsewhere"
	err = env.Client.Patch(ctx, moved, client.MergeFrom(worker))
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "changing a machine's engine must be refused: %v", err)

	// The admin takes the namespace off the engine: the cluster says so,
	// and keeps what it has; a new machine waits instead of starting there.
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(engine), engine)).To(Succeed())
	engine.Spec.AllowedNamespaces.List = []string{"someone-else"}
	g.Expect(env.Client.Update(ctx, engine)).To(Succeed())
	enginesReady(ctx, g, cc, metav1.ConditionFalse, infrav1.NamespaceNotAllowedReason)
	g.Expect(cc.Status.Initialization.Provisioned).To(Equal(ptr.To(true)))
	g.Expect(conditions.Get(cc, infrav1.ReadyCondition).Status).To(Equal(metav1.ConditionTrue), "a running load balancer keeps the cluster Ready")
	made, err = rt.List(ctx, map[string]string{container.LabelClusterID: string(cluster.UID)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(made).To(HaveLen(2), "narrowing the engine must not take the load balancer or a running machine away")
	late := createWorker(ctx, g, cluster, "worker-1")
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(late), late)).To(Succeed())
		launched := conditions.Get(late, infrav1.LaunchedCondition)
		g.Expect(launched).NotTo(BeNil())
		g.Expect(launched.Reason).To(Equal(infrav1.WaitingForClusterInfrastructureReason))
		g.Expect(launched.Message).To(ContainSubstring("does not allow namespace"))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(late.Annotations).NotTo(HaveKey(infrav1.EngineAnnotation), "a machine that waits is not placed")
	_, err = rt.Inspect(ctx, naming.ContainerName(cluster.Namespace, cluster.Name, late.Name))
	g.Expect(container.IsNotFound(err)).To(BeTrue(), "no container may start on an engine that no longer allows the namespace: %v", err)

	deleteCluster(ctx, g, cc, cluster)
	made, err = rt.List(ctx, map[string]string{container.LabelClusterID: string(cluster.UID)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(made).To(BeEmpty())
}

// TestClusterOnEnginesOutsideASwarmIsRefused lists two engines that allow
// the cluster, on the engine the tests run on, which is in no swarm: a
// cluster on several engines runs on an overlay network of their swarm
// (docs/multihost.md), so the cluster must say so in EnginesReady and
// Ready, make nothing, and still be deleted cleanly.
func TestClusterOnEnginesOutsideASwarmIsRefused(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	info, err := rt.Info(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Swarm).To(BeNil(), "this test needs the engine it runs on in no swarm; "+
		"a make test-multihost killed before its end leaves the swarm it made: hack/multihost/engine.sh down leaves it")
	// Engines that allow every namespace: the cluster's is made with it.
	a, b := createEngine(ctx, g, t), createEngine(ctx, g, t)
	cc, cluster := createCluster(ctx, g, "engines-", infrav1.NetworkSpec{}, func(cc *infrav1.ContainerCluster) {
		cc.Spec.Engines = []infrav1.ClusterEngine{{Name: a.Name}, {Name: b.Name, ControlPlane: ptr.To(false)}}
	})

	enginesReady(ctx, g, cc, metav1.ConditionFalse, infrav1.EngineNotInSwarmReason)
	g.Expect(conditions.Get(cc, infrav1.EnginesReadyCondition).Message).To(ContainSubstring(a.Name + " is in no swarm"))
	g.Expect(conditions.Get(cc, infrav1.ReadyCondition).Reason).To(Equal(infrav1.EngineNotInSwarmReason), "Ready must say why the cluster has no infrastructure")
	expectNothingMade(ctx, g, cc, cluster)
	deleteCluster(ctx, g, cc, cluster)
}
