package ipam

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
)

// MaxSubnetBits bounds how many bits the node mask may add to the cluster
// prefix, so a family holds at most MaxSubnets node subnets. The bound
// keeps the bitmap at most 128 KiB per family and a full scan cheap.
// Kubernetes allows 16 bits; 20 leaves room for e.g. /8 with /28 nodes
// while still refusing configurations such as an IPv6 /48 with /112 nodes
// whose bitmap would not fit in memory.
const (
	MaxSubnetBits = 20
	MaxSubnets    = 1 << MaxSubnetBits
)

// CIDRSet tracks the node subnets of one cluster CIDR in one family.
//
// Its zero value is not usable; build it with NewCIDRSet. It is not safe
// for concurrent use; Allocator serialises access to its sets.
type CIDRSet struct {
	cluster  netip.Prefix
	is4      bool
	nodeBits int
	shift    uint // host bits in one node subnet
	base     u128
	total    int
	inUse    int
	next     int // round-robin start, so a just-released subnet is reused last
	words    []uint64
}

// NewCIDRSet returns an empty set that cuts cluster into subnets of
// nodeMaskSize bits. A node mask equal to the cluster prefix length is
// valid and yields one subnet.
func NewCIDRSet(cluster netip.Prefix, nodeMaskSize int) (*CIDRSet, error) {
	if !cluster.IsValid() {
		return nil, fmt.Errorf("%w: cluster CIDR %s is not a valid prefix", ErrInvalidConfig, cluster)
	}
	if cluster.Addr().Is4In6() {
		// An IPv4-mapped IPv6 range is ambiguous about the family nodes
		// and pods will actually use; make the user say which.
		return nil, fmt.Errorf("%w: cluster CIDR %s is an IPv4-mapped IPv6 prefix; use the plain IPv4 or IPv6 form", ErrInvalidConfig, cluster)
	}
	cluster = cluster.Masked()
	width := cluster.Addr().BitLen()
	if nodeMaskSize < cluster.Bits() || nodeMaskSize > width {
		return nil, fmt.Errorf("%w: node mask size /%d for cluster CIDR %s must be between /%d and /%d",
			ErrInvalidConfig, nodeMaskSize, cluster, cluster.Bits(), width)
	}
	diff := nodeMaskSize - cluster.Bits()
	if diff > MaxSubnetBits {
		return nil, fmt.Errorf("%w: node mask size /%d for cluster CIDR %s gives 2^%d node subnets, more than the supported 2^%d; use a node mask of at most /%d",
			ErrInvalidConfig, nodeMaskSize, cluster, diff, MaxSubnetBits, cluster.Bits()+MaxSubnetBits)
	}
	total := 1 << diff
	words := make([]uint64, (total+63)/64)
	if r := total % 64; r != 0 {
		// Padding bits past the last subnet stay set forever, so the
		// free-bit scan never has to special-case the tail.
		words[len(words)-1] = ^uint64(0) << r
	}
	return &CIDRSet{
		cluster:  cluster,
		is4:      cluster.Addr().Is4(),
		nodeBits: nodeMaskSize,
		shift:    uint(width - nodeMaskSize),
		base:     u128From(cluster.Addr()),
		total:    total,
		words:    words,
	}, nil
}

// ClusterCIDR returns the (masked) cluster CIDR the set divides.
func (s *CIDRSet) ClusterCIDR() netip.Prefix { return s.cluster }

// NodeMaskSize returns the prefix length of each node subnet.
func (s *CIDRSet) NodeMaskSize() int { return s.nodeBits }

// InUse returns how many node subnets are marked used.
func (s *CIDRSet) InUse() int { return s.inUse }

// Total returns how many node subnets the cluster CIDR holds.
func (s *CIDRSet) Total() int { return s.total }

// Allocate marks the next free node subnet used and returns it. The search
// starts after the last allocation and wraps, so released subnets are
// handed out again as late as possible.
func (s *CIDRSet) Allocate() (netip.Prefix, error) {
	i := -1
	if s.inUse < s.total {
		i = s.findFree(s.next)
	}
	if i < 0 {
		return netip.Prefix{}, fmt.Errorf("%w: all %d /%d subnets of %s are in use",
			ErrExhausted, s.total, s.nodeBits, s.cluster)
	}
	s.words[i>>6] |= 1 << uint(i&63)
	s.inUse++
	s.next = i + 1
	if s.next == s.total {
		s.next = 0
	}
	return s.prefixAt(i), nil
}

// Occupy marks every node subnet that p touches as used: all subnets it
// covers if it is shorter than the node mask, or the one containing it if
// it is longer. Occupying an already used subnet is not an error and is
// not counted twice.
func (s *CIDRSet) Occupy(p netip.Prefix) error {
	b, n, err := s.span(p)
	if err != nil {
		return err
	}
	s.inUse += s.setRange(b, b+n)
	return nil
}

// Release marks every node subnet that p touches as free. Releasing a free
// subnet is a no-op.
func (s *CIDRSet) Release(p netip.Prefix) error {
	b, n, err := s.span(p)
	if err != nil {
		return err
	}
	s.inUse -= s.clearRange(b, b+n)
	return nil
}

// span returns the first subnet index and the number of subnets p touches.
func (s *CIDRSet) span(p netip.Prefix) (begin, count int, err error) {
	if !p.IsValid() {
		return 0, 0, fmt.Errorf("%w: %s is not a valid prefix", ErrInvalidArgument, p)
	}
	p = p.Masked()
	if p.Addr().Is4() != s.is4 {
		return 0, 0, fmt.Errorf("%w: %s is %s but cluster CIDR %s is %s",
			ErrOutOfRange, p, familyName(p.Addr().Is4()), s.cluster, familyName(s.is4))
	}
	if p.Bits() < s.cluster.Bits() || !s.cluster.Contains(p.Addr()) {
		return 0, 0, fmt.Errorf("%w: %s is not inside cluster CIDR %s", ErrOutOfRange, p, s.cluster)
	}
	begin = s.index(p.Addr())
	if p.Bits() >= s.nodeBits {
		return begin, 1, nil
	}
	return begin, 1 << (s.nodeBits - p.Bits()), nil
}

// index returns the node subnet containing a, which must be inside the
// cluster CIDR.
func (s *CIDRSet) index(a netip.Addr) int {
	return int(u128From(a).shr(s.shift).lo & uint64(s.total-1))
}

func (s *CIDRSet) prefixAt(i int) netip.Prefix {
	u := s.base.or(u128{lo: uint64(i)}.shl(s.shift))
	return netip.PrefixFrom(u.addr(s.is4), s.nodeBits)
}

// findFree returns the first clear bit at or after from, wrapping around,
// or -1.
func (s *CIDRSet) findFree(from int) int {
	n := len(s.words)
	w := from >> 6
	off := uint(from & 63)
	if x := ^s.words[w] &^ (1<<off - 1); x != 0 {
		return w<<6 + bits.TrailingZeros64(x)
	}
	for k := 1; k <= n; k++ {
		j := w + k
		if j >= n {
			j -= n
		}
		x := ^s.words[j]
		if j == w {
			x &= 1<<off - 1
		}
		if x != 0 {
			return j<<6 + bits.TrailingZeros64(x)
		}
	}
	return -1
}

// wordMask returns the bits of word w that fall in [b, e).
func wordMask(w, b, e int) uint64 {
	lo := max(b-w<<6, 0)
	hi := min(e-w<<6, 64)
	m := ^uint64(0) << uint(lo)
	if hi < 64 {
		m &= 1<<uint(hi) - 1
	}
	return m
}

func (s *CIDRSet) setRange(b, e int) (added int) {
	for w := b >> 6; w <= (e-1)>>6; w++ {
		m := wordMask(w, b, e)
		added += bits.OnesCount64(m &^ s.words[w])
		s.words[w] |= m
	}
	return added
}

func (s *CIDRSet) clearRange(b, e int) (removed int) {
	for w := b >> 6; w <= (e-1)>>6; w++ {
		m := wordMask(w, b, e)
		removed += bits.OnesCount64(m & s.words[w])
		s.words[w] &^= m
	}
	return removed
}

// firstUsed returns the first used subnet in [b, e), or -1.
func (s *CIDRSet) firstUsed(b, e int) int {
	for w := b >> 6; w <= (e-1)>>6; w++ {
		if x := s.words[w] & wordMask(w, b, e); x != 0 {
			return w<<6 + bits.TrailingZeros64(x)
		}
	}
	return -1
}

func familyName(is4 bool) string {
	if is4 {
		return "IPv4"
	}
	return "IPv6"
}

// u128 is an address as a 128-bit integer (IPv4 in the low 32 bits), so
// one code path handles both families without math/big.
type u128 struct{ hi, lo uint64 }

func u128From(a netip.Addr) u128 {
	if a.Is4() {
		b := a.As4()
		return u128{lo: uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return u128{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:])}
}

func (u u128) addr(is4 bool) netip.Addr {
	if is4 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(u.lo))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], u.hi)
	binary.BigEndian.PutUint64(b[8:], u.lo)
	return netip.AddrFrom16(b)
}

// Shifts of 64 or more rely on Go defining oversized shifts as zero.
func (u u128) shr(n uint) u128 {
	if n >= 64 {
		return u128{lo: u.hi >> (n - 64)}
	}
	return u128{hi: u.hi >> n, lo: u.lo>>n | u.hi<<(64-n)}
}

func (u u128) shl(n uint) u128 {
	if n >= 64 {
		return u128{hi: u.lo << (n - 64)}
	}
	return u128{hi: u.hi<<n | u.lo>>(64-n), lo: u.lo << n}
}

func (u u128) or(v u128) u128 { return u128{hi: u.hi | v.hi, lo: u.lo | v.lo} }
