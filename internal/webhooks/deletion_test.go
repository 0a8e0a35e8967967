package webhooks_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// awayLabel marks the namespace whose ContainerMachines meet, besides the
// environment's webhooks, a copy of CAPCT's ContainerMachine webhook that
// nothing answers: CAPCT's webhook while its manager is killed, restarts or
// is not running.
const awayLabel = "capct.test/webhook"

// TestAnObjectBeingDeletedLosesItsFinalizerWithTheWebhookAway: the
// finalizer of a ContainerMachine being deleted can be removed while
// CAPCT's webhook does not answer (by the next manager, or by hand), since
// the shipped webhooks' match condition leaves out a deletion's writes
// that keep the spec, labels and annotations; a spec change of a machine
// being deleted still goes to the webhooks and is refused (hostile_test.go
// has the label's and the other kinds' rows). Without the match condition the removal
// fails with "failed calling webhook" for as long as the webhook is away.
func TestAnObjectBeingDeletedLosesItsFinalizerWithTheWebhookAway(t *testing.T) {
	ctx := t.Context()
	c := env.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "webhook-away", Labels: map[string]string{awayLabel: "away"}}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	const finalizer = "test.capct.io/hold"
	var going []*infrav1.ContainerMachine
	for _, name := range []string{"finalizer-removed", "spec-changed"} {
		m := validMachine(name)
		m.Namespace, m.Finalizers = ns.Name, []string{finalizer}
		if err := c.Create(ctx, m); err != nil {
			t.Fatalf("failed to create ContainerMachine %s: %v", name, err)
		}
		if err := c.Delete(ctx, m); err != nil {
			t.Fatalf("failed to delete ContainerMachine %s: %v", name, err)
		}
		going = append(going, m)
	}
	removed, changed := going[0], going[1]
	t.Cleanup(func() {
		// Whatever happened, the held machine goes: the away webhook first.
		_ = c.Patch(context.Background(), changed, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	if err := installAwayWebhook(ctx, t, ns.Name); err != nil {
		t.Fatal(err)
	}

	if err := c.Patch(ctx, removed, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Errorf("the finalizer of a ContainerMachine being deleted could not be removed with the webhook away: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(removed), removed); !apierrors.IsNotFound(err) {
		t.Errorf("ContainerMachine %s is still there after its finalizer's removal: %v", removed.Name, err)
	}

	spec := []byte(`{"spec":{"image":"capct/node:v1.35.5"}}`)
	if err := c.Patch(ctx, changed, client.RawPatch(types.MergePatchType, spec)); err == nil {
		t.Error("a spec change of a ContainerMachine being deleted was let through: it should still be validated")
	}
}

// installAwayWebhook adds, for namespace ns alone, a copy of the
// environment's ContainerMachine validating webhook, its match conditions
// included, whose address nothing listens on; it is removed when t ends.
// It returns once the API server calls it: a ContainerMachine's creation
// there is refused for it.
func installAwayWebhook(ctx context.Context, t *testing.T, ns string) error {
	list := &admissionv1.ValidatingWebhookConfigurationList{}
	if err := env.Client.List(ctx, list); err != nil {
		return fmt.Errorf("failed to list the validating webhook configurations: %w", err)
	}
	var hook *admissionv1.ValidatingWebhook
	for i := range list.Items {
		for j := range list.Items[i].Webhooks {
			w := &list.Items[i].Webhooks[j]
			if strings.HasPrefix(w.Name, "validation.containermachine.") && w.ClientConfig.URL != nil {
				hook = w.DeepCopy()
			}
		}
	}
	if hook == nil {
		return fmt.Errorf("no ContainerMachine validating webhook among %d configurations", len(list.Items))
	}
	u, err := url.Parse(*hook.ClientConfig.URL)
	if err != nil {
		return fmt.Errorf("failed to parse the webhook's URL: %w", err)
	}
	port, err := freePort(u.Hostname())
	if err != nil {
		return err
	}
	u.Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(port))
	hook.Name = "away." + hook.Name
	hook.ClientConfig.URL = ptr.To(u.String())
	hook.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{awayLabel: "away"}}
	cfg := &admissionv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "capct-webhook-away"},
		Webhooks:   []admissionv1.ValidatingWebhook{*hook},
	}
	if err := env.Client.Create(ctx, cfg); err != nil {
		return fmt.Errorf("failed to create webhook configuration %s: %w", cfg.Name, err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cfg) })
	// The API server picks up webhook configurations asynchronously.
	deadline := time.Now().Add(30 * time.Second)
	for {
		probe := validMachine("probe")
		probe.Namespace = ns
		err := env.Client.Create(ctx, probe, client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), "failed calling webhook") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the away webhook was not called within 30s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
