package container

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// ErrorKind classifies a runtime error so callers can branch on it.
type ErrorKind int

const (
	// KindUnknown is an error that fits no other kind.
	KindUnknown ErrorKind = iota
	// KindNotFound: the container, network or image does not exist.
	KindNotFound
	// KindConflict: the name is taken by an object CAPCT does not own for
	// this caller (foreign labels), or the engine reported a conflict.
	KindConflict
	// KindUnreachable: the engine could not be reached (socket missing,
	// connection refused) or did not answer within the bound of
	// WithCallTimeout.
	KindUnreachable
	// KindTransient: a failure worth retrying as is.
	KindTransient
	// KindTimeout: an Exec outlived its ExecInput.Timeout.
	KindTimeout
	// KindPoolOverlap: the engine refused a network because its subnet
	// overlaps an existing one.
	KindPoolOverlap
	// KindInvalid: the caller passed an invalid argument.
	KindInvalid
	// KindInUse: a static address that the container asks for is held by
	// another one.
	KindInUse
	// KindStaticAddressUnsupported: the network does not take static
	// addresses (Docker takes them only on networks whose subnet was
	// configured by their creator).
	KindStaticAddressUnsupported
	// KindHostPortInUse: a fixed host port that the container publishes is
	// held by another container or a program of the host. Its cause is a
	// *HostPortInUseError.
	KindHostPortInUse
	// KindUnauthorized: a registry refused a pull for want of valid
	// credentials (its 401), none given or wrong ones.
	KindUnauthorized
)

func (k ErrorKind) String() string {
	switch k {
	case KindNotFound:
		return "NotFound"
	case KindConflict:
		return "Conflict"
	case KindUnreachable:
		return "Unreachable"
	case KindTransient:
		return "Transient"
	case KindTimeout:
		return "Timeout"
	case KindPoolOverlap:
		return "PoolOverlap"
	case KindInvalid:
		return "Invalid"
	case KindInUse:
		return "InUse"
	case KindStaticAddressUnsupported:
		return "StaticAddressUnsupported"
	case KindHostPortInUse:
		return "HostPortInUse"
	case KindUnauthorized:
		return "Unauthorized"
	default:
		return "Unknown"
	}
}

// Error is the error every Runtime returns. Its message names the operation
// and the object, e.g. `failed to inspect container "c1-cp-0": ...`, and it
// wraps the cause.
type Error struct {
	// Op is the operation, e.g. "inspect".
	Op string
	// Object is the kind of object, e.g. "container", "network", "image".
	Object string
	// Name names the object.
	Name string
	// Kind classifies the error.
	Kind ErrorKind
	// Err is the cause.
	Err error
}

// NewError returns an *Error.
func NewError(op, object, name string, kind ErrorKind, cause error) *Error {
	return &Error{Op: op, Object: object, Name: name, Kind: kind, Err: cause}
}

func (e *Error) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("failed to %s %s: %v", e.Op, e.Object, e.Err)
	}
	return fmt.Sprintf("failed to %s %s %q: %v", e.Op, e.Object, e.Name, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the kind of the outermost *Error in err's chain, or
// KindUnknown.
func KindOf(err error) ErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindUnknown
}

// IsNotFound reports whether err says the object does not exist.
func IsNotFound(err error) bool { return KindOf(err) == KindNotFound }

// IsConflict reports whether err says the name is taken by an object with
// other owners, or the engine reported a conflict.
func IsConflict(err error) bool { return KindOf(err) == KindConflict }

// IsUnreachable reports whether err says the engine could not be reached or
// did not answer in time. Callers treat it as the engine being away for a
// while: it never counts toward a terminal timeout.
func IsUnreachable(err error) bool { return KindOf(err) == KindUnreachable }

// IsTransient reports whether err is worth retrying as is. An unreachable
// engine and a pool overlap are transient too.
func IsTransient(err error) bool {
	switch KindOf(err) {
	case KindTransient, KindUnreachable, KindPoolOverlap:
		return true
	}
	return false
}

// IsTimeout reports whether err says an Exec outlived its timeout.
func IsTimeout(err error) bool { return KindOf(err) == KindTimeout }

// IsPoolOverlap reports whether err says a network's subnet overlaps an
// existing one.
func IsPoolOverlap(err error) bool { return KindOf(err) == KindPoolOverlap }

// IsInvalid reports whether err says the caller passed an invalid argument.
func IsInvalid(err error) bool { return KindOf(err) == KindInvalid }

// IsInUse reports whether err says a static address is held by another
// container. It is worth retrying with another address, not as is.
func IsInUse(err error) bool { return KindOf(err) == KindInUse }

// IsHostPortInUse reports whether err says a fixed host port the container
// publishes is held by another container or program. Another address does
// not help; the port must be freed, or the container made with another.
func IsHostPortInUse(err error) bool { return KindOf(err) == KindHostPortInUse }

// IsUnauthorized reports whether err says a registry refused a pull for
// want of valid credentials.
func IsUnauthorized(err error) bool { return KindOf(err) == KindUnauthorized }

// HostPortInUseError is the cause of a start that the engine refused
// because a fixed host port of the container is taken. HostIP, HostPort
// and Protocol say which, as far as the engine's message does: zero when it
// does not.
type HostPortInUseError struct {
	HostIP   string
	HostPort int
	// Protocol is "tcp", "udp" or "sctp"; empty when the engine did not say.
	Protocol string
	// Err is the engine's refusal.
	Err error
}

func (e *HostPortInUseError) Error() string {
	port := "a host port"
	if e.HostPort != 0 {
		port = "host port " + net.JoinHostPort(e.HostIP, strconv.Itoa(e.HostPort))
		if e.Protocol != "" {
			port += "/" + e.Protocol
		}
	}
	if e.Err == nil {
		return port + " is in use"
	}
	return fmt.Sprintf("%s is in use: %v", port, e.Err)
}

// Unwrap returns the engine's refusal.
func (e *HostPortInUseError) Unwrap() error { return e.Err }

// HostPortInUse returns the *HostPortInUseError in err's chain.
func HostPortInUse(err error) (*HostPortInUseError, bool) {
	var e *HostPortInUseError
	ok := errors.As(err, &e)
	return e, ok
}

// Matches reports whether the refused port is p's host side, or may be:
// an unknown field of the refusal matches anything, an empty HostIP or
// Protocol of p means its default, and an unspecified address (0.0.0.0,
// ::) on either side matches any address.
func (e *HostPortInUseError) Matches(p PortMapping) bool {
	if e.HostPort != 0 && e.HostPort != p.HostPort {
		return false
	}
	proto := p.Protocol
	if proto == "" {
		proto = "tcp"
	}
	if e.Protocol != "" && e.Protocol != proto {
		return false
	}
	if e.HostIP == "" {
		return true
	}
	hostIP := p.HostIP
	if hostIP == "" {
		hostIP = DefaultHostIP
	}
	a, erra := netip.ParseAddr(e.HostIP)
	b, errb := netip.ParseAddr(hostIP)
	if erra != nil || errb != nil {
		return e.HostIP == hostIP
	}
	return a.Unmap() == b.Unmap() || a.IsUnspecified() || b.IsUnspecified()
}

// IsStaticAddressUnsupported reports whether err says the network does not
// take static addresses.
func IsStaticAddressUnsupported(err error) bool { return KindOf(err) == KindStaticAddressUnsupported }

// HostPathNotFoundError is the cause of a create that the engine refused
// because the host path of a bind mount does not exist. CAPCT asks for bind
// mounts that are never created on the host's behalf: a mistyped path would
// otherwise become an empty, root-owned directory on the host.
type HostPathNotFoundError struct {
	// Path is the host path the engine did not find.
	Path string
}

func (e *HostPathNotFoundError) Error() string {
	return fmt.Sprintf("host path %q does not exist on the container host", e.Path)
}

// HostPathNotFound returns the host path that err says does not exist.
func HostPathNotFound(err error) (string, bool) {
	var e *HostPathNotFoundError
	if errors.As(err, &e) {
		return e.Path, true
	}
	return "", false
}
