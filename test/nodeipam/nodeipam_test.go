// Package nodeipam_test proves, on a real Docker engine, that the routes and
// CNI config CAPCT's node IPAM programs make one node's pod CIDR reachable
// from another node container. The tests fail, never skip, when the engine
// is unreachable: run hack/ensure-docker.sh first.
package nodeipam_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/container/runtimetest"
	"github.com/capct/cluster-api-provider-container/internal/lifecycle"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/nodeipam"
	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

func run(t *testing.T, rt container.Runtime, name string, cmd ...string) (string, int) {
	t.Helper()
	m, err := rt.Inspect(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	res, err := rt.Exec(context.Background(), name, container.OwnerOf(m.Labels), container.ExecInput{Cmd: cmd, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("%s in %s: %v", strings.Join(cmd, " "), name, err)
	}
	return string(res.Stdout) + string(res.Stderr), res.ExitCode
}

func TestPodCIDRReachableAcrossNodes(t *testing.T) {
	ctx := context.Background()
	rt := dockertest.NewRuntime(t)
	img, err := dockertest.BusyboxImage(context.Background(), rt)
	if err != nil {
		t.Fatal(err)
	}

	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	id := hex.EncodeToString(suffix)
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ipam-" + id, UID: types.UID("uid-ipam-" + id)}}
	cluster.Spec.ClusterNetwork.Pods.CIDRBlocks = []string{"10.244.0.0/16"}
	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: cluster.Name},
		Spec: infrav1.ContainerClusterSpec{ClusterID: "id-ipam-" + id}}
	owner := naming.ClusterOwner(cluster, cc)
	cluster.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerCluster", Name: cc.Name}

	network := naming.NetworkName(cluster, cc)
	if _, err := rt.EnsureNetwork(ctx, container.NetworkSpec{Name: network, Owner: owner}); err != nil {
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
	mgmt := fakeclient.NewClientBuilder().WithScheme(scheme).WithObjects(cluster, cc).WithStatusSubresource(&infrav1.ContainerMachine{}).Build()
	workload := fakeclient.NewClientBuilder().WithScheme(scheme).Build()
	a := nodeipam.New(mgmt, mgmt, rt, nil, record.NewFakeRecorder(100))

	var scopes []*lifecycle.MachineScope
	for _, name := range []string{"a", "b"} {
		cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			Labels: map[string]string{clusterv1.ClusterNameLabel: cluster.Name}}}
		s := &lifecycle.MachineScope{Cluster: cluster, ContainerCluster: cc, ContainerMachine: cm}
		cm.Spec.ProviderID = s.ProviderID()
		if err := mgmt.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		_, err := rt.CreateMachine(ctx, container.MachineSpec{Name: s.ContainerName(), Image: img, Network: network,
			Labels: s.ContainerLabels(), Role: container.RoleWorker, Privileged: ptr.To(true), Cmd: runtimetest.LoopCmd})
		if err != nil {
			t.Fatalf("creating container %s: %v", s.ContainerName(), err)
		}
		t.Cleanup(func() {
			if err := rt.Delete(context.Background(), s.ContainerName(), s.Owner()); err != nil {
				t.Errorf("deleting container %s: %v", s.ContainerName(), err)
			}
		})
		if err := rt.Start(ctx, s.ContainerName(), s.Owner()); err != nil {
			t.Fatal(err)
		}
		if s.Container, err = rt.Inspect(ctx, s.ContainerName()); err != nil {
			t.Fatal(err)
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.ContainerName()}}
		node.Spec.ProviderID = s.ProviderID()
		if err := workload.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
		s.Node = node
		scopes = append(scopes, s)
	}
	for _, s := range scopes {
		done, err := a.AssignPodCIDRs(ctx, s, workload)
		if err != nil || !done {
			t.Fatalf("AssignPodCIDRs(%s): done=%v err=%v", s.ContainerMachine.Name, done, err)
		}
	}
	na, nb := scopes[0], scopes[1]
	if got := strings.Join(na.ContainerMachine.Status.PodCIDRs, ","); got != "10.244.0.0/24" {
		t.Fatalf("a got %s", got)
	}
	if got := strings.Join(nb.ContainerMachine.Status.PodCIDRs, ","); got != "10.244.1.0/24" {
		t.Fatalf("b got %s", got)
	}
	conf, err := rt.ReadFile(ctx, na.ContainerName(), nodeipam.CNIConfigPath)
	if err != nil || !strings.Contains(string(conf), `"subnet": "10.244.0.0/24"`) {
		t.Fatalf("CNI config of a: %v\n%s", err, conf)
	}

	routesB, _ := run(t, rt, nb.ContainerName(), "ip", "-o", "route", "show")
	want := fmt.Sprintf("10.244.0.0/24 via %s", na.Container.IPv4)
	if !strings.Contains(routesB, want) {
		t.Fatalf("b's routes lack %q:\n%s", want, routesB)
	}
	routesA, _ := run(t, rt, na.ContainerName(), "ip", "-o", "route", "show")
	if want := fmt.Sprintf("10.244.1.0/24 via %s", nb.Container.IPv4); !strings.Contains(routesA, want) {
		t.Fatalf("a's routes lack %q:\n%s", want, routesA)
	}

	// A "pod" address in a's pod CIDR answers b.
	if out, code := run(t, rt, na.ContainerName(), "ip", "addr", "add", "10.244.0.1/32", "dev", "lo"); code != 0 {
		t.Fatalf("adding the pod address: %s", out)
	}
	if out, code := run(t, rt, nb.ContainerName(), "ping", "-c1", "-W2", "10.244.0.1"); code != 0 {
		t.Fatalf("b cannot reach 10.244.0.1 in a's pod CIDR:\n%s", out)
	}

	// A sync with nothing to change runs only the reads; a then leaves and
	// b's route to a's CIDR is removed, so the address stops answering.
	if err := a.SyncRoutes(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	if err := mgmt.Delete(ctx, na.ContainerMachine); err != nil {
		t.Fatal(err)
	}
	if err := a.SyncRoutes(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	routesB, _ = run(t, rt, nb.ContainerName(), "ip", "-o", "route", "show")
	if strings.Contains(routesB, "10.244.0.0/24") {
		t.Fatalf("b still routes a's CIDR after a left:\n%s", routesB)
	}
	if out, code := run(t, rt, nb.ContainerName(), "ping", "-c1", "-W2", "10.244.0.1"); code == 0 {
		t.Fatalf("10.244.0.1 still answers without the route:\n%s", out)
	}
}
