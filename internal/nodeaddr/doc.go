// Package nodeaddr gives every CAPCT container (node or load balancer) a
// fixed address per IP family on its cluster network, so that a container
// the engine restarts comes back on the address that etcd, the API server's
// certificates and the load balancer's configuration already name.
//
// # Model
//
// A network family is its subnet, its gateway and, optionally, the range
// the engine keeps for its own dynamic allocation. [Pick] returns the
// lowest address of the subnet that is none of these and is not held:
// not the subnet's first address, not the IPv4 broadcast address, not the
// gateway, not inside the dynamic range, not in the held list. The held
// list is rebuilt on every call from what the engine reports: the address
// of every endpoint on the network (running containers, whoever owns
// them) and the static address of every CAPCT container on it, running or
// stopped. Because Pick is a pure function of a set, replaying the records
// in any order gives the same answer, and an address held by any record is
// never handed out again.
//
// # Where the record lives
//
// The durable record is the container's own endpoint configuration: the
// engine keeps a container's static address while it is stopped and
// across its own restarts, a manager restart rebuilds the held list from
// it, and clusterctl move moves objects, not containers. Nothing is kept
// in memory, so nothing is lost; an address is free again exactly when its
// container is gone.
//
// # Concurrency
//
// Picking and creating are two steps, so [Launcher] serialises "read the
// held addresses, pick, create" per network within the process. The start
// is outside the lock: a created container already holds its static
// address in the held list, and a node's start takes seconds, which would
// queue a scale-out's launches one behind the other.
// The engine checks a static address only when the container starts; an
// address taken in between by a container CAPCT does not know (another
// manager, a user's docker run) is refused there, and the launcher removes
// the container it just created and picks again. It also remembers the
// refused address for the life of the process: the engine has been seen to
// refuse an address that nothing it reports holds, and the lowest free
// address would otherwise be picked again every time.
package nodeaddr
