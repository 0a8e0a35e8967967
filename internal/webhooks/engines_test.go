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

func engine(name, endpoint string, mutate ...func(*infrav1.ContainerEngineSpec)) *infrav1.ContainerEngine {
	e := &infrav1.ContainerEngine{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: infrav1.ContainerEngineSpec{Endpoint: endpoint}}
	for _, m := range mutate {
		m(&e.Spec)
	}
	return e
}

func withTLS(s *infrav1.ContainerEngineSpec) {
	s.TLS = &infrav1.EngineTLS{SecretRef: infrav1.LocalObjectReference{Name: "engine-tls"}}
}

func withSSH(s *infrav1.ContainerEngineSpec) {
	s.SSH = &infrav1.EngineSSH{SecretRef: infrav1.LocalObjectReference{Name: "engine-ssh"}}
}

func podman(s *infrav1.ContainerEngineSpec) { s.Type = infrav1.PodmanEngine }

func clusterOnEngines(name string, engines ...string) *infrav1.ContainerCluster {
	c := validCluster(name)
	c.Spec.FailureDomains = nil
	for _, e := range engines {
		c.Spec.Engines = append(c.Spec.Engines, infrav1.ClusterEngine{Name: e})
	}
	return c
}

// TestEnginesAreValidated creates ContainerEngines, and clusters that name
// engines, against the API server: the ways to reach an engine that are
// safe are accepted, the others refused with a message naming the field,
// and a cluster's engines keep the rules that let its load balancer and
// failure domains stay where they are.
func TestEnginesAreValidated(t *testing.T) {
	ctx := context.Background()
	valid := []client.Object{
		engine("own", ""),
		engine("socket", "unix:///run/docker.sock"),
		engine("tls", "tcp://host-b.example:2376", withTLS),
		engine("ssh", "ssh://capct@host-b.example", withSSH),
		engine("ssh-port-socket", "ssh://capct@host-b.example:2222/run/user/1000/docker.sock", withSSH),
		engine("podman-socket", "unix:///run/podman/podman.sock", podman),
		engine("podman-ssh", "ssh://capct@host-b.example", podman, withSSH),
		engine("for-all", "", func(s *infrav1.ContainerEngineSpec) { s.AllowedNamespaces = &infrav1.AllowedNamespaces{} }),
		clusterOnEngines("on-engines", "engine-a", "engine-b"),
	}
	for _, obj := range valid {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Errorf("valid %T %s was refused: %v", obj, obj.GetName(), err)
			continue
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, obj) })
	}
	own := &infrav1.ContainerEngine{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "own"}, own); err != nil {
		t.Errorf("failed to get ContainerEngine own: %v", err)
	} else if own.Spec.Type != infrav1.DockerEngine {
		t.Errorf("an engine's type defaults to Docker, got %q", own.Spec.Type)
	}

	testCases := []struct {
		name   string
		before client.Object // created first; obj is then an update of it
		obj    client.Object
		// want must appear in the error message.
		want string
	}{
		{name: "tcp without TLS", obj: engine("e1", "tcp://host-b.example:2376"), want: "spec.tls"},
		{name: "TLS on a socket", obj: engine("e2", "unix:///run/docker.sock", withTLS), want: "tls applies only to a tcp:// endpoint"},
		{name: "ssh without its keys", obj: engine("e3", "ssh://capct@host-b.example"), want: "spec.ssh"},
		{name: "ssh keys on tcp", obj: engine("e4", "tcp://host-b.example:2376", withTLS, withSSH), want: "ssh applies only to an ssh:// endpoint"},
		{name: "ssh without a user", obj: engine("e5", "ssh://host-b.example", withSSH), want: "spec.endpoint"},
		{name: "an http endpoint", obj: engine("e6", "http://host-b.example:2375"), want: "spec.endpoint"},
		{name: "a relative socket", obj: engine("e7", "unix://docker.sock"), want: "spec.endpoint"},
		{name: "a tcp endpoint with a path", obj: engine("e8", "tcp://host-b.example:2376/x", withTLS), want: "spec.endpoint"},
		{name: "an endpoint with a space", obj: engine("e9", "unix:///run/docker .sock"), want: "spec.endpoint"},
		{name: "Podman over tcp", obj: engine("e10", "tcp://host-b.example:2376", podman, withTLS), want: "Podman's service offers no TLS"},
		{name: "an unknown type", obj: engine("e11", "", func(s *infrav1.ContainerEngineSpec) { s.Type = "containerd" }), want: "spec.type"},
		{name: "TLS without a Secret", obj: engine("e12", "tcp://host-b.example:2376", func(s *infrav1.ContainerEngineSpec) {
			s.TLS = &infrav1.EngineTLS{}
		}), want: "spec.tls.secretRef.name"},
		{name: "cluster with engines and failure domains", obj: func() client.Object {
			c := clusterOnEngines("c1", "engine-a")
			c.Spec.FailureDomains = []clusterv1.FailureDomain{{Name: "fd1"}}
			return c
		}(), want: "engines and failureDomains exclude each other"},
		{name: "cluster with the same engine twice", obj: clusterOnEngines("c2", "engine-a", "engine-a"), want: "spec.engines[1]"},
		{name: "cluster with an engine name that is not a name", obj: clusterOnEngines("c3", "Engine A"), want: "spec.engines[0].name"},
		{name: "engines added to a cluster", before: clusterOnEngines("c5"), obj: clusterOnEngines("c5", "engine-a"),
			want: "engines cannot be added to a cluster or removed from it"},
		{name: "engines removed from a cluster", before: clusterOnEngines("c6", "engine-a"), obj: clusterOnEngines("c6"),
			want: "engines cannot be added to a cluster or removed from it"},
		{name: "a cluster's first engine changed", before: clusterOnEngines("c7", "engine-a", "engine-b"), obj: clusterOnEngines("c7", "engine-b", "engine-a"),
			want: "its first engine, which holds the load balancer, never changes"},
		// One engine's network is its own bridge, several engines' an
		// overlay: the network cannot follow such a change.
		{name: "a second engine added", before: clusterOnEngines("c8", "engine-a"), obj: clusterOnEngines("c8", "engine-a", "engine-b"),
			want: "a cluster on one engine stays on one"},
		{name: "a cluster on two engines cut to one", before: clusterOnEngines("c9", "engine-a", "engine-b"), obj: clusterOnEngines("c9", "engine-a"),
			want: "a cluster on several keeps several"},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.before != nil {
				if err := env.Client.Create(ctx, tc.before); err != nil {
					t.Fatalf("failed to create the valid object before the update: %v", err)
				}
				t.Cleanup(func() { _ = env.Client.Delete(ctx, tc.before) })
				tc.obj.SetResourceVersion(tc.before.GetResourceVersion())
				err = env.Client.Update(ctx, tc.obj)
			} else if err = env.Client.Create(ctx, tc.obj); err == nil {
				t.Cleanup(func() { _ = env.Client.Delete(ctx, tc.obj) })
			}
			if err == nil {
				t.Fatalf("the API server accepted an invalid %T", tc.obj)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("the error does not say %q: %v", tc.want, err)
			}
		})
	}

	// Adding a third engine to an overlay cluster keeps the first where it
	// is: allowed.
	before := clusterOnEngines("grows", "engine-a", "engine-b")
	if err := env.Client.Create(ctx, before); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, before) })
	after := clusterOnEngines("grows", "engine-a", "engine-b", "engine-c")
	after.SetResourceVersion(before.GetResourceVersion())
	if err := env.Client.Update(ctx, after); err != nil {
		t.Errorf("adding a third engine was refused: %v", err)
	}
}

// TestEnginesAllowNamespaces creates clusters that name engines from two
// teams' namespaces: an engine lets in only the namespaces its
// allowedNamespaces lists or selects, an update is checked only for the
// engines it adds, and an engine that does not exist yet is left to the
// controller.
func TestEnginesAllowNamespaces(t *testing.T) {
	ctx := context.Background()
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"engines.example/shared": "true"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}},
	} {
		if err := env.Client.Create(ctx, ns); err != nil {
			t.Fatalf("failed to create Namespace %s: %v", ns.Name, err)
		}
	}
	listsTeamA := engine("lists-team-a", "", func(s *infrav1.ContainerEngineSpec) {
		s.AllowedNamespaces = &infrav1.AllowedNamespaces{List: []string{"team-a"}}
	})
	for _, e := range []*infrav1.ContainerEngine{
		listsTeamA,
		engine("selects-shared", "", func(s *infrav1.ContainerEngineSpec) {
			s.AllowedNamespaces = &infrav1.AllowedNamespaces{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"engines.example/shared": "true"}}}
		}),
		engine("allows-none", ""),
	} {
		if err := env.Client.Create(ctx, e); err != nil {
			t.Fatalf("failed to create ContainerEngine %s: %v", e.Name, err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, e) })
	}
	in := func(ns string, c *infrav1.ContainerCluster) *infrav1.ContainerCluster {
		c.Namespace = ns
		return c
	}
	create := func(t *testing.T, c *infrav1.ContainerCluster) error {
		t.Helper()
		err := env.Client.Create(ctx, c)
		if err == nil {
			t.Cleanup(func() { _ = env.Client.Delete(ctx, c) })
		}
		return err
	}
	refusedAt := func(t *testing.T, err error, path, ns string) {
		t.Helper()
		if !apierrors.IsInvalid(err) {
			t.Fatalf("want an Invalid error, got %v", err)
		}
		want := path + ": Forbidden: ContainerEngine"
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "does not allow namespace "+ns) {
			t.Fatalf("the error does not name %s and namespace %s: %v", path, ns, err)
		}
	}

	for _, c := range []*infrav1.ContainerCluster{
		in("team-a", clusterOnEngines("listed", "lists-team-a")),
		in("team-a", clusterOnEngines("selected", "selects-shared", "lists-team-a")),
		in("team-b", clusterOnEngines("not-yet-created", "engine-c")),
	} {
		if err := create(t, c); err != nil {
			t.Errorf("ContainerCluster %s/%s on allowed engines was refused: %v", c.Namespace, c.Name, err)
		}
	}
	refusedAt(t, create(t, in("team-b", clusterOnEngines("not-listed", "lists-team-a"))), "spec.engines[0].name", "team-b")
	refusedAt(t, create(t, in("team-b", clusterOnEngines("not-selected", "engine-c", "selects-shared"))), "spec.engines[1].name", "team-b")
	refusedAt(t, create(t, in("team-a", clusterOnEngines("allows-none", "allows-none"))), "spec.engines[0].name", "team-a")

	// An engine narrowed after admission does not block other changes to a
	// cluster already on it; an engine the update adds is checked.
	cluster := in("team-a", clusterOnEngines("narrowed", "lists-team-a", "selects-shared"))
	if err := create(t, cluster); err != nil {
		t.Fatal(err)
	}
	listsTeamA.Spec.AllowedNamespaces.List = []string{"team-c"}
	if err := env.Client.Update(ctx, listsTeamA); err != nil {
		t.Fatalf("failed to narrow ContainerEngine %s: %v", listsTeamA.Name, err)
	}
	cluster.Labels = map[string]string{"touched": "true"}
	if err := env.Client.Update(ctx, cluster); err != nil {
		t.Errorf("an update that adds no engine was refused after the engine was narrowed: %v", err)
	}
	cluster.Spec.Engines = append(cluster.Spec.Engines, infrav1.ClusterEngine{Name: "allows-none"})
	refusedAt(t, env.Client.Update(ctx, cluster), "spec.engines[2].name", "team-a")
}

// TestTheManagersOwnEngineRefusesNamespacesThePolicyLeavesOut creates a
// cluster that lists no engines in a namespace testPolicy's --local-engine-*
// flags leave out: the refusal names spec.engines, the namespace and both
// flags, so that the user knows whom to ask. The same cluster listing an
// engine is left to that engine's allowedNamespaces.
func TestTheManagersOwnEngineRefusesNamespacesThePolicyLeavesOut(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "local-engine-refused"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatalf("failed to create Namespace %s: %v", ns.Name, err)
	}
	local := clusterOnEngines("local")
	local.Namespace = ns.Name
	err := env.Client.Create(ctx, local)
	if err == nil {
		t.Cleanup(func() { _ = env.Client.Delete(ctx, local) })
		t.Fatal("the API server accepted a cluster on the manager's own engine in a namespace its policy leaves out")
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want an Invalid error, got %v", err)
	}
	for _, want := range []string{"spec.engines: Forbidden", "does not allow namespace local-engine-refused",
		"--local-engine-allowed-namespaces", "--local-engine-namespace-selector"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	onEngine := clusterOnEngines("on-engine", "not-yet-created")
	onEngine.Namespace = ns.Name
	if err := env.Client.Create(ctx, onEngine); err != nil {
		t.Fatalf("a cluster that lists an engine was refused by the manager's own engine's policy: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, onEngine) })
}
