package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	fakeruntime "github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/loadbalancer"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

// launched returns a scope whose container Launch has created.
func (e *env) launched(mutate func(*MachineScope)) *MachineScope {
	e.t.Helper()
	s := e.scope()
	if mutate != nil {
		mutate(s)
	}
	if _, err := e.deps.launch().Reconcile(context.Background(), s); err != nil {
		e.t.Fatal(err)
	}
	wantCondition(e.t, s, infrav1.LaunchedCondition, metav1.ConditionTrue, infrav1.SucceededReason)
	return s
}

// terminate runs Termination until it reports done, at most a few passes.
func (e *env) terminate(term *Termination, s *MachineScope) {
	e.t.Helper()
	for range 3 {
		done, res, err := term.Reconcile(context.Background(), s)
		if err != nil {
			e.t.Fatal(err)
		}
		if done {
			return
		}
		if res.RequeueAfter == 0 {
			e.t.Fatal("termination is not done and asks for no requeue")
		}
	}
	e.t.Fatal("termination is not done after 3 passes")
}

func (e *env) exists(name string) bool {
	e.t.Helper()
	_, err := e.runtime.Inspect(context.Background(), name)
	if err != nil && !container.IsNotFound(err) {
		e.t.Fatal(err)
	}
	return err == nil
}

// TestTerminationDeletesTheContainerOnceConfirmed: the container is deleted,
// and the deletion is reported done only once it is confirmed gone.
func TestTerminationDeletesTheContainerOnceConfirmed(t *testing.T) {
	e := newEnv(t, cloudConfig)
	s := e.launched(nil)
	term := e.deps.termination(nil, 0)
	done, res, err := term.Reconcile(context.Background(), s)
	if err != nil || done || res.RequeueAfter == 0 {
		t.Fatalf("the first pass: done %v, %v, %v; want a requeue to confirm the deletion", done, res, err)
	}
	if e.exists(cpName) {
		t.Fatal("the container was not deleted")
	}
	e.terminate(term, s)
}

// TestTerminationLeavesAnotherOwnersContainer: a container with the
// machine's name that another cluster owns is not deleted, and does not
// hold up the machine's deletion.
func TestTerminationLeavesAnotherOwnersContainer(t *testing.T) {
	e := newEnv(t, cloudConfig)
	ctx := context.Background()
	stranger := clusterOwner.ForMachine("cp-0")
	stranger.ClusterID = "another-id"
	if _, err := e.runtime.CreateMachine(ctx, container.MachineSpec{Name: cpName, Image: "other", Network: "capct-c1", Labels: stranger.Labels()}); err != nil {
		t.Fatal(err)
	}
	if err := e.runtime.Start(ctx, cpName, stranger); err != nil {
		t.Fatal(err)
	}
	e.terminate(e.deps.termination(nil, 0), e.scope())
	if !e.exists(cpName) {
		t.Fatal("the container of another cluster was deleted")
	}
	select {
	case ev := <-e.recorder.Events:
		t.Fatalf("an event for a container that is not ours: %s", ev)
	default:
	}
}

// lbEnv is a cluster with a running load balancer and two control-plane
// machines, cp-0 (the scope's, launched) and cp-1, both its backends.
type lbEnv struct {
	*env
	s    *MachineScope
	lb   *loadbalancer.LoadBalancer
	name string
}

func newLBEnv(t *testing.T) *lbEnv {
	e := &lbEnv{env: newEnv(t, cloudConfig)}
	ctx := context.Background()
	e.s = e.launched(nil)
	e.runtime.AddImage(loadbalancer.DefaultImage, nil)
	e.lb = &loadbalancer.LoadBalancer{Client: e.mgmt, Engines: e.deps.Engines}
	m, err := e.lb.Ensure(ctx, loadbalancer.Spec{Cluster: e.s.Cluster, ContainerCluster: e.s.ContainerCluster, Network: "capct-c1"})
	if err != nil {
		t.Fatal(err)
	}
	e.name = m.Name
	for _, cm := range []*infrav1.ContainerMachine{
		e.s.ContainerMachine.DeepCopy(),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cp-1", Labels: e.s.ContainerMachine.Labels},
			Status: infrav1.ContainerMachineStatus{Addresses: []clusterv1.MachineAddress{{Type: clusterv1.MachineInternalIP, Address: "10.99.0.2"}}}},
	} {
		// The test's client has no status subresource: Create keeps the
		// addresses.
		cm.Finalizers = []string{infrav1.MachineFinalizer}
		if err := e.mgmt.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.lb.Sync(ctx, e.s.Cluster, e.s.ContainerCluster); err != nil {
		t.Fatal(err)
	}
	e.wantWeights(map[string]int{"cp-0": 100, "cp-1": 100})
	return e
}

// deleting marks the scope's ContainerMachine deleted, as the API server
// does while its finalizer holds it.
func (e *lbEnv) deleting() {
	e.t.Helper()
	ctx := context.Background()
	cm := e.s.ContainerMachine
	if err := e.mgmt.Delete(ctx, cm); err != nil {
		e.t.Fatal(err)
	}
	if err := e.mgmt.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
		e.t.Fatal(err)
	}
}

var serverLine = regexp.MustCompile(`(?m)^\s*server (\S+) \S+ weight (\d+)`)

// wantWeights checks the backends and weights of the load balancer's
// configuration.
func (e *lbEnv) wantWeights(want map[string]int) {
	e.t.Helper()
	cfg, err := e.runtime.ReadFile(context.Background(), e.name, clusterOwner.ForMachine(naming.LoadBalancerMachine("c1")), loadbalancer.ConfigPath)
	if err != nil {
		e.t.Fatal(err)
	}
	got := map[string]int{}
	for _, m := range serverLine.FindAllStringSubmatch(string(cfg), -1) {
		var w int
		if _, err := fmt.Sscan(m[2], &w); err != nil {
			e.t.Fatal(err)
		}
		got[m[1]] = w
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		e.t.Fatalf("load balancer backends %v, want %v:\n%s", got, want, cfg)
	}
}

// TestTerminationDrainsAControlPlaneMachineFirst: a control-plane machine's
// weight is 0 in the load balancer, which reloaded, before its container is
// deleted: at the moment of the delete (here made to fail) the drained
// configuration is in place.
func TestTerminationDrainsAControlPlaneMachineFirst(t *testing.T) {
	e := newLBEnv(t)
	e.deleting()
	signals := len(e.runtime.Signals())
	e.runtime.FailNext(fakeruntime.OpDelete, errors.New("the engine failed the delete"))
	term := e.deps.termination(e.lb, 0)
	if _, _, err := term.Reconcile(context.Background(), e.s); err == nil || !strings.Contains(err.Error(), "the engine failed the delete") {
		t.Fatalf("want the failed delete reported, got %v", err)
	}
	if !e.exists(cpName) {
		t.Fatal("the container is gone although its delete failed")
	}
	e.wantWeights(map[string]int{"cp-0": 0, "cp-1": 100})
	if got := e.runtime.Signals(); len(got) != signals+1 {
		t.Fatalf("signals %v: want one reload of the load balancer before the delete", got)
	}

	e.terminate(term, e.s)
	if e.exists(cpName) {
		t.Fatal("the container was not deleted")
	}
}

// TestTerminationLeavesTheLoadBalancerAlone: a worker is no backend, and a
// cluster that is being deleted loses its load balancer anyway; neither
// rewrites it.
func TestTerminationLeavesTheLoadBalancerAlone(t *testing.T) {
	testCases := []struct {
		name   string
		mutate func(*MachineScope)
	}{
		{"a worker", func(s *MachineScope) { delete(s.ContainerMachine.Labels, clusterv1.MachineControlPlaneLabel) }},
		{"a control-plane machine of a cluster being deleted", func(s *MachineScope) {
			now := metav1.NewTime(start)
			s.ContainerCluster.DeletionTimestamp = &now
		}},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newLBEnv(t)
			e.deleting()
			tc.mutate(e.s)
			signals := len(e.runtime.Signals())
			e.terminate(e.deps.termination(e.lb, 0), e.s)
			if e.exists(cpName) {
				t.Fatal("the container was not deleted")
			}
			e.wantWeights(map[string]int{"cp-0": 100, "cp-1": 100})
			if got := e.runtime.Signals(); len(got) != signals {
				t.Fatalf("the load balancer was reloaded: %v", got)
			}
		})
	}
}

// TestTerminationGivesUpOnALostEngineAfterTheTimeout deletes a machine on a
// ContainerEngine that stops answering, as when its host is lost: the
// deletion waits, saying so, until UnreachableEngineDeletionTimeout from
// its start, then lets the machine go and says where the container was
// left. The manager's own engine is always waited for.
func TestTerminationGivesUpOnALostEngineAfterTheTimeout(t *testing.T) {
	e := newEnv(t, cloudConfig)
	s := e.launched(nil)
	s.ContainerMachine.DeletionTimestamp = ptr.To(metav1.NewTime(e.clock.Now()))
	term := e.deps.termination(nil, time.Minute)
	lost := func() {
		e.runtime.FailNext(fakeruntime.OpInspect, container.NewError("inspect", "container", cpName, container.KindUnreachable, errors.New("no route to host")))
	}

	// On the manager's own engine: an error, retried with backoff.
	lost()
	if done, _, err := term.Reconcile(context.Background(), s); done || !container.IsUnreachable(err) {
		t.Fatalf("on the manager's own engine: done %v, %v; want its error and no end", done, err)
	}

	e.onEngine(s, "engine-b", e.runtime)
	lost()
	done, res, err := term.Reconcile(context.Background(), s)
	if err != nil || done || res.RequeueAfter == 0 {
		t.Fatalf("within the timeout: done %v, %v, %v; want a wait", done, res, err)
	}
	wantCondition(t, s, infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.EngineUnreachableReason)
	if msg := conditions.Get(s.ContainerMachine, infrav1.ContainerRunningCondition).Message; !strings.Contains(msg, "giving up on container "+cpName+" in 1m0s") {
		t.Fatalf("ContainerRunning says %q; want when CAPCT gives up", msg)
	}

	e.clock.Step(time.Minute)
	lost()
	if done, _, err := term.Reconcile(context.Background(), s); err != nil || !done {
		t.Fatalf("after the timeout: done %v, %v; want the machine let go", done, err)
	}
	var events []string
	for len(e.recorder.Events) > 0 {
		events = append(events, <-e.recorder.Events)
	}
	if last := events[len(events)-1]; !strings.Contains(last, "Gave up deleting container "+cpName) || !strings.Contains(last, "engine engine-b") {
		t.Fatalf("events %q; want the last to say where the container was left", events)
	}
	if !e.exists(cpName) {
		t.Fatal("the container went, though its engine did not answer: the test's engine must keep it")
	}
}

// TestTerminationGoesOnWhenTheLoadBalancerCannotBeSynced deletes a
// control-plane machine whose load balancer cannot be synced to take it
// out: what waiting does not fix lets the deletion go on at once, an engine
// or API server away is waited for until UnreachableEngineDeletionTimeout
// from the start of the deletion, and never longer.
func TestTerminationGoesOnWhenTheLoadBalancerCannotBeSynced(t *testing.T) {
	unreachable := container.NewError("read", "file", "haproxy.cfg", container.KindUnreachable, errors.New("no route to host"))
	testCases := []struct {
		name string
		// breakIt makes the next syncs of the load balancer fail; it is
		// called before each pass.
		breakIt func(e *lbEnv)
		// waits is whether the deletion waits until the timeout.
		waits bool
		// waitSays is what ContainerRunning says while it waits, when it
		// says anything.
		waitSays string
	}{
		{name: "the custom template's ConfigMap is deleted", breakIt: func(e *lbEnv) {
			e.s.ContainerCluster.Spec.LoadBalancer.CustomHAProxyConfigTemplateRef = &infrav1.LocalObjectReference{Name: "gone"}
		}},
		{name: "the custom template is refused", breakIt: func(e *lbEnv) {
			e.s.ContainerCluster.Spec.LoadBalancer.CustomHAProxyConfigTemplateRef = &infrav1.LocalObjectReference{Name: "bad"}
			bad := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bad"}, Data: map[string]string{"value": "{{ .NoSuchField }}"}}
			if err := e.mgmt.Create(context.Background(), bad); err != nil && !apierrors.IsAlreadyExists(err) {
				e.t.Fatal(err)
			}
		}},
		{name: "the load balancer's container is gone", breakIt: func(e *lbEnv) {
			if err := e.runtime.Delete(context.Background(), e.name, clusterOwner.ForMachine(naming.LoadBalancerMachine("c1"))); err != nil && !container.IsNotFound(err) {
				e.t.Fatal(err)
			}
		}},
		{name: "the load balancer's engine does not answer", waits: true, waitSays: "the engine of the load balancer does not answer", breakIt: func(e *lbEnv) {
			e.runtime.FailNext(fakeruntime.OpReadFile, unreachable)
		}},
		{name: "the engine fails the read", waits: true, breakIt: func(e *lbEnv) {
			e.runtime.FailNext(fakeruntime.OpReadFile, errors.New("the engine failed the read"))
		}},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newLBEnv(t)
			e.deleting()
			// On the test's clock, which the timeout is judged by.
			e.s.ContainerMachine.DeletionTimestamp = ptr.To(metav1.NewTime(e.clock.Now()))
			term := e.deps.termination(e.lb, time.Minute)
			if tc.waits {
				tc.breakIt(e)
				done, res, err := term.Reconcile(context.Background(), e.s)
				if done || err == nil && res.RequeueAfter == 0 {
					t.Fatalf("within the timeout: done %v, %v, %v; want a wait", done, res, err)
				}
				if !e.exists(cpName) {
					t.Fatal("the container was deleted before the load balancer was given up on")
				}
				if tc.waitSays != "" {
					wantCondition(t, e.s, infrav1.ContainerRunningCondition, metav1.ConditionFalse, infrav1.EngineUnreachableReason)
					if msg := conditions.Get(e.s.ContainerMachine, infrav1.ContainerRunningCondition).Message; !strings.Contains(msg, tc.waitSays) {
						t.Fatalf("ContainerRunning says %q; want %q", msg, tc.waitSays)
					}
				}
				e.clock.Step(time.Minute)
			}
			for range 3 {
				tc.breakIt(e)
				done, res, err := term.Reconcile(context.Background(), e.s)
				if err != nil {
					t.Fatalf("the deletion waits for the load balancer: %v", err)
				}
				if done {
					break
				}
				if res.RequeueAfter == 0 {
					t.Fatal("termination is not done and asks for no requeue")
				}
			}
			if e.exists(cpName) {
				t.Fatal("the container was not deleted")
			}
			if evs := events(e.recorder); !strings.Contains(evs, "LoadBalancerNotSynced") {
				t.Fatalf("events %q; want one saying the load balancer was not synced", evs)
			}
		})
	}
}
