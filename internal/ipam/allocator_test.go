package ipam

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = pfx(s)
	}
	return out
}

func mustNew(t testing.TB, cfg Config) *Allocator {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return a
}

func TestNewValidation(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
		mention string // the value the error must name
		usage   []FamilyUsage
	}{
		{name: "v4 defaults to /24", cfg: Config{ClusterCIDRs: prefixes("10.0.0.0/16")},
			usage: []FamilyUsage{{pfx("10.0.0.0/16"), 24, 0, 256}}},
		{name: "v6 defaults to /64", cfg: Config{ClusterCIDRs: prefixes("fd00::/56")},
			usage: []FamilyUsage{{pfx("fd00::/56"), 64, 0, 256}}},
		{name: "dual stack keeps order", cfg: Config{ClusterCIDRs: prefixes("fd00::/56", "10.0.0.0/16"), NodeMaskSizeIPv4: 20},
			usage: []FamilyUsage{{pfx("fd00::/56"), 64, 0, 256}, {pfx("10.0.0.0/16"), 20, 0, 16}}},
		{name: "node mask equal to cluster prefix", cfg: Config{ClusterCIDRs: prefixes("10.0.0.0/24")},
			usage: []FamilyUsage{{pfx("10.0.0.0/24"), 24, 0, 1}}},
		{name: "unmasked cluster CIDR is normalised", cfg: Config{ClusterCIDRs: prefixes("10.9.8.7/16")},
			usage: []FamilyUsage{{pfx("10.9.0.0/16"), 24, 0, 256}}},
		{name: "no CIDRs", cfg: Config{}, wantErr: true, mention: "at least one"},
		{name: "three CIDRs", cfg: Config{ClusterCIDRs: prefixes("10.0.0.0/8", "fd00::/48", "192.168.0.0/16")}, wantErr: true, mention: "192.168.0.0/16"},
		{name: "two IPv4", cfg: Config{ClusterCIDRs: prefixes("10.0.0.0/8", "192.168.0.0/16")}, wantErr: true, mention: "192.168.0.0/16"},
		{name: "two IPv6", cfg: Config{ClusterCIDRs: prefixes("fd00::/48", "fd01::/48")}, wantErr: true, mention: "fd01::/48"},
		{name: "zero prefix", cfg: Config{ClusterCIDRs: []netip.Prefix{{}}}, wantErr: true, mention: "invalid Prefix"},
		{name: "v4-mapped v6", cfg: Config{ClusterCIDRs: prefixes("::ffff:10.0.0.0/104")}, wantErr: true, mention: "::ffff:10.0.0.0/104"},
		{name: "v4 node mask shorter than cluster", cfg: Config{ClusterCIDRs: prefixes("10.0.0.0/16"), NodeMaskSizeIPv4: 8}, wantErr: true, mention: "/8"},
		{name: "v6 node mask shorter than cluster", cfg: Config{ClusterCIDRs: prefixes("fd00::/64")}, wantErr: false,
			usage: []FamilyUsage{{pfx("fd00::/64"), 64, 0, 1}}},
		{name: "v6 default mask shorter than /80 cluster", cfg: Config{ClusterCIDRs: prefixes("fd00::/80")}, wantErr: true, mention: "fd00::/80"},
		{name: "v4 mask > 32", cfg: Config{ClusterCIDRs: prefixes("10.0.0.0/16"), NodeMaskSizeIPv4: 33}, wantErr: true, mention: "33"},
		{name: "v6 mask > 128", cfg: Config{ClusterCIDRs: prefixes("fd00::/48"), NodeMaskSizeIPv6: 129}, wantErr: true, mention: "129"},
		{name: "negative mask", cfg: Config{ClusterCIDRs: prefixes("10.0.0.0/8"), NodeMaskSizeIPv4: -1}, wantErr: true, mention: "-1"},
		{name: "too many v4 subnets", cfg: Config{ClusterCIDRs: prefixes("10.0.0.0/8"), NodeMaskSizeIPv4: 30}, wantErr: true, mention: "10.0.0.0/8"},
		{name: "too many v6 subnets", cfg: Config{ClusterCIDRs: prefixes("fd00::/32")}, wantErr: true, mention: "fd00::/32"},
		{name: "largest allowed v4", cfg: Config{ClusterCIDRs: prefixes("10.0.0.0/8"), NodeMaskSizeIPv4: 28},
			usage: []FamilyUsage{{pfx("10.0.0.0/8"), 28, 0, MaxSubnets}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(tt.cfg)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("err = %v, want ErrInvalidConfig", err)
				}
				if !strings.Contains(err.Error(), tt.mention) {
					t.Fatalf("error %q does not mention %q", err, tt.mention)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := a.Usage(); !slices.Equal(got, tt.usage) {
				t.Fatalf("Usage = %+v, want %+v", got, tt.usage)
			}
		})
	}
}

func TestAllocateDualStackAndIdempotent(t *testing.T) {
	a := mustNew(t, Config{ClusterCIDRs: prefixes("10.0.0.0/16", "fd00::/56")})
	got, err := a.Allocate("ns/m0")
	if err != nil || !slices.Equal(got, prefixes("10.0.0.0/24", "fd00::/64")) {
		t.Fatalf("Allocate = %v, %v", got, err)
	}
	got, _ = a.Allocate("ns/m1")
	if !slices.Equal(got, prefixes("10.0.1.0/24", "fd00:0:0:1::/64")) {
		t.Fatalf("Allocate m1 = %v", got)
	}
	again, err := a.Allocate("ns/m0")
	if err != nil || !slices.Equal(again, prefixes("10.0.0.0/24", "fd00::/64")) {
		t.Fatalf("repeat Allocate = %v, %v", again, err)
	}
	if u := a.Usage(); u[0].InUse != 2 || u[1].InUse != 2 {
		t.Fatalf("repeat Allocate changed usage: %+v", u)
	}
	if g, ok := a.Get("ns/m1"); !ok || !slices.Equal(g, prefixes("10.0.1.0/24", "fd00:0:0:1::/64")) {
		t.Fatalf("Get = %v, %v", g, ok)
	}
	if _, ok := a.Get("ns/none"); ok {
		t.Fatal("Get of unknown owner reported ok")
	}
	if _, err := a.Allocate(""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Allocate(\"\") = %v", err)
	}
	// Mutating a returned slice must not touch the allocator.
	got[0] = pfx("192.168.0.0/24")
	if g, _ := a.Get("ns/m1"); g[0] != pfx("10.0.1.0/24") {
		t.Fatalf("returned slice aliases internal state: %v", g)
	}
}

func TestAllocateFillsMissingFamily(t *testing.T) {
	a := mustNew(t, Config{ClusterCIDRs: prefixes("10.0.0.0/16", "fd00::/56")})
	if err := a.Occupy("old", prefixes("10.0.7.0/24")); err != nil {
		t.Fatal(err)
	}
	got, err := a.Allocate("old")
	if err != nil || !slices.Equal(got, prefixes("10.0.7.0/24", "fd00::/64")) {
		t.Fatalf("Allocate = %v, %v", got, err)
	}
}

func TestExhaustion(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		fits   int
		inUse0 int // in-use count of the first family once exhausted
	}{
		{"v4 /30 of /31", Config{ClusterCIDRs: prefixes("10.0.0.0/30"), NodeMaskSizeIPv4: 31}, 2, 2},
		{"v6 /126 of /127", Config{ClusterCIDRs: prefixes("fd00::/126"), NodeMaskSizeIPv6: 127}, 2, 2},
		// The smaller family limits dual stack, and the bigger one must
		// not leak a subnet for the failed attempt.
		{"dual, v6 runs out first", Config{ClusterCIDRs: prefixes("10.0.0.0/28", "fd00::/127"), NodeMaskSizeIPv4: 30, NodeMaskSizeIPv6: 128}, 2, 2},
		{"dual, v4 runs out first", Config{ClusterCIDRs: prefixes("10.0.0.0/30", "fd00::/120"), NodeMaskSizeIPv4: 32, NodeMaskSizeIPv6: 124}, 4, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := mustNew(t, tt.cfg)
			for i := range tt.fits {
				if _, err := a.Allocate(fmt.Sprint("m", i)); err != nil {
					t.Fatalf("Allocate #%d: %v", i, err)
				}
			}
			_, err := a.Allocate("late")
			if !errors.Is(err, ErrExhausted) {
				t.Fatalf("err = %v, want ErrExhausted", err)
			}
			if !strings.Contains(err.Error(), `"late"`) {
				t.Fatalf("error %q does not name the owner", err)
			}
			if _, ok := a.Get("late"); ok {
				t.Fatal("failed Allocate left a record")
			}
			if u := a.Usage(); u[0].InUse != tt.inUse0 || (len(u) > 1 && u[1].InUse != tt.fits) {
				t.Fatalf("Usage after failure = %+v", u)
			}
			// Existing owners still get their allocation back.
			if _, err := a.Allocate("m0"); err != nil {
				t.Fatalf("existing owner after exhaustion: %v", err)
			}
		})
	}
}

func TestOccupy(t *testing.T) {
	dual := Config{ClusterCIDRs: prefixes("10.0.0.0/16", "fd00::/56")}
	tests := []struct {
		name    string
		setup   map[string][]string // applied in sorted owner order
		owner   string
		cidrs   []netip.Prefix
		wantErr error
		mention string
		usage   [2]int
	}{
		{name: "exact dual", owner: "a", cidrs: prefixes("10.0.3.0/24", "fd00:0:0:3::/64"), usage: [2]int{1, 1}},
		{name: "reverse order", owner: "a", cidrs: prefixes("fd00:0:0:3::/64", "10.0.3.0/24"), usage: [2]int{1, 1}},
		{name: "one family only", owner: "a", cidrs: prefixes("10.0.3.0/24"), usage: [2]int{1, 0}},
		{name: "larger covers subnets", owner: "a", cidrs: prefixes("10.0.4.0/22"), usage: [2]int{4, 0}},
		{name: "smaller takes its subnet", owner: "a", cidrs: prefixes("10.0.4.0/26"), usage: [2]int{1, 0}},
		{name: "same again is a no-op", setup: map[string][]string{"a": {"10.0.3.0/24"}}, owner: "a", cidrs: prefixes("10.0.3.0/24"), usage: [2]int{1, 0}},
		{name: "adds missing family", setup: map[string][]string{"a": {"10.0.3.0/24"}}, owner: "a", cidrs: prefixes("10.0.3.0/24", "fd00::/64"), usage: [2]int{1, 1}},
		{name: "out of range", owner: "a", cidrs: prefixes("10.1.0.0/24"), wantErr: ErrOutOfRange, mention: "10.1.0.0/24"},
		{name: "larger than cluster", owner: "a", cidrs: prefixes("10.0.0.0/8"), wantErr: ErrOutOfRange, mention: "10.0.0.0/8"},
		{name: "v6 out of range", owner: "a", cidrs: prefixes("10.0.3.0/24", "fd01::/64"), wantErr: ErrOutOfRange, mention: "fd01::/64"},
		{name: "v4-mapped", owner: "a", cidrs: prefixes("::ffff:10.0.3.0/120"), wantErr: ErrOutOfRange, mention: "::ffff:10.0.3.0/120"},
		{name: "zero prefix", owner: "a", cidrs: []netip.Prefix{{}}, wantErr: ErrInvalidArgument, mention: `"a"`},
		{name: "empty list", owner: "a", wantErr: ErrInvalidArgument, mention: `"a"`},
		{name: "empty owner", owner: "", cidrs: prefixes("10.0.3.0/24"), wantErr: ErrInvalidArgument, mention: "10.0.3.0/24"},
		{name: "family twice", owner: "a", cidrs: prefixes("10.0.3.0/24", "10.0.4.0/24"), wantErr: ErrInvalidArgument, mention: "10.0.4.0/24"},
		{name: "other owner holds it", setup: map[string][]string{"b": {"10.0.3.0/24"}}, owner: "a", cidrs: prefixes("10.0.3.0/24"), wantErr: ErrConflict, mention: `"b"`, usage: [2]int{1, 0}},
		{name: "smaller inside other's", setup: map[string][]string{"b": {"10.0.3.0/24"}}, owner: "a", cidrs: prefixes("10.0.3.128/25"), wantErr: ErrConflict, mention: "10.0.3.128/25", usage: [2]int{1, 0}},
		{name: "larger over other's", setup: map[string][]string{"b": {"10.0.6.0/24"}}, owner: "a", cidrs: prefixes("10.0.4.0/22"), wantErr: ErrConflict, mention: "10.0.6.0/24", usage: [2]int{1, 0}},
		{name: "two smaller in one subnet", setup: map[string][]string{"b": {"10.0.3.0/25"}}, owner: "a", cidrs: prefixes("10.0.3.128/25"), wantErr: ErrConflict, mention: `"b"`, usage: [2]int{1, 0}},
		{name: "owner holds a different one", setup: map[string][]string{"a": {"10.0.3.0/24"}}, owner: "a", cidrs: prefixes("10.0.4.0/24"), wantErr: ErrConflict, mention: "10.0.3.0/24", usage: [2]int{1, 0}},
		{name: "all or nothing", setup: map[string][]string{"b": {"fd00::/64"}}, owner: "a", cidrs: prefixes("10.0.3.0/24", "fd00::/64"), wantErr: ErrConflict, mention: "fd00::/64", usage: [2]int{0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := mustNew(t, dual)
			for _, o := range slices.Sorted(maps.Keys(tt.setup)) {
				if err := a.Occupy(o, prefixes(tt.setup[o]...)); err != nil {
					t.Fatal(err)
				}
			}
			before := a.Allocations()
			err := a.Occupy(tt.owner, tt.cidrs)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Occupy = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tt.mention) {
					t.Fatalf("error %q does not mention %q", err, tt.mention)
				}
				if after := a.Allocations(); !equalAllocs(before, after) {
					t.Fatalf("failed Occupy changed allocations: %v -> %v", before, after)
				}
			}
			if u := a.Usage(); u[0].InUse != tt.usage[0] || u[1].InUse != tt.usage[1] {
				t.Fatalf("Usage = %+v, want in use %v", u, tt.usage)
			}
			// Whatever was occupied must never be allocated to others.
			for i := 0; ; i++ {
				got, err := a.Allocate(fmt.Sprint("new", i))
				if err != nil {
					break
				}
				for o, held := range a.Allocations() {
					if strings.HasPrefix(o, "new") {
						continue
					}
					for _, h := range held {
						for _, g := range got {
							if h.Overlaps(g) {
								t.Fatalf("allocated %s overlapping %s held by %q", g, h, o)
							}
						}
					}
				}
			}
		})
	}
}

func TestReleaseReusesAndMovesNothing(t *testing.T) {
	a := mustNew(t, Config{ClusterCIDRs: prefixes("10.0.0.0/28", "fd00::/126"), NodeMaskSizeIPv4: 30, NodeMaskSizeIPv6: 128})
	for i := range 4 {
		if _, err := a.Allocate(fmt.Sprint("m", i)); err != nil {
			t.Fatal(err)
		}
	}
	before := a.Allocations()
	if !a.Release("m2") {
		t.Fatal("Release of a holder returned false")
	}
	if a.Release("m2") || a.Release("never") {
		t.Fatal("Release of a non-holder returned true")
	}
	if u := a.Usage(); u[0].InUse != 3 || u[1].InUse != 3 {
		t.Fatalf("Usage after release = %+v", u)
	}
	got, err := a.Allocate("m9")
	if err != nil || !slices.Equal(got, before["m2"]) {
		t.Fatalf("Allocate after release = %v, %v; want the released %v", got, err, before["m2"])
	}
	after := a.Allocations()
	for o, want := range before {
		if o != "m2" && !slices.Equal(after[o], want) {
			t.Fatalf("%q moved from %v to %v", o, want, after[o])
		}
	}
	// A larger occupied prefix frees all the subnets it covered.
	b := mustNew(t, Config{ClusterCIDRs: prefixes("10.0.0.0/16")})
	_ = b.Occupy("big", prefixes("10.0.0.0/20"))
	b.Release("big")
	if u := b.Usage(); u[0].InUse != 0 {
		t.Fatalf("InUse after releasing /20 = %d", u[0].InUse)
	}
	if err := b.Occupy("other", prefixes("10.0.15.0/24")); err != nil {
		t.Fatalf("subnet of released prefix still held: %v", err)
	}
}

// allocateN allocates n owners "ns/m<i>" and returns their records.
func allocateN(t testing.TB, a *Allocator, prefix string, n int) {
	t.Helper()
	for i := range n {
		if _, err := a.Allocate(fmt.Sprintf("%s%05d", prefix, i)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRestartRebuild10k(t *testing.T) {
	cfg := Config{ClusterCIDRs: prefixes("10.0.0.0/8", "fd00::/44")}
	a := mustNew(t, cfg)
	allocateN(t, a, "ns/m", 5000)
	// Holes, so the rebuilt allocator must not just count from zero.
	for i := 0; i < 5000; i += 7 {
		a.Release(fmt.Sprintf("ns/m%05d", i))
	}
	allocateN(t, a, "ns/n", 10000-len(a.Allocations()))
	records := a.Allocations()
	if len(records) != 10000 {
		t.Fatalf("have %d records, want 10000", len(records))
	}

	b, errs := Rebuild(cfg, records)
	if len(errs) != 0 {
		t.Fatalf("Rebuild errors: %v", errs)
	}
	if !equalAllocs(b.Allocations(), records) {
		t.Fatal("rebuilt allocations differ from the records")
	}
	if !slices.Equal(a.Usage(), b.Usage()) {
		t.Fatalf("Usage differs: %+v vs %+v", a.Usage(), b.Usage())
	}
	// Keep allocating on the rebuilt allocator: nothing may be handed out
	// twice, and old owners keep what they had.
	allocateN(t, b, "ns/after", 10000)
	seen := map[netip.Prefix]string{}
	for o, cidrs := range b.Allocations() {
		for _, c := range cidrs {
			if prev, dup := seen[c]; dup {
				t.Fatalf("%s handed to both %q and %q", c, prev, o)
			}
			seen[c] = o
		}
	}
	if len(seen) != 2*20000 {
		t.Fatalf("have %d distinct CIDRs, want %d", len(seen), 40000)
	}
	for o, want := range records {
		if got, _ := b.Get(o); !slices.Equal(got, want) {
			t.Fatalf("%q moved from %v to %v after rebuild", o, want, got)
		}
	}
}

// A clusterctl move recreates objects in whatever order it likes; the
// rebuilt allocator must not care, including which of two owners
// claiming the same CIDR keeps it.
func TestRebuildIsOrderIndependent(t *testing.T) {
	cfg := Config{ClusterCIDRs: prefixes("10.0.0.0/16")}
	type rec struct {
		owner string
		cidrs []netip.Prefix
	}
	recs := []rec{
		{"ns/zeta", prefixes("10.0.1.0/24")},
		{"ns/alpha", prefixes("10.0.1.0/24")}, // duplicate: alpha sorts first and wins
		{"ns/beta", prefixes("10.0.2.0/23")},  // covers 10.0.2.0/24 and 10.0.3.0/24
		{"ns/gamma", prefixes("10.0.3.0/24")}, // overlaps beta: loses
		{"ns/delta", prefixes("10.1.0.0/24")}, // out of range
		{"ns/eps", prefixes("10.0.9.0/24", "10.0.10.0/24")},
		{"ns/mu", prefixes("10.0.20.0/24")},
		{"", prefixes("10.0.30.0/24")},
		{"ns/bad", []netip.Prefix{{}, pfx("10.0.31.0/24")}}, // good part still protected
	}
	var want map[string][]netip.Prefix
	var wantErrs []string
	for trial := range 20 {
		m := map[string][]netip.Prefix{}
		// Insert in a different order each trial.
		for k := range recs {
			r := recs[(k*7+trial)%len(recs)]
			m[r.owner] = r.cidrs
		}
		b, errs := Rebuild(cfg, m)
		got := b.Allocations()
		var gotErrs []string
		for _, e := range errs {
			gotErrs = append(gotErrs, e.Error())
		}
		if trial == 0 {
			want, wantErrs = got, gotErrs
			continue
		}
		if !equalAllocs(got, want) || !slices.Equal(gotErrs, wantErrs) {
			t.Fatalf("trial %d differs:\n%v %q\nvs\n%v %q", trial, got, gotErrs, want, wantErrs)
		}
	}
	expect := map[string][]netip.Prefix{
		"ns/alpha": prefixes("10.0.1.0/24"),
		"ns/beta":  prefixes("10.0.2.0/23"),
		"ns/eps":   prefixes("10.0.9.0/24"),
		"ns/mu":    prefixes("10.0.20.0/24"),
		"ns/bad":   prefixes("10.0.31.0/24"),
	}
	if !equalAllocs(want, expect) {
		t.Fatalf("Rebuild = %v, want %v", want, expect)
	}
	wantKinds := []struct {
		err     error
		mention string
	}{
		{ErrInvalidArgument, "owner must not be empty"},
		{ErrInvalidArgument, `"ns/bad"`},
		{ErrOutOfRange, `10.1.0.0/24`},
		{ErrConflict, `"ns/eps" already holds 10.0.9.0/24`},
		{ErrConflict, `"ns/gamma" overlaps 10.0.3.0/24 held by "ns/beta"`},
		{ErrConflict, `"ns/zeta" overlaps 10.0.1.0/24 held by "ns/alpha"`},
	}
	_, errs := Rebuild(cfg, map[string][]netip.Prefix{})
	if len(errs) != 0 {
		t.Fatalf("empty Rebuild: %v", errs)
	}
	m := map[string][]netip.Prefix{}
	for _, r := range recs {
		m[r.owner] = r.cidrs
	}
	_, errs = Rebuild(cfg, m)
	if len(errs) != len(wantKinds) {
		t.Fatalf("got %d errors, want %d: %v", len(errs), len(wantKinds), errs)
	}
	for i, w := range wantKinds {
		if !errors.Is(errs[i], w.err) || !strings.Contains(errs[i].Error(), w.mention) {
			t.Errorf("error %d = %v, want %v mentioning %q", i, errs[i], w.err, w.mention)
		}
	}
}

func TestRebuildInvalidConfig(t *testing.T) {
	a, errs := Rebuild(Config{}, map[string][]netip.Prefix{"x": prefixes("10.0.0.0/24")})
	if a != nil || len(errs) != 1 || !errors.Is(errs[0], ErrInvalidConfig) {
		t.Fatalf("Rebuild(Config{}) = %v, %v", a, errs)
	}
}

// Run with -race to catch missing locking.
func TestConcurrentUse(t *testing.T) {
	a := mustNew(t, Config{ClusterCIDRs: prefixes("10.0.0.0/16", "fd00::/56")})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 200 {
				o := fmt.Sprintf("w%d/%d", w, i%50)
				switch i % 4 {
				case 0, 1:
					_, _ = a.Allocate(o)
				case 2:
					a.Release(o)
				case 3:
					_, _ = a.Get(o)
					_ = a.Usage()
				}
			}
		})
	}
	wg.Wait()
	checkInvariants(t, a, nil)
}

func equalAllocs(a, b map[string][]netip.Prefix) bool {
	return maps.EqualFunc(a, b, func(x, y []netip.Prefix) bool { return slices.Equal(x, y) })
}
