package hostcapacity

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// admissionTTL is how long an admitted node counts before its container
// shows up on the engine: longer than creating a container takes, short
// enough that a launch that failed does not hold room for long.
const admissionTTL = 2 * time.Minute

// Gate admits node containers onto the container host while its limits
// leave room. It is safe for concurrent use, and machines launching at once
// cannot all take the last room: a node admitted but not yet created counts
// as if it ran.
//
// What is in use is estimated: Reserve, plus Costs of each CAPCT node
// container on the engine that holds its resources (every state but exited
// and dead), plus the admitted nodes the engine does not list yet.
type Gate struct {
	// Runtime lists the node containers on the host.
	Runtime container.Runtime
	// Limits reads the host's limits.
	Limits Reader
	// Costs are what a node of each role consumes.
	Costs Costs
	// Reserve is the use CAPCT does not create.
	Reserve Values
	// Clock defaults to the real clock.
	Clock clock.PassiveClock

	mu       sync.Mutex
	admitted map[string]admission
	held     map[types.NamespacedName]bool
}

type admission struct {
	role container.Role
	at   time.Time
}

// Decision is the Gate's answer for one node.
type Decision struct {
	// Shortfall is the limit that holds the node back; nil admits it.
	Shortfall *Shortfall
	// Announce is true for the first node of a cluster held back since one
	// of its nodes was last admitted: the moment to tell the cluster once,
	// rather than on every pass of every waiting machine.
	Announce bool
}

// Admit decides whether the node container name of role, for the cluster
// whose infrastructure is cluster, may be created now.
func (g *Gate) Admit(ctx context.Context, cluster types.NamespacedName, name string, role container.Role) (Decision, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.admitted == nil {
		g.admitted, g.held = map[string]admission{}, map[types.NamespacedName]bool{}
	}
	clk := g.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	now := clk.Now()

	limits, err := g.Limits.Read()
	if err != nil {
		return Decision{}, fmt.Errorf("failed to read the host's limits: %w", err)
	}
	all, err := g.Runtime.List(ctx, nil)
	if err != nil {
		return Decision{}, fmt.Errorf("failed to list the node containers on the host: %w", err)
	}
	nodes := map[container.Role]int{}
	listed := map[string]bool{}
	for _, m := range all {
		r := container.Role(m.Labels[container.LabelRole])
		listed[m.Name] = true
		if r.IsNode() && m.State != container.StateExited && m.State != container.StateDead {
			nodes[r]++
		}
	}
	for n, a := range g.admitted {
		switch {
		case listed[n] || now.Sub(a.at) > admissionTTL:
			delete(g.admitted, n)
		case n != name:
			nodes[a.role]++
		}
	}
	if listed[name] {
		// Its container exists: it holds its room already.
		return Decision{}, nil
	}
	if short := Check(limits, g.Reserve, g.Costs, nodes, role); short != nil {
		announce := !g.held[cluster]
		g.held[cluster] = true
		return Decision{Shortfall: short, Announce: announce}, nil
	}
	g.admitted[name] = admission{role: role, at: now}
	delete(g.held, cluster)
	return Decision{}, nil
}
