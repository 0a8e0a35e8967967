package container

import (
	"net/netip"
	"testing"
)

func TestSubnetsAreDeterministicAndInRange(t *testing.T) {
	v4range := netip.MustParsePrefix("172.16.0.0/12")
	ula := netip.MustParsePrefix("fc00::/8")
	for _, name := range []string{"c1", "capct-c1", "a-much-longer-cluster-network-name"} {
		seen := map[netip.Prefix]bool{}
		for a := range MaxSubnetAttempts {
			v4, v6 := Subnets(name, a)
			v4b, v6b := Subnets(name, a)
			if v4 != v4b || v6 != v6b {
				t.Fatalf("not deterministic: %s %s vs %s %s", v4, v6, v4b, v6b)
			}
			if v4.Bits() != 20 || !v4range.Contains(v4.Addr()) || v4.Masked() != v4 {
				t.Fatalf("v4 %s outside 172.16.0.0/12 or not a /20", v4)
			}
			if v6.Bits() != 64 || !ula.Contains(v6.Addr()) || v6.Masked() != v6 {
				t.Fatalf("v6 %s outside fc00::/8 or not a /64", v6)
			}
			seen[v6] = true
		}
		if len(seen) != MaxSubnetAttempts {
			t.Fatalf("attempts must give different subnets for %s", name)
		}
	}
	if Gateway(netip.MustParsePrefix("172.20.16.0/20")) != netip.MustParseAddr("172.20.16.1") {
		t.Fatal("gateway")
	}
}

func TestOwnership(t *testing.T) {
	l := OwnerLabels("c1", "uid-1", "c1-cp-0", "control-plane")
	if !BelongsTo(l, "uid-1") || BelongsTo(l, "uid-2") || BelongsTo(l, "") || BelongsTo(map[string]string{}, "") {
		t.Fatal("BelongsTo")
	}
	if !SameOwner(l, OwnerLabels("c1", "uid-1", "c1-cp-0", "")) || SameOwner(l, OwnerLabels("c1", "uid-1", "other", "")) {
		t.Fatal("SameOwner")
	}
	if _, ok := OwnerLabels("c1", "uid", "", "")[LabelMachine]; ok {
		t.Fatal("empty values must be left out")
	}
}
