package webhooks_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
)

// templateKind is one template kind: how to make a valid one, a change of
// spec.template.spec that is valid on its own, and where its
// spec.template.metadata is, which may change.
type templateKind struct {
	name       string
	valid      func(name string) client.Object
	changeSpec func(client.Object)
	metadata   func(client.Object) *clusterv1.ObjectMeta
}

func validClusterTemplate(name string) *infrav1.ContainerClusterTemplate {
	t := &infrav1.ContainerClusterTemplate{ObjectMeta: validCluster(name).ObjectMeta}
	t.Spec.Template.Spec = validCluster(name).Spec
	return t
}

func validPoolTemplate(name string) *expinfrav1.ContainerMachinePoolTemplate {
	t := &expinfrav1.ContainerMachinePoolTemplate{ObjectMeta: validPool(name).ObjectMeta}
	t.Spec.Template.Spec = validPool(name).Spec
	return t
}

func templateKinds() []templateKind {
	return []templateKind{
		{
			name:  "ContainerMachineTemplate",
			valid: func(n string) client.Object { return validMachineTemplate(n) },
			changeSpec: func(o client.Object) {
				o.(*infrav1.ContainerMachineTemplate).Spec.Template.Spec.Image = "capct/node:v1.35.5"
			},
			metadata: func(o client.Object) *clusterv1.ObjectMeta {
				return &o.(*infrav1.ContainerMachineTemplate).Spec.Template.ObjectMeta
			},
		},
		{
			name:  "ContainerClusterTemplate",
			valid: func(n string) client.Object { return validClusterTemplate(n) },
			changeSpec: func(o client.Object) {
				spec := &o.(*infrav1.ContainerClusterTemplate).Spec.Template.Spec
				spec.FailureDomains = append(spec.FailureDomains, clusterv1.FailureDomain{Name: "fd2"})
			},
			metadata: func(o client.Object) *clusterv1.ObjectMeta {
				return &o.(*infrav1.ContainerClusterTemplate).Spec.Template.ObjectMeta
			},
		},
		{
			name:  "ContainerMachinePoolTemplate",
			valid: func(n string) client.Object { return validPoolTemplate(n) },
			changeSpec: func(o client.Object) {
				o.(*expinfrav1.ContainerMachinePoolTemplate).Spec.Template.Spec.Strategy.MaxSurge = ptr.To(intstr.FromInt32(2))
			},
			metadata: func(o client.Object) *clusterv1.ObjectMeta {
				return &o.(*expinfrav1.ContainerMachinePoolTemplate).Spec.Template.ObjectMeta
			},
		},
	}
}

// create creates obj and deletes it at the end of the test.
func create(t *testing.T, obj client.Object) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatalf("a valid %T was rejected: %v", obj, err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, obj) })
}

// TestTemplateSpecIsImmutable, for every template kind: an update of
// spec.template.spec is refused, though the changed spec is valid (a new
// template with it is accepted); what lies outside spec.template.spec may
// change; ClusterClass topology's dry-run updates pass, as the contract
// requires; and a template can be deleted.
func TestTemplateSpecIsImmutable(t *testing.T) {
	ctx := context.Background()
	for _, kind := range templateKinds() {
		t.Run(kind.name, func(t *testing.T) {
			prefix := strings.ToLower(kind.name) + "-"

			changed := kind.valid(prefix + "changed")
			kind.changeSpec(changed)
			create(t, changed)

			tmpl := kind.valid(prefix + "immutable")
			create(t, tmpl)
			kind.changeSpec(tmpl)
			err := env.Client.Update(ctx, tmpl)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.template.spec") || !strings.Contains(err.Error(), "immutable") {
				t.Fatalf("want the update of spec.template.spec refused as immutable, got %v", err)
			}

			tmpl = kind.valid(prefix + "metadata")
			create(t, tmpl)
			tmpl.SetLabels(map[string]string{"owner": "team-a"})
			kind.metadata(tmpl).Labels = map[string]string{"tier": "gold"}
			kind.metadata(tmpl).Annotations = map[string]string{"team": "a"}
			if err := env.Client.Update(ctx, tmpl); err != nil {
				t.Fatalf("an update of the metadata only was refused: %v", err)
			}

			tmpl = kind.valid(prefix + "dry-run")
			create(t, tmpl)
			tmpl.SetAnnotations(map[string]string{clusterv1.TopologyDryRunAnnotation: ""})
			kind.changeSpec(tmpl)
			if err := env.Client.Update(ctx, tmpl, client.DryRunAll); err != nil {
				t.Fatalf("a topology dry-run update was refused: %v", err)
			}

			if err := env.Client.Delete(ctx, tmpl); err != nil {
				t.Fatalf("the template cannot be deleted: %v", err)
			}
		})
	}
}

// TestTemplateDryRunStillMeetsThePolicy: a topology dry-run may change an
// immutable template, but not into one the policy refuses, so that a
// ClusterClass patch that would be refused later is refused now.
func TestTemplateDryRunStillMeetsThePolicy(t *testing.T) {
	ctx := context.Background()
	tmpl := validMachineTemplate("dry-run-policy")
	create(t, tmpl)
	tmpl.Annotations = map[string]string{clusterv1.TopologyDryRunAnnotation: ""}
	tmpl.Spec.Template.Spec.Image = "evil/miner:1"
	err := env.Client.Update(ctx, tmpl, client.DryRunAll)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.template.spec.image") {
		t.Fatalf("want the dry-run refused for its image, got %v", err)
	}
}
