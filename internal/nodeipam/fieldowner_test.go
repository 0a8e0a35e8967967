package nodeipam_test

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/lifecycle"
	"github.com/capct/cluster-api-provider-container/internal/machineprovider"
	"github.com/capct/cluster-api-provider-container/internal/nodeipam"
	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

// apiServer is a real API server for what only one can judge: Node
// validation and server-side apply's field ownership. The other tests of
// the package use fake clients.
var apiServer *envtest.Environment

func TestMain(m *testing.M) {
	os.Exit(envtest.Run(m, func(_ context.Context, e *envtest.Environment) error {
		apiServer = e
		return nil
	}, nil))
}

// A kubelet that registers without --provider-id leaves spec.providerID
// empty. Registration then applies the providerID and node IPAM the pod
// CIDRs, each as its own field manager: the second apply must not ask to
// clear the first one's field (Node validation refuses that, and the Node
// would never get its pod CIDRs), and a second pass must write nothing.
func TestRegistrationAndNodeIPAMEachOwnTheirNodeFields(t *testing.T) {
	e := newEnv(t, []string{"10.244.0.0/16"}, infrav1.PodCIDRAllocation{})
	ctx := e.ctx
	workload := apiServer.Client

	cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cp-0",
		Labels: map[string]string{clusterv1.ClusterNameLabel: e.cluster.Name, clusterv1.MachineControlPlaneLabel: ""}}}
	s := &lifecycle.MachineScope{Claim: machineprovider.Claim{Cluster: e.cluster, ContainerCluster: e.cc, ContainerMachine: cm}}
	cm.Spec.ProviderID = s.ProviderID()
	// Its container runs: Registration looks for its Node.
	s.Container = &container.Machine{Name: s.ContainerName(), State: container.StateRunning}
	if err := e.mgmt.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	// The kubelet registers the Node, without a providerID.
	kubelet := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.ContainerName()}}
	if err := workload.Create(ctx, kubelet, client.FieldOwner("kubelet")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = workload.Delete(context.Background(), kubelet) })

	clk := clocktesting.NewFakePassiveClock(time.Unix(1700000000, 0))
	workloadClient := func(context.Context, client.ObjectKey) (client.Client, error) { return workload, nil }
	registration := &lifecycle.Registration{WorkloadClient: workloadClient, Clock: clk}
	initialization := &lifecycle.Initialization{
		WorkloadClient: workloadClient, NodeIPAM: nodeipam.NewRecorder(e.mgmt, e.mgmt), Clock: clk, Recorder: record.NewFakeRecorder(10),
	}
	pass := func() {
		t.Helper()
		if _, err := registration.Reconcile(ctx, s); err != nil {
			t.Fatalf("Registration: %v", err)
		}
		if s.Node == nil {
			t.Fatal("Registration found no Node")
		}
		if _, err := initialization.Reconcile(ctx, s); err != nil {
			t.Fatalf("Initialization: %v", err)
		}
		if c := cond(s); c == nil || c.Status != metav1.ConditionTrue {
			t.Fatalf("PodCIDRAllocated: %+v", c)
		}
	}
	pass()

	node := &corev1.Node{}
	if err := workload.Get(ctx, client.ObjectKey{Name: s.ContainerName()}, node); err != nil {
		t.Fatal(err)
	}
	if node.Spec.ProviderID != s.ProviderID() {
		t.Fatalf("providerID %q, want %q", node.Spec.ProviderID, s.ProviderID())
	}
	if len(node.Spec.PodCIDRs) != 1 || node.Spec.PodCIDR != node.Spec.PodCIDRs[0] || !slices.Equal(node.Spec.PodCIDRs, cm.Status.PodCIDRs) {
		t.Fatalf("pod CIDRs %q / %v, want the allocation %v", node.Spec.PodCIDR, node.Spec.PodCIDRs, cm.Status.PodCIDRs)
	}
	var managers []string
	for _, f := range node.ManagedFields {
		managers = append(managers, f.Manager)
	}
	for _, want := range []string{lifecycle.FieldOwner, nodeipam.FieldOwner} {
		if !slices.Contains(managers, want) {
			t.Fatalf("no field manager %s on the Node: %v", want, managers)
		}
	}

	// Nothing changed, so nothing is written.
	before := node.ResourceVersion
	pass()
	if err := workload.Get(ctx, client.ObjectKey{Name: s.ContainerName()}, node); err != nil {
		t.Fatal(err)
	}
	if node.ResourceVersion != before {
		t.Fatalf("a second pass wrote the Node: resourceVersion %s, was %s", node.ResourceVersion, before)
	}
}

// The Node's apply goes through whatever the kubelet wrote since the Node
// was read (its status, every few seconds while a node starts), and never
// creates a Node that was deleted since, nor writes one made again under
// the same name.
func TestAssignNodeIsBoundToTheNodeItRead(t *testing.T) {
	ctx := context.Background()
	workload := apiServer.Client
	rec := nodeipam.NewRecorder(nil, nil)
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "uid-assign"}}
	cidrs := []netip.Prefix{netip.MustParsePrefix("10.244.7.0/24")}
	read := func(name string) *corev1.Node {
		t.Helper()
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := workload.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = workload.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		})
		return n.DeepCopy()
	}

	// The kubelet reports its status after the read.
	node := read("assign-changed")
	kubelet := node.DeepCopy()
	kubelet.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady"}}
	if err := workload.Status().Update(ctx, kubelet); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.AssignNode(ctx, cluster, workload, node, cidrs); err != nil {
		t.Fatalf("the apply after the kubelet's status update: %v", err)
	}
	got := &corev1.Node{}
	if err := workload.Get(ctx, client.ObjectKey{Name: node.Name}, got); err != nil || !slices.Equal(got.Spec.PodCIDRs, []string{"10.244.7.0/24"}) {
		t.Fatalf("Node %v (%v), want pod CIDRs 10.244.7.0/24", got.Spec.PodCIDRs, err)
	}

	// The Node is deleted after the read.
	node = read("assign-deleted")
	if err := workload.Delete(ctx, node); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.AssignNode(ctx, cluster, workload, node, cidrs); err == nil {
		t.Fatal("the apply to a deleted Node succeeded")
	}
	if err := workload.Get(ctx, client.ObjectKey{Name: node.Name}, &corev1.Node{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the deleted Node is back: %v", err)
	}

	// A Node of the same name is made again after the read.
	node = read("assign-recreated")
	if err := workload.Delete(ctx, node.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	again := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name}}
	if err := workload.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.AssignNode(ctx, cluster, workload, node, cidrs); err == nil {
		t.Fatal("the apply to a Node made again under the same name succeeded")
	}
	if err := workload.Get(ctx, client.ObjectKey{Name: node.Name}, got); err != nil || len(got.Spec.PodCIDRs) != 0 {
		t.Fatalf("the new Node has pod CIDRs %v (%v), want none", got.Spec.PodCIDRs, err)
	}
}
