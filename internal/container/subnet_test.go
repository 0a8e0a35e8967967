package container

import (
	"fmt"
	"net/netip"
	"testing"
)

func TestSubnetsAreDeterministicAndInRange(t *testing.T) {
	v4range := netip.MustParsePrefix("172.16.0.0/12")
	ula := netip.MustParsePrefix("fc00::/8")
	// Many names: with a hash per attempt, some name's five IPv4 /20s (of
	// 256) would repeat one.
	names := []string{"c1", "capct-c1", "a-much-longer-cluster-network-name"}
	for i := range 300 {
		names = append(names, fmt.Sprintf("capct-ns%d-c%d", i, i%7))
	}
	for _, name := range names {
		seen4, seen6 := map[netip.Prefix]bool{}, map[netip.Prefix]bool{}
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
			seen4[v4], seen6[v6] = true, true
		}
		if len(seen4) != MaxSubnetAttempts || len(seen6) != MaxSubnetAttempts {
			t.Fatalf("attempts must give different subnets for %s: %d IPv4 and %d IPv6 of %d", name, len(seen4), len(seen6), MaxSubnetAttempts)
		}
	}
	if Gateway(netip.MustParsePrefix("172.20.16.0/20")) != netip.MustParseAddr("172.20.16.1") {
		t.Fatal("gateway")
	}
}

func TestOwnership(t *testing.T) {
	cp := Owner{Namespace: "ns", Cluster: "c1", ClusterID: "id-1", Machine: "c1-cp-0"}
	labels := cp.Labels()
	labels[LabelRole] = "control-plane"
	for _, tc := range []struct {
		name  string
		owner Owner
		owns  bool
	}{
		{"the same owner", cp, true},
		{"another machine", cp.ForMachine("other"), false},
		{"the cluster without a machine", cp.ClusterOwner(), false},
		{"another namespace", Owner{Namespace: "other", Cluster: "c1", ClusterID: "id-1", Machine: "c1-cp-0"}, false},
		{"another cluster name", Owner{Namespace: "ns", Cluster: "c2", ClusterID: "id-1", Machine: "c1-cp-0"}, false},
		{"another cluster ID", Owner{Namespace: "ns", Cluster: "c1", ClusterID: "id-2", Machine: "c1-cp-0"}, false},
		{"an owner without a cluster ID", Owner{Namespace: "ns", Cluster: "c1", Machine: "c1-cp-0"}, false},
		{"the zero owner", Owner{}, false},
	} {
		if got := tc.owner.Owns(labels); got != tc.owns {
			t.Errorf("%s: Owns = %v, want %v", tc.name, got, tc.owns)
		}
	}
	if (Owner{}).Owns(map[string]string{}) {
		t.Error("the zero owner must not own an unlabelled object")
	}
	if OwnerOf(labels) != cp {
		t.Errorf("OwnerOf(%v) = %v", labels, OwnerOf(labels))
	}
	if _, ok := cp.ClusterOwner().Labels()[LabelMachine]; ok {
		t.Error("a cluster owner must not label a machine")
	}
}
