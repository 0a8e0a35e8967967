package containercluster

import (
	"context"
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
// --watch-filter dropping the engine's events); and that a cluster on
// several engines, which only a change of its spec can help, does not.
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
		wantReason  string
		wantRecheck bool
	}{
		{name: "an engine that does not exist yet", engines: []string{"missing"}, wantReason: infrav1.EngineNotFoundReason, wantRecheck: true},
		{name: "several engines", engines: []string{"a", "a2"}, wantReason: infrav1.EngineNotFoundReason, wantRecheck: true},
		{name: "several engines that exist", engines: []string{"a", "a"}, wantReason: infrav1.NotSupportedYetReason},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
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
