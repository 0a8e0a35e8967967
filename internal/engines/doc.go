// Package engines answers for the ContainerEngines a ContainerCluster names
// (docs/multihost.md): today, who may run machines on an engine; in later
// steps of that design, one runtime per engine.
package engines
