package hostcapacity

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/fake"
)

var costs = Costs{
	container.RoleControlPlane: {InotifyInstances: 20, InotifyWatches: 200},
	container.RoleWorker:       {InotifyInstances: 10, InotifyWatches: 100},
}

func TestCheck(t *testing.T) {
	cp, w := container.RoleControlPlane, container.RoleWorker
	testCases := []struct {
		name    string
		limits  Values
		reserve Values
		nodes   map[container.Role]int
		role    container.Role
		want    string // the sysctl short of room, or ""
		inUse   int64
	}{
		{name: "room for a worker", limits: Values{InotifyInstances: 128}, nodes: map[container.Role]int{cp: 1, w: 9}, role: w},
		{name: "exactly full after it", limits: Values{InotifyInstances: 120}, nodes: map[container.Role]int{cp: 1, w: 9}, role: w},
		{name: "one over", limits: Values{InotifyInstances: 119}, nodes: map[container.Role]int{cp: 1, w: 9}, role: w, want: InotifyInstances, inUse: 110},
		{name: "the reserve counts", limits: Values{InotifyInstances: 128}, reserve: Values{InotifyInstances: 20}, nodes: map[container.Role]int{cp: 1, w: 9}, role: w, want: InotifyInstances, inUse: 130},
		{name: "a control plane costs more", limits: Values{InotifyInstances: 115}, nodes: map[container.Role]int{w: 10}, role: cp, want: InotifyInstances, inUse: 100},
		{name: "where a worker still fits", limits: Values{InotifyInstances: 115}, nodes: map[container.Role]int{w: 10}, role: w},
		{name: "watches checked after instances", limits: Values{InotifyInstances: 8192, InotifyWatches: 999}, nodes: map[container.Role]int{w: 9}, role: w, want: InotifyWatches, inUse: 900},
		{name: "instances reported first", limits: Values{InotifyInstances: 10, InotifyWatches: 10}, nodes: map[container.Role]int{w: 1}, role: w, want: InotifyInstances, inUse: 10},
		{name: "an unknown limit is not checked", limits: Values{}, nodes: map[container.Role]int{w: 1000}, role: w},
		{name: "a role without cost always fits", limits: Values{InotifyInstances: 1}, nodes: map[container.Role]int{w: 5}, role: container.RoleLoadBalancer},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			got := Check(tc.limits, tc.reserve, costs, tc.nodes, tc.role)
			switch {
			case tc.want == "" && got != nil:
				t.Fatalf("want room, got %+v", got)
			case tc.want != "" && (got == nil || got.Sysctl != tc.want || got.InUse != tc.inUse):
				t.Fatalf("want %s short at %d in use, got %+v", tc.want, tc.inUse, got)
			}
		})
	}
}

func TestShortfallMessageSaysHowToRaiseTheLimit(t *testing.T) {
	msg := (&Shortfall{Sysctl: InotifyInstances, Limit: 128, InUse: 124, Nodes: 7, Need: 13}).Message()
	for _, want := range []string{"fs.inotify.max_user_instances is 128", "7 node containers", "about 124", "needs 13", "`sysctl -w fs.inotify.max_user_instances=8192`", "/etc/sysctl.d/"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("the message lacks %q: %s", want, msg)
		}
	}
	// A host that needs more than the usual advice is told so.
	msg = (&Shortfall{Sysctl: InotifyInstances, Limit: 8192, InUse: 8190, Nodes: 600, Need: 13}).Message()
	if !strings.Contains(msg, "=16406`") {
		t.Fatalf("want twice the need suggested: %s", msg)
	}
}

func TestProcSysReadsTheLimits(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "fs", "inotify"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fs", "inotify", "max_user_instances"), []byte("128\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ProcSys{Dir: dir}.Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[InotifyInstances] != 128 {
		t.Fatalf("want only max_user_instances=128 (watches missing), got %v", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "fs", "inotify", "max_user_watches"), []byte("many"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := (ProcSys{Dir: dir}).Read(); err == nil || !strings.Contains(err.Error(), InotifyWatches) {
		t.Fatalf("want a parse error naming the sysctl, got %v", err)
	}
}

// fixedLimits is a host whose limits a test sets.
type fixedLimits struct {
	mu sync.Mutex
	v  Values
}

func (f *fixedLimits) Read() (Values, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.v, nil
}

func (f *fixedLimits) set(v Values) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.v = v
}

func newGate(t *testing.T, instances int64) (*Gate, *fake.Runtime, *fixedLimits, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC))
	rt := fake.New(clk)
	if _, err := rt.EnsureNetwork(context.Background(), container.NetworkSpec{Name: "n", Owner: testOwner}); err != nil {
		t.Fatal(err)
	}
	limits := &fixedLimits{v: Values{InotifyInstances: instances}}
	return &Gate{Runtime: rt, Limits: limits, Costs: costs, Clock: clk}, rt, limits, clk
}

// testOwner owns the test's node containers.
var testOwner = container.Owner{Namespace: "ns", Cluster: "c1", ClusterID: "id-1"}

func run(t *testing.T, rt *fake.Runtime, name string, role container.Role) {
	t.Helper()
	ctx := context.Background()
	if _, err := rt.CreateMachine(ctx, container.MachineSpec{Name: name, Image: "node", Network: "n", Role: role,
		Labels: testOwner.ForMachine(name).Labels()}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, name, testOwner.ForMachine(name)); err != nil {
		t.Fatal(err)
	}
}

func TestGateHoldsTheNodeThatWouldNotFitAndAnnouncesOnce(t *testing.T) {
	g, rt, limits, _ := newGate(t, 45)
	ctx := context.Background()
	c1 := types.NamespacedName{Namespace: "ns", Name: "c1"}
	run(t, rt, "c1-cp-0", container.RoleControlPlane)
	run(t, rt, "c1-md-0", container.RoleWorker)
	// A stopped node holds nothing.
	run(t, rt, "c1-md-stopped", container.RoleWorker)
	if err := rt.Stop(ctx, "c1-md-stopped", testOwner.ForMachine("c1-md-stopped"), 0); err != nil {
		t.Fatal(err)
	}

	d, err := g.Admit(ctx, c1, "c1-md-1", container.RoleWorker)
	if err != nil || d.Shortfall != nil {
		t.Fatalf("want the third node admitted (40 of 45), got %+v %v", d, err)
	}
	// It is not created yet, and still counts: the next one waits.
	d, err = g.Admit(ctx, c1, "c1-md-2", container.RoleWorker)
	if err != nil || d.Shortfall == nil || !d.Announce || d.Shortfall.InUse != 40 || d.Shortfall.Nodes != 3 {
		t.Fatalf("want the fourth node held and announced at 40 in use, got %+v %v", d.Shortfall, err)
	}
	d, _ = g.Admit(ctx, c1, "c1-md-3", container.RoleWorker)
	if d.Shortfall == nil || d.Announce {
		t.Fatalf("want the fifth node held without a second announcement, got %+v", d)
	}
	// An admitted node asking again (its launch is retried) is admitted.
	if d, _ := g.Admit(ctx, c1, "c1-md-1", container.RoleWorker); d.Shortfall != nil {
		t.Fatalf("the admitted node was held on its retry: %+v", d.Shortfall)
	}

	// The limit is raised: the waiting nodes go on, and a later hold is
	// announced again.
	limits.set(Values{InotifyInstances: 60})
	for _, n := range []string{"c1-md-2", "c1-md-3"} {
		if d, _ := g.Admit(ctx, c1, n, container.RoleWorker); d.Shortfall != nil {
			t.Fatalf("%s still held after the limit rose: %+v", n, d.Shortfall)
		}
	}
	if d, _ := g.Admit(ctx, c1, "c1-md-4", container.RoleWorker); d.Shortfall == nil || !d.Announce {
		t.Fatalf("want a new hold announced, got %+v", d)
	}
}

func TestGateForgetsAdmissionsOnceCreatedOrAbandoned(t *testing.T) {
	g, rt, _, clk := newGate(t, 20)
	ctx := context.Background()
	c1 := types.NamespacedName{Namespace: "ns", Name: "c1"}
	if d, _ := g.Admit(ctx, c1, "c1-md-0", container.RoleWorker); d.Shortfall != nil {
		t.Fatal("the first worker was held")
	}
	// Created and listed, it counts once, not twice.
	run(t, rt, "c1-md-0", container.RoleWorker)
	if d, _ := g.Admit(ctx, c1, "c1-md-1", container.RoleWorker); d.Shortfall != nil {
		t.Fatalf("a created node counted twice: %+v", d.Shortfall)
	}
	// c1-md-1's launch is abandoned: after the TTL its room is free again.
	if d, _ := g.Admit(ctx, c1, "c1-md-2", container.RoleWorker); d.Shortfall == nil {
		t.Fatal("want the third worker held while the second is admitted")
	}
	clk.Step(admissionTTL + time.Second)
	if d, _ := g.Admit(ctx, c1, "c1-md-2", container.RoleWorker); d.Shortfall != nil {
		t.Fatalf("an abandoned admission still holds room: %+v", d.Shortfall)
	}
}

func TestGateAdmitsConcurrentLaunchesOnlyUpToTheLimit(t *testing.T) {
	g, _, _, _ := newGate(t, 55) // room for 5 workers of 10
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := range 10 {
		wg.Go(func() {
			d, err := g.Admit(ctx, types.NamespacedName{Namespace: "ns", Name: "c1"}, fmt.Sprintf("c1-mp-%d", i), container.RoleWorker)
			if err != nil {
				t.Error(err)
			}
			if d.Shortfall == nil {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if admitted != 5 {
		t.Fatalf("want 5 of 10 simultaneous launches admitted, got %d", admitted)
	}
}
