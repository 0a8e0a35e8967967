package nodeaddr

import (
	"errors"
	"net/netip"
	"testing"
)

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestPick(t *testing.T) {
	v4 := Family{Subnet: netip.MustParsePrefix("172.18.0.0/20"), Gateway: netip.MustParseAddr("172.18.0.1"),
		Dynamic: netip.MustParsePrefix("172.18.8.0/21")}
	v6 := Family{Subnet: netip.MustParsePrefix("fc00:1::/64"), Gateway: netip.MustParseAddr("fc00:1::1"),
		Dynamic: netip.MustParsePrefix("fc00:1:0:0:8000::/66")}
	tests := []struct {
		name    string
		family  Family
		held    []netip.Addr
		want    string
		wantErr error
	}{
		{name: "first after the gateway", family: v4, want: "172.18.0.2"},
		{name: "lowest gap", family: v4, held: addrs("172.18.0.2", "172.18.0.4"), want: "172.18.0.3"},
		{name: "held in any order", family: v4, held: addrs("172.18.0.3", "172.18.0.2", "172.18.0.5"), want: "172.18.0.4"},
		{name: "duplicates count once", family: v4, held: addrs("172.18.0.2", "172.18.0.2"), want: "172.18.0.3"},
		{name: "foreign endpoints in the static part are skipped", family: v4,
			held: addrs("172.18.0.2", "172.18.0.3", "172.18.8.1"), want: "172.18.0.4"},
		{name: "addresses outside the subnet and of the other family are ignored", family: v4,
			held: addrs("10.0.0.2", "fc00:1::2", "::ffff:172.18.0.2"), want: "172.18.0.3"},
		{name: "gateway elsewhere frees the first host address", family: Family{
			Subnet: netip.MustParsePrefix("10.1.0.0/24"), Gateway: netip.MustParseAddr("10.1.0.254")}, want: "10.1.0.1"},
		{name: "the dynamic range is jumped over", family: Family{
			Subnet: netip.MustParsePrefix("10.1.0.0/24"), Gateway: netip.MustParseAddr("10.1.0.1"),
			Dynamic: netip.MustParsePrefix("10.1.0.0/25")}, want: "10.1.0.128"},
		{name: "no dynamic range: the whole subnet", family: Family{Subnet: netip.MustParsePrefix("10.1.0.0/30")}, want: "10.1.0.1"},
		{name: "exhausted below the dynamic range", family: Family{
			Subnet: netip.MustParsePrefix("10.1.0.0/29"), Gateway: netip.MustParseAddr("10.1.0.1"),
			Dynamic: netip.MustParsePrefix("10.1.0.4/30")}, held: addrs("10.1.0.2", "10.1.0.3"), wantErr: ErrExhausted},
		{name: "exhausted: broadcast is never handed out", family: Family{
			Subnet: netip.MustParsePrefix("10.1.0.0/30"), Gateway: netip.MustParseAddr("10.1.0.1")},
			held: addrs("10.1.0.2"), wantErr: ErrExhausted},
		{name: "IPv6 last address may be used", family: Family{Subnet: netip.MustParsePrefix("fc00::/126"),
			Gateway: netip.MustParseAddr("fc00::1")}, held: addrs("fc00::2"), want: "fc00::3"},
		{name: "IPv6", family: v6, held: addrs("fc00:1::2"), want: "fc00:1::3"},
		{name: "unmasked subnet", family: Family{Subnet: netip.MustParsePrefix("10.1.0.77/24"), Gateway: netip.MustParseAddr("10.1.0.1")},
			want: "10.1.0.2"},
		{name: "no subnet", family: Family{}, wantErr: ErrInvalid},
		{name: "gateway of the other family", family: Family{Subnet: v4.Subnet, Gateway: v6.Gateway}, wantErr: ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Pick(tc.family, tc.held)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("got %v, %v; want %v", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("got %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestExhaustedErrorNamesTheSubnet(t *testing.T) {
	_, err := Pick(Family{Subnet: netip.MustParsePrefix("10.1.0.0/30"), Gateway: netip.MustParseAddr("10.1.0.1")}, addrs("10.1.0.2"))
	var ex *ExhaustedError
	if !errors.As(err, &ex) || ex.Subnet.String() != "10.1.0.0/30" || ex.Held != 1 {
		t.Fatalf("got %#v", err)
	}
}

func TestPickAllDualStack(t *testing.T) {
	n := Network{
		IPv4: Family{Subnet: netip.MustParsePrefix("172.18.0.0/20"), Gateway: netip.MustParseAddr("172.18.0.1")},
		IPv6: Family{Subnet: netip.MustParsePrefix("fc00:1::/64"), Gateway: netip.MustParseAddr("fc00:1::1")},
	}
	got, err := PickAll(n, addrs("172.18.0.2", "fc00:1::2", "fc00:1::3"))
	if err != nil || got.IPv4.String() != "172.18.0.3" || got.IPv6.String() != "fc00:1::4" {
		t.Fatalf("got %+v, %v", got, err)
	}
	got, err = PickAll(Network{IPv4: n.IPv4}, nil)
	if err != nil || got.IPv4.String() != "172.18.0.2" || got.IPv6.IsValid() {
		t.Fatalf("IPv4 only: got %+v, %v", got, err)
	}
	if _, err := PickAll(Network{IPv4: n.IPv4, IPv6: Family{Subnet: netip.MustParsePrefix("fc00::/127"),
		Gateway: netip.MustParseAddr("fc00::1")}}, nil); !errors.Is(err, ErrExhausted) {
		t.Fatalf("a full family must fail the pick: %v", err)
	}
}

// TestHandingOutInTurnNeverRepeats allocates a small subnet to the end, as
// machines created one after another would.
func TestHandingOutInTurnNeverRepeats(t *testing.T) {
	f := Family{Subnet: netip.MustParsePrefix("10.9.0.0/26"), Gateway: netip.MustParseAddr("10.9.0.1"),
		Dynamic: netip.MustParsePrefix("10.9.0.32/27")}
	var held []netip.Addr
	seen := map[netip.Addr]bool{}
	for {
		a, err := Pick(f, held)
		if errors.Is(err, ErrExhausted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
		held = append(held, a)
	}
	// 10.9.0.0/26 less the dynamic /27: .0-.31, less .0 and the gateway.
	if len(seen) != 30 {
		t.Fatalf("handed out %d addresses, want 30", len(seen))
	}
}
