package nodeaddr

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// ErrExhausted means a family has no free address left. Only a container
// going away, or a bigger subnet, helps.
var ErrExhausted = errors.New("no free address")

// ErrInvalid means a family cannot be allocated from: no or an invalid
// subnet, or a gateway or dynamic range of another family.
var ErrInvalid = errors.New("invalid address family")

// ExhaustedError says which subnet ran out. errors.Is(err, ErrExhausted)
// holds for it.
type ExhaustedError struct {
	// Subnet that has no free address.
	Subnet netip.Prefix
	// Held is how many addresses of the subnet are held.
	Held int
}

func (e *ExhaustedError) Error() string {
	return fmt.Sprintf("no free address in %s (%d held, the rest are the gateway, reserved or the engine's dynamic range)", e.Subnet, e.Held)
}

// Is makes errors.Is(err, ErrExhausted) true.
func (e *ExhaustedError) Is(target error) bool { return target == ErrExhausted }

// Family is one IP family of a network.
type Family struct {
	// Subnet of the network in this family.
	Subnet netip.Prefix
	// Gateway is the bridge's address; invalid means none.
	Gateway netip.Addr
	// Dynamic is the range the engine hands out by itself; invalid means
	// none. Pick never returns an address in it.
	Dynamic netip.Prefix
}

// span is an inclusive range of excluded addresses.
type span struct{ from, to netip.Addr }

// Pick returns the lowest free address of f: in the subnet, not its first
// address, not the IPv4 broadcast address, not the gateway, not in the
// dynamic range, and not in held. Addresses of held outside the subnet or
// of the other family are ignored, so one list can serve both families.
func Pick(f Family, held []netip.Addr) (netip.Addr, error) {
	if !f.Subnet.IsValid() {
		return netip.Addr{}, fmt.Errorf("%w: no subnet", ErrInvalid)
	}
	subnet := f.Subnet.Masked()
	is4 := subnet.Addr().Is4()
	if f.Gateway.IsValid() && f.Gateway.Is4() != is4 || f.Dynamic.IsValid() && f.Dynamic.Addr().Is4() != is4 {
		return netip.Addr{}, fmt.Errorf("%w: gateway %s or dynamic range %s is not of the family of %s", ErrInvalid, f.Gateway, f.Dynamic, subnet)
	}
	first := subnet.Addr()
	last := lastAddr(subnet)

	excluded := []span{{first, first}}
	if is4 {
		excluded = append(excluded, span{last, last})
	}
	if f.Gateway.IsValid() {
		excluded = append(excluded, span{f.Gateway, f.Gateway})
	}
	if d := f.Dynamic.Masked(); d.IsValid() {
		excluded = append(excluded, span{d.Addr(), lastAddr(d)})
	}
	inSubnet := 0
	for _, a := range held {
		a = a.Unmap()
		if a.IsValid() && a.Is4() == is4 && subnet.Contains(a) {
			excluded = append(excluded, span{a, a})
			inSubnet++
		}
	}
	slices.SortFunc(excluded, func(x, y span) int { return x.from.Compare(y.from) })

	candidate := first
	for _, s := range excluded {
		if candidate.Less(s.from) {
			break
		}
		if !s.to.Less(candidate) {
			if s.to == last {
				return netip.Addr{}, &ExhaustedError{Subnet: subnet, Held: inSubnet}
			}
			candidate = s.to.Next()
		}
	}
	if !subnet.Contains(candidate) {
		return netip.Addr{}, &ExhaustedError{Subnet: subnet, Held: inSubnet}
	}
	return candidate, nil
}

// Network is a network's families; a family whose Subnet is invalid is
// absent.
type Network struct {
	IPv4, IPv6 Family
}

// Addresses are a container's addresses; invalid where the network has no
// such family.
type Addresses struct {
	IPv4, IPv6 netip.Addr
}

// PickAll picks an address in every family the network has.
func PickAll(n Network, held []netip.Addr) (Addresses, error) {
	var out Addresses
	var err error
	if n.IPv4.Subnet.IsValid() {
		if out.IPv4, err = Pick(n.IPv4, held); err != nil {
			return Addresses{}, err
		}
	}
	if n.IPv6.Subnet.IsValid() {
		if out.IPv6, err = Pick(n.IPv6, held); err != nil {
			return Addresses{}, err
		}
	}
	return out, nil
}

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
