package containerengine_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/engines"
)

// TestAnEmptyAllowedNamespacesListStaysNobody writes an engine whose
// allowedNamespaces is `list: []`, "nobody yet", through a Go client, lets
// the controller write it back, and updates it again: through the real API
// server it must still refuse every namespace, never turn into {} (every
// namespace).
func TestAnEmptyAllowedNamespacesListStaysNobody(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenant-"}}
	g.Expect(env.Client.Create(ctx, ns)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })

	socket := filepath.Join(t.TempDir(), "nobody.sock")
	createEngine(ctx, g, t, "nobody-yet", infrav1.ContainerEngineSpec{
		Endpoint: "unix://" + socket, AllowedNamespaces: &infrav1.AllowedNamespaces{List: []string{}},
	})
	refuses := func(g Gomega) *infrav1.ContainerEngine {
		engine := &infrav1.ContainerEngine{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "nobody-yet"}, engine)).To(Succeed())
		g.Expect(engine.Spec.AllowedNamespaces).NotTo(BeNil())
		g.Expect(engine.Spec.AllowedNamespaces.List).NotTo(BeNil(), "list: [] came back absent, which allows every namespace")
		allowed, err := engines.AllowsNamespace(engine, ns)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(allowed).To(BeFalse(), "an engine whose allowedNamespaces is list: [] allows namespace %s", ns.Name)
		return engine
	}
	refuses(g)

	// The controller has written the engine (finalizer, status) once it
	// reports whether it reaches it.
	g.Eventually(func(g Gomega) { g.Expect(available(ctx, g, "nobody-yet").Status).To(Equal(metav1.ConditionFalse)) },
		30*time.Second, 200*time.Millisecond).Should(Succeed())
	engine := refuses(g)

	// A full update from a Go client, as any controller or tool makes.
	if engine.Labels == nil {
		engine.Labels = map[string]string{}
	}
	engine.Labels["touched"] = "true"
	g.Expect(env.Client.Update(ctx, engine)).To(Succeed())
	refuses(g)
}

// TestAnEngineOpenToAllStaysOpenToAll: {} written by a Go client, whose
// absent list now goes out as null, is stored and read back as {}, every
// namespace.
func TestAnEngineOpenToAllStaysOpenToAll(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenant-"}}
	g.Expect(env.Client.Create(ctx, ns)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })

	createEngine(ctx, g, t, "open-to-all", infrav1.ContainerEngineSpec{
		Endpoint: "unix://" + filepath.Join(t.TempDir(), "open.sock"), AllowedNamespaces: &infrav1.AllowedNamespaces{},
	})
	engine := &infrav1.ContainerEngine{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "open-to-all"}, engine)).To(Succeed())
	g.Expect(engine.Spec.AllowedNamespaces).To(Equal(&infrav1.AllowedNamespaces{}))
	allowed, err := engines.AllowsNamespace(engine, ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(allowed).To(BeTrue())
}
