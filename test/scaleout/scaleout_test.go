//go:build realcluster

package scaleout_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/test/realcluster"
)

// limitFile is the host's limit on inotify instances per user: every
// node's systemd, journald, containerd and kubelet run as the host's root,
// so all nodes share root's.
const limitFile = "/proc/sys/fs/inotify/max_user_instances"

// pool is the cluster's MachinePool and what reaches it.
type pool struct {
	*realcluster.Clusters
	engine *realcluster.Engine
	name   string
}

// TestMachinePoolScaleOut scales the MachinePool to SCALE_OUT_REPLICAS
// (10) real nodes and back to 0; then, with the host's inotify instances
// lowered to what is in use plus SCALE_OUT_HEADROOM (8), to 10 again: for
// LOWERED_WINDOW (120 s) no ContainerMachine may fail and some must wait
// with the Launched reason WaitingForHostCapacity; with the limit
// restored every Node must become Ready; then back to 0.
func TestMachinePoolScaleOut(t *testing.T) {
	env := realcluster.LoadEnv(t, "test-scale-out")
	replicas := realcluster.Int(t, "SCALE_OUT_REPLICAS", 10)
	headroom := realcluster.Int(t, "SCALE_OUT_HEADROOM", 8)
	window := realcluster.Seconds(t, "LOWERED_WINDOW", 120)
	ctx := t.Context()
	p := &pool{Clusters: realcluster.Connect(t, env), engine: realcluster.NewEngine(t, "the engine", ""), name: env.Cluster + "-mp-0"}

	if !t.Run("scale_out", func(t *testing.T) { p.scaleOut(ctx, t, replicas) }) {
		t.FailNow()
	}
	if !t.Run("scale_in", func(t *testing.T) { p.scaleIn(ctx, t) }) {
		t.FailNow()
	}
	if !t.Run("scale_out_with_inotify_exhausted", func(t *testing.T) { p.scaleOutExhausted(ctx, t, replicas, headroom, window) }) {
		t.FailNow()
	}
	t.Run("scale_in_after", func(t *testing.T) { p.scaleIn(ctx, t) })
}

// scaleOut: the pool 0->replicas, every Node Ready within the quickstart's
// bound, no machine failed; the time and inotify instances per node.
func (p *pool) scaleOut(ctx context.Context, t *testing.T, replicas int) {
	start, usedBefore := time.Now(), inotifyInUse()
	p.scale(ctx, t, replicas)
	if err := p.WaitNodes(ctx, t, 0, replicas, p.Env.NodeTimeout); err != nil {
		t.Fatalf("MachinePool %s did not reach %d Ready Nodes: %v", p.name, replicas, err)
	}
	t.Logf("measured: MachinePool 0->%d to every Node Ready in %s", replicas, time.Since(start).Round(time.Second))
	used := inotifyInUse()
	t.Logf("inotify instances in use: %d before, %d with %d more nodes (about %d per node)", usedBefore, used, replicas, (used-usedBefore)/replicas)
}

// scaleIn: the pool ->0, and within 300 s nothing of it left: no
// ContainerMachine, no worker container, no Node. The Nodes go last
// (Cluster API deletes a Node after its machine's infrastructure), so they
// are waited for too, not checked once.
func (p *pool) scaleIn(ctx context.Context, t *testing.T) {
	start := time.Now()
	p.scale(ctx, t, 0)
	deadline := start.Add(300 * time.Second)
	for {
		left := p.left(ctx)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("300s after scaling to 0, the pool's machines, Nodes or containers are still there: %s", strings.Join(left, "; "))
		}
		realcluster.Pause(ctx, 2*time.Second)
	}
	t.Logf("MachinePool %s at 0, every machine, Node and container gone, in %s", p.name, time.Since(start).Round(time.Second))
}

// left says what of the pool is still there.
func (p *pool) left(ctx context.Context) []string {
	var left []string
	if machines, err := p.ContainerMachines(ctx); err != nil {
		left = append(left, err.Error())
	} else {
		for _, m := range machines {
			if strings.HasPrefix(m.Name, p.name+"-") {
				left = append(left, "ContainerMachine "+m.Name)
			}
		}
	}
	if workers, err := p.engine.Containers(ctx, container.LabelCluster+"="+p.Env.Cluster, container.LabelRole+"="+string(container.RoleWorker)); err != nil {
		left = append(left, err.Error())
	} else {
		for _, c := range workers {
			left = append(left, "container "+realcluster.Name(c))
		}
	}
	if nodes, err := p.Nodes(ctx); err != nil {
		left = append(left, err.Error())
	} else if n := realcluster.CountNodes(nodes); !n.Are(0, 0) {
		left = append(left, "Nodes: "+n.String())
	}
	return left
}

// scaleOutExhausted: the limit lowered to what is in use plus headroom,
// restored afterwards whatever happens; 0->replicas. For window no
// ContainerMachine may fail, and some must wait with the Launched reason
// WaitingForHostCapacity; then with the limit restored every Node must
// become Ready within the quickstart's bound.
func (p *pool) scaleOutExhausted(ctx context.Context, t *testing.T, replicas, headroom int, window time.Duration) {
	restore := lowerLimit(t, headroom)
	defer restore()
	p.scale(ctx, t, replicas)
	progress := realcluster.NewProgress(t)
	start := time.Now()
	var failed []string
	for time.Since(start) < window {
		if machines, err := p.ContainerMachines(ctx); err == nil {
			if failed = progress.Machines(machines); len(failed) > 0 {
				break
			}
		}
		realcluster.Pause(ctx, 3*time.Second)
	}
	machines, err := p.ContainerMachines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var launched []string
	waiting := 0
	for i := range machines {
		m := &machines[i]
		if c := conditions.Get(m, infrav1.LaunchedCondition); c != nil && c.Reason == infrav1.WaitingForHostCapacityReason {
			waiting++
		}
		if !strings.Contains(m.Name, "-control-plane-") {
			launched = append(launched, launchedOf(m))
		}
	}
	t.Logf("with the limit lowered, after %s: ContainerMachines' Launched: %s", time.Since(start).Round(time.Second), realcluster.Tally(launched))
	if len(failed) > 0 {
		t.Errorf("%d ContainerMachines failed for good instead of waiting: %s", len(failed), strings.Join(failed, " "))
		p.why(ctx, t, failed[0])
	}
	if waiting == 0 {
		t.Error("no ContainerMachine waits with the Launched reason WaitingForHostCapacity")
	}
	restore()
	if len(failed) > 0 {
		t.Log("not waiting for the pool after restoring the limit: its failed machines do not recover")
		return
	}
	start = time.Now()
	if err := p.WaitNodes(ctx, t, 0, replicas, p.Env.NodeTimeout); err != nil {
		t.Errorf("after the limit was restored, %d Nodes were not Ready within %s, or a machine failed: %v", replicas, p.Env.NodeTimeout, err)
		return
	}
	t.Logf("measured: limit restored -> %d Nodes Ready in %s", replicas, time.Since(start).Round(time.Second))
}

func launchedOf(m *infrav1.ContainerMachine) string {
	c := conditions.Get(m, infrav1.LaunchedCondition)
	if c == nil {
		return "no Launched condition"
	}
	return fmt.Sprintf("Launched=%s/%s", c.Status, c.Reason)
}

// why logs the conditions of the failed machine that are not True.
func (p *pool) why(ctx context.Context, t *testing.T, name string) {
	var m infrav1.ContainerMachine
	if err := p.Mgmt.Get(ctx, client.ObjectKey{Namespace: p.Env.Namespace, Name: name}, &m); err != nil {
		t.Logf("why %s failed: %v", name, err)
		return
	}
	var b strings.Builder
	for _, c := range m.Status.Conditions {
		if c.Status != metav1.ConditionTrue {
			msg := c.Message
			if len(msg) > 600 {
				msg = msg[:600]
			}
			fmt.Fprintf(&b, "\n  %s=%s %s: %s", c.Type, c.Status, c.Reason, msg)
		}
	}
	t.Logf("why %s failed:%s", name, b.String())
}

// scale sets the MachinePool's replicas, as kubectl scale does, retried
// while the management cluster's webhooks refuse.
func (p *pool) scale(ctx context.Context, t *testing.T, replicas int) {
	t.Helper()
	err := realcluster.Retry(ctx, func(ctx context.Context) error {
		mp := &clusterv1.MachinePool{}
		if err := p.Mgmt.Get(ctx, client.ObjectKey{Namespace: p.Env.Namespace, Name: p.name}, mp); err != nil {
			return fmt.Errorf("failed to read MachinePool %s: %w", p.name, err)
		}
		patch := client.MergeFrom(mp.DeepCopy())
		mp.Spec.Replicas = ptr.To(int32(replicas))
		return p.Mgmt.Patch(ctx, mp, patch)
	})
	if err != nil {
		t.Fatalf("failed to scale MachinePool %s to %d: %v", p.name, replicas, err)
	}
	t.Logf("MachinePool %s scaled to %d", p.name, replicas)
}

// lowerLimit lowers the host's inotify instances to those in use plus
// headroom, and returns the function that restores the limit; it runs at
// the test's end too. scale-out-test.sh restores it as well, should this
// test not get to (a timeout's panic runs no cleanup).
func lowerLimit(t *testing.T, headroom int) func() {
	t.Helper()
	b, err := os.ReadFile(limitFile)
	if err != nil {
		t.Fatal(err)
	}
	original := strings.TrimSpace(string(b))
	used := inotifyInUse()
	lowered := used + headroom
	if err := os.WriteFile(limitFile, []byte(strconv.Itoa(lowered)), 0o644); err != nil {
		t.Fatalf("failed to lower %s: %v", limitFile, err)
	}
	t.Logf("lowered fs.inotify.max_user_instances from %s to %d (%d in use + %d)", original, lowered, used, headroom)
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		if err := os.WriteFile(limitFile, []byte(original), 0o644); err != nil {
			t.Errorf("failed to restore %s to %s: %v", limitFile, original, err)
			return
		}
		t.Logf("restored fs.inotify.max_user_instances to %s", original)
	}
	t.Cleanup(restore)
	return restore
}

// inotifyInUse counts the inotify instances held by root's processes, as
// find /proc/[0-9]*/fd -user 0 -lname anon_inode:inotify does: processes
// that end while it reads them are not counted.
func inotifyInUse() int {
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	n := 0
	for _, fd := range fds {
		fi, err := os.Lstat(fd)
		if err != nil {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 {
			continue
		}
		if target, err := os.Readlink(fd); err == nil && target == "anon_inode:inotify" {
			n++
		}
	}
	return n
}
