package container

import (
	"errors"
	"strings"
	"testing"
)

// TestHostPortInUseMatches: a refusal names a mapping when it names its
// host side, and when the engine left a part out or bound every address.
func TestHostPortInUseMatches(t *testing.T) {
	mapping := PortMapping{ContainerPort: 30080, HostPort: 8080}
	testCases := []struct {
		name    string
		refused HostPortInUseError
		mapping PortMapping
		want    bool
	}{
		{name: "the defaults", refused: HostPortInUseError{HostIP: "127.0.0.1", HostPort: 8080, Protocol: "tcp"}, mapping: mapping, want: true},
		{name: "nothing named", refused: HostPortInUseError{}, mapping: mapping, want: true},
		{name: "another port", refused: HostPortInUseError{HostIP: "127.0.0.1", HostPort: 8081}, mapping: mapping},
		{name: "another protocol", refused: HostPortInUseError{HostPort: 8080, Protocol: "udp"}, mapping: mapping},
		{name: "another address", refused: HostPortInUseError{HostIP: "127.0.0.2", HostPort: 8080}, mapping: mapping},
		{name: "every address held", refused: HostPortInUseError{HostIP: "0.0.0.0", HostPort: 8080}, mapping: mapping, want: true},
		{name: "every address asked", refused: HostPortInUseError{HostIP: "192.0.2.1", HostPort: 8080},
			mapping: PortMapping{HostIP: "::", HostPort: 8080}, want: true},
		{name: "one address written two ways", refused: HostPortInUseError{HostIP: "0:0::1", HostPort: 8080},
			mapping: PortMapping{HostIP: "::1", HostPort: 8080}, want: true},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.refused.Matches(tc.mapping); got != tc.want {
				t.Fatalf("%v matches %+v: %v, want %v", &tc.refused, tc.mapping, got, tc.want)
			}
		})
	}
}

func TestHostPortInUseIsTyped(t *testing.T) {
	cause := errors.New("Bind for [::1]:8080 failed: port is already allocated")
	err := NewError("start", "container", "demo-md-0", KindHostPortInUse, &HostPortInUseError{HostIP: "::1", HostPort: 8080, Protocol: "tcp", Err: cause})
	e, ok := HostPortInUse(err)
	if !ok || !IsHostPortInUse(err) || IsInUse(err) || !errors.Is(err, cause) {
		t.Fatalf("not typed as a host port in use: %v", err)
	}
	if !strings.Contains(err.Error(), `failed to start container "demo-md-0": host port [::1]:8080/tcp is in use`) {
		t.Fatalf("the message does not name the port: %v", err)
	}
	if e.HostPort != 8080 {
		t.Fatalf("%+v", e)
	}
}
