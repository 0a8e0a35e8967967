package webhooks

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/cluster-api/util/topology"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// templateImmutability rejects changes to a template's spec.template.spec.
// Machines stamped from a template are replaced, not updated, when the
// template changes, so users must create a new template and point at it.
// ClusterClass topology validates its patches with server-side dry-run
// updates of templates; those must pass, as the contract requires.
type templateImmutability[T client.Object] struct {
	groupKind schema.GroupKind
	// spec extracts spec.template.spec of the template.
	spec func(T) any
}

var _ admission.Validator[client.Object] = &templateImmutability[client.Object]{}

// ValidateCreate accepts every create: CRD validation covers the fields.
func (v *templateImmutability[T]) ValidateCreate(context.Context, T) (admission.Warnings, error) {
	return nil, nil
}

// ValidateUpdate rejects a changed spec.template.spec unless the request is a
// topology dry-run.
func (v *templateImmutability[T]) ValidateUpdate(ctx context.Context, oldObj, newObj T) (admission.Warnings, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected an admission request in the context: %v", err))
	}
	if topology.IsDryRunRequest(req, newObj) {
		return nil, nil
	}
	if apiequality.Semantic.DeepEqual(v.spec(oldObj), v.spec(newObj)) {
		return nil, nil
	}
	return nil, apierrors.NewInvalid(v.groupKind, newObj.GetName(), field.ErrorList{
		field.Forbidden(field.NewPath("spec", "template", "spec"),
			"is immutable: create a new template and reference it instead"),
	})
}

// ValidateDelete accepts every delete.
func (v *templateImmutability[T]) ValidateDelete(context.Context, T) (admission.Warnings, error) {
	return nil, nil
}
