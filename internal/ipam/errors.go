package ipam

import "errors"

// The sentinel errors below are wrapped, never returned bare, so that the
// message can name the CIDR and owner while callers still use errors.Is.
var (
	// ErrExhausted means a family has no free node subnet left. The
	// controller reports it as PodCIDRAllocated=False, reason Exhausted,
	// rather than retrying hot: only a release or a bigger range helps.
	ErrExhausted = errors.New("pod CIDR range exhausted")

	// ErrOutOfRange means a CIDR is not inside the cluster CIDR of its
	// family, or there is no cluster CIDR of its family at all.
	ErrOutOfRange = errors.New("pod CIDR out of range")

	// ErrConflict means a CIDR overlaps another owner's allocation, or an
	// owner claims a CIDR other than the one it already holds.
	ErrConflict = errors.New("pod CIDR conflict")

	// ErrInvalidConfig means the Config cannot describe a usable pod
	// network.
	ErrInvalidConfig = errors.New("invalid pod CIDR allocator config")

	// ErrInvalidArgument means a call got an empty owner, an invalid
	// (e.g. zero-value) prefix, or a malformed list of CIDRs.
	ErrInvalidArgument = errors.New("invalid argument")
)
