package registryconfig

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/provisioning"
)

// The files that give a node's containerd and kubelet the proxy settings:
// one environment file (it may hold a proxy's credentials: root only) and
// a systemd drop-in per unit that reads it. A unit's EnvironmentFile wins
// over systemd's DefaultEnvironment, which kind's entrypoint fills from the
// container's own environment.
const (
	ProxyEnvPath           = "/etc/capct/proxy.env"
	ContainerdDropInPath   = "/etc/systemd/system/containerd.service.d/20-capct-proxy.conf"
	KubeletDropInPath      = "/etc/systemd/system/kubelet.service.d/20-capct-proxy.conf"
	defaultServiceDomain   = "cluster.local"
	proxyEnvHeader         = "# Written by CAPCT from its manager's proxy settings when this node was made\n# (docs/registries.md).\n"
	proxyDropInDescription = "# Written by CAPCT: the manager's proxy settings (docs/registries.md).\n"
)

// restartContainerd makes containerd, which runs already when the
// bootstrap starts, read its new drop-in. The kubelet reads its own at its
// next start: kubeadm starts it with the configuration it writes.
var restartContainerd = []string{"/bin/sh", "-c", "systemctl daemon-reload && systemctl restart containerd.service"}

// Proxy is the proxy environment a node's containerd and kubelet get.
type Proxy struct {
	// HTTPProxy and HTTPSProxy are proxy URLs; either may be empty. They
	// may hold credentials.
	HTTPProxy, HTTPSProxy string
	// NoProxy are the entries of the manager's NO_PROXY.
	NoProxy []string
}

// IsZero reports whether there is no proxy: NO_PROXY alone changes nothing.
func (p Proxy) IsZero() bool { return p.HTTPProxy == "" && p.HTTPSProxy == "" }

// ProxyFromEnvironment reads the manager's HTTP_PROXY, HTTPS_PROXY and
// NO_PROXY through lookup (os.LookupEnv), each upper-case name first, then
// its lower-case form, as Go's net/http reads them.
func ProxyFromEnvironment(lookup func(string) (string, bool)) Proxy {
	get := func(name string) string {
		if v, ok := lookup(name); ok && v != "" {
			return v
		}
		v, _ := lookup(strings.ToLower(name))
		return v
	}
	return Proxy{
		HTTPProxy:  strings.TrimSpace(get("HTTP_PROXY")),
		HTTPSProxy: strings.TrimSpace(get("HTTPS_PROXY")),
		NoProxy:    splitList(get("NO_PROXY")),
	}
}

// splitList splits a NO_PROXY value at its commas, dropping empty entries.
func splitList(v string) []string {
	var out []string
	for e := range strings.SplitSeq(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// NoProxy is the NO_PROXY of a cluster's nodes: the manager's entries,
// then what must never go through a proxy: the node itself, the API
// server's endpoint, the cluster's service and pod CIDRs, the nodes'
// network (subnets; invalid ones are skipped) and the cluster's service
// names. Each entry once, in that order.
func NoProxy(manager []string, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster, subnets ...netip.Prefix) []string {
	out := append([]string(nil), manager...)
	out = append(out, "localhost", "127.0.0.1", "::1")
	if cc != nil && cc.Spec.ControlPlaneEndpoint.Host != "" {
		out = append(out, cc.Spec.ControlPlaneEndpoint.Host)
	}
	domain := defaultServiceDomain
	if cluster != nil {
		n := cluster.Spec.ClusterNetwork
		out = append(out, n.Services.CIDRBlocks...)
		out = append(out, n.Pods.CIDRBlocks...)
		if n.ServiceDomain != "" {
			domain = n.ServiceDomain
		}
	}
	for _, s := range subnets {
		if s.IsValid() {
			out = append(out, s.Masked().String())
		}
	}
	out = append(out, ".svc", "."+domain)
	seen := map[string]bool{}
	uniq := out[:0]
	for _, e := range out {
		if !seen[e] {
			seen[e] = true
			uniq = append(uniq, e)
		}
	}
	return uniq
}

// ProxySteps returns the steps that give a node's containerd and kubelet
// p, with noProxy (NoProxy) as NO_PROXY: the environment file, the
// drop-ins, and the restart of containerd. No proxy: no steps. A value
// with a character that an environment file would not carry as it is
// (quotes, backslashes, $, #, spaces, control characters) is an error
// naming the variable, never the value.
func ProxySteps(p Proxy, noProxy []string) ([]provisioning.Step, error) {
	if p.IsZero() {
		return nil, nil
	}
	var env strings.Builder
	env.WriteString(proxyEnvHeader)
	add := func(name, value string) error {
		if value == "" {
			return nil
		}
		if err := checkEnvValue(value); err != nil {
			return fmt.Errorf("%w: the manager's %s %w", ErrInvalid, name, err)
		}
		// Both forms: curl and some Go programs read only one of them.
		fmt.Fprintf(&env, "%s=\"%s\"\n%s=\"%s\"\n", name, value, strings.ToLower(name), value)
		return nil
	}
	if err := add("HTTP_PROXY", p.HTTPProxy); err != nil {
		return nil, err
	}
	if err := add("HTTPS_PROXY", p.HTTPSProxy); err != nil {
		return nil, err
	}
	if err := add("NO_PROXY", strings.Join(noProxy, ",")); err != nil {
		return nil, err
	}
	dropIn := []byte(proxyDropInDescription + "[Service]\nEnvironmentFile=" + ProxyEnvPath + "\n")
	file := func(path string, content []byte, mode os.FileMode) provisioning.Step {
		return provisioning.Step{Description: "write " + path, File: &provisioning.File{Path: path, Content: content, Mode: mode}}
	}
	return []provisioning.Step{
		file(ProxyEnvPath, []byte(env.String()), 0o600),
		file(ContainerdDropInPath, dropIn, 0o644),
		file(KubeletDropInPath, dropIn, 0o644),
		{Description: "restart containerd with the proxy settings", Command: append([]string(nil), restartContainerd...)},
	}, nil
}

// checkEnvValue accepts the characters of URLs, host names, CIDRs and
// lists of them: what a double-quoted value of a systemd environment file
// carries as it is. The error does not say which character it refused:
// the value may be a password.
func checkEnvValue(v string) error {
	for _, r := range v {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("-._~:/?[]@!&()*+,=%", r):
		default:
			return errors.New("holds a character other than letters, digits and -._~:/?[]@!&()*+,=% " +
				"(a quote, backslash, $, #, space, control or non-ASCII character), which an environment file " +
				"does not carry as it is; percent-encode it")
		}
	}
	return nil
}
