// Package container is CAPCT's seam between the controllers and the container
// engine that runs the cluster's machines.
//
// Controllers depend only on the Runtime interface, the value types it takes
// and returns (NetworkSpec, MachineSpec, Machine, ExecInput, ...), and the typed
// errors (IsNotFound, IsConflict, IsUnreachable, IsTransient, IsTimeout). The
// Docker Engine implementation lives in internal/container/docker, the only
// package of the repository that imports the Docker client; an in-memory
// implementation for controller tests lives in internal/container/fake. Both
// pass the same behaviour suite, internal/container/runtimetest, so the fake
// cannot drift from the real engine.
//
// Ownership is recorded in labels (see labels.go and Owner). Every call that
// changes a container or a network names the Owner it expects and is refused
// when the object belongs to someone else. Anything that may delete
// containers must find them with ListOwned, which requires a complete owner
// and only ever returns containers CAPCT created for that cluster.
//
// Networks get a subnet derived deterministically from their name (see
// Subnets), retried a bounded number of times when the engine reports that the
// address pool overlaps an existing one.
//
// PullImage has the engine pull from a registry with a RegistryAuth, which
// DockerConfig chooses per image from a kubernetes.io/dockerconfigjson
// Secret's data by the image's registry host. Credentials format redacted,
// and no error about them quotes them.
package container
