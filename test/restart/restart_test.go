//go:build realcluster

package restart_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	dockercontainer "github.com/docker/docker/api/types/container"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/test/portmap"
	"github.com/capct/cluster-api-provider-container/test/realcluster"
)

// The probe pods restart-test.sh starts (the quickstart's start_probes): an
// HTTP server on the MachineDeployment worker, a client on the MachinePool
// worker.
const (
	serverPod = "qs-server"
	clientPod = "qs-client"
)

// run is one test run: the clusters, the engine, what was recorded before
// the restart, and when the engine was stopped and answered again.
type run struct {
	*realcluster.Clusters
	engine  *realcluster.Engine
	portmap *portmap.Probe
	before  snapshot
	states  *sampler
	tStop   time.Time
	tAnswer time.Time
}

// since is the stop's time in whole seconds: the API's times (heartbeats,
// container starts) have no finer grain, and one posted in the second the
// engine was told to stop is after it.
func (r *run) since() time.Time { return r.tStop.Truncate(time.Second) }

// snapshot is what must survive the restart.
type snapshot struct {
	mgmtAddress, mgmtPort string
	lb, lbAddress, lbPort string
	endpoint              string
	ccHostPort            int32
	nodeContainers        []string
	nodeAddresses         map[string]string
	nodes                 []string
	podUIDs               map[string]string
}

// check is one assertion after the restart: its subtest's name, what it
// asserts, and its problems now (none when it holds).
type check struct {
	name, what string
	problems   func(*run, context.Context) []string
}

var checks = []check{
	{"management_node", "management node: running, same address and API host port, API answers through the kubeconfig written before", (*run).mgmtProblems},
	{"load_balancer", "load balancer: running (started again by the engine), same address and host port, same endpoint, API answers", (*run).lbProblems},
	{"node_containers", "node containers: every one running on the address it had", (*run).nodeContainerProblems},
	{"Nodes_Ready", "every Node Ready after the restart", (*run).nodeProblems},
	{"Cluster_Available", "Cluster Available", (*run).availableProblems},
	{"probe_pods", "probe pods qs-server and qs-client: the same pods, running again, Ready", (*run).podProblems},
}

// TestClusterSurvivesEngineRestart records the addresses, ports, endpoint,
// Nodes and probe pods of a running cluster, stops and starts the engine,
// and then waits up to RESTART_TIMEOUT (300 s) from the engine answering
// for every check to hold, reporting each as a subtest; then pod-to-pod
// traffic within the same bound and Service traffic. A sampler writes the
// states every object passed through to restart-states.tsv.
func TestClusterSurvivesEngineRestart(t *testing.T) {
	env := realcluster.LoadEnv(t, "test-restart")
	control := os.Getenv("RESTART_ENGINE_CONTROL")
	if control == "" {
		t.Fatal("RESTART_ENGINE_CONTROL unset: run this test through make test-restart, whose script stops and starts the engine")
	}
	timeout := realcluster.Seconds(t, "RESTART_TIMEOUT", 300)
	ctx := t.Context()
	r := &run{Clusters: realcluster.Connect(t, env), engine: realcluster.NewEngine(t, "the engine", "")}
	r.before = r.record(ctx, t)
	mapped := r.startPortMapProbe(ctx, t)

	r.states = startSampler(ctx, t, r, env.Out+"/restart-states.tsv")
	realcluster.Pause(ctx, 4*time.Second) // a sample of the states before
	r.tStop = time.Now()
	realcluster.EngineControl(t, control, "engine-stop")
	t.Logf("engine stopped in %s", time.Since(r.tStop).Round(time.Second))
	realcluster.EngineControl(t, control, "engine-start")
	r.tAnswer = time.Now()
	t.Logf("engine answers again %s after it was told to stop", r.tAnswer.Sub(r.tStop).Round(time.Second))

	results, tNodes, tAvailable := r.waitForChecks(ctx, t, timeout)
	realcluster.Pause(ctx, 4*time.Second) // a last sample
	r.states.stop()
	t.Logf("states seen (seconds since the engine was told to stop; it answered again at +%ds), in %s:\n%s",
		r.tAnswer.Unix()-r.tStop.Unix(), r.states.path, r.states.Table(r.tStop))
	var summary strings.Builder
	for i, c := range checks {
		fmt.Fprintf(&summary, "  %s\n", result(c.what, results[i]))
	}
	t.Logf("checks, %s after the engine answered:\n%s", time.Since(r.tAnswer).Round(time.Second), summary.String())
	for i, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			for _, p := range results[i] {
				t.Error(p)
			}
		})
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("measured: engine answering -> every Node Ready %s, -> Cluster Available %s%s", tNodes, tAvailable, r.availableNote(ctx))

	if !t.Run("pod_to_pod_traffic", func(t *testing.T) { r.podTraffic(ctx, t, timeout) }) {
		t.FailNow()
	}
	t.Run("Service_traffic", func(t *testing.T) { r.serviceTraffic(ctx, t) })
	t.Run("port_mapping", func(t *testing.T) { r.portMapAfter(ctx, t, mapped, timeout) })
}

// startPortMapProbe starts test/portmap's probe on the MachineDeployment's
// worker, whose ContainerMachine restart-test.sh gives a port mapping
// (CAPCT_WORKER_PORT_MAPPINGS), and fetches its page on the container
// host at the mapping's host port before the engine restarts.
func (r *run) startPortMapProbe(ctx context.Context, t *testing.T) portmap.Target {
	t.Helper()
	machines, err := r.ContainerMachines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var worker *infrav1.ContainerMachine
	for i := range machines {
		if strings.Contains(machines[i].Name, "-md-0-") {
			worker = &machines[i]
		}
	}
	if worker == nil {
		t.Fatal("the cluster has no MachineDeployment worker to publish a port")
	}
	r.portmap = &portmap.Probe{Mgmt: r.Mgmt, Workload: r.Workload, Machine: client.ObjectKeyFromObject(worker)}
	target, err := r.portmap.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.portmap.Cleanup(context.Background()) })
	page, err := portmap.Answer(ctx, target, 2*time.Minute)
	if err != nil {
		t.Fatalf("before the restart: %v", err)
	}
	t.Logf("before the restart, %s (host port of %s) answered %q", target.URL, worker.Name, page)
	return target
}

// portMapAfter: after the restart, the same probe pod answers again on the
// mapped host port, within timeout: the engine published the port again.
func (r *run) portMapAfter(ctx context.Context, t *testing.T, target portmap.Target, timeout time.Duration) {
	start := time.Now()
	page, err := portmap.Answer(ctx, target, timeout)
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	uid, err := r.portmap.PodUID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if uid != target.PodUID {
		t.Errorf("the probe pod behind the mapping is not the one from before the restart (uid %s, was %s)", uid, target.PodUID)
	}
	t.Logf("after the restart, %s answered %q within %s", target.URL, page, time.Since(start).Round(time.Second))
}

// waitForChecks evaluates every check every 3 s until all hold or timeout
// has passed since the engine answered, and returns the last problems of
// each and the times from the engine answering to every Node Ready and to
// the Cluster Available.
func (r *run) waitForChecks(ctx context.Context, t *testing.T, timeout time.Duration) ([][]string, time.Duration, time.Duration) {
	t.Helper()
	deadline := r.tAnswer.Add(timeout)
	var tNodes, tAvailable time.Duration
	for {
		results := make([][]string, len(checks))
		failed := false
		for i, c := range checks {
			results[i] = c.problems(r, ctx)
			failed = failed || len(results[i]) > 0
			if c.name == "Nodes_Ready" && len(results[i]) == 0 && tNodes == 0 {
				tNodes = time.Since(r.tAnswer).Round(time.Second)
				t.Logf("every Node Ready %s after the engine answered", tNodes)
			}
		}
		if tAvailable == 0 {
			if available, since := r.available(ctx); available && (!since.Before(r.since()) || tNodes != 0) {
				tAvailable = time.Since(r.tAnswer).Round(time.Second)
				t.Logf("Cluster Available %s after the engine answered", tAvailable)
			}
		}
		if !failed || time.Now().After(deadline) || ctx.Err() != nil {
			if tNodes == 0 {
				tNodes = time.Since(r.tAnswer).Round(time.Second)
			}
			if tAvailable == 0 {
				tAvailable = time.Since(r.tAnswer).Round(time.Second)
			}
			return results, tNodes, tAvailable
		}
		realcluster.Pause(ctx, 3*time.Second)
	}
}

func result(what string, problems []string) string {
	if len(problems) == 0 {
		return "PASS  " + what
	}
	return "FAIL  " + what + ": " + strings.Join(problems, "; ")
}

// record takes the snapshot of what must survive.
func (r *run) record(ctx context.Context, t *testing.T) snapshot {
	t.Helper()
	s := snapshot{nodeAddresses: map[string]string{}, podUIDs: map[string]string{}}
	mgmt, err := r.engine.Inspect(ctx, r.Env.MgmtName)
	if err != nil {
		t.Fatal(err)
	}
	s.mgmtAddress, s.mgmtPort = realcluster.OwnAddress(mgmt), realcluster.LoopbackPort(mgmt, "6443/tcp")
	lbs, err := r.engine.Containers(ctx, container.LabelCluster+"="+r.Env.Cluster, container.LabelRole+"="+string(container.RoleLoadBalancer))
	if err != nil {
		t.Fatal(err)
	}
	if len(lbs) == 0 {
		t.Fatalf("no load balancer container of Cluster %s", r.Env.Cluster)
	}
	s.lb = realcluster.Name(lbs[0])
	lb, err := r.engine.Inspect(ctx, s.lb)
	if err != nil {
		t.Fatal(err)
	}
	s.lbAddress, s.lbPort = realcluster.OwnAddress(lb), realcluster.LoopbackPort(lb, "6443/tcp")
	cluster, err := r.CAPICluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.endpoint = endpoint(cluster)
	cc, err := r.ContainerCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.ccHostPort = cc.Status.LoadBalancer.HostPort
	if s.nodeContainers, err = r.nodeContainers(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range s.nodeContainers {
		c, err := r.engine.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		s.nodeAddresses[name] = realcluster.OwnAddress(c)
	}
	if s.nodes, err = r.nodeNames(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{serverPod, clientPod} {
		pod, err := r.Workload.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("probe pod %s (restart-test.sh starts it): %v", name, err)
		}
		s.podUIDs[name] = string(pod.UID)
	}
	t.Logf("before: management node %s at %s, API host port %s; load balancer %s at %s, host port %s; endpoint %s; ContainerCluster hostPort %d",
		r.Env.MgmtName, s.mgmtAddress, s.mgmtPort, s.lb, s.lbAddress, s.lbPort, s.endpoint, s.ccHostPort)
	t.Logf("before: node containers %v, Nodes %v, probe pods %v", s.nodeAddresses, s.nodes, s.podUIDs)
	return s
}

func endpoint(c *clusterv1.Cluster) string {
	return fmt.Sprintf("%s:%d", c.Spec.ControlPlaneEndpoint.Host, c.Spec.ControlPlaneEndpoint.Port)
}

// nodeContainers are the names of the cluster's containers other than its
// load balancer.
func (r *run) nodeContainers(ctx context.Context) ([]string, error) {
	list, err := r.engine.Containers(ctx, container.LabelCluster+"="+r.Env.Cluster)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, c := range list {
		if c.Labels[container.LabelRole] != string(container.RoleLoadBalancer) {
			names = append(names, realcluster.Name(c))
		}
	}
	return names, nil
}

func (r *run) nodeNames(ctx context.Context) ([]string, error) {
	nodes, err := r.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	return names, nil
}

// ---- the checks ----

func (r *run) mgmtProblems(ctx context.Context) []string {
	var problems []string
	c, err := r.engine.Inspect(ctx, r.Env.MgmtName)
	if err != nil {
		return []string{err.Error()}
	}
	if !running(c) {
		problems = append(problems, "container "+state(c))
	}
	if got := realcluster.OwnAddress(c); got != r.before.mgmtAddress {
		problems = append(problems, fmt.Sprintf("address %q, was %s", got, r.before.mgmtAddress))
	}
	if got := realcluster.LoopbackPort(c, "6443/tcp"); got != r.before.mgmtPort {
		problems = append(problems, fmt.Sprintf("API host port %q, was %s", got, r.before.mgmtPort))
	}
	if err := realcluster.Readyz(ctx, r.MgmtConfig); err != nil {
		problems = append(problems, "API does not answer through the kubeconfig written before: "+err.Error())
	}
	return problems
}

// state is the container's state and restart policy, for a problem.
func state(c dockercontainer.InspectResponse) string {
	s, policy := "without a state", "unknown"
	if c.State != nil {
		s = string(c.State.Status)
	}
	if c.HostConfig != nil {
		policy = string(c.HostConfig.RestartPolicy.Name)
	}
	return fmt.Sprintf("%s (restart policy %s)", s, policy)
}

func running(c dockercontainer.InspectResponse) bool {
	return c.State != nil && c.State.Status == dockercontainer.StateRunning
}

func (r *run) lbProblems(ctx context.Context) []string {
	c, err := r.engine.Inspect(ctx, r.before.lb)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	if !running(c) {
		problems = append(problems, "container "+state(c))
	}
	if got := realcluster.OwnAddress(c); got != r.before.lbAddress {
		problems = append(problems, fmt.Sprintf("address %q, was %s", got, r.before.lbAddress))
	}
	if got := realcluster.LoopbackPort(c, "6443/tcp"); got != r.before.lbPort {
		problems = append(problems, fmt.Sprintf("host port %q, was %s", got, r.before.lbPort))
	}
	if cluster, err := r.CAPICluster(ctx); err != nil {
		problems = append(problems, err.Error())
	} else if got := endpoint(cluster); got != r.before.endpoint {
		problems = append(problems, fmt.Sprintf("Cluster endpoint %q, was %s", got, r.before.endpoint))
	}
	if cc, err := r.ContainerCluster(ctx); err != nil {
		problems = append(problems, err.Error())
	} else if got := cc.Status.LoadBalancer.HostPort; got != r.before.ccHostPort {
		problems = append(problems, fmt.Sprintf("ContainerCluster hostPort %d, was %d", got, r.before.ccHostPort))
	}
	if err := realcluster.Readyz(ctx, r.WorkloadConfig); err != nil {
		problems = append(problems, "workload API does not answer through the kubeconfig written before: "+err.Error())
	}
	direct := rest.CopyConfig(r.WorkloadConfig)
	direct.Host = "https://127.0.0.1:" + r.before.lbPort
	if err := realcluster.Readyz(ctx, direct); err != nil {
		problems = append(problems, fmt.Sprintf("workload API does not answer on 127.0.0.1:%s: %v", r.before.lbPort, err))
	}
	// Started again by the engine, as the nodes are: CAPCT, which would
	// start it too, runs in the management cluster and can act only once
	// that answers again.
	if c.State != nil {
		started, err := time.Parse(time.RFC3339Nano, c.State.StartedAt)
		mgmtBack, answered := r.states.First("management API", "answers", r.tAnswer.Truncate(time.Second))
		if err == nil && answered && !started.Truncate(time.Second).Before(mgmtBack.Truncate(time.Second)) {
			problems = append(problems, fmt.Sprintf("started again at +%ds, once the management API answered (+%ds): by CAPCT, not by the engine",
				started.Unix()-r.tStop.Unix(), mgmtBack.Unix()-r.tStop.Unix()))
		}
	}
	return problems
}

func (r *run) nodeContainerProblems(ctx context.Context) []string {
	var problems []string
	for _, name := range r.before.nodeContainers {
		c, err := r.engine.Inspect(ctx, name)
		if err != nil {
			problems = append(problems, name+" missing: "+err.Error())
			continue
		}
		if !running(c) {
			problems = append(problems, name+" "+state(c))
		}
		if got, was := realcluster.OwnAddress(c), r.before.nodeAddresses[name]; got != was {
			problems = append(problems, fmt.Sprintf("%s on %q, was %s", name, got, was))
		}
	}
	return problems
}

// nodeProblems: every Node Ready, with a status a kubelet posted after the
// engine stopped, and the same Nodes as before.
func (r *run) nodeProblems(ctx context.Context) []string {
	nodes, err := r.Nodes(ctx)
	if err != nil {
		return []string{"the workload API does not answer: " + err.Error()}
	}
	problems := realcluster.StaleNodes(nodes, r.since())
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, r.before.nodes) {
		problems = append(problems, fmt.Sprintf("Nodes %v, were %v", names, r.before.nodes))
	}
	return problems
}

// available is whether the Cluster is Available, and since when.
func (r *run) available(ctx context.Context) (bool, time.Time) {
	cluster, err := r.CAPICluster(ctx)
	if err != nil {
		return false, time.Time{}
	}
	c := conditions.Get(cluster, clusterv1.AvailableCondition)
	if c == nil {
		return false, time.Time{}
	}
	return c.Status == metav1.ConditionTrue, c.LastTransitionTime.Time
}

func (r *run) availableProblems(ctx context.Context) []string {
	cluster, err := r.CAPICluster(ctx)
	if err != nil {
		return []string{err.Error()}
	}
	if c := conditions.Get(cluster, clusterv1.AvailableCondition); c == nil {
		return []string{"Available=unknown (no condition)"}
	} else if c.Status != metav1.ConditionTrue {
		return []string{fmt.Sprintf("Available=%s (%s)", c.Status, c.Reason)}
	}
	return nil
}

func (r *run) availableNote(ctx context.Context) string {
	if _, since := r.available(ctx); since.Before(r.since()) {
		return " (its Available condition never went False)"
	}
	return ""
}

func (r *run) podProblems(ctx context.Context) []string {
	var problems []string
	for _, name := range []string{serverPod, clientPod} {
		rctx, cancel := context.WithTimeout(ctx, realcluster.RequestTimeout)
		pod, err := r.Workload.CoreV1().Pods(metav1.NamespaceDefault).Get(rctx, name, metav1.GetOptions{})
		cancel()
		if err != nil {
			problems = append(problems, name+": cannot be read: "+err.Error())
			continue
		}
		problems = append(problems, realcluster.RestartedPod(pod, r.before.podUIDs[name], r.since())...)
	}
	return problems
}

// ---- traffic ----

// serverWant is what the server pod answers: the quickstart's probe
// writes its hostname (the pod's name) and its Node.
func (r *run) serverWant(ctx context.Context, t *testing.T) (ip, want string) {
	t.Helper()
	pod, err := r.Workload.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, serverPod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod.Status.PodIP, fmt.Sprintf("hello from %s on %s", serverPod, pod.Spec.NodeName)
}

// podTraffic waits, up to timeout from the engine answering, for the
// client pod to reach the server pod by pod IP. The routes between node
// containers live in the containers' network namespaces, which a restart
// empties: CAPCT puts them back when the containers' start events reach
// it, so only after its manager, in the management cluster, runs again.
func (r *run) podTraffic(ctx context.Context, t *testing.T, timeout time.Duration) {
	ip, want := r.serverWant(ctx, t)
	deadline := r.tAnswer.Add(timeout)
	for {
		got, err := r.HTTPGet(ctx, clientPod, ip, 8080)
		if err == nil && got == want {
			t.Logf("measured: engine answering -> pod-to-pod traffic %s", time.Since(r.tAnswer).Round(time.Second))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod-to-pod traffic did not come back within %s of the engine answering: got %q (%v) from %s:8080, want %q", timeout, got, err, ip, want)
		}
		realcluster.Pause(ctx, 2*time.Second)
	}
}

// serviceTraffic is the quickstart's traffic check: the client pod
// reaches the server pod by pod IP (node IPAM's routes) and through its
// Service by DNS name (kube-proxy, CoreDNS), the latter within 30 tries
// 2 s apart once CoreDNS is rolled out (within 120 s).
func (r *run) serviceTraffic(ctx context.Context, t *testing.T) {
	ip, want := r.serverWant(ctx, t)
	got, err := r.HTTPGet(ctx, clientPod, ip, 8080)
	if err != nil || got != want {
		t.Fatalf("pod %s got %q (%v) from %s:8080, want %q", clientPod, got, err, ip, want)
	}
	t.Logf("pod %s -> pod %s %s:8080: %q", clientPod, serverPod, ip, got)
	if err := r.WaitCoreDNS(ctx, 120*time.Second); err != nil {
		t.Fatal(err)
	}
	host := serverPod + ".default.svc.cluster.local"
	for try := 1; ; try++ {
		got, err = r.HTTPGet(ctx, clientPod, host, 80)
		if err == nil && got == want {
			t.Logf("pod %s -> Service %s:80: %q (attempt %d)", clientPod, host, got, try)
			return
		}
		if try >= 30 {
			t.Fatalf("the Service %s answered %q (%v), want %q", serverPod, got, err, want)
		}
		realcluster.Pause(ctx, 2*time.Second)
	}
}
