package nodeaddr

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// FuzzPick draws a small network and a set of held addresses, then checks
// what must always hold: the answer is free, in the subnet and outside the
// dynamic range, nothing lower is free, every order of the records gives
// the same answer, and exhaustion is reported only when no address is free.
func FuzzPick(f *testing.F) {
	f.Add(uint8(24), uint8(25), uint8(1), uint64(1), []byte{2, 3, 4})
	f.Add(uint8(28), uint8(0), uint8(1), uint64(7), []byte{})
	f.Add(uint8(30), uint8(0), uint8(1), uint64(3), []byte{2})
	f.Add(uint8(124), uint8(126), uint8(3), uint64(9), []byte{1, 5, 200})
	f.Fuzz(func(t *testing.T, bits, dynBits, gw uint8, seed uint64, heldBytes []byte) {
		v6 := bits > 32
		base := netip.MustParseAddr("10.20.30.0")
		size := 32
		if v6 {
			base, size = netip.MustParseAddr("fc00:7::"), 128
		}
		// Subnets of 2 to 256 addresses keep the exhaustive check cheap.
		hostBits := 1 + int(bits)%8
		subnet := netip.PrefixFrom(base, size-hostBits)
		nth := func(i uint64) netip.Addr {
			b := subnet.Addr().AsSlice()
			low := b[len(b)-4:]
			binary.BigEndian.PutUint32(low, binary.BigEndian.Uint32(low)+uint32(i%(1<<hostBits)))
			a, _ := netip.AddrFromSlice(b)
			return a
		}
		fam := Family{Subnet: subnet, Gateway: nth(uint64(gw))}
		if dynBits%3 != 0 && hostBits > 1 {
			d := 1 + int(dynBits)%(hostBits-1)
			fam.Dynamic, _ = nth(uint64(dynBits) << d).Prefix(size - d)
		}
		var held []netip.Addr
		for _, b := range heldBytes {
			held = append(held, nth(uint64(b)))
		}
		free := func(a netip.Addr) bool {
			if !subnet.Contains(a) || a == subnet.Addr() || a == fam.Gateway || slices.Contains(held, a) {
				return false
			}
			if !v6 && a == lastAddr(subnet) {
				return false
			}
			return !fam.Dynamic.IsValid() || !fam.Dynamic.Contains(a)
		}
		got, err := Pick(fam, held)
		var lowest netip.Addr
		for i := range uint64(1) << hostBits {
			if a := nth(i); free(a) {
				lowest = a
				break
			}
		}
		switch {
		case errors.Is(err, ErrExhausted):
			if lowest.IsValid() {
				t.Fatalf("exhausted, but %s is free (%+v, held %v)", lowest, fam, held)
			}
			return
		case err != nil:
			t.Fatal(err)
		case got != lowest:
			t.Fatalf("got %s, lowest free is %s (%+v, held %v)", got, lowest, fam, held)
		}
		// Rebuilding from the same records in another order, or with
		// repeats, gives the same answer.
		r := rand.New(rand.NewPCG(seed, seed))
		shuffled := append(slices.Clone(held), held...)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if again, err := Pick(fam, shuffled); err != nil || again != got {
			t.Fatalf("records in another order gave %s, %v; first %s", again, err, got)
		}
		// Handing out in turn never repeats an address.
		taken := append(slices.Clone(held), got)
		for range 4 {
			next, err := Pick(fam, taken)
			if err != nil {
				break
			}
			if slices.Contains(taken, next) {
				t.Fatalf("%s handed out twice", next)
			}
			taken = append(taken, next)
		}
	})
}
