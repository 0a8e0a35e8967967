//go:build engine

package containercluster_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
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
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/loadbalancer"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

// createControlPlaneMachine creates a control-plane Machine of cluster
// whose busybox container runs the test's cloud-config, and waits for the
// ContainerMachine to be provisioned.
func createControlPlaneMachine(ctx context.Context, g Gomega, cluster *clusterv1.Cluster, machineName string) *infrav1.ContainerMachine {
	name, ns := cluster.Name, cluster.Namespace
	labels := map[string]string{clusterv1.ClusterNameLabel: name, clusterv1.MachineControlPlaneLabel: ""}
	g.Expect(env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: machineName + "-bootstrap", Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
		Data:       map[string][]byte{"value": []byte(bootstrapData), "format": []byte("cloud-config")},
		Type:       clusterv1.ClusterSecretType,
	})).To(Succeed())
	cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: machineName, Labels: labels},
		Spec: infrav1.ContainerMachineSpec{Image: nodeImage}}
	g.Expect(env.Client.Create(ctx, cm)).To(Succeed())
	g.Expect(env.Client.Create(ctx, &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: machineName, Labels: labels,
			Annotations: map[string]string{clusterv1.ExcludeNodeDrainingAnnotation: "", clusterv1.ExcludeWaitForNodeVolumeDetachAnnotation: ""}},
		Spec: clusterv1.MachineSpec{
			ClusterName: name, Version: "v1.35.4",
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(machineName + "-bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerMachine", Name: machineName},
		},
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
		g.Expect(cm.Status.Initialization.Provisioned).To(Equal(ptr.To(true)), "Bootstrapped: %v", conditions.Get(cm, infrav1.BootstrappedCondition))
	}, 90*time.Second, 200*time.Millisecond).Should(Succeed())
	return cm
}

// killMainProcess kills the container's PID 1 from the host, as a crash
// would, and waits for it to run again. For a node, only the engine's
// restart policy can bring it back (CAPCT reports a stopped node, it does
// not start it); the load balancer is started by whichever of the engine
// and the ContainerCluster controller comes first, and a start by the
// controller resets the engine's restart count.
func killMainProcess(ctx context.Context, g Gomega, name string, byRestartPolicy bool) {
	before, err := dockertest.KillMainProcess(ctx, rt, name)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		restarts, _, err := dockertest.RestartCount(ctx, rt, name)
		g.Expect(err).NotTo(HaveOccurred())
		if byRestartPolicy {
			g.Expect(restarts).To(BeNumerically(">", before), "the engine did not restart %s", name)
		}
		m, err := rt.Inspect(ctx, name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(m.State).To(Equal(container.StateRunning))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
}

// TestRestartedContainersKeepAddressesAndPort restarts a control-plane node
// and the load balancer behind CAPCT's back, with a foreign container
// starting on the network while the node is down, and expects both back on
// the addresses the cluster knows and the load balancer on its host port.
func TestRestartedContainersKeepAddressesAndPort(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cc, cluster := createCluster(ctx, g, "restart-", infrav1.NetworkSpec{})
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), cc)).To(Succeed())
		g.Expect(cc.Status.Initialization.Provisioned).To(Equal(ptr.To(true)), "LoadBalancerAvailable: %v", conditions.Get(cc, infrav1.LoadBalancerAvailableCondition))
		g.Expect(cc.Status.LoadBalancer.HostPort).NotTo(BeZero())
	}, 60*time.Second, 200*time.Millisecond).Should(Succeed())
	cm := createControlPlaneMachine(ctx, g, cluster, "cp-0")
	nodeName := naming.ContainerName(cluster.Namespace, cluster.Name, "cp-0")
	lbName := naming.LoadBalancerName(cluster.Namespace, cluster.Name)
	nodeOwner := naming.ClusterOwner(cluster, cc).ForMachine("cp-0")
	node, err := rt.Inspect(ctx, nodeName)
	g.Expect(err).NotTo(HaveOccurred())
	lb, err := rt.Inspect(ctx, lbName)
	g.Expect(err).NotTo(HaveOccurred())
	hostPort := int(cc.Status.LoadBalancer.HostPort)
	g.Expect(lb.HostPort(loadbalancer.APIServerPort)).To(Equal(hostPort))
	g.Expect(cc.Spec.ControlPlaneEndpoint.Host).To(Equal(lb.IPv4.String()))
	g.Expect(cm.Status.Addresses).To(ContainElement(clusterv1.MachineAddress{Type: clusterv1.MachineInternalIP, Address: node.IPv4.String()}))

	// Both come back after a crash, and with the engine.
	for name, want := range map[string]string{nodeName: "unless-stopped", lbName: "always"} {
		_, policy, err := dockertest.RestartCount(ctx, rt, name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(policy).To(Equal(want), "restart policy of %s", name)
	}
	killMainProcess(ctx, g, nodeName, true)
	killMainProcess(ctx, g, lbName, false)

	// While the node is stopped, a container CAPCT knows nothing about
	// starts on the network and takes whatever address the engine gives.
	g.Expect(rt.Stop(ctx, nodeName, nodeOwner, 10*time.Second)).To(Succeed())
	remove, err := dockertest.RunForeign(ctx, rt, cluster.Name+"-foreign", naming.NetworkName(cluster, cc), nodeImage)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(remove)
	g.Expect(rt.Start(ctx, nodeName, nodeOwner)).To(Succeed())
	// The load balancer is stopped and started again. The controller
	// starts a load balancer it finds stopped, and the engine fails the
	// later of two racing starts ("id already in use"), so the test starts
	// it only while it is still stopped, and waits for it to run.
	lbOwner := container.OwnerOf(lb.Labels)
	g.Expect(rt.Stop(ctx, lbName, lbOwner, 10*time.Second)).To(Succeed())
	g.Eventually(func(g Gomega) {
		m, err := rt.Inspect(ctx, lbName)
		g.Expect(err).NotTo(HaveOccurred())
		if m.State != container.StateRunning {
			_ = rt.Start(ctx, lbName, lbOwner)
		}
		g.Expect(m.State).To(Equal(container.StateRunning))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	after, err := rt.Inspect(ctx, nodeName)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after.IPv4).To(Equal(node.IPv4), "the node came back on another address")
	lbAfter, err := rt.Inspect(ctx, lbName)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lbAfter.IPv4).To(Equal(lb.IPv4), "the load balancer came back on another address")
	g.Expect(lbAfter.HostPort(loadbalancer.APIServerPort)).To(Equal(hostPort), "the load balancer came back on another host port")

	// CAPCT keeps reporting the same port and address, and the load
	// balancer answers on the port written kubeconfigs name.
	wake(ctx, g, cc, "after-restart")
	g.Consistently(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), cc)).To(Succeed())
		g.Expect(int(cc.Status.LoadBalancer.HostPort)).To(Equal(hostPort))
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
		g.Expect(cm.Status.Addresses).To(ContainElement(clusterv1.MachineAddress{Type: clusterv1.MachineInternalIP, Address: node.IPv4.String()}))
	}, 3*time.Second, 500*time.Millisecond).Should(Succeed())
	g.Eventually(func() error {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", hostPort), time.Second)
		if err == nil {
			_ = conn.Close()
		}
		return err
	}, 10*time.Second, 200*time.Millisecond).Should(Succeed())
}

// stats asks the running HAProxy of lb for its statistics.
func stats(g Gomega, lb *container.Machine) string {
	resp, err := http.Get(fmt.Sprintf("http://%s/stats;csv", net.JoinHostPort(lb.IPv4.String(), "8404")))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	return string(body)
}

var markerRE = regexp.MustCompile(`(?m)^backend (capct-config-[0-9a-f]+)$`)

// TestBrokenHAProxyTemplateKeepsTheOldConfiguration switches a cluster's
// custom HAProxy template to one HAProxy refuses, and expects the refusal
// in LoadBalancerAvailable while HAProxy keeps running the previous
// configuration.
func TestBrokenHAProxyTemplateKeepsTheOldConfiguration(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cc, cluster := createCluster(ctx, g, "haproxy-", infrav1.NetworkSpec{})
	const good = `global
  maxconn 1000
defaults
  mode tcp
  timeout connect 5s
  timeout client 1h
  timeout server 1h
frontend stats
  mode http
  bind *:8404
  stats enable
  stats uri /stats
frontend control-plane
  bind *:{{ .FrontendPort }}
  default_backend kube-apiservers
backend kube-apiservers
{{- range .Backends }}
  server {{ .Name }} {{ JoinHostPort .Address $.BackendPort }} check
{{- end }}
`
	template := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: "haproxy-template"},
		Data: map[string]string{"value": good}}
	g.Expect(env.Client.Create(ctx, template)).To(Succeed())
	before := cc.DeepCopy()
	cc.Spec.LoadBalancer.CustomHAProxyConfigTemplateRef = &infrav1.LocalObjectReference{Name: template.Name}
	g.Expect(env.Client.Patch(ctx, cc, client.MergeFrom(before))).To(Succeed())

	lbName := naming.LoadBalancerName(cluster.Namespace, cluster.Name)
	var lbOwner container.Owner
	var oldMarker string
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), cc)).To(Succeed())
		c := conditions.Get(cc, infrav1.LoadBalancerAvailableCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "LoadBalancerAvailable: %v", c)
		lbOwner = naming.ClusterOwner(cluster, cc).ForMachine(naming.LoadBalancerMachine(cluster.Name))
		cfg, err := rt.ReadFile(ctx, lbName, lbOwner, loadbalancer.ConfigPath)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(cfg)).To(ContainSubstring("maxconn 1000"), "the custom template is not in use yet")
		m := markerRE.FindStringSubmatch(string(cfg))
		g.Expect(m).To(HaveLen(2))
		oldMarker = m[1]
	}, 60*time.Second, 200*time.Millisecond).Should(Succeed())
	lb, err := rt.Inspect(ctx, lbName)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stats(g, lb)).To(ContainSubstring(oldMarker+",BACKEND,"), "HAProxy does not run the configuration CAPCT confirmed")

	// A template that renders but that HAProxy refuses.
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(template), template)).To(Succeed())
	template.Data["value"] = good + "  no-such-haproxy-keyword on\n"
	g.Expect(env.Client.Update(ctx, template)).To(Succeed())
	wake(ctx, g, cc, "broken-template")

	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(cc), cc)).To(Succeed())
		c := conditions.Get(cc, infrav1.LoadBalancerAvailableCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(infrav1.LoadBalancerConfigInvalidReason))
		g.Expect(c.Message).To(ContainSubstring("no-such-haproxy-keyword"))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	// The previous configuration stays in place and keeps serving.
	cfg, err := rt.ReadFile(ctx, lbName, lbOwner, loadbalancer.ConfigPath)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(cfg)).To(ContainSubstring("backend " + oldMarker))
	g.Expect(string(cfg)).NotTo(ContainSubstring("no-such-haproxy-keyword"))
	g.Expect(stats(g, lb)).To(ContainSubstring(oldMarker+",BACKEND,"), "HAProxy no longer runs the previous configuration")
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", cc.Status.LoadBalancer.HostPort), time.Second)
	g.Expect(err).NotTo(HaveOccurred(), "the load balancer stopped listening")
	_ = conn.Close()
}
