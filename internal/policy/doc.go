// Package policy decides what CAPCT's objects may ask of the container host.
//
// Whoever can create a ContainerMachine (or a template, pool or cluster that
// stamps one out) chooses what a privileged container on the host runs and
// mounts. The manager's flags narrow that: which host paths extraMounts may
// bind, which existing networks a cluster may join, which images nodes, load
// balancers and preloads may use, which host addresses and ports
// extraPortMappings and load balancers may publish on, how many machines
// one cluster may have, and which namespaces' clusters may run on the
// manager's own engine
// (Policy.LocalEngineNamespaces, decided by engines.LocalAllowsNamespace,
// the one place engine access is decided). The same decisions serve two
// callers:
//
//   - the validating webhooks, so that users get a field-named error the
//     moment they apply an object (Policy.MachineSpec, Policy.ClusterSpec);
//   - the launch path, which checks again right before it asks the engine,
//     because a policy may have been tightened since an object was admitted
//     (Policy.CheckMachine, Policy.CheckCluster).
//
// Beside the flag-driven decisions the package holds the checks that need no
// flag but more than a CRD schema can say (mount points the node image
// needs, image reference syntax, pod CIDRs against the node network, host
// ports that overlap, HostPortsOverlap, which the webhooks also use between
// machines) and the
// checks only the host can answer (MissingImages). Everything here is pure
// except MissingImages, which asks a function it is given. docs/security.md
// describes the trust boundary these decisions enforce.
package policy
