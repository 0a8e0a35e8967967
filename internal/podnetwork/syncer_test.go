package podnetwork

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

// syncEnv is one cluster whose machines have recorded pod CIDRs and run as
// fake containers that act out the sync's scripts.
type syncEnv struct {
	t       *testing.T
	ctx     context.Context
	mgmt    client.Client
	rt      *fake.Runtime
	clock   *clocktesting.FakeClock
	routes  *routeTables
	syncer  *Syncer
	cluster *clusterv1.Cluster
	cc      *infrav1.ContainerCluster
	network string
}

func newSyncEnv(t *testing.T, podCIDRs ...string) *syncEnv {
	t.Helper()
	scheme, err := envtest.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: types.UID("uid-c1")}}
	cluster.Spec.ClusterNetwork.Pods.CIDRBlocks = podCIDRs
	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"},
		Spec: infrav1.ContainerClusterSpec{ClusterID: "id-c1"}}
	clk := clocktesting.NewFakeClock(time.Unix(1700000000, 0))
	e := &syncEnv{
		t: t, ctx: context.Background(), mgmt: fakeclient.NewClientBuilder().WithScheme(scheme).Build(),
		rt: fake.New(clk), clock: clk, routes: newRouteTables(), cluster: cluster, cc: cc, network: "capct-c1",
	}
	e.rt.SetExecHandler(e.routes.handle)
	fam := container.IPv4
	if strings.Contains(strings.Join(podCIDRs, ","), ":") {
		fam = container.DualStack
	}
	if _, err := e.rt.EnsureNetwork(e.ctx, container.NetworkSpec{Name: e.network, IPFamily: fam, Owner: naming.ClusterOwner(cluster, cc)}); err != nil {
		t.Fatal(err)
	}
	e.syncer = NewSyncer(engines.Single(e.rt), e.mgmt, clk)
	return e
}

// node adds a machine with its recorded pod CIDRs and its running
// container, and returns the container's name.
func (e *syncEnv) node(name string, cidrs ...string) string {
	e.t.Helper()
	cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
		Labels:      map[string]string{clusterv1.ClusterNameLabel: e.cluster.Name},
		Annotations: map[string]string{infrav1.PodCIDRsAnnotation: strings.Join(cidrs, ",")}}}
	if err := e.mgmt.Create(e.ctx, cm); err != nil {
		e.t.Fatal(err)
	}
	owner := naming.ClusterOwner(e.cluster, e.cc).ForMachine(name)
	m, err := e.rt.CreateMachine(e.ctx, container.MachineSpec{Name: naming.ContainerName("ns", e.cluster.Name, name),
		Image: "capct/node:v1.35.4", Network: e.network, Labels: owner.Labels(), Role: container.RoleWorker})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.rt.Start(e.ctx, m.Name, owner); err != nil {
		e.t.Fatal(err)
	}
	return m.Name
}

func (e *syncEnv) addr(name string) netip.Addr {
	e.t.Helper()
	m, err := e.rt.Inspect(e.ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return m.IPv4
}

func (e *syncEnv) sync() {
	e.t.Helper()
	if err := e.syncer.Sync(e.ctx, e.cluster, e.cc); err != nil {
		e.t.Fatalf("Sync: %v", err)
	}
}

// execsSince returns the number of commands each container ran since the
// first n Exec calls.
func (e *syncEnv) execsSince(n int) map[string]int {
	out := map[string]int{}
	for _, c := range e.rt.ExecCalls()[n:] {
		out[c.Container]++
	}
	return out
}

func TestSyncFollowsJoinsAndLeaves(t *testing.T) {
	e := newSyncEnv(t, "10.244.0.0/16")
	a, b := e.node("a", "10.244.0.0/24"), e.node("b", "10.244.1.0/24")
	e.sync()
	if ta := e.routes.get(a); len(ta) != 1 || ta[pfx("10.244.1.0/24")] != e.addr(b) {
		t.Fatalf("a's routes %v", ta)
	}
	conf, err := e.rt.ReadFile(e.ctx, a, naming.ClusterOwner(e.cluster, e.cc).ForMachine("a"), CNIConfigPath)
	if err != nil || !strings.Contains(string(conf), `"subnet": "10.244.0.0/24"`) {
		t.Fatalf("a's CNI config: %v\n%s", err, conf)
	}
	if !e.routes.masq[a]["iptables 10.244.0.0/24 10.244.0.0/16"] {
		t.Fatalf("a's masquerade rules %v", e.routes.masq[a])
	}
	c := e.node("c", "10.244.2.0/24")
	e.sync()
	if tb := e.routes.get(b); len(tb) != 2 || tb[pfx("10.244.2.0/24")] != e.addr(c) {
		t.Fatalf("b's routes %v", tb)
	}
	// b leaves: its container and ContainerMachine go; the others drop the
	// route to its CIDR.
	e.rt.RemoveOutOfBand(b)
	if err := e.mgmt.Delete(e.ctx, &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}}); err != nil {
		t.Fatal(err)
	}
	e.sync()
	if ta := e.routes.get(a); len(ta) != 1 || ta[pfx("10.244.2.0/24")] != e.addr(c) {
		t.Fatalf("a's routes after b left: %v", ta)
	}
	if tc := e.routes.get(c); len(tc) != 1 || tc[pfx("10.244.0.0/24")] != e.addr(a) {
		t.Fatalf("c's routes after b left: %v", tc)
	}
}

// A sync runs one command in each node where something changed and none
// elsewhere: a node joining a cluster of 9 costs one command in each of the
// 9 and two in itself, and a sync with nothing new costs nothing. A node
// that restarted, or that was last read VerifyInterval ago, is read back.
func TestSyncCostPerChange(t *testing.T) {
	e := newSyncEnv(t, "10.244.0.0/16", "fd00:10:244::/56")
	var nodes []string
	for i := range 9 {
		nodes = append(nodes, e.node(fmt.Sprintf("m%d", i), fmt.Sprintf("10.244.%d.0/24", i), fmt.Sprintf("fd00:10:244:%d::/64", i)))
	}
	e.sync()

	n := len(e.rt.ExecCalls())
	joined := e.node("m9", "10.244.9.0/24", "fd00:10:244:9::/64")
	e.sync()
	got := e.execsSince(n)
	for _, name := range nodes {
		if got[name] != 1 {
			t.Fatalf("%s ran %d commands for one node joining, want 1: %v", name, got[name], got)
		}
	}
	if got[joined] != 2 {
		t.Fatalf("the joining node ran %d commands, want 2 (probe and apply): %v", got[joined], got)
	}
	for _, name := range append(nodes, joined) {
		// An IPv4 and an IPv6 route to each of the 9 others.
		if routes := e.routes.get(name); len(routes) != 18 {
			t.Fatalf("%s has %d routes, want 18", name, len(routes))
		}
	}

	n = len(e.rt.ExecCalls())
	e.sync()
	if got := e.execsSince(n); len(got) != 0 {
		t.Fatalf("a sync with nothing new ran commands: %v", got)
	}

	// m3's container restarts: its network namespace lost its routes and
	// rules. Only it is programmed again.
	restarted := nodes[3]
	e.routes.wipe(restarted)
	e.syncer.NodeStarted(client.ObjectKeyFromObject(e.cluster), restarted)
	n = len(e.rt.ExecCalls())
	e.sync()
	if got := e.execsSince(n); len(got) != 1 || got[restarted] != 2 {
		t.Fatalf("after %s restarted: %v, want 2 commands in it and none elsewhere", restarted, got)
	}
	if len(e.routes.get(restarted)) != 18 || !e.routes.masq[restarted]["ip6tables fd00:10:244:3::/64 fd00:10:244::/56"] {
		t.Fatalf("the restarted node was not programmed again: %v %v", e.routes.get(restarted), e.routes.masq[restarted])
	}

	// Past the verify interval every node is read back once, and nothing
	// needs changing.
	e.clock.Step(DefaultVerifyInterval)
	n = len(e.rt.ExecCalls())
	e.sync()
	got = e.execsSince(n)
	for _, name := range append(nodes, joined) {
		if got[name] != 1 {
			t.Fatalf("%s ran %d commands when verified, want 1 (the probe): %v", name, got[name], got)
		}
	}
}

// What a sync remembers of a cluster's nodes grows with their number, not
// its square: every node brought to the same routes shares one RouteTable,
// which holds each node's routes once, and a sync with nothing new keeps
// it.
func TestSyncRemembersOneRouteTable(t *testing.T) {
	e := newSyncEnv(t, "10.244.0.0/16", "fd00:10:244::/56")
	for i := range 5 {
		e.node(fmt.Sprintf("m%d", i), fmt.Sprintf("10.244.%d.0/24", i), fmt.Sprintf("fd00:10:244:%d::/64", i))
	}
	st := e.syncer.state(client.ObjectKeyFromObject(e.cluster))
	shared := func() *RouteTable {
		t.Helper()
		var table *RouteTable
		for name, p := range st.nodes {
			if table == nil {
				table = p.table
			}
			if p.table == nil || p.table != table {
				t.Fatalf("%s remembers routes of its own, not the cluster's table", name)
			}
		}
		if table != st.table {
			t.Fatal("the nodes do not share the table of the last sync")
		}
		return table
	}

	e.sync()
	first := shared()
	if len(st.nodes) != 5 || len(first.routes) != 10 {
		t.Fatalf("%d nodes remembered, table of %d routes; want 5 and 10 (an IPv4 and an IPv6 route per node)", len(st.nodes), len(first.routes))
	}
	e.sync()
	if shared() != first {
		t.Fatal("a sync with nothing new replaced the table")
	}
	e.node("m5", "10.244.5.0/24", "fd00:10:244:5::/64")
	e.sync()
	if second := shared(); second == first || len(second.routes) != 12 || len(st.nodes) != 6 {
		t.Fatalf("after a node joined: %d nodes, %d routes, a new table %v; want 6, 12, true", len(st.nodes), len(second.routes), second != first)
	}
}

// A sync reads the cluster's machines for their records only, and asks the
// cache not to copy them: a copy of each machine per sync is garbage that
// grows with the cluster.
func TestSyncListsMachinesWithoutCopies(t *testing.T) {
	e := newSyncEnv(t, "10.244.0.0/16")
	e.node("a", "10.244.0.0/24")
	lists := 0
	reader := interceptor.NewClient(e.mgmt.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lists++
			if o := (&client.ListOptions{}).ApplyOptions(opts); o.UnsafeDisableDeepCopy == nil || !*o.UnsafeDisableDeepCopy {
				t.Errorf("the sync listed %T with copies: %+v", list, o)
			}
			return c.List(ctx, list, opts...)
		},
	})
	e.syncer = NewSyncer(engines.Single(e.rt), reader, e.clock)
	e.sync()
	if lists != 1 {
		t.Fatalf("the sync listed %d times, want 1", lists)
	}
}

// A command that fails in one node does not stop the others, and that node
// is read back on the next sync instead of trusted.
func TestSyncFailureInOneNode(t *testing.T) {
	e := newSyncEnv(t, "10.244.0.0/16")
	a, b := e.node("a", "10.244.0.0/24"), e.node("b", "10.244.1.0/24")
	e.sync()
	c := e.node("c", "10.244.2.0/24")
	failed := false
	e.rt.SetExecHandler(func(ctx context.Context, m container.Machine, files map[string][]byte, in container.ExecInput, stdin []byte) (container.ExecResult, bool) {
		if m.Name == a && !failed {
			failed = true
			return container.ExecResult{ExitCode: 1, Stderr: []byte("connection reset")}, true
		}
		return e.routes.handle(ctx, m, files, in, stdin)
	})
	if err := e.syncer.Sync(e.ctx, e.cluster, e.cc); err == nil || !strings.Contains(err.Error(), a) {
		t.Fatalf("Sync = %v, want the error of %s", err, a)
	}
	if tb := e.routes.get(b); tb[pfx("10.244.2.0/24")] != e.addr(c) {
		t.Fatalf("b was not synced after a failed: %v", tb)
	}
	n := len(e.rt.ExecCalls())
	e.sync()
	if got := e.execsSince(n); got[a] != 2 {
		t.Fatalf("a ran %d commands after its failure, want the probe and the apply: %v", got[a], got)
	}
	if ta := e.routes.get(a); ta[pfx("10.244.2.0/24")] != e.addr(c) {
		t.Fatalf("a's routes %v", ta)
	}
}

func TestSyncDoesNothingWithoutNodeIPAM(t *testing.T) {
	e := newSyncEnv(t)
	e.node("a")
	e.sync()
	if calls := e.rt.ExecCalls(); len(calls) != 0 {
		t.Fatalf("a cluster without pod CIDRs ran %v", calls)
	}
}

// A node whose commands hang (a container still booting on a busy engine)
// does not hold up the others' CNI configuration and routes.
func TestSyncOneSlowNodeHoldsUpNoOther(t *testing.T) {
	e := newSyncEnv(t, "10.244.0.0/16")
	e.node("a", "10.244.0.0/24")
	e.sync()
	slow, fast := e.node("b-slow", "10.244.1.0/24"), e.node("c-fast", "10.244.2.0/24")
	release := make(chan struct{})
	e.rt.SetExecHandler(func(ctx context.Context, m container.Machine, files map[string][]byte, in container.ExecInput, stdin []byte) (container.ExecResult, bool) {
		if m.Name == slow {
			<-release
		}
		return e.routes.handle(ctx, m, files, in, stdin)
	})
	done := make(chan error, 1)
	go func() { done <- e.syncer.Sync(e.ctx, e.cluster, e.cc) }()
	deadline := time.Now().Add(10 * time.Second)
	for len(e.routes.get(fast)) != 2 {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("%s was not programmed while %s's commands hung: routes %v", fast, slow, e.routes.get(fast))
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(e.routes.get(slow)) != 2 {
		t.Fatalf("%s's routes %v", slow, e.routes.get(slow))
	}
}

// TestPodsGetTheOverlaysMTU: the node of a cluster on two engines, whose
// network is an overlay, gets a CNI configuration with the overlay's MTU,
// read from the cluster's first engine, whether the cluster's sync writes
// it or the Initialization phase does (ConfigureNode) before any sync ran.
func TestPodsGetTheOverlaysMTU(t *testing.T) {
	for _, writer := range []string{"Sync", "ConfigureNode"} {
		t.Run(writer, func(t *testing.T) {
			e := newSyncEnv(t, "10.244.0.0/16")
			overlay := "capct-c1-overlay"
			e.cc.Spec.Engines = []infrav1.ClusterEngine{{Name: "a"}, {Name: "b"}}
			e.cc.Spec.Network.Name = overlay
			if _, err := e.rt.EnsureNetwork(e.ctx, container.NetworkSpec{Name: overlay, Owner: naming.ClusterOwner(e.cluster, e.cc), Overlay: true}); err != nil {
				t.Fatal(err)
			}
			e.network = overlay
			e.syncer = NewSyncer(engines.Named(map[string]container.Runtime{"a": e.rt, "b": fake.New(e.clock)}), e.mgmt, e.clock)
			name := e.node("m1", "10.244.1.0/24")
			owner := naming.ClusterOwner(e.cluster, e.cc).ForMachine("m1")
			if writer == "Sync" {
				e.sync()
			} else if err := e.syncer.ConfigureNode(e.ctx, e.cluster, e.cc, e.rt, name, owner, []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}); err != nil {
				t.Fatalf("ConfigureNode: %v", err)
			}
			conf, err := e.rt.ReadFile(e.ctx, name, owner, CNIConfigPath)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{fmt.Sprintf(`"mtu": %d`, container.OverlayMTU), `"subnet": "10.244.1.0/24"`} {
				if !strings.Contains(string(conf), want) {
					t.Fatalf("the node's CNI config does not set %s:\n%s", want, conf)
				}
			}
		})
	}
}
