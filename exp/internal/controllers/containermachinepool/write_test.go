package containermachinepool

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

// A change of the pool's members costs one status patch, conditions
// included, and one patch of the spec only when its providerIDList moved;
// a reconcile that changed nothing writes nothing.
func TestWriteSendsOneStatusPatch(t *testing.T) {
	for name, tc := range map[string]struct {
		change             func(*expinfrav1.ContainerMachinePool)
		patches, statusOps int
	}{
		"nothing changed": {change: func(*expinfrav1.ContainerMachinePool) {}},
		"a member became ready": {change: func(p *expinfrav1.ContainerMachinePool) {
			p.Status.Ready = true
			p.Status.Conditions = []metav1.Condition{{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready"}}
		}, statusOps: 1},
		"a member joined": {change: func(p *expinfrav1.ContainerMachinePool) {
			p.Spec.ProviderIDList = append(p.Spec.ProviderIDList, "container://c1/m2")
			p.Status.Replicas = 2
			p.Status.Conditions = []metav1.Condition{{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: "ScalingUp"}}
		}, patches: 1, statusOps: 1},
	} {
		t.Run(name, func(t *testing.T) {
			c, patches, statusOps := poolClient(t)
			pool := &expinfrav1.ContainerMachinePool{}
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "pool"}, pool); err != nil {
				t.Fatal(err)
			}
			before := pool.DeepCopy()
			tc.change(pool)
			want := pool.DeepCopy()
			if err := (&Reconciler{Client: c}).write(context.Background(), before, pool); err != nil {
				t.Fatal(err)
			}
			if *patches != tc.patches || *statusOps != tc.statusOps {
				t.Fatalf("%d patches and %d status patches, want %d and %d", *patches, *statusOps, tc.patches, tc.statusOps)
			}
			got := &expinfrav1.ContainerMachinePool{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(pool), got); err != nil {
				t.Fatal(err)
			}
			if len(got.Spec.ProviderIDList) != len(want.Spec.ProviderIDList) || got.Status.Replicas != want.Status.Replicas ||
				got.Status.Ready != want.Status.Ready || len(got.Status.Conditions) != len(want.Status.Conditions) {
				t.Fatalf("the API server holds spec %v, status %+v; want %v, %+v", got.Spec, got.Status, want.Spec, want.Status)
			}
		})
	}
}

// A status computed from a stale read of the pool never replaces the
// newer one: the patch is locked on the resourceVersion it was computed
// against.
func TestWriteNeverReplacesANewerStatus(t *testing.T) {
	c, _, _ := poolClient(t)
	ctx := context.Background()
	pool := &expinfrav1.ContainerMachinePool{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "pool"}, pool); err != nil {
		t.Fatal(err)
	}
	stale := pool.DeepCopy()
	newer := pool.DeepCopy()
	newer.Status.Replicas = 3
	if err := c.Status().Update(ctx, newer); err != nil {
		t.Fatal(err)
	}
	pool.Status.Replicas = 2
	if err := (&Reconciler{Client: c}).write(ctx, stale, pool); !apierrors.IsConflict(err) {
		t.Fatalf("write from a stale read: %v, want a conflict", err)
	}
	got := &expinfrav1.ContainerMachinePool{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pool), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Replicas != 3 {
		t.Fatalf("replicas %d, want the newer 3", got.Status.Replicas)
	}
}

// poolClient holds one pool and counts the patches of its object and of
// its status.
func poolClient(t *testing.T) (c client.Client, patches, statusOps *int) {
	t.Helper()
	scheme, err := envtest.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	pool := &expinfrav1.ContainerMachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pool"}}
	pool.Spec.ProviderIDList = []string{"container://c1/m1"}
	pool.Status.Replicas = 1
	patches, statusOps = new(int), new(int)
	c = fakeclient.NewClientBuilder().WithScheme(scheme).WithObjects(pool).
		WithStatusSubresource(&expinfrav1.ContainerMachinePool{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				*patches++
				return cl.Patch(ctx, obj, patch, opts...)
			},
			SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				*statusOps++
				return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	return c, patches, statusOps
}

// The reconcile that removes the finalizer (reconcileDelete, in memory)
// writes it, and then nothing: the pool is gone.
func TestWriteRemovesTheFinalizerAndNothingMore(t *testing.T) {
	c, patches, statusOps := poolClient(t)
	ctx := context.Background()
	pool := &expinfrav1.ContainerMachinePool{}
	key := client.ObjectKey{Namespace: "ns", Name: "pool"}
	if err := c.Get(ctx, key, pool); err != nil {
		t.Fatal(err)
	}
	pool.Finalizers = []string{expinfrav1.MachinePoolFinalizer}
	if err := c.Update(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, pool); err != nil {
		t.Fatal(err)
	}
	*patches = 0
	before := pool.DeepCopy()
	pool.Finalizers = nil
	pool.Status.Replicas = 0
	if err := (&Reconciler{Client: c}).write(ctx, before, pool); err != nil {
		t.Fatal(err)
	}
	if *patches != 1 || *statusOps != 0 {
		t.Fatalf("%d patches and %d status patches, want the finalizer's patch alone", *patches, *statusOps)
	}
	if err := c.Get(ctx, key, &expinfrav1.ContainerMachinePool{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the pool is still there: %v", err)
	}
}
