package registryconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	toml "github.com/pelletier/go-toml/v2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/provisioning"
)

// testCA returns a PEM CA certificate made for the test.
func testCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test registry CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func mirror(registry string, urls ...string) infrav1.RegistryMirror {
	m := infrav1.RegistryMirror{Registry: registry}
	for _, u := range urls {
		m.Endpoints = append(m.Endpoints, infrav1.RegistryEndpoint{URL: u})
	}
	return m
}

// TestHostsSteps renders containerd's hosts files: one folder per
// registry, the mirrors in order (containerd tries them in the order of
// their tables), the CA files they name, and refuses what cannot be
// written. Every hosts.toml it writes must be TOML that a parser reads
// (a table written twice would make containerd drop the whole file).
func TestHostsSteps(t *testing.T) {
	ca := testCA(t)
	const header = "# Written by CAPCT from the ContainerCluster's spec.registryMirrors\n" +
		"# when this node was made (docs/registries.md).\n"
	type file struct {
		path, content string
		mode          os.FileMode
	}
	for _, tc := range []struct {
		name    string
		mirrors []infrav1.RegistryMirror
		want    []file
		wantErr string
	}{
		{name: "no mirrors, no files"},
		{
			name:    "docker.io at a local mirror",
			mirrors: []infrav1.RegistryMirror{mirror("docker.io", "http://172.18.0.2:5000")},
			want: []file{{path: "/etc/containerd/certs.d/docker.io/hosts.toml", mode: 0o644, content: header + `
[host.'http://172.18.0.2:5000']
capabilities = ['pull', 'resolve']
`}},
		},
		{
			name: "mirrors in order, with a CA, a skipped verification and an overridden path",
			mirrors: []infrav1.RegistryMirror{{Registry: "registry.k8s.io", Endpoints: []infrav1.RegistryEndpoint{
				{URL: "https://mirror-b.example:8443", CABundle: ca},
				{URL: "https://mirror-a.example", InsecureSkipVerify: true},
				{URL: "https://artifacts.example/api/registry", OverridePath: true},
			}}},
			want: []file{
				{path: "/etc/containerd/certs.d/registry.k8s.io/mirror-0.crt", mode: 0o644, content: ca},
				// In the order given, not sorted.
				{path: "/etc/containerd/certs.d/registry.k8s.io/hosts.toml", mode: 0o644, content: header + `
[host.'https://mirror-b.example:8443']
capabilities = ['pull', 'resolve']
ca = '/etc/containerd/certs.d/registry.k8s.io/mirror-0.crt'

[host.'https://mirror-a.example']
capabilities = ['pull', 'resolve']
skip_verify = true

[host.'https://artifacts.example/api/registry']
capabilities = ['pull', 'resolve']
override_path = true
`},
			},
		},
		{
			name: "a private registry at another address with its own CA",
			mirrors: []infrav1.RegistryMirror{{Registry: "registry.internal:5000",
				Server: &infrav1.RegistryEndpoint{URL: "https://10.0.0.5:5000", CABundle: ca}}},
			want: []file{
				{path: "/etc/containerd/certs.d/registry.internal:5000/server.crt", mode: 0o644, content: ca},
				{path: "/etc/containerd/certs.d/registry.internal:5000/hosts.toml", mode: 0o644, content: header +
					"server = 'https://10.0.0.5:5000'\nca = '/etc/containerd/certs.d/registry.internal:5000/server.crt'\n"},
			},
		},
		{
			name: "a mirror and a server",
			mirrors: []infrav1.RegistryMirror{{Registry: "quay.io",
				Endpoints: []infrav1.RegistryEndpoint{{URL: "http://[fd00::5]:5000"}},
				Server:    &infrav1.RegistryEndpoint{URL: "https://quay.example/v2", InsecureSkipVerify: true}}},
			want: []file{{path: "/etc/containerd/certs.d/quay.io/hosts.toml", mode: 0o644, content: header +
				"server = 'https://quay.example/v2'\nskip_verify = true\n\n[host.'http://[fd00::5]:5000']\ncapabilities = ['pull', 'resolve']\n"}},
		},
		{
			name:    "_default for every other registry",
			mirrors: []infrav1.RegistryMirror{mirror("_default", "http://mirror.example")},
			want: []file{{path: "/etc/containerd/certs.d/_default/hosts.toml", mode: 0o644, content: header +
				"\n[host.'http://mirror.example']\ncapabilities = ['pull', 'resolve']\n"}},
		},

		{name: "registry that is a path", mirrors: []infrav1.RegistryMirror{mirror("../../etc", "http://m")}, wantErr: "is not a host"},
		{name: "registry ..", mirrors: []infrav1.RegistryMirror{mirror("..", "http://m")}, wantErr: "is not a host"},
		{name: "registry in upper case", mirrors: []infrav1.RegistryMirror{mirror("Docker.io", "http://m")}, wantErr: "lower case"},
		{name: "registry twice", mirrors: []infrav1.RegistryMirror{mirror("docker.io", "http://a"), mirror("docker.io", "http://b")}, wantErr: "listed twice"},
		{name: "neither endpoints nor server", mirrors: []infrav1.RegistryMirror{{Registry: "docker.io"}}, wantErr: "neither endpoints nor server"},
		{name: "_default with a server", mirrors: []infrav1.RegistryMirror{{Registry: "_default", Server: &infrav1.RegistryEndpoint{URL: "http://m"}}}, wantErr: "_default has no server"},
		{name: "endpoint with credentials", mirrors: []infrav1.RegistryMirror{mirror("docker.io", "https://user:secret@m.example")}, wantErr: "holds credentials"},
		{name: "endpoint ftp", mirrors: []infrav1.RegistryMirror{mirror("docker.io", "ftp://m.example")}, wantErr: "not http:// or https://"},
		{name: "endpoint with a query", mirrors: []infrav1.RegistryMirror{mirror("docker.io", "https://m.example/?x=1")}, wantErr: "query or fragment"},
		{name: "endpoint with a quote", mirrors: []infrav1.RegistryMirror{mirror("docker.io", "http://m.example/']\n[x")}, wantErr: "quote"},
		{name: "endpoint without a host", mirrors: []infrav1.RegistryMirror{mirror("docker.io", "http:///v2")}, wantErr: "no host"},
		{name: "endpoint twice", mirrors: []infrav1.RegistryMirror{mirror("docker.io", "http://m", "http://m")}, wantErr: "listed twice"},
		{name: "CA bundle holding a key", mirrors: []infrav1.RegistryMirror{{Registry: "docker.io", Endpoints: []infrav1.RegistryEndpoint{{URL: "https://m",
			CABundle: ca + "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"}}}}, wantErr: `"EC PRIVATE KEY" block`},
		{name: "CA bundle without a certificate", mirrors: []infrav1.RegistryMirror{{Registry: "docker.io", Endpoints: []infrav1.RegistryEndpoint{{URL: "https://m",
			CABundle: "-----BEGIN CERTIFICATE-----"}}}}, wantErr: "no PEM certificate"},
		{name: "CA bundle whose certificate does not parse", mirrors: []infrav1.RegistryMirror{{Registry: "docker.io", Endpoints: []infrav1.RegistryEndpoint{{URL: "https://m",
			CABundle: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}}}}, wantErr: "certificate 1 of caBundle does not parse"},
		{name: "CA bundle and skip verify", mirrors: []infrav1.RegistryMirror{{Registry: "docker.io", Endpoints: []infrav1.RegistryEndpoint{{URL: "https://m",
			CABundle: ca, InsecureSkipVerify: true}}}}, wantErr: "exclude each other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps, err := HostsSteps(tc.mirrors)
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want an ErrInvalid error with %q, got %v", tc.wantErr, err)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Fatalf("the error names the URL's password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []file
			for _, s := range steps {
				if s.File == nil || s.Command != nil || s.Description != "write "+s.File.Path || s.File.Append || s.File.Owner != "" {
					t.Fatalf("want plain file steps, got %+v", s)
				}
				got = append(got, file{path: s.File.Path, content: string(s.File.Content), mode: s.File.Mode})
				if strings.HasSuffix(s.File.Path, "/hosts.toml") {
					var parsed map[string]any
					if err := toml.Unmarshal(s.File.Content, &parsed); err != nil {
						t.Fatalf("%s is not TOML: %v\n%s", s.File.Path, err, s.File.Content)
					}
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("want %d files, got %d: %+v", len(tc.want), len(got), got)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("file %d:\ngot  %s %o\n%s\nwant %s %o\n%s", i, got[i].path, got[i].mode, got[i].content, tc.want[i].path, tc.want[i].mode, tc.want[i].content)
				}
			}
		})
	}
}

// TestHostsStepsGoFirstInTheScript: the steps render into the bootstrap
// script as plain file writes (provisioning.Script), so a node gets them
// from the same staged run as its bootstrap data.
func TestHostsStepsGoFirstInTheScript(t *testing.T) {
	steps, err := HostsSteps([]infrav1.RegistryMirror{mirror("docker.io", "http://m:5000")})
	if err != nil {
		t.Fatal(err)
	}
	steps = append(steps, provisioning.Step{Command: []string{"kubeadm", "join"}})
	files := provisioning.Script(steps)
	parsed, err := provisioning.ParseScript(files[len(files)-1].Content)
	if err != nil {
		t.Fatal(err)
	}
	if len(parsed) != 2 || parsed[0].File == nil || parsed[0].File.Path != HostsDir+"/docker.io/hosts.toml" || parsed[1].Label != "kubeadm join" {
		t.Fatalf("want the hosts file written before kubeadm, got %+v", parsed)
	}
}
