package lifecycle

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	fakeruntime "github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/policy"
)

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
			if _, err := e.deps.launch().Reconcile(context.Background(), s); err != nil {
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
	if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
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
	if _, err := e.deps.launch().Reconcile(ctx, s2); err != nil {
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
	res, err := e.deps.launch().Reconcile(ctx, s)
	if err != nil || res.RequeueAfter == 0 {
		t.Fatalf("want a retry, got %v %v", res, err)
	}
	wantCondition(t, s, infrav1.LaunchedCondition, metav1.ConditionUnknown, infrav1.FailedReason)
	if !strings.Contains(condition(s, infrav1.LaunchedCondition).Message, cpName) {
		t.Fatalf("the message does not name the container: %s", condition(s, infrav1.LaunchedCondition).Message)
	}
	e.clock.Step(LaunchTimeout)
	if _, err := e.deps.launch().Reconcile(ctx, s); err == nil {
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
			res, err := e.deps.launch().Reconcile(ctx, s)
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
			if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
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
			if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
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
	_, err := e.deps.launch().Reconcile(context.Background(), s)
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
	if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	e.runtime.RemoveOutOfBand(cpName)
	if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
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
	if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := e.runtime.Inspect(ctx, cpName); !container.IsNotFound(err) {
		t.Fatalf("the container that never started is still there: %v", err)
	}
	if c := TerminalCondition(s.ContainerMachine); c != nil {
		t.Fatalf("the machine failed for good: %s %s", c.Type, c.Reason)
	}
	if _, err := e.deps.launch().Reconcile(ctx, s); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, s, infrav1.LaunchedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	after, err := e.runtime.Inspect(ctx, cpName)
	if err != nil || after.ID == before.ID || after.State != container.StateRunning {
		t.Fatalf("want a new running container, got %+v %v", after, err)
	}
}
