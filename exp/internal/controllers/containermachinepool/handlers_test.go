package containermachinepool

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
)

// TestCoalesce sends ten member changes of one pool and one of another
// within the window: nothing is queued before the window ends, then one
// request per pool.
func TestCoalesce(t *testing.T) {
	const window = 2 * time.Second
	clk := clocktesting.NewFakeClock(time.Now())
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](),
		workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Clock: clk})
	defer q.ShutDown()
	h := coalesce(&handler.EnqueueRequestForObject{}, window)
	ctx := context.Background()
	member := func(name string) client.Object {
		return &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	}
	for range 10 {
		h.Update(ctx, event.UpdateEvent{ObjectOld: member("a"), ObjectNew: member("a")}, q)
		clk.Step(window / 20)
	}
	h.Create(ctx, event.CreateEvent{Object: member("b")}, q)
	if n := q.Len(); n != 0 {
		t.Fatalf("%d requests queued before the window ended", n)
	}
	clk.Step(window)
	deadline := time.Now().Add(5 * time.Second)
	for q.Len() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // let any extra request land
	if n := q.Len(); n != 2 {
		t.Fatalf("want 2 requests (one per pool) after the window, got %d", n)
	}
}

// TestNotOnlyStatusChanged: a status-only update of a pool (its own status
// patch) is dropped; a change of its spec or of the metadata it acts on
// passes.
func TestNotOnlyStatusChanged(t *testing.T) {
	base := func() *expinfrav1.ContainerMachinePool {
		return &expinfrav1.ContainerMachinePool{ObjectMeta: metav1.ObjectMeta{
			Name: "p", Generation: 1, Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "1"},
			Finalizers: []string{"f"}, OwnerReferences: []metav1.OwnerReference{{Kind: "MachinePool", Name: "mp"}},
		}}
	}
	now := metav1.Now()
	for name, tc := range map[string]struct {
		change func(*expinfrav1.ContainerMachinePool)
		want   bool
	}{
		"status only":      {func(p *expinfrav1.ContainerMachinePool) { p.Status.Replicas = 3; p.ResourceVersion = "2" }, false},
		"generation":       {func(p *expinfrav1.ContainerMachinePool) { p.Generation = 2 }, true},
		"label":            {func(p *expinfrav1.ContainerMachinePool) { p.Labels["l"] = "2" }, true},
		"annotation":       {func(p *expinfrav1.ContainerMachinePool) { p.Annotations[clusterv1.PausedAnnotation] = "" }, true},
		"finalizer":        {func(p *expinfrav1.ContainerMachinePool) { p.Finalizers = nil }, true},
		"owner reference":  {func(p *expinfrav1.ContainerMachinePool) { p.OwnerReferences[0].Name = "other" }, true},
		"deletion started": {func(p *expinfrav1.ContainerMachinePool) { p.DeletionTimestamp = &now }, true},
	} {
		t.Run(name, func(t *testing.T) {
			old, updated := base(), base()
			tc.change(updated)
			if got := notOnlyStatusChanged.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: updated}); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
