package lifecycle

import (
	"context"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/capct/cluster-api-provider-container/internal/engines"
)

// machineIn names machine name of namespace ns.
func machineIn(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

func TestNextInLine(t *testing.T) {
	a1, a2, a3, a4 := machineIn("a", "1"), machineIn("a", "2"), machineIn("a", "3"), machineIn("a", "4")
	b1, b2, b3 := machineIn("b", "1"), machineIn("b", "2"), machineIn("b", "3")
	c1 := machineIn("c", "1")
	held := func(keys ...types.NamespacedName) map[types.NamespacedName]bool {
		m := map[types.NamespacedName]bool{}
		for _, k := range keys {
			m[k] = true
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		limit int
		held  map[types.NamespacedName]bool
		queue []types.NamespacedName
		want  []types.NamespacedName
	}{
		{name: "no limit: everyone", limit: 0, held: held(a1, a2), queue: []types.NamespacedName{a3, b1}, want: []types.NamespacedName{a3, b1}},
		{name: "no free slot: no one", limit: 2, held: held(a1, b1), queue: []types.NamespacedName{a2, b2}},
		{name: "one namespace alone takes every slot", limit: 4, queue: []types.NamespacedName{a1, a2, a3, a4}, want: []types.NamespacedName{a1, a2, a3, a4}},
		{name: "the order of the line", limit: 2, queue: []types.NamespacedName{b1, a1, c1}, want: []types.NamespacedName{b1, a1}},
		{name: "a namespace at half gives way to one behind it", limit: 4, held: held(a1, a2), queue: []types.NamespacedName{a3, a4, b1},
			want: []types.NamespacedName{b1, a3}},
		{name: "a line filled by one namespace stops at half while another waits", limit: 4, queue: []types.NamespacedName{a1, a2, a3, a4, b1},
			want: []types.NamespacedName{a1, a2, b1, a3}},
		{name: "a namespace over half, stuck, gets no freed slot while another waits", limit: 4, held: held(a1, a2, a3), queue: []types.NamespacedName{a4, b1},
			want: []types.NamespacedName{b1}},
		{name: "others at their share: the freed slot goes in line order", limit: 4, held: held(a1, b1, b2), queue: []types.NamespacedName{a2, b2},
			want: []types.NamespacedName{a2}},
		{name: "a limit of one is never held back", limit: 1, queue: []types.NamespacedName{a1, b1}, want: []types.NamespacedName{a1}},
		{name: "a limit of one goes to a namespace alone in line again", limit: 1, queue: []types.NamespacedName{a2, a3}, want: []types.NamespacedName{a2}},
		// An odd limit: the share is half rounded down, and no namespace
		// takes a slot beyond it while another waits, even when the slot
		// then stays free.
		{name: "limit 3: two namespaces at their share leave the odd slot free", limit: 3, held: held(a1, b1), queue: []types.NamespacedName{a2, b2}},
		{name: "limit 3: a line filled by one namespace stops at its share while another waits", limit: 3,
			queue: []types.NamespacedName{a1, a2, a3, b1, b2}, want: []types.NamespacedName{a1, b1}},
		{name: "limit 3: a namespace alone in line takes the odd slot", limit: 3, held: held(a1, b1), queue: []types.NamespacedName{a2, a3},
			want: []types.NamespacedName{a2}},
		{name: "limit 5: a namespace at its share never takes the odd slot from one waiting", limit: 5, held: held(a1, a2, b1),
			queue: []types.NamespacedName{a3, b2, b3}, want: []types.NamespacedName{b2}},
		{name: "limit 5: a third namespace takes the odd slot", limit: 5, held: held(a1, a2, b1, b2), queue: []types.NamespacedName{a3, b3, c1},
			want: []types.NamespacedName{c1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.held == nil {
				tc.held = held()
			}
			if got := nextInLine(tc.limit, tc.held, tc.queue); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("nextInLine(%d, %v, %v) = %v, want %v", tc.limit, tc.held, tc.queue, got, tc.want)
			}
		})
	}
}

// TestBootstrapSlotsArePerEngine: machines whose bootstraps never end on
// one engine hold that engine's slots only, and within an engine a
// namespace holding its share waits behind another namespace's machine.
func TestBootstrapSlotsArePerEngine(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var woken []types.NamespacedName
	r := NewBootstrapRunner(ctx, clock.RealClock{}, 2, func(k types.NamespacedName) { woken = append(woken, k) })

	stuck1, stuck2 := machineIn("hostile", "1"), machineIn("hostile", "2")
	for _, k := range []types.NamespacedName{stuck1, stuck2} {
		if ok, _ := r.Acquire(k, "engine-a"); !ok {
			t.Fatalf("%s found no slot on an idle engine", k)
		}
	}
	other := machineIn("tenant", "1")
	if ok, usage := r.Acquire(other, "engine-b"); !ok {
		t.Fatalf("a machine on engine-b waits for engine-a's slots: %+v", usage)
	}
	if ok, _ := r.Acquire(machineIn("tenant", "2"), engines.Local); !ok {
		t.Fatal("a machine on the manager's engine waits for engine-a's slots")
	}

	// On engine-a, the hostile namespace asks again before a tenant does;
	// the slot freed goes to the tenant.
	hostile3, tenant3 := machineIn("hostile", "3"), machineIn("tenant", "3")
	if ok, usage := r.Acquire(hostile3, "engine-a"); ok || usage.InFlight != 2 || usage.Limit != 2 {
		t.Fatalf("a third machine took a slot of engine-a, or the usage is wrong: %v %+v", ok, usage)
	}
	if ok, usage := r.Acquire(tenant3, "engine-a"); ok || usage.Ahead != 1 {
		t.Fatalf("the tenant took a slot of a full engine, or its place is wrong: %v %+v", ok, usage)
	}
	r.Release(stuck1)
	if !reflect.DeepEqual(woken, []types.NamespacedName{tenant3}) {
		t.Fatalf("the freed slot woke %v, want the tenant's machine only", woken)
	}
	if ok, _ := r.Acquire(hostile3, "engine-a"); ok {
		t.Fatal("the hostile namespace's machine took the slot freed for the tenant")
	}
	if ok, _ := r.Acquire(tenant3, "engine-a"); !ok {
		t.Fatal("the tenant's machine did not get the slot freed for it")
	}
}
