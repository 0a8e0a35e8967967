package containermachinepool_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capicontrollers "sigs.k8s.io/cluster-api/controllers"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/cluster-api/util/labels/format"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/exp/internal/controllers/containermachinepool"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
	"github.com/capct/cluster-api-provider-container/internal/controllers/containercluster"
	"github.com/capct/cluster-api-provider-container/internal/controllers/containermachine"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/loadbalancer"
	"github.com/capct/cluster-api-provider-container/internal/test/capi"
	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

// The suite runs the pool controller against a real API server with Cluster
// API's Cluster, Machine and MachinePool reconcilers in the same process, so
// the MachinePool Machines are created by their real consumer, and with
// CAPCT's ContainerCluster and ContainerMachine controllers on the fake
// runtime, so containers really come and go. The envtest manager only serves
// webhooks; each test starts its own controller manager ("stack"), which is
// what lets a test crash one and start another.
var (
	env *envtest.Environment
	rt  *fake.Runtime
)

// bootstrapData is runnable by the lifecycle on the fake runtime: it writes
// the bootstrap sentinel.
const bootstrapData = `#cloud-config
write_files:
- path: /run/cluster-api/bootstrap-success.complete
  content: success
runcmd:
- "echo hello"
`

const k8sVersion = "v1.35.4"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("TEST_LOG") != "" {
		ctrl.SetLogger(klog.Background())
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	rt = fake.New(nil)
	// CAPCT never pulls: the images the machines (those of the rollout
	// tests too) and load balancers run are on the host.
	for _, img := range []string{"capct/node:" + k8sVersion, "capct/node:" + k8sVersion + "-custom", "capct/node:v1.35.5", loadbalancer.DefaultImage} {
		rt.AddImage(img, nil)
	}
	// Each test starts its own manager (startStack); the harness's manager
	// serves the webhooks.
	return envtest.Run(m, func(_ context.Context, e *envtest.Environment) error {
		env = e
		return nil
	}, nil)
}

// writes counts the writes the pool controller sends, by verb.
type writes struct {
	mu     sync.Mutex
	counts map[string]int
	lists  int
	// onApply, when set, runs before each Apply and may fail it.
	onApply func() error
}

func (w *writes) add(verb string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts[verb]++
}

func (w *writes) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.counts {
		n += c
	}
	return n
}

func (w *writes) snapshot() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for k, v := range w.counts {
		out[k] = v
	}
	return out
}

func (w *writes) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts = map[string]int{}
	w.lists = 0
}

func (w *writes) listCalls() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lists
}

// withWatch lets the interceptor wrap a manager's client.
type withWatch struct{ client.Client }

func (withWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("watch is not supported")
}

func (w *writes) wrap(c client.Client) client.Client {
	return interceptor.NewClient(withWatch{c}, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*infrav1.ContainerMachineList); ok {
				w.mu.Lock()
				w.lists++
				w.mu.Unlock()
			}
			return c.List(ctx, list, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			w.add("create")
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			w.add("update")
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			w.add("patch")
			return c.Patch(ctx, obj, patch, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			w.mu.Lock()
			hook := w.onApply
			w.mu.Unlock()
			if hook != nil {
				if err := hook(); err != nil {
					return err
				}
			}
			w.add("apply")
			return c.Apply(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			w.add("delete")
			return c.Delete(ctx, obj, opts...)
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			w.add("deleteAllOf")
			return c.DeleteAllOf(ctx, obj, opts...)
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			w.add(sub + "/create")
			return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			w.add(sub + "/update")
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			w.add(sub + "/patch")
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			w.add(sub + "/apply")
			return c.SubResource(sub).Apply(ctx, obj, opts...)
		},
	})
}

// stack is one running controller manager with every controller the pool
// flow needs.
type stack struct {
	writes *writes
	cancel context.CancelFunc
	done   chan error
}

func startStack(t *testing.T) *stack {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Client:  client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}}}},
	})
	if err != nil {
		t.Fatalf("failed to create a manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &stack{writes: &writes{counts: map[string]int{}}, cancel: cancel, done: make(chan error, 1)}
	// Cluster API's Cluster and Machine controllers, with the Node index its
	// MachinePool controller needs to match Nodes.
	clusterCache, err := capi.SetupCore(ctx, mgr)
	if err != nil {
		t.Fatal(err)
	}
	options := controller.Options{MaxConcurrentReconciles: 10, SkipNameValidation: ptr.To(true)}
	setups := []func() error{
		func() error {
			return (&capicontrollers.MachinePoolReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: clusterCache}).SetupWithManager(ctx, mgr, options)
		},
		func() error {
			return (&containercluster.Reconciler{Client: mgr.GetClient(), Engines: engines.Single(rt), LoadBalancerStats: capi.LoadBalancerStats(rt)}).SetupWithManager(ctx, mgr, options)
		},
		func() error {
			// The envtest API server plays the workload cluster.
			workload := func(context.Context, client.ObjectKey) (client.Client, error) { return env.Client, nil }
			return (&containermachine.Reconciler{Client: mgr.GetClient(), Engines: engines.Single(rt), ClusterCache: clusterCache, WorkloadClient: workload, MachinePools: true}).SetupWithManager(ctx, mgr, options)
		},
		func() error {
			return (&containermachinepool.Reconciler{Client: s.writes.wrap(mgr.GetClient()), APIReader: mgr.GetAPIReader(), Engines: engines.Single(rt)}).SetupWithManager(ctx, mgr, options)
		},
	}
	for _, setup := range setups {
		if err := setup(); err != nil {
			cancel()
			t.Fatalf("failed to set up a controller: %v", err)
		}
	}
	go func() { s.done <- mgr.Start(ctx) }()
	t.Cleanup(s.stop)
	return s
}

// stop stops the manager and waits for it, as a crash would stop it (no
// cleanup runs in between).
func (s *stack) stop() {
	s.cancel()
	select {
	case <-s.done: //nolint:errcheck // the manager's error after a cancel says only that it stopped
	case <-time.After(30 * time.Second):
	}
}

// fixture is a Cluster with one MachinePool backed by a ContainerMachinePool.
type fixture struct {
	t  *testing.T
	ns string
	// name is the Cluster's name; unique, since the fake runtime's
	// networks are named after clusters.
	name    string
	cluster *clusterv1.Cluster
	pool    *expinfrav1.ContainerMachinePool
	mp      *clusterv1.MachinePool
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// newFixture makes the fixture's objects; each of mutate may change the
// ContainerCluster and the MachinePool before any is created.
func newFixture(t *testing.T, replicas int32, strategy expinfrav1.RollingUpdate, mutate ...func(*infrav1.ContainerCluster, *clusterv1.MachinePool)) *fixture {
	t.Helper()
	ctx := ctxT(t)
	c := env.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "mp-"}}
	must(t, c.Create(ctx, ns))
	f := &fixture{t: t, ns: ns.Name, name: ns.Name}
	cc := &infrav1.ContainerCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: f.name}}
	f.pool = &expinfrav1.ContainerMachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "pool"},
		Spec:       expinfrav1.ContainerMachinePoolSpec{Strategy: strategy},
	}
	f.mp = &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "workers", Labels: map[string]string{clusterv1.ClusterNameLabel: f.name}},
		Spec: clusterv1.MachinePoolSpec{
			ClusterName: f.name,
			Replicas:    ptr.To(replicas),
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: f.name,
				Version:     k8sVersion,
				Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To("bootstrap")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: expinfrav1.GroupVersion.Group, Kind: "ContainerMachinePool", Name: f.pool.Name,
				},
			}},
		},
	}
	for _, m := range mutate {
		m(cc, f.mp)
	}
	must(t, c.Create(ctx, cc))
	f.cluster = &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: f.name},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "ContainerCluster", Name: cc.Name,
		}},
	}
	must(t, c.Create(ctx, f.cluster))
	must(t, c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: f.name + "-kubeconfig", Labels: map[string]string{clusterv1.ClusterNameLabel: f.name}},
		Data:       map[string][]byte{"value": kubeconfig.FromEnvTestConfig(env.Config, f.cluster)},
	}))
	must(t, c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "bootstrap", Labels: map[string]string{clusterv1.ClusterNameLabel: f.name}},
		Data:       map[string][]byte{"value": []byte(bootstrapData), "format": []byte("cloud-config")},
	}))
	must(t, c.Create(ctx, f.pool))
	must(t, c.Create(ctx, f.mp))
	return f
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it returns nil or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
}

func (f *fixture) labels() client.MatchingLabels {
	return client.MatchingLabels{clusterv1.ClusterNameLabel: f.name, clusterv1.MachinePoolNameLabel: format.MustFormatValue(f.mp.Name)}
}

// state is what exists for the pool.
type state struct {
	cms        []infrav1.ContainerMachine
	machines   []clusterv1.Machine
	containers []container.Machine
	pool       *expinfrav1.ContainerMachinePool
}

func (f *fixture) state() state {
	f.t.Helper()
	s, err := f.tryState(ctxT(f.t))
	must(f.t, err)
	return s
}

// tryState is state for goroutines other than the test's, which may not
// fail the test themselves.
func (f *fixture) tryState(ctx context.Context) (state, error) {
	var s state
	cms := &infrav1.ContainerMachineList{}
	if err := env.Client.List(ctx, cms, client.InNamespace(f.ns), f.labels()); err != nil {
		return s, err
	}
	s.cms = cms.Items
	machines := &clusterv1.MachineList{}
	if err := env.Client.List(ctx, machines, client.InNamespace(f.ns), f.labels()); err != nil {
		return s, err
	}
	s.machines = machines.Items
	all, err := rt.List(ctx, map[string]string{container.LabelPool: format.MustFormatValue(f.mp.Name), container.LabelNamespace: f.ns})
	if err != nil {
		return s, err
	}
	s.containers = all
	s.pool = &expinfrav1.ContainerMachinePool{}
	return s, env.Client.Get(ctx, client.ObjectKeyFromObject(f.pool), s.pool)
}

// bounds watches a pool during a rollout for the strategy's bounds: at
// least minAvailable provisioned machines and at most maxActive machines
// that are not being deleted, at every look.
type bounds struct {
	t                       *testing.T
	minAvailable, maxActive int
	stop                    context.CancelFunc
	done                    chan struct{}
	// Written by the watching goroutine until done is closed.
	violations []string
	looks      int
	failed     error
}

// watchBounds starts watching the pool; check stops and judges.
func (f *fixture) watchBounds(minAvailable, maxActive int) *bounds {
	ctx, stop := context.WithCancel(ctxT(f.t))
	b := &bounds{t: f.t, minAvailable: minAvailable, maxActive: maxActive, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		for ctx.Err() == nil {
			s, err := f.tryState(ctx)
			if err != nil {
				if ctx.Err() == nil {
					b.failed = err
				}
				return
			}
			b.looks++
			if available, active := s.rollout(); available < minAvailable || active > maxActive {
				b.violations = append(b.violations, fmt.Sprintf("available %d active %d of %v", available, active, cmNames(s)))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	f.t.Cleanup(stop)
	return b
}

// rollout counts the machines that are not being deleted (active) and,
// of those, the provisioned ones (available).
func (s state) rollout() (available, active int) {
	machines := map[string]clusterv1.Machine{}
	for _, m := range s.machines {
		machines[m.Name] = m
	}
	for _, cm := range s.cms {
		m, ok := machines[cm.Name]
		if !cm.DeletionTimestamp.IsZero() || (ok && !m.DeletionTimestamp.IsZero()) {
			continue
		}
		active++
		if ptr.Deref(cm.Status.Initialization.Provisioned, false) {
			available++
		}
	}
	return available, active
}

// check stops the watch and fails the test if a look broke the bounds.
func (b *bounds) check() {
	b.t.Helper()
	b.stop()
	<-b.done
	if b.failed != nil {
		b.t.Fatalf("failed to watch the rollout: %v", b.failed)
	}
	if len(b.violations) > 0 {
		b.t.Fatalf("the rollout broke the strategy (at least %d available, at most %d active) in %d of %d looks, first: %s",
			b.minAvailable, b.maxActive, len(b.violations), b.looks, b.violations[0])
	}
	b.t.Logf("the rollout kept its bounds in %d looks", b.looks)
}

func names[T any](items []T, name func(T) string) []string {
	out := make([]string, 0, len(items))
	for _, i := range items {
		out = append(out, name(i))
	}
	sort.Strings(out)
	return out
}

func cmNames(s state) []string {
	return names(s.cms, func(c infrav1.ContainerMachine) string { return c.Name })
}

// settled checks that the pool has exactly n machines, each with its Machine
// and its running container, all provisioned, and that the pool's contract
// fields say so.
func (f *fixture) settled(n int) func() error { return f.settledBeside(n, 0) }

// settledBeside is settled for a pool that also keeps warm warm machines,
// whose containers carry the pool's label too.
func (f *fixture) settledBeside(n, warm int) func() error {
	return func() error {
		s := f.state()
		if len(s.cms) != n || len(s.machines) != n || len(s.containers) != n+warm {
			return fmt.Errorf("want %d of each and %d warm containers, got %d ContainerMachines, %d Machines, %d containers",
				n, warm, len(s.cms), len(s.machines), len(s.containers))
		}
		var ids []string
		for _, cm := range s.cms {
			if !ptr.Deref(cm.Status.Initialization.Provisioned, false) {
				return fmt.Errorf("ContainerMachine %s is not provisioned", cm.Name)
			}
			ids = append(ids, cm.Spec.ProviderID)
		}
		if mnames := names(s.machines, func(m clusterv1.Machine) string { return m.Name }); fmt.Sprint(mnames) != fmt.Sprint(cmNames(s)) {
			return fmt.Errorf("Machines %v do not match ContainerMachines %v", mnames, cmNames(s))
		}
		sort.Strings(ids)
		if fmt.Sprint(s.pool.Spec.ProviderIDList) != fmt.Sprint(ids) {
			return fmt.Errorf("providerIDList %v, want %v", s.pool.Spec.ProviderIDList, ids)
		}
		if !sort.StringsAreSorted(s.pool.Spec.ProviderIDList) {
			return fmt.Errorf("providerIDList %v is not sorted", s.pool.Spec.ProviderIDList)
		}
		if int(s.pool.Status.Replicas) != n || !s.pool.Status.Ready || !ptr.Deref(s.pool.Status.Initialization.Provisioned, false) || len(s.pool.Status.Instances) != n {
			return fmt.Errorf("pool status: replicas %d ready %v provisioned %v instances %d", s.pool.Status.Replicas, s.pool.Status.Ready,
				ptr.Deref(s.pool.Status.Initialization.Provisioned, false), len(s.pool.Status.Instances))
		}
		if s.pool.Status.InfrastructureMachineKind != "ContainerMachine" {
			return fmt.Errorf("infrastructureMachineKind %q", s.pool.Status.InfrastructureMachineKind)
		}
		return nil
	}
}

// quiet waits until no ContainerMachine or Machine of the pool has changed
// for d, so that nothing but what the test does next reconciles them.
func (f *fixture) quiet(d time.Duration) {
	f.t.Helper()
	versions := func() string {
		s := f.state()
		v := names(s.cms, func(c infrav1.ContainerMachine) string { return c.Name + "@" + c.ResourceVersion })
		return fmt.Sprint(v, names(s.machines, func(m clusterv1.Machine) string { return m.Name + "@" + m.ResourceVersion }))
	}
	last, since := versions(), time.Now()
	eventually(f.t, settle, fmt.Sprintf("the pool's machines to be left alone for %s", d), func() error {
		if v := versions(); v != last {
			last, since = v, time.Now()
		}
		if quiet := time.Since(since); quiet < d {
			return fmt.Errorf("last change %s ago: %s", quiet.Round(time.Millisecond), last)
		}
		return nil
	})
}

func (f *fixture) scale(n int32) {
	f.t.Helper()
	ctx := ctxT(f.t)
	mp := &clusterv1.MachinePool{}
	must(f.t, env.Client.Get(ctx, client.ObjectKeyFromObject(f.mp), mp))
	before := mp.DeepCopy()
	mp.Spec.Replicas = ptr.To(n)
	must(f.t, env.Client.Patch(ctx, mp, client.MergeFrom(before)))
}
