package containercluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/imagecopy"
)

// namedEngines is an engines.Set of named runtimes.
type namedEngines map[string]container.Runtime

func (n namedEngines) Get(name string) (container.Runtime, error) {
	if rt, ok := n[name]; ok {
		return rt, nil
	}
	return nil, fmt.Errorf("no engine %q", name)
}
func (namedEngines) ForCluster(cc *infrav1.ContainerCluster) []string {
	return engines.Listed(cc)
}
func (namedEngines) Watch(context.Context, func(container.Event), func(error)) {}

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
	set := namedEngines{engines.Local: local, "engine-b": remote}
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
