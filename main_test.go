package main

import (
	"errors"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/logs"
	logsv1 "k8s.io/component-base/logs/api/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// TestManagerCacheDropsManagedFields: objects enter the manager's cache
// without metadata.managedFields and with everything else.
func TestManagerCacheDropsManagedFields(t *testing.T) {
	period := time.Hour
	opts := managerCacheOptions("", &period)
	if opts.DefaultTransform == nil {
		t.Fatal("the manager's cache has no DefaultTransform")
	}
	in := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: "n", Labels: map[string]string{"a": "b"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}},
	}}
	out, err := opts.DefaultTransform(in)
	if err != nil {
		t.Fatal(err)
	}
	n, ok := out.(*corev1.Node)
	if !ok {
		t.Fatalf("got %T", out)
	}
	if n.ManagedFields != nil {
		t.Fatalf("managedFields kept: %+v", n.ManagedFields)
	}
	if n.Name != "n" || n.Labels["a"] != "b" {
		t.Fatalf("the rest of the object changed: %+v", n.ObjectMeta)
	}
	if opts.SyncPeriod != &period {
		t.Fatalf("sync period lost: %+v", opts)
	}
}

// TestManagerNeverCachesSecretsOrConfigMaps: a cached read of either kind
// would make the manager list and watch every one in the cluster, which
// its role does not grant (get only).
func TestManagerNeverCachesSecretsOrConfigMaps(t *testing.T) {
	period := time.Hour
	for obj := range managerCacheOptions("", &period).ByObject {
		switch obj.(type) {
		case *corev1.Secret, *corev1.ConfigMap:
			t.Fatalf("the manager's cache holds %T", obj)
		}
	}
	opts := managerClientOptions()
	if opts.Cache == nil {
		t.Fatal("the manager's client has no cache options")
	}
	for _, want := range []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}} {
		if !slices.ContainsFunc(opts.Cache.DisableFor, func(o client.Object) bool { return reflect.TypeOf(o) == reflect.TypeOf(want) }) {
			t.Errorf("the manager's client reads %T from its cache", want)
		}
	}
}

// TestTheKubeletWaitsForTheManagersGracefulShutdown: the Deployment's
// terminationGracePeriodSeconds outlasts --graceful-shutdown-timeout, as
// the manifest sets it and as it defaults, so that the kubelet does not
// kill reconciles the manager is still letting finish.
func TestTheKubeletWaitsForTheManagersGracefulShutdown(t *testing.T) {
	raw, err := os.ReadFile("config/manager/manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	noVariables := func(string) (string, error) { return "", errors.New("not set") }
	out, err := yamlprocessor.NewSimpleProcessor().Process(raw, noVariables)
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.Unmarshal(out, &d); err != nil {
		t.Fatal(err)
	}
	o := &options{logOptions: logs.NewOptions()}
	fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
	o.addFlags(fs)
	if err := fs.Parse(d.Spec.Template.Spec.Containers[0].Args); err != nil {
		t.Fatal(err)
	}
	grace := time.Duration(ptr.Deref(d.Spec.Template.Spec.TerminationGracePeriodSeconds, 30)) * time.Second
	if grace <= o.gracefulShutdownTimeout {
		t.Fatalf("terminationGracePeriodSeconds %s does not outlast --graceful-shutdown-timeout %s", grace, o.gracefulShutdownTimeout)
	}
}

// TestTheLogFormatsIncludeJSON: --logging-format=json is accepted and
// applied, as in Cluster API's managers; only text was registered before.
func TestTheLogFormatsIncludeJSON(t *testing.T) {
	o := logs.NewOptions()
	fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
	logsv1.AddFlags(o, fs)
	if err := fs.Parse([]string{"--logging-format=json"}); err != nil {
		t.Fatalf("--logging-format=json refused: %v", err)
	}
	if err := logsv1.ValidateAndApply(o, nil); err != nil {
		t.Fatalf("the json log format does not apply: %v", err)
	}
	t.Cleanup(func() {
		o := logs.NewOptions()
		_ = logsv1.ValidateAndApply(o, nil)
	})
}
