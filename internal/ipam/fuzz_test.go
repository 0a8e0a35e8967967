package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
)

// checkInvariants verifies what must hold after any sequence of
// operations; if model is non-nil the allocator must hold exactly it.
func checkInvariants(t testing.TB, a *Allocator, model map[string][]netip.Prefix) {
	t.Helper()
	allocs := a.Allocations()
	if model != nil && !equalAllocs(allocs, model) {
		t.Fatalf("allocations %v, model %v", allocs, model)
	}
	usage := a.Usage()
	covered := make([]int, len(usage))
	type held struct {
		owner string
		p     netip.Prefix
	}
	var all []held
	for o, cidrs := range allocs {
		if len(cidrs) == 0 || len(cidrs) > len(usage) {
			t.Fatalf("%q holds %v", o, cidrs)
		}
		fam := -1
		for _, c := range cidrs {
			i := slices.IndexFunc(usage, func(u FamilyUsage) bool { return u.ClusterCIDR.Addr().Is4() == c.Addr().Is4() })
			if i < 0 || i <= fam {
				t.Fatalf("%q holds %v: family missing, repeated or out of order", o, cidrs)
			}
			fam = i
			u := usage[i]
			if c != c.Masked() || c.Bits() < u.ClusterCIDR.Bits() || !u.ClusterCIDR.Contains(c.Addr()) {
				t.Fatalf("%q holds %s outside cluster CIDR %s", o, c, u.ClusterCIDR)
			}
			if c.Bits() < u.NodeMaskSize {
				covered[i] += 1 << (u.NodeMaskSize - c.Bits())
			} else {
				covered[i]++
			}
			all = append(all, held{o, c})
		}
	}
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			x, y := all[i], all[j]
			if x.owner == y.owner {
				continue
			}
			// Prefixes smaller than the node mask reserve their whole
			// node subnet, so compare at node-subnet granularity.
			if nodeSubnet(x.p, usage).Overlaps(nodeSubnet(y.p, usage)) {
				t.Fatalf("%s of %q overlaps %s of %q", x.p, x.owner, y.p, y.owner)
			}
		}
	}
	for i, u := range usage {
		if u.InUse != covered[i] || u.Total != 1<<(u.NodeMaskSize-u.ClusterCIDR.Bits()) || u.InUse > u.Total {
			t.Fatalf("usage %+v, but records cover %d subnets", u, covered[i])
		}
	}
}

func nodeSubnet(p netip.Prefix, usage []FamilyUsage) netip.Prefix {
	for _, u := range usage {
		if u.ClusterCIDR.Addr().Is4() == p.Addr().Is4() && p.Bits() > u.NodeMaskSize {
			q, _ := p.Addr().Prefix(u.NodeMaskSize)
			return q
		}
	}
	return p
}

var fuzzConfigs = []Config{
	{ClusterCIDRs: prefixes("10.0.0.0/28"), NodeMaskSizeIPv4: 30},
	{ClusterCIDRs: prefixes("10.0.0.0/29", "fd00::/120"), NodeMaskSizeIPv4: 31, NodeMaskSizeIPv6: 122},
	{ClusterCIDRs: prefixes("fd00::/64"), NodeMaskSizeIPv6: 66},
	{ClusterCIDRs: prefixes("fd00::ff00/124", "192.168.0.0/30"), NodeMaskSizeIPv4: 32, NodeMaskSizeIPv6: 126},
	{ClusterCIDRs: prefixes("10.0.0.0/26"), NodeMaskSizeIPv4: 32}, // 64 subnets: one full word
	{ClusterCIDRs: prefixes("10.0.0.0/25"), NodeMaskSizeIPv4: 32}, // 128 subnets: two words
}

// byteReader hands out fuzz bytes, then zeros, so every input decodes.
type byteReader struct {
	b []byte
}

func (r *byteReader) next() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// fuzzPrefix builds a CIDR near the configured ranges so that in-range,
// out-of-range, odd-sized and malformed prefixes are all likely.
func fuzzPrefix(r *byteReader, cfg Config) netip.Prefix {
	k := r.next()
	switch k % 8 {
	case 0:
		return netip.Prefix{}
	case 1:
		return netip.PrefixFrom(netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: 10, 15: r.next()}), 96+int(r.next()%33))
	}
	c := cfg.ClusterCIDRs[int(k>>3)%len(cfg.ClusterCIDRs)]
	b := c.Addr().AsSlice()
	b[len(b)-1] ^= r.next()
	if x := r.next(); x&0x80 != 0 {
		b[len(b)-2] ^= x // often out of range
	}
	addr, _ := netip.AddrFromSlice(b)
	width := addr.BitLen()
	bits := c.Bits() - 2 + int(r.next())%(width-c.Bits()+3)
	return netip.PrefixFrom(addr, min(max(bits, 0), width))
}

func FuzzAllocator(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{1, 0, 0, 0, 1, 0, 2, 0, 3, 1, 1, 0, 0, 4, 0, 0})
	f.Add([]byte{0, 0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 1, 2, 0, 2})
	f.Add([]byte{1, 2, 3, 10, 0, 5, 0, 2, 3, 4, 18, 7, 1, 1, 0, 4, 0})
	f.Add([]byte{3, 2, 0, 2, 1, 9, 0, 2, 2, 0, 3, 1, 2, 3, 0, 9, 1, 1, 4, 0, 0, 2, 0})
	f.Add([]byte{2, 2, 4, 8, 0, 3, 0, 2, 5, 16, 200, 130, 1, 0, 5, 0, 4, 1})
	f.Add([]byte{4, 0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7, 1, 3, 0, 3, 4, 0})
	f.Add([]byte{5, 2, 1, 2, 9, 7, 2, 2, 26, 1, 0, 0, 1, 0, 1, 1, 4, 0, 5, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 600 {
			data = data[:600]
		}
		r := &byteReader{b: data}
		cfg := fuzzConfigs[int(r.next())%len(fuzzConfigs)]
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		run := &fuzzRun{t: t, r: r, cfg: cfg, a: a, model: map[string][]netip.Prefix{}}
		for len(r.b) > 0 {
			op, owner := r.next(), fmt.Sprint("ns/m", r.next()%8)
			switch op % 6 {
			case 0, 1:
				run.allocate(owner)
			case 2:
				run.release(owner)
			case 3, 4:
				run.occupy(owner)
			case 5:
				run.restart()
			}
			checkInvariants(t, run.a, run.model)
		}
	})
}

// fuzzRun is one FuzzAllocator input's run: the allocator under test, the
// model of what it must hold, and the fuzz bytes the operations read.
type fuzzRun struct {
	t     *testing.T
	r     *byteReader
	cfg   Config
	a     *Allocator
	model map[string][]netip.Prefix
}

// allocate checks that an allocation keeps what owner held and adds one
// node subnet of each family it lacked, or fails only on exhaustion.
func (f *fuzzRun) allocate(owner string) {
	t := f.t
	before := f.model[owner]
	got, err := f.a.Allocate(owner)
	if err != nil {
		if !errors.Is(err, ErrExhausted) {
			t.Fatalf("Allocate(%q): %v", owner, err)
		}
		return
	}
	if len(got) != len(f.cfg.ClusterCIDRs) {
		t.Fatalf("Allocate(%q) = %v: not one per family", owner, got)
	}
	for _, p := range got {
		if !slices.Contains(before, p) && p.Bits() != nodeMask(f.cfg, p) {
			t.Fatalf("Allocate(%q) = %v: %s is not of the node mask size", owner, got, p)
		}
	}
	for _, p := range before {
		if !slices.Contains(got, p) {
			t.Fatalf("Allocate(%q) = %v dropped held %s", owner, got, p)
		}
	}
	f.model[owner] = got
}

// release checks that a release frees what owner held, and sometimes that
// allocating again right after works.
func (f *fuzzRun) release(owner string) {
	t := f.t
	held := f.model[owner]
	if rel := f.a.Release(owner); rel != (held != nil) {
		t.Fatalf("Release(%q) = %v, model holds %v", owner, rel, held)
	}
	delete(f.model, owner)
	if len(held) == len(f.cfg.ClusterCIDRs) && f.r.next()%2 == 0 {
		checkInvariants(t, f.a, f.model)
		got, err := f.a.Allocate(owner)
		if err != nil {
			t.Fatalf("Allocate(%q) right after releasing %v: %v", owner, held, err)
		}
		f.model[owner] = got
	}
}

// occupy has owner occupy one or two fuzzed CIDRs: it must hold them
// after, or get a typed error.
func (f *fuzzRun) occupy(owner string) {
	t := f.t
	cidrs := []netip.Prefix{fuzzPrefix(f.r, f.cfg)}
	if f.r.next()%3 == 0 {
		cidrs = append(cidrs, fuzzPrefix(f.r, f.cfg))
	}
	if err := f.a.Occupy(owner, cidrs); err != nil {
		if !errors.Is(err, ErrOutOfRange) && !errors.Is(err, ErrConflict) && !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("Occupy(%q, %v): untyped error %v", owner, cidrs, err)
		}
		return
	}
	got, _ := f.a.Get(owner)
	for _, c := range cidrs {
		if !slices.Contains(got, c.Masked()) {
			t.Fatalf("Occupy(%q, %v) succeeded but owner holds %v", owner, cidrs, got)
		}
	}
	f.model[owner] = got
}

// restart rebuilds the allocator from its records, as the manager does on
// a restart: the usage must come out the same.
func (f *fuzzRun) restart() {
	t := f.t
	b, errs := Rebuild(f.cfg, f.a.Allocations())
	if len(errs) != 0 {
		t.Fatalf("Rebuild of valid records: %v", errs)
	}
	if !slices.Equal(f.a.Usage(), b.Usage()) {
		t.Fatalf("Usage after Rebuild %+v, before %+v", b.Usage(), f.a.Usage())
	}
	f.a = b
}

func nodeMask(cfg Config, p netip.Prefix) int {
	if p.Addr().Is4() {
		return cmpOr(cfg.NodeMaskSizeIPv4, DefaultNodeMaskSizeIPv4)
	}
	return cmpOr(cfg.NodeMaskSizeIPv6, DefaultNodeMaskSizeIPv6)
}

func cmpOr(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}
