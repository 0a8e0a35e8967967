package lifecycle

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
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
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/policy"
	"github.com/capct/cluster-api-provider-container/internal/provisioning"
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
	deps     *Deps
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
	e.deps = &Deps{
		Client:   e.mgmt,
		Engines:  engines.Single(e.runtime),
		Clock:    clk,
		Recorder: e.recorder,
		WorkloadClient: func(context.Context, client.ObjectKey) (client.Client, error) {
			return e.workload, nil
		},
		Bootstraps: NewBootstrapRunner(ctx, clock.RealClock{}, 0, func(k types.NamespacedName) { e.finished <- k }),
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
func newScope() *MachineScope {
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", UID: "uid-1"},
		Status: clusterv1.ClusterStatus{
			Initialization: clusterv1.ClusterInitializationStatus{InfrastructureProvisioned: ptr.To(true)},
			Conditions: []metav1.Condition{{Type: clusterv1.ClusterControlPlaneInitializedCondition, Status: metav1.ConditionTrue,
				Reason: "Initialized", LastTransitionTime: metav1.NewTime(start)}},
		},
	}
	return &MachineScope{
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
		BootstrapDataSecretName: ptr.To("bootstrap"),
		Version:                 "v1.35.4",
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

func TestLaunchWaitsForWhatItNeeds(t *testing.T) {
	testCases := []struct {
		name   string
		mutate func(*MachineScope)
		reason string
	}{
		{"no Machine owner", func(s *MachineScope) { s.Machine = nil }, infrav1.WaitingForOwnerReason},
		{"cluster infrastructure not provisioned", func(s *MachineScope) {
			s.Cluster.Status.Initialization.InfrastructureProvisioned = nil
		}, infrav1.WaitingForClusterInfrastructureReason},
		{"no ContainerCluster", func(s *MachineScope) { s.ContainerCluster = nil }, infrav1.WaitingForClusterInfrastructureReason},
		{"no bootstrap data", func(s *MachineScope) { s.BootstrapDataSecretName = nil }, infrav1.WaitingForBootstrapDataReason},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, cloudConfig)
			s := e.scope()
			tc.mutate(s)
			if _, err := (&Launch{e.deps}).Reconcile(context.Background(), s); err != nil {
				t.Fatal(err)
			}
			wantCondition(t, s, infrav1.LaunchedCondition, metav1.ConditionFalse, tc.reason)
			if _, err := e.runtime.Inspect(context.Background(), s.ContainerName()); !container.IsNotFound(err) {
				t.Fatalf("a container was created while waiting: %v", err)
			}
		})
	}
}

func TestLaunchCreatesAndAdopts(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	s := e.scope()
	if _, err := (&Launch{e.deps}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.LaunchedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	m, err := e.runtime.Inspect(ctx, cpName)
	if err != nil {
		t.Fatalf("container c1-cp-0 was not created: %v", err)
	}
	// No host port: one the engine picks would change at every restart.
	if m.Image != "capct/node:v1.35.4" || len(m.PortMappings) != 0 || m.Labels[container.LabelNamespace] != "ns" {
		t.Fatalf("unexpected container: image %s, ports %v, labels %v", m.Image, m.PortMappings, m.Labels)
	}
	// A static address, so that the engine restarts it on the same one.
	if !m.StaticIPv4.IsValid() || m.StaticIPv4 != m.IPv4 {
		t.Fatalf("container runs on %s, static address %s", m.IPv4, m.StaticIPv4)
	}
	if got := s.ContainerMachine.Status.Addresses; len(got) != 2 || got[1].Address != m.IPv4.String() {
		t.Fatalf("addresses not published at launch: %v", got)
	}

	// A second pass, as after a crash, adopts the same container.
	s2 := e.scope()
	if _, err := (&Launch{e.deps}).Reconcile(ctx, s2); err != nil {
		t.Fatal(err)
	}
	if s2.Container == nil || s2.Container.ID != m.ID {
		t.Fatalf("the existing container was not adopted: %+v", s2.Container)
	}
}

func TestLaunchRefusesAForeignContainerAndTimesOut(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	if _, err := e.runtime.CreateMachine(ctx, container.MachineSpec{
		Name: cpName, Image: "other", Network: "capct-c1", Labels: container.Owner{Namespace: "ns", Cluster: "c1", ClusterID: "another-id", Machine: "cp-0"}.Labels(),
	}); err != nil {
		t.Fatal(err)
	}
	s := e.scope()
	res, err := (&Launch{e.deps}).Reconcile(ctx, s)
	if err != nil || res.RequeueAfter == 0 {
		t.Fatalf("want a retry, got %v %v", res, err)
	}
	wantCondition(t, s, infrav1.LaunchedCondition, metav1.ConditionUnknown, infrav1.FailedReason)
	if !strings.Contains(condition(s, infrav1.LaunchedCondition).Message, cpName) {
		t.Fatalf("the message does not name the container: %s", condition(s, infrav1.LaunchedCondition).Message)
	}
	e.clock.Step(LaunchTimeout)
	if _, err := (&Launch{e.deps}).Reconcile(ctx, s); err == nil {
		t.Fatal("want a terminal error after the launch timeout")
	}
	wantCondition(t, s, infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.LaunchFailedReason)
}

// What only the policy flags or the host can judge is refused with a
// condition that names the field, creates nothing and is not final: once the
// cause is gone (here: the image loaded, the path made, the object changed)
// the machine launches.
func TestLaunchRefusesWhatThePolicyOrTheHostCannotGive(t *testing.T) {
	testCases := []struct {
		name        string
		setup       func(*env, *MachineScope)
		wantReason  string
		wantField   string
		wantRecheck bool
		fix         func(*env, *MachineScope)
	}{
		{
			name: "a host path outside the allowed prefixes",
			setup: func(e *env, s *MachineScope) {
				e.deps.Policy = policy.Policy{HostPathPrefixes: []string{"/srv/capct"}}
				s.ContainerMachine.Spec.ExtraMounts = []infrav1.Mount{{HostPath: "/etc", ContainerPath: "/host-etc"}}
			},
			wantReason: infrav1.RefusedByPolicyReason, wantField: "spec.extraMounts[0].hostPath",
			fix: func(e *env, s *MachineScope) {
				s.ContainerMachine.Spec.ExtraMounts[0].HostPath = "/srv/capct/data"
			},
		},
		{
			name: "a default node image outside the allowed prefixes",
			setup: func(e *env, s *MachineScope) {
				e.deps.Policy = policy.Policy{ImagePrefixes: []string{"registry.example/"}}
			},
			wantReason: infrav1.RefusedByPolicyReason, wantField: "spec.image",
			fix: func(e *env, s *MachineScope) { e.deps.Policy = policy.Policy{} },
		},
		{
			name: "a preloaded image not on the host",
			setup: func(e *env, s *MachineScope) {
				s.ContainerMachine.Spec.PreLoadImages = []string{"registry.k8s.io/pause:3.10"}
			},
			wantReason: infrav1.ImageNotOnHostReason, wantField: "spec.preLoadImages[0]", wantRecheck: true,
			fix: func(e *env, s *MachineScope) { e.runtime.AddImage("registry.k8s.io/pause:3.10", nil) },
		},
		{
			name: "a node image not on the host",
			setup: func(e *env, s *MachineScope) {
				s.ContainerMachine.Spec.Image = "capct/node:v1.99.0"
			},
			wantReason: infrav1.ImageNotOnHostReason, wantField: "spec.image", wantRecheck: true,
			fix: func(e *env, s *MachineScope) { e.runtime.AddImage("capct/node:v1.99.0", nil) },
		},
		{
			name: "a host path that does not exist",
			setup: func(e *env, s *MachineScope) {
				s.ContainerMachine.Spec.ExtraMounts = []infrav1.Mount{
					{HostPath: "/srv/a", ContainerPath: "/a"}, {HostPath: "/srv/missing/", ContainerPath: "/b"},
				}
				for range 2 { // the first pass and the repeated one
					e.runtime.FailNext(fakeruntime.OpCreateMachine, container.NewError("create", "container", cpName, container.KindInvalid,
						&container.HostPathNotFoundError{Path: "/srv/missing"}))
				}
			},
			wantReason: infrav1.HostPathNotFoundReason, wantField: "spec.extraMounts[1].hostPath", wantRecheck: true,
			fix: func(e *env, s *MachineScope) {},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, cloudConfig)
			ctx := context.Background()
			s := e.scope()
			tc.setup(e, s)
			res, err := (&Launch{e.deps}).Reconcile(ctx, s)
			if err != nil {
				t.Fatalf("want no error to retry with backoff, got %v", err)
			}
			if got := res.RequeueAfter != 0; got != tc.wantRecheck {
				t.Fatalf("want a recheck %v, got %v", tc.wantRecheck, res)
			}
			wantCondition(t, s, infrav1.LaunchedCondition, metav1.ConditionFalse, tc.wantReason)
			if msg := condition(s, infrav1.LaunchedCondition).Message; !strings.Contains(msg, tc.wantField) {
				t.Fatalf("the message does not name %s: %s", tc.wantField, msg)
			}
			if TerminalCondition(s.ContainerMachine) != nil {
				t.Fatal("the refusal is final; it must not be")
			}
			if _, err := e.runtime.Inspect(ctx, cpName); !container.IsNotFound(err) {
				t.Fatalf("a container was made: %v", err)
			}
			// Waiting on writes nothing: the same condition, transition time
			// included, and no second event. A change would be written and
			// wake the machine at once, again and again.
			first := condition(s, infrav1.LaunchedCondition)
			e.clock.Step(time.Minute)
			if _, err := (&Launch{e.deps}).Reconcile(ctx, s); err != nil {
				t.Fatal(err)
			}
			if again := condition(s, infrav1.LaunchedCondition); !again.LastTransitionTime.Equal(&first.LastTransitionTime) || again.Reason != first.Reason {
				t.Fatalf("the condition changed while waiting: %+v, was %+v", again, first)
			}
			if n := countEvents(e.recorder, tc.wantReason); n != 1 {
				t.Fatalf("want one %s event, got %d", tc.wantReason, n)
			}
			// Past the launch timeout, still not final.
			e.clock.Step(2 * LaunchTimeout)
			tc.fix(e, s)
			if _, err := (&Launch{e.deps}).Reconcile(ctx, s); err != nil {
				t.Fatal(err)
			}
			wantCondition(t, s, infrav1.LaunchedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
		})
	}
}

// countEvents drains the recorder and counts the events with reason.
func countEvents(r *record.FakeRecorder, reason string) int {
	n := 0
	for {
		select {
		case ev := <-r.Events:
			if strings.Contains(ev, " "+reason+" ") {
				n++
			}
		default:
			return n
		}
	}
}

func TestLaunchRejectsAnUnparseableVersion(t *testing.T) {
	e := newEnv(t, cloudConfig)
	s := e.scope()
	s.Version = "one.two"
	_, err := (&Launch{e.deps}).Reconcile(context.Background(), s)
	if err == nil {
		t.Fatal("want an error")
	}
	wantCondition(t, s, infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.InvalidSpecReason)
	if !strings.Contains(condition(s, infrav1.LaunchedCondition).Message, `"one.two"`) {
		t.Fatalf("the message does not quote the version: %s", condition(s, infrav1.LaunchedCondition).Message)
	}
}

func TestLaunchReportsAMissingContainerWithoutRecreatingIt(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	s := e.scope()
	if _, err := (&Launch{e.deps}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	e.runtime.RemoveOutOfBand(cpName)
	if _, err := (&Launch{e.deps}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.LaunchedCondition, metav1.ConditionFalse, infrav1.ContainerMissingReason)
	if _, err := e.runtime.Inspect(ctx, cpName); !container.IsNotFound(err) {
		t.Fatal("the container was silently recreated")
	}
	if DerivePhase(s.ContainerMachine) != infrav1.MachinePhaseFailed {
		t.Fatalf("want phase Failed, got %s", DerivePhase(s.ContainerMachine))
	}
}

// bootstrap runs Launch and Bootstrap, waits for the run to finish, and runs
// Bootstrap again to read its outcome.
func bootstrap(t *testing.T, e *env, s *MachineScope) {
	t.Helper()
	ctx := context.Background()
	if _, err := (&Launch{e.deps}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := (&Bootstrap{e.deps}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	e.waitForBootstrap(s)
	if _, err := (&Bootstrap{e.deps}).Reconcile(ctx, s); err != nil {
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

func TestBootstrapRunsTheDataAsynchronously(t *testing.T) {
	e := newEnv(t, cloudConfig)
	s := e.scope()
	bootstrap(t, e, s)
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	got, err := e.runtime.ReadFile(context.Background(), cpName, "/etc/capct/hostname")
	if err != nil || string(got) != cpName {
		t.Fatalf("want the hostname substituted into the file, got %q %v", got, err)
	}
	var ran bool
	for _, c := range e.runtime.ExecCalls() {
		ran = ran || strings.Contains(strings.Join(c.Cmd, " "), "echo hello")
	}
	if !ran {
		t.Fatal("runcmd did not run")
	}

	if _, err := (&Provision{e.deps}).Reconcile(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	cm := s.ContainerMachine
	if cm.Spec.ProviderID != "container:///"+cpName || !ptr.Deref(cm.Status.Initialization.Provisioned, false) || cm.Status.FailureDomain != "fd1" {
		t.Fatalf("not provisioned per the contract: providerID %q, provisioned %v, failure domain %q",
			cm.Spec.ProviderID, cm.Status.Initialization.Provisioned, cm.Status.FailureDomain)
	}
}

// TestBootstrapGivesTheDataTheMachinesAddress runs bootstrap data that
// uses {{ ds.meta_data.local_ipv4 }}, as the multihost flavor's node-ip and
// advertise addresses do: it must be the container's address on the
// cluster network, the one other engines' nodes reach.
func TestBootstrapGivesTheDataTheMachinesAddress(t *testing.T) {
	e := newEnv(t, `## template: jinja
#cloud-config
write_files:
- path: /etc/capct/node-ip
  content: "{{ ds.meta_data.local_ipv4 }}"
- path: /run/cluster-api/bootstrap-success.complete
  content: success
`)
	s := e.scope()
	bootstrap(t, e, s)
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	got, err := e.runtime.ReadFile(context.Background(), cpName, "/etc/capct/node-ip")
	if want := s.Container.IPv4; err != nil || !want.IsValid() || string(got) != want.String() {
		t.Fatalf("want the container's address %s in the file, got %q %v", want, got, err)
	}
}

func TestBootstrapTrustsTheSentinelAfterARestart(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	s := e.scope()
	if _, err := (&Launch{e.deps}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := e.runtime.WriteFile(ctx, cpName, clusterOwner.ForMachine("cp-0"), provisioning.SentinelPath, []byte("success"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := (&Bootstrap{e.deps}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	if len(e.runtime.ExecCalls()) != 0 {
		t.Fatalf("bootstrap ran again: %v", e.runtime.ExecCalls())
	}
}

func TestBootstrapFailures(t *testing.T) {
	testCases := []struct {
		name   string
		data   string
		exec   fakeruntime.ExecHandler
		reason string
	}{
		{name: "malformed cloud-config", data: "#cloud-config\nwrite_files: {", reason: infrav1.InvalidSpecReason},
		{name: "a failing command", data: "#cloud-config\nruncmd:\n- kubeadm init\n", reason: infrav1.BootstrapFailedReason,
			exec: func(_ context.Context, _ container.Machine, _ map[string][]byte, in container.ExecInput, _ []byte) (container.ExecResult, bool) {
				if strings.Contains(strings.Join(in.Cmd, " "), "kubeadm") {
					return container.ExecResult{ExitCode: 1, Stderr: []byte("port 6443 is in use")}, true
				}
				return container.ExecResult{}, false
			}},
		{name: "no sentinel", data: "#cloud-config\nruncmd:\n- \"true\"\n", reason: infrav1.BootstrapFailedReason},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.data)
			if tc.exec != nil {
				e.runtime.SetExecHandler(tc.exec)
			}
			s := e.scope()
			ctx := context.Background()
			if _, err := (&Launch{e.deps}).Reconcile(ctx, s); err != nil {
				t.Fatal(err)
			}
			if _, err := (&Bootstrap{e.deps}).Reconcile(ctx, s); err != nil {
				t.Fatal(err)
			}
			if tc.reason != infrav1.InvalidSpecReason {
				e.waitForBootstrap(s)
				if _, err := (&Bootstrap{e.deps}).Reconcile(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionFalse, tc.reason)
			if TerminalCondition(s.ContainerMachine) == nil {
				t.Fatal("a failed bootstrap must be terminal")
			}
		})
	}
}

func TestBootstrapTimesOutOnTheInjectedClock(t *testing.T) {
	e := newEnv(t, "#cloud-config\nruncmd:\n- kubeadm init\n")
	release := make(chan struct{})
	defer close(release)
	e.runtime.SetExecHandler(func(ctx context.Context, _ container.Machine, _ map[string][]byte, in container.ExecInput, _ []byte) (container.ExecResult, bool) {
		if strings.Contains(strings.Join(in.Cmd, " "), "kubeadm") {
			select {
			case <-ctx.Done():
			case <-release:
			}
			return container.ExecResult{ExitCode: 1}, true
		}
		return container.ExecResult{}, false
	})
	s := e.scope()
	s.ContainerMachine.Spec.Lifecycle.BootstrapTimeout = &metav1.Duration{Duration: time.Minute}
	ctx := context.Background()
	if _, err := (&Launch{e.deps}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	res, err := (&Bootstrap{e.deps}).Reconcile(ctx, s)
	if err != nil || res.RequeueAfter == 0 || res.RequeueAfter > time.Minute {
		t.Fatalf("want a requeue within the timeout, got %v %v", res, err)
	}
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionUnknown, infrav1.InProgressReason)
	e.clock.Step(59 * time.Second)
	if _, err := (&Bootstrap{e.deps}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionUnknown, infrav1.InProgressReason)
	e.clock.Step(time.Second)
	if _, err := (&Bootstrap{e.deps}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.BootstrappedCondition, metav1.ConditionFalse, infrav1.TimedOutReason)
}

func readyNode(name string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{ProviderID: "container:///" + name, Taints: taints},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

func TestRegistrationAndInitialization(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	s := e.scope()
	bootstrap(t, e, s)
	if _, err := (&Provision{e.deps}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	res, err := (&Registration{e.deps}).Reconcile(ctx, s)
	if err != nil || res.RequeueAfter == 0 {
		t.Fatalf("want a requeue while no Node exists, got %v %v", res, err)
	}
	wantCondition(t, s, infrav1.RegisteredCondition, metav1.ConditionFalse, infrav1.NodeNotFoundReason)

	node := readyNode(cpName, corev1.Taint{Key: UninitializedTaint, Effect: corev1.TaintEffectNoSchedule}, corev1.Taint{Key: "other", Effect: corev1.TaintEffectNoSchedule})
	if err := e.workload.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	if _, err := (&Registration{e.deps}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.RegisteredCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	if _, err := (&Initialization{e.deps}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.InitializedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	got := &corev1.Node{}
	if err := e.workload.Get(ctx, client.ObjectKey{Name: cpName}, got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Taints) != 1 || got.Spec.Taints[0].Key != "other" {
		t.Fatalf("want only the uninitialized taint removed, got %v", got.Spec.Taints)
	}
	if !hasInternalIP(got) {
		t.Fatalf("want the machine's address on the Node, got %v", got.Status.Addresses)
	}
	SetReadyCondition(s.ContainerMachine, e.clock.Now())
	wantCondition(t, s, infrav1.ReadyCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	if DerivePhase(s.ContainerMachine) != infrav1.MachinePhaseRunning {
		t.Fatalf("want phase Running, got %s", DerivePhase(s.ContainerMachine))
	}
}

func TestLivenessTimeouts(t *testing.T) {
	testCases := []struct {
		name       string
		ttl        *metav1.Duration
		registered bool
		step       time.Duration
		wantType   string
		wantFail   bool
	}{
		{name: "registration within the default TTL", step: DefaultRegistrationTTL - time.Second, wantType: infrav1.RegisteredCondition},
		{name: "registration past the default TTL", step: DefaultRegistrationTTL, wantType: infrav1.RegisteredCondition, wantFail: true},
		{name: "registration past a custom TTL", ttl: &metav1.Duration{Duration: time.Minute}, step: time.Minute, wantType: infrav1.RegisteredCondition, wantFail: true},
		{name: "initialization within the TTL", registered: true, step: DefaultInitializationTTL - time.Second, wantType: infrav1.InitializedCondition},
		{name: "initialization past the TTL", registered: true, step: DefaultInitializationTTL, wantType: infrav1.InitializedCondition, wantFail: true},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, cloudConfig)
			s := e.scope()
			cm := s.ContainerMachine
			cm.Spec.Lifecycle.RegistrationTTL = tc.ttl
			setCondition(cm, e.clock.Now(), infrav1.LaunchedCondition, metav1.ConditionTrue, infrav1.SucceededReason, "")
			if tc.registered {
				setCondition(cm, e.clock.Now(), infrav1.RegisteredCondition, metav1.ConditionTrue, infrav1.SucceededReason, "")
			}
			e.clock.Step(tc.step)
			phase := map[string]string{infrav1.RegisteredCondition: "registration", infrav1.InitializedCondition: "initialization"}[tc.wantType]
			terminations := testutil.ToFloat64(livenessTerminations.WithLabelValues(phase))
			res, err := (&Liveness{e.deps}).Reconcile(context.Background(), s)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.wantFail {
				if res.RequeueAfter != time.Second || TerminalCondition(cm) != nil {
					t.Fatalf("want a requeue in 1s and no failure, got %v, %v", res, TerminalCondition(cm))
				}
				return
			}
			wantCondition(t, s, tc.wantType, metav1.ConditionFalse, infrav1.TimedOutReason)
			if got := testutil.ToFloat64(livenessTerminations.WithLabelValues(phase)); got != terminations+1 {
				t.Fatalf("want the %s termination counter to grow by one, it went from %v to %v", phase, terminations, got)
			}
			SetReadyCondition(cm, e.clock.Now())
			wantCondition(t, s, infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.TimedOutReason)
			select {
			case ev := <-e.recorder.Events:
				if !strings.Contains(ev, infrav1.TimedOutReason) {
					t.Fatalf("unexpected event %q", ev)
				}
			default:
				t.Fatal("no event for the termination")
			}
		})
	}
}

func TestDerivePhase(t *testing.T) {
	set := func(cm *infrav1.ContainerMachine, types ...string) {
		for _, ty := range types {
			setCondition(cm, start, ty, metav1.ConditionTrue, infrav1.SucceededReason, "")
		}
	}
	testCases := []struct {
		name string
		true []string
		want infrav1.MachinePhase
	}{
		{"nothing yet", nil, infrav1.MachinePhasePending},
		{"launched", []string{infrav1.LaunchedCondition}, infrav1.MachinePhaseLaunched},
		{"bootstrapped", []string{infrav1.LaunchedCondition, infrav1.BootstrappedCondition}, infrav1.MachinePhaseBootstrapped},
		{"registered", []string{infrav1.LaunchedCondition, infrav1.BootstrappedCondition, infrav1.RegisteredCondition}, infrav1.MachinePhaseRegistered},
		{"running", phaseConditions, infrav1.MachinePhaseRunning},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			cm := &infrav1.ContainerMachine{}
			set(cm, tc.true...)
			if got := DerivePhase(cm); got != tc.want {
				t.Fatalf("want %s, got %s", tc.want, got)
			}
		})
	}
}

func TestPodCIDRRetryBacksOffWhileExhausted(t *testing.T) {
	testCases := []struct {
		name    string
		reason  string
		elapsed time.Duration
		want    time.Duration
	}{
		{"not exhausted", infrav1.PodCIDRConflictReason, time.Hour, nodePoll},
		{"just exhausted", infrav1.ExhaustedReason, 0, nodePoll},
		{"exhausted for a minute", infrav1.ExhaustedReason, time.Minute, time.Minute},
		{"exhausted for an hour", infrav1.ExhaustedReason, time.Hour, maxPodCIDRRetry},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			cm := &infrav1.ContainerMachine{}
			setCondition(cm, start, infrav1.PodCIDRAllocatedCondition, metav1.ConditionFalse, tc.reason, "")
			if got := podCIDRRetry(cm, start.Add(tc.elapsed)); got != tc.want {
				t.Fatalf("want %s, got %s", tc.want, got)
			}
		})
	}
}

// An engine that stops answering between two phases is waiting, not
// failing: the machine looks again soon instead of returning the error,
// which would back off for minutes after the engine is back.
func TestTheEngineGoingAwayMidReconcileIsWaitedFor(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	s := e.scope()
	if _, err := (&Launch{e.deps}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	away := container.NewError("read", "file", cpName, container.KindUnreachable, errors.New("connection refused"))
	e.runtime.FailNext(fakeruntime.OpReadFile, away)
	res, err := NewMachine(e.deps).Reconcile(ctx, s)
	if err != nil {
		t.Fatalf("want no error, got %v", err)
	}
	if res.RequeueAfter == 0 || res.RequeueAfter > containerRecheck {
		t.Fatalf("want a look again within %s, got %+v", containerRecheck, res)
	}
	if c := TerminalCondition(s.ContainerMachine); c != nil {
		t.Fatalf("the machine failed for good: %s %s", c.Type, c.Reason)
	}
}

// A container that was created but never started, and whose static address
// another container took meanwhile, is removed and launched again on a new
// address instead of being started in vain until the launch times out.
func TestACreatedContainerWhoseAddressWasTakenIsLaunchedAgain(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	s := e.scope()
	// As after a crash between create and start: the container exists,
	// created, with a static address.
	if _, err := e.runtime.CreateMachine(ctx, container.MachineSpec{
		Name: cpName, Image: "capct/node:v1.35.4", Network: "capct-c1", Labels: s.ContainerLabels(),
		Role: container.RoleControlPlane, StaticIPv4: netip.MustParseAddr("172.16.0.2"),
	}); err != nil {
		t.Fatal(err)
	}
	before, err := e.runtime.Inspect(ctx, cpName)
	if err != nil {
		t.Fatal(err)
	}
	e.runtime.FailNext(fakeruntime.OpStart, container.NewError("start", "container", cpName, container.KindInUse, errors.New("Address already in use")))
	if _, err := (&Launch{e.deps}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := e.runtime.Inspect(ctx, cpName); !container.IsNotFound(err) {
		t.Fatalf("the container that never started is still there: %v", err)
	}
	if c := TerminalCondition(s.ContainerMachine); c != nil {
		t.Fatalf("the machine failed for good: %s %s", c.Type, c.Reason)
	}
	if _, err := (&Launch{e.deps}).Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.LaunchedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	after, err := e.runtime.Inspect(ctx, cpName)
	if err != nil || after.ID == before.ID || after.State != container.StateRunning {
		t.Fatalf("want a new running container, got %+v %v", after, err)
	}
}
