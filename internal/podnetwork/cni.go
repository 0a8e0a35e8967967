package podnetwork

import (
	"encoding/json"
	"fmt"
	"net/netip"
)

// CNI configuration written into every node container.
const (
	// CNIConfigPath is where the node's CNI configuration is written; the
	// node image's containerd reads /etc/cni/net.d and runs the plugins in
	// /opt/cni/bin.
	CNIConfigPath = "/etc/cni/net.d/10-capct.conflist"
	// CNINetworkName is the name of the CNI network. host-local keeps its
	// allocations in a folder named after it, and CAPCT's earlier
	// configuration (a bridge plugin, bridge capct0) used the same name
	// and IPAM: a node that runs pods on that configuration when the
	// manager rewrites it to ptp keeps allocating from the same state, so
	// its new pods never get an address a bridge pod still holds, and the
	// DEL of a bridge pod (run with the new configuration) releases its
	// address there. Changing the name would lose both. legacyBridge
	// says how the two kinds of pods reach each other meanwhile.
	CNINetworkName = "capct"
)

// NodeCNIPlugins returns the CNI plugins a node image must have in
// /opt/cni/bin, sorted: those of CNIConfig (ptp, host-local, portmap) and
// loopback, which containerd's CRI runs to bring up each pod's lo. They are
// exactly what kind's node images (kindest/node) ship, so a cluster can run
// on those as well as on CAPCT's own node image, which ships only these.
func NodeCNIPlugins() []string {
	return []string{"host-local", "loopback", "portmap", "ptp"}
}

type cniConfList struct {
	CNIVersion string `json:"cniVersion"`
	Name       string `json:"name"`
	Plugins    []any  `json:"plugins"`
}

type ptpPlugin struct {
	Type   string   `json:"type"`
	MTU    int      `json:"mtu,omitempty"`
	IPMasq bool     `json:"ipMasq"`
	IPAM   hostIPAM `json:"ipam"`
}

type hostIPAM struct {
	Type   string           `json:"type"`
	Ranges [][]hostRange    `json:"ranges"`
	Routes []map[string]any `json:"routes"`
}

type hostRange struct {
	Subnet string `json:"subnet"`
}

type portmapPlugin struct {
	Type         string          `json:"type"`
	Capabilities map[string]bool `json:"capabilities"`
}

// CNIConfig returns the CNI configuration list of a node whose pod CIDRs
// are podCIDRs (one per family, primary family first): ptp with host-local
// IPAM over exactly those CIDRs and a default route per family, then
// portmap for hostPort.
//
// ptp gives each pod a veth pair: the pod's end holds its address and
// routes everything through the range's first address, which the node's
// end holds as a /32 (/128); the node reaches the pod through a host route
// ("10.244.0.5 dev vethXXXX scope host"), which carries no gateway, so
// ParseRoutes ignores it and a sync never touches it. Pods on the same node
// talk through the node's routing, not a bridge, so no bridge plugin is
// needed: kind's node images lack it.
//
// mtu, when not 0, is the pods' MTU, set on both ends of each veth: a node
// on an overlay network carries smaller frames than the veth's default of
// 1500, and pods that sent larger ones would rely on path MTU discovery,
// which a datagram without retries does not survive. The output is
// deterministic, so it can be compared with what the node already has.
func CNIConfig(podCIDRs []netip.Prefix, mtu int) ([]byte, error) {
	if len(podCIDRs) == 0 {
		return nil, fmt.Errorf("failed to render the CNI config: no pod CIDRs")
	}
	ipam := hostIPAM{Type: "host-local"}
	for _, p := range podCIDRs {
		if !p.IsValid() {
			return nil, fmt.Errorf("failed to render the CNI config: invalid pod CIDR %s", p)
		}
		ipam.Ranges = append(ipam.Ranges, []hostRange{{Subnet: p.Masked().String()}})
		dst := "0.0.0.0/0"
		if !p.Addr().Is4() {
			dst = "::/0"
		}
		ipam.Routes = append(ipam.Routes, map[string]any{"dst": dst})
	}
	conf := cniConfList{
		CNIVersion: "1.0.0",
		Name:       CNINetworkName,
		Plugins: []any{
			// No ipMasq: it would masquerade pod-to-pod traffic across
			// nodes too. ProbeCommand programs the narrower rule.
			ptpPlugin{Type: "ptp", MTU: mtu, IPMasq: false, IPAM: ipam},
			portmapPlugin{Type: "portmap", Capabilities: map[string]bool{"portMappings": true}},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("failed to render the CNI config: %w", err)
	}
	return append(b, '\n'), nil
}
