package engines

import (
	"context"
	"fmt"
	"sync"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
)

// Local names the manager's own engine, the one its socket (DOCKER_HOST,
// CONTAINER_HOST or the default) reaches: the engine of every cluster that
// lists no engines.
const Local = ""

// Set is the container engines the reconcilers run machines on. Every path
// that needs an engine asks the Set for it: Get for the engine a machine or
// a cluster's network is on, ForCluster for every engine a cluster may have
// containers on, so that nothing in the controllers assumes there is one.
type Set interface {
	// Get returns the runtime of the engine called name (Local for the
	// manager's own).
	Get(name string) (container.Runtime, error)
	// ForCluster returns the names of the engines cc's containers may be
	// on, its first engine first: the one that holds the cluster's network
	// and load balancer. It never returns an empty list, and cc may be nil
	// (a machine whose ContainerCluster is gone is still deleted).
	ForCluster(cc *infrav1.ContainerCluster) []string
	// Watch calls handle with the container events of every engine until
	// ctx ends, and onError with each failure to read them; an engine that
	// is away only delays its events (container.WatchEvents).
	Watch(ctx context.Context, handle func(container.Event), onError func(error))
}

// FirstEngine returns the runtime of the engine that holds cc's network and
// load balancer.
func FirstEngine(set Set, cc *infrav1.ContainerCluster) (container.Runtime, error) {
	return set.Get(set.ForCluster(cc)[0])
}

// Listed returns the names of the engines cc lists in spec.engines, in
// order: none for a cluster on the manager's own engine, or a nil cc.
func Listed(cc *infrav1.ContainerCluster) []string {
	if cc == nil {
		return nil
	}
	names := make([]string, 0, len(cc.Spec.Engines))
	for _, e := range cc.Spec.Engines {
		names = append(names, e.Name)
	}
	return names
}

// Single returns the Set of one engine, the manager's own, which refuses
// any other name: for tests and programs that run clusters on one engine
// only. The manager serves a Registry.
func Single(rt container.Runtime) Set { return single{rt: rt} }

type single struct{ rt container.Runtime }

func (s single) Get(name string) (container.Runtime, error) {
	if name != Local {
		return nil, fmt.Errorf("engine %q is not served: this manager runs machines on its own engine only", name)
	}
	return s.rt, nil
}

func (single) ForCluster(*infrav1.ContainerCluster) []string { return []string{Local} }

func (s single) Watch(ctx context.Context, handle func(container.Event), onError func(error)) {
	container.WatchEvents(ctx, s.rt, nil, nil, handle, onError)
}

// Named returns the Set of the given runtimes by name (Local among them
// when the manager's own is): for tests and programs that hold their
// engines' runtimes already. ForCluster answers as the Registry's does.
func Named(runtimes map[string]container.Runtime) Set { return named(runtimes) }

type named map[string]container.Runtime

func (n named) Get(name string) (container.Runtime, error) {
	if rt, ok := n[name]; ok {
		return rt, nil
	}
	return nil, container.NewError("connect", "engine", name, container.KindUnreachable, errNotConnected)
}

func (named) ForCluster(cc *infrav1.ContainerCluster) []string { return forCluster(cc) }

// Watch streams every engine's events until ctx ends.
func (n named) Watch(ctx context.Context, handle func(container.Event), onError func(error)) {
	var wg sync.WaitGroup
	for _, rt := range n {
		wg.Go(func() { container.WatchEvents(ctx, rt, nil, nil, handle, onError) })
	}
	wg.Wait()
}

// forCluster is ForCluster of the Sets that serve ContainerEngines: the
// engines cc lists, or Local when it lists none.
func forCluster(cc *infrav1.ContainerCluster) []string {
	if names := Listed(cc); len(names) > 0 {
		return names
	}
	return []string{Local}
}

// Owned is one of a cluster's containers and the engine it is on.
type Owned struct {
	container.Machine
	// Engine names the engine, and Runtime is its runtime.
	Engine  string
	Runtime container.Runtime
}

// ListOwned lists owner's containers that also match extra on every engine
// of cc (container.ListOwned on each), so that what a cluster left on any of
// its engines is found. An engine that does not answer fails it: for
// callers that must see every container, such as a cluster's deletion.
func ListOwned(ctx context.Context, set Set, cc *infrav1.ContainerCluster, owner container.Owner, extra map[string]string) ([]Owned, error) {
	owned, _, err := listOwned(ctx, set, cc, owner, extra, false)
	return owned, err
}

// ListReachable is ListOwned on the engines of cc that answer, and names
// those that do not: for callers that act on what they see and must go on
// while a host is lost, such as the pod routes of the nodes that remain
// (docs/multihost.md, section 6).
func ListReachable(ctx context.Context, set Set, cc *infrav1.ContainerCluster, owner container.Owner, extra map[string]string) (owned []Owned, away []string, err error) {
	return listOwned(ctx, set, cc, owner, extra, true)
}

func listOwned(ctx context.Context, set Set, cc *infrav1.ContainerCluster, owner container.Owner, extra map[string]string, skipAway bool) (owned []Owned, away []string, err error) {
	for _, engine := range set.ForCluster(cc) {
		rt, err := set.Get(engine)
		if skipAway && container.IsUnreachable(err) {
			away = append(away, engine)
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("failed to reach engine %q: %w", engine, err)
		}
		containers, err := container.ListOwned(ctx, rt, owner, extra)
		if skipAway && container.IsUnreachable(err) {
			away = append(away, engine)
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("failed to list containers on engine %q: %w", engine, err)
		}
		for _, c := range containers {
			owned = append(owned, Owned{Machine: c, Engine: engine, Runtime: rt})
		}
	}
	return owned, away, nil
}

// Spanning returns, for a cluster on several engines, the runtimes of the
// engines its overlay network spans, for nodeaddr.Launcher.Spans: the
// first engine's, which made the network and must answer, then each other
// engine that is connected. An engine that is not is left out, as one that
// does not answer would be: what its machines hold is in what they
// recorded. It returns nil for a cluster on one engine, whose network is
// that engine's own.
func Spanning(set Set, cc *infrav1.ContainerCluster) ([]container.Runtime, error) {
	names := set.ForCluster(cc)
	if len(names) < 2 {
		return nil, nil
	}
	spans := make([]container.Runtime, 0, len(names))
	for i, engine := range names {
		rt, err := set.Get(engine)
		if i == 0 && err != nil {
			return nil, fmt.Errorf("failed to reach engine %q, which holds the cluster's network: %w", engine, err)
		}
		if err == nil {
			spans = append(spans, rt)
		}
	}
	return spans, nil
}
