package clusterctl

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client"
)

// TestDryRunApply server-side applies, with dryRun=All and strict field
// validation, the components as clusterctl processed them and every object
// of every flavor. CAPCT's objects also pass CAPCT's webhooks; Cluster API's
// objects pass their CRD schemas only (Cluster API's webhooks do not run
// here), and a topology Cluster's ClusterClass is not expanded.
func TestDryRunApply(t *testing.T) {
	requireRelease(t)
	unsetClusterctlEnv(t)
	ctx := context.Background()
	env := startEnv(t)
	c := strictClient(t, env)
	installCertManagerCRDs(ctx, t, env.Client)

	cc := newClusterctl(t, nil)
	components, err := cc.GenerateProvider(ctx, "container", clusterctlv1.InfrastructureProviderType, client.ComponentsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The namespace is created for real: namespaced objects cannot be dry-run
	// into a namespace that does not exist.
	for _, o := range components.Objs() {
		if o.GetKind() == "Namespace" {
			if err := apply(ctx, c, &o); err != nil {
				t.Fatalf("Namespace %s: %v", o.GetName(), err)
			}
		}
	}
	for _, o := range components.Objs() {
		if err := dryRunApply(ctx, c, &o); err != nil {
			t.Errorf("components: %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}

	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	kc := kubeconfig(t, env.Config)
	for flavor := range flavors {
		t.Run("flavor="+flavor, func(t *testing.T) {
			tmpl, err := generate(ctx, newClusterctl(t, flavorSettings[flavor]), flavor, kc)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range tmpl.Objs() {
				if err := dryRunApply(ctx, c, &o); err != nil {
					t.Errorf("%s %s: %v", o.GetKind(), o.GetName(), err)
				}
			}
		})
	}
}
