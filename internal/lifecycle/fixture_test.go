// The fixture the phases' tests share: env, one machine's world on the
// fake runtime and a fake clock, and the scope of its machine.

package lifecycle

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	fakeruntime "github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/loadbalancer"
	"github.com/capct/cluster-api-provider-container/internal/machineprovider"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

var start = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// env is one machine's world: a fake runtime and clock, a management
// cluster client holding the bootstrap Secret and a workload client.
type env struct {
	t        *testing.T
	clock    *clocktesting.FakeClock
	runtime  *fakeruntime.Runtime
	mgmt     client.Client
	workload client.Client
	deps     *testDeps
	finished chan types.NamespacedName
	recorder *record.FakeRecorder
}

const cloudConfig = `## template: jinja
#cloud-config
write_files:
- path: /etc/capct/hostname
  content: "{{ ds.meta_data.hostname }}"
- path: /run/cluster-api/bootstrap-success.complete
  content: success
runcmd:
- "echo hello"
`

func newEnv(t *testing.T, bootstrapData string) *env {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	clk := clocktesting.NewFakeClock(start)
	e := &env{
		t:        t,
		clock:    clk,
		runtime:  fakeruntime.New(clk),
		recorder: record.NewFakeRecorder(100),
		finished: make(chan types.NamespacedName, 10),
	}
	e.mgmt = fake.NewClientBuilder().WithScheme(scheme).WithObjects(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bootstrap"},
		Data:       map[string][]byte{"value": []byte(bootstrapData), "format": []byte("cloud-config")},
	}).Build()
	e.workload = fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&corev1.Node{}).Build()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e.deps = &testDeps{
		Config: Config{
			Client:   e.mgmt,
			Clock:    clk,
			Recorder: e.recorder,
			WorkloadClient: func(context.Context, client.ObjectKey) (client.Client, error) {
				return e.workload, nil
			},
			Bootstraps: NewBootstrapRunner(ctx, clock.RealClock{}, 0, func(k types.NamespacedName) { e.finished <- k }),
		},
		Provider: &machineprovider.Provider{Client: e.mgmt, APIReader: e.mgmt, Engines: engines.Single(e.runtime)},
	}
	e.deps.Bootstraps.poll = 10 * time.Millisecond
	// The default node image of the machines' version, on the host: CAPCT
	// never pulls, and Launch looks for it first.
	e.runtime.AddImage("capct/node:v1.35.4", nil)
	if _, err := e.runtime.EnsureNetwork(ctx, container.NetworkSpec{Name: "capct-c1", Owner: clusterOwner, IPFamily: container.IPv4}); err != nil {
		t.Fatal(err)
	}
	return e
}

// clusterOwner owns the test cluster "ns/c1"; cpName is the container of
// its machine cp-0.
var (
	clusterOwner = container.Owner{Namespace: "ns", Cluster: "c1", ClusterID: "id-1"}
	cpName       = naming.ContainerName("ns", "c1", "cp-0")
)

// scope returns newScope's machine on the env's engine, as the reconciler
// hands it to the phases.
func (e *env) scope() *MachineScope {
	s := newScope()
	s.Engine = engines.Local
	rt, err := e.deps.Engines.Get(s.Engine)
	if err != nil {
		e.t.Fatal(err)
	}
	s.Runtime = rt
	return s
}

// newScope returns a control-plane machine whose prerequisites are all met.
// onEngine places s's machine on the ContainerEngine name, which the env's
// runtime serves, beside the manager's own engine, which local serves.
func (e *env) onEngine(s *MachineScope, name string, local container.Runtime) {
	s.ContainerCluster.Spec.Engines = []infrav1.ClusterEngine{{Name: name}}
	metav1.SetMetaDataAnnotation(&s.ContainerMachine.ObjectMeta, infrav1.EngineAnnotation, name)
	e.deps.Engines = engines.Named(map[string]container.Runtime{engines.Local: local, name: e.runtime})
}

func newScope() *MachineScope {
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "uid-1"},
		Status: clusterv1.ClusterStatus{
			Initialization: clusterv1.ClusterInitializationStatus{InfrastructureProvisioned: ptr.To(true)},
			Conditions: []metav1.Condition{{Type: clusterv1.ClusterControlPlaneInitializedCondition, Status: metav1.ConditionTrue,
				Reason: "Initialized", LastTransitionTime: metav1.NewTime(start)}},
		},
	}
	return &MachineScope{Claim: machineprovider.Claim{
		Cluster: cluster,
		ContainerCluster: &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"},
			Spec: infrav1.ContainerClusterSpec{ClusterID: clusterOwner.ClusterID, Network: infrav1.NetworkSpec{Name: "capct-c1"}}},
		Machine: &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m1"},
			Spec:       clusterv1.MachineSpec{Version: "v1.35.4", FailureDomain: "fd1"},
		},
		ContainerMachine: &infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "cp-0", CreationTimestamp: metav1.NewTime(start),
			Labels: map[string]string{clusterv1.ClusterNameLabel: "c1", clusterv1.MachineControlPlaneLabel: ""},
		}},
		Version: "v1.35.4",
	},
		BootstrapDataSecretName: ptr.To("bootstrap"),
	}
}

func condition(s *MachineScope, t string) metav1.Condition {
	if c := conditions.Get(s.ContainerMachine, t); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func wantCondition(t *testing.T, s *MachineScope, conditionType string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	c := condition(s, conditionType)
	if c.Status != status || c.Reason != reason {
		t.Fatalf("%s: want %s/%s, got %s/%s (%s)", conditionType, status, reason, c.Status, c.Reason, c.Message)
	}
}

// bootstrap runs Launch and Bootstrap, waits for the run to finish, and runs
// Bootstrap again to read its outcome.
func bootstrap(t *testing.T, e *env, s *MachineScope) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := e.deps.bootstrap().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	e.waitForBootstrap(s)
	if _, err := e.deps.bootstrap().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
}

// waitForBootstrap waits for the machine's bootstrap run to finish.
func (e *env) waitForBootstrap(s *MachineScope) {
	e.t.Helper()
	select {
	case <-e.finished:
	case <-time.After(10 * time.Second):
		c := condition(s, infrav1.BootstrappedCondition)
		e.t.Fatalf("the bootstrap run did not finish; Bootstrapped is %s/%s: %s", c.Status, c.Reason, c.Message)
	}
}

func readyNode(name string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{ProviderID: "container:///" + name, Taints: taints},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

// testDeps are what the env's phases are built from: the lifecycle's
// Config, and the machine provider, whose fields the tests set.
type testDeps struct {
	Config
	*machineprovider.Provider
}

func (d *testDeps) config() Config {
	c := d.Config
	c.Provider = d.Provider
	return c
}

func (d *testDeps) launch() *Launch {
	return &Launch{Provider: d.Provider, Clock: d.Clock, Recorder: d.Recorder}
}

func (d *testDeps) bootstrap() *Bootstrap {
	return &Bootstrap{Client: d.Config.Client, Runner: d.Bootstraps, Clock: d.Clock, Recorder: d.Recorder}
}

func (d *testDeps) registration() *Registration {
	return &Registration{WorkloadClient: d.WorkloadClient, Clock: d.Clock}
}

func (d *testDeps) initialization() *Initialization {
	return &Initialization{WorkloadClient: d.WorkloadClient, NodeIPAM: d.NodeIPAM, Clock: d.Clock, Recorder: d.Recorder}
}

func (d *testDeps) liveness() *Liveness { return &Liveness{Clock: d.Clock, Recorder: d.Recorder} }

// termination returns the Termination of a machine behind lb (nil: none)
// that waits timeout (0: the default) for an engine that does not answer.
func (d *testDeps) termination(lb *loadbalancer.LoadBalancer, timeout time.Duration) *Termination {
	d.LoadBalancer = lb
	c := d.config()
	c.UnreachableEngineDeletionTimeout = timeout
	return NewTermination(c)
}
