// Package runtimetest is the behaviour suite every container.Runtime must
// pass. The Docker runtime runs it against a real engine and the fake runs it
// in memory, so the fake cannot drift from the real thing.
package runtimetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// LoopCmd keeps a busybox container running and lets it stop at once on
// SIGTERM.
var LoopCmd = []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done"}

// Runtime is what the behaviour suite drives: the runtime seam, and Stop,
// which CAPCT's controllers never call (a machine is deleted, never
// stopped) but which the suite needs to act as the engine or a user would
// and to check that Stop, too, refuses another owner's container.
type Runtime interface {
	container.Runtime
	// Stop stops the container, killing it after timeout. Stopping a
	// stopped container is not an error.
	Stop(ctx context.Context, name string, owner container.Owner, timeout time.Duration) error
}

// ForeignRunner is what a suite runtime implements when it can run a
// container that CAPCT did not make (no CAPCT labels), as a user's docker
// run would; the suite then checks that every call refuses it. The suite
// skips those checks for runtimes that cannot.
type ForeignRunner interface {
	// RunForeign starts the container name on network and returns a func
	// removing it.
	RunForeign(ctx context.Context, name, network, image string) (remove func(), err error)
}

// Env is what a suite run made for itself.
type Env struct {
	RT Runtime
	// Prefix starts the names of everything the run makes.
	Prefix string
	// Owner is the run's cluster (no machine); Spec gives its machines.
	Owner   container.Owner
	Network container.Network
	Image   string
}

// Owns returns the owner of machine's container.
func (e *Env) Owns(machine string) container.Owner { return e.Owner.ForMachine(machine) }

// Spec returns a MachineSpec for machine on the suite's network, owned by
// the suite's cluster.
func (e *Env) Spec(machine string) container.MachineSpec {
	priv := false
	return container.MachineSpec{
		Name:       e.Prefix + "-" + machine,
		Image:      e.Image,
		Network:    e.Network.Name,
		Labels:     e.Owns(machine).Labels(),
		Role:       container.RoleWorker,
		Privileged: &priv,
		Cmd:        LoopCmd,
	}
}

// Running creates and starts machine and registers nothing: the suite's
// cleanup deletes all it owns.
func (e *Env) Running(t *testing.T, machine string) *container.Machine {
	t.Helper()
	ctx := Ctx(t)
	if _, err := e.RT.CreateMachine(ctx, e.Spec(machine)); err != nil {
		t.Fatalf("CreateMachine: %v", err)
	}
	if err := e.RT.Start(ctx, e.Spec(machine).Name, e.Owns(machine)); err != nil {
		t.Fatalf("Start: %v", err)
	}
	m, err := e.RT.Inspect(ctx, e.Spec(machine).Name)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	return m
}

// Ctx returns a context ending with the test or after a minute.
func Ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// RandomSuffix returns 8 random hex characters.
func RandomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NewEnv makes a network with unique names and a cleanup that deletes only
// what this run's cluster owns, then the network.
func NewEnv(t *testing.T, rt Runtime, image string, family container.IPFamily) *Env {
	t.Helper()
	suffix := RandomSuffix()
	e := &Env{RT: rt, Prefix: "capct-rt-" + suffix, Image: image,
		Owner: container.Owner{Namespace: "ns-" + suffix, Cluster: "capct-rt-" + suffix, ClusterID: "id-" + suffix}}
	ctx := Ctx(t)
	n, err := rt.EnsureNetwork(ctx, container.NetworkSpec{Name: e.Prefix, Owner: e.Owner, IPFamily: family})
	if err != nil {
		t.Fatalf("EnsureNetwork: %v", err)
	}
	e.Network = n
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ms, err := container.ListOwned(ctx, rt, e.Owner, nil)
		if err != nil {
			t.Errorf("cleanup: %v", err)
		}
		for _, m := range ms {
			if err := rt.Delete(ctx, m.Name, e.Owns(m.Labels[container.LabelMachine])); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		if err := rt.DeleteNetwork(ctx, n.Name, e.Owner); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return e
}

// RunSuite runs the behaviours against runtimes made by newRuntime, running
// containers of image (which must provide busybox-style sh, sleep, cat, true,
// false and echo).
func RunSuite(t *testing.T, newRuntime func(t *testing.T) Runtime, image string) {
	rt := newRuntime(t)
	e := NewEnv(t, rt, image, container.IPv4)

	tests := []struct {
		name string
		run  func(t *testing.T, e *Env)
	}{
		{"InfoSaysWhatTheEngineIs", infoSaysWhatTheEngineIs},
		{"ImagesLoadFromTheArchiveTheySavedTo", imagesLoadFromTheArchiveTheySavedTo},
		{"ImagesCopyByIDAndAreTaggedAfter", imagesCopyByIDAndAreTaggedAfter},
		{"EnsureNetworkTwiceGivesTheSameNetwork", ensureNetworkTwiceGivesTheSameNetwork},
		{"EnsureNetworkWithForeignLabelsConflicts", ensureNetworkWithForeignLabelsConflicts},
		{"OnlyAnOverlayIsEncrypted", onlyAnOverlayIsEncrypted},
		{"DeleteNetworkOfAnotherOwnerIsRefused", deleteNetworkOfAnotherOwnerIsRefused},
		{"LocalSubnetsShowABridgeWhileItExists", localSubnetsShowABridgeWhileItExists},
		{"MutatingCallsOfAnotherOwnerAreRefused", mutatingCallsOfAnotherOwnerAreRefused},
		{"ReadFileOfAnotherOwnerIsRefused", readFileOfAnotherOwnerIsRefused},
		{"CallsOnAContainerCAPCTDidNotMakeAreRefused", callsOnAContainerCAPCTDidNotMakeAreRefused},
		{"InspectNetworkIgnoresOwnership", inspectNetworkIgnoresOwnership},
		{"CreateTwiceAdopts", createTwiceAdopts},
		{"SameNameForeignLabelsConflicts", sameNameForeignLabelsConflicts},
		{"StartInspectShowsRunningWithAnAddressInTheSubnet", startInspectShowsRunningWithAnAddressInTheSubnet},
		{"EngineAddressesComeFromTheDynamicRangeAndShowAsEndpoints", engineAddressesComeFromTheDynamicRangeAndShowAsEndpoints},
		{"StaticAddressIsKeptAndReportedWhileStopped", staticAddressIsKeptAndReportedWhileStopped},
		{"StaticAddressHeldByAnotherIsInUse", staticAddressHeldByAnotherIsInUse},
		{"DualStackStaticAddresses", dualStackStaticAddresses},
		{"FixedHostPortsArePublishedAndReported", fixedHostPortsArePublishedAndReported},
		{"HostPortHeldByAnotherIsHostPortInUse", hostPortHeldByAnotherIsHostPortInUse},
		{"ExecExitCodesAndOutput", execExitCodesAndOutput},
		{"ExecTimeoutIsTyped", execTimeoutIsTyped},
		{"WriteThenReadFile", writeThenReadFile},
		{"DeleteIsIdempotentAndInspectAfterIsNotFound", deleteIsIdempotentAndInspectAfterIsNotFound},
		{"StopThenInspectShowsExited", stopThenInspectShowsExited},
		{"RestartMovesStarted", restartMovesStarted},
		{"ListByLabelsReturnsOnlyOwned", listByLabelsReturnsOnlyOwned},
		{"ListOwnedRefusesAnIncompleteOwner", listOwnedRefusesAnIncompleteOwner},
		{"EventsForStartDieDestroy", eventsForStartDieDestroy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, e)
		})
	}
}

func infoSaysWhatTheEngineIs(t *testing.T, e *Env) {
	info, err := e.RT.Info(Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.Version == "" {
		t.Fatalf("the engine reports no version: %+v", info)
	}
	if info.Swarm != nil && info.Swarm.NodeID == "" {
		t.Fatalf("the engine is in a swarm without a node ID: %+v", *info.Swarm)
	}
}

func imagesLoadFromTheArchiveTheySavedTo(t *testing.T, e *Env) {
	// How an image goes to an engine that lacks it: the archive
	// SaveImages streams is one LoadImages takes.
	ctx := Ctx(t)
	saved, err := e.RT.SaveImages(ctx, []string{e.Image})
	if err != nil {
		t.Fatal(err)
	}
	archive, err := io.ReadAll(saved)
	_ = saved.Close()
	if err != nil || len(archive) == 0 {
		t.Fatalf("reading the archive of %s: %d bytes, %v", e.Image, len(archive), err)
	}
	if err := e.RT.LoadImages(ctx, bytes.NewReader(archive)); err != nil {
		t.Fatalf("loading the archive of %s: %v", e.Image, err)
	}
	if ok, err := e.RT.ImageExists(ctx, e.Image); err != nil || !ok {
		t.Fatalf("after the load ImageExists(%s) = %v, %v", e.Image, ok, err)
	}
	if err := e.RT.LoadImages(ctx, strings.NewReader("not an image archive")); err == nil {
		t.Fatal("loading something that is not an archive succeeded")
	}
}

func imagesCopyByIDAndAreTaggedAfter(t *testing.T, e *Env) {
	// How imagecopy pins a copy to the image's content: save by
	// ID, load, find the ID, then tag.
	ctx := Ctx(t)
	id, err := e.RT.ImageID(ctx, e.Image)
	if err != nil || !strings.HasPrefix(id, "sha256:") {
		t.Fatalf("ImageID(%s) = %q, %v; want a sha256 digest", e.Image, id, err)
	}
	if _, err := e.RT.ImageID(ctx, "capct-rt/missing:"+RandomSuffix()); !container.IsNotFound(err) {
		t.Fatalf("want not-found for a missing image, got %v", err)
	}
	saved, err := e.RT.SaveImages(ctx, []string{id})
	if err != nil {
		t.Fatal(err)
	}
	archive, err := io.ReadAll(saved)
	_ = saved.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.RT.LoadImages(ctx, bytes.NewReader(archive)); err != nil {
		t.Fatalf("loading the archive of %s: %v", id, err)
	}
	if got, err := e.RT.ImageID(ctx, id); err != nil || got != id {
		t.Fatalf("after the load ImageID(%s) = %q, %v", id, got, err)
	}
	// Named after the image, so that runs leave one tag at most.
	ref := "capct-rt/pinned:" + strings.TrimPrefix(id, "sha256:")[:12]
	for range 2 { // tagging the image the ref names already is no error
		if err := e.RT.TagImage(ctx, id, ref); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := e.RT.ImageID(ctx, ref); err != nil || got != id {
		t.Fatalf("after the tag ImageID(%s) = %q, %v; want %s", ref, got, err, id)
	}
	missing := "sha256:" + strings.Repeat("0", 64)
	if err := e.RT.TagImage(ctx, missing, "capct-rt/missing:"+RandomSuffix()); !container.IsNotFound(err) {
		t.Fatalf("want not-found for tagging a missing image, got %v", err)
	}
}

func ensureNetworkTwiceGivesTheSameNetwork(t *testing.T, e *Env) {
	n, err := e.RT.EnsureNetwork(Ctx(t), container.NetworkSpec{Name: e.Network.Name, Owner: e.Owner})
	if err != nil {
		t.Fatal(err)
	}
	if n.ID != e.Network.ID || n.IPv4Subnet != e.Network.IPv4Subnet {
		t.Fatalf("got %+v, want %+v", n, e.Network)
	}
	v4, _ := container.Subnets(e.Network.Name, 0)
	found := false
	for a := range container.MaxSubnetAttempts {
		if c, _ := container.Subnets(e.Network.Name, a); c == n.IPv4Subnet {
			found = true
		}
	}
	if !found {
		t.Fatalf("subnet %s is not derived from the name (attempt 0 would be %s)", n.IPv4Subnet, v4)
	}
}

func ensureNetworkWithForeignLabelsConflicts(t *testing.T, e *Env) {
	for _, other := range foreignOwners(e.Owner) {
		_, err := e.RT.EnsureNetwork(Ctx(t), container.NetworkSpec{Name: e.Network.Name, Owner: other})
		if !container.IsConflict(err) || !strings.Contains(err.Error(), e.Network.Name) {
			t.Fatalf("owner %s: want a conflict naming %q, got %v", other, e.Network.Name, err)
		}
	}
}

func onlyAnOverlayIsEncrypted(t *testing.T, e *Env) {
	// A bridge never leaves its host: asking to encrypt one is a
	// mistake to report, not to ignore.
	_, err := e.RT.EnsureNetwork(Ctx(t), container.NetworkSpec{Name: e.Prefix + "-encrypted", Owner: e.Owner, Encrypted: true})
	if !container.IsInvalid(err) {
		t.Fatalf("want an invalid-argument error for an encrypted bridge, got %v", err)
	}
}

func deleteNetworkOfAnotherOwnerIsRefused(t *testing.T, e *Env) {
	for _, other := range foreignOwners(e.Owner) {
		if err := e.RT.DeleteNetwork(Ctx(t), e.Network.Name, other); !container.IsConflict(err) {
			t.Fatalf("owner %s: want a conflict, got %v", other, err)
		}
	}
	if _, err := e.RT.InspectNetwork(Ctx(t), e.Network.Name); err != nil {
		t.Fatalf("the network must still be there: %v", err)
	}
}

// localSubnetsShowABridgeWhileItExists checks what a new overlay is kept
// clear of: a bridge network's subnet is among the engine's local subnets
// once it is made, and no longer once it is deleted.
func localSubnetsShowABridgeWhileItExists(t *testing.T, e *Env) {
	ctx := Ctx(t)
	name := e.Prefix + "-local"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.RT.DeleteNetwork(ctx, name, e.Owner); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	n, err := e.RT.EnsureNetwork(ctx, container.NetworkSpec{Name: name, Owner: e.Owner})
	if err != nil {
		t.Fatal(err)
	}
	has := func() bool {
		t.Helper()
		subnets, err := e.RT.LocalSubnets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(subnets, n.IPv4Subnet)
	}
	if !has() {
		t.Fatalf("the bridge %s's subnet %s is not among the engine's local subnets", name, n.IPv4Subnet)
	}
	if err := e.RT.DeleteNetwork(ctx, name, e.Owner); err != nil {
		t.Fatal(err)
	}
	if has() {
		t.Fatalf("the subnet %s of the deleted bridge %s is still among the engine's local subnets", n.IPv4Subnet, name)
	}
}

func mutatingCallsOfAnotherOwnerAreRefused(t *testing.T, e *Env) {
	m := e.Running(t, "guarded")
	ctx := Ctx(t)
	for _, other := range append(foreignOwners(e.Owns("guarded")), e.Owns("another-machine"), e.Owner) {
		calls := map[string]error{
			"Start":     e.RT.Start(ctx, m.Name, other),
			"Stop":      e.RT.Stop(ctx, m.Name, other, time.Second),
			"Signal":    e.RT.Signal(ctx, m.Name, other, "SIGHUP"),
			"WriteFile": e.RT.WriteFile(ctx, m.Name, other, "/written-by-another", []byte("x"), 0o644),
			"Delete":    e.RT.Delete(ctx, m.Name, other),
		}
		_, calls["Exec"] = e.RT.Exec(ctx, m.Name, other, container.ExecInput{Cmd: []string{"touch", "/exec-by-another"}})
		for call, err := range calls {
			if !container.IsConflict(err) || !strings.Contains(err.Error(), m.Name) {
				t.Errorf("%s as %s: want a conflict naming %q, got %v", call, other, m.Name, err)
			}
		}
	}
	got, err := e.RT.Inspect(ctx, m.Name)
	if err != nil || got.State != container.StateRunning || got.ID != m.ID {
		t.Fatalf("the container must be untouched and running: %+v, %v", got, err)
	}
	for _, p := range []string{"/written-by-another", "/exec-by-another"} {
		if _, err := e.RT.ReadFile(ctx, m.Name, e.Owns("guarded"), p); !container.IsNotFound(err) {
			t.Fatalf("%s must not exist: %v", p, err)
		}
	}
}

// readFileOfAnotherOwnerIsRefused: a machine's files (its bootstrap marks
// and output, which may hold what its bootstrap data printed) are read only
// by a caller that names the machine's own owner; another cluster's,
// another machine's and the cluster's own owner without the machine get a
// conflict and no bytes, on a running container and on a stopped one.
func readFileOfAnotherOwnerIsRefused(t *testing.T, e *Env) {
	m := e.Running(t, "read-guarded")
	ctx := Ctx(t)
	const p = "/etc/capct/owned"
	content := []byte("for read-guarded only")
	if err := e.RT.WriteFile(ctx, m.Name, e.Owns("read-guarded"), p, content, 0o600); err != nil {
		t.Fatal(err)
	}
	others := append(foreignOwners(e.Owns("read-guarded")), e.Owns("another-machine"), e.Owner, container.Owner{})
	check := func(state string) {
		t.Helper()
		for _, other := range others {
			b, err := e.RT.ReadFile(ctx, m.Name, other, p)
			if !container.IsConflict(err) || !strings.Contains(err.Error(), m.Name) || b != nil {
				t.Errorf("%s, as %s: want a conflict naming %q and no bytes, got %q, %v", state, other, m.Name, b, err)
			}
		}
		if got, err := e.RT.ReadFile(ctx, m.Name, e.Owns("read-guarded"), p); err != nil || !bytes.Equal(got, content) {
			t.Fatalf("%s, as its owner: read %q, %v", state, got, err)
		}
	}
	check("running")
	if err := e.RT.Stop(ctx, m.Name, e.Owns("read-guarded"), time.Second); err != nil {
		t.Fatal(err)
	}
	check("stopped")
}

func callsOnAContainerCAPCTDidNotMakeAreRefused(t *testing.T, e *Env) {
	runner, ok := e.RT.(ForeignRunner)
	if !ok {
		t.Skip("the runtime cannot run a foreign container")
	}
	ctx := Ctx(t)
	name := e.Prefix + "-not-capct"
	remove, err := runner.RunForeign(ctx, name, e.Network.Name, e.Image)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	_, readErr := e.RT.ReadFile(ctx, name, e.Owns("foreign"), "/etc/hostname")
	calls := map[string]error{
		"ReadFile":  readErr,
		"WriteFile": e.RT.WriteFile(ctx, name, e.Owns("foreign"), "/written-by-capct", []byte("x"), 0o644),
		"Signal":    e.RT.Signal(ctx, name, e.Owns("foreign"), "SIGHUP"),
		"Delete":    e.RT.Delete(ctx, name, e.Owns("foreign")),
	}
	_, calls["Exec"] = e.RT.Exec(ctx, name, e.Owns("foreign"), container.ExecInput{Cmd: []string{"true"}})
	for call, err := range calls {
		if !container.IsConflict(err) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: want a conflict naming %q, got %v", call, name, err)
		}
	}
	if m, err := e.RT.Inspect(ctx, name); err != nil || m.State != container.StateRunning {
		t.Fatalf("the foreign container must be untouched and running: %+v, %v", m, err)
	}
}

func inspectNetworkIgnoresOwnership(t *testing.T, e *Env) {
	n, err := e.RT.InspectNetwork(Ctx(t), e.Network.Name)
	if err != nil {
		t.Fatal(err)
	}
	if n.ID != e.Network.ID || n.IPv4Subnet != e.Network.IPv4Subnet {
		t.Fatalf("got %+v, want %+v", n, e.Network)
	}
	_, err = e.RT.InspectNetwork(Ctx(t), e.Network.Name+"-missing")
	if !container.IsNotFound(err) {
		t.Fatalf("want not-found for a missing network, got %v", err)
	}
}

func createTwiceAdopts(t *testing.T, e *Env) {
	ctx := Ctx(t)
	a, err := e.RT.CreateMachine(ctx, e.Spec("adopt"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.RT.CreateMachine(ctx, e.Spec("adopt"))
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == "" || a.ID != b.ID {
		t.Fatalf("second create gave %q, first %q", b.ID, a.ID)
	}
	if !e.Owns("adopt").Owns(a.Labels) || a.Labels[container.LabelRole] != string(container.RoleWorker) {
		t.Fatalf("labels %v", a.Labels)
	}
}

func sameNameForeignLabelsConflicts(t *testing.T, e *Env) {
	ctx := Ctx(t)
	if _, err := e.RT.CreateMachine(ctx, e.Spec("foreign")); err != nil {
		t.Fatal(err)
	}
	for _, other := range foreignOwners(e.Owns("foreign")) {
		s := e.Spec("foreign")
		s.Labels = other.Labels()
		_, err := e.RT.CreateMachine(ctx, s)
		if !container.IsConflict(err) {
			t.Fatalf("owner %s: want conflict, got %v", other, err)
		}
		if !strings.Contains(err.Error(), s.Name) || !strings.Contains(err.Error(), other.String()) {
			t.Fatalf("message should name the container and the wanted owner: %v", err)
		}
	}
}

func startInspectShowsRunningWithAnAddressInTheSubnet(t *testing.T, e *Env) {
	m := e.Running(t, "running")
	if m.State != container.StateRunning {
		t.Fatalf("state %q", m.State)
	}
	if !m.IPv4.IsValid() || !e.Network.IPv4Subnet.Contains(m.IPv4) {
		t.Fatalf("address %v not in %v", m.IPv4, e.Network.IPv4Subnet)
	}
	if m.Network != e.Network.Name || m.Created.IsZero() || m.Image != e.Image {
		t.Fatalf("machine %+v", m)
	}
}

func engineAddressesComeFromTheDynamicRangeAndShowAsEndpoints(t *testing.T, e *Env) {
	if want := container.DynamicRange(e.Network.IPv4Subnet); e.Network.DynamicIPv4Range != want {
		t.Fatalf("dynamic range %v, want %v", e.Network.DynamicIPv4Range, want)
	}
	if e.Network.IPv4Gateway != container.Gateway(e.Network.IPv4Subnet) {
		t.Fatalf("gateway %v", e.Network.IPv4Gateway)
	}
	m := e.Running(t, "dynamic")
	if !e.Network.DynamicIPv4Range.Contains(m.IPv4) || m.StaticIPv4.IsValid() {
		t.Fatalf("address %v (static %v) not from the dynamic range %v", m.IPv4, m.StaticIPv4, e.Network.DynamicIPv4Range)
	}
	n, err := e.RT.InspectNetwork(Ctx(t), e.Network.Name)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ep := range n.Endpoints {
		found = found || ep.Name == m.Name && ep.IPv4 == m.IPv4
	}
	if !found {
		t.Fatalf("endpoints %+v lack %s on %s", n.Endpoints, m.Name, m.IPv4)
	}
}

func staticAddressIsKeptAndReportedWhileStopped(t *testing.T, e *Env) {
	ctx := Ctx(t)
	s := e.Spec("static")
	s.StaticIPv4 = nthAddr(e.Network.IPv4Subnet, 10)
	s.PortMappings = []container.PortMapping{{ContainerPort: 6443}}
	if _, err := e.RT.CreateMachine(ctx, s); err != nil {
		t.Fatal(err)
	}
	check := func(when string, running bool) {
		t.Helper()
		m, err := e.RT.Inspect(ctx, s.Name)
		if err != nil {
			t.Fatal(err)
		}
		if m.StaticIPv4 != s.StaticIPv4 {
			t.Fatalf("%s: Inspect reports static address %v, want %v", when, m.StaticIPv4, s.StaticIPv4)
		}
		if running && m.IPv4 != s.StaticIPv4 {
			t.Fatalf("%s: runs on %v, want %v", when, m.IPv4, s.StaticIPv4)
		}
		if len(m.PortMappings) != 1 || m.PortMappings[0].ContainerPort != 6443 || m.PortMappings[0].HostPort != 0 || m.PortMappings[0].HostIP != "127.0.0.1" {
			t.Fatalf("%s: configured ports %+v", when, m.PortMappings)
		}
		ms, err := e.RT.List(ctx, map[string]string{container.LabelClusterID: e.Owner.ClusterID, container.LabelMachine: "static"})
		if err != nil || len(ms) != 1 || ms[0].StaticIPv4 != s.StaticIPv4 {
			t.Fatalf("%s: List gave %+v, %v", when, ms, err)
		}
	}
	check("created", false)
	if err := e.RT.Start(ctx, s.Name, container.OwnerOf(s.Labels)); err != nil {
		t.Fatal(err)
	}
	check("running", true)
	if err := e.RT.Stop(ctx, s.Name, container.OwnerOf(s.Labels), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	check("stopped", false)
	if err := e.RT.Start(ctx, s.Name, container.OwnerOf(s.Labels)); err != nil {
		t.Fatal(err)
	}
	check("started again", true)
}

func staticAddressHeldByAnotherIsInUse(t *testing.T, e *Env) {
	ctx := Ctx(t)
	addr := nthAddr(e.Network.IPv4Subnet, 20)
	for i, machine := range []string{"holder", "taker"} {
		s := e.Spec(machine)
		s.StaticIPv4 = addr
		if _, err := e.RT.CreateMachine(ctx, s); err != nil {
			t.Fatal(err)
		}
		err := e.RT.Start(ctx, s.Name, container.OwnerOf(s.Labels))
		if i == 0 && err != nil {
			t.Fatal(err)
		}
		if i == 1 && !container.IsInUse(err) {
			t.Fatalf("starting a second container on %s: want in-use, got %v", addr, err)
		}
	}
}

func dualStackStaticAddresses(t *testing.T, e *Env) {
	ctx := Ctx(t)
	ds := NewEnv(t, e.RT, e.Image, container.DualStack)
	if !ds.Network.IPv6Subnet.IsValid() || ds.Network.DynamicIPv6Range != container.DynamicRange(ds.Network.IPv6Subnet) {
		t.Fatalf("network %+v", ds.Network)
	}
	s := ds.Spec("static")
	s.StaticIPv4, s.StaticIPv6 = nthAddr(ds.Network.IPv4Subnet, 5), nthAddr(ds.Network.IPv6Subnet, 5)
	if _, err := ds.RT.CreateMachine(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := ds.RT.Start(ctx, s.Name, container.OwnerOf(s.Labels)); err != nil {
		t.Fatal(err)
	}
	m, err := ds.RT.Inspect(ctx, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	if m.IPv4 != s.StaticIPv4 || m.IPv6 != s.StaticIPv6 || m.StaticIPv4 != s.StaticIPv4 || m.StaticIPv6 != s.StaticIPv6 {
		t.Fatalf("runs on %v %v, static %v %v; want %v %v", m.IPv4, m.IPv6, m.StaticIPv4, m.StaticIPv6, s.StaticIPv4, s.StaticIPv6)
	}
}

func execExitCodesAndOutput(t *testing.T, e *Env) {
	m := e.Running(t, "exec")
	ctx := Ctx(t)
	for _, c := range []struct {
		cmd  []string
		code int
	}{{[]string{"true"}, 0}, {[]string{"false"}, 1}, {[]string{"sh", "-c", "exit 7"}, 7}} {
		res, err := e.RT.Exec(ctx, m.Name, e.Owns(m.Labels[container.LabelMachine]), container.ExecInput{Cmd: c.cmd})
		if err != nil || res.ExitCode != c.code {
			t.Fatalf("%v: exit %d, err %v; want %d", c.cmd, res.ExitCode, err, c.code)
		}
	}
	res, err := e.RT.Exec(ctx, m.Name, e.Owns(m.Labels[container.LabelMachine]), container.ExecInput{Cmd: []string{"echo", "hello"}})
	if err != nil || string(res.Stdout) != "hello\n" || len(res.Stderr) != 0 {
		t.Fatalf("echo: %q %q %v", res.Stdout, res.Stderr, err)
	}
	res, err = e.RT.Exec(ctx, m.Name, e.Owns(m.Labels[container.LabelMachine]), container.ExecInput{Cmd: []string{"cat", "/does/not/exist"}})
	if err != nil || res.ExitCode == 0 || len(res.Stderr) == 0 || len(res.Stdout) != 0 {
		t.Fatalf("cat missing: %d %q %q %v", res.ExitCode, res.Stdout, res.Stderr, err)
	}
	res, err = e.RT.Exec(ctx, m.Name, e.Owns(m.Labels[container.LabelMachine]), container.ExecInput{Cmd: []string{"cat"}, Stdin: strings.NewReader("from stdin")})
	if err != nil || string(res.Stdout) != "from stdin" {
		t.Fatalf("cat stdin: %q %v", res.Stdout, err)
	}
}

func execTimeoutIsTyped(t *testing.T, e *Env) {
	m := e.Running(t, "timeout")
	start := time.Now()
	_, err := e.RT.Exec(Ctx(t), m.Name, e.Owns(m.Labels[container.LabelMachine]), container.ExecInput{Cmd: []string{"sleep", "30"}, Timeout: 300 * time.Millisecond})
	if !container.IsTimeout(err) || !strings.Contains(err.Error(), m.Name) {
		t.Fatalf("want a timeout naming %q, got %v", m.Name, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timeout took %s", d)
	}
}

func writeThenReadFile(t *testing.T, e *Env) {
	m := e.Running(t, "files")
	ctx := Ctx(t)
	content := []byte("kind: Config\n\x00\xffbinary")
	if err := e.RT.WriteFile(ctx, m.Name, e.Owns("files"), "/etc/capct/deep/dir/config.yaml", content, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := e.RT.ReadFile(ctx, m.Name, e.Owns("files"), "/etc/capct/deep/dir/config.yaml")
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("read %q, %v", got, err)
	}
	res, err := e.RT.Exec(ctx, m.Name, e.Owns(m.Labels[container.LabelMachine]), container.ExecInput{Cmd: []string{"cat", "/etc/capct/deep/dir/config.yaml"}})
	if err != nil || !bytes.Equal(res.Stdout, content) {
		t.Fatalf("cat gave %q, %v", res.Stdout, err)
	}
	res, err = e.RT.Exec(ctx, m.Name, e.Owns(m.Labels[container.LabelMachine]), container.ExecInput{Cmd: []string{"test", "-f", "/etc/capct/deep/dir/config.yaml"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("test -f: %d %v", res.ExitCode, err)
	}
	if _, err := e.RT.ReadFile(ctx, m.Name, e.Owns("files"), "/etc/capct/missing"); !container.IsNotFound(err) {
		t.Fatalf("want not found, got %v", err)
	}
}

func deleteIsIdempotentAndInspectAfterIsNotFound(t *testing.T, e *Env) {
	m := e.Running(t, "delete")
	ctx := Ctx(t)
	for range 2 {
		if err := e.RT.Delete(ctx, m.Name, e.Owns("delete")); err != nil {
			t.Fatal(err)
		}
	}
	_, err := e.RT.Inspect(ctx, m.Name)
	if !container.IsNotFound(err) || !strings.Contains(err.Error(), `inspect container "`+m.Name+`"`) {
		t.Fatalf("want not found naming the container, got %v", err)
	}
	if err := e.RT.Start(ctx, m.Name, e.Owns("delete")); !container.IsNotFound(err) {
		t.Fatalf("start after delete: %v", err)
	}
}

func stopThenInspectShowsExited(t *testing.T, e *Env) {
	m := e.Running(t, "stop")
	ctx := Ctx(t)
	if err := e.RT.Stop(ctx, m.Name, e.Owns("stop"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	got, err := e.RT.Inspect(ctx, m.Name)
	if err != nil || got.State != container.StateExited {
		t.Fatalf("state %v, %v", got, err)
	}
}

func restartMovesStarted(t *testing.T, e *Env) {
	m := e.Running(t, "restart")
	ctx := Ctx(t)
	if m.Started.IsZero() || m.Started.Before(m.Created) {
		t.Fatalf("started %v, created %v", m.Started, m.Created)
	}
	if err := e.RT.Stop(ctx, m.Name, e.Owns("restart"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := e.RT.Start(ctx, m.Name, e.Owns("restart")); err != nil {
		t.Fatal(err)
	}
	again, err := e.RT.Inspect(ctx, m.Name)
	if err != nil || !again.Started.After(m.Started) {
		t.Fatalf("after a restart: started %v (first %v), %v", again.Started, m.Started, err)
	}
}

func listByLabelsReturnsOnlyOwned(t *testing.T, e *Env) {
	ctx := Ctx(t)
	other := NewEnv(t, e.RT, e.Image, container.IPv4)
	for _, x := range []*Env{e, other} {
		s := x.Spec("listed")
		s.Labels[container.LabelPool] = "pool-a"
		if _, err := x.RT.CreateMachine(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	got, err := container.ListOwned(ctx, e.RT, e.Owner, map[string]string{container.LabelPool: "pool-a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != e.Spec("listed").Name {
		t.Fatalf("ListOwned gave %v", names(got))
	}
	got, err = e.RT.List(ctx, map[string]string{container.LabelPool: "pool-a", container.LabelClusterID: other.Owner.ClusterID})
	if err != nil || len(got) != 1 || got[0].Name != other.Spec("listed").Name {
		t.Fatalf("List gave %v, %v", names(got), err)
	}
	for _, m := range got {
		if m.Labels[container.LabelClusterID] == "" {
			t.Fatalf("List returned a container not made by CAPCT: %s", m.Name)
		}
	}
}

func listOwnedRefusesAnIncompleteOwner(t *testing.T, e *Env) {
	for _, incomplete := range []container.Owner{{}, {Namespace: e.Owner.Namespace, Cluster: e.Owner.Cluster}, {ClusterID: e.Owner.ClusterID}} {
		_, err := container.ListOwned(Ctx(t), e.RT, incomplete, nil)
		if !container.IsInvalid(err) {
			t.Fatalf("owner %s: want invalid, got %v", incomplete, err)
		}
	}
	_, err := container.ListOwned(Ctx(t), e.RT, e.Owner, map[string]string{container.LabelClusterID: "other"})
	if !container.IsInvalid(err) {
		t.Fatalf("want invalid for a contradicting selector, got %v", err)
	}
}

func eventsForStartDieDestroy(t *testing.T, e *Env) {
	ctx := Ctx(t)
	sel := map[string]string{container.LabelClusterID: e.Owner.ClusterID, container.LabelMachine: "events"}
	evctx, cancel := context.WithCancel(ctx)
	ch, err := e.RT.Events(evctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	m := e.Running(t, "events")
	if err := e.RT.Stop(ctx, m.Name, e.Owns("events"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := e.RT.Delete(ctx, m.Name, e.Owns("events")); err != nil {
		t.Fatal(err)
	}
	want := []container.EventType{container.EventStart, container.EventDie, container.EventDestroy}
	var got []container.EventType
	timeout := time.After(10 * time.Second)
	for len(got) < len(want) {
		select {
		case ev := <-ch:
			if ev.Name != m.Name || ev.Labels[container.LabelClusterID] != e.Owner.ClusterID {
				t.Fatalf("foreign event %+v", ev)
			}
			got = append(got, ev.Type)
		case <-timeout:
			t.Fatalf("got events %v, want %v", got, want)
		}
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got events %v, want %v", got, want)
		}
	}
	cancel()
	for range ch { // must be closed when ctx ends
	}
}

// foreignOwners are owners that differ from o in exactly one field each:
// every field must count for ownership.
func foreignOwners(o container.Owner) []container.Owner {
	ns, cluster, id := o, o, o
	ns.Namespace += "-other"
	cluster.Cluster += "-other"
	id.ClusterID += "-other"
	return []container.Owner{ns, cluster, id}
}

// nthAddr is the n-th address of p, in the part of a network's subnet
// below its dynamic range.
func nthAddr(p netip.Prefix, n int) netip.Addr {
	a := p.Masked().Addr()
	for range n {
		a = a.Next()
	}
	return a
}

func names(ms []container.Machine) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}
