package clusterctl

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	"sigs.k8s.io/yaml"

	"github.com/capct/cluster-api-provider-container/internal/kubeversion"
	"github.com/capct/cluster-api-provider-container/internal/provisioning"
)

const (
	clusterName       = "demo"
	namespace         = "capct-test"
	kubernetesVersion = "v1.35.4"
)

// flavors are every cluster-template*.yaml of the release, with the
// variables each one must report (besides the five clusterctl fills in from
// its own flags).
var flavors = map[string][]string{
	"": {"CAPCT_LB_IMAGE", "CAPCT_NETWORK", "CAPCT_NETWORK_MODE", "CAPCT_NODE_IMAGE", "CAPCT_NODE_MASK_SIZE", "CAPCT_POD_CIDR",
		"CAPCT_SERVICE_CIDR", "CAPCT_SERVICE_DOMAIN", "CAPCT_WORKER_PORT_MAPPINGS"},
	"machinepool": {"CAPCT_LB_IMAGE", "CAPCT_NETWORK", "CAPCT_NETWORK_MODE", "CAPCT_NODE_IMAGE", "CAPCT_NODE_MASK_SIZE", "CAPCT_POD_CIDR",
		"CAPCT_SERVICE_CIDR", "CAPCT_SERVICE_DOMAIN"},
	"quickstart": {"CAPCT_LB_IMAGE", "CAPCT_NETWORK", "CAPCT_NETWORK_MODE", "CAPCT_NODE_IMAGE", "CAPCT_NODE_MASK_SIZE", "CAPCT_POD_CIDR",
		"CAPCT_SERVICE_CIDR", "CAPCT_SERVICE_DOMAIN", "CAPCT_WORKER_PORT_MAPPINGS"},
	"dualstack": {"CAPCT_LB_IMAGE", "CAPCT_NETWORK", "CAPCT_NETWORK_MODE", "CAPCT_NODE_IMAGE", "CAPCT_NODE_MASK_SIZE", "CAPCT_NODE_MASK_SIZE_IPV6",
		"CAPCT_POD_CIDR", "CAPCT_POD_CIDR_IPV6", "CAPCT_SERVICE_CIDR", "CAPCT_SERVICE_CIDR_IPV6", "CAPCT_SERVICE_DOMAIN", "CAPCT_WORKER_PORT_MAPPINGS"},
	"ipv6": {"CAPCT_LB_IMAGE", "CAPCT_NETWORK", "CAPCT_NETWORK_MODE", "CAPCT_NODE_IMAGE", "CAPCT_NODE_MASK_SIZE_IPV6",
		"CAPCT_POD_CIDR_IPV6", "CAPCT_SERVICE_CIDR_IPV6", "CAPCT_SERVICE_DOMAIN", "CAPCT_WORKER_PORT_MAPPINGS"},
	"topology": {"CAPCT_LB_IMAGE", "CAPCT_NETWORK", "CAPCT_NETWORK_MODE", "CAPCT_NODE_IMAGE_REPOSITORY", "CAPCT_NODE_MASK_SIZE", "CAPCT_POD_CIDR",
		"CAPCT_SERVICE_CIDR", "CAPCT_SERVICE_DOMAIN"},
	"multihost": {"CAPCT_ENGINES", "CAPCT_LB_IMAGE", "CAPCT_NETWORK", "CAPCT_NETWORK_MODE", "CAPCT_NODE_IMAGE", "CAPCT_NODE_MASK_SIZE",
		"CAPCT_POD_CIDR", "CAPCT_SERVICE_CIDR", "CAPCT_SERVICE_DOMAIN", "CAPCT_WORKER_PORT_MAPPINGS"},
}

// flavorSettings are the variables without a default that a flavor needs,
// and values a flavor is also tried with, set as a user would in
// clusterctl.yaml.
var flavorSettings = map[string]map[string]string{
	// As docs/templates.md says to write it: a YAML flow list.
	"multihost": {"CAPCT_ENGINES": "[{name: engine-a}, {name: engine-b, controlPlane: false}]"},
	// As make test-restart sets it (docs/port-mappings.md).
	"quickstart": {"CAPCT_WORKER_PORT_MAPPINGS": "[{containerPort: 30080, hostPort: 38080}]"},
}

var commonVariables = []string{"CLUSTER_NAME", "CONTROL_PLANE_MACHINE_COUNT", "KUBERNETES_VERSION", "NAMESPACE", "WORKER_MACHINE_COUNT"}

func TestReleaseLayout(t *testing.T) {
	requireRelease(t)
	want := []string{"infrastructure-components.yaml", "metadata.yaml", "cluster-template.yaml",
		"cluster-template-machinepool.yaml", "cluster-template-dualstack.yaml", "cluster-template-ipv6.yaml",
		"cluster-template-topology.yaml", "clusterclass-quick-start.yaml"}
	for _, f := range want {
		if _, err := os.Stat(releaseFile(f)); err != nil {
			t.Errorf("release file %s: %v", f, err)
		}
	}
	raw, err := os.ReadFile(releaseFile("metadata.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	md := &clusterctlv1.Metadata{}
	if err := yaml.UnmarshalStrict(raw, md); err != nil {
		t.Fatalf("metadata.yaml: %v", err)
	}
	if md.APIVersion != "clusterctl.cluster.x-k8s.io/v1alpha3" || md.Kind != "Metadata" {
		t.Errorf("metadata.yaml is %s %s", md.APIVersion, md.Kind)
	}
	if s := md.GetReleaseSeriesForVersion(mustSemver(t, version)); s == nil || s.Contract != "v1beta2" {
		t.Errorf("metadata.yaml maps %s to %+v, want contract v1beta2", version, s)
	}
	// A ClusterClass file must not use clusterctl variables nor namespaces.
	cc, err := os.ReadFile(releaseFile("clusterclass-quick-start.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(cc), "${") || strings.Contains(string(cc), "namespace:") {
		t.Error("clusterclass-quick-start.yaml uses a clusterctl variable or a namespace")
	}
}

func TestGenerateProvider(t *testing.T) {
	requireRelease(t)
	unsetClusterctlEnv(t)
	ctx := context.Background()
	c := newClusterctl(t, nil)

	components, err := c.GenerateProvider(ctx, "container", clusterctlv1.InfrastructureProviderType, client.ComponentsOptions{})
	if err != nil {
		t.Fatalf("clusterctl generate provider --infrastructure container: %v", err)
	}
	wantVars := []string{"CAPCT_ALLOWED_HOST_LISTEN_ADDRESSES", "CAPCT_ALLOWED_HOST_PATH_PREFIXES", "CAPCT_ALLOWED_IMAGE_PREFIXES", "CAPCT_ALLOWED_UNMANAGED_NETWORKS",
		"CAPCT_CONTAINER_HOST", "CAPCT_DEFAULT_NETWORK", "CAPCT_DIAGNOSTICS_ADDRESS", "CAPCT_DOCKER_HOST", "CAPCT_ENGINE",
		"CAPCT_ENGINE_SOCKET", "CAPCT_INSECURE_DIAGNOSTICS", "CAPCT_LOCAL_ENGINE_ALLOWED_NAMESPACES",
		"CAPCT_LOCAL_ENGINE_NAMESPACE_SELECTOR", "CAPCT_LOGLEVEL", "CAPCT_MANAGER_IMAGE",
		"CAPCT_MANAGER_IMAGE_PULL_POLICY", "CAPCT_MAX_MACHINES_PER_CLUSTER", "CAPCT_MIN_HOST_PORT", "EXP_MACHINE_POOL"}
	if got := sorted(components.Variables()); !slices.Equal(got, wantVars) {
		t.Errorf("provider variables = %v, want %v", got, wantVars)
	}
	if components.TargetNamespace() != "capct-system" {
		t.Errorf("target namespace = %q, want capct-system", components.TargetNamespace())
	}
	if components.Version() != version {
		t.Errorf("version = %q, want %s", components.Version(), version)
	}

	var namespaces, deployments int
	for _, o := range components.Objs() {
		if got := o.GetLabels()[clusterv1.ProviderNameLabel]; got != "infrastructure-container" {
			t.Errorf("%s %s has provider label %q", o.GetKind(), o.GetName(), got)
		}
		if o.GetNamespace() != "" && o.GetNamespace() != "capct-system" {
			t.Errorf("%s %s is in namespace %s", o.GetKind(), o.GetName(), o.GetNamespace())
		}
		if o.GetName() != "" && o.GetKind() != "CustomResourceDefinition" && !strings.HasPrefix(o.GetName(), "capct-") {
			t.Errorf("%s %s lacks the capct- prefix", o.GetKind(), o.GetName())
		}
		switch o.GetKind() {
		case "Namespace":
			namespaces++
			if o.GetLabels()["pod-security.kubernetes.io/enforce"] != "privileged" {
				t.Error("namespace capct-system does not enforce the privileged Pod Security level")
			}
		case "CustomResourceDefinition":
			if o.GetLabels()["cluster.x-k8s.io/v1beta2"] != "v1alpha1" {
				t.Errorf("CRD %s lacks the contract label cluster.x-k8s.io/v1beta2: v1alpha1", o.GetName())
			}
		case "Deployment":
			deployments++
			checkManager(t, o)
		case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
			if got := o.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != "capct-system/capct-serving-cert" {
				t.Errorf("%s inject-ca-from = %q", o.GetKind(), got)
			}
			webhooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			for _, w := range webhooks {
				svc, _, _ := unstructured.NestedStringMap(w.(map[string]any), "clientConfig", "service")
				if svc["name"] != "capct-webhook-service" || svc["namespace"] != "capct-system" {
					t.Errorf("%s webhook service = %v", o.GetKind(), svc)
				}
			}
		case "ClusterRole":
			if o.GetName() == "capct-aggregated-manager-role" &&
				o.GetLabels()["cluster.x-k8s.io/aggregate-to-manager"] != "true" {
				t.Error("the aggregated role lacks cluster.x-k8s.io/aggregate-to-manager")
			}
		}
	}
	if namespaces != 1 || deployments != 1 {
		t.Errorf("components have %d namespaces and %d deployments, want 1 each", namespaces, deployments)
	}

	// Variables from the user's clusterctl.yaml reach the manifest.
	c = newClusterctl(t, map[string]string{"CAPCT_MANAGER_IMAGE": "example.com/capct/manager:test", "CAPCT_LOGLEVEL": "5"})
	components, err = c.GenerateProvider(ctx, "container", clusterctlv1.InfrastructureProviderType, client.ComponentsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := components.Yaml()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"image: example.com/capct/manager:test", "- -v=5"} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("components with variables set lack %q", want)
		}
	}
}

func checkManager(t *testing.T, d unstructured.Unstructured) {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("manager Deployment has %d containers", len(containers))
	}
	m := containers[0].(map[string]any)
	if m["name"] != "manager" {
		t.Errorf("container is named %v, clusterctl needs manager", m["name"])
	}
	if m["image"] != "docker.io/capct/manager:"+version {
		t.Errorf("manager image = %v", m["image"])
	}
	args, _, _ := unstructured.NestedStringSlice(m, "args")
	for _, want := range []string{"--leader-elect", "--diagnostics-address=:8443", "--insecure-diagnostics=false",
		"--feature-gates=MachinePool=true", "-v=2"} {
		if !slices.Contains(args, want) {
			t.Errorf("manager args %v lack %s", args, want)
		}
	}
	privileged, _, _ := unstructured.NestedBool(m, "securityContext", "privileged")
	if !privileged {
		t.Error("manager is not privileged")
	}
	env, _, _ := unstructured.NestedSlice(m, "env")
	found := false
	for _, e := range env {
		if e.(map[string]any)["name"] == "DOCKER_HOST" {
			found = true
			// clusterctl drops the empty value: the variable is empty.
			if v := e.(map[string]any)["value"]; v != nil && v != "" {
				t.Errorf("DOCKER_HOST defaults to %q, want empty", v)
			}
		}
	}
	if !found {
		t.Error("manager has no DOCKER_HOST")
	}
}

// generate renders a flavor like `clusterctl generate cluster demo
// --infrastructure container --flavor <flavor> --kubernetes-version v1.35.4
// --control-plane-machine-count 1 --worker-machine-count 2 -n capct-test`.
func generate(ctx context.Context, c client.Client, flavor string, kc client.Kubeconfig) (client.Template, error) {
	return c.GetClusterTemplate(ctx, client.GetClusterTemplateOptions{
		Kubeconfig:               kc,
		ProviderRepositorySource: &client.ProviderRepositorySourceOptions{InfrastructureProvider: "container:" + version, Flavor: flavor},
		ClusterName:              clusterName,
		TargetNamespace:          namespace,
		KubernetesVersion:        kubernetesVersion,
		ControlPlaneMachineCount: ptr.To[int64](1),
		WorkerMachineCount:       ptr.To[int64](2),
	})
}

// noCluster makes clusterctl find no management cluster, as for a user
// who has none yet: no kubeconfig path, and KUBECONFIG names no file.
func noCluster(t *testing.T) client.Kubeconfig {
	t.Helper()
	t.Setenv("KUBECONFIG", t.TempDir()+"/none")
	return client.Kubeconfig{}
}

func TestGenerateCluster(t *testing.T) {
	requireRelease(t)
	unsetClusterctlEnv(t)
	ctx := context.Background()
	c := newClusterctl(t, nil)
	kc := noCluster(t)

	for flavor, vars := range flavors {
		t.Run("flavor="+flavor, func(t *testing.T) {
			tmpl, err := generate(ctx, newClusterctl(t, flavorSettings[flavor]), flavor, kc)
			if err != nil {
				t.Fatalf("clusterctl generate cluster --flavor %q: %v", flavor, err)
			}
			want := sorted(append(slices.Clone(vars), commonVariables...))
			if got := sorted(tmpl.Variables()); !slices.Equal(got, want) {
				t.Errorf("variables = %v\nwant        %v", got, want)
			}
			checkRendered(t, flavor, tmpl.Objs())
			checkHealthChecks(t, flavor, tmpl.Objs())
			if flavor == "multihost" {
				checkMultihost(t, tmpl.Objs())
			}
		})
	}

	t.Run("overrides", func(t *testing.T) {
		c := newClusterctl(t, map[string]string{
			"CAPCT_NODE_IMAGE": "example.com/node:custom", "CAPCT_NODE_MASK_SIZE": "26", "CAPCT_POD_CIDR": "10.10.0.0/16",
			"CAPCT_NETWORK": "capct-mgmt", "CAPCT_NETWORK_MODE": "Unmanaged",
		})
		tmpl, err := generate(ctx, c, "", kc)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := tmpl.Yaml()
		for _, want := range []string{"image: example.com/node:custom", "nodeMaskSizeIPv4: 26", "- 10.10.0.0/16",
			"name: capct-mgmt", "mode: Unmanaged"} {
			if !strings.Contains(string(raw), want) {
				t.Errorf("rendered template lacks %q", want)
			}
		}
	})

	t.Run("missing required variable", func(t *testing.T) {
		// A fresh client: clusterctl keeps the variables of earlier calls.
		c := newClusterctl(t, nil)
		_, err := c.GetClusterTemplate(ctx, client.GetClusterTemplateOptions{
			Kubeconfig:               kc,
			ProviderRepositorySource: &client.ProviderRepositorySourceOptions{InfrastructureProvider: "container:" + version},
			ClusterName:              clusterName,
			TargetNamespace:          namespace,
			ControlPlaneMachineCount: ptr.To[int64](1),
			WorkerMachineCount:       ptr.To[int64](1),
		})
		if err == nil {
			t.Fatal("generate without KUBERNETES_VERSION succeeded")
		}
		if !strings.Contains(err.Error(), "KUBERNETES_VERSION") || !strings.Contains(err.Error(), "not set") {
			t.Errorf("error does not say KUBERNETES_VERSION is not set: %v", err)
		}
		t.Logf("clusterctl says: %v", err)
	})

	t.Run("unknown flavor", func(t *testing.T) {
		if _, err := generate(ctx, c, "nope", kc); err == nil {
			t.Error("an unknown flavor rendered")
		}
	})
}

// checkRendered checks what every flavor must do for CAPCT's nodes.
func checkRendered(t *testing.T, flavor string, objs []unstructured.Unstructured) {
	t.Helper()
	var controllerManagers, nodeRegistrations, images int
	for _, o := range objs {
		if o.GetNamespace() != namespace {
			t.Errorf("%s %s is in namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
		}
		var spec map[string]any
		switch o.GetKind() {
		case "KubeadmControlPlane":
			spec, _, _ = unstructured.NestedMap(o.Object, "spec", "kubeadmConfigSpec")
		case "KubeadmControlPlaneTemplate":
			spec, _, _ = unstructured.NestedMap(o.Object, "spec", "template", "spec", "kubeadmConfigSpec")
		case "KubeadmConfigTemplate":
			spec, _, _ = unstructured.NestedMap(o.Object, "spec", "template", "spec")
		case "KubeadmConfig":
			spec, _, _ = unstructured.NestedMap(o.Object, "spec")
		case "ContainerCluster":
			// Unset, CAPCT derives the network's name from the namespace
			// and the cluster with a hash (internal/naming); a default
			// joined from the two would collide across namespaces.
			if name, ok, _ := unstructured.NestedString(o.Object, "spec", "network", "name"); !ok || name != "" {
				t.Errorf("%s spec.network.name = %q, want it empty so that CAPCT derives it", o.GetName(), name)
			}
			continue
		case "ContainerMachineTemplate":
			if img, ok, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "image"); ok {
				images++
				if img != "capct/node:"+kubernetesVersion {
					t.Errorf("%s image = %s", o.GetName(), img)
				}
			}
			continue
		case "ContainerMachinePool":
			if img, _, _ := unstructured.NestedString(o.Object, "spec", "template", "image"); img != "capct/node:"+kubernetesVersion {
				t.Errorf("%s image = %s", o.GetName(), img)
			}
			continue
		default:
			continue
		}
		if args, ok, _ := unstructured.NestedSlice(spec, "clusterConfiguration", "controllerManager", "extraArgs"); ok {
			if !hasArg(args, "allocate-node-cidrs", "false") {
				t.Errorf("%s %s: kube-controller-manager allocates node CIDRs", o.GetKind(), o.GetName())
			}
			controllerManagers++
		}
		for _, phase := range []string{"initConfiguration", "joinConfiguration"} {
			if checkNodeRegistration(t, o, spec, phase) {
				nodeRegistrations++
			}
		}
		checkKubeletPatch(t, o, spec)
	}
	if controllerManagers == 0 || nodeRegistrations < 3 {
		t.Errorf("flavor %q: %d controller-manager configurations and %d node registrations checked", flavor, controllerManagers, nodeRegistrations)
	}
	if flavor != "topology" && images == 0 {
		t.Errorf("flavor %q sets no node image", flavor)
	}
}

// checkNodeRegistration checks the nodeRegistration of phase (init or
// join) in the kubeadm config spec of o, and reports whether there is one.
func checkNodeRegistration(t *testing.T, o unstructured.Unstructured, spec map[string]any, phase string) bool {
	t.Helper()
	nr, ok, _ := unstructured.NestedMap(spec, phase, "nodeRegistration")
	if !ok {
		return false
	}
	args, _, _ := unstructured.NestedSlice(nr, "kubeletExtraArgs")
	for name, value := range map[string]string{
		"provider-id":  "container:///{{ ds.meta_data.local_hostname }}",
		"cgroup-root":  "/kubelet",
		"fail-swap-on": "false",
	} {
		if !hasArg(args, name, value) {
			t.Errorf("%s %s %s: kubelet arg %s=%s missing", o.GetKind(), o.GetName(), phase, name, value)
		}
	}
	ignored, _, _ := unstructured.NestedStringSlice(nr, "ignorePreflightErrors")
	for _, want := range []string{"SystemVerification", "Swap", "FileContent--proc-sys-net-bridge-bridge-nf-call-iptables"} {
		if !slices.Contains(ignored, want) {
			t.Errorf("%s %s %s: preflight error %s not ignored", o.GetKind(), o.GetName(), phase, want)
		}
	}
	if dir, _, _ := unstructured.NestedString(spec, phase, "patches", "directory"); dir != "/etc/kubeadm/patches" {
		t.Errorf("%s %s %s: kubeadm patches directory = %q", o.GetKind(), o.GetName(), phase, dir)
	}
	return true
}

// checkKubeletPatch checks that the kubeadm config spec of o writes the
// KubeletConfiguration patch with the settings CAPCT's nodes need, which
// internal/kubeversion says for the pinned release (the same for every
// release it knows).
func checkKubeletPatch(t *testing.T, o unstructured.Unstructured, spec map[string]any) {
	t.Helper()
	kubelet, err := kubeversion.Parse(kubernetesVersion)
	if err != nil {
		t.Fatal(err)
	}
	files, _, _ := unstructured.NestedSlice(spec, "files")
	found := false
	for _, f := range files {
		f := f.(map[string]any)
		if f["path"] != "/etc/kubeadm/patches/kubeletconfiguration+merge.yaml" {
			continue
		}
		found = true
		for _, field := range kubelet.KubeletConfiguration() {
			if want := field.Name + ": " + field.Value; !strings.Contains(f["content"].(string), want) {
				t.Errorf("%s %s: kubelet patch lacks %q", o.GetKind(), o.GetName(), want)
			}
		}
	}
	if !found {
		t.Errorf("%s %s: no KubeletConfiguration patch", o.GetKind(), o.GetName())
	}
}

// healthChecked are, per flavor, the label selectors of the
// MachineHealthChecks it must ship: one on the control plane and one on each
// set of workers. The topology flavor's are its ClusterClass' instead.
var healthChecked = map[string][]map[string]string{
	"":            {controlPlaneSelector, mdSelector},
	"dualstack":   {controlPlaneSelector, mdSelector},
	"ipv6":        {controlPlaneSelector, mdSelector},
	"multihost":   {controlPlaneSelector, mdSelector},
	"machinepool": {controlPlaneSelector, mpSelector},
	"quickstart":  {controlPlaneSelector, mdSelector, mpSelector},
}

var (
	controlPlaneSelector = map[string]string{clusterv1.MachineControlPlaneLabel: ""}
	mdSelector           = map[string]string{clusterv1.MachineDeploymentNameLabel: clusterName + "-md-0"}
	mpSelector           = map[string]string{clusterv1.MachinePoolNameLabel: clusterName + "-mp-0"}
)

// wantHealthCheck is what every shipped health check checks and when it
// remediates (templates/parts/mhc-control-plane.yaml says why): Node Ready
// Unknown or False for 5 minutes, no Node 20 minutes after the start, and
// remediation only while at most one machine is unhealthy.
var wantHealthCheck = struct {
	Checks      clusterv1.MachineHealthCheckChecks      `json:"checks"`
	Remediation clusterv1.MachineHealthCheckRemediation `json:"remediation"`
}{
	Checks: clusterv1.MachineHealthCheckChecks{
		NodeStartupTimeoutSeconds: ptr.To[int32](1200),
		UnhealthyNodeConditions: []clusterv1.UnhealthyNodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, TimeoutSeconds: ptr.To[int32](300)},
			{Type: corev1.NodeReady, Status: corev1.ConditionFalse, TimeoutSeconds: ptr.To[int32](300)},
		},
	},
	Remediation: clusterv1.MachineHealthCheckRemediation{TriggerIf: clusterv1.MachineHealthCheckRemediationTriggerIf{
		UnhealthyLessThanOrEqualTo: ptr.To(intstr.FromInt32(1)),
	}},
}

// checkHealthChecks checks that a flavor ships its MachineHealthChecks with
// the conservative settings, and the topology flavor's ClusterClass its
// health checks.
func checkHealthChecks(t *testing.T, flavor string, objs []unstructured.Unstructured) {
	t.Helper()
	if flavor == "topology" {
		checkClassHealthChecks(t)
		return
	}
	var selectors []map[string]string
	for _, o := range objs {
		if o.GetKind() != "MachineHealthCheck" {
			continue
		}
		mhc := &clusterv1.MachineHealthCheck{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, mhc, true); err != nil {
			t.Fatalf("MachineHealthCheck %s: %v", o.GetName(), err)
		}
		selectors = append(selectors, mhc.Spec.Selector.MatchLabels)
		if mhc.Spec.ClusterName != clusterName || len(mhc.Spec.Selector.MatchExpressions) > 0 {
			t.Errorf("MachineHealthCheck %s: cluster %q, selector %v", mhc.Name, mhc.Spec.ClusterName, mhc.Spec.Selector)
		}
		if !reflect.DeepEqual(mhc.Spec.Checks, wantHealthCheck.Checks) || !reflect.DeepEqual(mhc.Spec.Remediation, wantHealthCheck.Remediation) {
			got, _ := json.Marshal(map[string]any{"checks": mhc.Spec.Checks, "remediation": mhc.Spec.Remediation})
			want, _ := json.Marshal(wantHealthCheck)
			t.Errorf("MachineHealthCheck %s: %s, want %s", mhc.Name, got, want)
		}
	}
	if want := healthChecked[flavor]; !reflect.DeepEqual(selectors, want) {
		t.Errorf("flavor %q: MachineHealthChecks select %v, want %v", flavor, selectors, want)
	}
}

// checkClassHealthChecks checks the health checks of the release's
// ClusterClass: its control plane's and each MachineDeployment class'.
func checkClassHealthChecks(t *testing.T) {
	t.Helper()
	raw, err := os.ReadFile(releaseFile("clusterclass-quick-start.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	class := &clusterv1.ClusterClass{}
	if err := yaml.UnmarshalStrict(raw, class); err != nil {
		t.Fatalf("clusterclass-quick-start.yaml: %v", err)
	}
	// The class' types are the same fields under other names.
	same := func(what string, v any) {
		t.Helper()
		got, _ := json.Marshal(v)
		want, _ := json.Marshal(wantHealthCheck)
		if string(got) != string(want) {
			t.Errorf("ClusterClass %s health check %s, want %s", what, got, want)
		}
	}
	same("controlPlane", class.Spec.ControlPlane.HealthCheck)
	if len(class.Spec.Workers.MachineDeployments) == 0 {
		t.Fatal("ClusterClass has no MachineDeployment class")
	}
	for _, md := range class.Spec.Workers.MachineDeployments {
		same("machineDeployment "+md.Class, md.HealthCheck)
	}
}

// checkMultihost checks what the multihost flavor adds to the default one
// (docs/multihost.md, section 4 "Node addresses"): the engines as the user
// listed them, workers free to spread over them, and every node's kubelet
// and control plane on its cluster-network address, in a variable CAPCT's
// bootstrap replaces.
func checkMultihost(t *testing.T, objs []unstructured.Unstructured) {
	t.Helper()
	var nodeIPs, endpoints int
	// address checks that value becomes the machine's address.
	address := func(what, value string) {
		t.Helper()
		if got := bootstrapped(t, value); got != "172.18.0.5" {
			t.Errorf("%s = %q, which CAPCT's bootstrap makes %q, not the machine's address", what, value, got)
		}
	}
	nodeIP := func(what string, nr map[string]any) {
		t.Helper()
		args, _, _ := unstructured.NestedSlice(nr, "kubeletExtraArgs")
		for _, a := range args {
			if m, ok := a.(map[string]any); ok && m["name"] == "node-ip" {
				nodeIPs++
				address(what+" node-ip", fmt.Sprint(m["value"]))
			}
		}
	}
	for _, o := range objs {
		what := o.GetKind() + " " + o.GetName()
		switch o.GetKind() {
		case "ContainerCluster":
			engines, _, _ := unstructured.NestedSlice(o.Object, "spec", "engines")
			want := []any{map[string]any{"name": "engine-a"}, map[string]any{"name": "engine-b", "controlPlane": false}}
			if !reflect.DeepEqual(engines, want) {
				t.Errorf("%s: engines = %v, want %v", what, engines, want)
			}
		case "MachineDeployment":
			if fd, ok, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "failureDomain"); ok {
				t.Errorf("%s: failureDomain %q keeps the workers on one engine", what, fd)
			}
		case "KubeadmControlPlane":
			spec, _, _ := unstructured.NestedMap(o.Object, "spec", "kubeadmConfigSpec")
			for _, path := range [][]string{
				{"initConfiguration", "localAPIEndpoint", "advertiseAddress"},
				{"joinConfiguration", "controlPlane", "localAPIEndpoint", "advertiseAddress"},
			} {
				v, _, _ := unstructured.NestedString(spec, path...)
				endpoints++
				address(what+" "+strings.Join(path, "."), v)
			}
			for _, phase := range []string{"initConfiguration", "joinConfiguration"} {
				nr, _, _ := unstructured.NestedMap(spec, phase, "nodeRegistration")
				nodeIP(what+" "+phase, nr)
			}
		case "KubeadmConfigTemplate":
			join, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec", "joinConfiguration")
			if _, ok := join["controlPlane"]; ok {
				t.Errorf("%s: a worker with joinConfiguration.controlPlane would join as a control plane", what)
			}
			nr, _, _ := unstructured.NestedMap(join, "nodeRegistration")
			nodeIP(what+" joinConfiguration", nr)
		}
	}
	if nodeIPs != 3 || endpoints != 2 {
		t.Errorf("%d node-ip kubelet args and %d advertise addresses, want 3 (init, join, workers) and 2 (init, join)", nodeIPs, endpoints)
	}
}

// bootstrapped is value as CAPCT's bootstrap writes it into a node whose
// container is at 172.18.0.5 on the cluster network.
func bootstrapped(t *testing.T, value string) string {
	t.Helper()
	quoted, err := json.Marshal(value)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := provisioning.Plan(provisioning.FormatCloudConfig, []byte("write_files:\n- {path: /v, content: "+string(quoted)+"}\n"),
		provisioning.Vars{Hostname: "node-0", LocalIPv4: "172.18.0.5"})
	if err != nil {
		t.Fatalf("%q: %v", value, err)
	}
	return string(steps[0].File.Content)
}

func hasArg(args []any, name, value string) bool {
	for _, a := range args {
		if m, ok := a.(map[string]any); ok && m["name"] == name && m["value"] == value {
			return true
		}
	}
	return false
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
