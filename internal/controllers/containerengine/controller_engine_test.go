//go:build engine

package containerengine_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
)

// The tests of this file reach this machine's engine, the manager's own
// (DOCKER_HOST, or CAPCT_ENGINE's), so they carry the engine build tag; the
// suite (controller_test.go) and the tests of engines nobody serves run
// without it.

// TestEnginesReportWhetherCAPCTReachesThem creates engines that CAPCT
// reaches, that do not answer, and whose Secret is missing or incomplete:
// each says so in Available, with the version and swarm it reports, and
// changes its answer when the engine comes up or the Secret is fixed.
func TestEnginesReportWhetherCAPCTReachesThem(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()

	// The manager's own engine: the Docker engine the tests run on.
	own, err := docker.New()
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = own.Close() }()
	ownInfo, err := own.Info(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	createEngine(ctx, g, t, "own", infrav1.ContainerEngineSpec{})
	g.Eventually(func(g Gomega) {
		c := available(ctx, g, "own")
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "Available: %+v", c)
		g.Expect(c.Reason).To(Equal(infrav1.SucceededReason))
		engine := &infrav1.ContainerEngine{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "own"}, engine)).To(Succeed())
		g.Expect(engine.Status.Version).To(Equal(ownInfo.Version))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	// An engine whose socket nobody serves yet, then a fake engine in a
	// swarm on it: seen within the unreachable recheck.
	socket := filepath.Join(t.TempDir(), "engine-b.sock")
	createEngine(ctx, g, t, "later", infrav1.ContainerEngineSpec{Endpoint: "unix://" + socket})
	g.Eventually(func(g Gomega) {
		c := available(ctx, g, "later")
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(infrav1.EngineUnreachableReason))
		g.Expect(c.Message).To(ContainSubstring(socket))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	serveSwarmManager(t, socket)
	g.Eventually(func(g Gomega) {
		c := available(ctx, g, "later")
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "Available: %+v", c)
		engine := &infrav1.ContainerEngine{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "later"}, engine)).To(Succeed())
		g.Expect(engine.Status.Version).To(Equal("99.0.0-fake"))
		g.Expect(engine.Status.Swarm).To(Equal(&infrav1.SwarmMembership{NodeID: "node-b", ClusterID: "swarm-1", Manager: true, NodeAddr: "10.99.0.2"}))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	// A TLS engine whose Secret does not exist, then lacks its key.
	tlsEngine := createEngine(ctx, g, t, "tls", infrav1.ContainerEngineSpec{
		Endpoint: "tcp://127.0.0.1:1",
		TLS:      &infrav1.EngineTLS{SecretRef: infrav1.LocalObjectReference{Name: "engine-tls"}},
	})
	g.Eventually(func(g Gomega) {
		c := available(ctx, g, "tls")
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(infrav1.InvalidCredentialsReason))
		g.Expect(c.Message).To(ContainSubstring("the Secret capct-system/engine-tls does not exist"))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: managerNamespace, Name: "engine-tls"},
		Data:       map[string][]byte{container.SecretCA: []byte("not a certificate"), container.SecretCert: []byte("x")},
	}
	g.Expect(env.Client.Create(ctx, secret)).To(Succeed())
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), secret) })
	// The engine's change brings the Secret's at once.
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(tlsEngine), tlsEngine)).To(Succeed())
	tlsEngine.Annotations = map[string]string{"test": "secret created"}
	g.Expect(env.Client.Update(ctx, tlsEngine)).To(Succeed())
	g.Eventually(func(g Gomega) {
		c := available(ctx, g, "tls")
		g.Expect(c.Reason).To(Equal(infrav1.InvalidCredentialsReason))
		g.Expect(c.Message).To(ContainSubstring("has no tls.key"))
		g.Expect(c.Message).NotTo(ContainSubstring("not a certificate"), "the Secret's data must not reach the condition")
	}, 10*time.Second, 200*time.Millisecond).Should(Succeed())
}

// serveSwarmManager serves, on socket, as much of the Docker API as Info
// needs, for an engine that manages a swarm.
func serveSwarmManager(t *testing.T, socket string) {
	t.Helper()
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/_ping" {
			w.Header().Set("Api-Version", "1.41")
			_, _ = w.Write([]byte("OK"))
			return
		}
		if filepath.Base(r.URL.Path) != "info" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ServerVersion":"99.0.0-fake","Swarm":{"LocalNodeState":"active","NodeID":"node-b",` +
			`"ControlAvailable":true,"NodeAddr":"10.99.0.2","Cluster":{"ID":"swarm-1"}}}`))
	}))
	s.Listener = l
	s.Start()
	t.Cleanup(s.Close)
}

// TestAnEngineInUseIsKeptUntilItsClustersGo deletes an engine a cluster
// lists: it stays, says which cluster holds it, and still serves the
// cluster (whose containers are on it) until the cluster is deleted.
func TestAnEngineInUseIsKeptUntilItsClustersGo(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	engine := createEngine(ctx, g, t, "in-use", infrav1.ContainerEngineSpec{AllowedNamespaces: &infrav1.AllowedNamespaces{}})
	g.Eventually(func(g Gomega) {
		g.Expect(available(ctx, g, engine.Name).Status).To(Equal(metav1.ConditionTrue))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "engine-user-"}}
	g.Expect(env.Client.Create(ctx, ns)).To(Succeed())
	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "user"},
		Spec: infrav1.ContainerClusterSpec{Engines: []infrav1.ClusterEngine{{Name: engine.Name}}}}
	g.Expect(env.Client.Create(ctx, cc)).To(Succeed())

	g.Expect(env.Client.Delete(ctx, engine)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(engine), engine)).To(Succeed())
		deleting := conditions.Get(engine, infrav1.EngineDeletingCondition)
		g.Expect(deleting).NotTo(BeNil())
		g.Expect(deleting.Reason).To(Equal(infrav1.InUseReason))
		g.Expect(deleting.Message).To(ContainSubstring(ns.Name + "/user"))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(engine), &infrav1.ContainerEngine{})).To(Succeed())
		_, err := registry.Get(engine.Name)
		g.Expect(err).NotTo(HaveOccurred(), "an engine in use must still be served")
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())

	g.Expect(env.Client.Delete(ctx, cc)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(engine), engine))).To(BeTrue())
		_, err := registry.Get(engine.Name)
		g.Expect(err).To(HaveOccurred(), "a deleted engine is forgotten")
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
}
