// Package containerengine reconciles ContainerEngines: it keeps one client
// per engine in the engines.Registry, made anew when the engine or its
// Secret changes, and reports in each engine's Available condition whether
// CAPCT reaches it, with the version and swarm membership it reports.
package containerengine
