// Package engines answers which container engine a cluster's containers are
// on (docs/multihost.md): the Set every controller reaches engines through
// (the manager's Registry: its own engine and every connected
// ContainerEngine; Single and Named in tests), the seam through which the
// Registry gets the clients of ContainerEngines (Connector, which the
// composition root fills with a backend's constructor, docker.Connect, so
// that this package and its callers depend on no backend), and who may run
// machines on an engine (AllowsNamespace).
package engines
