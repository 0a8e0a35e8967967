// Command controller is cert-manager's controller for CAPCT's offline
// quickstart, assembled from the public packages of the
// github.com/cert-manager/cert-manager root module (v1.21.1, pinned by
// hack/tools/certmanager): upstream's main (cmd/controller) is a separate
// module that the Go module proxy does not serve.
//
// Each controller package registers its constructor with pkg/controller
// (controller.Register in its init); this main imports the packages it
// runs, builds one pkg/controller ContextFactory, constructs every
// controller through controller.Known(), starts the shared informers and
// runs them - what upstream's cmd/controller/app does, without leader
// election (one replica), metrics server or the ACME, Vault, Venafi,
// ingress/gateway-shim and CertificateSigningRequest controllers: it
// issues certificates of SelfSigned and CA Issuers and ClusterIssuers,
// which is what Cluster API and CAPCT use.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	controller "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// Controllers; each registers itself for controller.Known().
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"

	// Issuer types the issuers controllers set up; each registers itself.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

func main() {
	var (
		clusterResourceNamespace = flag.String("cluster-resource-namespace", "kube-system", "namespace of the Secrets that ClusterIssuers reference")
		namespace                = flag.String("namespace", "", "namespace to watch; empty for all")
		kubeconfig               = flag.String("kubeconfig", "", "kubeconfig; empty for the in-cluster configuration")
		workers                  = flag.Int("concurrent-workers", 5, "workers per controller")
		healthz                  = flag.String("healthz-address", ":9403", "address of /livez and /healthz; empty to disable")
		controllers              = flag.String("controllers", "", "comma-separated controllers to run; empty for all that are built in")
	)
	klog.InitFlags(nil)
	flag.Parse()

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	log := klog.Background().WithName("cert-manager-controller")
	ctx = logf.NewContext(ctx, log)
	if err := run(ctx, *kubeconfig, *namespace, *clusterResourceNamespace, *workers, *healthz, *controllers); err != nil {
		log.Error(err, "controller failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, namespace, clusterResourceNamespace string, workers int, healthz, only string) error {
	log := logf.FromContext(ctx)
	opts := controller.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		Namespace:          namespace,
		IssuerOptions: controller.IssuerOptions{
			ClusterResourceNamespace:        clusterResourceNamespace,
			ClusterIssuerAmbientCredentials: true,
		},
		IngressShimOptions: controller.IngressShimOptions{DefaultIssuerKind: "Issuer", DefaultIssuerGroup: "cert-manager.io"},
		CertificateOptions: controller.CertificateOptions{
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
		SchedulerOptions: controller.SchedulerOptions{MaxConcurrentChallenges: 60},
	}
	factory, err := controller.NewContextFactory(ctx, opts)
	if err != nil {
		return fmt.Errorf("building the controller context: %w", err)
	}
	shared, err := factory.Build()
	if err != nil {
		return err
	}

	names := make([]string, 0, len(controller.Known()))
	for name := range controller.Known() {
		names = append(names, name)
	}
	sort.Strings(names)
	if only != "" {
		names = strings.Split(only, ",")
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, name := range names {
		newController, ok := controller.Known()[name]
		if !ok {
			return fmt.Errorf("controller %q is not built in", name)
		}
		c, err := newController(factory)
		if err != nil {
			return fmt.Errorf("constructing controller %q: %w", name, err)
		}
		log.Info("starting controller", "controller", name)
		g.Go(func() error { return c.Run(workers, gctx) })
	}

	// The informers the controllers registered while being constructed.
	shared.SharedInformerFactory.Start(gctx.Done())
	shared.KubeSharedInformerFactory.Start(gctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(gctx.Done())
	if shared.GatewaySolverEnabled {
		shared.GWShared.Start(gctx.Done())
	}

	if healthz != "" {
		mux := http.NewServeMux()
		ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }
		mux.HandleFunc("/livez", ok)
		mux.HandleFunc("/healthz", ok)
		srv := &http.Server{Addr: healthz, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		g.Go(func() error {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
		g.Go(func() error {
			<-gctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		})
	}
	return g.Wait()
}
