//go:build engine

package multihost_test

import (
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/container/runtimetest"
)

// engine2 connects to engine.sh's engine as CAPCT connects to a
// ContainerEngine: from its endpoint and a Secret of PEMs.
func engine2(t *testing.T) *docker.EngineClient {
	t.Helper()
	engine, secret := engine2Spec(t)
	c, err := docker.Connect(engine, secret)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// engine2Spec is the ContainerEngine of engine.sh's engine and its Secret's
// data, the certificates engine.sh made.
func engine2Spec(t *testing.T) (*infrav1.ContainerEngine, map[string][]byte) {
	t.Helper()
	endpoint, pki := os.Getenv("MH_ENDPOINT"), os.Getenv("MH_PKI")
	if endpoint == "" || pki == "" {
		t.Fatal("MH_ENDPOINT and MH_PKI are unset: run these tests through make test-multihost, which starts engine 2")
	}
	secret := map[string][]byte{}
	for key, file := range map[string]string{container.SecretCA: "ca.crt", container.SecretCert: "client.crt", container.SecretKey: "client.key"} {
		b, err := os.ReadFile(filepath.Join(pki, file))
		if err != nil {
			t.Fatal(err)
		}
		secret[key] = b
	}
	engine := &infrav1.ContainerEngine{ObjectMeta: metav1.ObjectMeta{Name: "engine-2"}, Spec: infrav1.ContainerEngineSpec{
		Type: infrav1.DockerEngine, Endpoint: endpoint,
		TLS: &infrav1.EngineTLS{SecretRef: infrav1.LocalObjectReference{Name: "engine-2-tls"}},
	}}
	return engine, secret
}

// TestSuiteOnEngine2 runs the runtime behaviour suite against a dockerd in
// another network namespace, reached over TCP with TLS both ways: the
// engine of a second host, as CAPCT reaches it.
func TestSuiteOnEngine2(t *testing.T) {
	// Only the endpoint may lead to the engine.
	t.Setenv("DOCKER_HOST", "unix:///nonexistent.sock")
	c := engine2(t)
	info, err := c.Client().Info(runtimetest.Ctx(t))
	if err != nil {
		t.Fatalf("asking engine 2 over TLS: %v", err)
	}
	if want := os.Getenv("MH_DATA_ROOT"); info.DockerRootDir != want {
		t.Fatalf("the endpoint reached the engine with data root %s, not engine 2's (%s)", info.DockerRootDir, want)
	}
	image, err := dockertest.BusyboxImage(runtimetest.Ctx(t), c.Runtime)
	if err != nil {
		t.Fatalf("building the test image on engine 2: %v", err)
	}
	runtimetest.RunSuite(t, func(*testing.T) runtimetest.Runtime { return c }, image)
}
