// Package registry runs an image registry for tests: the distribution
// project's server, built from source into capct/registry
// (images/registry/build.sh), started as a container on the local engine
// and published on 127.0.0.1 only, on a port the engine picks, optionally
// behind htpasswd basic authentication. Tests push small images to it
// (Push) and have CAPCT's engines pull them; the container goes at the
// test's cleanup. No registry outside this machine is ever asked: the
// engine reaches the registry on its loopback, which Docker treats as an
// insecure (plain HTTP) registry without being told to. With
// Options.Network the registry is also on a container network, where
// node containers reach it at Registry.NetworkHost (test/mirror: a node's
// containerd pulling through a mirror).
package registry

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	dregistry "github.com/docker/docker/api/types/registry"
	"github.com/docker/go-connections/nat"
	"golang.org/x/crypto/bcrypt"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
)

// Port is the port the registry listens on in its container
// (images/registry/config.yml).
const Port = "5000/tcp"

// callTimeout bounds each engine call the harness makes; pushes of its
// small images and the start of the registry take a second or two.
const callTimeout = time.Minute

// readyTimeout bounds the wait for the registry to answer on its port.
const readyTimeout = 30 * time.Second

// htpasswdPath is where the registry reads its users.
const htpasswdPath = "/etc/distribution/htpasswd"

// Options configure Start.
type Options struct {
	// Username and Password, when Username is set, turn on basic
	// authentication with that one user.
	Username, Password string
	// Env are more of the registry's settings, as REGISTRY_<PATH>=value
	// (e.g. REGISTRY_PROXY_REMOTEURL for a pull-through cache).
	Env []string
	// Network, when set, is a container network the registry joins as
	// well, so that containers on it (a cluster's nodes) reach it at
	// NetworkHost over plain HTTP. The loopback publishing stays: the
	// test's engine pushes through it. The network must exist.
	Network string
}

// Registry is a registry container a test started.
type Registry struct {
	// Host is where the engine and the test reach it: 127.0.0.1:<port>.
	Host string
	// NetworkHost is where containers on Options.Network reach it:
	// <address>:5000, its address there (IPv4, else IPv6 in brackets);
	// empty without Options.Network.
	NetworkHost string
	// Container is the registry container's name.
	Container string
	// Username and Password are its user's; empty when it asks for none.
	Username, Password string

	rt *docker.Runtime
}

var (
	imageOnce sync.Once
	imageRef  string
	imageErr  error
)

// Image builds (or finds cached) capct/registry with
// images/registry/build.sh, once per test binary, and returns its
// reference.
func Image() (string, error) {
	imageOnce.Do(func() { imageRef, imageErr = buildImage() })
	return imageRef, imageErr
}

func buildImage() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("failed to locate the registry package's source")
	}
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "images", "registry", "build.sh")
	cmd := exec.Command(script)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("failed to build the registry image with %s: %w", script, err)
	}
	fields := strings.Fields(string(out))
	if len(fields) == 0 {
		return "", fmt.Errorf("%s printed no image name", script)
	}
	return fields[len(fields)-1], nil
}

// Start runs a registry on rt's engine and removes it at t's cleanup.
func Start(t testing.TB, rt *docker.Runtime, opts Options) *Registry {
	t.Helper()
	ref, err := Image()
	if err != nil {
		t.Fatal(err)
	}
	r := &Registry{Container: "capct-test-registry-" + randomHex(t, 4), Username: opts.Username, Password: opts.Password, rt: rt}
	env := append([]string{}, opts.Env...)
	if opts.Username != "" {
		env = append(env, "REGISTRY_AUTH=htpasswd", "REGISTRY_AUTH_HTPASSWD_REALM=capct-test",
			"REGISTRY_AUTH_HTPASSWD_PATH="+htpasswdPath)
	}
	cli := rt.Client()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, err = cli.ContainerCreate(ctx,
		&dcontainer.Config{Image: ref, Env: env, ExposedPorts: nat.PortSet{Port: {}},
			Labels: map[string]string{"io.x-k8s.capct.test": "registry"}},
		&dcontainer.HostConfig{PortBindings: nat.PortMap{Port: {{HostIP: "127.0.0.1"}}}},
		nil, nil, r.Container)
	if err != nil {
		t.Fatalf("failed to create registry container %s: %v", r.Container, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if err := cli.ContainerRemove(ctx, r.Container, dcontainer.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			t.Errorf("failed to remove registry container %s: %v", r.Container, err)
		}
	})
	if opts.Network != "" {
		// Joined before the start, so that the registry has its address
		// there from its first moment, as a node created on the network does.
		if err := cli.NetworkConnect(ctx, opts.Network, r.Container, nil); err != nil {
			t.Fatalf("failed to connect registry container %s to network %s: %v", r.Container, opts.Network, err)
		}
	}
	if opts.Username != "" {
		if err := r.writeHTPasswd(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := cli.ContainerStart(ctx, r.Container, dcontainer.StartOptions{}); err != nil {
		t.Fatalf("failed to start registry container %s: %v", r.Container, err)
	}
	ci, err := cli.ContainerInspect(ctx, r.Container)
	if err != nil {
		t.Fatalf("failed to inspect registry container %s: %v", r.Container, err)
	}
	bindings := ci.NetworkSettings.Ports[Port]
	if len(bindings) == 0 || bindings[0].HostPort == "" {
		t.Fatalf("registry container %s publishes no port for %s", r.Container, Port)
	}
	r.Host = "127.0.0.1:" + bindings[0].HostPort
	if opts.Network != "" {
		ep := ci.NetworkSettings.Networks[opts.Network]
		addr := ""
		if ep != nil {
			addr = ep.IPAddress
			if addr == "" {
				addr = ep.GlobalIPv6Address
			}
		}
		if addr == "" {
			t.Fatalf("registry container %s has no address on network %s", r.Container, opts.Network)
		}
		r.NetworkHost = net.JoinHostPort(addr, strings.TrimSuffix(Port, "/tcp"))
	}
	if err := r.waitReady(); err != nil {
		t.Fatal(err)
	}
	return r
}

// writeHTPasswd puts the user's bcrypt line into the created container,
// readable by the registry's user.
func (r *Registry) writeHTPasswd(ctx context.Context) error {
	hash, err := bcrypt.GenerateFromPassword([]byte(r.Password), bcrypt.DefaultCost)
	if err != nil {
		return fmt.Errorf("failed to hash the registry's password: %w", err)
	}
	line := []byte(r.Username + ":" + string(hash) + "\n")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(htpasswdPath, "/"), Mode: 0o644, Size: int64(len(line))}); err != nil {
		return err
	}
	if _, err := tw.Write(line); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := r.rt.Client().CopyToContainer(ctx, r.Container, "/", &buf, dcontainer.CopyToContainerOptions{}); err != nil {
		return fmt.Errorf("failed to write the htpasswd file into registry container %s: %w", r.Container, err)
	}
	return nil
}

// waitReady polls the registry's API root until it answers: 200, or 401
// when it asks for credentials.
func (r *Registry) waitReady() error {
	client := &http.Client{Timeout: 2 * time.Second}
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, readyTimeout, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.Host+"/v2/", nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err
			return false, nil
		}
		_ = resp.Body.Close()
		last = fmt.Errorf("status %s", resp.Status)
		return resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized, nil
	})
	if err != nil {
		return fmt.Errorf("registry %s (container %s) did not answer within %s: %w", r.Host, r.Container, readyTimeout, errors.Join(err, last))
	}
	return nil
}

// Auth returns the registry's credentials as an engine presents them;
// nil for a registry that asks for none.
func (r *Registry) Auth() *container.RegistryAuth {
	if r.Username == "" {
		return nil
	}
	return &container.RegistryAuth{ServerAddress: r.Host, Username: r.Username, Password: r.Password}
}

// DockerConfigJSON returns a Docker config.json with the registry's
// credentials, as a kubernetes.io/dockerconfigjson Secret holds it under
// container.DockerConfigJSONKey.
func (r *Registry) DockerConfigJSON(username, password string) []byte {
	auth := base64.StdEncoding.EncodeToString([]byte(username + ":" + password))
	b, _ := json.Marshal(map[string]any{"auths": map[string]any{r.Host: map[string]string{"auth": auth}}})
	return b
}

// Push makes an image of one file, unique to this call, pushes it to the
// registry as repo:tag, and removes it from the engine again, so that
// the engine must pull it to have it. It returns the image's reference.
func (r *Registry) Push(t testing.TB, repo, tag string) string {
	t.Helper()
	ref := r.Host + "/" + repo + ":" + tag
	cli := r.rt.Client()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	content := []byte("capct test image " + randomHex(t, 8) + "\n")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "capct-test", Mode: 0o644, Size: int64(len(content))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(content); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	imported, err := cli.ImageImport(ctx, image.ImportSource{Source: &buf, SourceName: "-"}, ref,
		image.ImportOptions{Changes: []string{"LABEL io.x-k8s.capct.test=registry"}})
	if err == nil {
		err = Drain(imported)
	}
	if err != nil {
		t.Fatalf("failed to make test image %s: %v", ref, err)
	}
	push := image.PushOptions{RegistryAuth: "e30="} // {}: the engine wants a header
	if a := r.Auth(); a != nil {
		if push.RegistryAuth, err = dregistry.EncodeAuthConfig(dregistry.AuthConfig{Username: a.Username, Password: a.Password, ServerAddress: a.ServerAddress}); err != nil {
			t.Fatal(err)
		}
	}
	pushed, err := cli.ImagePush(ctx, ref, push)
	if err == nil {
		err = Drain(pushed)
	}
	if err != nil {
		t.Fatalf("failed to push test image %s: %v", ref, err)
	}
	if _, err := cli.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true}); err != nil {
		t.Fatalf("failed to remove test image %s from the engine after its push: %v", ref, err)
	}
	t.Cleanup(func() { r.RemoveLocal(ref) })
	return ref
}

// RemoveLocal removes ref from the engine, if it holds it, so that what a
// test pulled does not outlive it.
func (r *Registry) RemoveLocal(ref string) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, _ = r.rt.Client().ImageRemove(ctx, ref, image.RemoveOptions{Force: true, PruneChildren: true})
}

// Drain reads an engine's JSON message stream (an image push, load or
// pull) to its end and returns the first error it carries.
func Drain(rc io.ReadCloser) error {
	defer func() { _ = rc.Close() }()
	dec := json.NewDecoder(rc)
	for {
		var msg struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if msg.Error != "" {
			return errors.New(msg.Error)
		}
	}
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
