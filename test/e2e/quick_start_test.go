//go:build e2e

package e2e

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterctlcluster "sigs.k8s.io/cluster-api/cmd/clusterctl/client/cluster"
	capie2e "sigs.k8s.io/cluster-api/test/e2e"
	"sigs.k8s.io/cluster-api/test/framework"
)

var _ = Describe("When following the Cluster API quick-start", Label("quick-start"), func() {
	capie2e.QuickStartSpec(ctx, func() capie2e.QuickStartSpecInput {
		return capie2e.QuickStartSpecInput{
			E2EConfig:              e2eConfig,
			ClusterctlConfigPath:   clusterctlConfigPath,
			BootstrapClusterProxy:  bootstrapClusterProxy,
			ArtifactFolder:         artifactFolder,
			SkipCleanup:            skipCleanup,
			InfrastructureProvider: ptr.To("container"),
			PostMachinesProvisioned: func(proxy framework.ClusterProxy, namespace, clusterName string) {
				validateResilience(proxy, namespace, clusterName, false, "quick-start")
			},
		}
	})
})

var _ = Describe("When following the Cluster API quick-start with ClusterClass", Label("quick-start-clusterclass"), func() {
	capie2e.QuickStartSpec(ctx, func() capie2e.QuickStartSpecInput {
		return capie2e.QuickStartSpecInput{
			E2EConfig:              e2eConfig,
			ClusterctlConfigPath:   clusterctlConfigPath,
			BootstrapClusterProxy:  bootstrapClusterProxy,
			ArtifactFolder:         artifactFolder,
			SkipCleanup:            skipCleanup,
			InfrastructureProvider: ptr.To("container"),
			// templates/cluster-template-topology.yaml with ClusterClass
			// quick-start; its variables networkName and networkMode put the
			// cluster on the management cluster's network.
			Flavor: ptr.To("topology"),
			PostMachinesProvisioned: func(proxy framework.ClusterProxy, namespace, clusterName string) {
				validateResilience(proxy, namespace, clusterName, true, "quick-start")
			},
		}
	})
})

var _ = Describe("When following the Cluster API quick-start with dual stack", Label("quick-start-dualstack"), func() {
	capie2e.QuickStartSpec(ctx, func() capie2e.QuickStartSpecInput {
		return capie2e.QuickStartSpecInput{
			E2EConfig:              e2eConfig,
			ClusterctlConfigPath:   clusterctlConfigPath,
			BootstrapClusterProxy:  bootstrapClusterProxy,
			ArtifactFolder:         artifactFolder,
			SkipCleanup:            skipCleanup,
			InfrastructureProvider: ptr.To("container"),
			// IPv4 and IPv6 pod and service networks, on the management
			// cluster's network, which hack/e2e.sh makes dual stack.
			Flavor: ptr.To("dualstack"),
			// Cluster API's own dual-stack quick-starts run kubetest, whose
			// image would be pulled; these checks stand in for it.
			PostMachinesProvisioned: func(proxy framework.ClusterProxy, namespace, clusterName string) {
				validateDualStack(proxy.GetWorkloadCluster(ctx, namespace, clusterName))
			},
		}
	})
})

var _ = Describe("When following the Cluster API quick-start on IPv6 only", Label("quick-start-ipv6"), func() {
	capie2e.QuickStartSpec(ctx, func() capie2e.QuickStartSpecInput {
		return capie2e.QuickStartSpecInput{
			E2EConfig:              e2eConfig,
			ClusterctlConfigPath:   clusterctlConfigPath,
			BootstrapClusterProxy:  bootstrapClusterProxy,
			ArtifactFolder:         artifactFolder,
			SkipCleanup:            skipCleanup,
			InfrastructureProvider: ptr.To("container"),
			// IPv6 pod and service networks only, nodes on their IPv6
			// addresses, on the management cluster's dual-stack network.
			Flavor: ptr.To("ipv6"),
			PostMachinesProvisioned: func(proxy framework.ClusterProxy, namespace, clusterName string) {
				validateIPv6Only(proxy, namespace, clusterName)
			},
		}
	})
})

// validateDualStack checks what makes a workload cluster dual stack: every
// Node has a pod CIDR of each family (CAPCT's node IPAM), and its API server
// gives a Service that requires both families an address of each.
func validateDualStack(workload framework.ClusterProxy) {
	c := workload.GetClient()
	By("Checking that every Node has an IPv4 and an IPv6 pod CIDR")
	nodes := &corev1.NodeList{}
	Expect(c.List(ctx, nodes)).To(Succeed())
	Expect(nodes.Items).NotTo(BeEmpty())
	for _, n := range nodes.Items {
		Expect(ipFamilies(n.Spec.PodCIDRs)).To(Equal([]string{"IPv4", "IPv6"}), "Node %s's pod CIDRs %v", n.Name, n.Spec.PodCIDRs)
	}
	By("Checking that a Service requiring dual stack gets an address of each family")
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "dualstack-", Namespace: metav1.NamespaceDefault},
		Spec: corev1.ServiceSpec{
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack),
			Ports:          []corev1.ServicePort{{Port: 80}},
		},
	}
	Expect(c.Create(ctx, svc)).To(Succeed())
	defer func() { Expect(c.Delete(ctx, svc)).To(Succeed()) }()
	Expect(ipFamilies(svc.Spec.ClusterIPs)).To(Equal([]string{"IPv4", "IPv6"}), "Service %s's cluster IPs %v", svc.Name, svc.Spec.ClusterIPs)
}

// ipFamilies names the IP family of each address or prefix, in order.
func ipFamilies(values []string) []string {
	families := make([]string, 0, len(values))
	for _, v := range values {
		family := "IPv4"
		if strings.Contains(v, ":") {
			family = "IPv6"
		}
		families = append(families, family)
	}
	return families
}

// validateResilience runs the checks CAPI's own quick-start runs once the
// machines are provisioned, with CAPCT's assertion maps beside CAPI's:
// owner references and finalizers that come back after they are stripped,
// owner references moved to the current API version, and no write churn
// once the cluster is stable.
func validateResilience(proxy framework.ClusterProxy, namespace, clusterName string, topologyManaged bool, spec string) {
	filter := clusterctlcluster.FilterClusterObjectsWithNameFilter(clusterName)
	owners := []map[string]func(types.NamespacedName, []metav1.OwnerReference) error{
		framework.CoreOwnerReferenceAssertion,
		framework.ExpOwnerReferenceAssertions,
		containerInfraOwnerReferenceAssertions(topologyManaged),
		framework.KubeadmBootstrapOwnerReferenceAssertions,
		framework.KubeadmControlPlaneOwnerReferenceAssertions(topologyManaged),
		framework.KubernetesReferenceAssertions,
	}
	By("Checking that owner references are resilient")
	framework.ValidateOwnerReferencesResilience(ctx, proxy, namespace, clusterName, filter, owners...)
	By("Checking that owner references are updated to the correct API version")
	framework.ValidateOwnerReferencesOnUpdate(ctx, proxy, namespace, clusterName, filter, owners...)
	By("Checking that finalizers are resilient")
	core := framework.CoreFinalizersAssertionWithLegacyClusters
	if topologyManaged {
		core = framework.CoreFinalizersAssertionWithClassyClusters
	}
	framework.ValidateFinalizersResilience(ctx, proxy, namespace, clusterName, filter,
		core,
		framework.KubeadmControlPlaneFinalizersAssertion,
		framework.ExpFinalizersAssertion,
		containerInfraFinalizersAssertion,
	)
	By("Checking that resourceVersions are stable")
	framework.ValidateResourceVersionStable(ctx, framework.ValidateResourceVersionStableInput{
		ClusterProxy:             proxy,
		Namespace:                namespace,
		OwnerGraphFilterFunction: filter,
		WaitToBecomeStable:       e2eConfig.GetIntervals(spec, "wait-resource-versions-become-stable"),
		WaitToRemainStable:       e2eConfig.GetIntervals(spec, "wait-resource-versions-remain-stable"),
	})
}

// validateIPv6Only checks what makes a workload cluster IPv6 only: every
// Node has one pod CIDR, IPv6 (CAPCT's node IPAM), and an IPv6 InternalIP
// first; a Service gets an IPv6 cluster IP only; CoreDNS's pods answer
// behind their Service, over the pod network, through the API server's
// service proxy (from the control plane's node) and through a NodePort
// from this host (kube-proxy), with the upgrade specs' probes.
func validateIPv6Only(mgmt framework.ClusterProxy, namespace, clusterName string) {
	workload := mgmt.GetWorkloadCluster(ctx, namespace, clusterName)
	c := workload.GetClient()
	By("Checking that every Node has an IPv6 pod CIDR only and an IPv6 InternalIP")
	nodes := &corev1.NodeList{}
	Expect(c.List(ctx, nodes)).To(Succeed())
	Expect(nodes.Items).NotTo(BeEmpty())
	for _, n := range nodes.Items {
		Expect(ipFamilies(n.Spec.PodCIDRs)).To(Equal([]string{"IPv6"}), "Node %s's pod CIDRs %v", n.Name, n.Spec.PodCIDRs)
		var internal []string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = append(internal, a.Address)
			}
		}
		Expect(internal).NotTo(BeEmpty(), "Node %s has no InternalIP", n.Name)
		Expect(ipFamilies(internal[:1])).To(Equal([]string{"IPv6"}), "Node %s's InternalIPs %v", n.Name, internal)
	}
	By("Checking that a Service gets an IPv6 cluster IP only")
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ipv6-", Namespace: metav1.NamespaceDefault},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}
	Expect(c.Create(ctx, svc)).To(Succeed())
	defer func() { Expect(c.Delete(ctx, svc)).To(Succeed()) }()
	Expect(ipFamilies(svc.Spec.ClusterIPs)).To(Equal([]string{"IPv6"}), "Service %s's cluster IPs %v", svc.Name, svc.Spec.ClusterIPs)
	By("Checking that CoreDNS, on the pod network, is available through the cluster's DNS Service")
	cs := workload.GetClientSet()
	Eventually(func(g Gomega) {
		dns, err := cs.CoreV1().Services(metav1.NamespaceSystem).Get(ctx, "kube-dns", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ipFamilies(dns.Spec.ClusterIPs)).To(Equal([]string{"IPv6"}))
		endpointSlices, err := cs.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem).List(ctx,
			metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kube-dns"})
		g.Expect(err).NotTo(HaveOccurred())
		ready := 0
		for _, s := range endpointSlices.Items {
			g.Expect(s.AddressType).To(Equal(discoveryv1.AddressTypeIPv6))
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					ready++
				}
			}
		}
		g.Expect(ready).To(BeNumerically(">", 0), "no ready CoreDNS endpoint")
	}, 3*time.Minute, 5*time.Second).Should(Succeed())
	By("Checking pod and Service traffic over IPv6: the API server's service proxy and a NodePort to CoreDNS")
	nodePort := createProbeService(cs)
	for name, check := range map[string]func(context.Context) (failureClass, error){
		"api-proxy": apiProxyCheck(cs),
		"nodeport":  nodePortCheck(mgmt.GetClient(), namespace, clusterName, nodePort),
	} {
		Eventually(func() error {
			cctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			_, err := check(cctx)
			return err
		}, probeBefore, 2*time.Second).Should(Succeed(), "the %s probe never answered", name)
	}
}
