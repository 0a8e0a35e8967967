// Ports: the engine's refusals of a fixed host port, told apart from those
// of a static address and read for the port they name.

package docker

import (
	"net"
	"regexp"
	"strconv"
	"strings"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// isHostPortInUse recognises the engines' refusals of a fixed host port at
// start, which come with the status codes of other errors:
//
//   - Docker, held by another container: "Bind for 127.0.0.1:8080 failed:
//     port is already allocated";
//   - Docker's userland proxy and Podman, held by a program of the host:
//     "listen tcp4 127.0.0.1:8080: bind: address already in use";
//   - Docker 25 and later: "failed to bind host port for
//     127.0.0.1:8080:172.18.0.2:80/tcp: address already in use".
//
// A static address held by another container is "Address already in use"
// alone, without bind or listen.
func isHostPortInUse(err error) bool {
	m := strings.ToLower(err.Error())
	return strings.Contains(m, "port is already allocated") || strings.Contains(m, "failed to bind host port") ||
		strings.Contains(m, "address already in use") && (strings.Contains(m, "bind: ") || strings.Contains(m, "listen "))
}

var (
	// bindFailed is Docker's port allocator: an IPv6 address is written
	// without brackets, so the port is what follows the last colon.
	bindFailed = regexp.MustCompile(`Bind for (\S+):(\d+) failed`)
	// listenFailed is a listen(2) that failed, as Go writes it.
	listenFailed = regexp.MustCompile(`listen (tcp|udp|sctp)[46]? (\S+): bind: address already in use`)
	// bindHostPortFailed is Docker 25's: host address, port, container
	// address and port, protocol.
	bindHostPortFailed = regexp.MustCompile(`failed to bind host port for (\[[^\]]*\]|[0-9.]+):(\d+):\S*/(tcp|udp|sctp)`)
)

// hostPortInUse reads which port the engine's refusal err names, as far as
// it says, into a *container.HostPortInUseError wrapping err.
func hostPortInUse(err error) error {
	e := &container.HostPortInUseError{Err: err}
	msg := err.Error()
	if m := bindFailed.FindStringSubmatch(msg); m != nil {
		e.HostIP = strings.Trim(m[1], "[]")
		e.HostPort, _ = strconv.Atoi(m[2])
	} else if m := listenFailed.FindStringSubmatch(msg); m != nil {
		e.Protocol = m[1]
		if host, port, serr := net.SplitHostPort(m[2]); serr == nil {
			e.HostIP = host
			e.HostPort, _ = strconv.Atoi(port)
		}
	} else if m := bindHostPortFailed.FindStringSubmatch(msg); m != nil {
		e.HostIP = strings.Trim(m[1], "[]")
		e.HostPort, _ = strconv.Atoi(m[2])
		e.Protocol = m[3]
	}
	return e
}
