package nodeipam_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/ipam"
	"github.com/capct/cluster-api-provider-container/internal/lifecycle"
	"github.com/capct/cluster-api-provider-container/internal/machineprovider"
	"github.com/capct/cluster-api-provider-container/internal/nodeipam"
	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

// env is one management cluster with one workload cluster, node IPAM, and
// the Initialization phase that runs it, as the ContainerMachine controller
// does. Conditions, status and events are the phase's; the record and the
// Node's pod CIDRs are node IPAM's.
type env struct {
	t        *testing.T
	ctx      context.Context
	mgmt     client.Client
	workload client.Client
	rec      *record.FakeRecorder
	init     *lifecycle.Initialization
	cluster  *clusterv1.Cluster
	cc       *infrav1.ContainerCluster
}

func newEnv(t *testing.T, podCIDRs []string, alloc infrav1.PodCIDRAllocation, wl ...interceptor.Funcs) *env {
	t.Helper()
	scheme, err := envtest.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: types.UID("uid-c1")}}
	cluster.Spec.ClusterNetwork.Pods.CIDRBlocks = podCIDRs
	cluster.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerCluster", Name: "c1"}
	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"},
		Spec: infrav1.ContainerClusterSpec{ClusterID: "id-c1"}}
	cc.Spec.Network.PodCIDRAllocation = alloc
	mgmt := fakeclient.NewClientBuilder().WithScheme(scheme).WithObjects(cluster, cc).
		WithStatusSubresource(&infrav1.ContainerMachine{}).Build()
	wb := fakeclient.NewClientBuilder().WithScheme(scheme)
	if len(wl) > 0 {
		wb = wb.WithInterceptorFuncs(wl[0])
	}
	e := &env{
		t: t, ctx: context.Background(), mgmt: mgmt, workload: wb.Build(), rec: record.NewFakeRecorder(1000),
		cluster: cluster, cc: cc,
	}
	e.restart()
	return e
}

// restart gives the env a new Recorder, as a restarted manager (or the
// manager of the cluster clusterctl moved to) has.
func (e *env) restart() {
	e.init = &lifecycle.Initialization{
		Clock: clocktesting.NewFakePassiveClock(time.Unix(1700000000, 0)), Recorder: e.rec,
		WorkloadClient: func(context.Context, client.ObjectKey) (client.Client, error) { return e.workload, nil },
		NodeIPAM:       nodeipam.NewRecorder(e.mgmt, e.mgmt),
	}
}

// machine creates a ContainerMachine and its Node (with podCIDRs when
// given) and returns its scope.
func (e *env) machine(name string, nodePodCIDRs ...string) *lifecycle.MachineScope {
	e.t.Helper()
	cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
		Labels: map[string]string{clusterv1.ClusterNameLabel: e.cluster.Name}}}
	s := &lifecycle.MachineScope{Claim: machineprovider.Claim{Cluster: e.cluster, ContainerCluster: e.cc, ContainerMachine: cm}}
	cm.Spec.ProviderID = s.ProviderID()
	if err := e.mgmt.Create(e.ctx, cm); err != nil {
		e.t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.ContainerName()}}
	node.Spec.ProviderID = s.ProviderID()
	if len(nodePodCIDRs) > 0 {
		node.Spec.PodCIDR, node.Spec.PodCIDRs = nodePodCIDRs[0], nodePodCIDRs
	}
	if err := e.workload.Create(e.ctx, node); err != nil {
		e.t.Fatal(err)
	}
	s.Node = node
	return s
}

// assign runs the Initialization phase once and reports whether node IPAM
// is done with the machine.
func (e *env) assign(s *lifecycle.MachineScope) bool {
	e.t.Helper()
	done, err := e.tryAssign(s)
	if err != nil {
		e.t.Fatalf("Initialization of %s: %v", s.ContainerMachine.Name, err)
	}
	return done
}

func (e *env) tryAssign(s *lifecycle.MachineScope) (bool, error) {
	if _, err := e.init.Reconcile(e.ctx, s); err != nil {
		return false, err
	}
	c := cond(s)
	return c != nil && (c.Status == metav1.ConditionTrue || c.Reason == infrav1.DisabledReason), nil
}

// withoutProviderID takes spec.providerID off s's machine at the API
// server, as it is before the machine's reconcile writes it, and returns
// the machine as the API server now holds it.
func (e *env) withoutProviderID(s *lifecycle.MachineScope) *infrav1.ContainerMachine {
	e.t.Helper()
	live := s.ContainerMachine.DeepCopy()
	live.Spec.ProviderID = ""
	if err := e.mgmt.Update(e.ctx, live); err != nil {
		e.t.Fatal(err)
	}
	return live
}

// assignWithoutBadRecords runs s's Initialization to done and fails the
// test on any PodCIDRBadRecord event since the last read of the events.
func (e *env) assignWithoutBadRecords(s *lifecycle.MachineScope) {
	e.t.Helper()
	if !e.assign(s) {
		e.t.Fatalf("%s not done: %+v", s.ContainerMachine.Name, cond(s))
	}
	if evs := e.events(); countPrefix(evs, "Warning "+nodeipam.EventBadRecord) != 0 {
		e.t.Fatalf("a machine's own Node was reported as a conflicting record: %v", evs)
	}
}

func (e *env) annotation(name string) string {
	e.t.Helper()
	cm := &infrav1.ContainerMachine{}
	if err := e.mgmt.Get(e.ctx, client.ObjectKey{Namespace: "ns", Name: name}, cm); err != nil {
		e.t.Fatal(err)
	}
	return cm.Annotations[infrav1.PodCIDRsAnnotation]
}

func (e *env) node(name string) *corev1.Node {
	e.t.Helper()
	n := &corev1.Node{}
	if err := e.workload.Get(e.ctx, client.ObjectKey{Name: name}, n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) events() []string {
	var out []string
	for {
		select {
		case ev := <-e.rec.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func countPrefix(evs []string, prefix string) int {
	n := 0
	for _, ev := range evs {
		if strings.HasPrefix(ev, prefix) {
			n++
		}
	}
	return n
}

func cond(s *lifecycle.MachineScope) *metav1.Condition {
	return conditions.Get(s.ContainerMachine, infrav1.PodCIDRAllocatedCondition)
}

func TestAssignRecordsAnnotationBeforeNodeThenStatus(t *testing.T) {
	var e *env
	var annotationAtApply string
	e = newEnv(t, []string{"10.244.0.0/16", "fd00:10:244::/56"}, infrav1.PodCIDRAllocation{}, interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			annotationAtApply = e.annotation("m1")
			return c.Apply(ctx, obj, opts...)
		},
	})
	s := e.machine("m1")
	if !e.assign(s) {
		t.Fatalf("not done: %+v", cond(s))
	}
	want := "10.244.0.0/24,fd00:10:244::/64"
	if got := e.annotation("m1"); got != want {
		t.Fatalf("annotation = %q, want %q", got, want)
	}
	if annotationAtApply != want {
		t.Fatalf("annotation when the Node was written = %q, want %q (must be persisted first)", annotationAtApply, want)
	}
	if got := strings.Join(s.ContainerMachine.Status.PodCIDRs, ","); got != want {
		t.Fatalf("status.podCIDRs = %q, want %q", got, want)
	}
	n := e.node(s.Node.Name)
	if n.Spec.PodCIDR != "10.244.0.0/24" || strings.Join(n.Spec.PodCIDRs, ",") != want {
		t.Fatalf("Node spec = %q %v", n.Spec.PodCIDR, n.Spec.PodCIDRs)
	}
	if s.Node.ResourceVersion != n.ResourceVersion {
		t.Fatalf("scope Node not refreshed after apply: %s vs %s", s.Node.ResourceVersion, n.ResourceVersion)
	}
	c := cond(s)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != infrav1.SucceededReason {
		t.Fatalf("condition = %+v", c)
	}
	// A second pass changes nothing: no record, no apply.
	annotationAtApply = "unset"
	if !e.assign(s) {
		t.Fatal("second pass not done")
	}
	if annotationAtApply != "unset" {
		t.Fatal("Node applied again although it already holds the CIDRs")
	}
}

// TestProviderIDIsRecordedWithTheCIDRs: in the controller, spec.providerID
// reaches the API only when the reconcile's patch runs, after the pod CIDR
// annotation. A second machine's rebuild in between must still see the
// first machine's Node and record as one claim, not a conflict.
func TestProviderIDIsRecordedWithTheCIDRs(t *testing.T) {
	e := newEnv(t, []string{"10.244.0.0/16"}, infrav1.PodCIDRAllocation{})
	first := e.machine("m1")
	live := e.withoutProviderID(first)
	first.ContainerMachine.ResourceVersion = live.ResourceVersion
	if !e.assign(first) {
		t.Fatalf("first machine not done: %+v", cond(first))
	}
	got := &infrav1.ContainerMachine{}
	if err := e.mgmt.Get(e.ctx, client.ObjectKeyFromObject(live), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.ProviderID != first.ProviderID() {
		t.Fatalf("spec.providerID in the API = %q, want %q with the annotation", got.Spec.ProviderID, first.ProviderID())
	}
	e.assignWithoutBadRecords(e.machine("m2"))
}

// TestANodeGivenCIDRsBeforeItsMachineHasAProviderIDIsOneClaim: a Node
// registers, and Initialization gives it pod CIDRs, while its machine's
// bootstrap data still runs, before Provision sets the machine's
// spec.providerID; the record then goes without one. Another machine's
// rebuild must still see that Node and record as one claim (it did not:
// make bench-capd's manager logged a PodCIDRBadRecord event for every
// such Node, "overlaps ... held by ContainerMachine" of its own machine).
func TestANodeGivenCIDRsBeforeItsMachineHasAProviderIDIsOneClaim(t *testing.T) {
	e := newEnv(t, []string{"10.244.0.0/16"}, infrav1.PodCIDRAllocation{})
	first := e.machine("m1")
	first.ContainerMachine = e.withoutProviderID(first)
	if !e.assign(first) {
		t.Fatalf("first machine not done: %+v", cond(first))
	}
	if got := e.node(first.Node.Name).Spec.PodCIDRs; len(got) != 1 {
		t.Fatalf("the first machine's Node holds pod CIDRs %v, want one", got)
	}
	e.assignWithoutBadRecords(e.machine("m2"))
	if a, b := e.annotation("m1"), e.annotation("m2"); a == b {
		t.Fatalf("both machines recorded %s", a)
	}
}

func TestMoveRebuildGivesSameAllocations(t *testing.T) {
	e := newEnv(t, []string{"10.244.0.0/16"}, infrav1.PodCIDRAllocation{})
	var scopes []*lifecycle.MachineScope
	for i := range 8 {
		s := e.machine(fmt.Sprintf("m%d", i))
		if !e.assign(s) {
			t.Fatal("not done")
		}
		scopes = append(scopes, s)
	}
	before := map[string]string{}
	for _, s := range scopes {
		before[s.ContainerMachine.Name] = e.annotation(s.ContainerMachine.Name)
	}
	// "clusterctl move": status is not carried; a new controller with a
	// fresh Assigner starts over. Strip status and rebuild.
	list := &infrav1.ContainerMachineList{}
	if err := e.mgmt.List(e.ctx, list); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		list.Items[i].Status = infrav1.ContainerMachineStatus{}
	}
	cfg, _, _, _ := nodeipam.ClusterConfig(e.cluster, e.cc)
	alloc, bad, err := nodeipam.Rebuild(cfg, list.Items, nil)
	if err != nil || len(bad) != 0 {
		t.Fatalf("rebuild: %v %v", err, bad)
	}
	for name, v := range before {
		got, _ := alloc.Get("ContainerMachine/ns/" + name)
		if nodeipam.FormatPodCIDRs(got) != v {
			t.Fatalf("%s: rebuilt %v, recorded %s", name, got, v)
		}
	}
	// A new Recorder on the moved objects keeps every machine's CIDRs and
	// gives a new machine a fresh one.
	e.restart()
	for _, s := range scopes {
		s.ContainerMachine.Status = infrav1.ContainerMachineStatus{}
		if !e.assign(s) || strings.Join(s.ContainerMachine.Status.PodCIDRs, ",") != before[s.ContainerMachine.Name] {
			t.Fatalf("%s after move: %v, want %s", s.ContainerMachine.Name, s.ContainerMachine.Status.PodCIDRs, before[s.ContainerMachine.Name])
		}
	}
	s := e.machine("new")
	e.assign(s)
	for name, v := range before {
		if v == e.annotation("new") {
			t.Fatalf("new machine got %s, held by %s", v, name)
		}
	}
}

func TestNodeWithoutMachineBlocksItsCIDR(t *testing.T) {
	e := newEnv(t, []string{"10.244.0.0/23"}, infrav1.PodCIDRAllocation{})
	// A Node left over from a machine whose ContainerMachine is already
	// gone (Cluster API deletes the Node last).
	orphan := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gone"}}
	orphan.Spec.PodCIDR, orphan.Spec.PodCIDRs = "10.244.0.0/24", []string{"10.244.0.0/24"}
	if err := e.workload.Create(e.ctx, orphan); err != nil {
		t.Fatal(err)
	}
	s1 := e.machine("m1")
	if !e.assign(s1) || e.annotation("m1") != "10.244.1.0/24" {
		t.Fatalf("m1 got %q, want the CIDR the orphan Node does not hold", e.annotation("m1"))
	}
	s2 := e.machine("m2")
	if e.assign(s2) {
		t.Fatal("m2 done although the orphan Node holds the only other CIDR")
	}
	if c := cond(s2); c.Reason != infrav1.ExhaustedReason {
		t.Fatalf("m2 condition %+v", c)
	}
	// Deleting the Node releases its CIDR.
	if err := e.workload.Delete(e.ctx, orphan); err != nil {
		t.Fatal(err)
	}
	if !e.assign(s2) || e.annotation("m2") != "10.244.0.0/24" {
		t.Fatalf("m2 after the Node's deletion: %q", e.annotation("m2"))
	}
}

func TestDeletingMachineKeepsItsCIDR(t *testing.T) {
	e := newEnv(t, []string{"10.244.0.0/23"}, infrav1.PodCIDRAllocation{})
	s1 := e.machine("m1")
	e.assign(s1)
	// m1's deletion starts: its finalizer keeps it listed, with the
	// annotation, until the container is gone.
	cm := &infrav1.ContainerMachine{}
	_ = e.mgmt.Get(e.ctx, client.ObjectKeyFromObject(s1.ContainerMachine), cm)
	cm.Finalizers = []string{infrav1.MachineFinalizer}
	if err := e.mgmt.Update(e.ctx, cm); err != nil {
		t.Fatal(err)
	}
	if err := e.mgmt.Delete(e.ctx, cm); err != nil {
		t.Fatal(err)
	}
	s2 := e.machine("m2")
	e.assign(s2)
	s3 := e.machine("m3")
	if e.assign(s3) {
		t.Fatalf("m3 got %q although deleting m1 and m2 hold both CIDRs", e.annotation("m3"))
	}
	// The ContainerMachine goes, but its Node (still holding the CIDR)
	// keeps it reserved.
	_ = e.mgmt.Get(e.ctx, client.ObjectKeyFromObject(cm), cm)
	cm.Finalizers = nil
	if err := e.mgmt.Update(e.ctx, cm); err != nil {
		t.Fatal(err)
	}
	if e.assign(s3) {
		t.Fatalf("m3 got %q while m1's Node still holds it", e.annotation("m3"))
	}
	if err := e.workload.Delete(e.ctx, s1.Node); err != nil {
		t.Fatal(err)
	}
	if !e.assign(s3) || e.annotation("m3") != "10.244.0.0/24" {
		t.Fatalf("m3 = %q after m1's Node went", e.annotation("m3"))
	}
}

func TestExhaustionConditionAndSingleEvent(t *testing.T) {
	e := newEnv(t, []string{"10.244.0.0/24"}, infrav1.PodCIDRAllocation{})
	e.assign(e.machine("m1"))
	e.events()
	before := testutil.ToFloat64(nodeipam.AllocationFailures.WithLabelValues(infrav1.ExhaustedReason))
	s := e.machine("m2")
	for range 5 {
		done, err := e.tryAssign(s)
		if done || err != nil {
			t.Fatalf("exhausted: done=%v err=%v", done, err)
		}
	}
	c := cond(s)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != infrav1.ExhaustedReason || !strings.Contains(c.Message, "10.244.0.0/24") {
		t.Fatalf("condition %+v", c)
	}
	evs := e.events()
	if n := countPrefix(evs, "Warning Exhausted"); n != 1 {
		t.Fatalf("%d Exhausted events over 5 attempts, want 1: %v", n, evs)
	}
	if got := testutil.ToFloat64(nodeipam.AllocationFailures.WithLabelValues(infrav1.ExhaustedReason)) - before; got != 5 {
		t.Fatalf("failure counter grew by %v, want 5", got)
	}
	if got := testutil.ToFloat64(nodeipam.CIDRsInUse.WithLabelValues("ns", "c1", "IPv4")); got != 1 {
		t.Fatalf("in use gauge = %v", got)
	}
	if got := testutil.ToFloat64(nodeipam.CIDRsTotal.WithLabelValues("ns", "c1", "IPv4")); got != 1 {
		t.Fatalf("total gauge = %v", got)
	}
	if e.annotation("m2") != "" {
		t.Fatal("exhausted machine got an annotation")
	}
	// A fresh Recorder (restart) does not repeat the event either: the
	// condition says the machine is already exhausted.
	e.restart()
	e.assign(s)
	if evs := e.events(); countPrefix(evs, "Warning Exhausted") != 0 {
		t.Fatalf("event repeated after restart: %v", evs)
	}
}

func TestNodeWithOtherFreeCIDRsIsAdopted(t *testing.T) {
	e := newEnv(t, []string{"10.244.0.0/16"}, infrav1.PodCIDRAllocation{})
	s := e.machine("m1")
	// A previous allocation recorded 10.244.0.0/24, but the Node got
	// 10.244.7.0/24 from elsewhere (e.g. kube-controller-manager).
	patch := []byte(`{"metadata":{"annotations":{"` + infrav1.PodCIDRsAnnotation + `":"10.244.0.0/24"}}}`)
	if err := e.mgmt.Patch(e.ctx, s.ContainerMachine.DeepCopy(), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	n := e.node(s.Node.Name)
	n.Spec.PodCIDR, n.Spec.PodCIDRs = "10.244.7.0/24", []string{"10.244.7.0/24"}
	if err := e.workload.Update(e.ctx, n); err != nil {
		t.Fatal(err)
	}
	s.Node = n
	if !e.assign(s) {
		t.Fatalf("not done: %+v", cond(s))
	}
	if got := e.annotation("m1"); got != "10.244.7.0/24" {
		t.Fatalf("annotation %q, want the Node's", got)
	}
	evs := e.events()
	if countPrefix(evs, "Warning PodCIDRConflict") != 1 || !strings.Contains(strings.Join(evs, "\n"), "10.244.0.0/24") {
		t.Fatalf("events %v", evs)
	}
}

func TestNodeWithTakenCIDRsIsAConflict(t *testing.T) {
	e := newEnv(t, []string{"10.244.0.0/16"}, infrav1.PodCIDRAllocation{})
	s1 := e.machine("m1")
	e.assign(s1) // 10.244.0.0/24
	s2 := e.machine("m2", "10.244.0.0/24")
	for range 3 {
		if e.assign(s2) {
			t.Fatal("done although the Node holds m1's CIDR")
		}
	}
	c := cond(s2)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != infrav1.PodCIDRConflictReason ||
		!strings.Contains(c.Message, s2.Node.Name) || !strings.Contains(c.Message, "10.244.0.0/24") || !strings.Contains(c.Message, "ContainerMachine/ns/m1") {
		t.Fatalf("condition %+v", c)
	}
	if got := e.annotation("m2"); got != "" {
		t.Fatalf("m2 recorded %q", got)
	}
	if n := countPrefix(e.events(), "Warning PodCIDRConflict"); n != 1 {
		t.Fatalf("%d conflict events, want 1", n)
	}
	if e.node(s2.Node.Name).Spec.PodCIDRs[0] != "10.244.0.0/24" {
		t.Fatal("Node was changed")
	}
	// A third machine never gets the contested CIDR.
	s3 := e.machine("m3")
	e.assign(s3)
	if e.annotation("m3") == "10.244.0.0/24" {
		t.Fatal("duplicate")
	}
}

func TestBadRecordsAreReportedNotDuplicated(t *testing.T) {
	e := newEnv(t, []string{"10.244.0.0/22"}, infrav1.PodCIDRAllocation{})
	bad := map[string]string{
		"out":     "192.168.0.0/24",
		"garbage": "not-a-cidr,10.244.1.0/24",
		"dup":     "10.244.1.0/24",
	}
	for name, v := range bad {
		cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			Labels:      map[string]string{clusterv1.ClusterNameLabel: "c1"},
			Annotations: map[string]string{infrav1.PodCIDRsAnnotation: v}}}
		if err := e.mgmt.Create(e.ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{"10.244.1.0/24": true}
	for i := range 3 {
		s := e.machine(fmt.Sprintf("m%d", i))
		if !e.assign(s) {
			t.Fatalf("m%d not done: %+v", i, cond(s))
		}
		v := e.annotation(s.ContainerMachine.Name)
		if seen[v] {
			t.Fatalf("m%d got %s twice", i, v)
		}
		seen[v] = true
	}
	evs := e.events()
	if n := countPrefix(evs, "Warning "+nodeipam.EventBadRecord); n != 3 {
		t.Fatalf("%d bad-record events over three reconciles, want 3 (one per bad record): %v", n, evs)
	}
	// Of the two machines claiming 10.244.1.0/24, "dup" sorts first and
	// keeps it; "garbage" cannot keep its record and is not handed a new
	// CIDR behind the user's back.
	cm := &infrav1.ContainerMachine{}
	_ = e.mgmt.Get(e.ctx, client.ObjectKey{Namespace: "ns", Name: "garbage"}, cm)
	s := &lifecycle.MachineScope{Claim: machineprovider.Claim{Cluster: e.cluster, ContainerCluster: e.cc, ContainerMachine: cm}, Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "garbage"}}}
	if done, err := e.tryAssign(s); done || err != nil || cond(s).Reason != infrav1.PodCIDRConflictReason ||
		!strings.Contains(cond(s).Message, "ContainerMachine/ns/dup") {
		t.Fatalf("garbage: done=%v err=%v cond=%+v", done, err, cond(s))
	}
}

func TestConcurrentMachinesGetDistinctCIDRs(t *testing.T) {
	e := newEnv(t, []string{"10.244.0.0/16", "fd00:10:244::/56"}, infrav1.PodCIDRAllocation{})
	var scopes []*lifecycle.MachineScope
	for i := range 20 {
		scopes = append(scopes, e.machine(fmt.Sprintf("m%02d", i)))
	}
	var wg sync.WaitGroup
	errs := make([]error, len(scopes))
	for i, s := range scopes {
		wg.Go(func() {
			done, err := e.tryAssign(s)
			if err == nil && !done {
				err = errors.New("not done")
			}
			errs[i] = err
		})
	}
	wg.Wait()
	seen := map[netip.Prefix]string{}
	for i, s := range scopes {
		if errs[i] != nil {
			t.Fatalf("%s: %v", s.ContainerMachine.Name, errs[i])
		}
		cidrs, perrs := nodeipam.ParsePodCIDRs(e.annotation(s.ContainerMachine.Name))
		if len(perrs) > 0 || len(cidrs) != 2 {
			t.Fatalf("%s: %v %v", s.ContainerMachine.Name, cidrs, perrs)
		}
		for _, p := range cidrs {
			if other, ok := seen[p]; ok {
				t.Fatalf("%s and %s both got %s", other, s.ContainerMachine.Name, p)
			}
			seen[p] = s.ContainerMachine.Name
		}
	}
}

func TestDisabledAndNoPodCIDRs(t *testing.T) {
	for name, tc := range map[string]struct {
		cidrs []string
		alloc infrav1.PodCIDRAllocation
	}{
		"disabled":     {[]string{"10.244.0.0/16"}, infrav1.PodCIDRAllocation{Enabled: ptr.To(false)}},
		"no pod CIDRs": {nil, infrav1.PodCIDRAllocation{}},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, tc.cidrs, tc.alloc)
			s := e.machine("m1")
			if !e.assign(s) {
				t.Fatal("disabled IPAM must not block initialization")
			}
			if c := cond(s); c == nil || c.Status != metav1.ConditionFalse || c.Reason != infrav1.DisabledReason {
				t.Fatalf("condition %+v", c)
			}
			if e.annotation("m1") != "" || len(e.node(s.Node.Name).Spec.PodCIDRs) != 0 {
				t.Fatal("disabled IPAM did something")
			}
		})
	}
}

func TestInvalidConfigIsReportedOnce(t *testing.T) {
	e := newEnv(t, []string{"10.244.0.0/16"}, infrav1.PodCIDRAllocation{NodeMaskSizeIPv4: 12})
	s := e.machine("m1")
	for range 3 {
		if e.assign(s) {
			t.Fatal("done with an invalid config")
		}
	}
	if c := cond(s); c.Reason != infrav1.InvalidSpecReason || !strings.Contains(c.Message, "/12") {
		t.Fatalf("condition %+v", c)
	}
	if n := countPrefix(e.events(), "Warning "+infrav1.InvalidSpecReason); n != 1 {
		t.Fatalf("%d events", n)
	}
}

func TestNodeMaskSizesFromContainerCluster(t *testing.T) {
	e := newEnv(t, []string{"fd00:10:244::/56", "10.244.0.0/16"}, infrav1.PodCIDRAllocation{NodeMaskSizeIPv4: 26, NodeMaskSizeIPv6: 72})
	s := e.machine("m1")
	e.assign(s)
	if got := e.annotation("m1"); got != "fd00:10:244::/72,10.244.0.0/26" {
		t.Fatalf("annotation %q", got)
	}
	if n := e.node(s.Node.Name); n.Spec.PodCIDR != "fd00:10:244::/72" {
		t.Fatalf("primary family must come first: %v", n.Spec.PodCIDRs)
	}
}

func TestRestart10kNoneHandedOutTwice(t *testing.T) {
	cfg, _, _, err := nodeipam.ClusterConfig(&clusterv1.Cluster{Spec: clusterv1.ClusterSpec{ClusterNetwork: clusterv1.ClusterNetwork{
		Pods: clusterv1.NetworkRanges{CIDRBlocks: []string{"10.0.0.0/8", "fd00::/44"}}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := ipam.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var machines []infrav1.ContainerMachine
	var nodes []corev1.Node
	for i := range 10000 {
		name := fmt.Sprintf("m%05d", i)
		cidrs, err := first.Allocate("ContainerMachine/ns/" + name)
		if err != nil {
			t.Fatal(err)
		}
		cm := infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			Annotations: map[string]string{infrav1.PodCIDRsAnnotation: nodeipam.FormatPodCIDRs(cidrs)}}}
		cm.Spec.ProviderID = "container:///" + name
		machines = append(machines, cm)
		// Half the machines have their Node; every 10th machine's record
		// is gone and only its Node is left.
		if i%2 == 0 {
			n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
			n.Spec.ProviderID = cm.Spec.ProviderID
			n.Spec.PodCIDRs = nodeipam.CIDRStrings(cidrs)
			nodes = append(nodes, n)
		}
	}
	var kept []infrav1.ContainerMachine
	for i, m := range machines {
		if i%10 != 0 {
			kept = append(kept, m)
		}
	}
	start := time.Now()
	alloc, bad, err := nodeipam.Rebuild(cfg, kept, nodes)
	t.Logf("rebuilt %d machines and %d nodes in %s", len(kept), len(nodes), time.Since(start))
	if err != nil || len(bad) != 0 {
		t.Fatalf("rebuild: %v, %d bad: %v", err, len(bad), bad[:min(3, len(bad))])
	}
	held := map[netip.Prefix]bool{}
	for _, cidrs := range first.Allocations() {
		for _, p := range cidrs {
			held[p] = true
		}
	}
	for _, u := range alloc.Usage() {
		// Every CIDR is held: by its machine, or (every 10th, whose
		// record is gone) by its Node.
		if u.InUse != 10000 {
			t.Fatalf("in use after rebuild %d, want 10000: %+v", u.InUse, u)
		}
	}
	for i := range 5000 {
		cidrs, err := alloc.Allocate(fmt.Sprintf("ContainerMachine/ns/new%05d", i))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range cidrs {
			if held[p] {
				t.Fatalf("new allocation %s was already held", p)
			}
			held[p] = true
		}
	}
}

// countingCalls counts every request a client sends.
type countingCalls struct {
	mu sync.Mutex
	n  int
}

func (c *countingCalls) add() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *countingCalls) take() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = 0
	return n
}

func (c *countingCalls) funcs() interceptor.Funcs {
	return interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			c.add()
			return cl.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			c.add()
			return cl.List(ctx, list, opts...)
		},
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			c.add()
			return cl.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			c.add()
			return cl.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			c.add()
			return cl.Patch(ctx, obj, patch, opts...)
		},
		Apply: func(ctx context.Context, cl client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			c.add()
			return cl.Apply(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			c.add()
			return cl.Delete(ctx, obj, opts...)
		},
	}
}

// writes counts only the requests that change something: a client whose
// reads come from an informer (the manager's client, a ClusterCache
// client) sends nothing to the API server to read.
func (c *countingCalls) writes() interceptor.Funcs {
	f := c.funcs()
	f.Get, f.List = nil, nil
	return f
}

// Node IPAM's work for one machine is a fixed number of API requests,
// whatever the size of the cluster: the machine that joins a cluster of 10
// costs what the second one did, and only the cluster's first allocation
// in a manager's life lists its machines at the API server. (Its node
// commands are none: the pod network is programmed per cluster change, see
// internal/podnetwork.)
func TestPerMachineWorkDoesNotGrowWithTheCluster(t *testing.T) {
	requestsFor := func(size int) (first, again int) {
		calls := &countingCalls{}
		e := newEnv(t, []string{"10.244.0.0/16"}, infrav1.PodCIDRAllocation{}, calls.writes())
		cached := interceptor.NewClient(e.mgmt.(client.WithWatch), calls.writes())
		api := interceptor.NewClient(e.mgmt.(client.WithWatch), calls.funcs())
		e.init.NodeIPAM = nodeipam.NewRecorder(cached, api)
		for i := range size - 1 {
			if !e.assign(e.machine(fmt.Sprintf("m%02d", i))) {
				t.Fatal("not done")
			}
		}
		s := e.machine("last")
		calls.take()
		if !e.assign(s) {
			t.Fatalf("last machine not done: %+v", cond(s))
		}
		first = calls.take()
		// The next reconcile reads the machine again, record included (the
		// Recorder patches a copy, never the caller's object).
		s.ContainerMachine.Annotations = map[string]string{infrav1.PodCIDRsAnnotation: e.annotation(s.ContainerMachine.Name)}
		calls.take()
		if !e.assign(s) {
			t.Fatal("second pass not done")
		}
		return first, calls.take()
	}
	first1, again1 := requestsFor(1)
	first2, _ := requestsFor(2)
	first10, again10 := requestsFor(10)
	t.Logf("requests for the 1st machine of 1: %d, then %d; the 2nd of 2: %d; the 10th of 10: %d, then %d", first1, again1, first2, first10, again10)
	// The cluster's first allocation: the list that seeds the overlay, the
	// record and the Node's apply. Every later one: the record and the
	// apply. Afterwards nothing: the Node holds the record (the phase polls
	// like this until the Node is Ready).
	if first1 != 3 {
		t.Fatalf("the first machine of a cluster took %d requests, want 3", first1)
	}
	if first10 != first2 || first10 != 2 {
		t.Fatalf("the 10th machine took %d requests, the 2nd of a cluster of two %d; want 2 for both", first10, first2)
	}
	if again10 != again1 || again10 != 0 {
		t.Fatalf("a second pass took %d requests in a cluster of 10 and %d in one of 1; want 0 for both", again10, again1)
	}
}

// The manager stops between the record and the Node's apply: the restarted
// manager (a fresh Recorder, nothing in memory) finds the record, applies
// the same CIDRs to the Node, and hands them to nobody else meanwhile.
func TestRestartBetweenRecordAndNode(t *testing.T) {
	crash := true
	e := newEnv(t, []string{"10.244.0.0/16"}, infrav1.PodCIDRAllocation{}, interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if crash {
				return errors.New("the manager stopped")
			}
			return c.Apply(ctx, obj, opts...)
		},
	})
	s1 := e.machine("m1")
	if _, err := e.tryAssign(s1); err == nil {
		t.Fatal("the apply did not fail")
	}
	recorded := e.annotation("m1")
	if recorded != "10.244.0.0/24" || len(e.node(s1.Node.Name).Spec.PodCIDRs) != 0 {
		t.Fatalf("before the restart: record %q, Node %v; want the record and no Node CIDRs", recorded, e.node(s1.Node.Name).Spec.PodCIDRs)
	}
	crash = false
	e.restart()
	s2 := e.machine("m2")
	if !e.assign(s2) || e.annotation("m2") == recorded {
		t.Fatalf("m2 got %q, which m1 recorded before the restart", e.annotation("m2"))
	}
	s1.ContainerMachine.Status = infrav1.ContainerMachineStatus{}
	if !e.assign(s1) {
		t.Fatalf("m1 not done after the restart: %+v", cond(s1))
	}
	if got := e.node(s1.Node.Name).Spec.PodCIDRs; len(got) != 1 || got[0] != recorded {
		t.Fatalf("m1's Node got %v after the restart, want its record %s", got, recorded)
	}
}
