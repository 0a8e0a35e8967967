// Package ipam hands each CAPCT node (a container) a slice of the cluster's
// pod network, the job kube-controller-manager's range allocator does for
// ordinary clusters.
//
// # Model
//
// The cluster's pod network is one CIDR per IP family (IPv4, IPv6 or dual
// stack). Each family is cut into equal node subnets of a fixed mask size
// (default /24 for IPv4 and /64 for IPv6) and tracked by a [CIDRSet]: a
// bitmap with one bit per node subnet. A bitmap rather than a list of
// prefixes keeps "is this free?" and "find the next free one" to a few word
// operations, so allocating a whole /8 of /24s or rebuilding from thousands
// of records costs milliseconds, and it makes double counting impossible:
// a subnet is either set or not, however many times it is occupied.
//
// An [Allocator] combines one CIDRSet per family with a record of which
// owner (a string such as "namespace/machine-name") holds which CIDRs.
// Keying by owner is what makes Allocate idempotent: a controller that
// retries after a failed status update gets the same CIDRs back instead of
// leaking a second pair.
//
// # Restarts and moves
//
// The allocator keeps no state of its own across restarts. The source of
// truth is the set of allocations recorded on the objects it served, and
// [Rebuild] must replay every one of them before anything new is handed
// out; otherwise a fresh allocation can land on a subnet a running node
// still uses (kubernetes#29058, #96416). Records are replayed in sorted
// owner order so that, when two records claim the same subnet, the winner
// does not depend on map iteration order or on the order objects arrived
// in after a clusterctl move. Bad records are returned as errors and
// skipped: a node whose pod CIDR lies outside the configured range must
// not stop the allocator from serving every other node (kubernetes#82773).
//
// # Errors
//
// Callers branch with errors.Is on [ErrExhausted], [ErrOutOfRange],
// [ErrConflict], [ErrInvalidConfig] and [ErrInvalidArgument]. Every message
// names the CIDR and, where there is one, the owner, because these errors
// end up in conditions and events that a human reads without a debugger.
// Nothing in the package panics on malformed input; zero-value or
// otherwise invalid prefixes are reported as ErrInvalidArgument.
//
// # Concurrency
//
// An Allocator is safe for concurrent use: it holds a mutex, since the
// controller keeps one Allocator per cluster and may reconcile several
// machines of that cluster at once. A CIDRSet on its own is not; it is the
// building block and the Allocator serialises access to it.
//
// Releasing is deliberately left to the caller: the allocator cannot know
// when a node has really gone. The controller must release an owner's
// CIDRs only once the machine's container is gone and its Node object is
// deleted, never when deletion starts (kubernetes#127792).
package ipam
