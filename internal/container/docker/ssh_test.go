package docker_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
)

// sshHost is an SSH server on loopback that lets user in with one key and
// forwards direct-streamlocal channels to one Unix socket, the fake
// engine's, as sshd forwards them to the engine's socket. It records every
// socket path asked for and dials only socket, so that a test never reaches
// the real engine of the machine it runs on. Like a real sshd it has
// several host keys: hostKey (Ed25519), which the tests' known_hosts list,
// and an ECDSA key that x/crypto would ask for first, so that a client
// asking for any algorithm but those known_hosts lists fails the check.
type sshHost struct {
	addr    string
	hostKey ssh.Signer
	socket  string

	mu    sync.Mutex
	asked []string
	conns []net.Conn
}

func newSSHHost(t *testing.T, user string, authorized ssh.PublicKey, socket string) *sshHost {
	t.Helper()
	h := &sshHost{hostKey: newSigner(t), socket: socket}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(m ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
		if m.User() == user && string(key.Marshal()) == string(authorized.Marshal()) {
			return nil, nil
		}
		return nil, fmt.Errorf("key of %s is not authorized", m.User())
	}}
	cfg.AddHostKey(h.hostKey)
	ecdsaKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	unlisted, err := ssh.NewSignerFromKey(ecdsaKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AddHostKey(unlisted)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(); h.dropConnections() })
	h.addr = l.Addr().String()
	go func() {
		for {
			raw, err := l.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns = append(h.conns, raw)
			h.mu.Unlock()
			go h.serve(raw, cfg)
		}
	}()
	return h
}

func (h *sshHost) serve(raw net.Conn, cfg *ssh.ServerConfig) {
	_, chans, reqs, err := ssh.NewServerConn(raw, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "direct-streamlocal@openssh.com" {
			_ = nc.Reject(ssh.UnknownChannelType, "only Unix sockets are forwarded")
			continue
		}
		var msg struct {
			SocketPath string
			Reserved0  string
			Reserved1  uint32
		}
		if err := ssh.Unmarshal(nc.ExtraData(), &msg); err != nil {
			_ = nc.Reject(ssh.ConnectionFailed, err.Error())
			continue
		}
		h.mu.Lock()
		h.asked = append(h.asked, msg.SocketPath)
		h.mu.Unlock()
		if msg.SocketPath != h.socket {
			_ = nc.Reject(ssh.ConnectionFailed, "no such socket")
			continue
		}
		engine, err := net.Dial("unix", h.socket)
		if err != nil {
			_ = nc.Reject(ssh.ConnectionFailed, err.Error())
			continue
		}
		ch, chReqs, err := nc.Accept()
		if err != nil {
			_ = engine.Close()
			continue
		}
		go ssh.DiscardRequests(chReqs)
		go func() {
			defer func() { _ = ch.Close(); _ = engine.Close() }()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(engine, ch); done <- struct{}{} }()
			go func() { _, _ = io.Copy(ch, engine); done <- struct{}{} }()
			<-done
		}()
	}
}

// dropConnections cuts every SSH connection, as a restart of the host does.
func (h *sshHost) dropConnections() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		_ = c.Close()
	}
	h.conns = nil
}

func (h *sshHost) socketsAsked() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.asked...)
}

// knownHosts is the known_hosts line of the host for key.
func (h *sshHost) knownHosts(key ssh.PublicKey) []byte {
	return []byte(knownhosts.Line([]string{knownhosts.Normalize(h.addr)}, key) + "\n")
}

func newSigner(t *testing.T) ssh.Signer {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// privateKeyPEM is key in OpenSSH's format, as ssh-keygen writes it;
// encrypted with passphrase when it is not empty.
func privateKeyPEM(t *testing.T, passphrase string) (ssh.PublicKey, []byte) {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var block *pem.Block
	if passphrase == "" {
		block, err = ssh.MarshalPrivateKey(key, "capct")
	} else {
		block, err = ssh.MarshalPrivateKeyWithPassphrase(key, "capct", []byte(passphrase))
	}
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return pub, pem.EncodeToMemory(block)
}

// TestConnectOverSSH reaches a fake engine's socket through an in-process
// SSH server: with the Secret's key and known_hosts a call goes through to
// the endpoint's socket (or Docker's default one), it survives the SSH
// connection being cut, and a host that shows another key, a key the host
// does not know, or a Secret CAPCT cannot use stop it.
func TestConnectOverSSH(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	engine := &fakeEngine{}
	s := httptest.NewUnstartedServer(engine)
	s.Listener = l
	s.Start()
	t.Cleanup(s.Close)

	capctKey, capctPEM := privateKeyPEM(t, "")
	_, strangerPEM := privateKeyPEM(t, "")
	host := newSSHHost(t, "capct", capctKey, socket)
	onSSH := func(endpoint string) *infrav1.ContainerEngine {
		return &infrav1.ContainerEngine{ObjectMeta: metav1.ObjectMeta{Name: "engine-b"}, Spec: infrav1.ContainerEngineSpec{
			Endpoint: endpoint,
			SSH:      &infrav1.EngineSSH{SecretRef: infrav1.LocalObjectReference{Name: "engine-b-ssh"}},
		}}
	}
	connect := func(t *testing.T, endpoint string, key, known []byte) *docker.EngineClient {
		t.Helper()
		c, err := docker.Connect(onSSH(endpoint), map[string][]byte{container.SecretSSHKey: key, container.SecretKnownHosts: known})
		if err != nil {
			t.Fatalf("Connect: %v", err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	endpoint := "ssh://capct@" + host.addr + socket

	t.Run("through the endpoint's socket, and again after the connection is cut", func(t *testing.T) {
		c := connect(t, endpoint, capctPEM, host.knownHosts(host.hostKey.PublicKey()))
		if err := askForImage(t, c); err != nil {
			t.Fatalf("the call failed: %v", err)
		}
		host.dropConnections()
		if err := askForImage(t, c); err != nil {
			t.Fatalf("the call after the SSH connection was cut failed: %v", err)
		}
		if got := engine.served(); len(got) != 2 {
			t.Errorf("the engine served %v, want two image inspections", got)
		}
	})
	t.Run("Docker's socket when the endpoint names none", func(t *testing.T) {
		c := connect(t, "ssh://capct@"+host.addr, capctPEM, host.knownHosts(host.hostKey.PublicKey()))
		before := len(host.socketsAsked())
		if err := askForImage(t, c); err == nil {
			t.Fatal("the call went through a socket the host does not forward")
		}
		if got := host.socketsAsked()[before:]; len(got) == 0 || got[0] != "/var/run/docker.sock" {
			t.Errorf("the host was asked for sockets %v, want /var/run/docker.sock", got)
		}
	})

	refusals := []struct {
		name  string
		key   []byte
		known []byte
		want  string
	}{
		{name: "the host shows a key known_hosts does not have", key: capctPEM,
			known: host.knownHosts(newSigner(t).PublicKey()), want: "knownhosts: key mismatch"},
		{name: "the host does not know CAPCT's key", key: strangerPEM,
			known: host.knownHosts(host.hostKey.PublicKey()), want: "unable to authenticate"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			served := len(engine.served())
			err := askForImage(t, connect(t, endpoint, tc.key, tc.known))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("the call's error is %v, want one saying %q", err, tc.want)
			}
			if got := engine.served()[served:]; len(got) != 0 {
				t.Errorf("the engine served %v, want nothing", got)
			}
		})
	}

	_, encryptedPEM := privateKeyPEM(t, "secret words")
	otherHost := []byte(knownhosts.Line([]string{"[engine-c.example]:22"}, host.hostKey.PublicKey()) + "\n")
	invalid := []struct {
		name   string
		secret map[string][]byte
		want   string
	}{
		{name: "no known_hosts", secret: map[string][]byte{container.SecretSSHKey: capctPEM}, want: "has no known_hosts"},
		{name: "known_hosts without the host", secret: map[string][]byte{container.SecretSSHKey: capctPEM, container.SecretKnownHosts: otherHost},
			want: "known_hosts has no key for [127.0.0.1]:"},
		{name: "a key with a passphrase", secret: map[string][]byte{container.SecretSSHKey: encryptedPEM, container.SecretKnownHosts: host.knownHosts(host.hostKey.PublicKey())},
			want: "protected by a passphrase"},
		{name: "a key that is not a key", secret: map[string][]byte{container.SecretSSHKey: []byte("not a key"), container.SecretKnownHosts: host.knownHosts(host.hostKey.PublicKey())},
			want: "failed to parse ssh-privatekey"},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			_, err := docker.Connect(onSSH(endpoint), tc.secret)
			var ice *container.InvalidCredentialsError
			if !errors.As(err, &ice) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Connect: %v, want an InvalidCredentialsError saying %q", err, tc.want)
			}
		})
	}
}
