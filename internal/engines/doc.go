// Package engines answers which container engine a cluster's containers are
// on (docs/multihost.md): the Set every controller reaches engines through
// (today Single, the manager's own engine), the clients of remote
// ContainerEngines (Connect, Registry), and who may run machines on an
// engine (AllowsNamespace).
package engines
