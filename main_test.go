package main

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestManagerCacheDropsManagedFields: objects enter the manager's cache
// without metadata.managedFields and with everything else.
func TestManagerCacheDropsManagedFields(t *testing.T) {
	period := time.Hour
	opts, err := managerCacheOptions("", &period)
	if err != nil {
		t.Fatal(err)
	}
	if opts.DefaultTransform == nil {
		t.Fatal("the manager's cache has no DefaultTransform")
	}
	in := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: "n", Labels: map[string]string{"a": "b"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}},
	}}
	out, err := opts.DefaultTransform(in)
	if err != nil {
		t.Fatal(err)
	}
	n, ok := out.(*corev1.Node)
	if !ok {
		t.Fatalf("got %T", out)
	}
	if n.ManagedFields != nil {
		t.Fatalf("managedFields kept: %+v", n.ManagedFields)
	}
	if n.Name != "n" || n.Labels["a"] != "b" {
		t.Fatalf("the rest of the object changed: %+v", n.ObjectMeta)
	}
	if opts.SyncPeriod != &period || len(opts.ByObject) != 1 {
		t.Fatalf("sync period or the Secret selector lost: %+v", opts)
	}
}
