//go:build engine

package nodeimage

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/container/runtimetest"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/podnetwork"
	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

// TestPodNetworkDualStack programs the pod network of a dual-stack cluster
// into two containers of the real node image, with its iproute2 and
// iptables, on a real Docker network: each node routes the other's IPv4 and
// IPv6 pod CIDRs through the other's address of that family and
// masquerades its own pods' traffic leaving the pod network, for both
// families. An address in one node's IPv6 pod CIDR answers the other; once
// that node's machine leaves, the route is gone and the address does not.
func TestPodNetworkDualStack(t *testing.T) {
	ctx := ctrl.LoggerInto(context.Background(), testr.New(t))
	rt := dockertest.NewRuntime(t)
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "podnet-" + runID, UID: types.UID("uid-podnet-" + runID)}}
	cluster.Spec.ClusterNetwork.Pods.CIDRBlocks = []string{"10.244.0.0/16", "fd00:10:244::/56"}
	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: cluster.Name},
		Spec: infrav1.ContainerClusterSpec{ClusterID: "id-podnet-" + runID}}
	owner := naming.ClusterOwner(cluster, cc)
	network := naming.NetworkName(cluster, cc)
	if _, err := rt.EnsureNetwork(ctx, container.NetworkSpec{Name: network, Owner: owner, IPFamily: container.DualStack}); err != nil {
		t.Fatalf("creating network %s: %v", network, err)
	}
	t.Cleanup(func() {
		if err := rt.DeleteNetwork(context.Background(), network, owner); err != nil {
			t.Errorf("deleting network %s: %v", network, err)
		}
	})
	scheme, err := envtest.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	mgmt := fakeclient.NewClientBuilder().WithScheme(scheme).Build()

	podCIDRs := map[string]string{"a": "10.244.0.0/24,fd00:10:244::/64", "b": "10.244.1.0/24,fd00:10:244:1::/64"}
	nodes := map[string]*container.Machine{}
	for _, name := range []string{"a", "b"} {
		cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			Labels:      map[string]string{clusterv1.ClusterNameLabel: cluster.Name},
			Annotations: map[string]string{infrav1.PodCIDRsAnnotation: podCIDRs[name]}}}
		if err := mgmt.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		machine := owner.ForMachine(name)
		containerName := naming.ContainerName("ns", cluster.Name, name)
		// The node image's own init is not needed to hold routes and
		// rules; a loop keeps the container running.
		if _, err := rt.CreateMachine(ctx, container.MachineSpec{Name: containerName, Image: nodeImage, Network: network,
			Labels: machine.Labels(), Role: container.RoleWorker, Privileged: ptr.To(true), Entrypoint: runtimetest.LoopCmd}); err != nil {
			t.Fatalf("creating container %s: %v", containerName, err)
		}
		t.Cleanup(func() {
			if err := rt.Delete(context.Background(), containerName, machine); err != nil {
				t.Errorf("deleting container %s: %v", containerName, err)
			}
		})
		if err := rt.Start(ctx, containerName, machine); err != nil {
			t.Fatal(err)
		}
		if nodes[name], err = rt.Inspect(ctx, containerName); err != nil {
			t.Fatal(err)
		}
		if !nodes[name].IPv4.IsValid() || !nodes[name].IPv6.IsValid() {
			t.Fatalf("%s has addresses %v and %v, want one per family", containerName, nodes[name].IPv4, nodes[name].IPv6)
		}
	}
	a, b := nodes["a"], nodes["b"]

	syncer := podnetwork.NewSyncer(engines.Single(rt), mgmt, nil)
	if err := syncer.Sync(ctx, cluster, cc); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	for _, want := range []struct{ node, cmd, line string }{
		{b.Name, "ip -o -4 route show", "10.244.0.0/24 via " + a.IPv4.String()},
		{b.Name, "ip -o -6 route show", "fd00:10:244::/64 via " + a.IPv6.String()},
		{a.Name, "ip -o -6 route show", "fd00:10:244:1::/64 via " + b.IPv6.String()},
		{a.Name, "iptables -t nat -S POSTROUTING", "-A POSTROUTING -s 10.244.0.0/24 ! -d 10.244.0.0/16 -j MASQUERADE"},
		{a.Name, "ip6tables -t nat -S POSTROUTING", "-A POSTROUTING -s fd00:10:244::/64 ! -d fd00:10:244::/56 -j MASQUERADE"},
		{a.Name, "cat " + podnetwork.CNIConfigPath, `"subnet": "fd00:10:244::/64"`},
	} {
		if out := nodeExec(t, want.node, want.cmd); !strings.Contains(out, want.line) {
			t.Fatalf("%s in %s lacks %q:\n%s", want.cmd, want.node, want.line, out)
		}
	}

	// A "pod" in a's IPv6 pod CIDR answers b, through the route.
	nodeExec(t, a.Name, "ip addr add fd00:10:244::10/128 dev lo && "+
		"(socat TCP6-LISTEN:8080,bind=[fd00:10:244::10],fork,reuseaddr SYSTEM:'echo pong' >/dev/null 2>&1 &)")
	reach := func() (string, error) {
		return docker("exec", b.Name, "bash", "-c", "timeout 3 socat -T2 - TCP6:[fd00:10:244::10]:8080 </dev/null")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := reach()
		if err == nil && out == "pong" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b cannot reach fd00:10:244::10 in a's pod CIDR: %q %v\n%s", out, err, nodeExec(t, b.Name, "ip -6 route show"))
		}
		time.Sleep(500 * time.Millisecond)
	}

	// A sync with nothing new runs nothing; a second one after a left
	// takes its routes out of b.
	if err := syncer.Sync(ctx, cluster, cc); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if err := mgmt.Delete(ctx, &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Delete(ctx, a.Name, owner.ForMachine("a")); err != nil {
		t.Fatal(err)
	}
	if err := syncer.Sync(ctx, cluster, cc); err != nil {
		t.Fatalf("Sync after a left: %v", err)
	}
	for _, cmd := range []string{"ip -o -4 route show", "ip -o -6 route show"} {
		if out := nodeExec(t, b.Name, cmd); strings.Contains(out, "10.244.0.0/24") || strings.Contains(out, "fd00:10:244::/64") {
			t.Fatalf("b still routes a's pod CIDRs after a left:\n%s", out)
		}
	}
	if out, err := reach(); err == nil && out == "pong" {
		t.Fatalf("fd00:10:244::10 still answers b after a left: %q", out)
	}
}
