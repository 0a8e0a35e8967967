//go:build realcluster

package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	dockercontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/test/realcluster"
)

// workers is the MachineDeployment's replicas cluster-test.sh asks for: one
// lands on each engine.
const workers = 2

// mh is the two-engine cluster and what reaches it.
type mh struct {
	*realcluster.Clusters
	engines   [3]*realcluster.Engine // 1 and 2
	overlay   string
	cidr      netip.Prefix
	nodeImage string
	probe     string
	control   string
}

// TestClusterAcrossTwoEngines checks the cluster cluster-test.sh made on
// engine-1 and engine-2, in order: where its machines are, traffic across
// the engines, the loss of engine 2 and its machine's replacement, and its
// deletion through CAPCT leaving nothing on either engine.
func TestClusterAcrossTwoEngines(t *testing.T) {
	env := realcluster.LoadEnv(t, "test-multihost")
	var missing []string
	get := func(name string) string {
		v := os.Getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	}
	m := &mh{
		Clusters: realcluster.Connect(t, env), overlay: get("MH_OVERLAY_NETWORK"), nodeImage: get("MH_NODE_IMAGE"),
		probe: get("MH_PROBE_IMAGE"), control: get("MH_ENGINE_CONTROL"),
	}
	socket, cidr := get("MH_SOCKET"), get("MH_CLUSTER_CIDR")
	if len(missing) > 0 {
		t.Fatalf("%s unset: run this test through make test-multihost", strings.Join(missing, ", "))
	}
	var err error
	if m.cidr, err = netip.ParsePrefix(cidr); err != nil {
		t.Fatalf("MH_CLUSTER_CIDR: %v", err)
	}
	m.engines[1] = realcluster.NewEngine(t, "engine 1", "")
	m.engines[2] = realcluster.NewEngine(t, "engine 2", socket)
	ctx := t.Context()

	for _, step := range []struct {
		name string
		run  func(context.Context, *testing.T)
	}{
		{"placement", m.placement},
		{"pool_failure_domains", m.poolFailureDomains},
		{"traffic_across_engines", m.trafficAcross},
		{"lose_engine_2", m.loseEngine2},
		{"deletion_leaves_nothing", m.deletion},
	} {
		if !t.Run(step.name, func(t *testing.T) { step.run(ctx, t) }) {
			t.FailNow()
		}
	}
}

// failureDomains are the ContainerCluster's failure domains' names.
func (m *mh) failureDomains(ctx context.Context, t *testing.T) []string {
	t.Helper()
	cc, err := m.ContainerCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, fd := range cc.Status.FailureDomains {
		names = append(names, fd.Name)
	}
	return names
}

// engineOf is the engine (1 or 2) that runs the container name, 0 when
// neither does.
func (m *mh) engineOf(ctx context.Context, name string) (int, dockercontainer.InspectResponse) {
	for _, n := range []int{1, 2} {
		if c, err := m.engines[n].Inspect(ctx, name); err == nil {
			return n, c
		}
	}
	return 0, dockercontainer.InspectResponse{}
}

// placement: both failure domains, the control plane on engine 1 and a
// worker on each engine, every node's pods on the overlay's MTU, every Node
// registered on its overlay address, and the node image copied to engine 2.
func (m *mh) placement(ctx context.Context, t *testing.T) {
	if got, want := m.failureDomains(ctx, t), []string{"engine-1", "engine-2"}; !slices.Equal(got, want) {
		t.Errorf("failure domains are %v, want %v", got, want)
	}
	nodes, err := m.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	perEngine := map[int]int{}
	for _, node := range nodes {
		engine, c := m.engineOf(ctx, node.Name)
		role := ""
		if c.Config != nil {
			role = c.Config.Labels[container.LabelRole]
		}
		t.Logf("node %s (%s) on engine %d at %s", node.Name, role, engine, realcluster.AddressOn(c, m.overlay))
		switch {
		case engine == 1 && role == string(container.RoleControlPlane):
		case engine != 0 && role == string(container.RoleWorker):
			perEngine[engine]++
		default:
			t.Errorf("node %s (%s) runs on engine %d", node.Name, role, engine)
			continue
		}
		// Pods get the overlay's MTU, smaller than a bridge's by VXLAN's
		// 50 bytes.
		conf, err := m.engines[engine].Exec(ctx, node.Name, "cat", "/etc/cni/net.d/10-capct.conflist")
		if err != nil {
			t.Error(err)
		} else if !strings.Contains(conf, `"mtu": 1450`) {
			t.Errorf("the CNI configuration of %s does not give pods the overlay's MTU (1450):\n%s", node.Name, conf)
		}
		// Registered on its overlay address, which the other engine's nodes
		// reach, not its docker_gwbridge address, which they do not.
		if ip := internalIP(&node); !ip.IsValid() || !m.cidr.Contains(ip) {
			t.Errorf("Node %s is not on the overlay %s: InternalIP %v", node.Name, m.cidr, ip)
		}
	}
	if perEngine[1] != 1 || perEngine[2] != 1 {
		t.Errorf("workers: %d on engine 1 and %d on engine 2, want one on each", perEngine[1], perEngine[2])
	}
	if ok, err := m.engines[2].HasImage(ctx, m.nodeImage); err != nil || !ok {
		t.Errorf("%s is not on engine 2 (%v)", m.nodeImage, err)
	} else {
		t.Logf("engine 2 holds %s, copied there by CAPCT", m.nodeImage)
	}
}

// internalIP is the Node's first InternalIP.
func internalIP(node *corev1.Node) netip.Addr {
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ip, _ := netip.ParseAddr(a.Address)
			return ip
		}
	}
	return netip.Addr{}
}

// workerOn is a worker Node whose container runs on engine n.
func (m *mh) workerOn(ctx context.Context, t *testing.T, n int) string {
	t.Helper()
	nodes, err := m.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range nodes {
		if engine, _ := m.engineOf(ctx, node.Name); strings.Contains(node.Name, "-md-") && engine == n {
			return node.Name
		}
	}
	t.Fatalf("no worker on engine %d", n)
	return ""
}

// probePod is a busybox HTTP server on node answering "hello from NAME on
// NODE" (cluster-test.sh loaded the image into every worker).
func (m *mh) probePod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{
				Name: "main", Image: m.probe, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/busybox", "sh", "-c", fmt.Sprintf(
					`mkdir -p /www && echo "hello from %s on %s" > /www/index.html && exec busybox httpd -f -p 8080 -h /www`, name, node)},
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
			}},
		},
	}
}

// trafficAcross: a pod on each engine's worker, each reaching the other by
// pod IP, and both reaching the second through its Service.
func (m *mh) trafficAcross(ctx context.Context, t *testing.T) {
	w1, w2 := m.workerOn(ctx, t, 1), m.workerOn(ctx, t, 2)
	pods := m.Workload.CoreV1().Pods(metav1.NamespaceDefault)
	services := m.Workload.CoreV1().Services(metav1.NamespaceDefault)
	remove := func() {
		for _, name := range []string{"mh-1", "mh-2"} {
			if err := pods.Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("failed to delete pod %s: %v", name, err)
			}
		}
		if err := services.Delete(context.WithoutCancel(ctx), "mh-2", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("failed to delete Service mh-2: %v", err)
		}
	}
	remove()
	t.Cleanup(remove)
	m.waitPodsGone(ctx, t, "mh-1", "mh-2")
	for name, node := range map[string]string{"mh-1": w1, "mh-2": w2} {
		if _, err := pods.Create(ctx, m.probePod(name, node), metav1.CreateOptions{}); err != nil {
			t.Fatalf("failed to create pod %s: %v", name, err)
		}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "mh-2", Namespace: metav1.NamespaceDefault},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "mh-2"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := services.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("failed to create Service mh-2: %v", err)
	}
	if err := m.WaitPodsReady(ctx, 120*time.Second, "mh-1", "mh-2"); err != nil {
		t.Fatal(err)
	}
	ip := map[string]string{}
	for _, name := range []string{"mh-1", "mh-2"} {
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ip[name] = pod.Status.PodIP
	}
	for _, p := range []struct{ from, to, node string }{{"mh-1", "mh-2", w2}, {"mh-2", "mh-1", w1}} {
		want := fmt.Sprintf("hello from %s on %s", p.to, p.node)
		got, err := m.HTTPGet(ctx, p.from, ip[p.to], 8080)
		if err != nil || got != want {
			t.Fatalf("pod %s got %q (%v) from %s %s:8080 on the other engine, want %q", p.from, got, err, p.to, ip[p.to], want)
		}
		t.Logf("pod %s -> pod %s %s:8080 on the other engine: %q", p.from, p.to, ip[p.to], got)
	}
	if err := m.WaitCoreDNS(ctx, 120*time.Second); err != nil {
		t.Fatal(err)
	}
	want, host := "hello from mh-2 on "+w2, "mh-2.default.svc.cluster.local"
	for _, from := range []string{"mh-1", "mh-2"} {
		for try := 1; ; try++ {
			got, err := m.HTTPGet(ctx, from, host, 80)
			if err == nil && got == want {
				t.Logf("pod %s -> Service %s:80: %q (attempt %d)", from, host, got, try)
				break
			}
			if try >= 30 {
				t.Fatalf("the Service mh-2 answered %q (%v) to pod %s, want %q", got, err, from, want)
			}
			realcluster.Pause(ctx, 2*time.Second)
		}
	}
}

// waitPodsGone waits up to 120 s for the pods named to be gone, as kubectl
// delete --wait does.
func (m *mh) waitPodsGone(ctx context.Context, t *testing.T, names ...string) {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for _, name := range names {
		for {
			_, err := m.Workload.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s still there 120s after its deletion (%v)", name, err)
			}
			realcluster.Pause(ctx, time.Second)
		}
	}
}

// machineOnEngine is a worker ContainerMachine recorded on engine-n and not
// being deleted, empty when there is none.
func (m *mh) machineOnEngine(ctx context.Context, t *testing.T, n int) *infrav1.ContainerMachine {
	t.Helper()
	machines, err := m.ContainerMachines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range machines {
		cm := &machines[i]
		_, cp := cm.Labels[clusterv1.MachineControlPlaneLabel]
		if cm.Annotations[infrav1.EngineAnnotation] == fmt.Sprintf("engine-%d", n) && !cp && cm.DeletionTimestamp == nil {
			return cm
		}
	}
	return nil
}

// engineControl runs engine.sh stop or start.
func (m *mh) engineControl(t *testing.T, action string) {
	t.Helper()
	cmd := exec.CommandContext(context.WithoutCancel(t.Context()), m.control, action)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v", m.control, action, err)
	}
}

// loseEngine2: with the flavor's MachineHealthCheck on the workers made
// quick (Ready Unknown or False for 30 s), engine 2's host is lost
// (engine.sh stop). Its worker must be reported EngineUnreachable, not
// failed; engine-2 must leave the failure domains; the MachineHealthCheck
// replaces the worker, on engine 1; every Node Ready again, within 600 s.
// Then the host comes back (engine.sh start), and the lost worker's
// container, restarted by its engine, must be removed by CAPCT as an orphan
// within 300 s.
func (m *mh) loseEngine2(ctx context.Context, t *testing.T) {
	restore := m.quickHealthCheck(ctx, t)
	defer restore()
	// An unreachable Node's pods never finish terminating: do not wait for
	// them (the default waits until they are 5 minutes old).
	m.mergePatch(ctx, t, &clusterv1.MachineDeployment{}, m.Env.Cluster+"-md-0",
		`{"spec":{"template":{"spec":{"deletion":{"nodeDrainTimeoutSeconds":10,"nodeVolumeDetachTimeoutSeconds":10}}}}}`)
	lost := m.machineOnEngine(ctx, t, 2)
	if lost == nil {
		t.Fatal("no worker on engine 2")
	}
	lostContainer := strings.TrimPrefix(lost.Spec.ProviderID, "container:///")
	t0 := time.Now()
	m.engineControl(t, "stop")
	back := false
	t.Cleanup(func() {
		if !back {
			m.engineControl(t, "start") // so that the cluster's deletion reaches its containers there
		}
	})

	tReplace := m.waitReplaced(ctx, t, lost.Name, t0)
	if got := m.failureDomains(ctx, t); !slices.Equal(got, []string{"engine-1"}) {
		t.Errorf("failure domains are %v: engine-2 is still one of %s", got, m.Env.Cluster)
	}
	if m.machineOnEngine(ctx, t, 1) == nil {
		t.Error("no worker on engine 1")
	}
	var list infrav1.ContainerMachineList
	if err := m.Mgmt.List(ctx, &list, client.InNamespace(m.Env.Namespace),
		client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: m.Env.Cluster + "-md-0"}); err != nil {
		t.Fatal(err)
	}
	onEngine1 := 0
	for _, cm := range list.Items {
		if cm.Annotations[infrav1.EngineAnnotation] == "engine-1" {
			onEngine1++
		}
	}
	if onEngine1 != workers {
		t.Errorf("%d workers on engine 1, want both, the replacement among them", onEngine1)
	}
	t.Logf("T_replace=%ds: the lost worker replaced on engine 1, every Node Ready, after engine 2 was lost", int(tReplace.Seconds()))

	m.engineControl(t, "start")
	back = true
	deadline := time.Now().Add(300 * time.Second)
	for {
		list, err := m.engines[2].ContainerList(ctx, dockercontainer.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("name", "^"+lostContainer+"$"))})
		if err == nil && len(list) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CAPCT did not remove %s from engine 2 within 300s of its return (%d left, %v)", lostContainer, len(list), err)
		}
		realcluster.Pause(ctx, 2*time.Second)
	}
	t.Logf("%s removed from engine 2 %s after the loss", lostContainer, time.Since(t0).Round(time.Second))
	if _, err := m.Workload.CoreV1().Nodes().Get(ctx, lostContainer, metav1.GetOptions{}); err == nil {
		t.Logf("WARNING: Node %s, registered again by its kubelet before CAPCT removed its container, is left in the workload cluster", lostContainer)
	}
}

// waitReplaced waits up to 600 s for every Node Ready with the lost
// machine gone, and notes when the lost machine is seen EngineUnreachable.
func (m *mh) waitReplaced(ctx context.Context, t *testing.T, lost string, t0 time.Time) time.Duration {
	t.Helper()
	progress := realcluster.NewProgress(t)
	seen := false
	deadline := t0.Add(600 * time.Second)
	for {
		nodes, nodesErr := m.Nodes(ctx)
		counts := realcluster.CountNodes(nodes)
		if nodesErr == nil {
			progress.Nodes(counts)
		}
		machines, err := m.ContainerMachines(ctx)
		gone := err == nil
		if err == nil {
			progress.Machines(machines)
			for i := range machines {
				if machines[i].Name != lost {
					continue
				}
				gone = false
				if c := conditions.Get(&machines[i], infrav1.ContainerRunningCondition); !seen && c != nil && c.Reason == infrav1.EngineUnreachableReason {
					seen = true
					t.Logf("%s: ContainerRunning EngineUnreachable %s after the loss", lost, time.Since(t0).Round(time.Second))
				}
			}
		}
		if nodesErr == nil && counts.Are(workers, 0) && gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s to be replaced (Nodes: %s)", lost, counts)
		}
		realcluster.Pause(ctx, 2*time.Second)
	}
	if !seen {
		t.Logf("WARNING: %s was never seen EngineUnreachable (replaced before a sample caught it)", lost)
	}
	return time.Since(t0)
}

// quickHealthCheck makes the flavor's own MachineHealthCheck on the
// workers quick (docs/remediation.md), and returns what puts it back as it
// was. A second one over the same Machines would be refused by Cluster API.
func (m *mh) quickHealthCheck(ctx context.Context, t *testing.T) func() {
	t.Helper()
	name := m.Env.Cluster + "-md-0"
	var mhc clusterv1.MachineHealthCheck
	if err := m.Mgmt.Get(ctx, client.ObjectKey{Namespace: m.Env.Namespace, Name: name}, &mhc); err != nil {
		t.Fatalf("the flavor made no MachineHealthCheck %s: %v", name, err)
	}
	if reflect.DeepEqual(mhc.Spec.Checks, clusterv1.MachineHealthCheckChecks{}) {
		t.Fatalf("the flavor's MachineHealthCheck %s has no checks", name)
	}
	original, err := json.Marshal(map[string]any{"spec": map[string]any{"checks": mhc.Spec.Checks}})
	if err != nil {
		t.Fatal(err)
	}
	m.mergePatch(ctx, t, &clusterv1.MachineHealthCheck{}, name,
		`{"spec":{"checks":{"unhealthyNodeConditions":[{"type":"Ready","status":"Unknown","timeoutSeconds":30},{"type":"Ready","status":"False","timeoutSeconds":30}]}}}`)
	return func() {
		m.mergePatch(context.WithoutCancel(ctx), t, &clusterv1.MachineHealthCheck{}, name, string(original))
	}
}

// mergePatch applies a JSON merge patch to obj, read by name, retried
// while the management cluster's webhooks refuse.
func (m *mh) mergePatch(ctx context.Context, t *testing.T, obj client.Object, name, patch string) {
	t.Helper()
	obj.SetNamespace(m.Env.Namespace)
	obj.SetName(name)
	if err := realcluster.Retry(ctx, func(ctx context.Context) error {
		return m.Mgmt.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch)))
	}); err != nil {
		t.Fatalf("failed to patch %T %s with %s: %v", obj, name, patch, err)
	}
}

// deletion: the Cluster deleted through CAPCT, gone within 300 s (the
// quickstart's bound), and nothing labelled for it left on either engine.
func (m *mh) deletion(ctx context.Context, t *testing.T) {
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: m.Env.Namespace, Name: m.Env.Cluster}}
	if err := realcluster.Retry(ctx, func(ctx context.Context) error {
		return client.IgnoreNotFound(m.Mgmt.Delete(ctx, cluster))
	}); err != nil {
		t.Fatalf("failed to delete Cluster %s: %v", m.Env.Cluster, err)
	}
	start := time.Now()
	for {
		err := m.Mgmt.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Since(start) > 300*time.Second {
			t.Fatalf("Cluster %s still there 300s after its deletion (%v)", m.Env.Cluster, err)
		}
		realcluster.Pause(ctx, 2*time.Second)
	}
	t.Logf("Cluster %s deleted through CAPCT in %s", m.Env.Cluster, time.Since(start).Round(time.Second))
	for _, n := range []int{1, 2} {
		left, err := m.engines[n].Containers(ctx, container.LabelCluster+"="+m.Env.Cluster)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, c := range left {
			t.Errorf("CAPCT's deletion left container %s on engine %d", realcluster.Name(c), n)
		}
	}
}
