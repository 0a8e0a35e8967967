//go:build engine

// Package machinepool_test scales a ContainerMachinePool on the real Docker
// engine, with Cluster API's MachinePool, Machine and Cluster controllers
// creating and deleting the Machines as they do in a management cluster.
// Machines run a small busybox image, so their bootstrap data runs for real
// but no kubelet starts. The test fails, never skips, without Docker or
// envtest.
package machinepool_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capicontrollers "sigs.k8s.io/cluster-api/controllers"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
	expcontrollers "github.com/capct/cluster-api-provider-container/exp/controllers"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/test/capi"
	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
	"github.com/capct/cluster-api-provider-container/internal/test/images"
)

var (
	env       *envtest.Environment
	rt        *docker.Runtime
	nodeImage string
	lbImage   string
	clusters  []string
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(klog.Background())
	os.Exit(envtest.Run(m, func(ctx context.Context, e *envtest.Environment) error {
		env = e
		d, err := images.NewDocker(ctx)
		if err != nil {
			return err
		}
		rt, nodeImage, lbImage = d.Runtime, d.NodeImage, d.LBImage
		return setup(ctx)
	}, func() { dockertest.RemoveClusters(context.Background(), rt, clusters) }))
}

func setup(ctx context.Context) error {
	mgr := env.Manager
	clusterCache, err := capi.SetupCore(ctx, mgr)
	if err != nil {
		return err
	}
	if err := (&capicontrollers.MachinePoolReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: clusterCache,
	}).SetupWithManager(ctx, mgr, capi.Options()); err != nil {
		return fmt.Errorf("failed to set up Cluster API's MachinePool controller: %w", err)
	}
	workload := func(context.Context, client.ObjectKey) (client.Client, error) { return env.Client, nil }
	if err := capi.SetupProvider(ctx, mgr, rt, clusterCache, workload); err != nil {
		return err
	}
	return (&expcontrollers.ContainerMachinePoolReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Engines: engines.Single(rt),
	}).SetupWithManager(ctx, mgr, capi.Options())
}

const bootstrapData = `#cloud-config
runcmd:
- echo success > /run/cluster-api/bootstrap-success.complete
`

// TestScalePoolOnDocker scales a pool 0 → 5 → 2 → 0 and checks at each
// step that containers, ContainerMachines, Machines and the pool's
// providerIDList agree, then deletes the pool and the cluster and checks
// that no labelled container is left.
func TestScalePoolOnDocker(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	name := "capct-mp-" + rand.String(5)
	clusters = append(clusters, name)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "mp-docker-"}}
	g.Expect(env.Client.Create(ctx, ns)).To(Succeed())

	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
		Spec: infrav1.ContainerClusterSpec{LoadBalancer: infrav1.LoadBalancerSpec{Image: lbImage}}}
	g.Expect(env.Client.Create(ctx, cc)).To(Succeed())
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerCluster", Name: name}}}
	g.Expect(env.Client.Create(ctx, cluster)).To(Succeed())
	g.Expect(env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name + "-kubeconfig", Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
		Data:       map[string][]byte{"value": env.KubeConfig()},
		Type:       clusterv1.ClusterSecretType,
	})).To(Succeed())
	g.Expect(env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "bootstrap", Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
		Data:       map[string][]byte{"value": []byte(bootstrapData), "format": []byte("cloud-config")},
		Type:       clusterv1.ClusterSecretType,
	})).To(Succeed())
	pool := &expinfrav1.ContainerMachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "pool"},
		Spec: expinfrav1.ContainerMachinePoolSpec{Template: infrav1.ContainerMachineSpec{Image: nodeImage}}}
	g.Expect(env.Client.Create(ctx, pool)).To(Succeed())
	mp := &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "workers", Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
		Spec: clusterv1.MachinePoolSpec{
			ClusterName: name,
			Replicas:    ptr.To[int32](0),
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: name, Version: "v1.35.4",
				Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("bootstrap")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: expinfrav1.GroupVersion.Group, Kind: "ContainerMachinePool", Name: "pool"},
			}},
		},
	}
	g.Expect(env.Client.Create(ctx, mp)).To(Succeed())

	// settled waits until n containers of the cluster run, n
	// ContainerMachines are provisioned with n Machines, and the pool lists
	// their n provider IDs in order.
	owner := container.Owner{Namespace: ns.Name, Cluster: cluster.Name, ClusterID: string(cluster.UID)}
	settled := func(n int) {
		t.Helper()
		start := time.Now()
		g.Eventually(func(g Gomega) {
			containers, err := container.ListOwned(ctx, rt, owner, map[string]string{container.LabelRole: string(container.RoleWorker)})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(containers).To(HaveLen(n), "containers")
			cms := &infrav1.ContainerMachineList{}
			g.Expect(env.Client.List(ctx, cms, client.InNamespace(ns.Name))).To(Succeed())
			g.Expect(cms.Items).To(HaveLen(n), "ContainerMachines")
			for _, cm := range cms.Items {
				g.Expect(cm.Status.Initialization.Provisioned).To(Equal(ptr.To(true)), "ContainerMachine %s", cm.Name)
			}
			machines := &clusterv1.MachineList{}
			g.Expect(env.Client.List(ctx, machines, client.InNamespace(ns.Name))).To(Succeed())
			g.Expect(machines.Items).To(HaveLen(n), "Machines")
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
			g.Expect(pool.Spec.ProviderIDList).To(HaveLen(n))
			g.Expect(slices.IsSorted(pool.Spec.ProviderIDList)).To(BeTrue(), "providerIDList is not sorted: %v", pool.Spec.ProviderIDList)
			g.Expect(pool.Status.Replicas).To(BeEquivalentTo(n))
		}, 3*time.Minute, 500*time.Millisecond).Should(Succeed())
		t.Logf("Pool settled at %d replicas in %s", n, time.Since(start).Round(100*time.Millisecond))
	}
	scale := func(n int32) {
		g.Eventually(func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(mp), mp); err != nil {
				return err
			}
			mp.Spec.Replicas = ptr.To(n)
			return env.Client.Update(ctx, mp)
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
	}

	scale(5)
	settled(5)
	scale(2)
	settled(2)
	scale(0)
	settled(0)

	g.Expect(env.Client.Delete(ctx, mp)).To(Succeed())
	g.Expect(env.Client.Delete(ctx, cluster)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(cc), &infrav1.ContainerCluster{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "ContainerCluster still there: %v", err)
		left, err := container.ListOwned(ctx, rt, owner, nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(left).To(BeEmpty())
	}, 2*time.Minute, 500*time.Millisecond).Should(Succeed())
}
