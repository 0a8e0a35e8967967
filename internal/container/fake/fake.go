// Package fake is an in-memory container.Runtime for fast controller tests.
// It is safe for concurrent use, assigns addresses from each network's derived
// subnet, runs Exec through a pluggable handler, streams events, and lets
// tests inject failures (FailNext) and remove containers out of band
// (RemoveOutOfBand). CAPCT's detached bootstrap runs are acted out without a
// shell (see Exec).
package fake

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/utils/clock"

	"github.com/capct/cluster-api-provider-container/internal/container"
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
	OpPullImage      Op = "PullImage"
	OpEvents         Op = "Events"
)

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
	// registry is what PullImage pulls from (pull.go).
	registry fakeRegistry
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

func (r *Runtime) failure(op Op) error {
	q := r.failures[op]
	if len(q) == 0 {
		return nil
	}
	r.failures[op] = q[1:]
	return q[0]
}

func notFound(op, object, name string) error {
	return container.NewError(op, object, name, container.KindNotFound, fmt.Errorf("no such %s: %s", object, name))
}

func (r *Runtime) newID() string {
	r.nextID++
	return fmt.Sprintf("%064x", r.nextID)
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
