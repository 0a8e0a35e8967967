//go:build realcluster

package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/labels/format"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/test/realcluster"
)

// poolFailureDomains: a MachinePool of 2 over failureDomains [engine-2,
// engine-1] (the ContainerMachinePool's template and the KubeadmConfig
// are the MachineDeployment's) gets one member on each engine: each
// records the engine its pool asked for, and its container runs there.
// The pool is deleted after, and its machines go, so that the later steps
// see the MachineDeployment's workers only.
func (m *mh) poolFailureDomains(ctx context.Context, t *testing.T) {
	const name = "mh-pool"
	ns := m.Env.Namespace
	version := m.workerVersion(ctx, t)
	kubeadm := &unstructured.Unstructured{}
	kubeadm.SetAPIVersion("bootstrap.cluster.x-k8s.io/v1beta2")
	kubeadm.SetKind("KubeadmConfigTemplate")
	if err := m.Mgmt.Get(ctx, client.ObjectKey{Namespace: ns, Name: m.Env.Cluster + "-md-0"}, kubeadm); err != nil {
		t.Fatalf("failed to read the MachineDeployment's KubeadmConfigTemplate: %v", err)
	}
	spec, _, _ := unstructured.NestedMap(kubeadm.Object, "spec", "template", "spec")
	config := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	config.SetAPIVersion("bootstrap.cluster.x-k8s.io/v1beta2")
	config.SetKind("KubeadmConfig")
	config.SetNamespace(ns)
	config.SetName(name)
	template := &infrav1.ContainerMachineTemplate{}
	if err := m.Mgmt.Get(ctx, client.ObjectKey{Namespace: ns, Name: m.Env.Cluster + "-md-0"}, template); err != nil {
		t.Fatalf("failed to read the MachineDeployment's ContainerMachineTemplate: %v", err)
	}
	pool := &expinfrav1.ContainerMachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: expinfrav1.ContainerMachinePoolSpec{Template: template.Spec.Template.Spec}}
	mp := &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: m.Env.Cluster}},
		Spec: clusterv1.MachinePoolSpec{
			ClusterName: m.Env.Cluster, Replicas: ptr.To[int32](2), FailureDomains: []string{"engine-2", "engine-1"},
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: m.Env.Cluster, Version: version,
				Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfig", Name: name}},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: expinfrav1.GroupVersion.Group, Kind: "ContainerMachinePool", Name: name},
			}},
		},
	}
	for _, obj := range []client.Object{config, pool, mp} {
		if err := realcluster.Retry(ctx, func(ctx context.Context) error { return m.Mgmt.Create(ctx, obj.DeepCopyObject().(client.Object)) }); err != nil {
			t.Fatalf("failed to create %T %s: %v", obj, name, err)
		}
	}
	members := client.MatchingLabels{clusterv1.ClusterNameLabel: m.Env.Cluster, clusterv1.MachinePoolNameLabel: format.MustFormatValue(name)}
	var last string
	for deadline := time.Now().Add(300 * time.Second); ; {
		var list infrav1.ContainerMachineList
		err := m.Mgmt.List(ctx, &list, client.InNamespace(ns), members)
		var engines []string
		last = fmt.Sprint(err)
		for _, cm := range list.Items {
			engine, asked := cm.Annotations[infrav1.EngineAnnotation], cm.Annotations[infrav1.FailureDomainAnnotation]
			if engine != "" && engine != asked {
				t.Fatalf("pool member %s is on %s, but its pool asked for %s", cm.Name, engine, asked)
			}
			if n, _ := m.engineOf(ctx, naming.ContainerName(ns, m.Env.Cluster, cm.Name)); engine != "" && fmt.Sprintf("engine-%d", n) == engine {
				engines = append(engines, engine)
			}
			last += fmt.Sprintf("; %s asked %q placed %q", cm.Name, asked, engine)
		}
		slices.Sort(engines)
		if len(list.Items) == 2 && slices.Equal(engines, []string{"engine-1", "engine-2"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool's 2 members are not one on each engine after 300s: %s", last)
		}
		realcluster.Pause(ctx, 2*time.Second)
	}
	t.Logf("MachinePool %s: one member on each engine (%s)", name, last)
	// Scaled to 0 before it is deleted: the scale-in deletes each member's
	// Machine and so its Node, where deleting the whole MachinePool at once
	// was seen to leave a member's Node behind (NotReady), which the later
	// steps would count.
	if err := realcluster.Retry(ctx, func(ctx context.Context) error {
		return m.Mgmt.Patch(ctx, mp.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`)))
	}); err != nil {
		t.Fatalf("failed to scale MachinePool %s to 0: %v", name, err)
	}
	for deadline := time.Now().Add(300 * time.Second); ; {
		var list infrav1.ContainerMachineList
		err := m.Mgmt.List(ctx, &list, client.InNamespace(ns), members)
		nodes, nodesErr := m.Nodes(ctx)
		poolNodes := 0
		for _, n := range nodes {
			if strings.Contains(n.Name, "-"+name+"-") {
				poolNodes++
			}
		}
		if err == nil && nodesErr == nil && len(list.Items) == 0 && poolNodes == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("300s after MachinePool %s was scaled to 0: %d members, %d Nodes left (%v, %v)", name, len(list.Items), poolNodes, err, nodesErr)
		}
		realcluster.Pause(ctx, 2*time.Second)
	}
	if err := realcluster.Retry(ctx, func(ctx context.Context) error { return client.IgnoreNotFound(m.Mgmt.Delete(ctx, mp)) }); err != nil {
		t.Fatalf("failed to delete MachinePool %s: %v", name, err)
	}
}

// workerVersion is the Kubernetes version of the cluster's workers.
func (m *mh) workerVersion(ctx context.Context, t *testing.T) string {
	t.Helper()
	md := &clusterv1.MachineDeployment{}
	if err := m.Mgmt.Get(ctx, client.ObjectKey{Namespace: m.Env.Namespace, Name: m.Env.Cluster + "-md-0"}, md); err != nil {
		t.Fatalf("failed to read the MachineDeployment: %v", err)
	}
	return md.Spec.Template.Spec.Version
}
