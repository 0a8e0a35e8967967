package nodeipam_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/lifecycle"
	"github.com/capct/cluster-api-provider-container/internal/nodeipam"
	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

// frozen returns a client that writes through to c but reads from a copy
// of what c holds now: an informer whose watch has delivered nothing since.
func frozen(t *testing.T, c client.Client, lists ...client.ObjectList) client.Client {
	t.Helper()
	scheme, err := envtest.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	b := fakeclient.NewClientBuilder().WithScheme(scheme)
	for _, l := range lists {
		if err := c.List(context.Background(), l); err != nil {
			t.Fatal(err)
		}
		b = b.WithLists(l)
	}
	snapshot := b.Build()
	return interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, _ client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			return snapshot.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, _ client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			return snapshot.List(ctx, list, opts...)
		},
	})
}

// withNodeCache makes the Initialization phase read the workload cluster's
// Nodes through nodes (its writes still reach the workload cluster).
func (e *env) withNodeCache(nodes client.Client) {
	e.init.WorkloadClient = func(context.Context, client.ObjectKey) (client.Client, error) { return nodes, nil }
}

// distinct fails unless every named machine has a record and no two have
// the same.
func (e *env) distinct(names ...string) {
	e.t.Helper()
	held := map[string]string{}
	for _, name := range names {
		v := e.annotation(name)
		if v == "" {
			e.t.Fatalf("%s has no record", name)
		}
		if other, ok := held[v]; ok {
			e.t.Fatalf("%s and %s both hold %s", other, name, v)
		}
		held[v] = name
	}
}

// The manager's informers have seen none of its own records, and no Node
// has its CIDRs yet (every apply fails, as between the record and the
// apply): every allocation still goes to a CIDR nobody holds, because the
// Recorder lays what it recorded over what the cache shows until the
// cache shows it.
func TestAStaleCacheHandsNothingOutTwice(t *testing.T) {
	e := newEnv(t, []string{"10.244.0.0/16"}, infrav1.PodCIDRAllocation{}, interceptor.Funcs{
		Apply: func(context.Context, client.WithWatch, runtime.ApplyConfiguration, ...client.ApplyOption) error {
			return errors.New("the workload API server does not answer")
		},
	})
	var names []string
	var scopes []*lifecycle.MachineScope
	for i := range 20 {
		s := e.machine(fmt.Sprintf("m%02d", i))
		names, scopes = append(names, s.ContainerMachine.Name), append(scopes, s)
	}
	e.init.NodeIPAM = nodeipam.NewRecorder(frozen(t, e.mgmt, &infrav1.ContainerMachineList{}), e.mgmt)
	e.withNodeCache(frozen(t, e.workload, &corev1.NodeList{}))
	for _, s := range scopes {
		if _, err := e.tryAssign(s); err == nil || !strings.Contains(err.Error(), "does not answer") {
			t.Fatalf("%s: the Node's apply did not fail: %v", s.ContainerMachine.Name, err)
		}
	}
	e.distinct(names...)
}

// A machine is deleted after its Node got its CIDRs, and the Node informer
// has not shown those CIDRs yet: the Node still holds them for the
// Recorder, which applied them, so the next machine gets others.
func TestANodeTheCacheShowsWithoutItsCIDRsKeepsThem(t *testing.T) {
	e := newEnv(t, []string{"10.244.0.0/16"}, infrav1.PodCIDRAllocation{})
	gone := e.machine("gone")
	e.withNodeCache(frozen(t, e.workload, &corev1.NodeList{}))
	if !e.assign(gone) {
		t.Fatalf("not done: %+v", cond(gone))
	}
	held := e.annotation("gone")
	if got := e.node(gone.Node.Name).Spec.PodCIDRs; len(got) != 1 || got[0] != held {
		t.Fatalf("Node has %v, want %s", got, held)
	}
	if err := e.mgmt.Delete(e.ctx, gone.ContainerMachine); err != nil {
		t.Fatal(err)
	}
	next := e.machine("next")
	if !e.assign(next) {
		t.Fatalf("not done: %+v", cond(next))
	}
	if got := e.annotation("next"); got == held {
		t.Fatalf("next got %s, which the Node of the deleted machine holds", got)
	}
}

// Manager A leads and records five machines' CIDRs, then stops; manager B,
// whose informers started long before and have not delivered A's records
// yet, takes over. B lists the cluster's records at the API server before
// its first allocation of the cluster, so it hands none of A's out again.
func TestANewLeaderSeesWhatThePreviousOneRecorded(t *testing.T) {
	e := newEnv(t, []string{"10.244.0.0/16"}, infrav1.PodCIDRAllocation{})
	var names []string
	var scopes []*lifecycle.MachineScope
	for i := range 10 {
		s := e.machine(fmt.Sprintf("m%02d", i))
		names, scopes = append(names, s.ContainerMachine.Name), append(scopes, s)
	}
	laggingMachines := frozen(t, e.mgmt, &infrav1.ContainerMachineList{})
	laggingNodes := frozen(t, e.workload, &corev1.NodeList{})
	for _, s := range scopes[:5] {
		if !e.assign(s) {
			t.Fatalf("A: %s not done: %+v", s.ContainerMachine.Name, cond(s))
		}
	}
	e.restart()
	e.init.NodeIPAM = nodeipam.NewRecorder(laggingMachines, e.mgmt)
	e.withNodeCache(laggingNodes)
	for _, s := range scopes[5:] {
		if !e.assign(s) {
			t.Fatalf("B: %s not done: %+v", s.ContainerMachine.Name, cond(s))
		}
	}
	e.distinct(names...)
}

// A record the cache never catches up with is read again at the API server
// after OverlayRecheck: one whose machine is gone there stops reserving
// its CIDR, so a broken watch costs CIDRs for a minute, not for the
// manager's life.
func TestAPendingRecordIsReadAgainAfterTheRecheck(t *testing.T) {
	e := newEnv(t, []string{"10.244.0.0/16"}, infrav1.PodCIDRAllocation{})
	m1, m2, m3 := e.machine("m1"), e.machine("m2"), e.machine("m3")
	clk := clocktesting.NewFakePassiveClock(time.Unix(1700000000, 0))
	rec := nodeipam.NewRecorder(frozen(t, e.mgmt, &infrav1.ContainerMachineList{}), e.mgmt)
	rec.Clock = clk
	e.init.NodeIPAM = rec
	e.withNodeCache(frozen(t, e.workload, &corev1.NodeList{}))
	if !e.assign(m1) {
		t.Fatalf("not done: %+v", cond(m1))
	}
	held := e.annotation("m1")
	if err := e.mgmt.Delete(e.ctx, m1.ContainerMachine); err != nil {
		t.Fatal(err)
	}
	if err := e.workload.Delete(e.ctx, m1.Node); err != nil {
		t.Fatal(err)
	}
	if !e.assign(m2) || e.annotation("m2") == held {
		t.Fatalf("m2 got %s, the record of m1 that the cache does not show yet", e.annotation("m2"))
	}
	clk.SetTime(clk.Now().Add(nodeipam.OverlayRecheck))
	if !e.assign(m3) || e.annotation("m3") != held {
		t.Fatalf("m3 got %s; want %s, free since m1 and its Node are gone", e.annotation("m3"), held)
	}
}
