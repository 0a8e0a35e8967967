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
		model := map[string][]netip.Prefix{}
		for len(r.b) > 0 {
			op, owner := r.next(), fmt.Sprint("ns/m", r.next()%8)
			switch op % 6 {
			case 0, 1: // allocate
				before := model[owner]
				got, err := a.Allocate(owner)
				if err != nil {
					if !errors.Is(err, ErrExhausted) {
						t.Fatalf("Allocate(%q): %v", owner, err)
					}
					break
				}
				if len(got) != len(cfg.ClusterCIDRs) {
					t.Fatalf("Allocate(%q) = %v: not one per family", owner, got)
				}
				for _, p := range got {
					if !slices.Contains(before, p) && p.Bits() != nodeMask(cfg, p) {
						t.Fatalf("Allocate(%q) = %v: %s is not of the node mask size", owner, got, p)
					}
				}
				for _, p := range before {
					if !slices.Contains(got, p) {
						t.Fatalf("Allocate(%q) = %v dropped held %s", owner, got, p)
					}
				}
				model[owner] = got
			case 2: // release, then allocating again must work
				held := model[owner]
				if rel := a.Release(owner); rel != (held != nil) {
					t.Fatalf("Release(%q) = %v, model holds %v", owner, rel, held)
				}
				delete(model, owner)
				if len(held) == len(cfg.ClusterCIDRs) && r.next()%2 == 0 {
					checkInvariants(t, a, model)
					got, err := a.Allocate(owner)
					if err != nil {
						t.Fatalf("Allocate(%q) right after releasing %v: %v", owner, held, err)
					}
					model[owner] = got
				}
			case 3, 4: // occupy one or two CIDRs
				cidrs := []netip.Prefix{fuzzPrefix(r, cfg)}
				if r.next()%3 == 0 {
					cidrs = append(cidrs, fuzzPrefix(r, cfg))
				}
				err := a.Occupy(owner, cidrs)
				if err != nil {
					if !errors.Is(err, ErrOutOfRange) && !errors.Is(err, ErrConflict) && !errors.Is(err, ErrInvalidArgument) {
						t.Fatalf("Occupy(%q, %v): untyped error %v", owner, cidrs, err)
					}
					break
				}
				got, _ := a.Get(owner)
				for _, c := range cidrs {
					if !slices.Contains(got, c.Masked()) {
						t.Fatalf("Occupy(%q, %v) succeeded but owner holds %v", owner, cidrs, got)
					}
				}
				model[owner] = got
			case 5: // restart: rebuild from the records
				records := a.Allocations()
				b, errs := Rebuild(cfg, records)
				if len(errs) != 0 {
					t.Fatalf("Rebuild of valid records: %v", errs)
				}
				if !slices.Equal(a.Usage(), b.Usage()) {
					t.Fatalf("Usage after Rebuild %+v, before %+v", b.Usage(), a.Usage())
				}
				a = b
			}
			checkInvariants(t, a, model)
		}
	})
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
