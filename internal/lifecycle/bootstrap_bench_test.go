//go:build engine

package lifecycle

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/machineprovider"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/provisioning"
)

// BenchmarkBootstrapScaleOut measures what --max-concurrent-bootstraps does
// to a scale-out on this host: a real control plane (kubeadm init through
// the Bootstrap phase), then CAPCT_BENCH_WORKERS (default 4) real node
// containers launched at once and joined through the Bootstrap phase with
// each bound of CAPCT_BENCH_BOUNDS (default "1,2,4,0"; 0 is no bound). It
// reports the time from the launch to the last machine Bootstrapped, the
// slowest machine's bootstrap and the attempts made. It needs the node image
// (make node-image) and fails without it. Run it alone on the engine:
//
//	flock /tmp/capct-docker.lock go test -run '^$' -bench BootstrapScaleOut -benchtime 1x ./internal/lifecycle
func BenchmarkBootstrapScaleOut(b *testing.B) {
	const image = naming.DefaultNodeImageRepository + ":v1.35.4"
	workers := 4
	if v := os.Getenv("CAPCT_BENCH_WORKERS"); v != "" {
		workers, _ = strconv.Atoi(v)
	}
	bounds := []int{1, 2, 4, 0}
	if v := os.Getenv("CAPCT_BENCH_BOUNDS"); v != "" {
		bounds = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatalf("CAPCT_BENCH_BOUNDS: %v", err)
			}
			bounds = append(bounds, n)
		}
	}
	rt := dockertest.NewRuntime(b)
	ctx := context.Background()
	if ok, err := rt.ImageExists(ctx, image); err != nil || !ok {
		b.Fatalf("the benchmark needs the node image %s (make node-image): %v", image, err)
	}
	h := newBenchHost(b, rt, image)
	cp := h.machine("cp-0", true)
	h.launch(cp)
	h.secrets(cp.Container.IPv4.String())
	if took, attempts := h.bootstrapAll(0, []*MachineScope{cp}); attempts[0] < 1 {
		b.Fatal("the control plane did not bootstrap")
	} else {
		b.Logf("control plane: kubeadm init through the Bootstrap phase took %s", took.Round(100*time.Millisecond))
	}
	for round, bound := range bounds {
		b.Run(fmt.Sprintf("bound=%d", bound), func(b *testing.B) {
			for i := range b.N {
				var machines []*MachineScope
				start := time.Now()
				for w := range workers {
					s := h.machine(fmt.Sprintf("w%d-%d-%d", round, i, w), false)
					h.launch(s)
					machines = append(machines, s)
				}
				took, attempts := h.bootstrapAll(bound, machines)
				total := time.Since(start)
				b.ReportMetric(total.Seconds(), "s/all-bootstrapped")
				b.ReportMetric(took.Seconds(), "s/slowest-bootstrap")
				b.Logf("bound %d: %d joins, launch to all Bootstrapped %s, slowest bootstrap %s, attempts %v",
					bound, workers, total.Round(100*time.Millisecond), took.Round(100*time.Millisecond), attempts)
				h.remove(machines)
			}
		})
	}
}

// benchHost is one cluster on the real engine, driven through the phases
// without controllers.
type benchHost struct {
	b       *testing.B
	rt      container.Runtime
	image   string
	cluster string
	mgmt    client.Client
	deps    *testDeps
	mu      sync.Mutex
	wake    map[k8stypes.NamespacedName]chan struct{}
}

func newBenchHost(b *testing.B, rt container.Runtime, image string) *benchHost {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme} {
		if err := add(scheme); err != nil {
			b.Fatal(err)
		}
	}
	h := &benchHost{b: b, rt: rt, image: image, cluster: "capct-bootbench-" + rand.String(5),
		mgmt: fake.NewClientBuilder().WithScheme(scheme).Build(), wake: map[k8stypes.NamespacedName]chan struct{}{}}
	b.Cleanup(func() { dockertest.RemoveClusters(context.Background(), rt, []string{h.cluster}) })
	if _, err := rt.EnsureNetwork(context.Background(), container.NetworkSpec{Name: "capct-" + h.cluster,
		Owner: container.Owner{Namespace: "ns", Cluster: h.cluster, ClusterID: "id-" + h.cluster}}); err != nil {
		b.Fatal(err)
	}
	h.deps = &testDeps{
		Config:   Config{Client: h.mgmt, Clock: clock.RealClock{}, Recorder: &record.FakeRecorder{}},
		Provider: &machineprovider.Provider{Client: h.mgmt, APIReader: h.mgmt, Engines: engines.Single(rt)},
	}
	return h
}

func (h *benchHost) machine(name string, controlPlane bool) *MachineScope {
	s := newScope()
	s.Runtime = h.rt
	s.Cluster.Name, s.Cluster.UID = h.cluster, k8stypes.UID("uid-"+h.cluster)
	s.ContainerCluster.Name = h.cluster
	s.ContainerCluster.Spec.ClusterID = "id-" + h.cluster
	s.ContainerCluster.Spec.Network.Name = "capct-" + h.cluster
	s.ContainerMachine.Name = name
	s.ContainerMachine.CreationTimestamp = metav1.Now()
	s.ContainerMachine.Labels = map[string]string{clusterv1.ClusterNameLabel: h.cluster}
	s.ContainerMachine.Spec.Image = h.image
	s.BootstrapDataSecretName = ptr.To("worker")
	if controlPlane {
		s.ContainerMachine.Labels[clusterv1.MachineControlPlaneLabel] = ""
		s.BootstrapDataSecretName = ptr.To("control-plane")
	}
	return s
}

func (h *benchHost) launch(s *MachineScope) {
	if _, err := h.deps.launch().Reconcile(context.Background(), s); err != nil || s.Container == nil {
		h.b.Fatalf("failed to launch %s: %v %+v", s.ContainerMachine.Name, err, condition(s, infrav1.LaunchedCondition))
	}
}

const benchToken = "capctb.0123456789abcdef"

// secrets writes the control plane's and the workers' bootstrap data, in
// the shape CABPK gives them.
func (h *benchHost) secrets(cpIP string) {
	nodeReg := `  criSocket: unix:///run/containerd/containerd.sock
  ignorePreflightErrors: [SystemVerification, Swap, FileContent--proc-sys-net-bridge-bridge-nf-call-iptables]
  name: '{{ ds.meta_data.hostname }}'`
	initConfig := fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- token: %[2]s
localAPIEndpoint:
  advertiseAddress: %[1]s
nodeRegistration:
%[3]s
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: v1.35.4
controlPlaneEndpoint: %[1]s:6443
networking:
  podSubnet: 10.244.0.0/16
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
cgroupRoot: /kubelet
failSwapOn: false
failCgroupV1: false
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
conntrack:
  maxPerCore: 0
`, cpIP, benchToken, nodeReg)
	joinConfig := fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: %s:6443
    token: %s
    unsafeSkipCAVerification: true
nodeRegistration:
%s
`, cpIP, benchToken, nodeReg)
	cloudConfig := func(path, config, cmd string) string {
		indented := "    " + strings.ReplaceAll(strings.TrimSuffix(config, "\n"), "\n", "\n    ")
		return fmt.Sprintf("## template: jinja\n#cloud-config\nwrite_files:\n- path: %s\n  content: |\n%s\nruncmd:\n- '%s --config %s && echo success > %s'\n",
			path, indented, cmd, path, provisioning.SentinelPath)
	}
	for name, data := range map[string]string{
		"control-plane": cloudConfig("/run/kubeadm/kubeadm.yaml", initConfig, "kubeadm init"),
		"worker":        cloudConfig("/run/kubeadm/kubeadm-join-config.yaml", joinConfig, "kubeadm join"),
	} {
		if err := h.mgmt.Create(context.Background(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Data:       map[string][]byte{"value": []byte(data), "format": []byte("cloud-config")},
		}); err != nil {
			h.b.Fatal(err)
		}
	}
}

// bootstrapAll runs the Bootstrap phase of every machine, each on its own
// goroutine as the controller's workers would, with a runner bounded to
// bound, until each is Bootstrapped or failed. It returns the slowest
// bootstrap (from its slot to its end) and each machine's attempts.
func (h *benchHost) bootstrapAll(bound int, machines []*MachineScope) (time.Duration, []int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deps := *h.deps
	deps.Bootstraps = NewBootstrapRunner(ctx, clock.RealClock{}, bound, func(k k8stypes.NamespacedName) {
		h.mu.Lock()
		ch := h.wake[k]
		h.mu.Unlock()
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	var wg sync.WaitGroup
	slowest := make(chan time.Duration, len(machines))
	attempts := make([]int, len(machines))
	for i, s := range machines {
		key := client.ObjectKeyFromObject(s.ContainerMachine)
		wake := make(chan struct{}, 1)
		h.mu.Lock()
		h.wake[key] = wake
		h.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			phase := deps.bootstrap()
			deadline := time.After(10 * time.Minute)
			var started time.Time
			for {
				if _, err := phase.Reconcile(ctx, s); err != nil {
					h.b.Logf("%s: %v", key, err)
				}
				c := condition(s, infrav1.BootstrappedCondition)
				if started.IsZero() && c.Status == metav1.ConditionUnknown {
					started = time.Now()
				}
				if c.Status == metav1.ConditionTrue || TerminalCondition(s.ContainerMachine) != nil {
					if c.Status != metav1.ConditionTrue {
						h.b.Errorf("%s: %s %s", key, c.Reason, c.Message)
					}
					if b, err := h.rt.ReadFile(ctx, s.Container.Name, s.Owner(), provisioning.AttemptPath); err == nil {
						attempts[i], _ = strconv.Atoi(strings.TrimSpace(string(b)))
					}
					slowest <- time.Since(started)
					return
				}
				select {
				case <-wake:
				case <-time.After(5 * time.Second):
				case <-deadline:
					h.b.Errorf("%s did not bootstrap: %s %s", key, c.Reason, c.Message)
					slowest <- 0
					return
				}
			}
		}()
	}
	wg.Wait()
	close(slowest)
	var worst time.Duration
	for d := range slowest {
		worst = max(worst, d)
	}
	return worst, attempts
}

// remove deletes the machines' containers, trying again a few times: a
// node removed while its containerd starts a pod can leave a frozen runc
// init behind for a moment ("did not receive an exit event").
func (h *benchHost) remove(machines []*MachineScope) {
	for _, s := range machines {
		var err error
		for range 5 {
			if err = h.rt.Delete(context.Background(), s.Container.Name, s.Owner()); err == nil {
				break
			}
			time.Sleep(2 * time.Second)
		}
		if err != nil {
			h.b.Errorf("failed to remove %s: %v", s.Container.Name, err)
		}
	}
}
