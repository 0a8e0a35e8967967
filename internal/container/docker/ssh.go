package docker

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// sshHandshakeTimeout bounds opening the SSH connection when the call that
// needs it has no deadline of its own.
const sshHandshakeTimeout = 30 * time.Second

// sshTunnel reaches an engine's local socket through one SSH connection,
// as `docker -H ssh://` does, but without a docker or ssh binary on either
// side: each connection of the API client is a direct-streamlocal channel
// (OpenSSH's Unix-socket forwarding, on by default in sshd). The SSH
// connection is opened on first use and again after it breaks, as when the
// host restarts.
type sshTunnel struct {
	addr   string // host:port
	socket string // the engine's socket on the host
	config *ssh.ClientConfig

	mu     sync.Mutex
	conn   *ssh.Client
	closed bool
}

// newSSHTunnel checks the endpoint u (ssh://user@host[:port][/socket],
// engineSocket without a path) and the Secret's key and known_hosts; it
// does not connect.
func newSSHTunnel(u *url.URL, engineSocket string, secret map[string][]byte) (*sshTunnel, error) {
	if u.User == nil || u.User.Username() == "" {
		return nil, fmt.Errorf("the endpoint %s names no user", u.Redacted())
	}
	for _, key := range []string{container.SecretSSHKey, container.SecretKnownHosts} {
		if len(secret[key]) == 0 {
			return nil, fmt.Errorf("the Secret has no %s", key)
		}
	}
	signer, err := ssh.ParsePrivateKey(secret[container.SecretSSHKey])
	var encrypted *ssh.PassphraseMissingError
	if errors.As(err, &encrypted) {
		return nil, fmt.Errorf("%s is protected by a passphrase, which CAPCT cannot give: store the key without one", container.SecretSSHKey)
	}
	if err != nil {
		return nil, fmt.Errorf("failed to parse %s: %w", container.SecretSSHKey, err)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "22")
	}
	hostKey, algorithms, err := hostKeyCheck(secret[container.SecretKnownHosts], addr)
	if err != nil {
		return nil, err
	}
	socket := u.Path
	if socket == "" {
		socket = engineSocket
	}
	return &sshTunnel{
		addr:   addr,
		socket: socket,
		config: &ssh.ClientConfig{
			User:              u.User.Username(),
			Auth:              []ssh.AuthMethod{ssh.PublicKeys(signer)},
			HostKeyCallback:   hostKey,
			HostKeyAlgorithms: algorithms,
		},
	}, nil
}

// hostKeyCheck returns the check of the host's key against knownHosts, and
// the host key algorithms to ask for. knownhosts reads only files; the
// known_hosts lines are public keys, so they go through a temporary file
// that is removed once read.
//
// The algorithms matter because a host usually has several keys and
// known_hosts often lists one of them: left to x/crypto's default order,
// the host would show an ECDSA key while known_hosts has its Ed25519 one,
// and the check would fail on a host that is who it says. knownhosts does
// not list a host's keys, but a check with a key that cannot match returns
// them all (the approach of github.com/skeema/knownhosts, written here
// because it is a few lines).
func hostKeyCheck(knownHosts []byte, addr string) (ssh.HostKeyCallback, []string, error) {
	f, err := os.CreateTemp("", "capct-known-hosts-")
	if err != nil {
		return nil, nil, fmt.Errorf("failed to write known_hosts for reading: %w", err)
	}
	defer func() { _ = os.Remove(f.Name()) }()
	_, werr := f.Write(knownHosts)
	if err := errors.Join(werr, f.Close()); err != nil {
		return nil, nil, fmt.Errorf("failed to write known_hosts for reading: %w", err)
	}
	check, err := knownhosts.New(f.Name())
	if err != nil {
		return nil, nil, fmt.Errorf("failed to parse %s: %w", container.SecretKnownHosts, err)
	}
	probe, err := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	if err != nil {
		return nil, nil, fmt.Errorf("failed to make the probe key: %w", err)
	}
	var keyErr *knownhosts.KeyError
	if err := check(addr, &net.TCPAddr{IP: net.IPv4zero}, probe); !errors.As(err, &keyErr) || len(keyErr.Want) == 0 {
		return nil, nil, fmt.Errorf("%s has no key for %s (as `ssh-keyscan -p <port> <host>` writes it)", container.SecretKnownHosts, knownhosts.Normalize(addr))
	}
	var algorithms []string
	for _, k := range keyErr.Want {
		algorithms = append(algorithms, signatureAlgorithms(k.Key.Type())...)
	}
	return check, algorithms, nil
}

// signatureAlgorithms are the host key algorithms that prove a key of
// keyType: its own name, except for RSA keys, which sign with SHA-2 today.
func signatureAlgorithms(keyType string) []string {
	if keyType == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	}
	return []string{keyType}
}

// dial is the API client's dialer: a stream to the engine's socket.
func (t *sshTunnel) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	c, err := t.client(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := c.Dial("unix", t.socket)
	var refused *ssh.OpenChannelError
	if err != nil && !errors.As(err, &refused) {
		// The SSH connection is dead (the host or its sshd restarted):
		// open a new one, once.
		t.drop(c)
		if c, err = t.client(ctx); err != nil {
			return nil, err
		}
		conn, err = c.Dial("unix", t.socket)
	}
	if err != nil {
		return nil, fmt.Errorf("failed to reach %s on %s through SSH: %w", t.socket, t.addr, err)
	}
	return conn, nil
}

// client returns the SSH connection, opening it when there is none.
func (t *sshTunnel) client(ctx context.Context) (*ssh.Client, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, net.ErrClosed
	}
	if t.conn != nil {
		return t.conn, nil
	}
	ctx, cancel := context.WithTimeout(ctx, sshHandshakeTimeout)
	defer cancel()
	raw, err := (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, fmt.Errorf("failed to connect to %s: %w", t.addr, err)
	}
	// The handshake has no context; a deadline on the connection bounds it.
	deadline, _ := ctx.Deadline()
	if err := raw.SetDeadline(deadline); err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("failed to bound the SSH handshake with %s: %w", t.addr, err)
	}
	conn, chans, reqs, err := ssh.NewClientConn(raw, t.addr, t.config)
	if err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("failed to open an SSH connection to %s as %s: %w", t.addr, t.config.User, err)
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("failed to clear the SSH handshake's deadline with %s: %w", t.addr, err)
	}
	t.conn = ssh.NewClient(conn, chans, reqs)
	return t.conn, nil
}

// drop closes c and forgets it, unless another dial replaced it already.
func (t *sshTunnel) drop(c *ssh.Client) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conn == c {
		_ = c.Close()
		t.conn = nil
	}
}

// Close closes the SSH connection; later dials fail.
func (t *sshTunnel) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	if t.conn == nil {
		return nil
	}
	err := t.conn.Close()
	t.conn = nil
	return err
}
