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

// templateValidator checks what a template would stamp out against the
// policy, and rejects changes to its spec.template.spec. Machines stamped
// from a template are replaced, not updated, when the template changes, so
// users must create a new template and point at it. ClusterClass topology
// validates its patches with server-side dry-run updates of templates; those
// must pass the immutability rule, as the contract requires, but still meet
// the policy, so that a patch that would be refused later is refused now.
type templateValidator[T client.Object] struct {
	groupKind schema.GroupKind
	// spec extracts spec.template.spec of the template.
	spec func(T) any
	// validate applies the policy to the template's new spec; old is nil on
	// create.
	validate func(newObj, oldObj T) field.ErrorList
}

var _ admission.Validator[client.Object] = &templateValidator[client.Object]{}

// ValidateCreate applies the policy.
func (v *templateValidator[T]) ValidateCreate(_ context.Context, obj T) (admission.Warnings, error) {
	var none T
	return nil, invalid(v.groupKind, obj.GetName(), v.validate(obj, none))
}

// ValidateUpdate rejects a changed spec.template.spec unless the request is a
// topology dry-run, and applies the policy to what changed. A template being
// deleted is no exception: a finalizer can hold it while machines are still
// stamped out of it.
func (v *templateValidator[T]) ValidateUpdate(ctx context.Context, oldObj, newObj T) (admission.Warnings, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected an admission request in the context: %v", err))
	}
	if apiequality.Semantic.DeepEqual(v.spec(oldObj), v.spec(newObj)) {
		return nil, nil
	}
	errs := v.validate(newObj, oldObj)
	if !topology.IsDryRunRequest(req, newObj) {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "template", "spec"),
			"is immutable: create a new template and reference it instead"))
	}
	return nil, invalid(v.groupKind, newObj.GetName(), errs)
}

// ValidateDelete accepts every delete.
func (v *templateValidator[T]) ValidateDelete(context.Context, T) (admission.Warnings, error) {
	return nil, nil
}
