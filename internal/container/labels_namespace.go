package container

// LabelNamespace carries the namespace of the owning ContainerMachine or
// ContainerCluster, so that a container event can be mapped back to the
// object without a lookup: names are only unique within a namespace.
const LabelNamespace = "io.x-k8s.capct.namespace"
