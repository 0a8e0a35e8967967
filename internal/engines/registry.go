package engines

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
)

// Registry holds one client per ContainerEngine, made by its Connector
// from the engine and its Secret and made anew when either changes, so that an engine's
// connection (an SSH connection, a TLS session) is shared by every caller
// and opened once. It is the Set the reconcilers run machines through: the
// manager's own engine (Local) and every engine the containerengine
// controller has connected (Ensure), each watched for events from the
// moment it is connected until it is forgotten. Every runtime it hands out
// is bounded by the call timeout, as the manager's own engine is, and
// gated: once a call finds the engine unreachable, calls fail at once and
// one per ProbeInterval goes through (container.UnreachableGate), so a
// remote host that is gone does not hold the reconcile workers for the
// timeout on every call.
type Registry struct {
	// local is the manager's own engine, served as Local.
	local container.Runtime
	// connect makes the client of a ContainerEngine: the backend's
	// constructor, which the Registry does not know.
	connect Connector[Client]
	// reader reads engines' Secrets uncached: the manager caches only
	// clusters' Secrets, and engines' live in its own namespace.
	reader    client.Reader
	namespace string
	timeout   time.Duration
	clock     clock.PassiveClock

	mu      sync.Mutex
	entries map[string]*entry
	// watches are the callers of Watch still watching.
	watches []*watch
}

var _ Set = (*Registry)(nil)

// entry is one engine's client and what it was made from.
type entry struct {
	generation    int64
	secretVersion string
	client        Client
	runtime       container.Runtime
	// stopWatches ends the event streams of this client, one per watch.
	stopWatches []context.CancelFunc
}

// watch is one caller of Watch.
type watch struct {
	ctx     context.Context
	handle  func(container.Event)
	onError func(error)
}

// start streams rt's events to the watch until the returned function is
// called or the watch ends.
func (w *watch) start(rt container.Runtime) context.CancelFunc {
	ctx, cancel := context.WithCancel(w.ctx)
	go container.WatchEvents(ctx, rt, nil, nil, w.handle, w.onError)
	return cancel
}

// errNotConnected is why Get fails for an engine the containerengine
// controller has not connected.
var errNotConnected = errors.New("CAPCT holds no client of this engine: its ContainerEngine does not exist, or its Available condition says why it is not reached")

// ProbeInterval is how often a call goes through to an engine found
// unreachable, to learn whether it is back.
const ProbeInterval = 5 * time.Second

// NewRegistry returns a Registry that serves local, already bounded, as
// the manager's own engine, makes the clients of other engines with
// connect (docker.Connect in the manager), reads their Secrets from
// namespace (the manager's) through reader, bounds every call to them by
// timeout, and times their unreachable gates by clk (nil: the real clock).
func NewRegistry[C Client](local container.Runtime, connect Connector[C], reader client.Reader, namespace string, timeout time.Duration, clk clock.PassiveClock) *Registry {
	if clk == nil {
		clk = clock.RealClock{}
	}
	r := &Registry{local: local, reader: reader, namespace: namespace, timeout: timeout, clock: clk, entries: map[string]*entry{}}
	r.connect = func(engine *infrav1.ContainerEngine, secret map[string][]byte) (Client, error) {
		c, err := connect(engine, secret)
		if err != nil {
			// Not c: a nil pointer of the backend's type would make a
			// Client that is not nil.
			return nil, err
		}
		return c, nil
	}
	return r
}

// Get returns the runtime of the engine called name. An engine that is not
// connected, because its ContainerEngine does not exist or its client
// could not be made, is unreachable (container.IsUnreachable): callers wait
// for it as for an engine that does not answer.
func (r *Registry) Get(name string) (container.Runtime, error) {
	if name == Local {
		return r.local, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[name]; e != nil {
		return e.runtime, nil
	}
	return nil, container.NewError("connect", "engine", name, container.KindUnreachable, errNotConnected)
}

// ForCluster implements Set: the engines cc lists, or Local when it lists
// none.
func (r *Registry) ForCluster(cc *infrav1.ContainerCluster) []string { return forCluster(cc) }

// Watch implements Set. It streams the manager's own engine's events, and
// those of each engine from when Ensure connects it until it is forgotten
// or its client made anew, so an engine added after the manager started is
// watched too.
func (r *Registry) Watch(ctx context.Context, handle func(container.Event), onError func(error)) {
	w := &watch{ctx: ctx, handle: handle, onError: onError}
	r.mu.Lock()
	r.watches = append(r.watches, w)
	for _, e := range r.entries {
		e.stopWatches = append(e.stopWatches, w.start(e.runtime))
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.watches = slices.DeleteFunc(r.watches, func(o *watch) bool { return o == w })
	}()
	container.WatchEvents(ctx, r.local, nil, nil, handle, onError)
}

// Ensure returns the runtime of engine. It is made anew when the engine's
// generation or its Secret's resourceVersion differ from those of the
// runtime held; the client it replaces is closed, and calls still in
// flight on it fail and are retried by their callers. A missing Secret, or
// one the Connector cannot use, is an *InvalidCredentialsError.
func (r *Registry) Ensure(ctx context.Context, engine *infrav1.ContainerEngine) (container.Runtime, error) {
	secret, version, err := r.secret(ctx, engine)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[engine.Name]; e != nil && e.generation == engine.Generation && e.secretVersion == version {
		return e.runtime, nil
	}
	r.forgetLocked(engine.Name)
	c, err := r.connect(engine, secret)
	if err != nil {
		return nil, err
	}
	e := &entry{generation: engine.Generation, secretVersion: version, client: c, runtime: container.WithGatedCallTimeout(c, r.timeout, container.NewUnreachableGate(r.clock, ProbeInterval))}
	for _, w := range r.watches {
		e.stopWatches = append(e.stopWatches, w.start(e.runtime))
	}
	r.entries[engine.Name] = e
	return e.runtime, nil
}

// Forget closes and drops the client of the engine called name, once the
// engine is deleted.
func (r *Registry) Forget(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetLocked(name)
}

func (r *Registry) forgetLocked(name string) {
	if e := r.entries[name]; e != nil {
		for _, stop := range e.stopWatches {
			stop()
		}
		// Closing releases idle connections only; nothing to report.
		_ = e.client.Close()
		delete(r.entries, name)
	}
}

// secret returns the data and resourceVersion of the Secret that engine's
// tls or ssh names; none for an engine that needs none.
func (r *Registry) secret(ctx context.Context, engine *infrav1.ContainerEngine) (map[string][]byte, string, error) {
	var name string
	switch {
	case engine.Spec.TLS != nil:
		name = engine.Spec.TLS.SecretRef.Name
	case engine.Spec.SSH != nil:
		name = engine.Spec.SSH.SecretRef.Name
	default:
		return nil, "", nil
	}
	if r.namespace == "" {
		return nil, "", &InvalidCredentialsError{Engine: engine.Name, Err: errors.New("the manager does not know its namespace (POD_NAMESPACE), where the Secret must be")}
	}
	s := &corev1.Secret{}
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: r.namespace, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", &InvalidCredentialsError{Engine: engine.Name, Err: fmt.Errorf("the Secret %s/%s does not exist", r.namespace, name)}
		}
		return nil, "", fmt.Errorf("failed to get Secret %s/%s of ContainerEngine %s: %w", r.namespace, name, engine.Name, err)
	}
	return s.Data, s.ResourceVersion, nil
}
