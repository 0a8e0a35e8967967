package containermachine_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// TestAMachineIsProvisionedInFewStatusWrites watches every version of a
// ContainerMachine from its creation until it is provisioned: the
// finalizer comes first and alone, the Paused condition goes with the
// first status of the lifecycle, and each reconcile that moves phases
// writes its status once (Cluster API's patch helper wrote the conditions
// and the rest of the status as two patches).
func TestAMachineIsProvisionedInFewStatusWrites(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns, cluster := newCluster(t, g, ctx, "w1")
	g.Eventually(func(g Gomega) {
		get(g, ctx, cluster)
		g.Expect(cluster.Status.Initialization.InfrastructureProvisioned).To(Equal(ptr.To(true)))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())

	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	w, err := wc.Watch(ctx, &infrav1.ContainerMachineList{}, client.InNamespace(ns.Name))
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	_, _ = newMachine(g, ctx, cluster, "cp-0")

	var versions []*infrav1.ContainerMachine
	for ev := range w.ResultChan() {
		g.Expect(ev.Type).NotTo(Equal(watch.Error), "watch: %v", ev.Object)
		cm, ok := ev.Object.(*infrav1.ContainerMachine)
		g.Expect(ok).To(BeTrue())
		versions = append(versions, cm)
		if ptr.Deref(cm.Status.Initialization.Provisioned, false) {
			break
		}
	}
	g.Expect(ctx.Err()).NotTo(HaveOccurred(), "the machine was not provisioned")

	statusWrites := 0
	for i, cm := range versions {
		if conditions.Has(cm, clusterv1.PausedCondition) {
			g.Expect(controllerutil.ContainsFinalizer(cm, infrav1.MachineFinalizer)).To(BeTrue(),
				"version %d has a status but no finalizer", i)
			g.Expect(conditions.Has(cm, infrav1.LaunchedCondition)).To(BeTrue(),
				"version %d: the Paused condition was written without the lifecycle's", i)
		}
		if i > 0 && !apiequality.Semantic.DeepEqual(cm.Status, versions[i-1].Status) {
			statusWrites++
		}
	}
	// Launched with the bootstrap started, then Bootstrapped and
	// provisioned; a third when a reconcile sees the bootstrap run before
	// it ends.
	g.Expect(statusWrites).To(BeNumerically("<=", 3), "status writes until provisioned")
}
