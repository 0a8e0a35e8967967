package podnetwork

import (
	"encoding/json"
	"fmt"
	"net/netip"
)

// CNI configuration written into every node container.
const (
	// CNIConfigPath is where the node's CNI configuration is written; the
	// node image's containerd reads /etc/cni/net.d and runs the plugins of
	// Debian's containernetworking-plugins from /opt/cni/bin.
	CNIConfigPath = "/etc/cni/net.d/10-capct.conflist"
	// CNINetworkName is the name of the CNI network.
	CNINetworkName = "capct"
	// BridgeName is the Linux bridge the bridge plugin creates on each node.
	BridgeName = "capct0"
)

type cniConfList struct {
	CNIVersion string `json:"cniVersion"`
	Name       string `json:"name"`
	Plugins    []any  `json:"plugins"`
}

type bridgePlugin struct {
	Type        string   `json:"type"`
	Bridge      string   `json:"bridge"`
	MTU         int      `json:"mtu,omitempty"`
	IsGateway   bool     `json:"isGateway"`
	IPMasq      bool     `json:"ipMasq"`
	HairpinMode bool     `json:"hairpinMode"`
	IPAM        hostIPAM `json:"ipam"`
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
// are podCIDRs (one per family, primary family first): a bridge with
// host-local IPAM over exactly those CIDRs, a default route per family
// through the bridge, and portmap for hostPort. mtu, when not 0, is the
// pods' MTU: a node on an overlay network carries smaller frames than the
// bridge's default, and pods that sent larger ones would rely on path MTU
// discovery, which a datagram without retries does not survive. The output
// is deterministic, so it can be compared with what the node already has.
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
			// nodes too. MasqueradeCommand programs the narrower rule.
			bridgePlugin{Type: "bridge", Bridge: BridgeName, MTU: mtu, IsGateway: true, IPMasq: false, HairpinMode: true, IPAM: ipam},
			portmapPlugin{Type: "portmap", Capabilities: map[string]bool{"portMappings": true}},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("failed to render the CNI config: %w", err)
	}
	return append(b, '\n'), nil
}
