package clusterctl

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

const infraGroup = "infrastructure.cluster.x-k8s.io"

// prepareManagementCluster makes an envtest API server look like a
// management cluster after `clusterctl init`: CAPCT's CRDs applied from the
// components as clusterctl processed them (which adds clusterctl's labels),
// and Cluster API's CRDs labelled as clusterctl labels its own providers'.
func prepareManagementCluster(ctx context.Context, t *testing.T, env *envtest.Environment, components client.Components) {
	t.Helper()
	for _, o := range components.Objs() {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		if _, ok := o.GetLabels()[clusterctlv1.ClusterctlLabel]; !ok {
			t.Fatalf("clusterctl did not label CRD %s", o.GetName())
		}
		if err := apply(ctx, env.Client, &o); err != nil {
			t.Fatalf("CRD %s: %v", o.GetName(), err)
		}
	}
	labelCRDsAsClusterctlWould(ctx, t, env.Client)
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
}

// TestMove creates a cluster of the default and machinepool flavors the way
// Cluster API would have left it (owner references included), then runs
// clusterctl move: first a dry run, whose log must name every CAPCT object,
// then a real move to a second API server.
func TestMove(t *testing.T) {
	requireRelease(t)
	unsetClusterctlEnv(t)
	ctx := context.Background()
	source, target := startEnv(t), startEnv(t)
	cc := newClusterctl(t, nil, envtestClusterClients(t))
	components, err := cc.GenerateProvider(ctx, "container", clusterctlv1.InfrastructureProviderType, client.ComponentsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prepareManagementCluster(ctx, t, source, components)
	prepareManagementCluster(ctx, t, target, components)
	fromKC, toKC := kubeconfig(t, source.Config), kubeconfig(t, target.Config)

	// The rendered objects, created for real.
	objs := map[string]*unstructured.Unstructured{}
	for _, flavor := range []string{"", "machinepool"} {
		tmpl, err := generate(ctx, newClusterctl(t, nil), flavor, client.Kubeconfig{})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range tmpl.Objs() {
			key := o.GetKind() + "/" + o.GetName()
			if _, ok := objs[key]; ok {
				continue
			}
			if err := apply(ctx, source.Client, &o); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			objs[key] = get(ctx, t, source.Client, o.GroupVersionKind().GroupVersion().String(), o.GetKind(), o.GetName())
		}
	}
	c := source.Client
	cluster := objs["Cluster/"+clusterName]
	// What Cluster API's controllers would have done.
	own(ctx, t, c, objs["ContainerCluster/"+clusterName], cluster, true)
	own(ctx, t, c, objs["KubeadmControlPlane/"+clusterName+"-control-plane"], cluster, true)
	own(ctx, t, c, objs["ContainerMachineTemplate/"+clusterName+"-control-plane"], cluster, false)
	own(ctx, t, c, objs["MachineDeployment/"+clusterName+"-md-0"], cluster, false)
	own(ctx, t, c, objs["ContainerMachineTemplate/"+clusterName+"-md-0"], cluster, false)
	own(ctx, t, c, objs["KubeadmConfigTemplate/"+clusterName+"-md-0"], cluster, false)
	own(ctx, t, c, objs["MachinePool/"+clusterName+"-mp-0"], cluster, false)
	own(ctx, t, c, objs["ContainerMachinePool/"+clusterName+"-mp-0"], objs["MachinePool/"+clusterName+"-mp-0"], true)
	own(ctx, t, c, objs["KubeadmConfig/"+clusterName+"-mp-0"], objs["MachinePool/"+clusterName+"-mp-0"], true)
	kcp := objs["KubeadmControlPlane/"+clusterName+"-control-plane"]
	cpMachine := machine(ctx, t, c, clusterName+"-control-plane-a", kcp)
	mp := objs["MachinePool/"+clusterName+"-mp-0"]
	mpMachine := machine(ctx, t, c, clusterName+"-mp-0-b", mp)
	cmp := objs["ContainerMachinePool/"+clusterName+"-mp-0"]
	// MachinePool Machines' ContainerMachines are owned by the Machine and
	// the ContainerMachinePool.
	own(ctx, t, c, get(ctx, t, c, infraGroup+"/v1alpha1", "ContainerMachine", mpMachine.GetName()), cmp, false)
	_ = cpMachine

	wantCAPCT := []string{}
	for _, kind := range []string{"ContainerCluster", "ContainerMachineTemplate", "ContainerMachine", "ContainerMachinePool"} {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(infraGroup + "/v1alpha1")
		list.SetKind(kind + "List")
		if err := c.List(ctx, list, crclient.InNamespace(namespace)); err != nil {
			t.Fatal(err)
		}
		for _, o := range list.Items {
			wantCAPCT = append(wantCAPCT, kind+"/"+o.GetName())
		}
	}
	if len(wantCAPCT) != 6 {
		t.Fatalf("expected 6 CAPCT objects, have %v", wantCAPCT)
	}

	// Dry run: clusterctl's object graph, as logged.
	logs := &logCapture{}
	logs.install()
	if err := cc.Move(ctx, client.MoveOptions{FromKubeconfig: fromKC, Namespace: namespace, DryRun: true}); err != nil {
		t.Fatalf("clusterctl move --dry-run: %v\n%s", err, logs)
	}
	for _, key := range wantCAPCT {
		kind, name, _ := strings.Cut(key, "/")
		if !strings.Contains(logs.String(), fmt.Sprintf(`"%s"="%s"`, kind, name)) {
			t.Errorf("clusterctl move --dry-run does not move %s", key)
		}
	}
	if t.Failed() {
		t.Logf("clusterctl log:\n%s", logs)
	}

	// A real move needs what Cluster API reports once a cluster runs.
	setStatus(ctx, t, c, cluster, map[string]any{
		"initialization": map[string]any{"infrastructureProvisioned": true, "controlPlaneInitialized": true},
		"conditions": []any{map[string]any{"type": "ControlPlaneInitialized", "status": "True", "reason": "Initialized", "message": "",
			"lastTransitionTime": metav1.Now().UTC().Format("2006-01-02T15:04:05Z")}},
	})
	for _, m := range []*unstructured.Unstructured{cpMachine, mpMachine} {
		setStatus(ctx, t, c, m, map[string]any{"nodeRef": map[string]any{"name": m.GetName()}})
	}
	if err := cc.Move(ctx, client.MoveOptions{FromKubeconfig: fromKC, ToKubeconfig: toKC, Namespace: namespace}); err != nil {
		t.Fatalf("clusterctl move: %v\n%s", err, logs)
	}
	for _, key := range wantCAPCT {
		kind, name, _ := strings.Cut(key, "/")
		moved := get(ctx, t, target.Client, infraGroup+"/v1alpha1", kind, name)
		if len(moved.GetOwnerReferences()) == 0 {
			t.Errorf("%s lost its owner references in the move", key)
		}
		if kind == "ContainerMachine" && moved.GetAnnotations()["container.infrastructure.cluster.x-k8s.io/pod-cidrs"] != "10.244.7.0/24" {
			t.Errorf("%s lost its pod CIDR annotation in the move", key)
		}
		o := &unstructured.Unstructured{}
		o.SetAPIVersion(infraGroup + "/v1alpha1")
		o.SetKind(kind)
		if err := c.Get(ctx, crclient.ObjectKey{Namespace: namespace, Name: name}, o); err == nil {
			t.Errorf("%s is still in the source cluster after the move", key)
		}
	}
}

func get(ctx context.Context, t *testing.T, c crclient.Client, apiVersion, kind, name string) *unstructured.Unstructured {
	t.Helper()
	o := &unstructured.Unstructured{}
	o.SetAPIVersion(apiVersion)
	o.SetKind(kind)
	if err := c.Get(ctx, crclient.ObjectKey{Namespace: namespace, Name: name}, o); err != nil {
		t.Fatalf("%s %s: %v", kind, name, err)
	}
	return o
}

// own adds an owner reference to obj, as Cluster API's controllers do.
func own(ctx context.Context, t *testing.T, c crclient.Client, obj, owner *unstructured.Unstructured, controller bool) {
	t.Helper()
	if obj == nil || owner == nil {
		t.Fatal("own: missing object")
	}
	fresh := get(ctx, t, c, obj.GetAPIVersion(), obj.GetKind(), obj.GetName())
	patch := crclient.MergeFrom(fresh.DeepCopy())
	refs := append(fresh.GetOwnerReferences(), metav1.OwnerReference{
		APIVersion: owner.GetAPIVersion(), Kind: owner.GetKind(), Name: owner.GetName(), UID: owner.GetUID(),
		Controller: &controller, BlockOwnerDeletion: &controller,
	})
	fresh.SetOwnerReferences(refs)
	if err := c.Patch(ctx, fresh, patch); err != nil {
		t.Fatalf("owning %s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
}

// machine creates a Machine owned by owner, with its ContainerMachine and
// KubeadmConfig owned by it, as Cluster API would.
func machine(ctx context.Context, t *testing.T, c crclient.Client, name string, owner *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	m := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]any{"name": name, "namespace": namespace,
			"labels": map[string]any{"cluster.x-k8s.io/cluster-name": clusterName}},
		"spec": map[string]any{
			"clusterName": clusterName, "version": kubernetesVersion,
			"bootstrap":         map[string]any{"configRef": map[string]any{"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}},
			"infrastructureRef": map[string]any{"apiGroup": infraGroup, "kind": "ContainerMachine", "name": name},
		},
	}}
	if err := apply(ctx, c, m); err != nil {
		t.Fatal(err)
	}
	m = get(ctx, t, c, "cluster.x-k8s.io/v1beta2", "Machine", name)
	own(ctx, t, c, m, owner, true)
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": infraGroup + "/v1alpha1", "kind": "ContainerMachine",
		"metadata": map[string]any{"name": name, "namespace": namespace,
			"labels":      map[string]any{"cluster.x-k8s.io/cluster-name": clusterName},
			"annotations": map[string]any{"container.infrastructure.cluster.x-k8s.io/pod-cidrs": "10.244.7.0/24"}},
		"spec": map[string]any{"image": "capct/node:" + kubernetesVersion},
	}}
	kc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
		"metadata": map[string]any{"name": name, "namespace": namespace},
	}}
	for _, o := range []*unstructured.Unstructured{cm, kc} {
		if err := apply(ctx, c, o); err != nil {
			t.Fatal(err)
		}
		own(ctx, t, c, get(ctx, t, c, o.GetAPIVersion(), o.GetKind(), name), m, true)
	}
	// CAPCT sets the providerID once the container runs; the webhook
	// refuses one on create unless the Cluster is paused for a move.
	if err := unstructured.SetNestedField(cm.Object, "container:///"+clusterName+"-"+name, "spec", "providerID"); err != nil {
		t.Fatal(err)
	}
	if err := apply(ctx, c, cm); err != nil {
		t.Fatal(err)
	}
	return m
}

func setStatus(ctx context.Context, t *testing.T, c crclient.Client, obj *unstructured.Unstructured, status map[string]any) {
	t.Helper()
	fresh := get(ctx, t, c, obj.GetAPIVersion(), obj.GetKind(), obj.GetName())
	patch := crclient.MergeFrom(fresh.DeepCopy())
	fresh.Object["status"] = status
	if err := c.Status().Patch(ctx, fresh, patch); err != nil {
		t.Fatalf("status of %s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
}
