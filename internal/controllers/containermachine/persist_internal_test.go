package containermachine

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// writes counts the requests a persister sends.
type writes struct{ patches, statusPatches, gets int }

func persistFixture(t *testing.T) (client.Client, *writes, *infrav1.ContainerMachine) {
	t.Helper()
	scheme := kruntime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m", Generation: 1}}
	base := ctrlfake.NewClientBuilder().WithScheme(scheme).WithObjects(cm).WithStatusSubresource(cm).Build()
	w := &writes{}
	c := interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			w.gets++
			return c.Get(ctx, key, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			w.patches++
			return c.Patch(ctx, obj, patch, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			w.statusPatches++
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	read := &infrav1.ContainerMachine{}
	if err := base.Get(context.Background(), client.ObjectKeyFromObject(cm), read); err != nil {
		t.Fatal(err)
	}
	return c, w, read
}

// provision changes what a reconcile that moves phases changes: the
// conditions, the other status fields and the spec.
func provision(cm *infrav1.ContainerMachine) {
	now := metav1.NewTime(time.Now())
	conditions.Set(cm, metav1.Condition{Type: infrav1.BootstrappedCondition, Status: metav1.ConditionTrue, Reason: infrav1.SucceededReason, LastTransitionTime: now})
	conditions.Set(cm, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: infrav1.NodeNotFoundReason, LastTransitionTime: now})
	cm.Status.Phase = infrav1.MachinePhaseBootstrapped
	cm.Status.Addresses = []clusterv1.MachineAddress{{Type: clusterv1.MachineInternalIP, Address: "10.0.0.2"}}
	cm.Status.Initialization.Provisioned = ptr.To(true)
	cm.Spec.ProviderID = "container:///m"
}

func TestAReconcileWritesItsStatusInOnePatch(t *testing.T) {
	ctx := context.Background()
	c, w, cm := persistFixture(t)
	p := newPersister(c, c, cm)
	provision(cm)
	if stale, err := p.write(ctx, cm); err != nil || stale {
		t.Fatalf("write: stale %v, err %v", stale, err)
	}
	if *w != (writes{patches: 1, statusPatches: 1}) {
		t.Errorf("requests %+v, want one patch of the spec and one of the whole status", *w)
	}
	got := &infrav1.ContainerMachine{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
		t.Fatal(err)
	}
	if !conditions.IsTrue(got, infrav1.BootstrappedCondition) || got.Status.Phase != infrav1.MachinePhaseBootstrapped ||
		len(got.Status.Addresses) != 1 || !ptr.Deref(got.Status.Initialization.Provisioned, false) || got.Spec.ProviderID != "container:///m" {
		t.Errorf("stored %+v / %+v, want the reconcile's changes", got.Spec, got.Status)
	}

	*w = writes{}
	if stale, err := p.write(ctx, cm); err != nil || stale || *w != (writes{}) {
		t.Errorf("a reconcile that changed nothing sent %+v (stale %v, err %v), want nothing", *w, stale, err)
	}
}

func TestAStatusPatchSurvivesAnotherWritersMetadataPatch(t *testing.T) {
	ctx := context.Background()
	c, w, cm := persistFixture(t)
	p := newPersister(c, c, cm)
	// Node IPAM records its decision on the machine's metadata in the
	// middle of the reconcile, on a copy.
	record := cm.DeepCopy()
	record.Annotations = map[string]string{infrav1.PodCIDRsAnnotation: "10.1.0.0/24"}
	if err := c.Patch(ctx, record, client.MergeFrom(cm)); err != nil {
		t.Fatal(err)
	}
	provision(cm)
	// Without a change of the spec, whose patch would return the new
	// resourceVersion.
	cm.Spec.ProviderID = ""
	*w = writes{}
	if stale, err := p.write(ctx, cm); err != nil || stale {
		t.Fatalf("write: stale %v, err %v", stale, err)
	}
	sent := *w
	got := &infrav1.ContainerMachine{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
		t.Fatal(err)
	}
	if got.Annotations[infrav1.PodCIDRsAnnotation] != "10.1.0.0/24" {
		t.Errorf("annotations %v: the record was undone", got.Annotations)
	}
	if !conditions.IsTrue(got, infrav1.BootstrappedCondition) {
		t.Errorf("conditions %v: the status was not written after the conflict", got.Status.Conditions)
	}
	if sent != (writes{statusPatches: 2, gets: 1}) {
		t.Errorf("requests %+v, want the conflicting status patch, one read and the rebased one", sent)
	}
}

func TestAPhasesOwnPatchIsNotAConflict(t *testing.T) {
	ctx := context.Background()
	c, w, cm := persistFixture(t)
	p := newPersister(c, c, cm)
	provision(cm)
	// A phase writes the record and the providerID itself, and hands back
	// the resourceVersion it got.
	record := cm.DeepCopy()
	record.Annotations = map[string]string{infrav1.PodCIDRsAnnotation: "10.1.0.0/24"}
	if err := c.Patch(ctx, record, client.MergeFrom(p.before)); err != nil {
		t.Fatal(err)
	}
	cm.Annotations, cm.ResourceVersion = record.Annotations, record.ResourceVersion
	*w = writes{}
	if stale, err := p.write(ctx, cm); err != nil || stale {
		t.Fatalf("write: stale %v, err %v", stale, err)
	}
	if *w != (writes{statusPatches: 1}) {
		t.Errorf("requests %+v, want the status patch alone", *w)
	}
}

func TestAStatusPatchNeverOverwritesANewerStatus(t *testing.T) {
	ctx := context.Background()
	c, _, cm := persistFixture(t)
	p := newPersister(c, c, cm)
	// The machine's own last write, which the cache has not shown yet.
	newer := cm.DeepCopy()
	conditions.Set(newer, metav1.Condition{Type: infrav1.InitializedCondition, Status: metav1.ConditionTrue, Reason: infrav1.SucceededReason})
	if err := c.Status().Update(ctx, newer); err != nil {
		t.Fatal(err)
	}
	provision(cm)
	stale, err := p.write(ctx, cm)
	if err != nil || !stale {
		t.Fatalf("write: stale %v, err %v; want stale", stale, err)
	}
	got := &infrav1.ContainerMachine{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
		t.Fatal(err)
	}
	if !conditions.IsTrue(got, infrav1.InitializedCondition) {
		t.Errorf("conditions %v: the newer status was overwritten", got.Status.Conditions)
	}
}

func TestRebaseStampsConditionsWithTheNewGeneration(t *testing.T) {
	for _, tc := range []struct {
		name            string
		generation      int64
		conditionGen    int64
		wantGeneration  int64
		wantResourceVer string
	}{
		{name: "the spec changed", generation: 2, conditionGen: 1, wantGeneration: 2, wantResourceVer: "8"},
		{name: "only the metadata changed", generation: 1, conditionGen: 1, wantGeneration: 1, wantResourceVer: "8"},
		{name: "a condition of an older generation is left alone", generation: 2, conditionGen: 0, wantGeneration: 0, wantResourceVer: "8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Generation: 1, ResourceVersion: "7"}}
			cm.Status.Conditions = []metav1.Condition{{Type: infrav1.ReadyCondition, ObservedGeneration: tc.conditionGen}}
			p := &persister{before: cm.DeepCopy()}
			server := cm.DeepCopy()
			server.Generation, server.ResourceVersion = tc.generation, "8"
			p.rebase(cm, server)
			if got := cm.Status.Conditions[0].ObservedGeneration; got != tc.wantGeneration {
				t.Errorf("observedGeneration %d, want %d", got, tc.wantGeneration)
			}
			if cm.ResourceVersion != tc.wantResourceVer || p.before.ResourceVersion != tc.wantResourceVer {
				t.Errorf("resourceVersion %s / %s, want %s", cm.ResourceVersion, p.before.ResourceVersion, tc.wantResourceVer)
			}
		})
	}
}
