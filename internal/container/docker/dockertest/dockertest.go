// Package dockertest builds the small image that CAPCT's Docker tests run:
// Debian's static busybox on an empty root, imported through the Docker API.
// No registry is reachable on CAPCT's build machines, so test images are
// made from what the machine has. It lives beside the Docker backend because
// that is the only place the Docker client may be imported.
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

// BusyboxPath is where Debian's busybox-static package installs busybox.
const BusyboxPath = "/bin/busybox"

// applets are the commands the image links to busybox.
var applets = []string{"sh", "cat", "sleep", "ip", "echo", "true", "false", "test", "[", "mkdir", "ls",
	"head", "dd", "env", "id", "kill", "wc", "sha256sum", "hostname", "ps", "ping", "nc", "chown", "chmod", "rm"}

// LoopCmd keeps a busybox container running and lets it stop at once on
// SIGTERM; it is the image's default command, as a node image runs systemd.
var LoopCmd = []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done"}

var (
	once     sync.Once
	imageRef string
	imageErr error
)

// BusyboxImage returns the reference of the test image, importing it into
// the engine the first time. The tag is a hash of the busybox binary and the
// image's settings, so a changed input makes a new image.
func BusyboxImage(ctx context.Context, rt *docker.Runtime) (string, error) {
	once.Do(func() { imageRef, imageErr = build(ctx, rt) })
	return imageRef, imageErr
}

func build(ctx context.Context, rt *docker.Runtime) (string, error) {
	bb, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return "", fmt.Errorf("the tests need Debian's static busybox at %s (apt-get install busybox-static): %w", BusyboxPath, err)
	}
	cmd := fmt.Sprintf("CMD [%q, %q, %q]", LoopCmd[0], LoopCmd[1], LoopCmd[2])
	h := sha256.New()
	h.Write(bb)
	h.Write([]byte(strings.Join(applets, " ") + cmd))
	ref := "capct-test/busybox:" + hex.EncodeToString(h.Sum(nil)[:6])
	cli := rt.Client()
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		return ref, nil
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin", "tmp", "etc", "var", "proc", "sys", "dev", "run", "root"} {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode}); err != nil {
			return "", err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bb))}); err != nil {
		return "", err
	}
	if _, err := tw.Write(bb); err != nil {
		return "", err
	}
	for _, a := range applets {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox"}); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: &buf, SourceName: "-"}, ref, image.ImportOptions{
		Changes: []string{`ENV PATH=/bin`, cmd, `LABEL io.x-k8s.capct.test=busybox`},
	})
	if err != nil {
		return "", fmt.Errorf("failed to import test image %s: %w", ref, err)
	}
	defer func() { _ = rc.Close() }()
	if _, err := io.ReadAll(rc); err != nil {
		return "", fmt.Errorf("failed to import test image %s: %w", ref, err)
	}
	return ref, nil
}

// RemoveClusters deletes every container carrying one of the cluster names,
// and the clusters' default networks. Test suites call it after their
// controllers stop, so that nothing they made outlives them, whatever the
// tests left.
func RemoveClusters(ctx context.Context, rt container.Runtime, names []string) {
	for _, name := range names {
		left, err := rt.List(ctx, map[string]string{container.LabelCluster: name})
		if err != nil {
			fmt.Fprintf(os.Stderr, "failed to list the containers of test cluster %s: %v\n", name, err)
		}
		namespaces := map[string]bool{}
		for _, c := range left {
			owner := container.OwnerOf(c.Labels)
			namespaces[owner.Namespace] = true
			_ = rt.Delete(ctx, c.Name, owner)
		}
		// The clusters' default networks carry the same owner labels as
		// their containers; one whose containers are all gone already is
		// left, as the name needs the namespace.
		for ns := range namespaces {
			network := naming.DefaultNetworkName(ns, name)
			if n, err := rt.InspectNetwork(ctx, network); err == nil {
				_ = rt.DeleteNetwork(ctx, network, container.OwnerOf(n.Labels))
			}
		}
	}
}

// NewRuntime returns a Runtime on this machine's engine, the one that
// CAPCT_ENGINE names (Docker when unset, as for the manager), failing the
// test loudly (never skipping it) when the engine does not answer.
func NewRuntime(t testing.TB) *docker.Runtime {
	t.Helper()
	engine, err := container.EngineFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := docker.NewEngine(engine)
	if err != nil {
		t.Fatalf("failed to create the %s client: %v", engine, err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rt.Client().Ping(ctx); err != nil {
		t.Fatalf("%s engine not reachable (run hack/ensure-%s.sh): %v", engine, engine, err)
	}
	return rt
}

// RunForeign starts a container that CAPCT did not make (no CAPCT labels) on
// network, as a user's docker run would, and returns a func removing it.
func RunForeign(ctx context.Context, rt *docker.Runtime, name, network, image string) (remove func(), err error) {
	cli := rt.Client()
	if _, err := cli.ContainerCreate(ctx, &dcontainer.Config{Image: image, Cmd: LoopCmd},
		&dcontainer.HostConfig{NetworkMode: dcontainer.NetworkMode(network)}, nil, nil, name); err != nil {
		return nil, fmt.Errorf("failed to create foreign container %s: %w", name, err)
	}
	remove = func() { _ = cli.ContainerRemove(context.Background(), name, dcontainer.RemoveOptions{Force: true}) }
	if err := cli.ContainerStart(ctx, name, dcontainer.StartOptions{}); err != nil {
		remove()
		return nil, fmt.Errorf("failed to start foreign container %s: %w", name, err)
	}
	return remove, nil
}

// SuiteRuntime is a Docker runtime for runtimetest.RunSuite that can also
// run foreign containers (runtimetest.ForeignRunner).
type SuiteRuntime struct{ *docker.Runtime }

// RunForeign implements runtimetest.ForeignRunner with RunForeign.
func (s SuiteRuntime) RunForeign(ctx context.Context, name, network, image string) (remove func(), err error) {
	return RunForeign(ctx, s.Runtime, name, network, image)
}

// FileMode is the permission bits of path in the container, from the
// engine's archive metadata (what `docker cp` sees), so that it needs no
// tool inside the container; busybox images have no stat.
func FileMode(ctx context.Context, rt *docker.Runtime, name, path string) (os.FileMode, error) {
	st, err := rt.Client().ContainerStatPath(ctx, name, path)
	if err != nil {
		return 0, fmt.Errorf("failed to stat %s in container %s: %w", path, name, err)
	}
	if !st.Mode.IsRegular() {
		return 0, fmt.Errorf("%s in container %s is not a regular file: %s", path, name, st.Mode)
	}
	return st.Mode.Perm(), nil
}

// KillMainProcess kills the container's PID 1 from the host, as a crash
// would, so that only its restart policy can bring it back, and returns
// how often the engine had restarted it before.
func KillMainProcess(ctx context.Context, rt *docker.Runtime, name string) (restarts int, err error) {
	ci, err := rt.Client().ContainerInspect(ctx, name)
	if err != nil {
		return 0, err
	}
	if ci.State == nil || ci.State.Pid == 0 {
		return 0, fmt.Errorf("container %s is not running", name)
	}
	return ci.RestartCount, syscall.Kill(ci.State.Pid, syscall.SIGKILL)
}

// RestartCount is how often the engine restarted the container by its
// restart policy, and its restart policy's name.
func RestartCount(ctx context.Context, rt *docker.Runtime, name string) (int, string, error) {
	ci, err := rt.Client().ContainerInspect(ctx, name)
	if err != nil {
		return 0, "", err
	}
	policy := ""
	if ci.HostConfig != nil {
		policy = string(ci.HostConfig.RestartPolicy.Name)
	}
	return ci.RestartCount, policy, nil
}
