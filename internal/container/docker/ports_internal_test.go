package docker

import (
	"errors"
	"testing"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// TestEngineRefusalsOfAHostPortAreToldFromThoseOfAnAddress: the engines'
// refusals of a fixed host port are HostPortInUse, naming the port when the
// message does, and their refusals of a static address stay InUse, which
// makes CAPCT pick another address; another address would never free a
// host port.
func TestEngineRefusalsOfAHostPortAreToldFromThoseOfAnAddress(t *testing.T) {
	testCases := []struct {
		name     string
		msg      string
		want     container.ErrorKind
		hostIP   string
		hostPort int
		protocol string
	}{
		{name: "Docker 20.10, held by a container",
			msg:  "Error response from daemon: driver failed programming external connectivity on endpoint demo-md-0 (0123abcd): Bind for 127.0.0.1:8080 failed: port is already allocated",
			want: container.KindHostPortInUse, hostIP: "127.0.0.1", hostPort: 8080},
		{name: "Docker 20.10, IPv6, held by a container",
			msg:  "driver failed programming external connectivity on endpoint x (y): Bind for ::1:8443 failed: port is already allocated",
			want: container.KindHostPortInUse, hostIP: "::1", hostPort: 8443},
		{name: "Docker's userland proxy, held by a program",
			msg:  "driver failed programming external connectivity on endpoint x (y): Error starting userland proxy: listen tcp4 0.0.0.0:8080: bind: address already in use",
			want: container.KindHostPortInUse, hostIP: "0.0.0.0", hostPort: 8080, protocol: "tcp"},
		{name: "Docker 25",
			msg:  "failed to set up container networking: driver failed programming external connectivity on endpoint x (y): failed to bind host port for 127.0.0.1:5353:172.18.0.2:53/udp: address already in use",
			want: container.KindHostPortInUse, hostIP: "127.0.0.1", hostPort: 5353, protocol: "udp"},
		{name: "Podman",
			msg:  `unable to start container "abc": cannot listen on the UDP port: listen udp6 [::1]:8080: bind: address already in use`,
			want: container.KindHostPortInUse, hostIP: "::1", hostPort: 8080, protocol: "udp"},
		{name: "a refusal that names no port",
			msg:  "something: port is already allocated",
			want: container.KindHostPortInUse},
		{name: "Docker, a static address",
			msg:  "Error response from daemon: Address already in use",
			want: container.KindInUse},
		{name: "Podman, a static address",
			msg:  "requested ip address 172.30.16.5 is already allocated to container ID 0123",
			want: container.KindInUse},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			err := wrap("start", "container", "demo-md-0", errors.New(tc.msg))
			if got := container.KindOf(err); got != tc.want {
				t.Fatalf("kind %s, want %s: %v", got, tc.want, err)
			}
			e, ok := container.HostPortInUse(err)
			if ok != (tc.want == container.KindHostPortInUse) {
				t.Fatalf("HostPortInUse = %v for %v", ok, err)
			}
			if !ok {
				return
			}
			if e.HostIP != tc.hostIP || e.HostPort != tc.hostPort || e.Protocol != tc.protocol {
				t.Fatalf("read %q %d %q, want %q %d %q", e.HostIP, e.HostPort, e.Protocol, tc.hostIP, tc.hostPort, tc.protocol)
			}
			if !errors.Is(err, errors.Unwrap(e)) {
				t.Fatalf("the engine's refusal is not in the chain: %v", err)
			}
		})
	}
}
