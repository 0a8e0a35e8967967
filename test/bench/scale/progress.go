package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// Milestones of a machine, in the order they happen.
const (
	provisioned = iota // ContainerMachine status.initialization.provisioned
	initialized        // ContainerMachine Initialized (Node has pod CIDRs, is untainted and Ready)
	ready              // ContainerMachine Ready
	running            // Cluster API's Machine in phase Running
	milestones
)

var milestoneNames = [milestones]string{"provisioned", "initialized", "ready", "machinesRunning"}

// progress records when each machine first reached each milestone, from
// the manager's informers (no requests of its own), and when all of them
// had.
type progress struct {
	start time.Time
	want  int

	mu      sync.Mutex
	reached [milestones]map[string]bool
	all     [milestones]time.Duration
	done    chan struct{}
}

func newProgress(start time.Time, want int) *progress {
	p := &progress{start: start, want: want, done: make(chan struct{})}
	for i := range p.reached {
		p.reached[i] = map[string]bool{}
	}
	return p
}

func (p *progress) watch(ctx context.Context, informers cache.Cache) error {
	cms, err := informers.GetInformer(ctx, &infrav1.ContainerMachine{})
	if err != nil {
		return fmt.Errorf("failed to get the ContainerMachine informer: %w", err)
	}
	onCM := func(obj any) {
		cm, ok := obj.(*infrav1.ContainerMachine)
		if !ok {
			return
		}
		key := cm.Namespace + "/" + cm.Name
		if cm.Status.Initialization.Provisioned != nil && *cm.Status.Initialization.Provisioned {
			p.mark(provisioned, key)
		}
		if conditions.IsTrue(cm, infrav1.InitializedCondition) {
			p.mark(initialized, key)
		}
		if conditions.IsTrue(cm, infrav1.ReadyCondition) {
			p.mark(ready, key)
		}
	}
	if _, err := cms.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: onCM, UpdateFunc: func(_, o any) { onCM(o) }}); err != nil {
		return fmt.Errorf("failed to watch ContainerMachines: %w", err)
	}
	machines, err := informers.GetInformer(ctx, &clusterv1.Machine{})
	if err != nil {
		return fmt.Errorf("failed to get the Machine informer: %w", err)
	}
	onMachine := func(obj any) {
		if m, ok := obj.(*clusterv1.Machine); ok && m.Status.Phase == string(clusterv1.MachinePhaseRunning) {
			p.mark(running, m.Namespace+"/"+m.Name)
		}
	}
	if _, err := machines.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: onMachine, UpdateFunc: func(_, o any) { onMachine(o) }}); err != nil {
		return fmt.Errorf("failed to watch Machines: %w", err)
	}
	return nil
}

func (p *progress) mark(m int, key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reached[m][key] {
		return
	}
	p.reached[m][key] = true
	if len(p.reached[m]) == p.want {
		p.all[m] = time.Since(p.start)
		for i := range p.all {
			if p.all[i] == 0 {
				return
			}
		}
		close(p.done)
	}
}

// counts returns how many machines reached each milestone, and the time
// all of them had (0 when not yet).
func (p *progress) counts() (n [milestones]int, all [milestones]time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.reached {
		n[i] = len(p.reached[i])
	}
	return n, p.all
}
