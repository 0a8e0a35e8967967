// Package engines answers which container engine a cluster's containers are
// on (docs/multihost.md): the Set every controller reaches engines through
// (the manager's Registry: its own engine and every connected
// ContainerEngine; Single and Named in tests), the clients of remote
// ContainerEngines (Connect), and who may run machines on an engine
// (AllowsNamespace).
package engines
