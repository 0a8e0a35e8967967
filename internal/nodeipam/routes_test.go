package nodeipam

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

// routeTables simulates each fake container's routing table for `ip -o
// route show`, `ip route replace` and `ip route del`.
type routeTables struct {
	mu     sync.Mutex
	tables map[string]map[netip.Prefix]netip.Addr
}

func newRouteTables() *routeTables {
	return &routeTables{tables: map[string]map[netip.Prefix]netip.Addr{}}
}

func (r *routeTables) get(name string) map[netip.Prefix]netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[netip.Prefix]netip.Addr{}
	for k, v := range r.tables[name] {
		out[k] = v
	}
	return out
}

func (r *routeTables) handle(_ context.Context, m container.Machine, _ map[string][]byte, in container.ExecInput, _ []byte) (container.ExecResult, bool) {
	if len(in.Cmd) == 0 || in.Cmd[0] != "ip" {
		return container.ExecResult{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.tables[m.Name]
	if t == nil {
		t = map[netip.Prefix]netip.Addr{}
		r.tables[m.Name] = t
	}
	args := slices.DeleteFunc(slices.Clone(in.Cmd[1:]), func(s string) bool { return s == "-o" })
	v6 := len(args) > 0 && args[0] == "-6"
	if v6 {
		args = args[1:]
	}
	switch {
	case len(args) == 2 && args[0] == "route" && args[1] == "show":
		var b strings.Builder
		if !v6 {
			fmt.Fprintf(&b, "default via 172.18.0.1 dev eth0 \n172.18.0.0/16 dev eth0 proto kernel scope link src %s \n", m.IPv4)
		}
		for d, via := range t {
			if d.Addr().Is4() != v6 {
				fmt.Fprintf(&b, "%s via %s dev eth0 \n", d, via)
			}
		}
		return container.ExecResult{Stdout: []byte(b.String())}, true
	case len(args) == 5 && args[0] == "route" && args[3] == "via":
		d, via := pfx(args[2]), addr(args[4])
		switch args[1] {
		case "replace":
			t[d] = via
		case "del":
			if t[d] != via {
				return container.ExecResult{ExitCode: 2, Stderr: []byte("RTNETLINK answers: No such process")}, true
			}
			delete(t, d)
		}
		return container.ExecResult{}, true
	}
	return container.ExecResult{ExitCode: 1, Stderr: []byte("unexpected ip command")}, true
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

func TestRouteCommands(t *testing.T) {
	for _, tc := range []struct {
		r    Route
		op   string
		want string
	}{
		{Route{pfx("10.244.1.0/24"), addr("172.18.0.3")}, "replace", "ip route replace 10.244.1.0/24 via 172.18.0.3"},
		{Route{pfx("10.244.1.0/24"), addr("172.18.0.3")}, "del", "ip route del 10.244.1.0/24 via 172.18.0.3"},
		{Route{pfx("fd00:10:244:1::/64"), addr("fc00:f853:ccd:e793::3")}, "replace", "ip -6 route replace fd00:10:244:1::/64 via fc00:f853:ccd:e793::3"},
	} {
		if got := strings.Join(tc.r.Command(tc.op), " "); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestParseRoutes(t *testing.T) {
	out := `default via 172.18.0.1 dev eth0 
10.244.1.0/24 via 172.18.0.3 dev eth0 
10.244.0.0/24 dev capct0 proto kernel scope link src 10.244.0.1 
10.244.9.7 via 172.18.0.9 dev eth0 
172.18.0.0/16 dev eth0 proto kernel scope link src 172.18.0.2 
blackhole 10.244.5.0/24 
unreachable 10.244.6.0/24 via 1.2.3.4
fd00:10:244:1::/64 via fc00::3 dev eth0 metric 1024 pref medium
fd00:10:244:2::/64 via inet6 fc00::4 dev eth0
garbage
`
	want := []Route{
		{pfx("10.244.1.0/24"), addr("172.18.0.3")},
		{pfx("10.244.9.7/32"), addr("172.18.0.9")},
		{pfx("fd00:10:244:1::/64"), addr("fc00::3")},
		{pfx("fd00:10:244:2::/64"), addr("fc00::4")},
	}
	if got := ParseRoutes(out); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
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
		ranges []string
		routes []string
	}{
		"IPv4":       {[]netip.Prefix{pfx("10.244.3.0/24")}, []string{"10.244.3.0/24"}, []string{"0.0.0.0/0"}},
		"IPv6":       {[]netip.Prefix{pfx("fd00:10:244:3::/64")}, []string{"fd00:10:244:3::/64"}, []string{"::/0"}},
		"dual stack": {[]netip.Prefix{pfx("fd00:10:244:3::/64"), pfx("10.244.3.0/24")}, []string{"fd00:10:244:3::/64", "10.244.3.0/24"}, []string{"::/0", "0.0.0.0/0"}},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := CNIConfig(tc.cidrs)
			if err != nil {
				t.Fatal(err)
			}
			var conf struct {
				CNIVersion string `json:"cniVersion"`
				Name       string `json:"name"`
				Plugins    []struct {
					Type         string          `json:"type"`
					Bridge       string          `json:"bridge"`
					IsGateway    bool            `json:"isGateway"`
					IPMasq       bool            `json:"ipMasq"`
					HairpinMode  bool            `json:"hairpinMode"`
					Capabilities map[string]bool `json:"capabilities"`
					IPAM         struct {
						Type   string                `json:"type"`
						Ranges [][]map[string]string `json:"ranges"`
						Routes []map[string]string   `json:"routes"`
					} `json:"ipam"`
				} `json:"plugins"`
			}
			if err := json.Unmarshal(b, &conf); err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			if conf.CNIVersion != "1.0.0" || conf.Name != "capct" || len(conf.Plugins) != 2 {
				t.Fatalf("%s", b)
			}
			br, pm := conf.Plugins[0], conf.Plugins[1]
			if br.Type != "bridge" || br.Bridge != "capct0" || !br.IsGateway || br.IPMasq || !br.HairpinMode || br.IPAM.Type != "host-local" {
				t.Fatalf("bridge plugin: %s", b)
			}
			var ranges, routes []string
			for _, r := range br.IPAM.Ranges {
				if len(r) != 1 {
					t.Fatalf("range set %v", r)
				}
				ranges = append(ranges, r[0]["subnet"])
			}
			for _, r := range br.IPAM.Routes {
				routes = append(routes, r["dst"])
			}
			if !slices.Equal(ranges, tc.ranges) || !slices.Equal(routes, tc.routes) {
				t.Fatalf("ranges %v routes %v", ranges, routes)
			}
			if pm.Type != "portmap" || !pm.Capabilities["portMappings"] {
				t.Fatalf("portmap plugin: %s", b)
			}
			again, _ := CNIConfig(tc.cidrs)
			if string(again) != string(b) {
				t.Fatal("not deterministic")
			}
		})
	}
	if _, err := CNIConfig(nil); err == nil {
		t.Fatal("no CIDRs must fail")
	}
}

func TestSyncRoutesFollowsJoinsAndLeaves(t *testing.T) {
	e := newEnv(t, []string{"10.244.0.0/16"}, infrav1.PodCIDRAllocation{})
	a, b := e.machine("a"), e.machine("b")
	e.assign(a)
	e.assign(b)
	ta := e.routes.get(a.ContainerName())
	if len(ta) != 1 || ta[pfx("10.244.1.0/24")] != b.Container.IPv4 {
		t.Fatalf("a's routes %v", ta)
	}
	c := e.machine("c")
	e.assign(c)
	if tb := e.routes.get(b.ContainerName()); len(tb) != 2 || tb[pfx("10.244.2.0/24")] != c.Container.IPv4 {
		t.Fatalf("b's routes %v", tb)
	}
	// In sync: a full sync only reads.
	n := len(e.rt.ExecCalls())
	if err := e.a.SyncRoutes(e.ctx, e.cluster); err != nil {
		t.Fatal(err)
	}
	for _, call := range e.rt.ExecCalls()[n:] {
		if strings.Join(call.Cmd, " ") != "ip -o route show" && call.Cmd[0] != "sh" {
			t.Fatalf("in-sync SyncRoutes ran %v", call.Cmd)
		}
	}
	if got := len(e.rt.ExecCalls()) - n; got != 6 {
		t.Fatalf("%d execs, want one read and one masquerade check per container", got)
	}
	// b leaves: its container and ContainerMachine go; the others drop the
	// route to its CIDR.
	e.rt.RemoveOutOfBand(b.ContainerName())
	if err := e.mgmt.Delete(e.ctx, b.ContainerMachine); err != nil {
		t.Fatal(err)
	}
	if err := e.a.SyncRoutes(e.ctx, e.cluster); err != nil {
		t.Fatal(err)
	}
	if ta := e.routes.get(a.ContainerName()); len(ta) != 1 || ta[pfx("10.244.2.0/24")] != c.Container.IPv4 {
		t.Fatalf("a's routes after b left: %v", ta)
	}
	if tc := e.routes.get(c.ContainerName()); len(tc) != 1 || tc[pfx("10.244.0.0/24")] != a.Container.IPv4 {
		t.Fatalf("c's routes after b left: %v", tc)
	}
}

func TestMasqueradeCommand(t *testing.T) {
	testCases := []struct {
		name    string
		pods    []netip.Prefix
		cluster []netip.Prefix
		want    []string
	}{
		{name: "no pod CIDRs", cluster: []netip.Prefix{pfx("10.244.0.0/16")}},
		{name: "IPv4", pods: []netip.Prefix{pfx("10.244.3.0/24")}, cluster: []netip.Prefix{pfx("10.244.0.0/16")},
			want: []string{"iptables", "10.244.3.0/24", "10.244.0.0/16"}},
		{name: "dual stack", pods: []netip.Prefix{pfx("10.244.3.0/24"), pfx("fd00:10:244:3::/64")},
			cluster: []netip.Prefix{pfx("10.244.0.0/16"), pfx("fd00:10:244::/56")},
			want:    []string{"iptables", "10.244.3.0/24", "10.244.0.0/16", "ip6tables", "fd00:10:244:3::/64", "fd00:10:244::/56"}},
		{name: "family not in the cluster", pods: []netip.Prefix{pfx("fd00:10:244:3::/64")}, cluster: []netip.Prefix{pfx("10.244.0.0/16")}},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			got := MasqueradeCommand(tc.pods, tc.cluster)
			if tc.want == nil {
				if got != nil {
					t.Fatalf("want no command, got %v", got)
				}
				return
			}
			if len(got) < 4 || got[0] != "sh" || got[3] != "sh" || !slices.Equal(got[4:], tc.want) {
				t.Fatalf("want arguments %v, got %v", tc.want, got)
			}
		})
	}
}
