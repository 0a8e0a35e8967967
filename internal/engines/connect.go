package engines

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
)

// The keys of an engine's Secret. The TLS ones are those of a
// kubernetes.io/tls Secret plus the CA; the SSH key is that of a
// kubernetes.io/ssh-auth Secret.
const (
	SecretCA         = "ca.crt"
	SecretCert       = "tls.crt"
	SecretKey        = "tls.key"
	SecretSSHKey     = "ssh-privatekey"
	SecretKnownHosts = "known_hosts"
)

// defaultSocket is the engine socket an ssh:// endpoint without a path
// reaches on its host: Docker's, as the docker CLI assumes too, or rootful
// Podman's.
func defaultSocket(kind container.Engine) string {
	if kind == container.EnginePodman {
		return strings.TrimPrefix(docker.DefaultPodmanHost, "unix://")
	}
	return "/var/run/docker.sock"
}

// Client is a client of one engine's API. Close releases it, and for an
// ssh:// engine its SSH connection.
type Client struct {
	*docker.Runtime
	tunnel *sshTunnel
}

var _ container.Runtime = (*Client)(nil)

// Close closes the engine's API client and, for ssh://, its SSH connection.
func (c *Client) Close() error {
	err := c.Runtime.Close()
	if c.tunnel != nil {
		err = errors.Join(err, c.tunnel.Close())
	}
	return err
}

// InvalidCredentialsError says that an engine's Secret lacks what its
// endpoint needs, or holds something that does not parse. Retrying does not
// help until the Secret changes. Its message never carries the Secret's
// data.
type InvalidCredentialsError struct {
	Engine string
	Err    error
}

func (e *InvalidCredentialsError) Error() string {
	return fmt.Sprintf("invalid credentials for ContainerEngine %s: %v", e.Engine, e.Err)
}

func (e *InvalidCredentialsError) Unwrap() error { return e.Err }

// Connect returns a client of engine's API, made from its spec and secret,
// the data of the Secret its tls or ssh names (nil for the others). It does
// not contact the engine: that happens on the first call, as for the
// manager's own engine.
//
// No secret is written to disk: the TLS material and the SSH key stay in
// memory (known_hosts, public keys only, passes through a temporary file;
// see hostKeyCheck). An endpoint's engine is reached only through what its
// spec says, never through the manager's environment (DOCKER_CERT_PATH and
// the like), which configures the manager's own engine, "".
func Connect(engine *infrav1.ContainerEngine, secret map[string][]byte, opts ...docker.Option) (*Client, error) {
	kind := container.EngineDocker
	if engine.Spec.Type == infrav1.PodmanEngine {
		kind = container.EnginePodman
	}
	endpoint := engine.Spec.Endpoint
	if endpoint == "" {
		rt, err := docker.NewEngine(kind, opts...)
		if err != nil {
			return nil, fmt.Errorf("failed to create a client of ContainerEngine %s: %w", engine.Name, err)
		}
		return &Client{Runtime: rt}, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		// The CRD's rules admit only endpoints that parse.
		return nil, fmt.Errorf("failed to parse the endpoint of ContainerEngine %s: %w", engine.Name, err)
	}
	c := &Client{}
	var clientOpts []client.Opt
	switch u.Scheme {
	case "unix":
		// A fresh transport, so that TLS settings of the manager's
		// environment do not follow the client to this socket.
		clientOpts = []client.Opt{client.WithHTTPClient(&http.Client{Transport: newTransport()}), client.WithHost(endpoint)}
	case "tcp":
		if engine.Spec.TLS == nil {
			return nil, &InvalidCredentialsError{Engine: engine.Name, Err: errors.New("a tcp:// endpoint needs spec.tls")}
		}
		cfg, err := tlsConfig(engine.Spec.TLS, secret)
		if err != nil {
			return nil, &InvalidCredentialsError{Engine: engine.Name, Err: err}
		}
		tr := newTransport()
		tr.TLSClientConfig = cfg
		// WithHost after WithHTTPClient: it sets the transport's dialer for
		// TCP, and the client then speaks https because of the TLS config.
		clientOpts = []client.Opt{client.WithHTTPClient(&http.Client{Transport: tr}), client.WithHost(endpoint)}
	case "ssh":
		if engine.Spec.SSH == nil {
			return nil, &InvalidCredentialsError{Engine: engine.Name, Err: errors.New("an ssh:// endpoint needs spec.ssh")}
		}
		c.tunnel, err = newSSHTunnel(u, defaultSocket(kind), secret)
		if err != nil {
			return nil, &InvalidCredentialsError{Engine: engine.Name, Err: err}
		}
		tr := newTransport()
		tr.DialContext = c.tunnel.dial
		// The host only names the engine in requests; every connection is
		// a stream to the remote socket through the SSH connection.
		// WithHTTPClient after WithHost, which would replace the dialer.
		clientOpts = []client.Opt{client.WithHost("http://" + engine.Name), client.WithHTTPClient(&http.Client{Transport: tr})}
	default:
		return nil, fmt.Errorf("the endpoint scheme %q of ContainerEngine %s is not one CAPCT speaks", u.Scheme, engine.Name)
	}
	engineOpts := append(slices.Clone(opts), docker.WithClientOpts(clientOpts...))
	if u.Scheme != "unix" {
		// Over tcp:// and ssh:// the engine's host is not the manager's.
		engineOpts = append(engineOpts, docker.WithRemoteHost())
	}
	c.Runtime, err = docker.NewEngine(kind, engineOpts...)
	if err != nil {
		if c.tunnel != nil {
			_ = c.tunnel.Close()
		}
		return nil, fmt.Errorf("failed to create a client of ContainerEngine %s: %w", engine.Name, err)
	}
	return c, nil
}

// newTransport is the Docker client's own default transport: a bounded
// idle pool, so that a long-lived manager does not hold connections the
// engine has forgotten (moby/moby#45539).
func newTransport() *http.Transport {
	return &http.Transport{
		MaxIdleConns:    6,
		IdleConnTimeout: 30 * time.Second,
		DialContext:     (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	}
}

// tlsConfig authenticates CAPCT with the client certificate and the engine
// with the CA, both from the Secret: the engine's certificate must chain to
// ca.crt alone, not to the system's roots, and name the endpoint's host or
// spec.tls.serverName.
func tlsConfig(spec *infrav1.EngineTLS, secret map[string][]byte) (*tls.Config, error) {
	for _, key := range []string{SecretCA, SecretCert, SecretKey} {
		if len(secret[key]) == 0 {
			return nil, fmt.Errorf("the Secret %s has no %s", spec.SecretRef.Name, key)
		}
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(secret[SecretCA]) {
		return nil, fmt.Errorf("%s of Secret %s holds no PEM certificate", SecretCA, spec.SecretRef.Name)
	}
	pair, err := tls.X509KeyPair(secret[SecretCert], secret[SecretKey])
	if err != nil {
		return nil, fmt.Errorf("failed to load %s and %s of Secret %s: %w", SecretCert, SecretKey, spec.SecretRef.Name, err)
	}
	return &tls.Config{
		RootCAs:      roots,
		Certificates: []tls.Certificate{pair},
		// Empty: the transport checks the endpoint's host.
		ServerName: spec.ServerName,
		MinVersion: tls.VersionTLS12,
	}, nil
}
