package ssa

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

const owner = "capct-ssa-test"

// writes counts the requests a client sends that can write, and keeps the
// last apply body.
type writes struct {
	mu                            sync.Mutex
	applies, statusApplies, other int
	lastBody                      map[string]any
}

func (w *writes) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.applies + w.statusApplies + w.other
}

func (w *writes) counts() (applies, statusApplies, other int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.applies, w.statusApplies, w.other
}

func (w *writes) record(counter *int, ac runtime.ApplyConfiguration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	*counter++
	if u, ok := ac.(interface{ UnstructuredContent() map[string]any }); ok {
		w.lastBody = runtime.DeepCopyJSON(u.UnstructuredContent())
	}
}

func (w *writes) body() map[string]any {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastBody
}

// countingClient wraps the test API server's client, counting writes.
func countingClient() (client.Client, *writes) {
	w := &writes{}
	other := func() { w.mu.Lock(); w.other++; w.mu.Unlock() }
	return interceptor.NewClient(watchClient, interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			w.record(&w.applies, obj)
			return c.Apply(ctx, obj, opts...)
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			w.record(&w.statusApplies, obj)
			return c.SubResource(sub).Apply(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			other()
			return c.Patch(ctx, obj, patch, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			other()
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			other()
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			other()
			return c.Update(ctx, obj, opts...)
		},
	}), w
}

func configMap(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault, Labels: map[string]string{"app": "capct"}},
		Data:       data,
	}
}

func machine(name string, preload ...string) *infrav1.ContainerMachine {
	return &infrav1.ContainerMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec:       infrav1.ContainerMachineSpec{Image: "capct/node:v1.35.4", PreLoadImages: preload},
	}
}

// current reads obj's live state, as a controller's informer would have it.
func current(t *testing.T, obj client.Object) client.Object {
	t.Helper()
	live := obj.DeepCopyObject().(client.Object)
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), live); err != nil {
		t.Fatal(err)
	}
	return live
}

// expectWrites fails unless the client sent want writes since the last call.
func expectWrites(t *testing.T, w *writes, before *int, want int, what string) {
	t.Helper()
	now := w.total()
	if got := now - *before; got != want {
		t.Errorf("%s: %d writes sent, want %d", what, got, want)
	}
	*before = now
}

func TestApplyConfigMapCache(t *testing.T) {
	ctx := t.Context()
	c, w := countingClient()
	cache := NewCache("test")
	sent := 0

	cm := configMap("cache-cm", map[string]string{"k": "v"})
	if err := Apply(ctx, c, owner, cm, WithCache(cache)); err != nil {
		t.Fatal(err)
	}
	expectWrites(t, w, &sent, 1, "create")
	if cm.ResourceVersion == "" || cm.UID == "" || cm.CreationTimestamp.IsZero() {
		t.Fatalf("the server's answer was not written back: %+v", cm.ObjectMeta)
	}
	created := cm.ResourceVersion

	// Identical intent, object unchanged on the server: not sent.
	if err := Apply(ctx, c, owner, configMap("cache-cm", map[string]string{"k": "v"}), WithCache(cache), WithOriginal(current(t, cm))); err != nil {
		t.Fatal(err)
	}
	expectWrites(t, w, &sent, 0, "identical re-apply with the original")
	// The returned object carries metadata.uid, a precondition the first
	// request did not have: another request, sent once (a no-op on the
	// server) and then known. Its own resourceVersion is enough for the
	// lookup, and a skipped apply leaves the object as it was.
	for i, want := range []int{1, 0} {
		again := cm.DeepCopy()
		if err := Apply(ctx, c, owner, again, WithCache(cache)); err != nil {
			t.Fatal(err)
		}
		expectWrites(t, w, &sent, want, fmt.Sprintf("re-apply %d of the returned object", i+1))
		if again.ResourceVersion != created {
			t.Errorf("resourceVersion after re-apply %d = %q, want %q", i+1, again.ResourceVersion, created)
		}
	}
	// A skipped apply with an original hands the original back.
	fresh := configMap("cache-cm", map[string]string{"k": "v"})
	if err := Apply(ctx, c, owner, fresh, WithCache(cache), WithOriginal(current(t, cm))); err != nil {
		t.Fatal(err)
	}
	if fresh.UID != cm.UID || fresh.ResourceVersion != created {
		t.Errorf("skipped apply did not write the original back: %+v", fresh.ObjectMeta)
	}
	expectWrites(t, w, &sent, 0, "identical re-apply")

	// Changed intent: sent.
	changed := configMap("cache-cm", map[string]string{"k": "w"})
	if err := Apply(ctx, c, owner, changed, WithCache(cache), WithOriginal(current(t, cm))); err != nil {
		t.Fatal(err)
	}
	expectWrites(t, w, &sent, 1, "changed field")
	if changed.ResourceVersion == created || changed.Data["k"] != "w" {
		t.Fatalf("change not applied: rv %s, data %v", changed.ResourceVersion, changed.Data)
	}
	// The result of a change is a fixed point of the same request.
	if err := Apply(ctx, c, owner, configMap("cache-cm", map[string]string{"k": "w"}), WithCache(cache), WithOriginal(current(t, cm))); err != nil {
		t.Fatal(err)
	}
	expectWrites(t, w, &sent, 0, "re-apply after a change")
	// Proof that skipping it was right: sent anyway, it changes nothing.
	proof := configMap("cache-cm", map[string]string{"k": "w"})
	if err := Apply(ctx, c, owner, proof); err != nil {
		t.Fatal(err)
	}
	expectWrites(t, w, &sent, 1, "re-apply after a change without the cache")
	if proof.ResourceVersion != changed.ResourceVersion {
		t.Errorf("the same request at the version it produced changed the object: rv %s -> %s", changed.ResourceVersion, proof.ResourceVersion)
	}

	// Another writer changes the object (here a field CAPCT does not own):
	// the resourceVersion moves, so the same request is sent again; the
	// server finds nothing to do and that is recorded.
	other := current(t, cm).(*corev1.ConfigMap)
	other.Annotations = map[string]string{"someone": "else"}
	if err := env.Client.Update(ctx, other, client.FieldOwner("someone-else")); err != nil {
		t.Fatal(err)
	}
	afterOther := configMap("cache-cm", map[string]string{"k": "w"})
	if err := Apply(ctx, c, owner, afterOther, WithCache(cache), WithOriginal(current(t, cm))); err != nil {
		t.Fatal(err)
	}
	expectWrites(t, w, &sent, 1, "re-apply after another writer")
	if afterOther.ResourceVersion != other.ResourceVersion || afterOther.Annotations["someone"] != "else" {
		t.Errorf("re-apply should have been a no-op keeping the other writer's field: rv %s (other %s), annotations %v",
			afterOther.ResourceVersion, other.ResourceVersion, afterOther.Annotations)
	}
	if err := Apply(ctx, c, owner, configMap("cache-cm", map[string]string{"k": "w"}), WithCache(cache), WithOriginal(current(t, cm))); err != nil {
		t.Fatal(err)
	}
	expectWrites(t, w, &sent, 0, "second re-apply after another writer")

	// Another writer changes a field CAPCT owns: sent, and CAPCT's value
	// comes back.
	other = current(t, cm).(*corev1.ConfigMap)
	other.Data["k"] = "tampered"
	if err := env.Client.Update(ctx, other, client.FieldOwner("someone-else")); err != nil {
		t.Fatal(err)
	}
	restored := configMap("cache-cm", map[string]string{"k": "w"})
	if err := Apply(ctx, c, owner, restored, WithCache(cache), WithOriginal(current(t, cm))); err != nil {
		t.Fatal(err)
	}
	expectWrites(t, w, &sent, 1, "re-apply after a drift")
	if restored.Data["k"] != "w" {
		t.Errorf("drift not corrected: data %v", restored.Data)
	}

	// Another field owner is another request.
	if err := Apply(ctx, c, "another-controller", configMap("cache-cm", map[string]string{"k": "w"}), WithCache(cache), WithOriginal(current(t, cm))); err != nil {
		t.Fatal(err)
	}
	expectWrites(t, w, &sent, 1, "same body, another field owner")

	// Without the cache everything is sent.
	if err := Apply(ctx, c, owner, configMap("cache-cm", map[string]string{"k": "w"})); err != nil {
		t.Fatal(err)
	}
	expectWrites(t, w, &sent, 1, "apply without a cache")
	t.Logf("cache hits %d, misses %d", cache.Hits(), cache.Misses())
}

func TestApplyTypedContainerMachine(t *testing.T) {
	ctx := t.Context()
	c, w := countingClient()
	cache := NewCache("test")
	sent := 0

	m := machine("typed-m", "busybox:1")
	if err := Apply(ctx, c, owner, m, WithCache(cache)); err != nil {
		t.Fatal(err)
	}
	expectWrites(t, w, &sent, 1, "create")
	if m.UID == "" || m.ResourceVersion == "" || m.Kind != "ContainerMachine" || m.APIVersion != infrav1.GroupVersion.String() {
		t.Fatalf("the server's answer was not written back: %+v %+v", m.TypeMeta, m.ObjectMeta)
	}
	body := w.body()
	if body["apiVersion"] != infrav1.GroupVersion.String() || body["kind"] != "ContainerMachine" {
		t.Errorf("apiVersion/kind not taken from the scheme: %v", body)
	}
	if err := Apply(ctx, c, owner, machine("typed-m", "busybox:1"), WithCache(cache), WithOriginal(current(t, m))); err != nil {
		t.Fatal(err)
	}
	expectWrites(t, w, &sent, 0, "identical re-apply")

	changed := machine("typed-m", "busybox:1", "busybox:2")
	if err := Apply(ctx, c, owner, changed, WithCache(cache), WithOriginal(current(t, m))); err != nil {
		t.Fatal(err)
	}
	expectWrites(t, w, &sent, 1, "changed field")
	if len(changed.Spec.PreLoadImages) != 2 {
		t.Errorf("change not applied: %v", changed.Spec.PreLoadImages)
	}
	// Dropping a field CAPCT owns removes it.
	dropped := machine("typed-m")
	if err := Apply(ctx, c, owner, dropped, WithCache(cache), WithOriginal(current(t, m))); err != nil {
		t.Fatal(err)
	}
	expectWrites(t, w, &sent, 1, "dropped field")
	if len(dropped.Spec.PreLoadImages) != 0 {
		t.Errorf("dropped field still set: %v", dropped.Spec.PreLoadImages)
	}

	// Admission errors are wrapped with the kind and object.
	err := Apply(ctx, c, owner, &infrav1.ContainerMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "typed-m", Namespace: metav1.NamespaceDefault},
		Spec:       infrav1.ContainerMachineSpec{Image: "capct/node:other"},
	})
	if err == nil || !strings.HasPrefix(err.Error(), "failed to apply ContainerMachine default/typed-m: ") || !apierrors.IsInvalid(err) {
		t.Errorf("changing the immutable image: err = %v, want a wrapped Invalid error", err)
	}
}

func TestApplyForcesOwnership(t *testing.T) {
	ctx := t.Context()
	c, _ := countingClient()

	// Another manager sets the field first.
	theirs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "owned-cm", "namespace": "default"},
		"data":     map[string]any{"k": "theirs", "their-key": "x"},
	}}
	if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(theirs), client.FieldOwner("someone-else")); err != nil {
		t.Fatal(err)
	}
	// Without force the server reports a conflict ...
	ours := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "owned-cm", "namespace": "default"},
		"data":     map[string]any{"k": "ours"},
	}}
	if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(ours.DeepCopy()), client.FieldOwner(owner)); !apierrors.IsConflict(err) {
		t.Fatalf("apply without force: err = %v, want a conflict", err)
	}
	// ... which Apply resolves by taking the field.
	if err := Apply(ctx, c, owner, ours); err != nil {
		t.Fatal(err)
	}
	data, _, _ := unstructured.NestedStringMap(ours.Object, "data")
	if data["k"] != "ours" || data["their-key"] != "x" {
		t.Errorf("data = %v, want k taken over and their-key kept", data)
	}
	owners := fieldOwners(ours.GetManagedFields(), "f:data", "f:k")
	if len(owners) != 1 || owners[0] != owner {
		t.Errorf("owners of data.k = %v, want only %s", owners, owner)
	}
	if owners := fieldOwners(ours.GetManagedFields(), "f:data", "f:their-key"); len(owners) != 1 || owners[0] != "someone-else" {
		t.Errorf("owners of data.their-key = %v, want only someone-else", owners)
	}
}

// fieldOwners lists the managers whose field set contains path, with the
// subresource for status.
func fieldOwners(entries []metav1.ManagedFieldsEntry, path ...string) []string {
	var owners []string
	for _, e := range entries {
		if e.FieldsV1 == nil {
			continue
		}
		var set map[string]any
		if err := json.Unmarshal(e.FieldsV1.Raw, &set); err != nil {
			continue
		}
		if _, ok, _ := unstructured.NestedFieldNoCopy(set, path...); ok {
			name := e.Manager
			if e.Subresource != "" {
				name += "/" + e.Subresource
			}
			owners = append(owners, name)
		}
	}
	return owners
}

func TestApplyStatus(t *testing.T) {
	ctx := t.Context()
	c, w := countingClient()
	cache := NewCache("test")

	m := machine("status-m")
	m.Status.Phase = infrav1.MachinePhasePending // status in a main apply is not sent
	if err := Apply(ctx, c, owner, m); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(w.body(), "status"); found {
		t.Errorf("main apply sent status: %v", w.body())
	}
	if m.Status.Phase != "" {
		t.Errorf("main apply set status.phase = %q", m.Status.Phase)
	}
	specRV := m.ResourceVersion

	applies, _, _ := w.counts()
	st := machine("status-m", "not-sent:1") // spec in a status apply is not sent
	st.Labels = map[string]string{"not": "sent"}
	st.Status.Phase = infrav1.MachinePhaseLaunched
	st.Status.FailureDomain = "fd1"
	if err := ApplyStatus(ctx, c, owner, st, WithCache(cache), WithOriginal(current(t, m))); err != nil {
		t.Fatal(err)
	}
	applies2, statusApplies, _ := w.counts()
	if applies2 != applies || statusApplies != 1 {
		t.Errorf("status apply sent %d main applies and %d status applies, want 0 and 1", applies2-applies, statusApplies)
	}
	if body := w.body(); len(body) != 4 || body["spec"] != nil {
		t.Errorf("status body = %v, want apiVersion, kind, metadata and status only", body)
	}
	if st.Status.Phase != infrav1.MachinePhaseLaunched || st.Status.FailureDomain != "fd1" {
		t.Errorf("status not applied: %+v", st.Status)
	}
	if len(st.Spec.PreLoadImages) != 0 || st.Labels["not"] != "" || st.ResourceVersion == specRV {
		t.Errorf("status apply changed more than status: spec %+v labels %v", st.Spec, st.Labels)
	}
	if owners := fieldOwners(st.GetManagedFields(), "f:status", "f:phase"); len(owners) != 1 || owners[0] != owner+"/status" {
		t.Errorf("owners of status.phase = %v, want %s/status", owners, owner)
	}

	// Identical status: skipped. Changed status: sent.
	sent := w.total()
	same := machine("status-m")
	same.Status = st.Status
	if err := ApplyStatus(ctx, c, owner, same, WithCache(cache), WithOriginal(current(t, m))); err != nil {
		t.Fatal(err)
	}
	expectWrites(t, w, &sent, 0, "identical status")
	changed := machine("status-m")
	changed.Status.Phase = infrav1.MachinePhaseRunning
	if err := ApplyStatus(ctx, c, owner, changed, WithCache(cache), WithOriginal(current(t, m))); err != nil {
		t.Fatal(err)
	}
	expectWrites(t, w, &sent, 1, "changed status")
	if changed.Status.Phase != infrav1.MachinePhaseRunning || changed.Status.FailureDomain != "" {
		t.Errorf("status = %+v, want phase Running and the dropped failureDomain removed", changed.Status)
	}
}

func TestApplyStripsServerFields(t *testing.T) {
	ctx := t.Context()
	c, w := countingClient()

	cm := configMap("strip-cm", map[string]string{"k": "v"})
	if err := Apply(ctx, c, owner, cm); err != nil {
		t.Fatal(err)
	}
	// Re-apply the object exactly as the server returns it: the server
	// rejects managedFields in an apply body, so this only works stripped.
	live := current(t, cm).(*corev1.ConfigMap)
	if len(live.ManagedFields) == 0 || live.CreationTimestamp.IsZero() {
		t.Fatalf("the live object has no server fields to strip: %+v", live.ObjectMeta)
	}
	live.Data["k"] = "w"
	if err := Apply(ctx, c, owner, live); err != nil {
		t.Fatal(err)
	}
	meta, _ := w.body()["metadata"].(map[string]any)
	for _, f := range []string{"creationTimestamp", "managedFields", "resourceVersion", "generation"} {
		if _, ok := meta[f]; ok {
			t.Errorf("metadata.%s was sent: %v", f, meta)
		}
	}
	if meta["uid"] != string(cm.UID) {
		t.Errorf("metadata.uid = %v, want it kept as a precondition", meta["uid"])
	}

	// With optimistic locking a stale resourceVersion is a conflict.
	stale := cm.DeepCopy() // at the version before the change above
	stale.Data["k"] = "x"
	err := Apply(ctx, c, owner, stale, WithOptimisticLock())
	if !apierrors.IsConflict(err) || !strings.HasPrefix(err.Error(), "failed to apply ConfigMap default/strip-cm: ") {
		t.Errorf("optimistic lock on a stale object: err = %v, want a wrapped conflict", err)
	}
	fresh := current(t, cm).(*corev1.ConfigMap)
	fresh.Data["k"] = "x"
	if err := Apply(ctx, c, owner, fresh, WithOptimisticLock()); err != nil {
		t.Errorf("optimistic lock on a fresh object: %v", err)
	}
}

func TestApplyRefusesBadInput(t *testing.T) {
	ctx := t.Context()
	c, w := countingClient()
	cm := configMap("bad-cm", nil)
	for name, run := range map[string]func() error{
		"nil object": func() error { return Apply(ctx, c, owner, nil) },
		"nil typed":  func() error { return Apply(ctx, c, owner, (*corev1.ConfigMap)(nil)) },
		"nil client": func() error { return Apply(ctx, nil, owner, cm) },
		"no owner":   func() error { return ApplyStatus(ctx, c, "", cm) },
		"no kind":    func() error { return Apply(ctx, c, owner, &unstructured.Unstructured{}) },
		"wrong original": func() error {
			return Apply(ctx, c, owner, cm, WithCache(NewCache("t")), WithOriginal(configMap("other-cm", nil)))
		},
	} {
		if err := run(); err == nil || !strings.HasPrefix(err.Error(), "failed to apply ") {
			t.Errorf("%s: err = %v, want a failed to apply error", name, err)
		}
	}
	if w.total() != 0 {
		t.Errorf("bad input sent %d writes", w.total())
	}
}

// steadyState applies objects rounds times as a reconciler would: reading
// each object and applying the same intent. It returns the writes sent in
// the first round and in all later rounds.
func steadyState(t *testing.T, prefix string, objects, rounds int, withCache, withStatus bool) (first, later int) {
	t.Helper()
	ctx := t.Context()
	c, w := countingClient()
	var opts []Option
	var cache *Cache
	if withCache {
		cache = NewCache(prefix)
	}
	for round := range rounds {
		for i := range objects {
			m := machine(fmt.Sprintf("%s-%d", prefix, i), "busybox:1")
			cm := configMap(fmt.Sprintf("%s-%d", prefix, i), map[string]string{"k": "v"})
			opts = nil
			if cache != nil {
				opts = append(opts, WithCache(cache))
				if round > 0 {
					opts = append(opts, WithOriginal(current(t, m)))
				}
			}
			if err := Apply(ctx, c, owner, m, opts...); err != nil {
				t.Fatal(err)
			}
			if withStatus {
				m.Status.Phase = infrav1.MachinePhaseRunning
				if cache != nil && round > 0 {
					opts[1] = WithOriginal(current(t, m))
				}
				if err := ApplyStatus(ctx, c, owner, m, opts...); err != nil {
					t.Fatal(err)
				}
			}
			if cache != nil && round > 0 {
				opts[1] = WithOriginal(current(t, cm))
			}
			if err := Apply(ctx, c, owner, cm, opts...); err != nil {
				t.Fatal(err)
			}
		}
		if round == 0 {
			first = w.total()
		}
	}
	if cache != nil {
		t.Logf("%s: cache hits %d, misses %d, keys %d", prefix, cache.Hits(), cache.Misses(), cache.Len())
	}
	return first, w.total() - first
}

func TestSteadyStateApplies(t *testing.T) {
	const objects, rounds = 10, 5
	for _, tt := range []struct {
		name                 string
		cache, status        bool
		wantFirst, wantLater int
	}{
		// 10 ContainerMachines and 10 ConfigMaps, one spec apply each.
		{name: "spec-cache", cache: true, wantFirst: 2 * objects, wantLater: 0},
		{name: "spec-nocache", cache: false, wantFirst: 2 * objects, wantLater: 2 * objects * (rounds - 1)},
		// The same plus a status apply per machine. The status apply of
		// round 1 moves the machine's resourceVersion after its spec apply
		// was recorded, so round 2 sends each spec apply once more (a no-op
		// on the server); from round 3 on nothing is sent.
		{name: "status-cache", cache: true, status: true, wantFirst: 3 * objects, wantLater: objects},
		{name: "status-nocache", cache: false, status: true, wantFirst: 3 * objects, wantLater: 3 * objects * (rounds - 1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			first, later := steadyState(t, "steady-"+tt.name, objects, rounds, tt.cache, tt.status)
			t.Logf("%d objects x %d rounds: %d writes in round 1, %d in rounds 2-%d", objects, rounds, first, later, rounds)
			if first != tt.wantFirst || later != tt.wantLater {
				t.Errorf("writes = %d then %d, want %d then %d", first, later, tt.wantFirst, tt.wantLater)
			}
		})
	}
}
