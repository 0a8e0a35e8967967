package realcluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// Progress logs what a wait for machines sees as the quickstart prints it:
// the Nodes' counts and each ContainerMachine's phase, each when it
// changes, with the time since the Progress began.
type Progress struct {
	t      testing.TB
	start  time.Time
	nodes  *NodeCounts
	phases map[string]string
}

// NewProgress starts a Progress logging to t.
func NewProgress(t testing.TB) *Progress {
	return &Progress{t: t, start: time.Now(), phases: map[string]string{}}
}

func (p *Progress) elapsed() string { return fmt.Sprintf("%4ds", int(time.Since(p.start).Seconds())) }

// Nodes logs n when it differs from the last counts logged.
func (p *Progress) Nodes(n NodeCounts) {
	p.t.Helper()
	if p.nodes == nil || *p.nodes != n {
		p.t.Logf("%s  nodes: %s", p.elapsed(), n)
		p.nodes = &n
	}
}

// Machines logs the machines whose phase changed, and returns those that
// failed for good (CAPCT does not retry a failed phase).
func (p *Progress) Machines(machines []infrav1.ContainerMachine) []string {
	p.t.Helper()
	var failed []string
	for i := range machines {
		m := &machines[i]
		phase := MachinePhase(m)
		if p.phases[m.Name] != phase {
			p.t.Logf("%s  ContainerMachine %s: %s", p.elapsed(), m.Name, phase)
			p.phases[m.Name] = phase
		}
		if m.Status.Phase == infrav1.MachinePhaseFailed {
			failed = append(failed, m.Name)
		}
	}
	return failed
}

// FailedError says that machines failed for good during a wait.
type FailedError struct{ Machines []string }

func (e *FailedError) Error() string {
	return "ContainerMachines failed: " + strings.Join(e.Machines, " ")
}

// IsFailed is true when err says that machines failed for good.
func IsFailed(err error) bool {
	var f *FailedError
	return errors.As(err, &f)
}

// WaitNodes waits up to bound, reading every 2 s, for the workload cluster
// to have exactly one control plane, md MachineDeployment and mp
// MachinePool Nodes, every one Ready, logging progress. It returns a
// FailedError as soon as a ContainerMachine of the cluster has failed.
func (c *Clusters) WaitNodes(ctx context.Context, t testing.TB, md, mp int, bound time.Duration) error {
	t.Helper()
	p := NewProgress(t)
	deadline := time.Now().Add(bound)
	for {
		// Errors are transient here: an API server that does not answer
		// now may in the next round; the bound says when to give up.
		nodes, nodesErr := c.Nodes(ctx)
		counts := CountNodes(nodes)
		if nodesErr == nil {
			p.Nodes(counts)
		}
		if machines, err := c.ContainerMachines(ctx); err == nil {
			if failed := p.Machines(machines); len(failed) > 0 {
				return &FailedError{Machines: failed}
			}
		}
		if nodesErr == nil && counts.Are(md, mp) {
			return nil
		}
		if time.Now().After(deadline) {
			if nodesErr != nil {
				return fmt.Errorf("timed out after %s waiting for 1+%d+%d Ready Nodes: %w", bound, md, mp, nodesErr)
			}
			return fmt.Errorf("timed out after %s waiting for 1+%d+%d Ready Nodes: %s", bound, md, mp, counts)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for 1+%d+%d Ready Nodes: %w", md, mp, ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// Retry calls f until it succeeds, up to 30 times 2 s apart, as the
// quickstart's apply does: on a small host a management cluster under load
// loses its controllers' leader leases now and then, and their webhooks
// refuse connections until they are back. f must be idempotent.
func Retry(ctx context.Context, f func(context.Context) error) error {
	var err error
	for try := 1; ; try++ {
		if err = f(ctx); err == nil {
			return nil
		}
		if try >= 30 {
			return fmt.Errorf("failed after %d attempts: %w", try, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
		case <-time.After(2 * time.Second):
		}
	}
}
