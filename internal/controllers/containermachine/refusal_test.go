package containermachine_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

// What the admission webhooks cannot judge, because only the container host
// or the node network knows it, is accepted and then reported on the
// ContainerCluster by a named condition whose message names the field. The
// cluster gets no load balancer and is never reported provisioned, so no
// machine launches into it.
func TestClusterSpecsOnlyTheHostCanJudgeAreReportedByName(t *testing.T) {
	testCases := []struct {
		name       string
		mutate     func(*clusterv1.Cluster, *infrav1.ContainerCluster)
		wantReason string
		wantText   string
	}{
		{
			name: "a load balancer image that is not on the host and never pulled",
			mutate: func(_ *clusterv1.Cluster, cc *infrav1.ContainerCluster) {
				cc.Spec.LoadBalancer.Image = "capct/haproxy:never-loaded"
				cc.Spec.LoadBalancer.ImagePullPolicy = infrav1.ImagePullNever
			},
			wantReason: infrav1.ImageNotOnHostReason, wantText: `spec.loadBalancer.image: image "capct/haproxy:never-loaded"`,
		},
		{
			name: "a load balancer image that no registry serves",
			mutate: func(_ *clusterv1.Cluster, cc *infrav1.ContainerCluster) {
				cc.Spec.LoadBalancer.Image = "capct/haproxy:never-pushed"
			},
			wantReason: infrav1.ImagePullFailedReason, wantText: `spec.loadBalancer.image: the manager's engine could not pull image "capct/haproxy:never-pushed"`,
		},
		{
			// Every Managed network's IPv4 subnet lies in 172.16.0.0/12.
			name: "pod CIDRs that overlap the node network",
			mutate: func(c *clusterv1.Cluster, _ *infrav1.ContainerCluster) {
				c.Spec.ClusterNetwork.Pods.CIDRBlocks = []string{"172.16.0.0/12"}
			},
			wantReason: infrav1.InvalidSpecReason, wantText: "spec.clusterNetwork.pods.cidrBlocks[0]",
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "refusal-"}}
			g.Expect(env.Client.Create(ctx, ns)).To(Succeed())
			cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "c1"}}
			cluster := &clusterv1.Cluster{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "c1"},
				Spec: clusterv1.ClusterSpec{
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerCluster", Name: "c1"},
				},
			}
			tc.mutate(cluster, cc)
			g.Expect(env.Client.Create(ctx, cc)).To(Succeed())
			g.Expect(env.Client.Create(ctx, cluster)).To(Succeed())

			g.Eventually(func(g Gomega) {
				get(g, ctx, cc)
				c := conditions.Get(cc, infrav1.LoadBalancerAvailableCondition)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(c.Reason).To(Equal(tc.wantReason))
				g.Expect(c.Message).To(ContainSubstring(tc.wantText))
			}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
			// It stays so: nothing provisioned, no load balancer.
			g.Consistently(func(g Gomega) {
				get(g, ctx, cc)
				g.Expect(cc.Status.Initialization.Provisioned).To(BeNil())
				g.Expect(conditions.GetReason(cc, infrav1.LoadBalancerAvailableCondition)).To(Equal(tc.wantReason))
			}, 2*time.Second, 200*time.Millisecond).Should(Succeed())
			_, err := runtime.Inspect(ctx, naming.LoadBalancerName(ns.Name, "c1"))
			g.Expect(container.IsNotFound(err)).To(BeTrue(), "a load balancer was made: %v", err)

			g.Expect(env.Client.Delete(ctx, cluster)).To(Succeed())
		})
	}
}
