// Package portmap checks on a real cluster that a ContainerMachine's
// extraPortMappings reach the workload from the container host
// (docs/port-mappings.md): a pod behind a NodePort Service whose node port
// is the mapping's containerPort answers on the mapping's host port. Its
// code carries the build tag realcluster, as test/restart's does; the
// restart test calls Probe before and after the engine restart, to prove
// that the mapping survives it, and TestNodePortAnswersOnTheMappedHostPort
// runs it on its own.
package portmap
