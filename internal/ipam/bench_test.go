package ipam

import (
	"fmt"
	"net/netip"
	"testing"
)

// One op allocates all 65,536 /24s of 10.0.0.0/8 to distinct owners,
// checks the range is then exhausted, and releases them all.
func BenchmarkAllocateWholeSlash8(b *testing.B) {
	a, err := New(Config{ClusterCIDRs: prefixes("10.0.0.0/8")})
	if err != nil {
		b.Fatal(err)
	}
	owners := make([]string, 1<<16)
	for i := range owners {
		owners[i] = fmt.Sprintf("ns/machine-%05d", i)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, o := range owners {
			if _, err := a.Allocate(o); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := a.Allocate("one-too-many"); err == nil {
			b.Fatal("not exhausted")
		}
		for _, o := range owners {
			a.Release(o)
		}
	}
}

// The bitmap alone, to separate its cost from the owner bookkeeping.
func BenchmarkCIDRSetWholeSlash8(b *testing.B) {
	s, err := NewCIDRSet(pfx("10.0.0.0/8"), 24)
	if err != nil {
		b.Fatal(err)
	}
	got := make([]netip.Prefix, 0, 1<<16)
	b.ReportAllocs()
	for b.Loop() {
		got = got[:0]
		for range 1 << 16 {
			p, err := s.Allocate()
			if err != nil {
				b.Fatal(err)
			}
			got = append(got, p)
		}
		for _, p := range got {
			_ = s.Release(p)
		}
	}
}

// One op rebuilds a dual-stack allocator from 10,000 recorded allocations.
func BenchmarkRebuild10k(b *testing.B) {
	cfg := Config{ClusterCIDRs: prefixes("10.0.0.0/8", "fd00::/48")}
	a, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	for i := range 10000 {
		if _, err := a.Allocate(fmt.Sprintf("ns/machine-%05d", i)); err != nil {
			b.Fatal(err)
		}
	}
	records := a.Allocations()
	b.ReportAllocs()
	for b.Loop() {
		if _, errs := Rebuild(cfg, records); len(errs) != 0 {
			b.Fatal(errs)
		}
	}
}
