package containercluster_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

// TestClusterOnEnginesIsRefusedUntilBuilt lists engines on a cluster, which
// the API accepts before the machines on several engines exist
// (docs/multihost.md): the cluster must say so in EnginesReady and Ready,
// make nothing on the manager's own engine, and still be deleted cleanly.
func TestClusterOnEnginesIsRefusedUntilBuilt(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cc, cluster := createCluster(ctx, g, "engines-", infrav1.NetworkSpec{}, func(cc *infrav1.ContainerCluster) {
		cc.Spec.Engines = []infrav1.ClusterEngine{{Name: "engine-a"}, {Name: "engine-b"}}
	})

	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), cc)).To(Succeed())
		engines := conditions.Get(cc, infrav1.EnginesReadyCondition)
		g.Expect(engines).NotTo(BeNil())
		g.Expect(engines.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(engines.Reason).To(Equal(infrav1.NotSupportedYetReason))
		g.Expect(engines.Message).To(ContainSubstring("spec.engines"))
		ready := conditions.Get(cc, infrav1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(infrav1.NotSupportedYetReason), "Ready must say why the cluster has no infrastructure")
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	// A reconcile more, brought by a change, must make nothing either.
	cc.Annotations = map[string]string{"test": "again"}
	g.Expect(env.Client.Update(ctx, cc)).To(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), cc)).To(Succeed())
		g.Expect(cc.Status.Initialization.Provisioned).To(BeNil())
		g.Expect(cc.Spec.ControlPlaneEndpoint.Host).To(BeEmpty())
		made, err := rt.List(ctx, map[string]string{container.LabelClusterID: string(cluster.UID)})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(made).To(BeEmpty(), "a container was made for a cluster on engines that are not built")
		_, err = rt.InspectNetwork(ctx, naming.NetworkName(cluster, cc))
		g.Expect(container.IsNotFound(err)).To(BeTrue(), "a network was made for a cluster on engines that are not built: %v", err)
	}, 3*time.Second, 500*time.Millisecond).Should(Succeed())

	g.Expect(env.Client.Delete(ctx, cluster)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), &infrav1.ContainerCluster{}))
	}, 60*time.Second, 200*time.Millisecond).Should(BeTrue())
}
