package containercluster

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrlfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/imagecopy"
)

// TestTheLoadBalancerImageIsCopiedToTheClustersEngine admits a cluster on
// a ContainerEngine that lacks the load balancer's image: the cluster
// waits, CopyingImage, while the image is copied from the manager's own
// engine, is woken at the end, and is then admitted.
func TestTheLoadBalancerImageIsCopiedToTheClustersEngine(t *testing.T) {
	ctx := context.Background()
	const image = "capct/haproxy:2.6"
	local, remote := fake.New(nil), fake.New(nil)
	local.AddImage(image, []byte("haproxy"))
	woken := make(chan types.NamespacedName, 1)
	set := engines.Named(map[string]container.Runtime{engines.Local: local, "engine-b": remote})
	r := &Reconciler{Engines: set, images: imagecopy.New(ctx, set, 0, func(k types.NamespacedName) { woken <- k }, nil)}
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}, Spec: infrav1.ContainerClusterSpec{
		LoadBalancer: infrav1.LoadBalancerSpec{Image: image}, Engines: []infrav1.ClusterEngine{{Name: "engine-b"}},
	}}

	reason, recheck, err := r.admit(ctx, cluster, cc)
	if reason != infrav1.CopyingImageReason || recheck == 0 || err == nil || !strings.Contains(err.Error(), "spec.loadBalancer.image") {
		t.Fatalf("admit() = %q, %s, %v; want CopyingImage naming the field", reason, recheck, err)
	}
	select {
	case k := <-woken:
		if k != (types.NamespacedName{Namespace: "ns", Name: "c1"}) {
			t.Fatalf("woke %s, want the cluster", k)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cluster was not woken when the copy ended")
	}
	if reason, _, err := r.admit(ctx, cluster, cc); reason != "" || err != nil {
		t.Fatalf("after the copy admit() = %q, %v; want the cluster admitted", reason, err)
	}
}

// TestAClusterWaitingForItsEnginesLooksAgain checks that a cluster whose
// engines cannot run it asks to be reconciled again, since the engines'
// watch does not always wake it (a Namespace label a selector asks for,
// --watch-filter dropping the engine's events); and that a cluster asking
// for what is not built, which only a change of its spec can help, does
// not.
func TestAClusterWaitingForItsEnginesLooksAgain(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, infrav1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c := ctrlfake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}},
		&infrav1.ContainerEngine{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: infrav1.ContainerEngineSpec{AllowedNamespaces: &infrav1.AllowedNamespaces{}},
			Status: infrav1.ContainerEngineStatus{Conditions: []metav1.Condition{{Type: infrav1.EngineAvailableCondition, Status: metav1.ConditionTrue, Reason: infrav1.SucceededReason}}}},
	).Build()
	r := &Reconciler{Client: c, APIReader: c, recorder: record.NewFakeRecorder(10)}
	for _, tc := range []struct {
		name        string
		engines     []string
		family      infrav1.IPFamily
		wantReason  string
		wantRecheck bool
	}{
		{name: "an engine that does not exist yet", engines: []string{"missing"}, wantReason: infrav1.EngineNotFoundReason, wantRecheck: true},
		{name: "several engines", engines: []string{"a", "a2"}, wantReason: infrav1.EngineNotFoundReason, wantRecheck: true},
		{name: "several engines outside a swarm", engines: []string{"a", "a"}, wantReason: infrav1.EngineNotInSwarmReason, wantRecheck: true},
		{name: "several engines on IPv6", engines: []string{"a", "a"}, family: infrav1.DualStackFamily, wantReason: infrav1.NotSupportedYetReason},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"},
				Spec: infrav1.ContainerClusterSpec{Network: infrav1.NetworkSpec{IPFamily: tc.family}}}
			for _, e := range tc.engines {
				cc.Spec.Engines = append(cc.Spec.Engines, infrav1.ClusterEngine{Name: e})
			}
			res, stop, err := r.reconcileEngines(context.Background(), cc, time.Now(), false)
			if err != nil || !stop {
				t.Fatalf("reconcileEngines() = %v, %v, %v; want a stop", res, stop, err)
			}
			if got := conditions.Get(cc, infrav1.EnginesReadyCondition); got == nil || got.Reason != tc.wantReason {
				t.Fatalf("EnginesReady = %v, want reason %s", got, tc.wantReason)
			}
			if (res.RequeueAfter > 0) != tc.wantRecheck {
				t.Fatalf("RequeueAfter = %s, want a recheck: %v", res.RequeueAfter, tc.wantRecheck)
			}
		})
	}
}

// TestTheManagersOwnEngineRefusesANamespaceItsPolicyLeavesOut checks that
// a cluster that lists no engines, in a namespace the manager's
// --local-engine-* flags do not admit, is stopped before anything is made
// for it and says why in EnginesReady, and that one they admit, or any
// while the flags are unset, goes on without the condition.
func TestTheManagersOwnEngineRefusesANamespaceItsPolicyLeavesOut(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, infrav1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c := ctrlfake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "platform"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Labels: map[string]string{"capct.io/local-engine": "allowed"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}},
	).Build()
	restricted := &infrav1.AllowedNamespaces{List: []string{"platform"},
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"capct.io/local-engine": "allowed"}}}
	for _, tc := range []struct {
		name        string
		local       *infrav1.AllowedNamespaces
		namespace   string
		provisioned bool
		wantStop    bool
		wantRefused bool
	}{
		{name: "no flags", local: nil, namespace: "other"},
		{name: "listed", local: restricted, namespace: "platform"},
		{name: "selected", local: restricted, namespace: "tenant"},
		{name: "neither", local: restricted, namespace: "other", wantStop: true, wantRefused: true},
		{name: "neither, once provisioned", local: restricted, namespace: "other", provisioned: true, wantRefused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recorder := record.NewFakeRecorder(10)
			r := &Reconciler{Client: c, APIReader: c, recorder: recorder}
			r.Policy.LocalEngineNamespaces = tc.local
			cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: "c1"}}
			res, stop, err := r.reconcileEngines(context.Background(), cc, time.Now(), tc.provisioned)
			if err != nil || stop != tc.wantStop {
				t.Fatalf("reconcileEngines() = %v, %v, %v; want stop %t", res, stop, err, tc.wantStop)
			}
			got := conditions.Get(cc, infrav1.EnginesReadyCondition)
			if !tc.wantRefused {
				if got != nil {
					t.Fatalf("EnginesReady = %+v, want none on a cluster the manager's own engine runs", got)
				}
				return
			}
			if got == nil || got.Status != metav1.ConditionFalse || got.Reason != infrav1.NamespaceNotAllowedReason ||
				!strings.Contains(got.Message, "--local-engine-allowed-namespaces") {
				t.Fatalf("EnginesReady = %+v, want False, NamespaceNotAllowed, naming the flags", got)
			}
			if res.RequeueAfter == 0 {
				t.Fatal("a refused cluster does not look again; a Namespace label it gains would never admit it")
			}
		})
	}
}

// TestCheckSwarm covers what lets several engines share a cluster's
// overlay network.
func TestCheckSwarm(t *testing.T) {
	engine := func(name string, swarm *infrav1.SwarmMembership) *infrav1.ContainerEngine {
		return &infrav1.ContainerEngine{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: infrav1.ContainerEngineStatus{Swarm: swarm}}
	}
	manager := func(node, cluster string) *infrav1.SwarmMembership {
		return &infrav1.SwarmMembership{NodeID: node, ClusterID: cluster, Manager: true}
	}
	worker := &infrav1.SwarmMembership{NodeID: "n2"}
	for _, tc := range []struct {
		name    string
		family  infrav1.IPFamily
		engines []*infrav1.ContainerEngine
		reason  string // "" when the engines can run the cluster
		names   string
	}{
		{"a manager and a worker", "", []*infrav1.ContainerEngine{engine("a", manager("n1", "s1")), engine("b", worker)}, "", ""},
		{"two managers of one swarm", infrav1.IPv4Family, []*infrav1.ContainerEngine{engine("a", manager("n1", "s1")), engine("b", manager("n2", "s1"))}, "", ""},
		{"an engine in no swarm", "", []*infrav1.ContainerEngine{engine("a", manager("n1", "s1")), engine("b", nil)}, infrav1.EngineNotInSwarmReason, "b is in no swarm"},
		{"a membership without a node", "", []*infrav1.ContainerEngine{engine("a", &infrav1.SwarmMembership{}), engine("b", worker)}, infrav1.EngineNotInSwarmReason, "a is in no swarm"},
		{"a worker first", "", []*infrav1.ContainerEngine{engine("b", worker), engine("a", manager("n1", "s1"))}, infrav1.NoSwarmManagerReason, "b, the cluster's first engine"},
		{"managers of two swarms", "", []*infrav1.ContainerEngine{engine("a", manager("n1", "s1")), engine("b", manager("n2", "s2"))}, infrav1.SwarmMismatchReason, "b is in swarm s2"},
		{"IPv6", infrav1.DualStackFamily, []*infrav1.ContainerEngine{engine("a", manager("n1", "s1")), engine("b", worker)}, infrav1.NotSupportedYetReason, "IPv4 only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := &infrav1.ContainerCluster{Spec: infrav1.ContainerClusterSpec{Network: infrav1.NetworkSpec{IPFamily: tc.family}}}
			err := checkSwarm(cc, tc.engines)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("want the engines to run the cluster, got %v", err)
				}
				return
			}
			var notReady *enginesNotReady
			if !errors.As(err, &notReady) || notReady.reason != tc.reason || !strings.Contains(notReady.message, tc.names) {
				t.Fatalf("want %s naming %q, got %#v", tc.reason, tc.names, err)
			}
		})
	}
}

// TestTheNetworkOfAClusterOnSeveralEnginesIsAnOverlay ensures the network
// of a cluster on two engines: an overlay made on the first engine, clear
// of every local network of both, and nothing on the second. Engine b
// holds another cluster's bridge on the subnet the overlay's name derives
// first: the swarm would not refuse it, and a node on both would not know
// which interface an address is behind. An engine that does not answer
// stops only the making of a new overlay.
func TestTheNetworkOfAClusterOnSeveralEnginesIsAnOverlay(t *testing.T) {
	ctx := context.Background()
	a, b := fake.New(nil), fake.New(nil)
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "uid-1"}}
	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}, Spec: infrav1.ContainerClusterSpec{
		ClusterID: "uid-1", Engines: []infrav1.ClusterEngine{{Name: "a"}, {Name: "b"}}}}
	name := "capct-c1"
	first, _ := container.Subnets(name, 0)
	b.AddNetwork(container.Network{Name: "capct-other", Labels: container.Owner{Namespace: "ns", Cluster: "other", ClusterID: "uid-2"}.Labels(),
		IPv4Subnet: first}, true)
	r := &Reconciler{Engines: engines.Named(map[string]container.Runtime{"a": a, "b": b})}

	// Engine b away while the overlay is new: no subnet is picked blind.
	b.FailNext(fake.OpLocalSubnets, container.NewError("list", "networks", "", container.KindUnreachable, errors.New("no route to host")))
	if _, err := r.ensureNetwork(ctx, cluster, cc, name, container.IPv4); !container.IsUnreachable(err) {
		t.Fatalf("want engine b's unreachability while the overlay is new, got %v", err)
	}
	if _, err := a.InspectNetwork(ctx, name); !container.IsNotFound(err) {
		t.Fatalf("an overlay was made without engine b's local networks: %v", err)
	}

	subnets, err := r.ensureNetwork(ctx, cluster, cc, name, container.IPv4)
	if err != nil {
		t.Fatal(err)
	}
	n, err := a.InspectNetwork(ctx, name)
	if err != nil {
		t.Fatalf("the overlay is not on the first engine: %v", err)
	}
	if !n.Overlay || subnets[0] != n.IPv4Subnet {
		t.Fatalf("want an overlay, got %+v (subnets %v)", n, subnets)
	}
	if n.IPv4Subnet.Overlaps(first) {
		t.Fatalf("the overlay took %s, the subnet of engine b's bridge capct-other %s", n.IPv4Subnet, first)
	}
	if _, err := b.InspectNetwork(ctx, name); !container.IsNotFound(err) {
		t.Fatalf("a network was made on the second engine too: %v", err)
	}
	// Once made, the overlay does not need the other engines: one that is
	// away must not stop the cluster's reconcile.
	b.FailNext(fake.OpLocalSubnets, container.NewError("list", "networks", "", container.KindUnreachable, errors.New("no route to host")))
	if again, err := r.ensureNetwork(ctx, cluster, cc, name, container.IPv4); err != nil || again[0] != subnets[0] {
		t.Fatalf("ensuring the existing overlay with engine b away: %v, %v", again, err)
	}

	// An Unmanaged network that is local to the first engine cannot carry
	// a cluster on several engines.
	a.AddNetwork(container.Network{Name: "shared", IPv4Subnet: netip.MustParsePrefix("10.9.0.0/24")}, true)
	cc.Spec.Network = infrav1.NetworkSpec{Name: "shared", Mode: infrav1.NetworkUnmanaged}
	if _, err := r.ensureNetwork(ctx, cluster, cc, "shared", container.IPv4); err == nil || !strings.Contains(err.Error(), "overlay") {
		t.Fatalf("want a local Unmanaged network refused for a cluster on several engines, got %v", err)
	}
}

// TestALostEngineLeavesTheFailureDomainsAfterAMinute covers the failure
// domains of a cluster with an engine that stops answering: listed while
// it may be a blip, gone once it has been silent for engines.LostAfter.
func TestALostEngineLeavesTheFailureDomainsAfterAMinute(t *testing.T) {
	now := time.Date(2026, 12, 6, 6, 0, 0, 0, time.UTC)
	engine := func(name string, answers bool, since time.Duration) *infrav1.ContainerEngine {
		status, reason := metav1.ConditionTrue, infrav1.SucceededReason
		if !answers {
			status, reason = metav1.ConditionFalse, infrav1.EngineUnreachableReason
		}
		return &infrav1.ContainerEngine{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: infrav1.ContainerEngineStatus{Conditions: []metav1.Condition{{
			Type: infrav1.EngineAvailableCondition, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(now.Add(-since)),
		}}}}
	}
	cc := &infrav1.ContainerCluster{Spec: infrav1.ContainerClusterSpec{Engines: []infrav1.ClusterEngine{{Name: "a"}, {Name: "b"}, {Name: "c"}}}}
	for _, tc := range []struct {
		name   string
		found  map[string]*infrav1.ContainerEngine
		want   []string
		lostIn time.Duration
	}{
		{"every engine answers", map[string]*infrav1.ContainerEngine{"a": engine("a", true, time.Hour), "b": engine("b", true, time.Second), "c": engine("c", true, 0)},
			[]string{"a", "b", "c"}, 0},
		{"silent for 20 s", map[string]*infrav1.ContainerEngine{"a": engine("a", true, time.Hour), "b": engine("b", false, 20*time.Second), "c": engine("c", true, 0)},
			[]string{"a", "b", "c"}, 40 * time.Second},
		{"silent for a minute", map[string]*infrav1.ContainerEngine{"a": engine("a", true, time.Hour), "b": engine("b", false, time.Minute), "c": engine("c", false, 50*time.Second)},
			[]string{"a", "c"}, 10 * time.Second},
		{"an engine not found yet stays", map[string]*infrav1.ContainerEngine{"a": engine("a", true, time.Hour)},
			[]string{"a", "b", "c"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			domains, lostIn := engineFailureDomains(cc, tc.found, now)
			var got []string
			for _, d := range domains {
				got = append(got, d.Name)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") || lostIn != tc.lostIn {
				t.Fatalf("engineFailureDomains() = %v, lost in %v; want %v, lost in %v", got, lostIn, tc.want, tc.lostIn)
			}
		})
	}
}
