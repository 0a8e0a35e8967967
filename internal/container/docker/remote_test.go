package docker_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
)

// fakeEngine answers as much of the Docker API as ImageExists needs: the
// version ping, and "no such image" for every image. It records the
// requests it serves past the ping, and the client certificate's name.
type fakeEngine struct {
	mu       sync.Mutex
	requests []string
	clients  []string
}

func (e *fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/_ping" {
		w.Header().Set("Api-Version", "1.41")
		_, _ = w.Write([]byte("OK"))
		return
	}
	e.mu.Lock()
	e.requests = append(e.requests, r.Method+" "+r.URL.Path)
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		e.clients = append(e.clients, r.TLS.PeerCertificates[0].Subject.CommonName)
	}
	e.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write([]byte(`{"message":"No such image"}`))
}

func (e *fakeEngine) served() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.requests...)
}

// askForImage makes one call to the engine through c, bounded as the
// manager bounds every call.
func askForImage(t *testing.T, c *docker.EngineClient) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	exists, err := c.ImageExists(ctx, "capct/node:v1.35.4")
	if err == nil && exists {
		t.Fatal("the fake engine has no images, yet the client says it has capct/node:v1.35.4")
	}
	return err
}

// certAuthority issues certificates for the tests.
type certAuthority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *certAuthority {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &certAuthority{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns the PEM certificate and key of name, valid for dns and ips.
func (ca *certAuthority) issue(t *testing.T, name string, usage x509.ExtKeyUsage, dns []string, ips []net.IP) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames: dns, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// tlsEngine serves a fake engine over TLS on loopback, with a server
// certificate from serverCA for dns and ips, requiring a client certificate
// from clientCA.
func tlsEngine(t *testing.T, serverCA, clientCA *certAuthority, dns []string, ips []net.IP) (*fakeEngine, string) {
	t.Helper()
	certPEM, keyPEM := serverCA.issue(t, "engine-b", x509.ExtKeyUsageServerAuth, dns, ips)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AddCert(clientCA.cert)
	engine := &fakeEngine{}
	s := httptest.NewUnstartedServer(engine)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: clients, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	// The failed handshakes are expected; they would only clutter the log.
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.StartTLS()
	t.Cleanup(s.Close)
	return engine, "tcp://" + s.Listener.Addr().String()
}

// TestConnectOverTLS reaches a fake engine over TCP with TLS both ways: a
// call goes through with the Secret's CA and client certificate, and each
// thing that should stop it does, before the engine serves anything.
func TestConnectOverTLS(t *testing.T) {
	serverCA, clientCA, otherCA := newCA(t, "engine CA"), newCA(t, "client CA"), newCA(t, "someone else's CA")
	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	clientCert, clientKey := clientCA.issue(t, "capct", x509.ExtKeyUsageClientAuth, nil, nil)
	strangerCert, strangerKey := otherCA.issue(t, "stranger", x509.ExtKeyUsageClientAuth, nil, nil)
	secret := func(ca, cert, key []byte) map[string][]byte {
		return map[string][]byte{container.SecretCA: ca, container.SecretCert: cert, container.SecretKey: key}
	}
	onTCP := func(endpoint, serverName string) *infrav1.ContainerEngine {
		return &infrav1.ContainerEngine{ObjectMeta: metav1.ObjectMeta{Name: "engine-b"}, Spec: infrav1.ContainerEngineSpec{
			Endpoint: endpoint,
			TLS:      &infrav1.EngineTLS{SecretRef: infrav1.LocalObjectReference{Name: "engine-b-tls"}, ServerName: serverName},
		}}
	}

	testCases := []struct {
		name       string
		dns        []string
		ips        []net.IP
		serverName string
		secret     map[string][]byte
		// wantErr is part of the call's error; empty: the call succeeds.
		wantErr string
	}{
		{name: "the engine's certificate names its address", ips: loopback, secret: secret(serverCA.pem, clientCert, clientKey)},
		{name: "serverName names what the certificate names", dns: []string{"engine-b.example"}, serverName: "engine-b.example",
			secret: secret(serverCA.pem, clientCert, clientKey)},
		{name: "the certificate does not name the address", dns: []string{"engine-b.example"},
			secret: secret(serverCA.pem, clientCert, clientKey), wantErr: "cannot validate certificate for 127.0.0.1"},
		{name: "the engine's certificate is not from the Secret's CA", ips: loopback,
			secret: secret(otherCA.pem, clientCert, clientKey), wantErr: "certificate signed by unknown authority"},
		{name: "CAPCT's certificate is not from the engine's client CA", ips: loopback,
			secret: secret(serverCA.pem, strangerCert, strangerKey), wantErr: "remote error"},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			engine, endpoint := tlsEngine(t, serverCA, clientCA, tc.dns, tc.ips)
			c, err := docker.Connect(onTCP(endpoint, tc.serverName), tc.secret)
			if err != nil {
				t.Fatalf("Connect: %v", err)
			}
			defer func() { _ = c.Close() }()
			err = askForImage(t, c)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("the call failed: %v", err)
				}
				if got := engine.served(); len(got) != 1 || !strings.HasSuffix(got[0], "/images/capct/node:v1.35.4/json") {
					t.Errorf("the engine served %v, want one image inspection", got)
				}
				if engine.clients[0] != "capct" {
					t.Errorf("the engine saw client certificate %q, want capct's", engine.clients[0])
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("the call's error is %v, want one saying %q", err, tc.wantErr)
			}
			if got := engine.served(); len(got) != 0 {
				t.Errorf("the engine served %v, want nothing", got)
			}
		})
	}

	// A Secret that lacks a key, or holds no certificate, is found before
	// anything is dialled, and named.
	for key, data := range map[string]map[string][]byte{
		container.SecretKey: {container.SecretCA: serverCA.pem, container.SecretCert: clientCert},
		container.SecretCA:  secret([]byte("not PEM"), clientCert, clientKey),
	} {
		_, err := docker.Connect(onTCP("tcp://127.0.0.1:1", ""), data)
		var invalid *container.InvalidCredentialsError
		if !errors.As(err, &invalid) || !strings.Contains(err.Error(), key) {
			t.Errorf("Connect with a bad %s: %v, want an InvalidCredentialsError naming it", key, err)
		}
		if err != nil && strings.Contains(err.Error(), "PRIVATE KEY") {
			t.Errorf("the error carries key material: %v", err)
		}
	}
}
