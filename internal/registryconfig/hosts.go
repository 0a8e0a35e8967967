package registryconfig

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"

	toml "github.com/pelletier/go-toml/v2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/provisioning"
)

// HostsDir is containerd's config_path in CAPCT's node image, the folder
// kind's node images read too: one folder per registry host, each holding
// a hosts.toml.
const HostsDir = "/etc/containerd/certs.d"

// DefaultRegistry is the entry containerd uses for every registry without
// a folder of its own.
const DefaultRegistry = "_default"

// ErrInvalid means a registry entry or a proxy setting cannot be written
// into a node. The API's validation refuses such entries; this is the
// renderer's own check, as it writes paths, TOML and environment files
// from them.
var ErrInvalid = errors.New("invalid registry or proxy configuration")

// mirrorCapabilities are what a mirror is asked for: pulls and tag lookups,
// never pushes. The registry itself (or its server) keeps containerd's
// default, every capability.
var mirrorCapabilities = []string{"pull", "resolve"}

// hostsHeader starts every hosts.toml, for whoever looks in a node.
const hostsHeader = "# Written by CAPCT from the ContainerCluster's spec.registryMirrors\n" +
	"# when this node was made (docs/registries.md).\n"

// hostsRoot is the top of a hosts.toml: the registry's own address (the
// last one tried) and how to reach it.
type hostsRoot struct {
	Server       string `toml:"server,omitempty"`
	CA           string `toml:"ca,omitempty"`
	SkipVerify   bool   `toml:"skip_verify,omitempty"`
	OverridePath bool   `toml:"override_path,omitempty"`
}

// hostsEntry is one [host."<url>"] table: a mirror.
type hostsEntry struct {
	Capabilities []string `toml:"capabilities"`
	CA           string   `toml:"ca,omitempty"`
	SkipVerify   bool     `toml:"skip_verify,omitempty"`
	OverridePath bool     `toml:"override_path,omitempty"`
}

// HostsSteps returns the file steps that write mirrors into a node: for
// each registry, HostsDir/<registry>/hosts.toml and a CA file per endpoint
// with a caBundle. No mirrors: no steps.
func HostsSteps(mirrors []infrav1.RegistryMirror) ([]provisioning.Step, error) {
	var steps []provisioning.Step
	seen := map[string]bool{}
	for i, m := range mirrors {
		dir, err := registryDir(m.Registry)
		if err != nil {
			return nil, fmt.Errorf("registryMirrors[%d]: %w", i, err)
		}
		if seen[dir] {
			return nil, fmt.Errorf("registryMirrors[%d]: %w: registry %q is listed twice", i, ErrInvalid, m.Registry)
		}
		seen[dir] = true
		files, err := hostsFiles(dir, m)
		if err != nil {
			return nil, fmt.Errorf("registryMirrors[%d] (%s): %w", i, m.Registry, err)
		}
		for _, f := range files {
			steps = append(steps, provisioning.Step{Description: "write " + f.Path, File: f})
		}
	}
	return steps, nil
}

// registryDir is the registry's folder under HostsDir. The registry is
// a host with an optional port, or DefaultRegistry; nothing that could
// leave the folder.
func registryDir(registry string) (string, error) {
	switch {
	case registry == "" || registry == "." || registry == "..":
		return "", fmt.Errorf("%w: registry %q is not a host", ErrInvalid, registry)
	case strings.ContainsAny(registry, "/\\\x00 \t\n"):
		return "", fmt.Errorf("%w: registry %q is not a host: it holds a path or space", ErrInvalid, registry)
	case registry != strings.ToLower(registry):
		return "", fmt.Errorf("%w: registry %q must be lower case", ErrInvalid, registry)
	}
	return path.Join(HostsDir, registry), nil
}

// hostsFiles renders one registry's folder.
func hostsFiles(dir string, m infrav1.RegistryMirror) ([]*provisioning.File, error) {
	var files []*provisioning.File
	addCA := func(name, bundle string) (string, error) {
		if bundle == "" {
			return "", nil
		}
		if err := checkCABundle(bundle); err != nil {
			return "", err
		}
		p := path.Join(dir, name)
		files = append(files, &provisioning.File{Path: p, Content: []byte(bundle), Mode: 0o644})
		return p, nil
	}

	var root hostsRoot
	if s := m.Server; s != nil {
		if m.Registry == DefaultRegistry {
			return nil, fmt.Errorf("%w: %s has no server", ErrInvalid, DefaultRegistry)
		}
		if err := checkEndpoint(s.URL); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		ca, err := addCA("server.crt", s.CABundle)
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		if ca != "" && s.InsecureSkipVerify {
			return nil, fmt.Errorf("server: %w: caBundle and insecureSkipVerify exclude each other", ErrInvalid)
		}
		root = hostsRoot{Server: s.URL, CA: ca, SkipVerify: s.InsecureSkipVerify, OverridePath: s.OverridePath}
	}
	if len(m.Endpoints) == 0 && m.Server == nil {
		return nil, fmt.Errorf("%w: neither endpoints nor server", ErrInvalid)
	}
	b, err := toml.Marshal(root)
	if err != nil {
		return nil, fmt.Errorf("failed to encode the server of %s: %w", m.Registry, err)
	}
	content := bytes.NewBufferString(hostsHeader)
	content.Write(b)

	seen := map[string]bool{}
	for i, e := range m.Endpoints {
		if err := checkEndpoint(e.URL); err != nil {
			return nil, fmt.Errorf("endpoints[%d]: %w", i, err)
		}
		if seen[e.URL] {
			// A second table of one key is a TOML error: containerd
			// would ignore the whole file.
			return nil, fmt.Errorf("endpoints[%d]: %w: %s is listed twice", i, ErrInvalid, e.URL)
		}
		seen[e.URL] = true
		ca, err := addCA(fmt.Sprintf("mirror-%d.crt", i), e.CABundle)
		if err != nil {
			return nil, fmt.Errorf("endpoints[%d]: %w", i, err)
		}
		if ca != "" && e.InsecureSkipVerify {
			return nil, fmt.Errorf("endpoints[%d]: %w: caBundle and insecureSkipVerify exclude each other", i, ErrInvalid)
		}
		b, err := toml.Marshal(hostsEntry{Capabilities: mirrorCapabilities, CA: ca, SkipVerify: e.InsecureSkipVerify, OverridePath: e.OverridePath})
		if err != nil {
			return nil, fmt.Errorf("failed to encode endpoints[%d] of %s: %w", i, m.Registry, err)
		}
		// containerd tries the mirrors in the order of their tables in the
		// file, and a TOML encoder writes a map's keys sorted: each table's
		// header is written here, the key a TOML literal string, which
		// checkEndpoint made sure the URL can be (no quote, no control
		// character).
		fmt.Fprintf(content, "\n[host.'%s']\n", e.URL)
		content.Write(b)
	}
	files = append(files, &provisioning.File{Path: path.Join(dir, "hosts.toml"), Content: content.Bytes(), Mode: 0o644})
	return files, nil
}

// checkEndpoint accepts an http or https URL of a host, an optional port
// and path: no credentials (they would sit in the ContainerCluster and on
// every node), query or fragment, nor quotes or backslashes, which
// containerd reads back from the table's key as they are written.
func checkEndpoint(raw string) error {
	if strings.ContainsAny(raw, "\"'\\ \t\r\n") {
		return fmt.Errorf("%w: the url holds a quote, backslash or space", ErrInvalid)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: the url does not parse", ErrInvalid)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%w: url %s is not http:// or https://", ErrInvalid, u.Redacted())
	case u.User != nil:
		return fmt.Errorf("%w: url %s holds credentials", ErrInvalid, u.Redacted())
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("%w: url %s has no host", ErrInvalid, u.Redacted())
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "":
		return fmt.Errorf("%w: url %s has a query or fragment", ErrInvalid, u.Redacted())
	}
	return nil
}

// checkCABundle accepts PEM certificates: at least one, and every PEM
// block a certificate that parses. Text around the blocks is ignored, as
// containerd (Go's AppendCertsFromPEM) ignores it; a private key is
// refused, as it would be written to every node.
func checkCABundle(bundle string) error {
	rest := []byte(bundle)
	n := 0
	for {
		block, next := pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return fmt.Errorf("%w: caBundle holds a %q block, not only certificates", ErrInvalid, block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return fmt.Errorf("%w: certificate %d of caBundle does not parse: %w", ErrInvalid, n+1, err)
		}
		n++
		rest = next
	}
	if n == 0 {
		return fmt.Errorf("%w: caBundle holds no PEM certificate", ErrInvalid)
	}
	return nil
}
