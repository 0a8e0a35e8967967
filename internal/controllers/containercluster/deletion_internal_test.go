package containercluster

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrlfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/loadbalancer"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

// TestTheDeletionOfAClusterWithALostEngineEnds deletes a cluster one of
// whose engines is lost for good (not connected any more, as when its
// ContainerEngine is gone): the deletion waits for the engine until
// UnreachableEngineDeletionTimeout from its start, then ends, abandoning
// what the cluster has there and saying so. The manager's own engine is
// always waited for.
func TestTheDeletionOfAClusterWithALostEngineEnds(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Date(2026, 12, 6, 6, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		// listed are the engines the cluster lists; the first of them
		// that is connected holds its network.
		listed, connected []string
		// givesUp is whether the deletion ends after the timeout.
		givesUp bool
		// abandons is what the event says was left.
		abandons []string
	}{
		{name: "the second engine is lost", listed: []string{"a", "b"}, connected: []string{"a"}, givesUp: true,
			abandons: []string{`engines "b"`}},
		{name: "the first engine is lost", listed: []string{"a", "b"}, connected: []string{"b"}, givesUp: true,
			abandons: []string{`load balancer c1-lb`, `network capct-c1`, `engines "a"`}},
		{name: "the manager's own engine is away", connected: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			clk := clocktesting.NewFakeClock(start)
			runtimes := map[string]container.Runtime{}
			for _, name := range tc.connected {
				runtimes[name] = fake.New(clk)
			}
			set := engines.Named(runtimes)
			c := ctrlfake.NewClientBuilder().WithScheme(scheme).Build()
			recorder := record.NewFakeRecorder(10)
			r := &Reconciler{Client: c, Engines: set, Clock: clk, recorder: recorder, UnreachableEngineDeletionTimeout: time.Minute,
				lb: &loadbalancer.LoadBalancer{Client: c, Engines: set}}
			cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "uid-1"}}
			cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1",
				DeletionTimestamp: &metav1.Time{Time: start}, Finalizers: []string{infrav1.ClusterFinalizer}},
				Spec: infrav1.ContainerClusterSpec{ClusterID: "uid-1", Network: infrav1.NetworkSpec{Name: "capct-c1"}}}
			for _, e := range tc.listed {
				cc.Spec.Engines = append(cc.Spec.Engines, infrav1.ClusterEngine{Name: e})
			}
			// The network the cluster made on its first engine, when that
			// one is connected.
			network := naming.NetworkName(cluster, cc)
			first, firstConnected := runtimes[set.ForCluster(cc)[0]]
			if firstConnected {
				if _, err := first.EnsureNetwork(ctx, container.NetworkSpec{Name: network, Owner: naming.ClusterOwner(cluster, cc), IPFamily: container.IPv4}); err != nil {
					t.Fatal(err)
				}
			}

			// Within the timeout: the deletion waits.
			clk.Step(59 * time.Second)
			res, err := r.reconcileDelete(ctx, cluster, cc)
			if !controllerutil.ContainsFinalizer(cc, infrav1.ClusterFinalizer) {
				t.Fatal("the deletion ended within the timeout")
			}
			if err == nil && res.RequeueAfter == 0 || err != nil && !container.IsUnreachable(err) {
				t.Fatalf("within the timeout: %v, %v; want a wait", res, err)
			}

			// After it: the deletion ends, unless the engine is the
			// manager's own.
			clk.Step(time.Second)
			res, err = r.reconcileDelete(ctx, cluster, cc)
			if !tc.givesUp {
				if err == nil || !controllerutil.ContainsFinalizer(cc, infrav1.ClusterFinalizer) {
					t.Fatalf("after the timeout: %v, %v; the manager's own engine must be waited for", res, err)
				}
				return
			}
			if err != nil || controllerutil.ContainsFinalizer(cc, infrav1.ClusterFinalizer) {
				c := conditions.Get(cc, infrav1.LoadBalancerAvailableCondition)
				t.Fatalf("after the timeout: %v, %v (%+v); want the deletion ended", res, err, c)
			}
			if firstConnected {
				if _, err := first.InspectNetwork(ctx, network); !container.IsNotFound(err) {
					t.Fatalf("the network on the engine that answers was left: %v", err)
				}
			}
			var events []string
			for len(recorder.Events) > 0 {
				events = append(events, <-recorder.Events)
			}
			all := strings.Join(events, "\n")
			for _, want := range append(tc.abandons, infrav1.EngineUnreachableReason, container.LabelClusterID+"=uid-1") {
				if !strings.Contains(all, want) {
					t.Fatalf("events %q; want them to say %q", events, want)
				}
			}
		})
	}
}
