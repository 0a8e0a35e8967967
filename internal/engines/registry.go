package engines

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
)

// Registry holds one client per ContainerEngine, made from the engine and
// its Secret and made anew when either changes, so that an engine's
// connection (an SSH connection, a TLS session) is shared by every caller
// and opened once. Every runtime it hands out is bounded by the call
// timeout, as the manager's own engine is, and gated: once a call finds the
// engine unreachable, calls fail at once and one per ProbeInterval goes
// through (container.UnreachableGate), so a remote host that is gone does
// not hold the reconcile workers for the timeout on every call.
type Registry struct {
	// reader reads engines' Secrets uncached: the manager caches only
	// clusters' Secrets, and engines' live in its own namespace.
	reader    client.Reader
	namespace string
	timeout   time.Duration
	clock     clock.PassiveClock

	mu      sync.Mutex
	entries map[string]*entry
}

// entry is one engine's client and what it was made from.
type entry struct {
	generation    int64
	secretVersion string
	client        *Client
	runtime       container.Runtime
}

// ProbeInterval is how often a call goes through to an engine found
// unreachable, to learn whether it is back.
const ProbeInterval = 5 * time.Second

// NewRegistry returns a Registry that reads engines' Secrets from namespace
// (the manager's) through reader, bounds every call by timeout, and times
// the unreachable gates by clk (nil: the real clock).
func NewRegistry(reader client.Reader, namespace string, timeout time.Duration, clk clock.PassiveClock) *Registry {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Registry{reader: reader, namespace: namespace, timeout: timeout, clock: clk, entries: map[string]*entry{}}
}

// Ensure returns the runtime of engine. It is made anew when the engine's
// generation or its Secret's resourceVersion differ from those of the
// runtime held; the client it replaces is closed, and calls still in
// flight on it fail and are retried by their callers. A missing Secret, or
// one Connect cannot use, is an *InvalidCredentialsError.
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
	c, err := Connect(engine, secret)
	if err != nil {
		return nil, err
	}
	e := &entry{generation: engine.Generation, secretVersion: version, client: c, runtime: container.WithGatedCallTimeout(c, r.timeout, container.NewUnreachableGate(r.clock, ProbeInterval))}
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
