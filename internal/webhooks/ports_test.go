package webhooks_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// portsNamespace holds the machines of another tenant: host ports are the
// host's, whatever the namespace.
const portsNamespace = "ports-other-tenant"

// portMachine is a machine of cluster (none when empty) that publishes
// 127.0.0.1:hostPort/TCP, placed on engine when it is not nil.
func portMachine(name, namespace, cluster string, hostPort int32, engine *string) *infrav1.ContainerMachine {
	m := validMachine(name)
	m.Namespace = namespace
	if cluster != "" {
		m.Labels = map[string]string{clusterv1.ClusterNameLabel: cluster}
	}
	if engine != nil {
		m.Annotations = map[string]string{infrav1.EngineAnnotation: *engine}
	}
	publish("", hostPort, "")(&m.Spec)
	return m
}

// TestHostPortsAreRefusedOnlyWhereMachinesMeet creates ContainerMachines
// that publish host ports beside others, on the manager's engine and on
// ContainerEngines, against the API server: a port is refused where the
// two machines run, or may be placed, on one engine (by endpoint), and in
// any namespace; it is free on other engines, and where the machine that
// held it is being deleted.
func TestHostPortsAreRefusedOnlyWhereMachinesMeet(t *testing.T) {
	ctx := context.Background()
	create := func(obj client.Object) {
		t.Helper()
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("failed to create %T %s: %v", obj, obj.GetName(), err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, obj) })
	}
	// Labelled so that its cluster on the manager's engine (local-c) is
	// let in by testPolicy's --local-engine-namespace-selector.
	create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: portsNamespace, Labels: localEngineAllowed}})
	// ports-own reaches the manager's own engine under another name.
	create(engine("ports-own", "", func(s *infrav1.ContainerEngineSpec) { s.AllowedNamespaces = &infrav1.AllowedNamespaces{} }))
	for _, c := range []struct {
		name, namespace string
		engines         []string
	}{
		{name: "local-a", namespace: metav1.NamespaceDefault},
		{name: "local-b", namespace: metav1.NamespaceDefault},
		{name: "local-c", namespace: portsNamespace},
		{name: "on-ab", namespace: metav1.NamespaceDefault, engines: []string{"ports-a", "ports-b"}},
		{name: "on-c", namespace: metav1.NamespaceDefault, engines: []string{"ports-c"}},
		{name: "on-own", namespace: metav1.NamespaceDefault, engines: []string{"ports-own"}},
	} {
		cc := clusterOnEngines(c.name, c.engines...)
		cc.Namespace = c.namespace
		create(cc)
		create(&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: c.name}, Spec: clusterv1.ClusterSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerCluster", Name: c.name},
		}})
	}
	engineA, engineB := "ports-a", "ports-b"

	testCases := []struct {
		name     string
		existing *infrav1.ContainerMachine
		// deleted holds existing with a finalizer and deletes it.
		deleted bool
		obj     *infrav1.ContainerMachine
		// want must appear in the refusal; empty when obj is accepted.
		want []string
	}{
		{name: "two clusters on the manager's engine",
			existing: portMachine("holder", metav1.NamespaceDefault, "local-a", 31001, nil),
			obj:      portMachine("taker", metav1.NamespaceDefault, "local-b", 31001, nil),
			want: []string{"spec.extraPortMappings[0].hostPort", "host port 127.0.0.1:31001/TCP is published by ContainerMachine holder",
				"(the manager's engine)", "one machine per engine"}},
		{name: "another namespace's machine, not named",
			existing: portMachine("secret-holder", portsNamespace, "local-c", 31002, nil),
			obj:      portMachine("taker", metav1.NamespaceDefault, "local-a", 31002, nil),
			want:     []string{"published by a ContainerMachine of another namespace"}},
		{name: "a machine whose cluster is not known yet",
			existing: portMachine("holder", metav1.NamespaceDefault, "", 31003, nil),
			obj:      portMachine("taker", metav1.NamespaceDefault, "on-c", 31003, nil),
			want:     []string{"that machine's cluster and engine are not known yet"}},
		{name: "another port on the same engine",
			existing: portMachine("holder", metav1.NamespaceDefault, "local-a", 31004, nil),
			obj:      portMachine("taker", metav1.NamespaceDefault, "local-b", 31005, nil)},
		{name: "clusters on other engines",
			existing: portMachine("holder", metav1.NamespaceDefault, "on-ab", 31006, nil),
			obj:      portMachine("taker", metav1.NamespaceDefault, "on-c", 31006, nil)},
		{name: "a cluster on engines and one on the manager's",
			existing: portMachine("holder", metav1.NamespaceDefault, "on-ab", 31007, nil),
			obj:      portMachine("taker", metav1.NamespaceDefault, "local-a", 31007, nil)},
		{name: "a machine placed on an engine the new one may be placed on",
			existing: portMachine("holder", metav1.NamespaceDefault, "on-ab", 31008, &engineB),
			obj:      portMachine("taker", metav1.NamespaceDefault, "on-ab", 31008, nil),
			want:     []string{"(engine ports-b)"}},
		{name: "a ContainerEngine that is the manager's own engine",
			existing: portMachine("holder", metav1.NamespaceDefault, "on-own", 31009, nil),
			obj:      portMachine("taker", metav1.NamespaceDefault, "local-a", 31009, nil),
			want:     []string{"(the manager's engine)"}},
		{name: "a machine placed on an engine of its cluster the new one's does not list",
			existing: portMachine("holder", metav1.NamespaceDefault, "on-ab", 31010, &engineA),
			obj:      portMachine("taker", metav1.NamespaceDefault, "on-c", 31010, nil)},
		{name: "a machine being deleted",
			existing: portMachine("holder", metav1.NamespaceDefault, "local-a", 31011, nil), deleted: true,
			obj: portMachine("taker", metav1.NamespaceDefault, "local-b", 31011, nil)},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			existing := tc.existing
			engineName, placed := existing.Annotations[infrav1.EngineAnnotation]
			existing.Annotations = nil
			if tc.deleted {
				existing.Finalizers = []string{userFinalizer}
			}
			if err := env.Client.Create(ctx, existing); err != nil {
				t.Fatalf("failed to create the machine that holds the port: %v", err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(ctx, existing) })
			if placed {
				// As CAPCT places it: after its admission.
				existing.Annotations = map[string]string{infrav1.EngineAnnotation: engineName}
				if err := env.Client.Update(ctx, existing); err != nil {
					t.Fatalf("failed to place the machine that holds the port: %v", err)
				}
			}
			if tc.deleted {
				deleteHeld(ctx, t, existing)
			}
			err := env.Client.Create(ctx, tc.obj)
			if err == nil {
				t.Cleanup(func() { _ = env.Client.Delete(ctx, tc.obj) })
			}
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("want accepted, got %v", err)
				}
				return
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want a refusal, got %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal does not say %q: %v", w, err)
				}
			}
			if strings.Contains(err.Error(), "secret-holder") || strings.Contains(err.Error(), portsNamespace) {
				t.Errorf("the refusal names another namespace's machine: %v", err)
			}
		})
	}
}
