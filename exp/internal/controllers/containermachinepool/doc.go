// Package containermachinepool reconciles ContainerMachinePools, the
// InfraMachinePool of CAPCT. A pool's replicas are ContainerMachines, not
// containers: the pool creates and deletes ContainerMachines (server-side
// apply, field owner "containermachinepool-controller"), Cluster API's
// MachinePool controller creates a Machine for each, and the ContainerMachine
// controller launches the container through the same lifecycle phases as
// any other machine. Scale down and rolling replacement go through the owner
// Machine, so Nodes are drained. A member that failed for good (a terminal
// lifecycle condition, or a MachineHealthCheck that leaves the remediation
// to the Machine's owner) is replaced like a missing one and deleted once
// its node's logs are kept in a Secret (remediation.go). See
// docs/machinepool.md.
package containermachinepool
