package docker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/docker/docker/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
)

// defaultSocket is the engine socket an ssh:// endpoint without a path
// reaches on its host: Docker's, as the docker CLI assumes too, or rootful
// Podman's.
func defaultSocket(kind container.Engine) string {
	if kind == container.EnginePodman {
		return strings.TrimPrefix(DefaultPodmanHost, "unix://")
	}
	return "/var/run/docker.sock"
}

// EngineClient is a client of one ContainerEngine's API. Close releases
// it, and for an ssh:// engine its SSH connection.
type EngineClient struct {
	*Runtime
	tunnel *sshTunnel
}

var _ container.Runtime = (*EngineClient)(nil)

// Close closes the engine's API client and, for ssh://, its SSH connection.
func (c *EngineClient) Close() error {
	err := c.Runtime.Close()
	if c.tunnel != nil {
		err = errors.Join(err, c.tunnel.Close())
	}
	return err
}

// Connect returns a client of engine's API, made from its spec and secret,
// the data of the Secret its tls or ssh names (nil for the others). It is
// the Docker and Podman backend's engines.Connector, which the manager's
// composition root hands to the engine registry. It does not contact the
// engine: that happens on the first call, as for the manager's own engine.
// A Secret it cannot use is a *container.InvalidCredentialsError.
//
// No secret is written to disk: the TLS material and the SSH key stay in
// memory (known_hosts, public keys only, passes through a temporary file;
// see hostKeyCheck). An endpoint's engine is reached only through what its
// spec says, never through the manager's environment (DOCKER_CERT_PATH and
// the like), which configures the manager's own engine, "".
func Connect(engine *infrav1.ContainerEngine, secret map[string][]byte) (*EngineClient, error) {
	kind := container.EngineDocker
	if engine.Spec.Type == infrav1.PodmanEngine {
		kind = container.EnginePodman
	}
	endpoint := engine.Spec.Endpoint
	if endpoint == "" {
		rt, err := NewEngine(kind)
		if err != nil {
			return nil, fmt.Errorf("failed to create a client of ContainerEngine %s: %w", engine.Name, err)
		}
		return &EngineClient{Runtime: rt}, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		// The CRD's rules admit only endpoints that parse.
		return nil, fmt.Errorf("failed to parse the endpoint of ContainerEngine %s: %w", engine.Name, err)
	}
	c := &EngineClient{}
	var clientOpts []client.Opt
	switch u.Scheme {
	case "unix":
		// A fresh transport, so that TLS settings of the manager's
		// environment do not follow the client to this socket.
		clientOpts = []client.Opt{client.WithHTTPClient(&http.Client{Transport: newTransport()}), client.WithHost(endpoint)}
	case "tcp":
		if engine.Spec.TLS == nil {
			return nil, &container.InvalidCredentialsError{Engine: engine.Name, Err: errors.New("a tcp:// endpoint needs spec.tls")}
		}
		cfg, err := tlsConfig(engine.Spec.TLS, secret)
		if err != nil {
			return nil, &container.InvalidCredentialsError{Engine: engine.Name, Err: err}
		}
		tr := newTransport()
		tr.TLSClientConfig = cfg
		// WithHost after WithHTTPClient: it sets the transport's dialer for
		// TCP, and the client then speaks https because of the TLS config.
		clientOpts = []client.Opt{client.WithHTTPClient(&http.Client{Transport: tr}), client.WithHost(endpoint)}
	case "ssh":
		if engine.Spec.SSH == nil {
			return nil, &container.InvalidCredentialsError{Engine: engine.Name, Err: errors.New("an ssh:// endpoint needs spec.ssh")}
		}
		c.tunnel, err = newSSHTunnel(u, defaultSocket(kind), secret)
		if err != nil {
			return nil, &container.InvalidCredentialsError{Engine: engine.Name, Err: err}
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
	engineOpts := []Option{WithClientOpts(clientOpts...)}
	if u.Scheme != "unix" {
		// Over tcp:// and ssh:// the engine's host is not the manager's.
		engineOpts = append(engineOpts, WithRemoteHost())
	}
	c.Runtime, err = NewEngine(kind, engineOpts...)
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
	for _, key := range []string{container.SecretCA, container.SecretCert, container.SecretKey} {
		if len(secret[key]) == 0 {
			return nil, fmt.Errorf("the Secret %s has no %s", spec.SecretRef.Name, key)
		}
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(secret[container.SecretCA]) {
		return nil, fmt.Errorf("%s of Secret %s holds no PEM certificate", container.SecretCA, spec.SecretRef.Name)
	}
	pair, err := tls.X509KeyPair(secret[container.SecretCert], secret[container.SecretKey])
	if err != nil {
		return nil, fmt.Errorf("failed to load %s and %s of Secret %s: %w", container.SecretCert, container.SecretKey, spec.SecretRef.Name, err)
	}
	return &tls.Config{
		RootCAs:      roots,
		Certificates: []tls.Certificate{pair},
		// Empty: the transport checks the endpoint's host.
		ServerName: spec.ServerName,
		MinVersion: tls.VersionTLS12,
	}, nil
}
