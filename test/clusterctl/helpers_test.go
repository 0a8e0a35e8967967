package clusterctl

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/spf13/viper"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/cluster"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/config"
	clusterctllog "sigs.k8s.io/cluster-api/cmd/clusterctl/log"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

// newClusterctl returns clusterctl's client with a configuration file that
// declares the provider "container" at the release repository, plus extra
// variables (as a user would put them in clusterctl.yaml).
func newClusterctl(t *testing.T, variables map[string]string, options ...client.Option) client.Client {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "providers:\n- name: container\n  type: InfrastructureProvider\n  url: file://%s\n",
		releaseFile("infrastructure-components.yaml"))
	for k, v := range variables {
		fmt.Fprintf(&b, "%s: %q\n", k, v)
	}
	path := filepath.Join(t.TempDir(), "clusterctl.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	// clusterctl keeps its configuration and the variables it sets (such
	// as KUBERNETES_VERSION) in viper's global instance: start afresh.
	viper.Reset()
	c, err := client.New(context.Background(), path, options...)
	if err != nil {
		t.Fatalf("clusterctl client: %v", err)
	}
	return c
}

// envtestClusterClients lets clusterctl talk to envtest's API server, whose
// binaries are built from source without a version stamp (v0.0.0-master),
// which clusterctl's minimum-version check would refuse. Nothing else of
// clusterctl's cluster client changes.
func envtestClusterClients(t *testing.T) client.Option {
	t.Helper()
	return client.InjectClusterClientFactory(func(in client.ClusterClientFactoryInput) (cluster.Client, error) {
		cfg, err := config.New(context.Background(), "")
		if err != nil {
			return nil, err
		}
		kc := cluster.Kubeconfig(in.Kubeconfig)
		return cluster.New(kc, cfg, cluster.InjectProxy(unversionedProxy{cluster.NewProxy(kc)})), nil
	})
}

type unversionedProxy struct{ cluster.Proxy }

func (unversionedProxy) ValidateKubernetesVersion() error { return nil }

// unsetClusterctlEnv makes sure variables the tests expect to be missing or
// defaulted are not inherited from the caller's environment.
func unsetClusterctlEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "CAPCT_") && name != "CAPCT_CACHE",
			name == "CLUSTER_NAME", name == "NAMESPACE", name == "KUBERNETES_VERSION",
			name == "CONTROL_PLANE_MACHINE_COUNT", name == "WORKER_MACHINE_COUNT", name == "EXP_MACHINE_POOL":
			t.Setenv(name, "")
			if err := os.Unsetenv(name); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// startEnv starts an envtest API server with CAPCT's webhooks serving.
func startEnv(t *testing.T) *envtest.Environment {
	t.Helper()
	env, err := envtest.New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	if err := env.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return env
}

// kubeconfig writes a kubeconfig file for the API server of cfg.
func kubeconfig(t *testing.T, cfg *rest.Config) client.Kubeconfig {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken,
	}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return client.Kubeconfig{Path: path, Context: "envtest"}
}

// strictClient rejects unknown and duplicate fields instead of dropping them,
// so that a misspelt field in a template fails the dry run.
func strictClient(t *testing.T, env *envtest.Environment) crclient.Client {
	t.Helper()
	c, err := crclient.New(env.Config, crclient.Options{Scheme: env.Scheme, FieldValidation: metav1.FieldValidationStrict})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dryRunApply server-side applies obj with dryRun=All.
func dryRunApply(ctx context.Context, c crclient.Client, obj *unstructured.Unstructured) error {
	o := obj.DeepCopy()
	o.SetResourceVersion("")
	//nolint:staticcheck // Patch with client.Apply takes unstructured objects as they are.
	return c.Patch(ctx, o, crclient.Apply, crclient.DryRunAll, crclient.ForceOwnership, crclient.FieldOwner("capct-clusterctl-test"))
}

// apply server-side applies obj for real.
func apply(ctx context.Context, c crclient.Client, obj *unstructured.Unstructured) error {
	o := obj.DeepCopy()
	o.SetResourceVersion("")
	//nolint:staticcheck // see dryRunApply
	return c.Patch(ctx, o, crclient.Apply, crclient.ForceOwnership, crclient.FieldOwner("capct-clusterctl-test"))
}

// installCertManagerCRDs installs stand-ins for cert-manager's Issuer and
// Certificate CRDs with the schema of the fields CAPCT uses, and nothing
// else, so strict validation catches a misspelt field. The real CRDs come
// with cert-manager, which `clusterctl init` installs from the internet.
func installCertManagerCRDs(ctx context.Context, t *testing.T, c crclient.Client) {
	t.Helper()
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	strs := apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &str}}
	obj := func(props map[string]apiextensionsv1.JSONSchemaProps, required ...string) apiextensionsv1.JSONSchemaProps {
		return apiextensionsv1.JSONSchemaProps{Type: "object", Properties: props, Required: required}
	}
	crd := func(kind, plural string, spec apiextensionsv1.JSONSchemaProps) *apiextensionsv1.CustomResourceDefinition {
		return &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: plural + ".cert-manager.io"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: "cert-manager.io", Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, ListKind: kind + "List", Plural: plural, Singular: strings.ToLower(kind)},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
					Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: ptr.To(obj(map[string]apiextensionsv1.JSONSchemaProps{
						"apiVersion": str, "kind": str, "metadata": {Type: "object"}, "spec": spec,
					}))},
				}},
			},
		}
	}
	issuer := crd("Issuer", "issuers", obj(map[string]apiextensionsv1.JSONSchemaProps{
		"selfSigned": obj(map[string]apiextensionsv1.JSONSchemaProps{"crlDistributionPoints": strs}),
	}))
	certificate := crd("Certificate", "certificates", obj(map[string]apiextensionsv1.JSONSchemaProps{
		"dnsNames":   strs,
		"secretName": str,
		"issuerRef":  obj(map[string]apiextensionsv1.JSONSchemaProps{"name": str, "kind": str, "group": str}, "name"),
		"subject":    obj(map[string]apiextensionsv1.JSONSchemaProps{"organizations": strs}),
	}, "secretName", "issuerRef"))
	for _, o := range []*apiextensionsv1.CustomResourceDefinition{issuer, certificate} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating the stand-in %s CRD: %v", o.Name, err)
		}
	}
	waitForCRDs(ctx, t, c, issuer.Name, certificate.Name)
}

// waitForCRDs waits until the named CRDs are established.
func waitForCRDs(ctx context.Context, t *testing.T, c crclient.Client, names ...string) {
	t.Helper()
	for _, name := range names {
		for i := 0; ; i++ {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, crclient.ObjectKey{Name: name}, crd); err != nil {
				t.Fatal(err)
			}
			established := false
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					established = true
				}
			}
			if established {
				break
			}
			if i > 100 {
				t.Fatalf("CRD %s is not established", name)
			}
			sleep(ctx)
		}
	}
}

// labelCRDsAsClusterctlWould puts clusterctl's labels on the CRDs of
// Cluster API's core and kubeadm providers, which `clusterctl init` would
// have installed; CAPCT's CRDs get them from applying the components that
// clusterctl processed (see installComponentsCRDs).
func labelCRDsAsClusterctlWould(ctx context.Context, t *testing.T, c crclient.Client) {
	t.Helper()
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := c.List(ctx, crds); err != nil {
		t.Fatal(err)
	}
	providers := map[string]string{
		"cluster.x-k8s.io":              "cluster-api",
		"addons.cluster.x-k8s.io":       "cluster-api",
		"ipam.cluster.x-k8s.io":         "cluster-api",
		"runtime.cluster.x-k8s.io":      "cluster-api",
		"bootstrap.cluster.x-k8s.io":    "bootstrap-kubeadm",
		"controlplane.cluster.x-k8s.io": "control-plane-kubeadm",
	}
	for i := range crds.Items {
		crd := &crds.Items[i]
		provider, ok := providers[crd.Spec.Group]
		if !ok {
			continue
		}
		patch := crclient.MergeFrom(crd.DeepCopy())
		labels := crd.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[clusterctlv1.ClusterctlLabel] = ""
		labels[clusterv1.ProviderNameLabel] = provider
		crd.SetLabels(labels)
		if err := c.Patch(ctx, crd, patch); err != nil {
			t.Fatal(err)
		}
	}
}

// logCapture records what clusterctl logs, at every verbosity.
type logCapture struct {
	mu    sync.Mutex
	lines []string
}

func (l *logCapture) install() {
	clusterctllog.SetLogger(funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 10}))
}

func (l *logCapture) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func mustSemver(t *testing.T, v string) *utilversion.Version {
	t.Helper()
	s, err := utilversion.ParseSemantic(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sleep(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(100 * time.Millisecond):
	}
}
