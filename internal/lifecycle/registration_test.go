package lifecycle

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

func TestRegistrationAndInitialization(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	s := e.scope()
	bootstrap(t, e, s)
	if _, err := (&Provision{}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	res, err := e.deps.registration().Reconcile(ctx, s)
	if err != nil || res.RequeueAfter == 0 {
		t.Fatalf("want a requeue while no Node exists, got %v %v", res, err)
	}
	wantCondition(t, s, infrav1.RegisteredCondition, metav1.ConditionFalse, infrav1.NodeNotFoundReason)

	node := readyNode(cpName, corev1.Taint{Key: UninitializedTaint, Effect: corev1.TaintEffectNoSchedule}, corev1.Taint{Key: "other", Effect: corev1.TaintEffectNoSchedule})
	if err := e.workload.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	if _, err := e.deps.registration().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.RegisteredCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	if _, err := e.deps.initialization().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.InitializedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	got := &corev1.Node{}
	if err := e.workload.Get(ctx, client.ObjectKey{Name: cpName}, got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Taints) != 1 || got.Spec.Taints[0].Key != "other" {
		t.Fatalf("want only the uninitialized taint removed, got %v", got.Spec.Taints)
	}
	if !hasInternalIP(got) {
		t.Fatalf("want the machine's address on the Node, got %v", got.Status.Addresses)
	}
	SetReadyCondition(s.ContainerMachine, e.clock.Now())
	wantCondition(t, s, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	if DerivePhase(s.ContainerMachine) != infrav1.MachinePhaseRunning {
		t.Fatalf("want phase Running, got %s", DerivePhase(s.ContainerMachine))
	}
}

// TestRegistrationStartsWhileTheBootstrapRuns: the kubelet registers its
// Node while kubeadm still runs, and the machine registers it then, not
// after the bootstrap, so that the pod CIDRs and the taint's removal go on
// beside the end of the bootstrap. Before a container runs there is
// nothing to look for.
func TestRegistrationStartsWhileTheBootstrapRuns(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	s := e.scope()
	if _, err := e.deps.registration().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.RegisteredCondition, metav1.ConditionFalse, infrav1.WaitingForLaunchReason)

	s = e.launched(nil)
	setCondition(s.ContainerMachine, e.clock.Now(), infrav1.BootstrappedCondition, metav1.ConditionUnknown, infrav1.InProgressReason, "Running the bootstrap data")
	res, err := e.deps.registration().Reconcile(ctx, s)
	if err != nil || res.RequeueAfter == 0 {
		t.Fatalf("want a requeue while the kubelet has not registered, got %v %v", res, err)
	}
	wantCondition(t, s, infrav1.RegisteredCondition, metav1.ConditionFalse, infrav1.WaitingForBootstrapReason)

	if err := e.workload.Create(ctx, readyNode(cpName, corev1.Taint{Key: UninitializedTaint, Effect: corev1.TaintEffectNoSchedule})); err != nil {
		t.Fatal(err)
	}
	if _, err := e.deps.registration().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.RegisteredCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	if s.Node == nil || s.Node.Spec.ProviderID != s.ProviderID() {
		t.Fatalf("want the Node with providerID %s, got %+v", s.ProviderID(), s.Node)
	}
	if _, err := e.deps.initialization().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.InitializedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	SetReadyCondition(s.ContainerMachine, e.clock.Now())
	wantCondition(t, s, infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.InProgressReason)
	if got := DerivePhase(s.ContainerMachine); got != infrav1.MachinePhaseLaunched {
		t.Fatalf("want phase Launched while the bootstrap runs, got %s", got)
	}
}
