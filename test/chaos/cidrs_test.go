//go:build realcluster

package chaos_test

import (
	"context"
	"strings"
	"sync"
	"time"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/test/realcluster"
)

// cidrWatch samples, every 2 s until stopped, the pod CIDRs the workload
// cluster's Nodes hold (spec.podCIDRs) and those CAPCT recorded on its
// ContainerMachines (the pod-cidrs annotation), and keeps every CIDR it
// saw held by two Nodes, or by two machines' records, at once. A CIDR
// freed by a deleted machine and given to a new one is not a duplicate:
// only what is held at the same moment counts.
type cidrWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu                sync.Mutex
	samples, failures int
	duplicates        []string
	seenDuplicate     map[string]bool
}

func startCIDRWatch(ctx context.Context, c *realcluster.Clusters) *cidrWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &cidrWatch{cancel: cancel, done: make(chan struct{}), seenDuplicate: map[string]bool{}}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			w.sample(ctx, c)
			realcluster.Pause(ctx, 2*time.Second)
		}
	}()
	return w
}

func (w *cidrWatch) sample(ctx context.Context, c *realcluster.Clusters) {
	nodes, nodesErr := c.Nodes(ctx)
	machines, machinesErr := c.ContainerMachines(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if nodesErr != nil || machinesErr != nil {
		w.failures++
		return
	}
	w.samples++
	held := map[string][]string{}
	for i := range nodes {
		held["Node "+nodes[i].Name] = nodes[i].Spec.PodCIDRs
	}
	recorded := map[string][]string{}
	for i := range machines {
		if v := machines[i].Annotations[infrav1.PodCIDRsAnnotation]; v != "" {
			recorded["ContainerMachine "+machines[i].Name] = strings.Split(v, ",")
		}
	}
	for _, d := range append(realcluster.DuplicateCIDRs(held), realcluster.DuplicateCIDRs(recorded)...) {
		if !w.seenDuplicate[d] {
			w.seenDuplicate[d] = true
			w.duplicates = append(w.duplicates, time.Now().UTC().Format(time.TimeOnly)+" "+d)
		}
	}
}

// stop ends the sampling and returns how many samples succeeded and
// failed, and the duplicates seen.
func (w *cidrWatch) stop() (samples, failures int, duplicates []string) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.samples, w.failures, w.duplicates
}
