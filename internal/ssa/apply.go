package ssa

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Option configures one Apply or ApplyStatus call.
type Option func(*options)

type options struct {
	cache          *Cache
	original       client.Object
	optimisticLock bool
}

// WithCache skips the apply when cache knows that the same request at the
// object's current resourceVersion changes nothing, and records the request
// after a successful apply. The current resourceVersion is the one of the
// object passed WithOriginal, else the one obj carries; with neither the apply
// is always sent (and still recorded).
func WithCache(cache *Cache) Option {
	return func(o *options) { o.cache = cache }
}

// WithOriginal passes the object as it currently is on the server (typically
// from the controller's informer cache), typed or unstructured. Its
// resourceVersion is used for the cache lookup, and when the apply is skipped
// it is written into obj so that callers see what they would have got back.
func WithOriginal(current client.Object) Option {
	return func(o *options) { o.original = current }
}

// WithOptimisticLock keeps obj's metadata.resourceVersion in the request, so
// the server rejects the apply with a Conflict if the object changed since.
func WithOptimisticLock() Option {
	return func(o *options) { o.optimisticLock = true }
}

// Apply server-side applies obj as fieldOwner with forced ownership. Status
// and server-owned metadata are not sent (see the package documentation).
// On success the object returned by the server is written into obj.
func Apply(ctx context.Context, c client.Client, fieldOwner string, obj client.Object, opts ...Option) error {
	return apply(ctx, c, fieldOwner, obj, mainResource, opts)
}

// ApplyStatus server-side applies obj's status to the status subresource as
// fieldOwner with forced ownership; only the object's identity and status are
// sent. On success the object returned by the server is written into obj.
func ApplyStatus(ctx context.Context, c client.Client, fieldOwner string, obj client.Object, opts ...Option) error {
	return apply(ctx, c, fieldOwner, obj, statusResource, opts)
}

func apply(ctx context.Context, c client.Client, fieldOwner string, obj client.Object, sub subresource, opts []Option) error {
	o := options{}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	kind := describe(obj, nil, sub)
	if c == nil || isNil(obj) {
		return fmt.Errorf("failed to apply %s %s: %w", kind, klog.KObj(obj), errors.New("client and object must not be nil"))
	}
	if fieldOwner == "" {
		return fmt.Errorf("failed to apply %s %s: %w", kind, klog.KObj(obj), errors.New("a field owner is required"))
	}
	scheme := c.Scheme()
	body, gvk, err := prepare(scheme, obj, sub, o.optimisticLock)
	kind = describe(obj, &gvk, sub)
	if err != nil {
		return fmt.Errorf("failed to apply %s %s: %w", kind, klog.KObj(obj), err)
	}

	var hash string
	if o.cache != nil {
		if hash, err = requestHash(fieldOwner, sub, body); err != nil {
			return fmt.Errorf("failed to apply %s %s: %w", kind, klog.KObj(obj), err)
		}
		current, resourceVersion, err := currentVersion(scheme, obj, gvk, o.original)
		if err != nil {
			return fmt.Errorf("failed to apply %s %s: %w", kind, klog.KObj(obj), err)
		}
		if resourceVersion == "" {
			o.cache.misses.Add(1)
		} else if o.cache.has(cacheKey(gvk, body.GetNamespace(), body.GetName(), resourceVersion, hash)) {
			if current != nil {
				if err := writeBack(current, obj, gvk); err != nil {
					return fmt.Errorf("failed to apply %s %s: %w", kind, klog.KObj(obj), err)
				}
			}
			return nil
		}
	}

	// controller-runtime's native Apply handles unstructured bodies since
	// v0.22 and decodes the server's answer into body.
	ac := client.ApplyConfigurationFromUnstructured(body)
	if sub == statusResource {
		err = c.Status().Apply(ctx, ac, client.FieldOwner(fieldOwner), client.ForceOwnership)
	} else {
		err = c.Apply(ctx, ac, client.FieldOwner(fieldOwner), client.ForceOwnership)
	}
	if err != nil {
		return fmt.Errorf("failed to apply %s %s: %w", kind, klog.KObj(obj), err)
	}
	if err := writeBack(body, obj, gvk); err != nil {
		return fmt.Errorf("failed to apply %s %s: %w", kind, klog.KObj(obj), err)
	}
	if o.cache != nil && body.GetResourceVersion() != "" {
		// The result of this request at the version it produced (or left
		// alone) is a fixed point of the same request: see the package doc.
		o.cache.add(cacheKey(gvk, body.GetNamespace(), body.GetName(), body.GetResourceVersion(), hash))
	}
	return nil
}

// currentVersion returns the original as unstructured (nil without one) and
// the resourceVersion the object is believed to have on the server.
func currentVersion(scheme *runtime.Scheme, obj client.Object, gvk schema.GroupVersionKind, original client.Object) (*unstructured.Unstructured, string, error) {
	if isNil(original) {
		return nil, obj.GetResourceVersion(), nil
	}
	u, ogvk, err := toUnstructured(scheme, original)
	if err != nil {
		return nil, "", fmt.Errorf("failed to read the original: %w", err)
	}
	if ogvk.GroupKind() != gvk.GroupKind() || u.GetNamespace() != obj.GetNamespace() || u.GetName() != obj.GetName() {
		return nil, "", fmt.Errorf("the original is %s %s, not the applied object",
			ogvk.Kind, klog.KObj(original))
	}
	return u, u.GetResourceVersion(), nil
}

// writeBack replaces dst's content with src, keeping dst's GroupVersionKind
// as the applied one.
func writeBack(src *unstructured.Unstructured, dst client.Object, gvk schema.GroupVersionKind) error {
	if u, ok := dst.(*unstructured.Unstructured); ok {
		u.SetUnstructuredContent(src.DeepCopy().Object)
	} else if err := runtime.DefaultUnstructuredConverter.FromUnstructured(src.Object, dst); err != nil {
		return fmt.Errorf("failed to write the result into %T: %w", dst, err)
	}
	dst.GetObjectKind().SetGroupVersionKind(gvk)
	return nil
}

// describe names what is applied for errors: the kind, and "/status" for a
// status apply.
func describe(obj client.Object, gvk *schema.GroupVersionKind, sub subresource) string {
	kind := ""
	switch {
	case gvk != nil && gvk.Kind != "":
		kind = gvk.Kind
	case !isNil(obj):
		kind = obj.GetObjectKind().GroupVersionKind().Kind
	}
	if kind == "" {
		kind = fmt.Sprintf("%T", obj)
	}
	if sub == statusResource {
		kind += "/status"
	}
	return kind
}

// isNil reports a nil interface or a typed nil pointer.
func isNil(obj client.Object) bool {
	if obj == nil {
		return true
	}
	rv := reflect.ValueOf(obj)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
