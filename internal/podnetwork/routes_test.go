package podnetwork

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

// routeTables acts out, in each fake container, the two scripts a sync
// runs: ProbeCommand (masquerade rules, then the routes of the families
// asked for) and ApplyCommand (route changes).
type routeTables struct {
	mu     sync.Mutex
	tables map[string]map[netip.Prefix]netip.Addr
	// masq holds each container's masquerade rules, "tool src dst".
	masq map[string]map[string]bool
}

func newRouteTables() *routeTables {
	return &routeTables{tables: map[string]map[netip.Prefix]netip.Addr{}, masq: map[string]map[string]bool{}}
}

func (r *routeTables) get(name string) map[netip.Prefix]netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.tables[name])
}

// wipe forgets a container's routes and rules, as its restart does.
func (r *routeTables) wipe(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.tables, name)
	delete(r.masq, name)
}

func (r *routeTables) handle(_ context.Context, m container.Machine, _ map[string][]byte, in container.ExecInput, _ []byte) (container.ExecResult, bool) {
	if len(in.Cmd) < 4 || in.Cmd[0] != "sh" || in.Cmd[1] != "-c" {
		return container.ExecResult{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.tables[m.Name]
	if t == nil {
		t = map[netip.Prefix]netip.Addr{}
		r.tables[m.Name] = t
	}
	args := in.Cmd[4:]
	switch in.Cmd[2] {
	case probeScript:
		sep := slices.Index(args, "--")
		fams, rules := args[:sep], args[sep+1:]
		if r.masq[m.Name] == nil {
			r.masq[m.Name] = map[string]bool{}
		}
		for i := 0; i+2 < len(rules); i += 3 {
			r.masq[m.Name][strings.Join(rules[i:i+3], " ")] = true
		}
		var b strings.Builder
		for _, f := range fams {
			if f == "-4" {
				fmt.Fprintf(&b, "default via 172.18.0.1 dev eth0 \n172.18.0.0/16 dev eth0 proto kernel scope link src %s \n", m.IPv4)
			}
			for d, via := range t {
				if d.Addr().Is4() == (f == "-4") {
					fmt.Fprintf(&b, "%s via %s dev eth0 \n", d, via)
				}
			}
			// What ptp leaves for two pods of the node's own pod CIDR
			// (a masquerade rule's source): routes without a gateway
			// inside the cluster's pod network, which a sync must leave
			// alone.
			for i := 0; i+2 < len(rules); i += 3 {
				own := pfx(rules[i+1])
				if own.Addr().Is4() != (f == "-4") {
					continue
				}
				gw := own.Addr().Next()
				for n, pod := range []netip.Addr{gw.Next().Next(), gw.Next().Next().Next()} {
					if f == "-4" {
						fmt.Fprintf(&b, "%s dev veth%d scope host \n", pod, n)
					} else {
						fmt.Fprintf(&b, "%s dev veth%d proto kernel metric 256 pref medium\n%s dev veth%d metric 1024 pref medium\n", gw, n, pod, n)
					}
				}
			}
		}
		return container.ExecResult{Stdout: []byte(b.String())}, true
	case applyScript:
		for i := 0; i+3 < len(args); i += 4 {
			d, via := pfx(args[i+2]), addr(args[i+3])
			switch args[i+1] {
			case "replace":
				t[d] = via
			case "del":
				if t[d] != via {
					return container.ExecResult{ExitCode: 2, Stderr: []byte("RTNETLINK answers: No such process")}, true
				}
				delete(t, d)
			}
		}
		return container.ExecResult{}, true
	}
	return container.ExecResult{ExitCode: 1, Stderr: []byte("unexpected script")}, true
}

func TestDesiredRoutes(t *testing.T) {
	nodes := []Node{
		{Name: "a", IPv4: addr("172.18.0.2"), IPv6: addr("fc00::2"), PodCIDRs: []netip.Prefix{pfx("10.244.0.0/24"), pfx("fd00:1::/64")}},
		{Name: "b", IPv4: addr("172.18.0.3"), IPv6: addr("fc00::3"), PodCIDRs: []netip.Prefix{pfx("10.244.1.0/24"), pfx("fd00:2::/64")}},
		// No pod CIDRs yet: routes to others, nothing to it.
		{Name: "c", IPv4: addr("172.18.0.4")},
		// No IPv6 address: its IPv6 CIDR is unreachable and left out.
		{Name: "d", IPv4: addr("172.18.0.5"), PodCIDRs: []netip.Prefix{pfx("10.244.2.0/24"), pfx("fd00:3::/64")}},
	}
	got := DesiredRoutes(nodes)
	want := map[string][]Route{
		"a": {{pfx("10.244.1.0/24"), addr("172.18.0.3")}, {pfx("10.244.2.0/24"), addr("172.18.0.5")}, {pfx("fd00:2::/64"), addr("fc00::3")}},
		"b": {{pfx("10.244.0.0/24"), addr("172.18.0.2")}, {pfx("10.244.2.0/24"), addr("172.18.0.5")}, {pfx("fd00:1::/64"), addr("fc00::2")}},
		"c": {{pfx("10.244.0.0/24"), addr("172.18.0.2")}, {pfx("10.244.1.0/24"), addr("172.18.0.3")}, {pfx("10.244.2.0/24"), addr("172.18.0.5")}, {pfx("fd00:1::/64"), addr("fc00::2")}, {pfx("fd00:2::/64"), addr("fc00::3")}},
		"d": {{pfx("10.244.0.0/24"), addr("172.18.0.2")}, {pfx("10.244.1.0/24"), addr("172.18.0.3")}, {pfx("fd00:1::/64"), addr("fc00::2")}, {pfx("fd00:2::/64"), addr("fc00::3")}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
	if DesiredRoutes(nil) == nil || len(DesiredRoutes([]Node{{Name: "solo", IPv4: addr("172.18.0.2"), PodCIDRs: []netip.Prefix{pfx("10.244.0.0/24")}}})["solo"]) != 0 {
		t.Fatal("a single node needs no routes")
	}
}

func TestRouteTableEqual(t *testing.T) {
	a := Node{Name: "a", IPv4: addr("172.18.0.2"), PodCIDRs: []netip.Prefix{pfx("10.244.0.0/24")}}
	b := Node{Name: "b", IPv4: addr("172.18.0.3"), PodCIDRs: []netip.Prefix{pfx("10.244.1.0/24")}}
	moved := b
	moved.IPv4 = addr("172.18.0.9")
	renamed := b
	renamed.Name = "b2"
	for _, tc := range []struct {
		name string
		x, y *RouteTable
		want bool
	}{
		{"the same nodes in another order", NewRouteTable([]Node{a, b}), NewRouteTable([]Node{b, a}), true},
		{"no nodes, and nodes without routes", NewRouteTable(nil), NewRouteTable([]Node{{Name: "c"}}), true},
		{"a node joined", NewRouteTable([]Node{a}), NewRouteTable([]Node{a, b}), false},
		{"a node's address moved", NewRouteTable([]Node{a, b}), NewRouteTable([]Node{a, moved}), false},
		// The same route to another node: each node's own routes differ.
		{"a CIDR changed hands", NewRouteTable([]Node{a, b}), NewRouteTable([]Node{a, renamed}), false},
		{"nil and empty", nil, NewRouteTable(nil), false},
		{"both nil", nil, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.x.Equal(tc.y); got != tc.want {
				t.Fatalf("Equal = %v, want %v", got, tc.want)
			}
			if got := tc.y.Equal(tc.x); got != tc.want {
				t.Fatalf("Equal the other way = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestApplyCommand(t *testing.T) {
	add := []Route{{pfx("10.244.1.0/24"), addr("172.18.0.3")}, {pfx("fd00:10:244:1::/64"), addr("fc00:f853:ccd:e793::3")}}
	del := []Route{{pfx("10.244.2.0/24"), addr("172.18.0.4")}}
	got := ApplyCommand(add, del)
	want := []string{"-4", "replace", "10.244.1.0/24", "172.18.0.3", "-6", "replace", "fd00:10:244:1::/64", "fc00:f853:ccd:e793::3", "-4", "del", "10.244.2.0/24", "172.18.0.4"}
	if len(got) < 4 || got[0] != "sh" || got[2] != applyScript || got[3] != "sh" || !slices.Equal(got[4:], want) {
		t.Fatalf("got %q, want the apply script with %q", got, want)
	}
	if ApplyCommand(nil, nil) != nil {
		t.Fatal("nothing to change must run nothing")
	}
}

// ptpRoutes4 and ptpRoutes6 are what `ip -o -4 route show` and `ip -o -6
// route show` print on a node whose pod CIDRs are 10.244.0.0/24 and
// fd00:10:244::/64, after the ptp plugin (Debian's 1.1.1) set up two pods,
// with a route to another node's pod CIDRs.
const (
	ptpRoutes4 = `default via 172.18.0.1 dev eth0 
10.244.0.4 dev vethcf41d83b scope host 
10.244.0.5 dev veth3594d182 scope host 
10.244.1.0/24 via 172.18.0.3 dev eth0 
172.18.0.0/16 dev eth0 proto kernel scope link src 172.18.0.2 
`
	ptpRoutes6 = `fc00::/64 dev eth0 proto kernel metric 256 pref medium
fd00:10:244::1 dev vethcf41d83b proto kernel metric 256 pref medium
fd00:10:244::1 dev veth3594d182 proto kernel metric 256 pref medium
fd00:10:244::4 dev vethcf41d83b metric 1024 pref medium
fd00:10:244::5 dev veth3594d182 metric 1024 pref medium
fd00:10:244:1::/64 via fc00::3 dev eth0 metric 1024 pref medium
fe80::/64 dev vethcf41d83b proto kernel metric 256 pref medium
fe80::/64 dev eth0 proto kernel metric 256 pref medium
default via fc00::1 dev eth0 metric 1024 pref medium
`
	// A node whose pods ran on CAPCT's earlier bridge configuration
	// when it got ptp's: the bridge's connected routes stay beside the
	// ptp pods' host routes.
	bridgeAndPTPRoutes = `10.244.0.0/24 dev capct0 proto kernel scope link src 10.244.0.1 
10.244.0.4 dev vethcf41d83b scope host 
10.244.1.0/24 via 172.18.0.3 dev eth0 
fd00:10:244::1 dev vethcf41d83b proto kernel metric 256 pref medium
fd00:10:244::4 dev vethcf41d83b metric 1024 pref medium
fd00:10:244::/64 dev capct0 proto kernel metric 256 pref medium
`
)

func TestParseRoutes(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  string
		want []Route
	}{
		{name: "gateway routes among others", out: `default via 172.18.0.1 dev eth0 
10.244.1.0/24 via 172.18.0.3 dev eth0 
10.244.0.0/24 dev capct0 proto kernel scope link src 10.244.0.1 
10.244.9.7 via 172.18.0.9 dev eth0 
172.18.0.0/16 dev eth0 proto kernel scope link src 172.18.0.2 
blackhole 10.244.5.0/24 
unreachable 10.244.6.0/24 via 1.2.3.4
fd00:10:244:1::/64 via fc00::3 dev eth0 metric 1024 pref medium
fd00:10:244:2::/64 via inet6 fc00::4 dev eth0
garbage
`, want: []Route{
			{pfx("10.244.1.0/24"), addr("172.18.0.3")},
			{pfx("10.244.9.7/32"), addr("172.18.0.9")},
			{pfx("fd00:10:244:1::/64"), addr("fc00::3")},
			{pfx("fd00:10:244:2::/64"), addr("fc00::4")},
		}},
		{name: "ptp pods, IPv4", out: ptpRoutes4, want: []Route{{pfx("10.244.1.0/24"), addr("172.18.0.3")}}},
		{name: "ptp pods, IPv6", out: ptpRoutes6, want: []Route{{pfx("fd00:10:244:1::/64"), addr("fc00::3")}}},
		{name: "bridge pods beside ptp pods", out: bridgeAndPTPRoutes, want: []Route{{pfx("10.244.1.0/24"), addr("172.18.0.3")}}},
		{name: "nothing", out: "", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ParseRoutes(tc.out); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestDiffRoutes(t *testing.T) {
	cluster := []netip.Prefix{pfx("10.244.0.0/16"), pfx("fd00:10:244::/56")}
	r := func(d, v string) Route { return Route{pfx(d), addr(v)} }
	for name, tc := range map[string]struct {
		current, desired []Route
		add, del         []Route
	}{
		"empty": {},
		"join": {
			current: []Route{r("10.244.1.0/24", "172.18.0.3")},
			desired: []Route{r("10.244.1.0/24", "172.18.0.3"), r("10.244.2.0/24", "172.18.0.4")},
			add:     []Route{r("10.244.2.0/24", "172.18.0.4")},
		},
		"leave": {
			current: []Route{r("10.244.1.0/24", "172.18.0.3"), r("10.244.2.0/24", "172.18.0.4"), r("fd00:10:244:2::/64", "fc00::4")},
			desired: []Route{r("10.244.1.0/24", "172.18.0.3")},
			del:     []Route{r("10.244.2.0/24", "172.18.0.4"), r("fd00:10:244:2::/64", "fc00::4")},
		},
		"moved to a new address: replace only": {
			current: []Route{r("10.244.1.0/24", "172.18.0.3")},
			desired: []Route{r("10.244.1.0/24", "172.18.0.9")},
			add:     []Route{r("10.244.1.0/24", "172.18.0.9")},
		},
		"foreign routes are left alone": {
			current: []Route{r("192.168.0.0/16", "172.18.0.1"), r("10.0.0.0/8", "172.18.0.1"), r("fd00:99::/64", "fc00::1")},
		},
		"in sync": {
			current: []Route{r("10.244.1.0/24", "172.18.0.3")},
			desired: []Route{r("10.244.1.0/24", "172.18.0.3")},
		},
		// The node's own ptp pods' host routes lie inside the cluster's
		// pod network: they must neither count as a route to the other
		// node nor go when that node leaves.
		"ptp pods, the other node stays": {
			current: ParseRoutes(ptpRoutes4 + ptpRoutes6),
			desired: []Route{r("10.244.1.0/24", "172.18.0.3"), r("fd00:10:244:1::/64", "fc00::3")},
		},
		"ptp pods, a node joins": {
			current: ParseRoutes(ptpRoutes4 + ptpRoutes6),
			desired: []Route{r("10.244.1.0/24", "172.18.0.3"), r("10.244.2.0/24", "172.18.0.4"), r("fd00:10:244:1::/64", "fc00::3")},
			add:     []Route{r("10.244.2.0/24", "172.18.0.4")},
		},
		"ptp pods, the other node leaves": {
			current: ParseRoutes(ptpRoutes4 + ptpRoutes6),
			del:     []Route{r("10.244.1.0/24", "172.18.0.3"), r("fd00:10:244:1::/64", "fc00::3")},
		},
		"bridge pods beside ptp pods, the other node leaves": {
			current: ParseRoutes(bridgeAndPTPRoutes),
			del:     []Route{r("10.244.1.0/24", "172.18.0.3")},
		},
	} {
		t.Run(name, func(t *testing.T) {
			add, del := DiffRoutes(tc.current, tc.desired, cluster)
			if !reflect.DeepEqual(add, tc.add) || !reflect.DeepEqual(del, tc.del) {
				t.Fatalf("add %v del %v, want add %v del %v", add, del, tc.add, tc.del)
			}
		})
	}
}

func TestCNIConfig(t *testing.T) {
	for name, tc := range map[string]struct {
		cidrs  []netip.Prefix
		mtu    int
		ranges []string
		routes []string
	}{
		"IPv4":          {[]netip.Prefix{pfx("10.244.3.0/24")}, 0, []string{"10.244.3.0/24"}, []string{"0.0.0.0/0"}},
		"IPv6":          {[]netip.Prefix{pfx("fd00:10:244:3::/64")}, 0, []string{"fd00:10:244:3::/64"}, []string{"::/0"}},
		"dual stack":    {[]netip.Prefix{pfx("fd00:10:244:3::/64"), pfx("10.244.3.0/24")}, 0, []string{"fd00:10:244:3::/64", "10.244.3.0/24"}, []string{"::/0", "0.0.0.0/0"}},
		"on an overlay": {[]netip.Prefix{pfx("10.244.3.0/24")}, 1450, []string{"10.244.3.0/24"}, []string{"0.0.0.0/0"}},
		"dual stack on an overlay": {[]netip.Prefix{pfx("10.244.3.0/24"), pfx("fd00:10:244:3::/64")}, 1450,
			[]string{"10.244.3.0/24", "fd00:10:244:3::/64"}, []string{"0.0.0.0/0", "::/0"}},
		"host bits are masked": {[]netip.Prefix{pfx("10.244.3.7/24")}, 0, []string{"10.244.3.0/24"}, []string{"0.0.0.0/0"}},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := CNIConfig(tc.cidrs, tc.mtu)
			if err != nil {
				t.Fatal(err)
			}
			var conf struct {
				CNIVersion string                       `json:"cniVersion"`
				Name       string                       `json:"name"`
				Plugins    []map[string]json.RawMessage `json:"plugins"`
			}
			if err := json.Unmarshal(b, &conf); err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			// The network name keys host-local's state: a node rewritten
			// from CAPCT's earlier configuration keeps its allocations.
			if conf.CNIVersion != "1.0.0" || conf.Name != "capct" || len(conf.Plugins) != 2 {
				t.Fatalf("%s", b)
			}
			ptp, pm, ranges, routes := checkPlugins(t, b, conf.Plugins, tc.mtu)
			if !slices.Equal(ranges, tc.ranges) || !slices.Equal(routes, tc.routes) {
				t.Fatalf("ranges %v routes %v", ranges, routes)
			}
			if pm.Type != "portmap" || !pm.Capabilities["portMappings"] {
				t.Fatalf("portmap plugin: %s", b)
			}
			// Every plugin the configuration runs is one kind's node
			// images ship.
			for _, typ := range []string{ptp.Type, ptp.IPAM.Type, pm.Type} {
				if !slices.Contains(NodeCNIPlugins(), typ) {
					t.Fatalf("plugin %s is not among %v", typ, NodeCNIPlugins())
				}
			}
			again, _ := CNIConfig(tc.cidrs, tc.mtu)
			if string(again) != string(b) {
				t.Fatal("not deterministic")
			}
		})
	}
	for name, cidrs := range map[string][]netip.Prefix{"no CIDRs": nil, "an invalid CIDR": {{}}} {
		if _, err := CNIConfig(cidrs, 0); err == nil {
			t.Fatalf("%s must fail", name)
		}
	}
}

func mustJSON(t *testing.T, m map[string]json.RawMessage) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNodeCNIPlugins(t *testing.T) {
	// kind's node images ship exactly these (kind's images/base
	// Dockerfile); CAPCT's node image must not ship more (test/nodeimage).
	want := []string{"host-local", "loopback", "portmap", "ptp"}
	if got := NodeCNIPlugins(); !slices.Equal(got, want) {
		t.Fatalf("NodeCNIPlugins() = %v, want %v", got, want)
	}
}

func TestProbeCommand(t *testing.T) {
	testCases := []struct {
		name    string
		pods    []netip.Prefix
		cluster []netip.Prefix
		want    []string
	}{
		{name: "no pod CIDRs", cluster: []netip.Prefix{pfx("10.244.0.0/16")}, want: []string{"-4", "--"}},
		{name: "IPv4", pods: []netip.Prefix{pfx("10.244.3.0/24")}, cluster: []netip.Prefix{pfx("10.244.0.0/16")},
			want: []string{"-4", "--", "iptables", "10.244.3.0/24", "10.244.0.0/16"}},
		{name: "dual stack", pods: []netip.Prefix{pfx("10.244.3.0/24"), pfx("fd00:10:244:3::/64")},
			cluster: []netip.Prefix{pfx("10.244.0.0/16"), pfx("fd00:10:244::/56")},
			want:    []string{"-4", "-6", "--", "iptables", "10.244.3.0/24", "10.244.0.0/16", "ip6tables", "fd00:10:244:3::/64", "fd00:10:244::/56"}},
		{name: "family not in the cluster", pods: []netip.Prefix{pfx("fd00:10:244:3::/64")}, cluster: []netip.Prefix{pfx("10.244.0.0/16")},
			want: []string{"-4", "--"}},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			got := ProbeCommand(tc.pods, tc.cluster)
			if len(got) < 4 || got[0] != "sh" || got[2] != probeScript || got[3] != "sh" || !slices.Equal(got[4:], tc.want) {
				t.Fatalf("want arguments %v, got %v", tc.want, got)
			}
		})
	}
}

// cniPTP and cniPortmap are the two plugins of CAPCT's CNI configuration
// as TestCNIConfig reads them.
type cniPTP struct {
	Type   string `json:"type"`
	MTU    *int   `json:"mtu"`
	IPMasq *bool  `json:"ipMasq"`
	IPAM   struct {
		Type   string                `json:"type"`
		Ranges [][]map[string]string `json:"ranges"`
		Routes []map[string]string   `json:"routes"`
	} `json:"ipam"`
}

type cniPortmap struct {
	Type         string          `json:"type"`
	Capabilities map[string]bool `json:"capabilities"`
}

// checkPlugins decodes the configuration b's two plugins, checks the ptp
// plugin's own settings for mtu, and returns both with the ranges' subnets
// and the routes' destinations.
func checkPlugins(t *testing.T, b []byte, plugins []map[string]json.RawMessage, mtu int) (ptp cniPTP, pm cniPortmap, ranges, routes []string) {
	t.Helper()
	if err := json.Unmarshal(mustJSON(t, plugins[0]), &ptp); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(mustJSON(t, plugins[1]), &pm); err != nil {
		t.Fatal(err)
	}
	// ptp, and nothing of another plugin's settings (bridge, isGateway,
	// hairpinMode) that would say it was meant.
	wantKeys := []string{"ipMasq", "ipam", "type"}
	if mtu != 0 {
		wantKeys = []string{"ipMasq", "ipam", "mtu", "type"}
	}
	if keys := slices.Sorted(maps.Keys(plugins[0])); !slices.Equal(keys, wantKeys) {
		t.Fatalf("first plugin has %v, want %v: %s", keys, wantKeys, b)
	}
	// Masquerading is ProbeCommand's narrower rule, never ptp's.
	if ptp.Type != "ptp" || ptp.IPMasq == nil || *ptp.IPMasq || ptp.IPAM.Type != "host-local" {
		t.Fatalf("ptp plugin: %s", b)
	}
	if mtu != 0 && (ptp.MTU == nil || *ptp.MTU != mtu) {
		t.Fatalf("ptp plugin mtu %v, want %d: %s", ptp.MTU, mtu, b)
	}
	for _, r := range ptp.IPAM.Ranges {
		if len(r) != 1 || len(r[0]) != 1 {
			t.Fatalf("range set %v: one range per family, its subnet only", r)
		}
		ranges = append(ranges, r[0]["subnet"])
	}
	for _, r := range ptp.IPAM.Routes {
		if len(r) != 1 {
			t.Fatalf("route %v: a default route through the range's gateway has only dst", r)
		}
		routes = append(routes, r["dst"])
	}
	return ptp, pm, ranges, routes
}
