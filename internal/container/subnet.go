package container

import (
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
)

// MaxSubnetAttempts bounds how many derived subnets EnsureNetwork tries when
// the engine reports a pool overlap.
const MaxSubnetAttempts = 5

// Subnets derives a network's subnets from its name and the attempt number
// (0 for the first try), as kind does: a /20 inside 172.16.0.0/12 for IPv4
// and a /64 inside the ULA range fc00::/8 for IPv6. The same name and
// attempt always give the same subnets, and the attempts of one name give
// different ones.
//
// The IPv4 /20 of attempt 0 is picked by sha256(name, 0); each further
// attempt moves v4Stride /20s on. 172.16.0.0/12 holds only 256 /20s, so a
// hash per attempt would repeat one now and then; a stride coprime with 256
// never repeats within 256 attempts, and one this long leaves the /16 (16
// /20s) that made the previous attempt overlap. The IPv6 /64 is picked by
// sha256(name, attempt), out of 2^56.
func Subnets(name string, attempt int) (v4, v6 netip.Prefix) {
	first := subnetHash(name, 0)
	sum := first
	if attempt != 0 {
		sum = subnetHash(name, attempt)
	}

	// 172.16.0.0/12 holds 256 /20s: 172.(16 + n>>4).(n&0xf << 4).0/20.
	n := first[0] + byte(attempt*v4Stride)
	v4 = netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 16 + n>>4, (n & 0x0f) << 4, 0}), 20)

	var b [16]byte
	b[0] = 0xfc
	copy(b[1:8], sum[1:8])
	v6 = netip.PrefixFrom(netip.AddrFrom16(b), 64)
	return v4, v6
}

// v4Stride is how many /20s each further attempt moves on (see Subnets).
const v4Stride = 97

func subnetHash(name string, attempt int) []byte {
	h := sha256.New()
	h.Write([]byte(name))
	var a [4]byte
	binary.BigEndian.PutUint32(a[:], uint32(attempt))
	h.Write(a[:])
	return h.Sum(nil)
}

// Gateway returns the first address of p, which the engines use as the
// bridge's gateway.
func Gateway(p netip.Prefix) netip.Addr { return p.Masked().Addr().Next() }

// DynamicRange is the part of subnet p that EnsureNetwork leaves to the
// engine's own address allocation: the upper half of an IPv4 subnet, and
// the second quarter of an IPv6 one (Docker 20.10 cannot use an IPv6 range
// that ends at the subnet's last address). The rest, from the lowest
// address up, is for the static addresses CAPCT picks, so a container that
// starts before CAPCT's after an engine restart cannot take one of them.
// Subnets too small to split get no range (invalid).
func DynamicRange(p netip.Prefix) netip.Prefix {
	p = p.Masked()
	size := p.Addr().BitLen()
	if !p.IsValid() || size-p.Bits() < 3 {
		return netip.Prefix{}
	}
	b := p.Addr().AsSlice()
	// Set the first host bit: the upper half.
	i := p.Bits()
	b[i/8] |= 0x80 >> (i % 8)
	a, _ := netip.AddrFromSlice(b)
	if p.Addr().Is4() {
		return netip.PrefixFrom(a, p.Bits()+1)
	}
	return netip.PrefixFrom(a, p.Bits()+2)
}
