package podnetwork

import (
	"net/netip"
	"slices"
	"strings"
)

// Node is what route computation needs to know about one node container:
// its addresses on the cluster network and its pod CIDRs.
type Node struct {
	// Name of the node's container.
	Name string
	// IPv4 and IPv6 are the container's addresses on the cluster network;
	// invalid when it has none of that family.
	IPv4, IPv6 netip.Addr
	// PodCIDRs are the node's pod CIDRs.
	PodCIDRs []netip.Prefix
}

// Route is a route to a pod CIDR through a node's address.
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
}

func (r Route) String() string { return r.Dst.String() + " via " + r.Via.String() }

// probeScript makes sure, once, that a node masquerades what its pods send
// out of the cluster's pod network, then prints the node's routes. Its
// arguments are the families to list ("-4", "-6"), "--", then a (tool,
// source, destination) triple per masquerade rule. A node image without the
// tool fails here, loudly: its pods could not reach anything outside. It
// also turns on proxy ARP on legacyBridge when the node has one
// (legacyBridge says why); that is best effort, as a node that cannot is
// no worse off than without it, and failing here would leave the node
// without routes.
const probeScript = `fams=
while [ $# -gt 0 ] && [ "$1" != "--" ]; do fams="$fams $1"; shift; done
[ $# -gt 0 ] && shift
while [ $# -ge 3 ]; do
  t=$1; src=$2; dst=$3; shift 3
  if ! command -v "$t" >/dev/null 2>&1; then
    echo "$t is not installed in the node image: the node cannot masquerade its pods' traffic" >&2
    exit 127
  fi
  "$t" -t nat -C POSTROUTING -s "$src" ! -d "$dst" -j MASQUERADE 2>/dev/null ||
    "$t" -t nat -A POSTROUTING -s "$src" ! -d "$dst" -j MASQUERADE || exit 1
done
p=/proc/sys/net/ipv4/conf/` + legacyBridge + `/proxy_arp
[ ! -e "$p" ] || echo 1 2>/dev/null >"$p" || true
for f in $fams; do ip -o "$f" route show || exit 1; done`

// legacyBridge is the Linux bridge of CAPCT's earlier CNI configuration
// (the bridge plugin); nodes configured since never have it.
//
// A node that ran pods on that configuration when the manager rewrote it
// to ptp (CNIConfig) runs both kinds of pods until the bridge pods are
// recreated. Their traffic to and from other nodes keeps working: the
// bridge's connected route (10.244.0.0/24 dev capct0) still reaches the
// bridge pods, the ptp pods' host routes are more specific, both kinds
// leave through the node's routing and the same masquerade rule, and the
// other nodes route the whole pod CIDR to this node either way. Between the
// two kinds on the node itself, a ptp pod routes everything through the
// node, but a bridge pod takes the whole pod CIDR as on-link and asks the
// bridge for a ptp pod's address, which nothing on the bridge owns, so
// neither direction gets an answer back. For IPv4, proxy ARP on the bridge
// makes the node answer for each address it routes out of another
// interface (the ptp pods', never the bridge pods'), and forward. IPv6 has
// no such catch-all (proxy NDP takes one entry per address): a bridge pod
// and a ptp pod on the same node do not reach each other's IPv6 addresses,
// nor a ptp pod a Service whose endpoint is such a bridge pod, until the
// bridge pod is recreated (deleted, or its node replaced by a rollout).
// host-local's state is shared (CNINetworkName), so addresses stay unique
// throughout.
const legacyBridge = "capct0"

// ProbeCommand returns the command that makes a node masquerade what its
// pods send outside the cluster's pod network, and nothing else, and then
// prints its routes of the cluster's families (for ParseRoutes). The ptp
// plugin's own ipMasq would also masquerade traffic to other nodes' pods,
// hiding the source pod's address from them (which breaks network policies
// and Kubernetes' networking model), so it is off and this rule takes its
// place. Arguments are passed to the script, never spliced into it.
func ProbeCommand(podCIDRs, clusterCIDRs []netip.Prefix) []string {
	cmd := []string{"sh", "-c", probeScript, "sh"}
	cmd = append(cmd, families(clusterCIDRs)...)
	cmd = append(cmd, "--")
	for _, own := range podCIDRs {
		for _, cluster := range clusterCIDRs {
			if own.Addr().Is4() != cluster.Addr().Is4() {
				continue
			}
			tool := "iptables"
			if !own.Addr().Is4() {
				tool = "ip6tables"
			}
			cmd = append(cmd, tool, own.Masked().String(), cluster.Masked().String())
		}
	}
	return cmd
}

// families returns the ip(8) family flags of cidrs, each once, in order.
func families(cidrs []netip.Prefix) []string {
	var out []string
	for _, c := range cidrs {
		f := "-6"
		if c.Addr().Is4() {
			f = "-4"
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// applyScript runs `ip <family> route <op> <dst> via <gateway>` for each
// quadruple of its arguments. Every change is tried; the exit code says
// whether all of them succeeded.
const applyScript = `rc=0
while [ $# -ge 4 ]; do
  ip "$1" route "$2" "$3" via "$4" || rc=1
  shift 4
done
exit $rc`

// ApplyCommand returns the one command that adds (with `ip route replace`,
// which also moves a route to a new gateway) and removes routes in a node,
// or nil when there is nothing to change. One command per node and change,
// however many routes, keeps a sync's cost in commands linear in the nodes.
func ApplyCommand(add, del []Route) []string {
	if len(add)+len(del) == 0 {
		return nil
	}
	cmd := []string{"sh", "-c", applyScript, "sh"}
	for _, op := range []struct {
		name   string
		routes []Route
	}{{"replace", add}, {"del", del}} {
		for _, r := range op.routes {
			fam := "-6"
			if r.Dst.Addr().Is4() {
				fam = "-4"
			}
			cmd = append(cmd, fam, op.name, r.Dst.String(), r.Via.String())
		}
	}
	return cmd
}

// DesiredRoutes returns, for every node, the routes it needs to reach the
// other nodes' pod CIDRs: each CIDR through the owning node's address of
// the same family. A CIDR whose owner has no address of its family is left
// out. Routes are sorted, so the result is deterministic. It holds N × (N −
// 1) routes for N nodes; the Syncer keeps a RouteTable instead.
func DesiredRoutes(nodes []Node) map[string][]Route {
	t := NewRouteTable(nodes)
	out := make(map[string][]Route, len(nodes))
	for _, n := range nodes {
		out[n.Name] = t.For(n.Name)
	}
	return out
}

// RouteTable is every route into a cluster's pod network: each node's pod
// CIDRs through its address. A node needs all of them but the routes to
// its own CIDRs (For), so one table of N nodes' routes stands for what all
// N nodes are programmed with, where their route lists would hold N × (N −
// 1): about a million routes, tens of MiB, for a cluster of 1,000 nodes,
// kept between syncs. A RouteTable is never changed once built.
type RouteTable struct {
	// routes are sorted (sortRoutes); owners[i] is the name of the node
	// that routes[i] leads to.
	routes []Route
	owners []string
}

// NewRouteTable returns the routes to each node's pod CIDRs through its
// address of the CIDR's family; a CIDR whose node has no address of its
// family is left out.
func NewRouteTable(nodes []Node) *RouteTable {
	type owned struct {
		owner string
		r     Route
	}
	var all []owned
	for _, n := range nodes {
		for _, p := range n.PodCIDRs {
			via := n.IPv4
			if !p.Addr().Is4() {
				via = n.IPv6
			}
			if !p.IsValid() || !via.IsValid() {
				continue
			}
			all = append(all, owned{n.Name, Route{Dst: p.Masked(), Via: via}})
		}
	}
	slices.SortStableFunc(all, func(a, b owned) int { return compareRoutes(a.r, b.r) })
	t := &RouteTable{routes: make([]Route, len(all)), owners: make([]string, len(all))}
	for i, a := range all {
		t.routes[i], t.owners[i] = a.r, a.owner
	}
	return t
}

// For returns the routes node needs: every route of the table but those to
// its own pod CIDRs, sorted. A nil table has none.
func (t *RouteTable) For(node string) []Route {
	if t == nil {
		return []Route{}
	}
	out := make([]Route, 0, len(t.routes))
	for i, r := range t.routes {
		if t.owners[i] != node {
			out = append(out, r)
		}
	}
	return out
}

// Equal reports whether t and o hold the same routes to the same nodes.
func (t *RouteTable) Equal(o *RouteTable) bool {
	if t == nil || o == nil {
		return t == o
	}
	return slices.Equal(t.routes, o.routes) && slices.Equal(t.owners, o.owners)
}

func sortRoutes(rs []Route) { slices.SortFunc(rs, compareRoutes) }

func compareRoutes(a, b Route) int {
	if c := a.Dst.Addr().Compare(b.Dst.Addr()); c != 0 {
		return c
	}
	if c := a.Dst.Bits() - b.Dst.Bits(); c != 0 {
		return c
	}
	return a.Via.Compare(b.Via)
}

// routeTypes are the first words of `ip route show` lines that are route
// types rather than destinations.
var routeTypes = map[string]bool{
	"unicast": true, "local": true, "broadcast": true, "multicast": true, "throw": true,
	"unreachable": true, "prohibit": true, "blackhole": true, "nat": true, "anycast": true,
}

// ParseRoutes returns the routes with a gateway ("via") in the output of
// `ip -o route show` or `ip -o -6 route show`. Lines it does not
// understand (default routes, typed routes, multipath) are ignored, so they
// are never touched; so are routes without a gateway, among them the host
// route ptp gives each of the node's own pods ("10.244.0.5 dev vethXXXX
// scope host"), which lies inside the cluster's pod network but must never
// be taken for (or removed as) a route to another node's pod CIDR.
func ParseRoutes(out string) []Route {
	var routes []Route
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 3 || routeTypes[f[0]] {
			continue
		}
		dst, ok := parseDst(f[0])
		if !ok {
			continue
		}
		i := slices.Index(f, "via")
		if i < 0 || i+1 >= len(f) {
			continue
		}
		v := f[i+1]
		if (v == "inet" || v == "inet6") && i+2 < len(f) {
			v = f[i+2]
		}
		via, err := netip.ParseAddr(v)
		if err != nil {
			continue
		}
		routes = append(routes, Route{Dst: dst, Via: via})
	}
	return routes
}

func parseDst(s string) (netip.Prefix, bool) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err == nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, a.BitLen()), true
}

// DiffRoutes compares a node's current gateway routes with the desired ones.
// add holds the desired routes missing from current (to be added with `ip
// route replace`, which also moves a route to a new gateway). del holds the
// current routes into the cluster's pod network (inside one of
// clusterCIDRs) whose destination is no longer wanted at all; routes
// elsewhere (the default route, the node network, anything an
// administrator added) are never removed.
func DiffRoutes(current, desired []Route, clusterCIDRs []netip.Prefix) (add, del []Route) {
	have := map[Route]bool{}
	for _, r := range current {
		have[r] = true
	}
	wantDst := map[netip.Prefix]bool{}
	for _, r := range desired {
		wantDst[r.Dst] = true
		if !have[r] {
			add = append(add, r)
		}
	}
	for _, r := range current {
		if wantDst[r.Dst] || !insideAny(r.Dst, clusterCIDRs) {
			continue
		}
		del = append(del, r)
	}
	sortRoutes(add)
	sortRoutes(del)
	return add, del
}

func insideAny(p netip.Prefix, cidrs []netip.Prefix) bool {
	for _, c := range cidrs {
		if c.Addr().Is4() == p.Addr().Is4() && p.Bits() >= c.Bits() && c.Contains(p.Addr()) {
			return true
		}
	}
	return false
}
