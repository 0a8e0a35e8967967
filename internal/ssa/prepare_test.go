package ssa

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

// serverObject is a ConfigMap as a GET returns it: with every field the
// server owns.
func serverObject() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata": map[string]any{
			"name":                       "cm",
			"namespace":                  "default",
			"uid":                        "1234",
			"resourceVersion":            "42",
			"generation":                 int64(3),
			"selfLink":                   "/api/v1/namespaces/default/configmaps/cm",
			"creationTimestamp":          "2026-01-01T00:00:00Z",
			"deletionTimestamp":          "2026-01-02T00:00:00Z",
			"deletionGracePeriodSeconds": int64(30),
			"managedFields":              []any{map[string]any{"manager": "other"}},
			"labels":                     map[string]any{"a": "b"},
		},
		"data":   map[string]any{"k": "v"},
		"status": map[string]any{"phase": "x"},
	}}
}

func TestPrepare(t *testing.T) {
	scheme, err := envtest.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	typed := &infrav1.ContainerMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns", ResourceVersion: "7"},
		Spec:       infrav1.ContainerMachineSpec{Image: "capct/node:v1"},
		Status:     infrav1.ContainerMachineStatus{Phase: infrav1.MachinePhaseRunning},
	}
	machineGVK := infrav1.GroupVersion.WithKind("ContainerMachine")

	tests := []struct {
		name     string
		obj      client.Object
		sub      subresource
		keepRV   bool
		wantGVK  schema.GroupVersionKind
		want     map[string]any
		wantFail bool
	}{{
		name:    "unstructured main resource: server fields and status stripped",
		obj:     serverObject(),
		wantGVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		want: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "cm", "namespace": "default", "uid": "1234", "labels": map[string]any{"a": "b"}},
			"data":     map[string]any{"k": "v"},
		},
	}, {
		name:    "optimistic lock keeps resourceVersion",
		obj:     serverObject(),
		keepRV:  true,
		wantGVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		want: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "cm", "namespace": "default", "uid": "1234", "resourceVersion": "42", "labels": map[string]any{"a": "b"}},
			"data":     map[string]any{"k": "v"},
		},
	}, {
		name:    "status subresource keeps identity and status only",
		obj:     serverObject(),
		sub:     statusResource,
		wantGVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		want: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "cm", "namespace": "default", "uid": "1234"},
			"status":   map[string]any{"phase": "x"},
		},
	}, {
		name:    "typed object with empty TypeMeta gets apiVersion and kind from the scheme",
		obj:     typed,
		wantGVK: machineGVK,
		want: map[string]any{
			"apiVersion": machineGVK.GroupVersion().String(), "kind": "ContainerMachine",
			"metadata": map[string]any{"name": "m", "namespace": "ns"},
			"spec":     map[string]any{"image": "capct/node:v1"},
		},
	}, {
		name:    "typed object status",
		obj:     typed,
		sub:     statusResource,
		wantGVK: machineGVK,
		want: map[string]any{
			"apiVersion": machineGVK.GroupVersion().String(), "kind": "ContainerMachine",
			"metadata": map[string]any{"name": "m", "namespace": "ns"},
			"status":   map[string]any{"phase": "Running"},
		},
	}, {
		name:     "unstructured without kind is refused",
		obj:      &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "x"}}},
		wantFail: true,
	}, {
		name:     "typed object unknown to the scheme is refused",
		obj:      &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "x"}},
		wantFail: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.obj.DeepCopyObject()
			got, gvk, err := prepare(scheme, tt.obj, tt.sub, tt.keepRV)
			if tt.wantFail {
				if err == nil {
					t.Fatalf("prepare succeeded, want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if gvk != tt.wantGVK {
				t.Errorf("gvk = %v, want %v", gvk, tt.wantGVK)
			}
			if diff := cmp.Diff(tt.want, got.Object); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tt.obj.DeepCopyObject()); diff != "" {
				t.Errorf("prepare modified its input (-before +after):\n%s", diff)
			}
		})
	}
}

func TestRequestHash(t *testing.T) {
	base := func() *unstructured.Unstructured {
		u, _, err := prepare(nil, serverObject(), mainResource, false)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	reordered := &unstructured.Unstructured{Object: map[string]any{
		"data":       map[string]any{"k": "v"},
		"kind":       "ConfigMap",
		"apiVersion": "v1",
		"metadata":   map[string]any{"labels": map[string]any{"a": "b"}, "uid": "1234", "namespace": "default", "name": "cm"},
	}}
	otherRV := serverObject()
	otherRV.SetResourceVersion("43")
	otherRV.SetManagedFields(nil)
	otherRVBody, _, err := prepare(nil, otherRV, mainResource, false)
	if err != nil {
		t.Fatal(err)
	}
	changed := base()
	changed.Object["data"] = map[string]any{"k": "w"}

	ref, err := requestHash("owner", mainResource, base())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		owner string
		sub   subresource
		body  *unstructured.Unstructured
		same  bool
	}{
		{name: "same request", owner: "owner", body: base(), same: true},
		{name: "map order does not matter", owner: "owner", body: reordered, same: true},
		{name: "server-owned fields do not matter", owner: "owner", body: otherRVBody, same: true},
		{name: "another value", owner: "owner", body: changed},
		{name: "another owner", owner: "other", body: base()},
		{name: "owner and subresource do not run into each other", owner: "owne", sub: "rstatus", body: base()},
		{name: "status subresource", owner: "owner", sub: statusResource, body: base()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := requestHash(tt.owner, tt.sub, tt.body)
			if err != nil {
				t.Fatal(err)
			}
			if (got == ref) != tt.same {
				t.Errorf("hash equal to reference = %v, want %v", got == ref, tt.same)
			}
		})
	}
	if _, err := requestHash("owner", mainResource, &unstructured.Unstructured{Object: map[string]any{"x": func() {}}}); err == nil {
		t.Errorf("hashing an unencodable body succeeded, want an error")
	}
}

func TestCacheKey(t *testing.T) {
	gvk := infrav1.GroupVersion.WithKind("ContainerMachine")
	k := cacheKey(gvk, "ns", "m", "7", "h")
	for _, other := range []string{
		cacheKey(infrav1.GroupVersion.WithKind("ContainerCluster"), "ns", "m", "7", "h"),
		cacheKey(gvk, "ns2", "m", "7", "h"),
		cacheKey(gvk, "ns", "m2", "7", "h"),
		cacheKey(gvk, "ns", "m", "8", "h"),
		cacheKey(gvk, "ns", "m", "7", "h2"),
	} {
		if other == k {
			t.Errorf("key %q does not tell objects, versions or requests apart", k)
		}
	}
}
