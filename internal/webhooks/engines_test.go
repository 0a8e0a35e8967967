package webhooks_test

import (
	"context"
	"strings"
	"testing"

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

	// Adding a second engine keeps the first where it is: allowed.
	before := clusterOnEngines("grows", "engine-a")
	if err := env.Client.Create(ctx, before); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, before) })
	after := clusterOnEngines("grows", "engine-a", "engine-b")
	after.SetResourceVersion(before.GetResourceVersion())
	if err := env.Client.Update(ctx, after); err != nil {
		t.Errorf("adding a second engine was refused: %v", err)
	}
}
