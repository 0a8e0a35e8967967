//go:build engine

package lifecycle

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

// These tests run the bootstrap script for real, in busybox containers
// launched as node containers (tmpfs /run, a volume on /var). kubeadm,
// journalctl and ctr are shell scripts the tests put in the container, so
// that a failure can be made to happen once and then pass.

// fakeKubeadm counts its runs in /var/kubeadm-runs and its resets in
// /var/kubeadm-resets. `kubeadm join` fails as on a node whose containerd
// lacks its CRI plugin while fewer than $FAIL runs were made (0 by default),
// and waits for /var/go while fewer than $HOLD runs were made.
const fakeKubeadm = `#!/bin/sh
case "$1" in
reset) echo reset >> /var/kubeadm-resets; echo "[reset] Deleted contents of /var/lib/kubelet"; exit 0 ;;
join) ;;
*) echo "unknown command $1" >&2; exit 1 ;;
esac
echo run >> /var/kubeadm-runs
n=$(wc -l < /var/kubeadm-runs)
if [ "$n" -le @HOLD@ ]; then
	while [ ! -e /var/go ]; do sleep 1; done
fi
if [ "$n" -le @FAIL@ ]; then
	echo "[preflight] Running pre-flight checks" >&2
	echo "	[ERROR CRI]: container runtime is not running: output: rpc error: code = Unimplemented desc = unknown service runtime.v1.RuntimeService" >&2
	exit 1
fi
if [ -e /var/ctr-calls ] && [ "$(wc -l < /var/ctr-calls)" -lt 3 ]; then
	echo "	[ERROR CRI]: container runtime is not running: kubeadm ran before the runtime answered" >&2
	exit 1
fi
echo "This node has joined the cluster"
`

// fakeJournalctl prints containerd's journal of a host out of inotify
// instances.
const fakeJournalctl = `#!/bin/sh
echo 'time="2026-12-01T10:00:00Z" level=warning msg="failed to load plugin io.containerd.grpc.v1.cri" error="failed to create CRI service: failed to create fsnotify watcher: too many open files"'
`

// fakeCtr answers "plugins ls" with the cri plugin in error for its first
// two calls, then ok, counting calls in /var/ctr-calls.
const fakeCtr = `#!/bin/sh
echo call >> /var/ctr-calls
status=error
[ "$(wc -l < /var/ctr-calls)" -ge 3 ] && status=ok
echo "TYPE                            ID                       PLATFORMS      STATUS"
echo "io.containerd.grpc.v1           cri                      linux/amd64    $status"
`

const joinCloudConfig = `#cloud-config
write_files:
- path: /etc/hosts
  append: true
  content: "10.0.0.1 node\n"
runcmd:
- kubeadm join --config /run/kubeadm/join.yaml && echo success > /run/cluster-api/bootstrap-success.complete
`

type dockerEnv struct {
	*env
	rt *docker.Runtime
	s  *MachineScope
}

// newDockerEnv launches one busybox node container with the bootstrap data
// and the given stand-ins installed, under a cluster name of its own.
func newDockerEnv(t *testing.T, data string, tools map[string]string) *dockerEnv {
	t.Helper()
	return newDockerEnvWith(t, data, tools, nil)
}

// newDockerEnvWith is newDockerEnv with the machine changed by mutate (its
// image, images to preload) before the launch.
func newDockerEnvWith(t *testing.T, data string, tools map[string]string, mutate func(*MachineScope)) *dockerEnv {
	t.Helper()
	rt := dockertest.NewRuntime(t)
	ctx := context.Background()
	image, err := dockertest.BusyboxImage(ctx, rt)
	if err != nil {
		t.Fatal(err)
	}
	e := &dockerEnv{env: newEnv(t, data), rt: rt}
	e.deps.Engines = engines.Single(rt)
	e.restartManager(0)
	e.s = e.scope()
	suffix := rand.String(5)
	name := "capct-boot-" + suffix
	e.s.Cluster.Name, e.s.Cluster.UID = name, k8stypes.UID("uid-"+suffix)
	e.s.ContainerCluster.Name = name
	e.s.ContainerCluster.Spec.ClusterID = "id-" + suffix
	e.s.ContainerCluster.Spec.Network.Name = ""
	e.s.ContainerMachine.Labels[clusterv1.ClusterNameLabel] = name
	e.s.ContainerMachine.Spec.Image = image
	if mutate != nil {
		mutate(e.s)
	}
	t.Cleanup(func() { dockertest.RemoveClusters(context.Background(), rt, []string{name}) })
	if _, err := rt.EnsureNetwork(ctx, container.NetworkSpec{Name: naming.NetworkName(e.s.Cluster, e.s.ContainerCluster),
		Owner: e.s.Owner().ClusterOwner()}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.deps.launch().Reconcile(ctx, e.s); err != nil {
		t.Fatal(err)
	}
	if e.s.Container == nil {
		t.Fatalf("the container did not launch: %+v", condition(e.s, infrav1.LaunchedCondition))
	}
	for path, content := range tools {
		if err := rt.WriteFile(ctx, e.s.ContainerName(), e.s.Owner(), path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// lines counts the lines of a file in the container; a missing file has 0.
func (e *dockerEnv) lines(path string) int {
	e.t.Helper()
	b, err := e.rt.ReadFile(context.Background(), e.s.ContainerName(), e.s.Owner(), path)
	if container.IsNotFound(err) {
		return 0
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// untilBootstrapDone reconciles on every notice until Bootstrapped is True
// or terminal, for at most a minute.
func (e *dockerEnv) untilBootstrapDone() {
	e.t.Helper()
	e.untilBootstrapDoneWithin(time.Minute)
}

// untilBootstrapDoneWithin is untilBootstrapDone for at most d.
func (e *dockerEnv) untilBootstrapDoneWithin(d time.Duration) {
	e.t.Helper()
	key := client.ObjectKeyFromObject(e.s.ContainerMachine)
	deadline := time.After(d)
	for {
		e.reconcileBootstrap(e.s)
		c := condition(e.s, infrav1.BootstrappedCondition)
		if c.Status == metav1.ConditionTrue || TerminalCondition(e.s.ContainerMachine) != nil {
			return
		}
		select {
		case got := <-e.finished:
			if got != key {
				e.t.Fatalf("unexpected notice for %s", got)
			}
		case <-deadline:
			e.t.Fatalf("bootstrap did not end; Bootstrapped is %s/%s: %s", c.Status, c.Reason, c.Message)
		}
	}
}

func kubeadmScript(fail, hold int) string {
	return strings.NewReplacer("@FAIL@", strconv.Itoa(fail), "@HOLD@", strconv.Itoa(hold)).Replace(fakeKubeadm)
}

func TestDockerBootstrapRetriesARuntimeNotReady(t *testing.T) {
	e := newDockerEnv(t, joinCloudConfig, map[string]string{"/bin/kubeadm": kubeadmScript(1, 0), "/bin/journalctl": fakeJournalctl})
	e.untilBootstrapDone()
	wantCondition(t, e.s, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	if runs, resets := e.lines("/var/kubeadm-runs"), e.lines("/var/kubeadm-resets"); runs != 2 || resets != 1 {
		t.Fatalf("want kubeadm join twice with a reset in between, got %d joins and %d resets", runs, resets)
	}
	if hosts, err := e.rt.ReadFile(context.Background(), e.s.ContainerName(), e.s.Owner(), "/etc/hosts"); err != nil || strings.Count(string(hosts), "10.0.0.1 node") != 1 {
		t.Fatalf("the append must apply once across attempts, /etc/hosts is %q (%v)", hosts, err)
	}
	evs := events(e.recorder)
	if !strings.Contains(evs, "BootstrapRetry") ||
		!strings.Contains(evs, "containerd's CRI plugin failed to load: too many open files (raise fs.inotify.max_user_instances)") {
		t.Fatalf("want a retry event naming the root cause, got:\n%s", evs)
	}
	if strings.Contains(evs, infrav1.BootstrapFailedReason) {
		t.Fatalf("the machine must never fail:\n%s", evs)
	}
}

func TestDockerBootstrapKeepsABadScriptTerminal(t *testing.T) {
	e := newDockerEnv(t, "#cloud-config\nruncmd:\n- no-such-command --flag\n- echo success > /run/cluster-api/bootstrap-success.complete\n",
		map[string]string{"/bin/kubeadm": kubeadmScript(0, 0)})
	e.untilBootstrapDone()
	wantCondition(t, e.s, infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.BootstrapFailedReason)
	msg := condition(e.s, infrav1.BootstrappedCondition).Message
	if !strings.Contains(msg, "step 1 (no-such-command) with exit code 127") || !strings.Contains(msg, "cannot pass on a retry") {
		t.Fatalf("unexpected message %q", msg)
	}
	if strings.Contains(msg, "--flag") {
		t.Fatalf("the message must not hold the bootstrap data: %q", msg)
	}
	// It stays so: no other attempt is made.
	e.reconcileBootstrap(e.s)
	wantCondition(t, e.s, infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.BootstrapFailedReason)
	if b, err := e.rt.ReadFile(context.Background(), e.s.ContainerName(), e.s.Owner(), "/var/lib/capct/bootstrap/attempt"); err != nil || string(b) != "1\n" {
		t.Fatalf("want attempt 1 only, got %q %v", b, err)
	}
}

func TestDockerBootstrapRunsOnceAcrossAManagerRestart(t *testing.T) {
	e := newDockerEnv(t, joinCloudConfig, map[string]string{"/bin/kubeadm": kubeadmScript(0, 1)})
	e.reconcileBootstrap(e.s)
	waitUntil(t, "kubeadm join to start", func() bool { return e.lines("/var/kubeadm-runs") == 1 })
	for range 3 {
		e.restartManager(1)
		e.reconcileBootstrap(e.s)
		wantCondition(t, e.s, infrav1.BootstrappedCondition, metav1.ConditionUnknown, infrav1.InProgressReason)
	}
	if err := e.rt.WriteFile(context.Background(), e.s.ContainerName(), e.s.Owner(), "/var/go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.untilBootstrapDone()
	wantCondition(t, e.s, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	if runs := e.lines("/var/kubeadm-runs"); runs != 1 {
		t.Fatalf("kubeadm join ran %d times in the container, want once", runs)
	}
}

func TestDockerBootstrapRetriesAfterTheContainerRestarts(t *testing.T) {
	e := newDockerEnv(t, joinCloudConfig, map[string]string{"/bin/kubeadm": kubeadmScript(0, 1)})
	ctx := context.Background()
	e.reconcileBootstrap(e.s)
	waitUntil(t, "kubeadm join to start", func() bool { return e.lines("/var/kubeadm-runs") == 1 })
	name := e.s.ContainerName()
	if err := e.rt.Stop(ctx, name, e.s.Owner(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Start(ctx, name, e.s.Owner()); err != nil {
		t.Fatal(err)
	}
	e.untilBootstrapDone()
	wantCondition(t, e.s, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	if runs, resets := e.lines("/var/kubeadm-runs"), e.lines("/var/kubeadm-resets"); runs != 2 || resets != 1 {
		t.Fatalf("want the cut attempt undone and run again, got %d joins and %d resets", runs, resets)
	}
	if !strings.Contains(events(e.recorder), "container restarted") {
		t.Fatal("want the restart named in the retry event")
	}
}

func TestDockerBootstrapWaitsForTheRuntime(t *testing.T) {
	e := newDockerEnv(t, joinCloudConfig, map[string]string{"/bin/kubeadm": kubeadmScript(0, 0), "/bin/ctr": fakeCtr})
	e.untilBootstrapDone()
	wantCondition(t, e.s, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	if runs, calls := e.lines("/var/kubeadm-runs"), e.lines("/var/ctr-calls"); runs != 1 || calls < 3 {
		t.Fatalf("want kubeadm run once, after the runtime answered; got %d runs after %d runtime checks", runs, calls)
	}
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
