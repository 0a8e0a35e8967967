package webhooks_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/capct/cluster-api-provider-container/internal/policy"
	"github.com/capct/cluster-api-provider-container/internal/policy/policytest"
	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
	"github.com/capct/cluster-api-provider-container/internal/webhooks"
)

// shippedNamespace is where objects meet the shipped defaults: a second
// webhook server, with shippedPolicy, validates this namespace's objects,
// and the environment's own server (testPolicy) every other namespace's.
//
// Why a second server in the same API server rather than switching
// env.Policy between the two runs of the table: the validators read the
// policy on every request with no lock, so a switch would race any request
// in flight and would change the policy under every other test of the
// package. Why not a second envtest: it would add the time of another API
// server and etcd to make test, where a second webhook server in-process
// starts in well under a second.
const shippedNamespace = "shipped-defaults"

// shippedLabel, with shippedLabelValue, marks the namespaces whose objects
// meet the shipped defaults: shippedNamespace, and the namespaces of their
// own that hostile cases make in the shipped run. A label rather than the
// namespaces' names, which are not all known when the webhooks are split.
const (
	shippedLabel      = "capct.test/policy"
	shippedLabelValue = "shipped-defaults"
)

// managerManifest is the manager's Deployment as `clusterctl init`
// installs it: the one place the policy flags' defaults live.
const managerManifest = "../../config/manager/manager.yaml"

// shippedPolicy is the policy of a manager that `clusterctl init` installs
// with no variable set, read from managerManifest: a default changed there
// changes this table's outcomes.
func shippedPolicy() (policy.Policy, error) {
	p, _, err := policytest.Shipped(managerManifest)
	return p, err
}

// startShippedWebhooks serves CAPCT's webhooks with shippedPolicy for
// shippedNamespace, beside env's server for every other namespace, until
// ctx ends. It returns once the API server sends shippedNamespace's objects
// to the new server and no longer to env's.
func startShippedWebhooks(ctx context.Context, env *envtest.Environment) error {
	p, err := shippedPolicy()
	if err != nil {
		return err
	}
	own, ok := env.Manager.GetWebhookServer().(*webhook.DefaultServer)
	if !ok {
		return fmt.Errorf("the test manager's webhook server is a %T, not a *webhook.DefaultServer", env.Manager.GetWebhookServer())
	}
	port, err := freePort(own.Options.Host)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		// The same certificate: it names the host, whatever the port.
		WebhookServer: webhook.NewServer(webhook.Options{Host: own.Options.Host, Port: port, CertDir: own.Options.CertDir}),
	})
	if err != nil {
		return fmt.Errorf("failed to create the shipped-defaults manager: %w", err)
	}
	if err := webhooks.SetupWithManager(mgr, &p, webhooks.Defaults{}); err != nil {
		return err
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: shippedNamespace, Labels: map[string]string{shippedLabel: shippedLabelValue},
	}}); err != nil {
		return fmt.Errorf("failed to create namespace %s: %w", shippedNamespace, err)
	}
	if err := splitValidatingWebhooks(ctx, env.Client, strconv.Itoa(own.Options.Port), strconv.Itoa(port)); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- mgr.Start(ctx) }()
	return waitForShippedWebhooks(ctx, env.Client, errc)
}

// splitValidatingWebhooks keeps each of the environment's validating
// webhooks (on port own) off the namespaces labelled shippedLabel, and adds
// a copy on port shipped for those namespaces alone. The mutating webhook (the endpoint
// port's default) reads no policy and stays as it is.
func splitValidatingWebhooks(ctx context.Context, c client.Client, own, shipped string) error {
	list := &admissionv1.ValidatingWebhookConfigurationList{}
	if err := c.List(ctx, list); err != nil {
		return fmt.Errorf("failed to list the validating webhook configurations: %w", err)
	}
	copies := 0
	for i := range list.Items {
		cfg := &list.Items[i]
		dup := &admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: cfg.Name + "-" + shippedNamespace}}
		for j := range cfg.Webhooks {
			w := &cfg.Webhooks[j]
			if w.ClientConfig.URL == nil || !strings.Contains(*w.ClientConfig.URL, ":"+own+"/") {
				continue
			}
			d := *w.DeepCopy()
			url := strings.Replace(*w.ClientConfig.URL, ":"+own+"/", ":"+shipped+"/", 1)
			d.ClientConfig.URL = &url
			d.NamespaceSelector = namespaceSelector(w.NamespaceSelector, metav1.LabelSelectorOpIn)
			w.NamespaceSelector = namespaceSelector(w.NamespaceSelector, metav1.LabelSelectorOpNotIn)
			dup.Webhooks = append(dup.Webhooks, d)
		}
		if len(dup.Webhooks) == 0 {
			continue
		}
		if err := c.Update(ctx, cfg); err != nil {
			return fmt.Errorf("failed to keep webhook configuration %s off namespace %s: %w", cfg.Name, shippedNamespace, err)
		}
		if err := c.Create(ctx, dup); err != nil {
			return fmt.Errorf("failed to create webhook configuration %s: %w", dup.Name, err)
		}
		copies += len(dup.Webhooks)
	}
	if copies == 0 {
		return fmt.Errorf("no validating webhook of the environment serves on port %s", own)
	}
	return nil
}

// namespaceSelector is s with the namespaces labelled shippedLabel selected
// (op In) or left out (op NotIn, which also selects a namespace without the
// label).
func namespaceSelector(s *metav1.LabelSelector, op metav1.LabelSelectorOperator) *metav1.LabelSelector {
	out := &metav1.LabelSelector{}
	if s != nil {
		out = s.DeepCopy()
	}
	out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{
		Key: shippedLabel, Operator: op, Values: []string{shippedLabelValue},
	})
	return out
}

// waitForShippedWebhooks waits, by dry runs, until shippedNamespace's
// ContainerMachines meet the shipped policy and only it: an image the
// shipped defaults allow and the hardened flags refuse is accepted, and one
// both refuse is refused (no webhook at all would accept it). The API
// server picks up webhook configurations asynchronously.
func waitForShippedWebhooks(ctx context.Context, c client.Client, errc <-chan error) error {
	probe := func(image string) error {
		m := validMachine("probe")
		m.Namespace, m.Spec.Image = shippedNamespace, image
		return c.Create(ctx, m, client.DryRunAll)
	}
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		// kindest/node is the shipped defaults' and not testPolicy's; an
		// evil image is neither's.
		if last = probe("kindest/node:v1.35.0"); last == nil {
			if last = probe("evil.example.com/node:1"); last != nil && strings.Contains(last.Error(), "spec.image") {
				return nil
			}
			last = fmt.Errorf("an image outside the shipped prefixes was not refused: %w", last)
		}
		select {
		case err := <-errc:
			return fmt.Errorf("the shipped-defaults manager stopped: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("namespace %s's objects do not meet the shipped defaults after 30s: %w", shippedNamespace, last)
		case <-tick.C:
		}
	}
}

// freePort asks the kernel for a port on host that nothing listens on.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("failed to find a free port on %s: %w", host, err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("failed to free port %d: %w", port, err)
	}
	return port, nil
}
