// Package envtest starts a real kube-apiserver and etcd with CAPCT's and
// Cluster API's CRDs and CAPCT's webhooks, for integration tests. Cluster
// API's own runner is internal to its module, so CAPCT keeps this small one.
//
// The binaries come from hack/ensure-envtest.sh, which builds them from
// source; `make test` exports KUBEBUILDER_ASSETS. Without it Start fails
// with a message saying how to set it: tests never skip silently.
package envtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/policy"
	"github.com/capct/cluster-api-provider-container/internal/webhooks"
)

// Environment is a running API server with a manager whose webhook server
// serves CAPCT's webhooks. Tests add reconcilers to Manager before Start.
type Environment struct {
	env *envtest.Environment

	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client talks to the API server directly, without a cache, so tests
	// read their own writes.
	Client client.Client
	// Manager runs the webhooks and whatever controllers a test adds.
	Manager ctrl.Manager
	// Scheme knows core Kubernetes, Cluster API and CAPCT types.
	Scheme *kruntime.Scheme
	// Policy is what the webhooks allow; policy.Default() unless a test's
	// setup changes it, which it must do before the manager starts.
	Policy *policy.Policy
}

// NewScheme returns a scheme with every type the tests and the manager use.
func NewScheme() (*kruntime.Scheme, error) {
	s := kruntime.NewScheme()
	for _, add := range []func(*kruntime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, clusterv1.AddToScheme,
		bootstrapv1.AddToScheme, controlplanev1.AddToScheme, infrav1.AddToScheme, expinfrav1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("failed to build the test scheme: %w", err)
		}
	}
	return s, nil
}

// Options change the manager that NewWith builds, for programs (the scale
// benchmark) that need it closer to the production manager than the tests
// do, or instrumented.
type Options struct {
	// Config changes the manager's own copy of the REST config (rate
	// limits, user agent, a transport wrapper); Environment.Config stays
	// the plain administrator's.
	Config func(*rest.Config)
	// Manager changes the manager's options after the defaults are set.
	Manager func(*ctrl.Options)
}

// New starts the API server and builds a manager with the webhooks
// registered; the caller starts the manager (see Start) after adding
// controllers.
func New() (*Environment, error) {
	return NewWith(Options{})
}

// NewWith is New with the manager changed by o.
func NewWith(o Options) (*Environment, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: run the tests with `make test`, " +
			"or export KUBEBUILDER_ASSETS=$(hack/ensure-envtest.sh)")
	}
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	capiDir, err := moduleDir("sigs.k8s.io/cluster-api")
	if err != nil {
		return nil, err
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		Scheme:                scheme,
		ErrorIfCRDPathMissing: true,
		CRDDirectoryPaths: []string{
			filepath.Join(root, "config", "crd", "bases"),
			filepath.Join(capiDir, "config", "crd", "bases"),
			filepath.Join(capiDir, "bootstrap", "kubeadm", "config", "crd", "bases"),
			filepath.Join(capiDir, "controlplane", "kubeadm", "config", "crd", "bases"),
		},
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			Paths: []string{filepath.Join(root, "config", "webhook")},
		},
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("failed to start envtest (KUBEBUILDER_ASSETS=%s): %w", os.Getenv("KUBEBUILDER_ASSETS"), err)
	}
	// Installed: envtest keeps the CRDs only to uninstall them, which it
	// does not (CleanUpAfterUse is off). Cluster API's schemas are MiB of
	// heap no manager holds, and make bench-scale measures the manager's.
	env.CRDs = nil
	defaults := policy.Default()
	e := &Environment{env: env, Config: cfg, Scheme: scheme, Policy: &defaults}
	if err := e.setup(o); err != nil {
		return nil, errors.Join(err, env.Stop())
	}
	return e, nil
}

func (e *Environment) setup(o Options) error {
	var err error
	e.Client, err = client.New(e.Config, client.Options{Scheme: e.Scheme})
	if err != nil {
		return fmt.Errorf("failed to create the test client: %w", err)
	}
	opts := e.env.WebhookInstallOptions
	cfg := rest.CopyConfig(e.Config)
	if o.Config != nil {
		o.Config(cfg)
	}
	mopts := ctrl.Options{
		Scheme:  e.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host:    opts.LocalServingHost,
			Port:    opts.LocalServingPort,
			CertDir: opts.LocalServingCertDir,
		}),
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}}}},
	}
	if o.Manager != nil {
		o.Manager(&mopts)
	}
	e.Manager, err = ctrl.NewManager(cfg, mopts)
	if err != nil {
		return fmt.Errorf("failed to create the test manager: %w", err)
	}
	if err := webhooks.SetupWithManager(e.Manager, e.Policy, webhooks.Defaults{}); err != nil {
		return err
	}
	return nil
}

// Start runs the manager until ctx ends and waits until the webhook server
// answers, so that the first request of a test does not race it.
func (e *Environment) Start(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- e.Manager.Start(ctx) }()
	checker := e.Manager.GetWebhookServer().StartedChecker()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := checker(nil); err == nil {
			return nil
		}
		select {
		case err := <-errc:
			return fmt.Errorf("test manager stopped before its webhook server started: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// KubeConfig is a kubeconfig for the API server, for a Cluster's
// <name>-kubeconfig Secret when the test API server also plays the workload
// cluster.
func (e *Environment) KubeConfig() []byte {
	return e.env.KubeConfig
}

// Stop stops the API server and etcd.
func (e *Environment) Stop() error {
	return e.env.Stop()
}

// repoRoot finds the module root from this source file, so tests work from
// any package directory.
func repoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("failed to locate the envtest package source")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", ".."), nil
}

// moduleDir asks the go command where a dependency's sources are, to load
// Cluster API's CRDs from the pinned module rather than from a copy.
func moduleDir(module string) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	if err != nil {
		return "", fmt.Errorf("failed to find the %s module with `go list -m`: %w", module, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("module %s is not downloaded: run `go mod download`", module)
	}
	return dir, nil
}

// Run is a test package's TestMain body: it starts the API server, lets
// setup add controllers to the manager (and do any other preparation),
// starts the manager, runs the tests, and then stops the manager before the
// API server, so that controllers do not spend the shutdown retrying
// against it. after, when not nil, runs once the manager has stopped. It
// returns the exit code; setup errors fail the run, never skip it.
func Run(m *testing.M, setup func(ctx context.Context, env *Environment) error, after func()) int {
	env, err := New()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "failed to stop envtest: %v\n", err)
		}
	}()
	ctx, stopManager := context.WithCancel(context.Background())
	defer stopManager()
	if setup != nil {
		if err := setup(ctx, env); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
			return 1
		}
	}
	if err := env.Start(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	code := m.Run()
	stopManager()
	if after != nil {
		after()
	}
	return code
}
