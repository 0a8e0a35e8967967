//go:build engine

package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/container/runtimetest"
)

// testImage imports a busybox image built from the host's static busybox.
func testImage(t testing.TB, rt *docker.Runtime) string {
	t.Helper()
	ref, err := dockertest.BusyboxImage(context.Background(), rt)
	if err != nil {
		t.Fatalf("building the test image: %v", err)
	}
	return ref
}

func TestSuite(t *testing.T) {
	rt := dockertest.NewRuntime(t)
	runtimetest.RunSuite(t, func(t *testing.T) runtimetest.Runtime { return dockertest.SuiteRuntime{Runtime: rt} }, testImage(t, rt))
}

func TestExecLargeBinaryStdinRoundTrips(t *testing.T) {
	rt := dockertest.NewRuntime(t)
	e := runtimetest.NewEnv(t, rt, testImage(t, rt), container.IPv4)
	m := e.Running(t, "big")
	in := make([]byte, 10<<20)
	_, _ = rand.Read(in)
	// The output comes back whole only under a bound that fits it.
	res, err := rt.Exec(runtimetest.Ctx(t), m.Name, container.OwnerOf(m.Labels), container.ExecInput{Cmd: []string{"cat"}, Stdin: bytes.NewReader(in), MaxOutput: len(in)})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v exit %d stderr %q", err, res.ExitCode, res.Stderr)
	}
	if !bytes.Equal(res.Stdout, in) {
		t.Fatalf("stdout differs: %d bytes back of %d", len(res.Stdout), len(in))
	}
}

func TestExecTimeoutIsPrompt(t *testing.T) {
	rt := dockertest.NewRuntime(t)
	e := runtimetest.NewEnv(t, rt, testImage(t, rt), container.IPv4)
	m := e.Running(t, "slow")
	start := time.Now()
	_, err := rt.Exec(runtimetest.Ctx(t), m.Name, container.OwnerOf(m.Labels), container.ExecInput{Cmd: []string{"sleep", "60"}, Timeout: 500 * time.Millisecond})
	d := time.Since(start)
	if !container.IsTimeout(err) {
		t.Fatalf("want a timeout error, got %v", err)
	}
	if d > 2*time.Second {
		t.Fatalf("returned after %s for a 500ms timeout", d)
	}
	t.Logf("timeout error after %s: %v", d, err)
}

func TestOutOfBandRemovalIsAnEventWithin2s(t *testing.T) {
	rt := dockertest.NewRuntime(t)
	e := runtimetest.NewEnv(t, rt, testImage(t, rt), container.IPv4)
	m := e.Running(t, "oob")
	ctx, cancel := context.WithCancel(runtimetest.Ctx(t))
	defer cancel()
	ch, err := rt.Events(ctx, map[string]string{container.LabelClusterID: e.Owner.ClusterID})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// What `docker rm -f` does, straight through the API.
	if err := rt.Client().ContainerRemove(ctx, m.ID, dcontainer.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(2 * time.Second)
	for {
		select {
		case ev := <-ch:
			if ev.Type == container.EventDestroy && ev.Name == m.Name {
				t.Logf("destroy seen after %s", time.Since(start))
				return
			}
		case <-deadline:
			t.Fatal("no destroy event within 2s")
		}
	}
}

func TestParallelCreatesGetDistinctAddresses(t *testing.T) {
	rt := dockertest.NewRuntime(t)
	e := runtimetest.NewEnv(t, rt, testImage(t, rt), container.IPv4)
	const n = 20
	ctx := runtimetest.Ctx(t)
	addrs := make([]netip.Addr, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s := e.Spec(fmt.Sprintf("p%02d", i))
			if _, err := rt.CreateMachine(ctx, s); err != nil {
				errs[i] = err
				return
			}
			if err := rt.Start(ctx, s.Name, container.OwnerOf(s.Labels)); err != nil {
				errs[i] = err
				return
			}
			m, err := rt.Inspect(ctx, s.Name)
			if err != nil {
				errs[i] = err
				return
			}
			addrs[i] = m.IPv4
		})
	}
	wg.Wait()
	seen := map[netip.Addr]int{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("machine %d: %v", i, errs[i])
		}
		if !e.Network.IPv4Subnet.Contains(addrs[i]) {
			t.Fatalf("machine %d: %v not in %v", i, addrs[i], e.Network.IPv4Subnet)
		}
		if j, dup := seen[addrs[i]]; dup {
			t.Fatalf("machines %d and %d share %v", j, i, addrs[i])
		}
		seen[addrs[i]] = i
	}
}

func TestNodeFlagsLimitsAndPublishedPort(t *testing.T) {
	rt := dockertest.NewRuntime(t)
	e := runtimetest.NewEnv(t, rt, testImage(t, rt), container.IPv4)
	s := e.Spec("cp")
	s.Role = container.RoleControlPlane
	s.Privileged = nil // nodes default to privileged
	s.KindNode = true
	s.Resources = container.Resources{MilliCPUs: 1500, MemoryBytes: 256 << 20}
	s.PortMappings = []container.PortMapping{{ContainerPort: 6443}}
	ctx := runtimetest.Ctx(t)
	if _, err := rt.CreateMachine(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, s.Name, container.OwnerOf(s.Labels)); err != nil {
		t.Fatal(err)
	}
	m, err := rt.Inspect(ctx, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	hp := m.HostPort(6443)
	if hp == 0 {
		t.Fatalf("6443 not published: %+v", m.Ports)
	}
	for _, p := range m.Ports {
		if p.ContainerPort == 6443 && p.HostIP != "127.0.0.1" {
			t.Fatalf("6443 published on %q, want 127.0.0.1", p.HostIP)
		}
	}
	ci, err := rt.Client().ContainerInspect(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	hc := ci.HostConfig
	if hc.NanoCPUs != 1_500_000_000 || hc.Memory != 256<<20 {
		t.Fatalf("limits NanoCPUs=%d Memory=%d", hc.NanoCPUs, hc.Memory)
	}
	if !hc.Privileged || hc.CgroupnsMode != dcontainer.CgroupnsModePrivate || ci.Config.Hostname != s.Name ||
		hc.RestartPolicy.Name != dcontainer.RestartPolicyUnlessStopped {
		t.Fatalf("node flags: privileged=%v cgroupns=%q hostname=%q restart=%+v", hc.Privileged, hc.CgroupnsMode, ci.Config.Hostname, hc.RestartPolicy)
	}
	sec := strings.Join(hc.SecurityOpt, ",")
	if !strings.Contains(sec, "seccomp=unconfined") || !strings.Contains(sec, "apparmor=unconfined") {
		t.Fatalf("security opts %v", hc.SecurityOpt)
	}
	if _, ok := hc.Tmpfs["/run"]; !ok {
		t.Fatalf("tmpfs %v", hc.Tmpfs)
	}
	if _, ok := hc.Tmpfs["/tmp"]; !ok {
		t.Fatalf("tmpfs %v", hc.Tmpfs)
	}
	var anonVar bool
	for _, mt := range ci.Mounts {
		if mt.Destination == "/var" && mt.Type == "volume" {
			anonVar = true
		}
	}
	if !anonVar {
		t.Fatalf("no anonymous volume on /var: %+v", ci.Mounts)
	}
	// The hostname is the machine name inside the container too.
	res, err := rt.Exec(ctx, s.Name, container.OwnerOf(s.Labels), container.ExecInput{Cmd: []string{"hostname"}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != s.Name {
		t.Fatalf("hostname %q %v", res.Stdout, err)
	}
}

func TestDualStackNetwork(t *testing.T) {
	rt := dockertest.NewRuntime(t)
	e := runtimetest.NewEnv(t, rt, testImage(t, rt), container.DualStack)
	if !e.Network.IPv6Subnet.IsValid() || !e.Network.IPv4Subnet.IsValid() {
		t.Fatalf("dual-stack network %+v lacks a family (is IPv6 enabled in the kernel and dockerd?)", e.Network)
	}
	s := e.Spec("v6")
	s.KindNode = true
	s.IPFamily = container.DualStack
	ctx := runtimetest.Ctx(t)
	if _, err := rt.CreateMachine(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, s.Name, container.OwnerOf(s.Labels)); err != nil {
		t.Fatalf("start with IPv6 sysctls: %v", err)
	}
	m, err := rt.Inspect(ctx, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !e.Network.IPv6Subnet.Contains(m.IPv6) || !e.Network.IPv4Subnet.Contains(m.IPv4) {
		t.Fatalf("addresses %v / %v not in %v / %v", m.IPv4, m.IPv6, e.Network.IPv4Subnet, e.Network.IPv6Subnet)
	}
}

func TestImagesSaveLoadExistsAndPreload(t *testing.T) {
	rt := dockertest.NewRuntime(t)
	img := testImage(t, rt)
	ctx := runtimetest.Ctx(t)
	ok, err := rt.ImageExists(ctx, img)
	if err != nil || !ok {
		t.Fatalf("ImageExists(%s) = %v, %v", img, ok, err)
	}
	if ok, err := rt.ImageExists(ctx, "capct-test/does-not-exist:never"); err != nil || ok {
		t.Fatalf("ImageExists(missing) = %v, %v", ok, err)
	}
	rc, err := rt.SaveImages(ctx, []string{img})
	if err != nil {
		t.Fatal(err)
	}
	saved, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil || len(saved) < 1<<20 {
		t.Fatalf("saved %d bytes, %v", len(saved), err)
	}
	if err := rt.LoadImages(ctx, bytes.NewReader(saved)); err != nil {
		t.Fatal(err)
	}
	if err := rt.LoadImages(ctx, strings.NewReader("not a tar")); err == nil {
		t.Fatal("loading garbage succeeded")
	}
	// PreloadImages pipes the save into `ctr ... import -`; the busybox image
	// has no ctr, so the exec must fail with a readable error naming it.
	e := runtimetest.NewEnv(t, rt, img, container.IPv4)
	m := e.Running(t, "preload")
	err = container.PreloadImages(ctx, rt, m.Name, e.Owns("preload"), []string{img})
	if err == nil || !strings.Contains(err.Error(), m.Name) {
		t.Fatalf("preload into a node without ctr: %v", err)
	}
}

// TestFilesOnTmpfsAreVisibleInside writes and reads files under a node's
// tmpfs /run, where the engine's archive API would miss them: bootstrap
// data writes /run/kubeadm/kubeadm.yaml and the sentinel lives in /run.
func TestFilesOnTmpfsAreVisibleInside(t *testing.T) {
	rt := dockertest.NewRuntime(t)
	e := runtimetest.NewEnv(t, rt, testImage(t, rt), container.IPv4)
	s := e.Spec("tmpfs")
	s.KindNode = true
	ctx := runtimetest.Ctx(t)
	if _, err := rt.CreateMachine(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, s.Name, container.OwnerOf(s.Labels)); err != nil {
		t.Fatal(err)
	}
	const p = "/run/kubeadm/kubeadm.yaml"
	if _, err := rt.ReadFile(ctx, s.Name, container.OwnerOf(s.Labels), p); !container.IsNotFound(err) {
		t.Fatalf("want NotFound before the write, got %v", err)
	}
	want := []byte("kind: InitConfiguration\n")
	if err := rt.WriteFile(ctx, s.Name, container.OwnerOf(s.Labels), p, want, 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := rt.Exec(ctx, s.Name, container.OwnerOf(s.Labels), container.ExecInput{Cmd: []string{"sh", "-c", "cat " + p + " && ls -l " + p}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("the container does not see %s: %v %d %s", p, err, res.ExitCode, res.Stderr)
	}
	if !strings.HasPrefix(string(res.Stdout), string(want)) || !strings.Contains(string(res.Stdout), "-rw-------") {
		t.Fatalf("unexpected content or mode inside the container: %q", res.Stdout)
	}
	got, err := rt.ReadFile(ctx, s.Name, container.OwnerOf(s.Labels), p)
	if err != nil || string(got) != string(want) {
		t.Fatalf("ReadFile = %q, %v; want %q", got, err, want)
	}
}

// TestNetworkNeverTakesTheDefaultBridgesSubnet derives a network whose first
// subnet overlaps the engine's default bridge: the engine would drop its
// default bridge for it, so the runtime must pick the next subnet, and
// containers must still start on the default bridge afterwards.
func TestNetworkNeverTakesTheDefaultBridgesSubnet(t *testing.T) {
	rt := dockertest.NewRuntime(t)
	ctx := runtimetest.Ctx(t)
	bridge, err := rt.InspectNetwork(ctx, "bridge")
	if err != nil || !bridge.IPv4Subnet.IsValid() {
		t.Fatalf("the default bridge: %+v, %v", bridge, err)
	}
	suffix := runtimetest.RandomSuffix()
	name := ""
	for i := range 10000 {
		candidate := fmt.Sprintf("capct-bridge-%s-%d", suffix, i)
		if v4, _ := container.Subnets(candidate, 0); v4.Overlaps(bridge.IPv4Subnet) {
			name = candidate
			break
		}
	}
	if name == "" {
		t.Fatal("no name derives a subnet over the default bridge")
	}
	owner := container.Owner{Namespace: "ns", Cluster: name, ClusterID: "id-" + suffix}
	n, err := rt.EnsureNetwork(ctx, container.NetworkSpec{Name: name, Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.DeleteNetwork(context.Background(), name, owner) })
	if n.IPv4Subnet.Overlaps(bridge.IPv4Subnet) {
		t.Fatalf("network %s took %s, over the default bridge's %s", name, n.IPv4Subnet, bridge.IPv4Subnet)
	}
	s := container.MachineSpec{Name: name + "-probe", Image: testImage(t, rt), Network: "bridge",
		Labels: owner.ForMachine("probe").Labels(), Role: container.RoleWorker, Cmd: runtimetest.LoopCmd}
	if _, err := rt.CreateMachine(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Delete(context.Background(), s.Name, owner.ForMachine("probe")) })
	if err := rt.Start(ctx, s.Name, owner.ForMachine("probe")); err != nil {
		t.Fatalf("a container no longer starts on the default bridge: %v", err)
	}
}

// An extra mount's host path is bound as it is, read-only where asked, and a
// missing one is refused with the path named, not made on the host: the
// engine would otherwise create an empty root-owned directory there.
func TestExtraMountsBindExistingHostPathsOnly(t *testing.T) {
	rt := dockertest.NewRuntime(t)
	e := runtimetest.NewEnv(t, rt, testImage(t, rt), container.IPv4)
	ctx := runtimetest.Ctx(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello"), []byte("from the host"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := e.Spec("mounts")
	s.ExtraMounts = []container.Mount{{HostPath: dir, ContainerPath: "/host", ReadOnly: true}}
	if _, err := rt.CreateMachine(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, s.Name, container.OwnerOf(s.Labels)); err != nil {
		t.Fatal(err)
	}
	res, err := rt.Exec(ctx, s.Name, container.OwnerOf(s.Labels), container.ExecInput{Cmd: []string{"cat", "/host/hello"}})
	if err != nil || string(res.Stdout) != "from the host" {
		t.Fatalf("the mount does not show the host's file: %q %v", res.Stdout, err)
	}
	res, err = rt.Exec(ctx, s.Name, container.OwnerOf(s.Labels), container.ExecInput{Cmd: []string{"touch", "/host/new"}})
	if err == nil && res.ExitCode == 0 {
		t.Fatal("a read-only mount took a write")
	}

	missing := filepath.Join(dir, "does", "not", "exist")
	s2 := e.Spec("missing")
	s2.ExtraMounts = []container.Mount{{HostPath: missing, ContainerPath: "/data"}}
	_, err = rt.CreateMachine(ctx, s2)
	if path, ok := container.HostPathNotFound(err); !ok || path != missing {
		t.Fatalf("want HostPathNotFound naming %s, got %q %v", missing, path, err)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("the engine made the missing host path: %v", err)
	}
	if _, err := rt.Inspect(ctx, s2.Name); !container.IsNotFound(err) {
		t.Fatalf("a container was left behind: %v", err)
	}
}

// TestTagImageNeverMovesATag tags a second image under a reference that
// names the test image: it is refused with a conflict, and the tag stays.
func TestTagImageNeverMovesATag(t *testing.T) {
	rt := dockertest.NewRuntime(t)
	ctx := runtimetest.Ctx(t)
	want, err := rt.ImageID(ctx, testImage(t, rt))
	if err != nil {
		t.Fatal(err)
	}
	// A tag of this test's own: the shared test image's must not move
	// even when the test fails.
	img := "capct-rt/mine:" + runtimetest.RandomSuffix()
	if err := rt.TagImage(ctx, want, img); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = rt.Client().ImageRemove(context.Background(), img, image.RemoveOptions{}) })
	// Another image: an empty file system with a label of its own.
	var empty bytes.Buffer
	if err := tar.NewWriter(&empty).Close(); err != nil {
		t.Fatal(err)
	}
	other := "capct-rt/other:" + runtimetest.RandomSuffix()
	rc, err := rt.Client().ImageImport(ctx, image.ImportSource{Source: &empty, SourceName: "-"}, other,
		image.ImportOptions{Changes: []string{"LABEL io.x-k8s.capct.test=" + other}})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(rc)
	_ = rc.Close()
	t.Cleanup(func() { _, _ = rt.Client().ImageRemove(context.Background(), other, image.RemoveOptions{}) })
	otherID, err := rt.ImageID(ctx, other)
	if err != nil || otherID == want {
		t.Fatalf("ImageID(%s) = %q, %v; want another image than %s", other, otherID, err, want)
	}
	if err := rt.TagImage(ctx, otherID, img); !container.IsConflict(err) {
		t.Fatalf("want a conflict moving %s to another image, got %v", img, err)
	}
	if got, err := rt.ImageID(ctx, img); err != nil || got != want {
		t.Fatalf("%s names %q (%v) after the refused tag, want %s", img, got, err, want)
	}
}
