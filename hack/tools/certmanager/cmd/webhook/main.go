// Command webhook is cert-manager's webhook server for CAPCT's offline
// quickstart, assembled from the public package pkg/webhook/server of the
// github.com/cert-manager/cert-manager root module (v1.21.1, pinned by
// hack/tools/certmanager): upstream's main (cmd/webhook) is a separate module
// that the Go module proxy does not serve.
//
// It serves the admission endpoints that cert-manager's
// Validating/MutatingWebhookConfigurations call, over TLS from a
// self-managed CA in the Secret cert-manager/cert-manager-webhook-ca
// (pkg/server/tls/authority; the cainjector puts its CA into the webhook
// configurations), with a health endpoint for the kubelet's probes.
//
// What it does NOT do: upstream's admission plugins - CertificateRequest
// identity (spec.username/uid/groups), approval-condition authorization and
// the validation of cert-manager resources - live in internal/webhook and
// internal/apis/*/validation of the module, which Go forbids importing from
// another module. The plugin chain here is empty: every request is
// admitted unchanged. cert-manager's controllers do not need the webhook to
// issue certificates; it exists so that the webhook configurations in
// cert-manager.yaml are served (clusterctl creates cert-manager objects
// through them).
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"

	acmev1 "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/server/tls"
	"github.com/cert-manager/cert-manager/pkg/server/tls/authority"
	"github.com/cert-manager/cert-manager/pkg/webhook/admission"
	"github.com/cert-manager/cert-manager/pkg/webhook/server"
)

func main() {
	var (
		securePort   = flag.Int("secure-port", 10250, "port of the admission endpoints (TLS)")
		healthzPort  = flag.Int("healthz-port", 6080, "port of /livez and /healthz")
		caNamespace  = flag.String("dynamic-serving-ca-secret-namespace", "cert-manager", "namespace of the CA Secret")
		caName       = flag.String("dynamic-serving-ca-secret-name", "cert-manager-webhook-ca", "name of the CA Secret")
		dnsNames     = flag.String("dynamic-serving-dns-names", "cert-manager-webhook,cert-manager-webhook.cert-manager,cert-manager-webhook.cert-manager.svc", "DNS names of the serving certificate")
		leafDuration = flag.Duration("dynamic-serving-leaf-duration", 7*24*time.Hour, "validity of the serving certificate")
	)
	klog.InitFlags(nil)
	flag.Parse()
	log := klog.Background().WithName("cert-manager-webhook")

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	ctx = logf.NewContext(ctx, log)

	// --kubeconfig (registered by controller-runtime), $KUBECONFIG or in-cluster.
	cfg, err := ctrlconfig.GetConfig()
	if err != nil {
		log.Error(err, "loading the client configuration")
		os.Exit(1)
	}

	scheme := runtime.NewScheme()
	utilruntime.Must(cmapi.AddToScheme(scheme))
	utilruntime.Must(acmev1.AddToScheme(scheme))
	utilruntime.Must(cmmeta.AddToScheme(scheme))

	chain := admission.PluginChain{} // see the package comment
	s := &server.Server{
		ResourceScheme: scheme,
		ListenAddr:     *securePort,
		HealthzAddr:    healthzPort,
		CertificateSource: &tls.DynamicSource{
			DNSNames: strings.Split(*dnsNames, ","),
			Authority: &authority.DynamicAuthority{
				SecretNamespace: *caNamespace,
				SecretName:      *caName,
				SecretLabels:    map[string]string{"app.kubernetes.io/managed-by": "cert-manager-webhook"},
				LeafDuration:    *leafDuration,
				RESTConfig:      cfg,
			},
		},
		ValidationWebhook: chain,
		MutationWebhook:   chain,
	}
	if err := s.Run(ctx); err != nil {
		log.Error(err, "webhook server failed")
		os.Exit(1)
	}
}
