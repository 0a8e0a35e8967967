//go:build realcluster

package chaos_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/test/realcluster"
)

// The manager as config/manager deploys it: its namespace, its pods'
// label and its leader-election lease (main.go's LeaderElectionID).
const (
	managerNamespace = "capct-system"
	managerLabel     = "control-plane"
	managerLabelVal  = "controller-manager"
	managerContainer = "manager"
	leaseName        = "controller-leader-election-capct"
)

// minWork is the least time a new manager leads before it is killed: one
// reconcile's worth, so that some kills land in the middle of one.
const minWork = 500 * time.Millisecond

// leaderBound bounds the wait for a new manager to lead: a pod to start
// and the killed one's lease (15 s) to run out; after the engine restart,
// the management cluster's boot too.
const leaderBound = 5 * time.Minute

// chaos is the run: the clusters, the engine, the random source and what
// was done.
type chaos struct {
	*realcluster.Clusters
	engine  *realcluster.Engine
	rng     *rand.Rand
	seed    uint64
	maxWork time.Duration
	control string
	pool    string
	kills   []kill
}

// kill is one SIGKILL of the manager.
type kill struct {
	phase string
	// at is the time since the phase began; work how long the manager had
	// led before it was killed.
	at, work time.Duration
	pod      string
	// machines is a tally of the cluster's ContainerMachines' phases when
	// it was killed: where in their lifecycle the kill landed.
	machines string
}

// TestManagerKilledDuringScaleOutAndDeletion kills CAPCT's manager
// CHAOS_KILLS times (20) while there is work to do: during a MachinePool
// scale from 0 to CHAOS_REPLICAS (10) until every Node is Ready, with one
// engine restart after kill CHAOS_RESTART_AFTER (5), and the rest during
// the cluster's deletion, at least CHAOS_DELETE_KILLS (6) of them. Each
// kill comes after the new manager has led for a random time of 0.5 s to
// CHAOS_MAX_WORK seconds (4; half that in the deletion), drawn from CHAOS_SEED (random, logged, to
// replay a run). Then: every Node Ready; no pod CIDR held twice at once by
// the Nodes or by CAPCT's records, sampled every 2 s throughout; the
// deletion finished; nothing of the cluster left on the engine.
func TestManagerKilledDuringScaleOutAndDeletion(t *testing.T) {
	env := realcluster.LoadEnv(t, "test-chaos")
	total := realcluster.Int(t, "CHAOS_KILLS", 20)
	deleteKills := realcluster.Int(t, "CHAOS_DELETE_KILLS", 6)
	replicas := realcluster.Int(t, "CHAOS_REPLICAS", 10)
	restartAfter := realcluster.Int(t, "CHAOS_RESTART_AFTER", 5)
	if deleteKills >= total {
		t.Fatalf("CHAOS_DELETE_KILLS=%d must be less than CHAOS_KILLS=%d", deleteKills, total)
	}
	seed := uint64(time.Now().UnixNano())
	if os.Getenv("CHAOS_SEED") != "" {
		seed = uint64(realcluster.Int(t, "CHAOS_SEED", 1))
	}
	t.Logf("CHAOS_SEED=%d", seed)
	control := os.Getenv("RESTART_ENGINE_CONTROL")
	if control == "" {
		t.Fatal("RESTART_ENGINE_CONTROL unset: run this test through make test-chaos, whose script stops and starts the engine")
	}
	ctx := t.Context()
	c := &chaos{
		Clusters: realcluster.Connect(t, env),
		engine:   realcluster.NewEngine(t, "the engine", ""),
		rng:      rand.New(rand.NewPCG(seed, seed)),
		seed:     seed,
		maxWork:  realcluster.Seconds(t, "CHAOS_MAX_WORK", 4),
		control:  control,
		pool:     env.Cluster + "-mp-0",
	}
	cidrs := startCIDRWatch(ctx, c.Clusters)

	var scaleTook time.Duration
	scaled := t.Run("scale_out", func(t *testing.T) {
		start := time.Now()
		c.scale(ctx, t, replicas)
		ready := func(ctx context.Context) bool {
			nodes, err := c.Nodes(ctx)
			return err == nil && realcluster.CountNodes(nodes).Are(0, replicas)
		}
		landed := c.killRepeatedly(ctx, t, "scale-out", total-deleteKills, restartAfter, c.maxWork, ready)
		if landed < restartAfter {
			t.Errorf("the pool was Ready after %d kills, before the engine restart planned after kill %d", landed, restartAfter)
		}
		if err := c.waitNodes(ctx, t, replicas); err != nil {
			t.Fatal(err)
		}
		scaleTook = time.Since(start)
		c.checkWorkerContainers(ctx, t, replicas)
		t.Logf("measured: MachinePool 0->%d to every Node Ready in %s, with %d kills and an engine restart", replicas, scaleTook.Round(time.Second), landed)
	})
	t.Run("no_duplicate_pod_CIDRs", func(t *testing.T) {
		samples, failures, duplicates := cidrs.stop()
		t.Logf("pod CIDRs sampled %d times (%d samples failed to read, as while the engine restarted)", samples, failures)
		for _, d := range duplicates {
			t.Error("duplicate pod CIDR: " + d)
		}
		if samples == 0 {
			t.Error("no sample of the pod CIDRs succeeded")
		}
	})
	if !scaled {
		t.FailNow()
	}
	var deleteTook time.Duration
	t.Run("deletion", func(t *testing.T) {
		start := time.Now()
		c.deleteCluster(ctx, t)
		gone := func(ctx context.Context) bool { return c.clusterGone(ctx) }
		// A deletion is less work than a scale-out: shorter terms, so
		// that its kills land before it is done.
		c.killRepeatedly(ctx, t, "deletion", total-len(c.kills), 0, max(minWork, c.maxWork/2), gone)
		if err := c.waitClusterGone(ctx, 10*time.Minute); err != nil {
			// CI keeps only the end of a run's output: what holds the
			// deletion goes with the failure.
			t.Fatalf("%v\n%s", err, c.whyNotGone(ctx))
		}
		deleteTook = time.Since(start)
		t.Logf("measured: the cluster deleted in %s", deleteTook.Round(time.Second))
	})
	t.Run("nothing_left", func(t *testing.T) {
		for _, l := range c.leftovers(ctx) {
			t.Error("left behind: " + l)
		}
	})
	c.report(t, scaleTook, deleteTook)
}

// killRepeatedly kills the manager up to n times, each after the manager
// of the moment has led for a random time of minWork to maxWork, and
// restarts the engine after
// kill number restartAfter (0: never). It stops early when done says the
// phase's work is over, and returns how many kills landed.
func (c *chaos) killRepeatedly(ctx context.Context, t *testing.T, phase string, n, restartAfter int, maxWork time.Duration, done func(context.Context) bool) int {
	t.Helper()
	start := time.Now()
	for i := 1; i <= n; i++ {
		pod, err := c.waitLeader(ctx, leaderBound)
		if err != nil {
			t.Fatalf("before kill %d of the %s: %v", i, phase, err)
		}
		led := time.Now()
		work := minWork + time.Duration(c.rng.Int64N(int64(maxWork-minWork)+1))
		realcluster.Pause(ctx, work)
		if done(ctx) {
			t.Logf("the %s was over before kill %d of up to %d", phase, i, n)
			return i - 1
		}
		machines := c.machineTally(ctx)
		if err := c.killManager(ctx, pod); err != nil {
			t.Fatalf("kill %d of the %s: %v", i, phase, err)
		}
		k := kill{phase: phase, at: time.Since(start), work: time.Since(led), pod: pod, machines: machines}
		c.kills = append(c.kills, k)
		t.Logf("kill %d of the %s at +%s, after leading %s (%s): %s", i, phase, k.at.Round(time.Second), k.work.Round(time.Second), pod, machines)
		if i == restartAfter {
			c.restartEngine(ctx, t)
		}
	}
	return n
}

// restartEngine stops and starts the engine through the restart test's
// script, then waits for the management API server.
func (c *chaos) restartEngine(ctx context.Context, t *testing.T) {
	t.Helper()
	start := time.Now()
	realcluster.EngineControl(t, c.control, "engine-stop")
	realcluster.EngineControl(t, c.control, "engine-start")
	t.Logf("engine restarted in %s", time.Since(start).Round(time.Second))
	deadline := time.Now().Add(leaderBound)
	for realcluster.Readyz(ctx, c.MgmtConfig) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the management API server did not answer within %s of the engine restart", leaderBound)
		}
		realcluster.Pause(ctx, 2*time.Second)
	}
	t.Logf("the management API server answers %s after the engine was told to stop", time.Since(start).Round(time.Second))
}

// waitLeader waits up to bound for a running manager pod, not being
// deleted, to hold the leader lease, and returns its name.
func (c *chaos) waitLeader(ctx context.Context, bound time.Duration) (string, error) {
	deadline := time.Now().Add(bound)
	for {
		pod, why := c.leader(ctx)
		if pod != "" {
			return pod, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no manager pod led within %s: %s", bound, why)
		}
		realcluster.Pause(ctx, time.Second)
	}
}

// leader is the manager pod that holds the lease, or why there is none.
func (c *chaos) leader(ctx context.Context) (string, string) {
	ctx, cancel := context.WithTimeout(ctx, realcluster.RequestTimeout)
	defer cancel()
	var lease coordinationv1.Lease
	if err := c.Mgmt.Get(ctx, client.ObjectKey{Namespace: managerNamespace, Name: leaseName}, &lease); err != nil {
		return "", fmt.Sprintf("failed to read Lease %s: %v", leaseName, err)
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	var pods corev1.PodList
	if err := c.Mgmt.List(ctx, &pods, client.InNamespace(managerNamespace), client.MatchingLabels{managerLabel: managerLabelVal}); err != nil {
		return "", fmt.Sprintf("failed to list the manager's pods: %v", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		// controller-runtime's identity is the pod's host name, its name,
		// followed by "_" and a UUID of the process.
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && strings.HasPrefix(holder, p.Name+"_") &&
			containerID(p) != "" {
			return p.Name, ""
		}
	}
	return "", fmt.Sprintf("the lease is held by %q, no running manager pod of that name", holder)
}

// containerID is the ID of the manager's running container in pod.
func containerID(pod *corev1.Pod) string {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == managerContainer && s.State.Running != nil {
			_, id, _ := strings.Cut(s.ContainerID, "://")
			return id
		}
	}
	return ""
}

// killManager sends SIGKILL to the processes of the manager's container in
// pod, as the out-of-memory killer or a lost host would end it (no
// graceful shutdown, the lease not released), then deletes the pod at
// once: its ReplicaSet starts a new one, where the kubelet would restart
// the container with a back-off that grows with every kill. The processes
// are found from the host by their cgroup, which names the container.
//
// The dead manager's lease is deleted too. The next manager would
// otherwise wait out its 15 s before leading, and most kills would land
// after the work is done; it starts the same way either way, and the
// killed process can no longer act on the lease.
func (c *chaos) killManager(ctx context.Context, name string) error {
	rctx, cancel := context.WithTimeout(ctx, realcluster.RequestTimeout)
	defer cancel()
	var pod corev1.Pod
	if err := c.Mgmt.Get(rctx, client.ObjectKey{Namespace: managerNamespace, Name: name}, &pod); err != nil {
		return fmt.Errorf("failed to read pod %s: %w", name, err)
	}
	id := containerID(&pod)
	if id == "" {
		return fmt.Errorf("pod %s has no running manager container", name)
	}
	pids, err := pidsInCgroupOf(id)
	if err != nil {
		return err
	}
	if len(pids) == 0 {
		return fmt.Errorf("no process of container %s (pod %s) found on the host", id, name)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
			return fmt.Errorf("failed to kill process %d of pod %s: %w", pid, name, err)
		}
	}
	if err := c.Mgmt.Delete(rctx, &pod, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to delete the killed pod %s: %w", name, err)
	}
	lease := &coordinationv1.Lease{}
	lease.Namespace, lease.Name = managerNamespace, leaseName
	if err := c.Mgmt.Delete(rctx, lease); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to delete the killed manager's Lease %s: %w", leaseName, err)
	}
	return nil
}

// pidsInCgroupOf lists the host's processes whose cgroup path names the
// container id (the kubelet's cgroups end in cri-containerd-<id>.scope
// with the systemd driver, <id> with cgroupfs).
func pidsInCgroupOf(id string) ([]int, error) {
	files, err := filepath.Glob("/proc/[0-9]*/cgroup")
	if err != nil {
		return nil, fmt.Errorf("failed to list the host's processes: %w", err)
	}
	var pids []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), id) {
			continue // a process that ended meanwhile
		}
		var pid int
		if _, err := fmt.Sscanf(f, "/proc/%d/cgroup", &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// machineTally counts the cluster's ContainerMachines by phase.
func (c *chaos) machineTally(ctx context.Context) string {
	machines, err := c.ContainerMachines(ctx)
	if err != nil {
		return err.Error()
	}
	phases := make([]string, 0, len(machines))
	for i := range machines {
		phases = append(phases, realcluster.MachinePhase(&machines[i]))
	}
	if len(phases) == 0 {
		return "no ContainerMachines"
	}
	return realcluster.Tally(phases)
}

// scale sets the MachinePool's replicas, retried while the management
// cluster's webhooks refuse (after a kill, CAPCT's own are away).
func (c *chaos) scale(ctx context.Context, t *testing.T, replicas int) {
	t.Helper()
	err := realcluster.Retry(ctx, func(ctx context.Context) error {
		mp := &clusterv1.MachinePool{}
		if err := c.Mgmt.Get(ctx, client.ObjectKey{Namespace: c.Env.Namespace, Name: c.pool}, mp); err != nil {
			return fmt.Errorf("failed to read MachinePool %s: %w", c.pool, err)
		}
		patch := client.MergeFrom(mp.DeepCopy())
		mp.Spec.Replicas = ptr.To(int32(replicas))
		return c.Mgmt.Patch(ctx, mp, patch)
	})
	if err != nil {
		t.Fatalf("failed to scale MachinePool %s to %d: %v", c.pool, replicas, err)
	}
	t.Logf("MachinePool %s scaled to %d", c.pool, replicas)
}

// waitNodes waits up to the quickstart's bound for the control plane and
// replicas pool Nodes, every one Ready. Unlike the scale-out test's wait,
// a machine that failed for good does not end it: the pool replaces such
// members (docs/remediation.md); they are logged.
func (c *chaos) waitNodes(ctx context.Context, t *testing.T, replicas int) error {
	t.Helper()
	p := realcluster.NewProgress(t)
	failed := map[string]bool{}
	deadline := time.Now().Add(c.Env.NodeTimeout)
	for {
		nodes, err := c.Nodes(ctx)
		counts := realcluster.CountNodes(nodes)
		if err == nil {
			p.Nodes(counts)
			if counts.Are(0, replicas) {
				if len(failed) > 0 {
					t.Logf("ContainerMachines that failed on the way and were replaced: %s", strings.Join(slices.Sorted(maps.Keys(failed)), " "))
				}
				return nil
			}
		}
		if machines, err := c.ContainerMachines(ctx); err == nil {
			for _, name := range p.Machines(machines) {
				failed[name] = true
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not 1+%d Ready Nodes within %s of the last kill: %s", replicas, c.Env.NodeTimeout, counts)
		}
		realcluster.Pause(ctx, 2*time.Second)
	}
}

// checkWorkerContainers fails t unless the engine holds exactly replicas
// worker containers of the cluster: a kill between making a container and
// recording it must not leave a second one behind.
func (c *chaos) checkWorkerContainers(ctx context.Context, t *testing.T, replicas int) {
	t.Helper()
	workers, err := c.engine.Containers(ctx, container.LabelCluster+"="+c.Env.Cluster, container.LabelRole+"="+string(container.RoleWorker))
	if err != nil {
		t.Fatal(err)
	}
	if len(workers) != replicas {
		names := make([]string, 0, len(workers))
		for _, w := range workers {
			names = append(names, realcluster.Name(w))
		}
		t.Errorf("%d worker containers for %d replicas: %s", len(workers), replicas, strings.Join(names, " "))
	}
}

// deleteCluster deletes the Cluster, as kubectl delete does.
func (c *chaos) deleteCluster(ctx context.Context, t *testing.T) {
	t.Helper()
	err := realcluster.Retry(ctx, func(ctx context.Context) error {
		cl := &clusterv1.Cluster{}
		cl.Namespace, cl.Name = c.Env.Namespace, c.Env.Cluster
		if err := c.Mgmt.Delete(ctx, cl); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("failed to delete Cluster %s: %w", c.Env.Cluster, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Cluster %s deleted", c.Env.Cluster)
}

// clusterGone is true when the Cluster is no longer at the API server.
func (c *chaos) clusterGone(ctx context.Context) bool {
	_, err := c.CAPICluster(ctx)
	return apierrors.IsNotFound(err)
}

// waitClusterGone waits up to bound for the Cluster to be gone.
func (c *chaos) waitClusterGone(ctx context.Context, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for !c.clusterGone(ctx) {
		if time.Now().After(deadline) {
			return fmt.Errorf("Cluster %s still there %s after the last kill; its ContainerMachines: %s", c.Env.Cluster, bound, c.machineTally(ctx))
		}
		realcluster.Pause(ctx, 2*time.Second)
	}
	return nil
}

// whyNotGone describes what holds the cluster's deletion: its
// ContainerMachines and Machines that are still there, with the conditions
// that say why; the manager's pods and the endpoints of its webhook, which
// the machines' writes go through (all but a deletion's finalizer removal:
// hack/webhook-match-conditions.sh); and the end of the leading manager's
// log.
func (c *chaos) whyNotGone(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var b strings.Builder
	if machines, err := c.ContainerMachines(ctx); err != nil {
		fmt.Fprintf(&b, "ContainerMachines: %v\n", err)
	} else {
		for i := range machines {
			m := &machines[i]
			fmt.Fprintf(&b, "ContainerMachine %s: %s finalizers=%v %s\n", m.Name, realcluster.MachinePhase(m), m.Finalizers,
				realcluster.ObjectState("ContainerMachine", "", m.Status.Conditions))
		}
	}
	var machines clusterv1.MachineList
	if err := c.Mgmt.List(ctx, &machines, client.InNamespace(c.Env.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: c.Env.Cluster}); err != nil {
		fmt.Fprintf(&b, "Machines: %v\n", err)
	}
	for _, m := range machines.Items {
		for _, cond := range m.Status.Conditions {
			if cond.Type == clusterv1.DeletingCondition {
				fmt.Fprintf(&b, "Machine %s: Deleting=%s %s: %s\n", m.Name, cond.Status, cond.Reason, cond.Message)
			}
		}
	}
	holder, why := c.leader(ctx)
	fmt.Fprintf(&b, "leading manager pod: %q %s\n", holder, why)
	var pods corev1.PodList
	if err := c.Mgmt.List(ctx, &pods, client.InNamespace(managerNamespace), client.MatchingLabels{managerLabel: managerLabelVal}); err != nil {
		fmt.Fprintf(&b, "manager pods: %v\n", err)
	}
	for i := range pods.Items {
		fmt.Fprintf(&b, "manager pod %s: %s %s\n", pods.Items[i].Name, pods.Items[i].Status.Phase, realcluster.PodState(&pods.Items[i]))
	}
	var endpointSlices discoveryv1.EndpointSliceList
	if err := c.Mgmt.List(ctx, &endpointSlices, client.InNamespace(managerNamespace), client.MatchingLabels{discoveryv1.LabelServiceName: webhookService}); err != nil {
		fmt.Fprintf(&b, "webhook endpoints: %v\n", err)
	}
	for _, s := range endpointSlices.Items {
		for _, e := range s.Endpoints {
			fmt.Fprintf(&b, "webhook endpoint %v ready=%v\n", e.Addresses, ptr.Deref(e.Conditions.Ready, false))
		}
	}
	if holder != "" {
		fmt.Fprintf(&b, "last lines of %s's log:\n%s", holder, c.logTail(ctx, holder, 40))
	}
	return b.String()
}

// webhookService is the Service of CAPCT's webhooks (config/webhook).
const webhookService = "capct-webhook-service"

// logTail is the last n lines of the manager's log in pod.
func (c *chaos) logTail(ctx context.Context, pod string, n int64) string {
	cs, err := kubernetes.NewForConfig(c.MgmtConfig)
	if err != nil {
		return err.Error()
	}
	out, err := cs.CoreV1().Pods(managerNamespace).GetLogs(pod, &corev1.PodLogOptions{Container: managerContainer, TailLines: &n}).DoRaw(ctx)
	if err != nil {
		return err.Error()
	}
	return string(out)
}

// leftovers lists what of the cluster is still there: ContainerMachines,
// the ContainerCluster, and on the engine the containers, networks and
// volumes CAPCT labelled for it or named after it.
func (c *chaos) leftovers(ctx context.Context) []string {
	var left []string
	if machines, err := c.ContainerMachines(ctx); err != nil {
		left = append(left, err.Error())
	} else {
		for _, m := range machines {
			left = append(left, "ContainerMachine "+m.Name)
		}
	}
	if _, err := c.ContainerCluster(ctx); !apierrors.IsNotFound(err) {
		left = append(left, fmt.Sprintf("ContainerCluster %s (%v)", c.Env.Cluster, err))
	}
	label := container.LabelCluster + "=" + c.Env.Cluster
	if list, err := c.engine.Containers(ctx, label); err != nil {
		left = append(left, err.Error())
	} else {
		for _, ct := range list {
			left = append(left, "container "+realcluster.Name(ct))
		}
	}
	if list, err := c.engine.Containers(ctx); err != nil {
		left = append(left, err.Error())
	} else {
		for _, ct := range list {
			if name := realcluster.Name(ct); strings.HasPrefix(name, c.Env.Cluster+"-") {
				left = append(left, "container named after the cluster: "+name)
			}
		}
	}
	if names, err := c.engine.Networks(ctx, label); err != nil {
		left = append(left, err.Error())
	} else {
		for _, n := range names {
			left = append(left, "network "+n)
		}
	}
	if names, err := c.engine.Volumes(ctx, label); err != nil {
		left = append(left, err.Error())
	} else {
		for _, v := range names {
			left = append(left, "volume "+v)
		}
	}
	return left
}

// report logs the run's figures: the kills with where they landed, and the
// times.
func (c *chaos) report(t *testing.T, scaleTook, deleteTook time.Duration) {
	var b strings.Builder
	for i, k := range c.kills {
		fmt.Fprintf(&b, "\n  %2d  %-9s +%-5s led %-4s %s", i+1, k.phase, k.at.Round(time.Second), k.work.Round(time.Second), k.machines)
	}
	t.Logf("figures (CHAOS_SEED=%d): %d kills (each after the new manager led for %s-%s, in the deletion up to half that), 1 engine restart; scale-out to every Node Ready %s, deletion %s; kills:%s",
		c.seed, len(c.kills), minWork, c.maxWork, scaleTook.Round(time.Second), deleteTook.Round(time.Second), b.String())
	if n := realcluster.Int(t, "CHAOS_KILLS", 20); len(c.kills) < n {
		t.Logf("%d of the %d kills landed: the work was done before the rest", len(c.kills), n)
	}
}
