package ipam

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func TestNewCIDRSet(t *testing.T) {
	tests := []struct {
		name    string
		cluster netip.Prefix
		mask    int
		total   int
		wantErr error
	}{
		{"v4 /8 of /24", pfx("10.0.0.0/8"), 24, 1 << 16, nil},
		{"mask equal to cluster is one subnet", pfx("10.0.0.0/24"), 24, 1, nil},
		{"host bits are masked off", pfx("10.1.2.3/16"), 24, 256, nil},
		{"v4 /32 nodes", pfx("192.168.0.0/30"), 32, 4, nil},
		{"v6 /48 of /64", pfx("fd00::/48"), 64, 1 << 16, nil},
		{"v6 /128 nodes", pfx("fd00::/120"), 128, 256, nil},
		{"max subnets", pfx("10.0.0.0/8"), 28, MaxSubnets, nil},
		{"one bit too many", pfx("10.0.0.0/8"), 29, 0, ErrInvalidConfig},
		{"mask shorter than cluster", pfx("10.0.0.0/16"), 8, 0, ErrInvalidConfig},
		{"v4 mask past 32", pfx("10.0.0.0/16"), 33, 0, ErrInvalidConfig},
		{"v6 mask past 128", pfx("fd00::/120"), 129, 0, ErrInvalidConfig},
		{"zero prefix", netip.Prefix{}, 24, 0, ErrInvalidConfig},
		{"v4-mapped v6", pfx("::ffff:10.0.0.0/104"), 120, 0, ErrInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewCIDRSet(tt.cluster, tt.mask)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if s.Total() != tt.total || s.InUse() != 0 {
				t.Fatalf("Total/InUse = %d/%d, want %d/0", s.Total(), s.InUse(), tt.total)
			}
			if s.ClusterCIDR() != tt.cluster.Masked() || s.NodeMaskSize() != tt.mask {
				t.Fatalf("ClusterCIDR/NodeMaskSize = %s/%d", s.ClusterCIDR(), s.NodeMaskSize())
			}
		})
	}
}

func TestCIDRSetAllocateSequence(t *testing.T) {
	tests := []struct {
		cluster netip.Prefix
		mask    int
		want    []string
	}{
		{pfx("10.0.0.0/30"), 31, []string{"10.0.0.0/31", "10.0.0.2/31"}},
		{pfx("10.0.0.0/24"), 24, []string{"10.0.0.0/24"}},
		{pfx("10.255.255.252/30"), 32, []string{"10.255.255.252/32", "10.255.255.253/32", "10.255.255.254/32", "10.255.255.255/32"}},
		{pfx("fd00:1:2::/62"), 64, []string{"fd00:1:2::/64", "fd00:1:2:1::/64", "fd00:1:2:2::/64", "fd00:1:2:3::/64"}},
		// The subnet index straddles the two 64-bit halves of the address.
		{pfx("fd00::ffff:ffff:ffff:fffe:0:0/95"), 96, []string{"fd00::ffff:ffff:ffff:fffe:0:0/96", "fd00::ffff:ffff:ffff:ffff:0:0/96"}},
		{pfx("ff00::/7"), 8, []string{"fe00::/8", "ff00::/8"}},
		{pfx("::/127"), 128, []string{"::/128", "::1/128"}},
	}
	for _, tt := range tests {
		t.Run(tt.cluster.String(), func(t *testing.T) {
			s, err := NewCIDRSet(tt.cluster, tt.mask)
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range tt.want {
				got, err := s.Allocate()
				if err != nil || got != pfx(w) {
					t.Fatalf("Allocate #%d = %s, %v; want %s", i, got, err, w)
				}
			}
			if got, err := s.Allocate(); !errors.Is(err, ErrExhausted) {
				t.Fatalf("Allocate past the end = %s, %v; want ErrExhausted", got, err)
			}
			if s.InUse() != len(tt.want) {
				t.Fatalf("InUse = %d, want %d", s.InUse(), len(tt.want))
			}
		})
	}
}

// Totals that are not a multiple of 64 leave padding bits in the last
// word; they must never be handed out.
func TestCIDRSetExhaustsExactlyTotal(t *testing.T) {
	for _, mask := range []int{20, 25, 26, 27, 30} {
		s, err := NewCIDRSet(pfx("10.0.0.0/20"), mask)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[netip.Prefix]bool{}
		for {
			p, err := s.Allocate()
			if errors.Is(err, ErrExhausted) {
				break
			}
			if err != nil || seen[p] || !s.ClusterCIDR().Contains(p.Addr()) || p.Bits() != mask {
				t.Fatalf("mask /%d: bad allocation %s, %v (seen=%v)", mask, p, err, seen[p])
			}
			seen[p] = true
		}
		if len(seen) != s.Total() || s.InUse() != s.Total() {
			t.Fatalf("mask /%d: handed out %d, InUse %d, Total %d", mask, len(seen), s.InUse(), s.Total())
		}
	}
}

func TestCIDRSetOccupy(t *testing.T) {
	tests := []struct {
		name    string
		cluster string
		mask    int
		occupy  string
		wantErr error
		inUse   int
	}{
		{"exact", "10.0.0.0/16", 24, "10.0.5.0/24", nil, 1},
		{"host bits masked", "10.0.0.0/16", 24, "10.0.5.77/24", nil, 1},
		{"larger covers all its subnets", "10.0.0.0/16", 24, "10.0.4.0/22", nil, 4},
		{"whole cluster", "10.0.0.0/16", 24, "10.0.0.0/16", nil, 256},
		{"smaller marks containing subnet", "10.0.0.0/16", 24, "10.0.5.128/25", nil, 1},
		{"single address", "10.0.0.0/16", 24, "10.0.5.9/32", nil, 1},
		{"larger than cluster", "10.0.0.0/16", 24, "10.0.0.0/15", ErrOutOfRange, 0},
		{"outside", "10.0.0.0/16", 24, "10.1.0.0/24", ErrOutOfRange, 0},
		{"wrong family", "10.0.0.0/16", 24, "fd00::/64", ErrOutOfRange, 0},
		{"v4-mapped is v6", "10.0.0.0/16", 24, "::ffff:10.0.5.0/120", ErrOutOfRange, 0},
		{"v6 larger", "fd00::/48", 64, "fd00:0:0:10::/60", nil, 16},
		{"v6 smaller", "fd00::/48", 64, "fd00:0:0:10::/80", nil, 1},
		{"v6 outside", "fd00::/48", 64, "fd01::/64", ErrOutOfRange, 0},
		{"v6 wrong family", "fd00::/48", 64, "10.0.0.0/24", ErrOutOfRange, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewCIDRSet(pfx(tt.cluster), tt.mask)
			if err != nil {
				t.Fatal(err)
			}
			err = s.Occupy(pfx(tt.occupy))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Occupy(%s) = %v, want %v", tt.occupy, err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), pfx(tt.occupy).Masked().String()) {
				t.Errorf("error %q does not name the CIDR", err)
			}
			if s.InUse() != tt.inUse {
				t.Fatalf("InUse = %d, want %d", s.InUse(), tt.inUse)
			}
			// Occupying twice must not double count.
			_ = s.Occupy(pfx(tt.occupy))
			if s.InUse() != tt.inUse {
				t.Fatalf("InUse after second Occupy = %d, want %d", s.InUse(), tt.inUse)
			}
			if err == nil {
				if err := s.Release(pfx(tt.occupy)); err != nil || s.InUse() != 0 {
					t.Fatalf("Release = %v, InUse = %d", err, s.InUse())
				}
			}
		})
	}
}

func TestCIDRSetOccupiedNeverAllocated(t *testing.T) {
	s, _ := NewCIDRSet(pfx("10.0.0.0/24"), 28) // 16 subnets
	for _, p := range []string{"10.0.0.0/28", "10.0.0.64/26", "10.0.0.200/30"} {
		if err := s.Occupy(pfx(p)); err != nil {
			t.Fatal(err)
		}
	}
	if s.InUse() != 6 {
		t.Fatalf("InUse = %d, want 6", s.InUse())
	}
	for {
		p, err := s.Allocate()
		if err != nil {
			break
		}
		for _, o := range []string{"10.0.0.0/28", "10.0.0.64/26", "10.0.0.192/28"} {
			if pfx(o).Overlaps(p) {
				t.Fatalf("allocated %s overlapping occupied %s", p, o)
			}
		}
	}
	if s.InUse() != 16 {
		t.Fatalf("InUse = %d, want 16", s.InUse())
	}
}

func TestCIDRSetReleaseAndRoundRobin(t *testing.T) {
	s, _ := NewCIDRSet(pfx("10.0.0.0/29"), 31) // 4 subnets
	a, _ := s.Allocate()
	b, _ := s.Allocate()
	if err := s.Release(a); err != nil {
		t.Fatal(err)
	}
	// Round robin: the released subnet comes back only after the rest.
	if c, _ := s.Allocate(); c != pfx("10.0.0.4/31") {
		t.Fatalf("got %s, want 10.0.0.4/31", c)
	}
	if d, _ := s.Allocate(); d != pfx("10.0.0.6/31") {
		t.Fatalf("got %s, want 10.0.0.6/31", d)
	}
	if e, _ := s.Allocate(); e != a {
		t.Fatalf("got %s, want released %s", e, a)
	}
	if _, err := s.Allocate(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("want ErrExhausted, got %v", err)
	}
	if err := s.Release(pfx("10.0.1.0/31")); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("Release outside = %v", err)
	}
	if err := s.Release(netip.Prefix{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Release zero = %v", err)
	}
	_ = s.Release(b)
	_ = s.Release(b) // releasing a free subnet must not undercount
	if s.InUse() != 3 {
		t.Fatalf("InUse = %d, want 3", s.InUse())
	}
}

// The round-robin scan starts mid-bitmap; the padding past the last
// subnet must look used or the scan hands out an address past the range.
func TestCIDRSetScanSkipsPadding(t *testing.T) {
	s, _ := NewCIDRSet(pfx("10.0.0.0/27"), 32) // 32 subnets in a 64-bit word
	if err := s.Occupy(pfx("10.0.0.31/32")); err != nil {
		t.Fatal(err)
	}
	for range 31 {
		if _, err := s.Allocate(); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Release(pfx("10.0.0.5/32"))
	if p, err := s.Allocate(); err != nil || p != pfx("10.0.0.5/32") {
		t.Fatalf("Allocate = %s, %v; want 10.0.0.5/32", p, err)
	}
}

// Subnet indexes that straddle the two 64-bit halves of an IPv6 address
// must map back and forth exactly.
func TestCIDRSetIndexRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		cluster string
		mask    int
	}{
		{"fd00::/60", 68}, {"fd00::/56", 72}, {"fd00:0:0:ff00::/56", 64}, {"fd00::/112", 128},
		{"10.0.0.0/8", 20}, {"0.0.0.0/0", 12}, {"::/0", 16},
	} {
		s, err := NewCIDRSet(pfx(tt.cluster), tt.mask)
		if err != nil {
			t.Fatal(err)
		}
		for i := range s.Total() {
			p := s.prefixAt(i)
			if !s.ClusterCIDR().Contains(p.Addr()) || p != p.Masked() {
				t.Fatalf("%s: prefixAt(%d) = %s", tt.cluster, i, p)
			}
			if j := s.index(p.Addr()); j != i {
				t.Fatalf("%s: index(prefixAt(%d) = %s) = %d", tt.cluster, i, p, j)
			}
		}
	}
}
