package ssa

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// subresource says which endpoint an apply goes to; it is part of the request
// hash because the same body means different things on the two endpoints.
type subresource string

const (
	mainResource   subresource = ""
	statusResource subresource = "status"
)

// serverOwnedMetadata are metadata fields the API server sets. Sending them
// in an apply is either rejected (managedFields) or claims a field the
// controller has no opinion on.
var serverOwnedMetadata = []string{
	"creationTimestamp",
	"managedFields",
	"generation",
	"selfLink",
	"deletionTimestamp",
	"deletionGracePeriodSeconds",
}

// toUnstructured converts obj into a new Unstructured with apiVersion and
// kind set, resolving them with the scheme when obj is typed.
func toUnstructured(scheme *runtime.Scheme, obj client.Object) (*unstructured.Unstructured, schema.GroupVersionKind, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		gvk := u.GroupVersionKind()
		if gvk.Kind == "" || gvk.Version == "" {
			return nil, gvk, errors.New("unstructured object has no apiVersion or kind")
		}
		return u.DeepCopy(), gvk, nil
	}
	if scheme == nil {
		return nil, schema.GroupVersionKind{}, fmt.Errorf("no scheme to convert %T", obj)
	}
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return nil, gvk, err
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, gvk, fmt.Errorf("failed to convert %T to unstructured: %w", obj, err)
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetGroupVersionKind(gvk)
	return u, gvk, nil
}

// prepare returns the apply body for obj: a copy with what the server owns
// removed. For the status subresource only the object's identity and its
// status are kept.
func prepare(scheme *runtime.Scheme, obj client.Object, sub subresource, keepResourceVersion bool) (*unstructured.Unstructured, schema.GroupVersionKind, error) {
	u, gvk, err := toUnstructured(scheme, obj)
	if err != nil {
		return nil, gvk, err
	}
	strip(u, sub, keepResourceVersion)
	return u, gvk, nil
}

// strip removes server-owned fields from u in place.
func strip(u *unstructured.Unstructured, sub subresource, keepResourceVersion bool) {
	if sub == statusResource {
		kept := map[string]any{}
		for _, k := range []string{"apiVersion", "kind", "status"} {
			if v, ok := u.Object[k]; ok {
				kept[k] = v
			}
		}
		meta := map[string]any{}
		old, _ := u.Object["metadata"].(map[string]any)
		for _, k := range []string{"name", "namespace", "uid", "resourceVersion"} {
			if v, ok := old[k]; ok {
				meta[k] = v
			}
		}
		kept["metadata"] = meta
		u.Object = kept
	} else {
		delete(u.Object, "status")
	}

	meta, ok := u.Object["metadata"].(map[string]any)
	if !ok {
		return
	}
	for _, k := range serverOwnedMetadata {
		delete(meta, k)
	}
	if !keepResourceVersion {
		delete(meta, "resourceVersion")
	}
	// An empty uid (from a typed object) is no precondition; drop the key.
	if uid, ok := meta["uid"].(string); ok && uid == "" {
		delete(meta, "uid")
	}
}

// requestHash identifies what an apply asks for: the field owner, the
// endpoint and the stripped body. encoding/json sorts map keys, so equal
// bodies hash equally whatever order their maps were built in.
func requestHash(fieldOwner string, sub subresource, body *unstructured.Unstructured) (string, error) {
	b, err := json.Marshal(body.Object)
	if err != nil {
		return "", fmt.Errorf("failed to hash the apply request: %w", err)
	}
	h := sha256.New()
	// Length-prefix the owner so that owner and subresource cannot run into
	// each other. A hash's Write never returns an error.
	_, _ = fmt.Fprintf(h, "%d:%s\x00%s\x00", len(fieldOwner), fieldOwner, sub)
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// cacheKey is the identity of an object at a resourceVersion plus the hash of
// a request.
func cacheKey(gvk schema.GroupVersionKind, namespace, name, resourceVersion, hash string) string {
	return gvk.String() + "/" + namespace + "/" + name + "@" + resourceVersion + "#" + hash
}
