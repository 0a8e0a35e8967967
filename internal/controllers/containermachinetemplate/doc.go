// Package containermachinetemplate reconciles ContainerMachineTemplates for
// Cluster API's opt-in autoscaling from zero: it writes status.capacity
// (cpu and memory, from spec.template.spec.resources) and status.nodeInfo
// (the operating system), which the cluster autoscaler reads to picture a
// node of a MachineDeployment that has none. The figures come from
// internal/capacity, which the ContainerMachinePool's status shares. A
// template's spec is immutable, so a template is written once; a reconcile
// that finds the status current writes nothing. See
// docs/templates.md#scale-from-zero.
package containermachinetemplate
