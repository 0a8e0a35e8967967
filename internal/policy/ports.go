package policy

import (
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// DefaultHostListenAddresses are the host addresses that ports may be
// published on when --allowed-host-listen-addresses is not given: the
// loopback ones, which only the container host itself reaches. Any other
// address opens the host, and the workload behind the port, to a network,
// which is the admin's call and not a tenant's.
var DefaultHostListenAddresses = []string{"127.0.0.1", "::1"}

// DefaultMinHostPort is the lowest host port a machine may publish when
// --min-host-port is not given: ports below it are the host's privileged
// ones, where its own services (ssh on 22, DNS on 53, a web server on 80)
// listen, and binding one is a right the host gives root alone.
const DefaultMinHostPort = 1024

// HostListenAddress decides whether a port may be published on the host
// address addr, and refuses what is not an address the engine would bind.
func (p Policy) HostListenAddress(fld *field.Path, addr string) *field.Error {
	a, err := ListenAddress(fld, addr)
	if err != nil {
		return err
	}
	if p.HostListenAddresses == nil {
		return nil
	}
	for _, allowed := range p.HostListenAddresses {
		if b, perr := netip.ParseAddr(strings.TrimSpace(allowed)); perr == nil && b.Unmap() == a {
			return nil
		}
	}
	return field.Forbidden(fld, fmt.Sprintf("host address %s is not allowed (%s): the manager's --%s decides",
		addr, listOrNone(p.HostListenAddresses), FlagAllowedHostListenAddresses))
}

// HostPort decides whether a machine may publish the host port port.
func (p Policy) HostPort(fld *field.Path, port int32) *field.Error {
	if int(port) >= p.MinHostPort {
		return nil
	}
	return field.Forbidden(fld, fmt.Sprintf("host port %d is below %d, the lowest the manager's --%s allows: the ports below 1024 are the host's own services'",
		port, p.MinHostPort, FlagMinHostPort))
}

// ListenAddress parses a host address to publish a port on. It refuses a
// name (the engine binds addresses, and a name could resolve anywhere), a
// zone, and an IPv4 address written as IPv6, which would slip past a list
// of allowed IPv4 addresses.
func ListenAddress(fld *field.Path, addr string) (netip.Addr, *field.Error) {
	a, err := netip.ParseAddr(addr)
	switch {
	case err != nil:
		return netip.Addr{}, field.Invalid(fld, addr, "must be an IPv4 or IPv6 address")
	case a.Zone() != "":
		return netip.Addr{}, field.Invalid(fld, addr, "must not name a zone")
	case a.Is4In6():
		return netip.Addr{}, field.Invalid(fld, addr, "must be written as the IPv4 address "+a.Unmap().String())
	}
	return a, nil
}

// PortMappings refuses mappings of one machine at fld that publish the same
// host port twice: the CRD keeps (listenAddress, hostPort, protocol)
// unique as written, but ::1 and 0::1 are one address, and 0.0.0.0 takes a
// port on every IPv4 address. Unparsable addresses are left to
// HostListenAddress.
func PortMappings(fld *field.Path, mappings []infrav1.PortMapping) field.ErrorList {
	var errs field.ErrorList
	for j := range mappings {
		for i := range j {
			if HostPortsOverlap(mappings[i], mappings[j]) {
				errs = append(errs, field.Duplicate(fld.Index(j), fmt.Sprintf("publishes host port %s, as %s does",
					Describe(mappings[j]), fld.Index(i))))
				break
			}
		}
	}
	return errs
}

// HostPortsOverlap reports whether a and b cannot both be published on one
// host: the same port and protocol on the same address, or on an address
// and the unspecified address of its family (0.0.0.0 takes the port on
// every IPv4 address). The engine binds :: for both families, so :: meets
// every address.
func HostPortsOverlap(a, b infrav1.PortMapping) bool {
	if a.HostPort != b.HostPort || a.EffectiveProtocol() != b.EffectiveProtocol() {
		return false
	}
	x, errx := netip.ParseAddr(a.EffectiveListenAddress())
	y, erry := netip.ParseAddr(b.EffectiveListenAddress())
	if errx != nil || erry != nil {
		return a.EffectiveListenAddress() == b.EffectiveListenAddress()
	}
	x, y = x.Unmap(), y.Unmap()
	switch {
	case x == y:
		return true
	case x.IsUnspecified() && x.Is6(), y.IsUnspecified() && y.Is6():
		return true
	case x.IsUnspecified():
		return y.Is4()
	case y.IsUnspecified():
		return x.Is4()
	}
	return false
}

// Describe writes a mapping's host side as messages show it:
// 127.0.0.1:8080/TCP, [::1]:8080/UDP.
func Describe(m infrav1.PortMapping) string {
	addr := m.EffectiveListenAddress()
	if strings.Contains(addr, ":") {
		addr = "[" + addr + "]"
	}
	return fmt.Sprintf("%s:%d/%s", addr, m.HostPort, m.EffectiveProtocol())
}
