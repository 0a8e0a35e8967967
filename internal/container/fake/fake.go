// Package fake is an in-memory container.Runtime for fast controller tests.
// It is safe for concurrent use, assigns addresses from each network's derived
// subnet, runs Exec through a pluggable handler, streams events, and lets
// tests inject failures (FailNext) and remove containers out of band
// (RemoveOutOfBand). CAPCT's detached bootstrap runs are acted out without a
// shell (see Exec).
package fake

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/provisioning"
)

// Op names a Runtime method for FailNext.
type Op string

// Operations that FailNext can fail.
const (
	OpEnsureNetwork  Op = "EnsureNetwork"
	OpInspectNetwork Op = "InspectNetwork"
	OpDeleteNetwork  Op = "DeleteNetwork"
	OpCreateMachine  Op = "CreateMachine"
	OpStart          Op = "Start"
	OpStop           Op = "Stop"
	OpDelete         Op = "Delete"
	OpSignal         Op = "Signal"
	OpInspect        Op = "Inspect"
	OpList           Op = "List"
	OpExec           Op = "Exec"
	OpWriteFile      Op = "WriteFile"
	OpReadFile       Op = "ReadFile"
	OpInfo           Op = "Info"
	OpImageExists    Op = "ImageExists"
	OpImageID        Op = "ImageID"
	OpTagImage       Op = "TagImage"
	OpSaveImages     Op = "SaveImages"
	OpLoadImages     Op = "LoadImages"
	OpEvents         Op = "Events"
)

// ExecHandler runs a command in a fake container. m is a snapshot of the
// container; files reads the container's files. Return (result, true) to
// answer, or (_, false) to fall back to the built-ins.
type ExecHandler func(ctx context.Context, m container.Machine, files map[string][]byte, in container.ExecInput, stdin []byte) (container.ExecResult, bool)

// ExecCall records one Exec.
type ExecCall struct {
	// Container is the container's name.
	Container string
	// Cmd is the command.
	Cmd []string
	// Stdin is what was read from ExecInput.Stdin.
	Stdin []byte
}

type fakeNetwork struct {
	net  container.Network
	next map[bool]netip.Addr // per family (true = v6): last assigned address
	// noStatic marks a network whose subnet its creator did not choose,
	// on which the Docker engine refuses static addresses.
	noStatic bool
}

type fakeContainer struct {
	m     container.Machine
	spec  container.MachineSpec
	files map[string][]byte
}

type subscriber struct {
	ctx      context.Context
	selector map[string]string
	ch       chan container.Event
}

// Runtime is the in-memory container.Runtime.
type Runtime struct {
	mu         sync.Mutex
	clock      clock.Clock
	networks   map[string]*fakeNetwork
	containers map[string]*fakeContainer
	// images maps each tagged reference to its image's ID; blobs holds
	// each image's saved form by ID.
	images   map[string]string
	blobs    map[string][]byte
	failures map[Op][]error
	subs     []*subscriber
	handler  ExecHandler
	execs    []ExecCall
	// forgetExecs stops the Exec history (ForgetExecCalls).
	forgetExecs bool
	signals     []string
	nextID      int
	nextPort    int
}

var _ container.Runtime = (*Runtime)(nil)

// New returns an empty fake runtime using clk for timestamps (nil means the
// real clock).
func New(clk clock.Clock) *Runtime {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Runtime{
		clock:      clk,
		networks:   map[string]*fakeNetwork{},
		containers: map[string]*fakeContainer{},
		images:     map[string]string{},
		blobs:      map[string][]byte{},
		failures:   map[Op][]error{},
	}
}

// FailNext makes the next call of op return err (queued per op).
func (r *Runtime) FailNext(op Op, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures[op] = append(r.failures[op], err)
}

// SetExecHandler installs h, consulted before the built-ins.
func (r *Runtime) SetExecHandler(h ExecHandler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handler = h
}

// ForgetExecCalls stops recording Execs for ExecCalls. A long run (the
// scale benchmark) would otherwise keep every command and its stdin, which
// the fake's memory would then count against the manager that runs it.
func (r *Runtime) ForgetExecCalls() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetExecs = true
	r.execs = nil
}

// ExecCalls returns the Execs recorded so far.
func (r *Runtime) ExecCalls() []ExecCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ExecCall(nil), r.execs...)
}

// AddImage makes ref exist with content as its saved form.
func (r *Runtime) AddImage(ref string, content []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tagLocked(ref, content)
}

// ImageIDOf is the ID the fake gives an image of content, as the engine
// derives it from the image's bytes.
func ImageIDOf(content []byte) string {
	sum := sha256.Sum256(content)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// tagLocked stores content and tags it as ref, unless ref is an ID: as
// the engine does, the fake derives an image's ID from its bytes, never
// from what an archive calls it.
func (r *Runtime) tagLocked(ref string, content []byte) {
	r.blobs[ImageIDOf(content)] = bytes.Clone(content)
	if !strings.HasPrefix(ref, "sha256:") {
		r.images[ref] = ImageIDOf(content)
	}
}

// imageLocked resolves ref, a tag or an ID, to the image's ID.
func (r *Runtime) imageLocked(ref string) (string, bool) {
	if id, ok := r.images[ref]; ok {
		return id, true
	}
	_, ok := r.blobs[ref]
	return ref, ok
}

// RunForeign starts a container that CAPCT did not make (no CAPCT labels)
// on network, as a user's docker run would, and returns a func removing
// it (runtimetest.ForeignRunner).
func (r *Runtime) RunForeign(_ context.Context, name, network, image string) (remove func(), err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.containers[name]; ok {
		return nil, container.NewError("create", "container", name, container.KindConflict, errors.New("the name is taken"))
	}
	r.containers[name] = &fakeContainer{files: map[string][]byte{}, m: container.Machine{
		Name: name, ID: r.newID(), Image: image, Labels: map[string]string{}, State: container.StateRunning,
		Network: network, Created: r.clock.Now(), Started: r.clock.Now(),
	}}
	return func() { r.RemoveOutOfBand(name) }, nil
}

// RemoveOutOfBand removes the container as `docker rm -f` would behind the
// controllers' back: it emits die (if running) and destroy events.
func (r *Runtime) RemoveOutOfBand(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[name]
	if !ok {
		return false
	}
	r.removeLocked(c)
	return true
}

func (r *Runtime) failure(op Op) error {
	q := r.failures[op]
	if len(q) == 0 {
		return nil
	}
	r.failures[op] = q[1:]
	return q[0]
}

func (r *Runtime) emitLocked(t container.EventType, c *fakeContainer) {
	ev := container.Event{Type: t, Name: c.m.Name, ID: c.m.ID, Labels: maps.Clone(c.m.Labels), Time: r.clock.Now()}
	live := r.subs[:0]
	for _, s := range r.subs {
		if s.ctx.Err() != nil {
			close(s.ch)
			continue
		}
		live = append(live, s)
		if container.MatchesSelector(ev.Labels, s.selector) {
			select {
			case s.ch <- ev:
			default: // A subscriber that lets 1024 events pile up loses some.
			}
		}
	}
	r.subs = live
}

func (r *Runtime) removeLocked(c *fakeContainer) {
	if c.m.State == container.StateRunning {
		c.m.State = container.StateExited
		r.emitLocked(container.EventDie, c)
	}
	delete(r.containers, c.m.Name)
	r.emitLocked(container.EventDestroy, c)
}

func notFound(op, object, name string) error {
	return container.NewError(op, object, name, container.KindNotFound, fmt.Errorf("no such %s: %s", object, name))
}

// EnsureNetwork implements container.Runtime.
func (r *Runtime) EnsureNetwork(ctx context.Context, spec container.NetworkSpec) (container.Network, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpEnsureNetwork); err != nil {
		return container.Network{}, err
	}
	if err := spec.Validate(); err != nil {
		return container.Network{}, err
	}
	if n, ok := r.networks[spec.Name]; ok {
		if err := spec.CheckAdopt(n.net); err != nil {
			return container.Network{}, err
		}
		return n.net, nil
	}
	family := spec.IPFamily
	if family == "" {
		family = container.IPv4
	}
	for attempt := range container.MaxSubnetAttempts {
		v4, v6 := container.Subnets(spec.Name, attempt)
		if r.overlapsLocked(v4, spec.Avoid) || (family.HasIPv6() && r.overlapsLocked(v6, spec.Avoid)) {
			continue
		}
		n := container.Network{Name: spec.Name, ID: r.newID(), Labels: spec.Owner.Labels(), Overlay: spec.Overlay, Encrypted: spec.Encrypted}
		if spec.Overlay {
			n.MTU = container.OverlayMTU
		}
		if family.HasIPv4() || family == container.IPv6 { // bridge networks always get IPv4
			n.IPv4Subnet, n.IPv4Gateway, n.DynamicIPv4Range = v4, container.Gateway(v4), container.DynamicRange(v4)
		}
		if family.HasIPv6() {
			n.IPv6Subnet, n.IPv6Gateway, n.DynamicIPv6Range = v6, container.Gateway(v6), container.DynamicRange(v6)
		}
		r.networks[spec.Name] = &fakeNetwork{net: n, next: map[bool]netip.Addr{}}
		return n, nil
	}
	return container.Network{}, container.NewError("create", "network", spec.Name, container.KindPoolOverlap,
		fmt.Errorf("all %d derived subnets overlap existing networks", container.MaxSubnetAttempts))
}

// overlapsLocked reports whether p overlaps a network of the engine or one
// of avoid.
func (r *Runtime) overlapsLocked(p netip.Prefix, avoid []netip.Prefix) bool {
	for _, q := range avoid {
		if q.Overlaps(p) {
			return true
		}
	}
	for _, n := range r.networks {
		for _, q := range []netip.Prefix{n.net.IPv4Subnet, n.net.IPv6Subnet} {
			if q.IsValid() && q.Overlaps(p) {
				return true
			}
		}
	}
	return false
}

func (r *Runtime) newID() string {
	r.nextID++
	return fmt.Sprintf("%064x", r.nextID)
}

// AddNetwork adds a network made by someone else, as an Unmanaged network
// is. Its gateways default to the first address of each subnet. When
// staticAddresses is false, containers created on it with static addresses
// fail to start as on a Docker network whose subnet the engine chose.
func (r *Runtime) AddNetwork(n container.Network, staticAddresses bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n.ID == "" {
		n.ID = r.newID()
	}
	if n.IPv4Subnet.IsValid() && !n.IPv4Gateway.IsValid() {
		n.IPv4Gateway = container.Gateway(n.IPv4Subnet)
	}
	if n.IPv6Subnet.IsValid() && !n.IPv6Gateway.IsValid() {
		n.IPv6Gateway = container.Gateway(n.IPv6Subnet)
	}
	n.Endpoints = nil
	r.networks[n.Name] = &fakeNetwork{net: n, next: map[bool]netip.Addr{}, noStatic: !staticAddresses}
}

// InspectNetwork implements container.Runtime.
func (r *Runtime) InspectNetwork(ctx context.Context, name string) (container.Network, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpInspectNetwork); err != nil {
		return container.Network{}, err
	}
	n, ok := r.networks[name]
	if !ok {
		return container.Network{}, notFound("inspect", "network", name)
	}
	out := n.net
	out.Endpoints = nil
	for _, c := range r.containers {
		if c.m.Network == name && c.m.State == container.StateRunning {
			out.Endpoints = append(out.Endpoints, container.Endpoint{Name: c.m.Name, IPv4: c.m.IPv4, IPv6: c.m.IPv6})
		}
	}
	sort.Slice(out.Endpoints, func(i, j int) bool { return out.Endpoints[i].Name < out.Endpoints[j].Name })
	return out, nil
}

// DeleteNetwork implements container.Runtime.
func (r *Runtime) DeleteNetwork(ctx context.Context, name string, owner container.Owner) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpDeleteNetwork); err != nil {
		return err
	}
	n, ok := r.networks[name]
	if !ok {
		return nil
	}
	if !owner.ClusterOwner().Owns(n.net.Labels) {
		return container.NotOwnedError("delete", "network", name, owner.ClusterOwner(), n.net.Labels)
	}
	for _, c := range r.containers {
		if c.m.Network == name {
			return container.NewError("delete", "network", name, container.KindConflict,
				fmt.Errorf("network has active endpoint %q", c.m.Name))
		}
	}
	delete(r.networks, name)
	return nil
}

// CreateMachine implements container.Runtime.
func (r *Runtime) CreateMachine(ctx context.Context, spec container.MachineSpec) (*container.Machine, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpCreateMachine); err != nil {
		return nil, err
	}
	if spec.Name == "" || spec.Image == "" {
		return nil, container.NewError("create", "container", spec.Name, container.KindInvalid, errors.New("name and image are required"))
	}
	owner := container.OwnerOf(spec.Labels)
	if !owner.Valid() || owner.Machine == "" {
		return nil, container.NewError("create", "container", spec.Name, container.KindInvalid,
			fmt.Errorf("labels must name a complete owner with a machine, got %s", owner))
	}
	if c, ok := r.containers[spec.Name]; ok {
		if !owner.Owns(c.m.Labels) {
			return nil, container.NotOwnedError("adopt", "container", spec.Name, owner, c.m.Labels)
		}
		return snapshot(c), nil
	}
	if _, ok := r.networks[spec.Network]; !ok && spec.Network != "" {
		return nil, container.NewError("create", "container", spec.Name, container.KindNotFound,
			fmt.Errorf("network %s not found", spec.Network))
	}
	labels := maps.Clone(spec.Labels)
	if spec.Role != "" {
		labels[container.LabelRole] = string(spec.Role)
	}
	c := &fakeContainer{spec: spec, files: map[string][]byte{}, m: container.Machine{
		Name: spec.Name, ID: r.newID(), Image: spec.Image, Labels: labels, State: container.StateCreated,
		Network: spec.Network, Created: r.clock.Now(), StaticIPv4: spec.StaticIPv4, StaticIPv6: spec.StaticIPv6,
	}}
	for _, p := range spec.PortMappings {
		if p.HostIP == "" {
			p.HostIP = "127.0.0.1"
		}
		if p.Protocol == "" {
			p.Protocol = "tcp"
		}
		c.m.PortMappings = append(c.m.PortMappings, p)
	}
	r.containers[spec.Name] = c
	return snapshot(c), nil
}

func snapshot(c *fakeContainer) *container.Machine {
	m := c.m
	m.Labels = maps.Clone(c.m.Labels)
	m.Ports = append([]container.PortBinding(nil), c.m.Ports...)
	m.PortMappings = append([]container.PortMapping(nil), c.m.PortMappings...)
	return &m
}

func (r *Runtime) get(op, name string) (*fakeContainer, error) {
	c, ok := r.lookupLocked(name)
	if !ok {
		return nil, notFound(op, "container", name)
	}
	return c, nil
}

// lookupLocked finds a container by name or, as the engine does, by ID:
// what acts on a container after checking it (a bootstrap run) names it by
// ID, so that one re-created under the same name is not it.
func (r *Runtime) lookupLocked(nameOrID string) (*fakeContainer, bool) {
	if c, ok := r.containers[nameOrID]; ok {
		return c, true
	}
	for _, c := range r.containers {
		if c.m.ID == nameOrID {
			return c, true
		}
	}
	return nil, false
}

// owned is get for the calls that change a container: it refuses one that
// owner does not own.
func (r *Runtime) owned(op, name string, owner container.Owner) (*fakeContainer, error) {
	c, err := r.get(op, name)
	if err != nil {
		return nil, err
	}
	if !owner.Owns(c.m.Labels) {
		return nil, container.NotOwnedError(op, "container", name, owner, c.m.Labels)
	}
	return c, nil
}

// Start implements container.Runtime.
func (r *Runtime) Start(ctx context.Context, name string, owner container.Owner) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpStart); err != nil {
		return err
	}
	c, err := r.owned("start", name, owner)
	if err != nil {
		return err
	}
	if c.m.State == container.StateRunning {
		return nil
	}
	// Like the engine, claim static addresses and fixed host ports only
	// now, and refuse those another running container holds.
	n, onNetwork := r.networks[c.m.Network]
	if err := r.checkStaticLocked(c, n); err != nil {
		return err
	}
	var ports []container.PortBinding
	for _, p := range c.m.PortMappings {
		hp := p.HostPort
		if hp == 0 {
			// Like the engine, pick another free port at every start.
			r.nextPort++
			hp = 32768 + r.nextPort%28000
		} else if holder := r.portHolderLocked(p.HostIP, hp); holder != "" {
			return container.NewError("start", "container", name, container.KindInUse,
				fmt.Errorf("bind for %s:%d failed: port is already allocated (by %s)", p.HostIP, hp, holder))
		}
		ports = append(ports, container.PortBinding{ContainerPort: p.ContainerPort, Protocol: p.Protocol, HostIP: p.HostIP, HostPort: hp})
	}
	if onNetwork {
		c.m.IPv4, c.m.IPv6 = c.m.StaticIPv4, c.m.StaticIPv6
		if !c.m.IPv4.IsValid() {
			c.m.IPv4 = r.allocLocked(n, n.net.IPv4Subnet, n.net.DynamicIPv4Range, false)
		}
		if !c.m.IPv6.IsValid() {
			c.m.IPv6 = r.allocLocked(n, n.net.IPv6Subnet, n.net.DynamicIPv6Range, true)
		}
	}
	c.m.Ports = ports
	c.m.State = container.StateRunning
	c.m.Started = r.clock.Now()
	r.emitLocked(container.EventStart, c)
	return nil
}

// checkStaticLocked refuses c's static addresses when its network does not
// take them, when they lie outside its subnets, or when a running
// container holds them.
func (r *Runtime) checkStaticLocked(c *fakeContainer, n *fakeNetwork) error {
	static := []netip.Addr{c.m.StaticIPv4, c.m.StaticIPv6}
	if !static[0].IsValid() && !static[1].IsValid() {
		return nil
	}
	if n == nil || n.noStatic {
		return container.NewError("start", "container", c.m.Name, container.KindStaticAddressUnsupported,
			errors.New("user specified IP address is supported only when connecting to networks with user configured subnets"))
	}
	for _, a := range static {
		if !a.IsValid() {
			continue
		}
		subnet := n.net.IPv4Subnet
		if a.Is6() {
			subnet = n.net.IPv6Subnet
		}
		if !subnet.Contains(a) {
			return container.NewError("start", "container", c.m.Name, container.KindInvalid,
				fmt.Errorf("address %s is not in the subnet %s of network %s", a, subnet, n.net.Name))
		}
		for _, o := range r.containers {
			if o != c && o.m.State == container.StateRunning && (o.m.IPv4 == a || o.m.IPv6 == a) {
				return container.NewError("start", "container", c.m.Name, container.KindInUse,
					fmt.Errorf("address already in use: %s is held by %s", a, o.m.Name))
			}
		}
	}
	return nil
}

// portHolderLocked names the running container that publishes hostIP:port.
func (r *Runtime) portHolderLocked(hostIP string, port int) string {
	for _, o := range r.containers {
		if o.m.State != container.StateRunning {
			continue
		}
		for _, b := range o.m.Ports {
			if b.HostPort == port && b.HostIP == hostIP {
				return o.m.Name
			}
		}
	}
	return ""
}

// allocLocked returns the next free address of p, inside dynamic when it is
// valid, as the engine does for containers that ask for no address (skipping
// the gateway).
func (r *Runtime) allocLocked(n *fakeNetwork, p, dynamic netip.Prefix, v6 bool) netip.Addr {
	if !p.IsValid() {
		return netip.Addr{}
	}
	pool := p
	if dynamic.IsValid() {
		pool = dynamic
	}
	used := map[netip.Addr]bool{container.Gateway(p): true}
	for _, c := range r.containers {
		used[c.m.IPv4], used[c.m.IPv6] = true, true
	}
	a := n.next[v6]
	if !a.IsValid() || !pool.Contains(a) {
		a = pool.Masked().Addr()
	}
	for range 1 << 16 {
		a = a.Next()
		if !pool.Contains(a) {
			a = pool.Masked().Addr().Next()
		}
		if !used[a] {
			n.next[v6] = a
			return a
		}
	}
	return netip.Addr{}
}

// Stop implements container.Runtime.
func (r *Runtime) Stop(ctx context.Context, name string, owner container.Owner, timeout time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpStop); err != nil {
		return err
	}
	c, err := r.owned("stop", name, owner)
	if err != nil {
		return err
	}
	if c.m.State == container.StateRunning {
		c.m.State = container.StateExited
		c.m.IPv4, c.m.IPv6 = netip.Addr{}, netip.Addr{}
		r.emitLocked(container.EventDie, c)
	}
	return nil
}

// Signal implements container.Runtime: it records the signal (see Signals).
func (r *Runtime) Signal(ctx context.Context, name string, owner container.Owner, signal string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpSignal); err != nil {
		return err
	}
	c, err := r.owned("signal "+signal+" to", name, owner)
	if err != nil {
		return err
	}
	if c.m.State != container.StateRunning {
		return container.NewError("signal "+signal+" to", "container", name, container.KindConflict, fmt.Errorf("container %s is not running", name))
	}
	r.signals = append(r.signals, name+":"+signal)
	return nil
}

// Signals returns the signals sent so far, as "container:SIGNAL".
func (r *Runtime) Signals() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.signals...)
}

// Delete implements container.Runtime. Deleting a missing container is not an
// error.
func (r *Runtime) Delete(ctx context.Context, name string, owner container.Owner) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpDelete); err != nil {
		return err
	}
	c, err := r.owned("delete", name, owner)
	if container.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	r.removeLocked(c)
	return nil
}

// Inspect implements container.Runtime.
func (r *Runtime) Inspect(ctx context.Context, name string) (*container.Machine, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpInspect); err != nil {
		return nil, err
	}
	c, err := r.get("inspect", name)
	if err != nil {
		return nil, err
	}
	return snapshot(c), nil
}

// List implements container.Runtime.
func (r *Runtime) List(ctx context.Context, labelSelector map[string]string) ([]container.Machine, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpList); err != nil {
		return nil, err
	}
	var out []container.Machine
	for _, c := range r.containers {
		if _, ok := c.m.Labels[container.LabelClusterID]; ok && container.MatchesSelector(c.m.Labels, labelSelector) {
			out = append(out, *snapshot(c))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Exec implements container.Runtime. It records the call, then asks the
// handler (SetExecHandler), then the built-ins: true, false, echo, cat (of
// written files, or of stdin), test -f/-e/-d, sleep (honours the timeout),
// `sh -c "exit N"` and CAPCT's bootstrap launch (provisioning.LaunchCommand),
// which returns at once and acts out the staged script on a goroutine (see
// runBootstrap); anything else exits 0 with no output.
func (r *Runtime) Exec(ctx context.Context, name string, owner container.Owner, in container.ExecInput) (container.ExecResult, error) {
	// Only the program is named, as by the Docker runtime: the arguments of
	// `sh -c` are a script.
	op := "exec in"
	if len(in.Cmd) > 0 {
		op = fmt.Sprintf("exec %q in", in.Cmd[0])
	}
	var stdin []byte
	if in.Stdin != nil {
		b, err := io.ReadAll(in.Stdin)
		if err != nil {
			return container.ExecResult{}, container.NewError(op, "container", name, container.KindUnknown, err)
		}
		stdin = b
	}
	r.mu.Lock()
	if err := r.failure(OpExec); err != nil {
		r.mu.Unlock()
		return container.ExecResult{}, err
	}
	if len(in.Cmd) == 0 {
		r.mu.Unlock()
		return container.ExecResult{}, container.NewError(op, "container", name, container.KindInvalid, errors.New("empty command"))
	}
	c, err := r.owned(op, name, owner)
	if err == nil && c.m.State != container.StateRunning {
		err = container.NewError(op, "container", name, container.KindConflict, fmt.Errorf("container %s is not running", name))
	}
	if err != nil {
		r.mu.Unlock()
		return container.ExecResult{}, err
	}
	if !r.forgetExecs {
		r.execs = append(r.execs, ExecCall{Container: c.m.Name, Cmd: append([]string(nil), in.Cmd...), Stdin: stdin})
	}
	m, files, h := *snapshot(c), maps.Clone(c.files), r.handler
	r.mu.Unlock()

	if h != nil {
		if res, ok := h(ctx, m, files, in, stdin); ok {
			return container.BoundOutput(res, in.OutputLimit()), nil
		}
	}
	res, err := r.builtin(ctx, op, name, m.ID, files, in, stdin)
	return container.BoundOutput(res, in.OutputLimit()), err
}

// builtin runs the built-in commands in the container id, named name in
// errors.
func (r *Runtime) builtin(ctx context.Context, op, name, id string, files map[string][]byte, in container.ExecInput, stdin []byte) (container.ExecResult, error) {
	args := in.Cmd
	if n, ok := provisioning.ParseLaunchCommand(args); ok {
		// Detached, as setsid makes it in a real container: the exec
		// returns at once and the run goes on by itself, in that very
		// container (by ID), dying with it.
		go r.runBootstrap(id, n)
		return container.ExecResult{}, nil
	}
	switch args[0] {
	case "true":
		return container.ExecResult{}, nil
	case "false":
		return container.ExecResult{ExitCode: 1}, nil
	case "echo":
		return container.ExecResult{Stdout: []byte(strings.Join(args[1:], " ") + "\n")}, nil
	case "cat":
		return catFiles(files, args[1:], stdin), nil
	case "test", "[":
		return testPath(files, args[1:]), nil
	case "sleep":
		return r.sleep(ctx, op, name, args[1:], in.Timeout)
	case "sh":
		if len(args) == 3 && args[1] == "-c" && strings.HasPrefix(args[2], "exit ") {
			var code int
			if _, err := fmt.Sscanf(args[2], "exit %d", &code); err == nil {
				return container.ExecResult{ExitCode: code}, nil
			}
		}
	}
	return container.ExecResult{}, nil
}

// catFiles is busybox's cat of the files at paths, or of stdin without paths.
func catFiles(files map[string][]byte, paths []string, stdin []byte) container.ExecResult {
	if len(paths) == 0 {
		return container.ExecResult{Stdout: stdin}
	}
	var res container.ExecResult
	for _, p := range paths {
		b, ok := files[path.Clean(p)]
		if !ok {
			res.ExitCode = 1
			res.Stderr = append(res.Stderr, fmt.Sprintf("cat: can't open '%s': No such file or directory\n", p)...)
			continue
		}
		res.Stdout = append(res.Stdout, b...)
	}
	return res
}

// testPath is test's -f, -d and -e on files, where a folder is the prefix
// of a file's path; anything else is false.
func testPath(files map[string][]byte, args []string) container.ExecResult {
	if len(args) >= 2 {
		p := path.Clean(args[1])
		_, isFile := files[p]
		isDir := false
		for f := range files {
			if strings.HasPrefix(f, p+"/") {
				isDir = true
			}
		}
		ok := (args[0] == "-f" && isFile) || (args[0] == "-d" && isDir) || (args[0] == "-e" && (isFile || isDir))
		if ok {
			return container.ExecResult{}
		}
	}
	return container.ExecResult{ExitCode: 1}
}

// sleep returns at once, unless the exec's timeout (0 for none) ends
// before the sleep of args would: then it returns the timeout's error when
// the injected clock reaches it, as a real exec would.
func (r *Runtime) sleep(ctx context.Context, op, name string, args []string, timeout time.Duration) (container.ExecResult, error) {
	d := time.Hour
	if len(args) > 0 {
		if v, err := time.ParseDuration(args[0] + "s"); err == nil {
			d = v
		}
	}
	if timeout <= 0 || timeout >= d {
		return container.ExecResult{}, nil
	}
	t := r.clock.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-t.C():
		return container.ExecResult{}, container.NewError(op, "container", name, container.KindTimeout,
			fmt.Errorf("command did not finish within %s: %w", timeout, context.DeadlineExceeded))
	case <-ctx.Done():
		return container.ExecResult{}, container.NewError(op, "container", name, container.KindUnknown, ctx.Err())
	}
}

// runBootstrap acts as attempt n of the bootstrap script staged in the
// container id (provisioning.Script) would, without a shell: it marks the
// attempt alive, claims it once, writes the files (appends start from the
// content before the first attempt), runs each command through Exec (so
// the handler sees it and ExecCalls records it), checks the sentinel and
// writes the exit mark. Waiting for systemd and the CRI, undoing an earlier
// attempt and collecting diagnostics need a real node and are left out.
func (r *Runtime) runBootstrap(id string, n int) {
	marks := provisioning.Marks(n)
	script, ok := r.claimBootstrap(id, marks)
	if !ok {
		return
	}
	finish := func(e provisioning.Exit, output []byte) {
		if output != nil {
			r.setFile(id, marks.Output, output)
		}
		if e.Code == 0 {
			r.removeFiles(id, provisioning.RunDir+"/files/", provisioning.ScriptPath)
		}
		r.setFile(id, marks.Exit, []byte(e.String()))
	}
	steps, err := provisioning.ParseScript(script)
	if err != nil {
		finish(provisioning.Exit{Code: 2, Where: provisioning.WhereStep, Step: 1, Label: "run.sh"}, []byte(err.Error()))
		return
	}
	for _, st := range steps {
		if f := st.File; f != nil {
			content, ok := r.file(id, st.Staged)
			if !ok {
				finish(provisioning.Exit{Code: 1, Where: provisioning.WhereFile, Step: st.Index, Label: st.Label}, []byte("no staged content "+st.Staged))
				return
			}
			if f.Append {
				before, ok := r.file(id, st.Staged+".before")
				if !ok {
					before, _ = r.file(id, f.Path)
					r.setFile(id, st.Staged+".before", before)
				}
				content = append(bytes.Clone(before), content...)
			}
			r.setFile(id, f.Path, content)
			continue
		}
		// The script runs inside the container, as its own owner.
		m, err := r.Inspect(context.Background(), id)
		if err != nil {
			return // The container is gone: so is the run.
		}
		res, err := r.Exec(context.Background(), id, container.OwnerOf(m.Labels), container.ExecInput{Cmd: st.Command})
		if err != nil {
			return // The container is gone or stopped: so is the run.
		}
		out := append(bytes.Clone(res.Stdout), res.Stderr...)
		if res.ExitCode != 0 {
			finish(provisioning.Exit{Code: res.ExitCode, Where: provisioning.WhereStep, Step: st.Index, Label: st.Label}, out)
			return
		}
		r.setFile(id, marks.Output, out)
	}
	if _, ok := r.file(id, provisioning.SentinelPath); !ok {
		finish(provisioning.Exit{Code: 1, Where: provisioning.WhereSentinel, Label: "the bootstrap data"}, nil)
		return
	}
	finish(provisioning.Exit{Where: provisioning.WhereDone, Label: "the bootstrap data"}, nil)
}

// claimBootstrap marks the attempt alive and claims it, at most once, as
// the script's mkdir does; it returns the staged script.
func (r *Runtime) claimBootstrap(name string, marks provisioning.AttemptMarks) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.lookupLocked(name)
	if !ok || c.m.State != container.StateRunning {
		return nil, false
	}
	c.files[marks.Alive] = []byte{}
	if _, claimed := c.files[marks.Started]; claimed {
		return nil, false
	}
	c.files[marks.Started] = []byte("1\n")
	return bytes.Clone(c.files[provisioning.ScriptPath]), true
}

func (r *Runtime) file(name, p string) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.lookupLocked(name)
	if !ok {
		return nil, false
	}
	b, ok := c.files[path.Clean(p)]
	return bytes.Clone(b), ok
}

func (r *Runtime) setFile(name, p string, b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.lookupLocked(name); ok {
		c.files[path.Clean(p)] = bytes.Clone(b)
	}
}

// removeFiles removes the files under each prefix ending in "/" and each
// other path.
func (r *Runtime) removeFiles(name string, paths ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.lookupLocked(name)
	if !ok {
		return
	}
	for f := range c.files {
		for _, p := range paths {
			if f == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(f, p)) {
				delete(c.files, f)
			}
		}
	}
}

// WriteFile implements container.Runtime.
func (r *Runtime) WriteFile(ctx context.Context, name string, owner container.Owner, p string, content []byte, mode os.FileMode) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpWriteFile); err != nil {
		return err
	}
	op := fmt.Sprintf("write %q in", p)
	if !path.IsAbs(p) || path.Clean(p) == "/" {
		return container.NewError(op, "container", name, container.KindInvalid, errors.New("path must be absolute and name a file"))
	}
	c, err := r.owned(op, name, owner)
	if err != nil {
		return err
	}
	c.files[path.Clean(p)] = bytes.Clone(content)
	return nil
}

// ReadFile implements container.Runtime.
func (r *Runtime) ReadFile(ctx context.Context, name, p string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpReadFile); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("read %q in", p)
	c, err := r.get(op, name)
	if err != nil {
		return nil, err
	}
	if err := container.CheckMachineContainer(op, name, c.m.Labels); err != nil {
		return nil, err
	}
	b, ok := c.files[path.Clean(p)]
	if !ok {
		return nil, container.NewError(op, "container", name, container.KindNotFound, fmt.Errorf("no such file %s", p))
	}
	if len(b) > container.MaxFileSize {
		return nil, container.NewError(op, "container", name, container.KindInvalid, fmt.Errorf("the file is larger than %d bytes", container.MaxFileSize))
	}
	return bytes.Clone(b), nil
}

// FakeVersion is the version the fake engine reports.
const FakeVersion = "fake"

// Info implements container.Runtime: the fake engine is in no swarm.
func (r *Runtime) Info(context.Context) (container.EngineInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpInfo); err != nil {
		return container.EngineInfo{}, err
	}
	return container.EngineInfo{Version: FakeVersion}, nil
}

// ImageExists implements container.Runtime.
func (r *Runtime) ImageExists(ctx context.Context, ref string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpImageExists); err != nil {
		return false, err
	}
	_, ok := r.imageLocked(ref)
	return ok, nil
}

// ImageID implements container.Runtime.
func (r *Runtime) ImageID(ctx context.Context, ref string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpImageID); err != nil {
		return "", err
	}
	id, ok := r.imageLocked(ref)
	if !ok {
		return "", notFound("inspect", "image", ref)
	}
	return id, nil
}

// TagImage implements container.Runtime.
func (r *Runtime) TagImage(ctx context.Context, id, ref string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpTagImage); err != nil {
		return err
	}
	if _, ok := r.blobs[id]; !ok {
		return notFound("tag", "image", id)
	}
	if have, ok := r.images[ref]; ok && have != id {
		return container.NewError("tag", "image", ref, container.KindConflict,
			fmt.Errorf("refusing to move the tag to image %s: it names image %s", id, have))
	}
	r.images[ref] = id
	return nil
}

// SaveImages implements container.Runtime: the tar holds one file per image,
// named after its reference or ID, with the bytes given to AddImage.
func (r *Runtime) SaveImages(ctx context.Context, refs []string) (io.ReadCloser, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpSaveImages); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, ref := range refs {
		id, ok := r.imageLocked(ref)
		if !ok {
			return nil, notFound("save", "image", ref)
		}
		b := r.blobs[id]
		_ = tw.WriteHeader(&tar.Header{Name: ref, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg})
		_, _ = tw.Write(b)
	}
	_ = tw.Close()
	return io.NopCloser(&buf), nil
}

// LoadImages implements container.Runtime: it reads a tar made by
// SaveImages, each file an image named after its reference.
func (r *Runtime) LoadImages(ctx context.Context, in io.Reader) error {
	tr := tar.NewReader(in)
	loaded := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return container.NewError("load", "image", "archive", container.KindInvalid, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return container.NewError("load", "image", "archive", container.KindInvalid, err)
		}
		loaded[h.Name] = b
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpLoadImages); err != nil {
		return err
	}
	for ref, b := range loaded {
		r.tagLocked(ref, b)
	}
	return nil
}

// Events implements container.Runtime. The channel holds up to 1024 events
// not yet received; more are dropped.
func (r *Runtime) Events(ctx context.Context, labelSelector map[string]string) (<-chan container.Event, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(OpEvents); err != nil {
		return nil, err
	}
	s := &subscriber{ctx: ctx, selector: maps.Clone(labelSelector), ch: make(chan container.Event, 1024)}
	r.subs = append(r.subs, s)
	go func() {
		<-ctx.Done()
		r.mu.Lock()
		defer r.mu.Unlock()
		for i, x := range r.subs {
			if x == s {
				r.subs = append(r.subs[:i], r.subs[i+1:]...)
				close(s.ch)
				return
			}
		}
	}()
	return s.ch, nil
}
