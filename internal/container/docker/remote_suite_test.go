//go:build engine

package docker_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/container/runtimetest"
)

// terminator serves an engine's API over mutual TLS on loopback, as a
// dockerd started with --tlsverify would, by relaying every connection that
// completes the handshake to the engine's unix socket: the machine's engine
// needs no reconfiguring, yet every call crosses a real TLS connection.
type terminator struct {
	ln     net.Listener
	socket string
	// accepted counts the connections past the handshake.
	accepted atomic.Int64

	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool
	conns  []net.Conn
}

func newTerminator(t *testing.T, socket string, serverCA, clientCA *certAuthority) *terminator {
	t.Helper()
	certPEM, keyPEM := serverCA.issue(t, "engine", x509.ExtKeyUsageServerAuth, nil, []net.IP{net.ParseIP("127.0.0.1")})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AddCert(clientCA.cert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: clients,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	term := &terminator{ln: ln, socket: socket}
	term.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if term.track(c) {
				term.wg.Go(func() { term.relay(c.(*tls.Conn)) })
			}
		}
	})
	t.Cleanup(term.close)
	return term
}

// track registers c for close, or closes it when the terminator is closed.
func (term *terminator) track(c net.Conn) bool {
	term.mu.Lock()
	defer term.mu.Unlock()
	if term.closed {
		_ = c.Close()
		return false
	}
	term.conns = append(term.conns, c)
	return true
}

func (term *terminator) relay(c *tls.Conn) {
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := c.HandshakeContext(ctx)
	cancel()
	if err != nil {
		return // a client the terminator refuses
	}
	e, err := net.Dial("unix", term.socket)
	if err != nil || !term.track(e) {
		return
	}
	defer func() { _ = e.Close() }()
	term.accepted.Add(1)
	// Each direction is half-closed when its source ends, so that an exec's
	// end of stdin reaches the engine and the end of a hijacked stream's
	// output reaches the client, while the other direction still flows.
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(e, c)
		_ = e.(*net.UnixConn).CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(c, e)
	_ = c.CloseWrite()
	<-done
}

// close stops accepting, cuts every connection and waits for the relays.
func (term *terminator) close() {
	_ = term.ln.Close()
	term.mu.Lock()
	term.closed = true
	for _, c := range term.conns {
		_ = c.Close()
	}
	term.mu.Unlock()
	term.wg.Wait()
}

// TestSuiteOverTLS runs the runtime behaviour suite against this machine's
// engine reached as a remote engine is: Connect to a tcp:// endpoint with
// TLS both ways. A terminator stands in for the engine's TLS listener.
func TestSuiteOverTLS(t *testing.T) {
	host := dockertest.NewRuntime(t).Client().DaemonHost()
	socket, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		t.Fatalf("the terminator needs the engine on a unix socket, it is at %s", host)
	}
	kind, err := container.EngineFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	engineType := infrav1.DockerEngine
	if kind == container.EnginePodman {
		engineType = infrav1.PodmanEngine
	}
	// Connect must reach the engine through its spec alone; had it fallen
	// back on the environment, every call would fail.
	t.Setenv("DOCKER_HOST", "unix:///nonexistent.sock")

	serverCA, clientCA := newCA(t, "engine CA"), newCA(t, "client CA")
	term := newTerminator(t, socket, serverCA, clientCA)
	connect := func(t *testing.T, ca *certAuthority) *docker.EngineClient {
		t.Helper()
		cert, key := ca.issue(t, "capct", x509.ExtKeyUsageClientAuth, nil, nil)
		engine := &infrav1.ContainerEngine{ObjectMeta: metav1.ObjectMeta{Name: "engine-b"}, Spec: infrav1.ContainerEngineSpec{
			Type: engineType, Endpoint: "tcp://" + term.ln.Addr().String(),
			TLS: &infrav1.EngineTLS{SecretRef: infrav1.LocalObjectReference{Name: "engine-b-tls"}},
		}}
		c, err := docker.Connect(engine, map[string][]byte{container.SecretCA: serverCA.pem, container.SecretCert: cert, container.SecretKey: key})
		if err != nil {
			t.Fatalf("Connect: %v", err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	c := connect(t, clientCA)
	image, err := dockertest.BusyboxImage(runtimetest.Ctx(t), c.Runtime)
	if err != nil {
		t.Fatalf("building the test image: %v", err)
	}
	// In a subtest, which returns only when the suite's parallel cases
	// have: the count below is then theirs.
	before := term.accepted.Load()
	t.Run("suite", func(t *testing.T) {
		runtimetest.RunSuite(t, func(*testing.T) runtimetest.Runtime { return c }, image)
	})
	if term.accepted.Load() == before {
		t.Fatal("the suite ran without a connection through the terminator")
	}

	t.Run("a client certificate from another CA is refused", func(t *testing.T) {
		before := term.accepted.Load()
		_, err := connect(t, newCA(t, "someone else's CA")).Info(runtimetest.Ctx(t))
		if err == nil || !strings.Contains(err.Error(), "remote error") {
			t.Fatalf("Info with a stranger's certificate: %v, want the terminator's refusal", err)
		}
		if n := term.accepted.Load(); n != before {
			t.Errorf("the terminator relayed %d connections of the stranger", n-before)
		}
	})
}
