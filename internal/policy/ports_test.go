package policy

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

func TestHostListenAddress(t *testing.T) {
	loopback := DefaultHostListenAddresses
	testCases := []struct {
		name    string
		allowed []string
		addr    string
		want    string
	}{
		{name: "no list allows any address", addr: "0.0.0.0", want: ""},
		{name: "no list still wants an address", addr: "localhost", want: "must be an IPv4 or IPv6 address"},
		{name: "the IPv4 loopback by default", allowed: loopback, addr: "127.0.0.1", want: ""},
		{name: "the IPv6 loopback by default", allowed: loopback, addr: "::1", want: ""},
		{name: "the IPv6 loopback written long", allowed: loopback, addr: "0:0:0:0:0:0:0:1", want: ""},
		{name: "every IPv4 interface", allowed: loopback, addr: "0.0.0.0", want: "--allowed-host-listen-addresses"},
		{name: "every interface", allowed: loopback, addr: "::", want: "not allowed (127.0.0.1, ::1)"},
		{name: "another loopback address", allowed: loopback, addr: "127.0.0.2", want: "not allowed"},
		{name: "an interface's address", allowed: loopback, addr: "192.168.1.10", want: "not allowed"},
		{name: "an interface's address when listed", allowed: []string{"192.168.1.10"}, addr: "192.168.1.10", want: ""},
		{name: "the IPv4 loopback written as IPv6", allowed: []string{"::1"}, addr: "::ffff:127.0.0.1", want: "written as the IPv4 address 127.0.0.1"},
		{name: "a zone", addr: "fe80::1%eth0", want: "must not name a zone"},
		{name: "leading zeros", addr: "127.000.000.001", want: "must be an IPv4 or IPv6 address"},
		{name: "an empty list forbids every address", allowed: []string{}, addr: "127.0.0.1", want: "(none)"},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			p := &Policy{HostListenAddresses: tc.allowed}
			check(t, p.HostListenAddress(fld, tc.addr), tc.want)
		})
	}
}

func TestHostPort(t *testing.T) {
	testCases := []struct {
		name string
		min  int
		port int32
		want string
	}{
		{name: "no minimum", port: 22, want: ""},
		{name: "the default minimum itself", min: DefaultMinHostPort, port: 1024, want: ""},
		{name: "http below the default", min: DefaultMinHostPort, port: 80, want: "--min-host-port"},
		{name: "ssh below the default", min: DefaultMinHostPort, port: 22, want: "below 1024"},
		{name: "a lowered minimum", min: 80, port: 80, want: ""},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			p := &Policy{MinHostPort: tc.min}
			check(t, p.HostPort(fld, tc.port), tc.want)
		})
	}
}

func TestHostPortsOverlap(t *testing.T) {
	pm := func(addr string, port int32, proto infrav1.PortProtocol) infrav1.PortMapping {
		return infrav1.PortMapping{ListenAddress: addr, HostPort: port, ContainerPort: 30080, Protocol: proto}
	}
	testCases := []struct {
		name string
		a, b infrav1.PortMapping
		want bool
	}{
		{name: "the same", a: pm("127.0.0.1", 8080, "TCP"), b: pm("127.0.0.1", 8080, "TCP"), want: true},
		{name: "the defaults are 127.0.0.1 and TCP", a: pm("", 8080, ""), b: pm("127.0.0.1", 8080, "TCP"), want: true},
		{name: "another port", a: pm("127.0.0.1", 8080, "TCP"), b: pm("127.0.0.1", 8081, "TCP")},
		{name: "another protocol", a: pm("127.0.0.1", 8080, "TCP"), b: pm("127.0.0.1", 8080, "UDP")},
		{name: "another address", a: pm("127.0.0.1", 8080, "TCP"), b: pm("127.0.0.2", 8080, "TCP")},
		{name: "one address written two ways", a: pm("::1", 8080, "TCP"), b: pm("0::1", 8080, "TCP"), want: true},
		{name: "every IPv4 address", a: pm("0.0.0.0", 8080, "TCP"), b: pm("192.0.2.1", 8080, "TCP"), want: true},
		{name: "every IPv4 address and an IPv6 one", a: pm("0.0.0.0", 8080, "TCP"), b: pm("::1", 8080, "TCP")},
		{name: "every address of both families", a: pm("127.0.0.1", 8080, "TCP"), b: pm("::", 8080, "TCP"), want: true},
		{name: "the loopbacks of both families", a: pm("127.0.0.1", 8080, "TCP"), b: pm("::1", 8080, "TCP")},
		{name: "what does not parse, as written", a: pm("x", 8080, "TCP"), b: pm("x", 8080, "TCP"), want: true},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := HostPortsOverlap(tc.a, tc.b); got != tc.want {
				t.Fatalf("HostPortsOverlap(%s, %s) = %v, want %v", Describe(tc.a), Describe(tc.b), got, tc.want)
			}
			if got := HostPortsOverlap(tc.b, tc.a); got != tc.want {
				t.Fatalf("HostPortsOverlap is not symmetric for %s and %s", Describe(tc.a), Describe(tc.b))
			}
		})
	}
}

// TestPortMappingsOfAMachine: beside each mapping's address and port, two
// mappings of one machine may not take one host port, however they write
// it, and an update checks only the mappings it adds.
func TestPortMappingsOfAMachine(t *testing.T) {
	p := Default()
	spec := &infrav1.ContainerMachineSpec{ExtraPortMappings: []infrav1.PortMapping{
		{ListenAddress: "127.0.0.1", HostPort: 8080, ContainerPort: 30080},
		{ListenAddress: "0.0.0.0", HostPort: 8443, ContainerPort: 30443},
		{ListenAddress: "::1", HostPort: 80, ContainerPort: 30081},
		{ListenAddress: "0::1", HostPort: 80, ContainerPort: 30082},
		{HostPort: 8080, ContainerPort: 30083, Protocol: infrav1.ProtocolUDP},
	}}
	errs := p.MachineSpec(field.NewPath("spec"), spec, nil)
	wantFields(t, errs, "spec.extraPortMappings[1].listenAddress", "spec.extraPortMappings[2].hostPort",
		"spec.extraPortMappings[3].hostPort", "spec.extraPortMappings[3]")
	if !strings.Contains(errs[3].Error(), "publishes host port [0::1]:80/TCP, as spec.extraPortMappings[2] does") {
		t.Fatalf("the duplicate does not say which mapping it repeats: %v", errs[3])
	}

	admitted := spec.DeepCopy()
	admitted.ExtraPortMappings = admitted.ExtraPortMappings[:3]
	if errs := p.MachineSpec(field.NewPath("spec"), admitted, admitted.DeepCopy()); len(errs) != 0 {
		t.Fatalf("an unchanged spec was refused: %v", errs)
	}
	if errs := (&Policy{}).MachineSpec(field.NewPath("spec"), spec, nil); len(errs) != 1 || errs[0].Type != field.ErrorTypeDuplicate {
		t.Fatalf("the zero policy: want only the duplicate, which no flag allows, got %v", errs)
	}
}

// TestALoadBalancerListensWhereThePolicyAllows: a load balancer's address
// is checked as a machine's, but its default stays allowed whatever the
// flag, also when written out.
func TestALoadBalancerListensWhereThePolicyAllows(t *testing.T) {
	none := &Policy{HostListenAddresses: []string{}}
	testCases := []struct {
		name string
		p    *Policy
		addr string
		want []string
	}{
		{name: "the default", p: none, addr: ""},
		{name: "the default written out", p: none, addr: "127.0.0.1"},
		{name: "the IPv6 loopback when no address is allowed", p: none, addr: "::1", want: []string{"spec.loadBalancer.listenAddress"}},
		{name: "the IPv6 loopback by default", p: ptrTo(Default()), addr: "::1"},
		{name: "every interface by default", p: ptrTo(Default()), addr: "0.0.0.0", want: []string{"spec.loadBalancer.listenAddress"}},
		{name: "a name", p: &Policy{}, addr: "localhost", want: []string{"spec.loadBalancer.listenAddress"}},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			spec := &infrav1.ContainerClusterSpec{LoadBalancer: infrav1.LoadBalancerSpec{ListenAddress: tc.addr}}
			wantFields(t, tc.p.ClusterSpec(field.NewPath("spec"), spec, nil), tc.want...)
			err := tc.p.CheckCluster(spec, "capct/haproxy:2.6")
			if (err != nil) != (len(tc.want) > 0) || err != nil && !IsViolation(err) {
				t.Fatalf("at launch: %v", err)
			}
		})
	}
}

// TestLaunchChecksPorts: the launch path checks every mapping again, so
// that a mapping admitted under looser flags is not published under
// tighter ones.
func TestLaunchChecksPorts(t *testing.T) {
	spec := &infrav1.ContainerMachineSpec{ExtraPortMappings: []infrav1.PortMapping{{ListenAddress: "0.0.0.0", HostPort: 80, ContainerPort: 30080}}}
	if err := (&Policy{}).CheckMachine(spec, "capct/node:v1.35.4"); err != nil {
		t.Fatalf("admitted with every address and port allowed: %v", err)
	}
	err := Default().CheckMachine(spec, "capct/node:v1.35.4")
	if !IsViolation(err) || !strings.Contains(err.Error(), "spec.extraPortMappings[0].listenAddress") ||
		!strings.Contains(err.Error(), "spec.extraPortMappings[0].hostPort") || !strings.Contains(err.Error(), "--min-host-port") {
		t.Fatalf("want a Violation naming both fields and the flag, got %v", err)
	}
}
