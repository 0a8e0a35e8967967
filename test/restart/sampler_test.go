//go:build realcluster

package restart_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/test/realcluster"
)

// sampleTimeout bounds each read of a sample: a sample every 3 s must not
// wait out an API server that is down.
const sampleTimeout = 3 * time.Second

// sampler reads the states of the engine's containers, both API servers
// and their objects every 3 s, and records each change in its Timeline
// and in the states file (epoch, object, state; tab separated). It ends
// when stopped, or by itself after an hour.
type sampler struct {
	realcluster.Timeline
	path string
	stop func()
}

// reading is one object's state in a sample.
type reading struct{ object, state string }

func startSampler(ctx context.Context, t *testing.T, r *run, path string) *sampler {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("failed to create the states file: %v", err)
	}
	s := &sampler{path: path}
	ctx, cancel := context.WithTimeout(ctx, time.Hour)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			now := time.Now()
			for _, st := range r.sample(ctx) {
				if e, changed := s.Record(now, st.object, st.state); changed {
					if _, err := f.WriteString(e.TSV()); err != nil {
						t.Errorf("failed to write %s: %v", path, err)
					}
				}
			}
			realcluster.Pause(ctx, 3*time.Second)
		}
	}()
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			if err := f.Close(); err != nil {
				t.Errorf("failed to close %s: %v", path, err)
			}
		})
	}
	t.Cleanup(s.stop)
	return s
}

// sample is one reading of every object's state.
func (r *run) sample(ctx context.Context) []reading {
	var out []reading
	out = append(out, r.sampleEngine(ctx)...)
	out = append(out, r.sampleManagement(ctx)...)
	return append(out, r.sampleWorkload(ctx)...)
}

func (r *run) sampleEngine(ctx context.Context) []reading {
	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	cluster, err := r.engine.Containers(ctx, container.LabelCluster+"="+r.Env.Cluster)
	if err != nil {
		return []reading{{"engine", "down"}}
	}
	mgmt, err := r.engine.Containers(ctx, realcluster.QuickstartLabel+"="+r.Env.MgmtName)
	if err != nil {
		return []reading{{"engine", "down"}}
	}
	out := []reading{{"engine", "answers"}}
	for _, c := range append(cluster, mgmt...) {
		out = append(out, reading{"container " + realcluster.Name(c), string(c.State)})
	}
	return out
}

// sampleManagement: the ContainerMachines, Machines, Cluster and
// ContainerCluster of the namespace, each with its phase and conditions.
func (r *run) sampleManagement(ctx context.Context) []reading {
	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	in := client.InNamespace(r.Env.Namespace)
	var (
		cms      infrav1.ContainerMachineList
		machines clusterv1.MachineList
		clusters clusterv1.ClusterList
		ccs      infrav1.ContainerClusterList
	)
	for _, list := range []client.ObjectList{&cms, &machines, &clusters, &ccs} {
		if err := r.Mgmt.List(ctx, list, in); err != nil {
			return []reading{{"management API", "unreachable"}}
		}
	}
	out := []reading{{"management API", "answers"}}
	for i := range cms.Items {
		m := &cms.Items[i]
		out = append(out, reading{"ContainerMachine " + m.Name, realcluster.ObjectState("ContainerMachine", string(m.Status.Phase), m.Status.Conditions)})
	}
	for i := range machines.Items {
		m := &machines.Items[i]
		out = append(out, reading{"Machine " + m.Name, realcluster.ObjectState("Machine", m.Status.Phase, m.Status.Conditions)})
	}
	for i := range clusters.Items {
		c := &clusters.Items[i]
		out = append(out, reading{"Cluster " + c.Name, realcluster.ObjectState("Cluster", c.Status.Phase, c.Status.Conditions)})
	}
	for i := range ccs.Items {
		c := &ccs.Items[i]
		out = append(out, reading{"ContainerCluster " + c.Name, realcluster.ObjectState("ContainerCluster", "", c.Status.Conditions)})
	}
	return out
}

// sampleWorkload: the Nodes' Ready, and the probe pods' Ready, phase and
// restarts.
func (r *run) sampleWorkload(ctx context.Context) []reading {
	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	nodes, err := r.Workload.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return []reading{{"workload API", "unreachable"}}
	}
	pods, err := r.Workload.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []reading{{"workload API", "unreachable"}}
	}
	out := []reading{{"workload API", "answers"}}
	for i := range nodes.Items {
		out = append(out, reading{"Node " + nodes.Items[i].Name, realcluster.NodeState(&nodes.Items[i])})
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; strings.HasPrefix(p.Name, "qs-") {
			out = append(out, reading{"Pod " + p.Name, realcluster.PodState(p)})
		}
	}
	return out
}
