//go:build realcluster

package emptyspec_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	dockercontainer "github.com/docker/docker/api/types/container"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/test/realcluster"
)

// TestEmptySpecProvisions creates a Cluster and a ContainerCluster whose
// spec is {} in the quickstart's namespace: the webhook gives it the
// manager's default network, the management cluster's (the quickstart's
// clusterctl init sets CAPCT_DEFAULT_NETWORK), as the quickstart's own
// cluster has it; within EMPTYSPEC_TIMEOUT (300 s) the ContainerCluster
// must be Provisioned (its load balancer serving and verified by the
// manager, which needs no control plane), its load balancer on CAPCT's
// default image; deleted, within the same bound both objects go and the
// engine keeps no container or network of the cluster.
func TestEmptySpecProvisions(t *testing.T) {
	env := realcluster.LoadEnv(t, "test-quickstart")
	bound := realcluster.Seconds(t, "EMPTYSPEC_TIMEOUT", 300)
	ctx := t.Context()
	mgmt := realcluster.Connect(t, env).Mgmt
	engine := realcluster.NewEngine(t, "the engine", "")
	name := "emptyspec-" + rand.String(5)
	key := client.ObjectKey{Namespace: env.Namespace, Name: name}

	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerCluster", Name: key.Name,
		}},
	}
	// Whatever happens, the quickstart's down finds nothing of this test:
	// it deletes the Clusters it knows, and this one is gone already.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), realcluster.RequestTimeout)
		defer cancel()
		_ = mgmt.Delete(ctx, cluster)
		_ = mgmt.Delete(ctx, cc)
	})
	for _, obj := range []client.Object{cc, cluster} {
		if err := realcluster.Retry(ctx, func(ctx context.Context) error { return create(ctx, mgmt, obj) }); err != nil {
			t.Fatalf("failed to create %T %s: %v", obj, key, err)
		}
	}

	start := time.Now()
	cc, err := waitProvisioned(ctx, t, mgmt, key, bound)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ContainerCluster %s with an empty spec Provisioned in %s, endpoint %s:%d", key, time.Since(start).Round(time.Second),
		cc.Spec.ControlPlaneEndpoint.Host, cc.Spec.ControlPlaneEndpoint.Port)
	if cc.Spec.ClusterID == "" {
		t.Fatalf("ContainerCluster %s is Provisioned without a clusterID", key)
	}
	owned := container.LabelClusterID + "=" + cc.Spec.ClusterID
	lbs, err := engine.Containers(ctx, owned, container.LabelRole+"="+string(container.RoleLoadBalancer))
	if err != nil {
		t.Fatal(err)
	}
	if len(lbs) != 1 || lbs[0].State != "running" || lbs[0].Image != naming.DefaultLoadBalancerImage {
		t.Fatalf("want one running load balancer on %s, got %s", naming.DefaultLoadBalancerImage, describe(lbs))
	}
	// The quickstart's cluster is on the management network, Unmanaged,
	// which is the manager's default network here.
	var quickstart infrav1.ContainerCluster
	if err := mgmt.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: env.Cluster}, &quickstart); err != nil {
		t.Fatalf("failed to read the quickstart's ContainerCluster %s: %v", env.Cluster, err)
	}
	want := infrav1.NetworkSpec{Name: quickstart.Spec.Network.Name, Mode: infrav1.NetworkUnmanaged}
	if got := cc.Spec.Network; got.Name != want.Name || got.Mode != want.Mode {
		t.Fatalf("the empty spec's network is %s (%s), want the default network %s (Unmanaged)", got.Name, got.Mode, want.Name)
	}
	if networks, err := engine.Networks(ctx, owned); err != nil || len(networks) != 0 {
		t.Fatalf("want no network of the cluster's own, got %v (%v)", networks, err)
	}

	start = time.Now()
	for _, obj := range []client.Object{cluster, cc} {
		if err := realcluster.Retry(ctx, func(ctx context.Context) error {
			rctx, cancel := context.WithTimeout(ctx, realcluster.RequestTimeout)
			defer cancel()
			return client.IgnoreNotFound(mgmt.Delete(rctx, obj))
		}); err != nil {
			t.Fatalf("failed to delete %T %s: %v", obj, key, err)
		}
	}
	var left []string
	for deadline := time.Now().Add(bound); ; {
		if left = leftovers(ctx, mgmt, engine, key, owned); len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after the delete, still there: %s", bound, strings.Join(left, "; "))
		}
		realcluster.Pause(ctx, 2*time.Second)
	}
	t.Logf("Cluster %s deleted, nothing of it left, in %s", key, time.Since(start).Round(time.Second))
}

// create creates obj, a copy of it: a create the server made before an
// answer was lost (a webhook timing out) is not made again.
func create(ctx context.Context, c client.Client, obj client.Object) error {
	ctx, cancel := context.WithTimeout(ctx, realcluster.RequestTimeout)
	defer cancel()
	err := c.Create(ctx, obj.DeepCopyObject().(client.Object))
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// waitProvisioned waits up to bound for the ContainerCluster key to be
// Provisioned, logging its LoadBalancerAvailable condition as it changes.
func waitProvisioned(ctx context.Context, t *testing.T, c client.Client, key client.ObjectKey, bound time.Duration) (*infrav1.ContainerCluster, error) {
	last, deadline := "", time.Now().Add(bound)
	for {
		cc, err := get(ctx, c, key)
		if err == nil {
			if ptr.Deref(cc.Status.Initialization.Provisioned, false) {
				return cc, nil
			}
			if now := conditionOf(cc, infrav1.LoadBalancerAvailableCondition); now != last {
				t.Logf("ContainerCluster %s: %s", key, now)
				last = now
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("ContainerCluster %s with an empty spec not Provisioned within %s: %s", key, bound, last)
		}
		realcluster.Pause(ctx, 2*time.Second)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

func get(ctx context.Context, c client.Client, key client.ObjectKey) (*infrav1.ContainerCluster, error) {
	ctx, cancel := context.WithTimeout(ctx, realcluster.RequestTimeout)
	defer cancel()
	cc := &infrav1.ContainerCluster{}
	if err := c.Get(ctx, key, cc); err != nil {
		return nil, fmt.Errorf("failed to read ContainerCluster %s: %w", key, err)
	}
	return cc, nil
}

// conditionOf is "Type=Status Reason: Message" of cc's condition t.
func conditionOf(cc *infrav1.ContainerCluster, t string) string {
	for _, c := range cc.Status.Conditions {
		if c.Type == t {
			return fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return t + " not reported yet"
}

// leftovers says what of the cluster key is still there: its Cluster and
// ContainerCluster, and the containers and networks labelled owned.
func leftovers(ctx context.Context, c client.Client, engine *realcluster.Engine, key client.ObjectKey, owned string) []string {
	var left []string
	for _, obj := range []client.Object{&clusterv1.Cluster{}, &infrav1.ContainerCluster{}} {
		rctx, cancel := context.WithTimeout(ctx, realcluster.RequestTimeout)
		err := c.Get(rctx, key, obj)
		cancel()
		switch {
		case err == nil:
			left = append(left, fmt.Sprintf("%T", obj))
		case !apierrors.IsNotFound(err):
			left = append(left, err.Error())
		}
	}
	containers, err := engine.Containers(ctx, owned)
	if err != nil {
		left = append(left, err.Error())
	}
	if len(containers) > 0 {
		left = append(left, "containers "+describe(containers))
	}
	networks, err := engine.Networks(ctx, owned)
	if err != nil {
		left = append(left, err.Error())
	}
	if len(networks) > 0 {
		left = append(left, "networks "+strings.Join(networks, " "))
	}
	return left
}

// describe names each container with its image and state.
func describe(list []dockercontainer.Summary) string {
	if len(list) == 0 {
		return "none"
	}
	out := make([]string, 0, len(list))
	for _, c := range list {
		out = append(out, fmt.Sprintf("%s (%s, %s)", realcluster.Name(c), c.Image, c.State))
	}
	return strings.Join(out, ", ")
}
