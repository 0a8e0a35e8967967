// Command cainjector is cert-manager's CA injector for CAPCT's offline
// quickstart, assembled from the public package pkg/controller/cainjector of
// the github.com/cert-manager/cert-manager root module (v1.21.1, pinned by
// hack/tools/certmanager): upstream's main (cmd/cainjector) is a separate
// module that the Go module proxy does not serve.
//
// It runs a controller-runtime manager with the injectors for
// MutatingWebhookConfigurations, ValidatingWebhookConfigurations,
// APIServices and CustomResourceDefinitions, sourcing CAs from Secrets
// (cert-manager.io/inject-ca-from-secret), Certificates
// (cert-manager.io/inject-ca-from) and the API server
// (cert-manager.io/inject-apiserver-ca), as upstream's cainjector with its
// defaults, with leader election (upstream's Lease kube-system/cert-manager-cainjector-leader-election).
package main

import (
	"flag"
	"net/http"
	"os"

	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	"github.com/cert-manager/cert-manager/pkg/util"
)

func main() {
	var (
		namespace      = flag.String("namespace", "", "namespace of the injectables to watch; empty for all")
		leaderElect    = flag.Bool("leader-elect", true, "use leader election")
		leaderElectNS  = flag.String("leader-election-namespace", "kube-system", "namespace of the leader election Lease")
		healthzAddress = flag.String("healthz-address", ":9402", "address of /healthz and /readyz; 0 to disable")
		metricsAddress = flag.String("metrics-address", "0", "metrics address; 0 to disable")
	)
	klog.InitFlags(nil)
	flag.Parse()
	ctrl.SetLogger(klog.Background().WithName("cert-manager-cainjector"))
	log := ctrl.Log

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))
	utilruntime.Must(cmapi.AddToScheme(scheme))

	// The user agent (cert-manager-cainjector/<version> ...) also names the
	// field manager of the injector's server-side applies, which must not be empty.
	cfg := util.RestConfigWithUserAgent(ctrl.GetConfigOrDie(), "cainjector")
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		LeaderElection:          *leaderElect,
		LeaderElectionNamespace: *leaderElectNS,
		LeaderElectionID:        "cert-manager-cainjector-leader-election",
		HealthProbeBindAddress:  *healthzAddress,
		Metrics:                 metricsserver.Options{BindAddress: *metricsAddress},
		// Secrets are watched as metadata only (RegisterAllInjectors); their
		// data is read from the API server, not cached, like upstream.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		log.Error(err, "creating the manager")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    *namespace,
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	}); err != nil {
		log.Error(err, "registering the injectors")
		os.Exit(1)
	}
	if *healthzAddress != "0" {
		if err := mgr.AddHealthzCheck("ping", func(*http.Request) error { return nil }); err != nil {
			log.Error(err, "adding the health check")
			os.Exit(1)
		}
	}
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
