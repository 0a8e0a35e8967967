// Package nodeipam decides each node's pod CIDRs and keeps the record of
// them; internal/ipam is the pure allocator it runs, internal/podnetwork
// the data path that makes the CIDRs reachable.
//
// Decide is a pure function: from the cluster's ContainerMachines (their
// pod-cidrs annotations) and Nodes (spec.podCIDRs) it returns the
// machine's CIDRs, or why it waits (exhausted, a conflict, an invalid
// pod network). The Recorder runs it for the Initialization phase under a
// per-cluster lock and writes the one record node IPAM owns, the
// ContainerMachine's annotation, before anyone else sees the CIDRs;
// AssignNode then applies them to the Node as field manager FieldOwner.
// The condition, the status and the events belong to the phase.
//
// The Recorder reads the cluster from informers and lays what it wrote,
// and what the API server held when it first allocated for the cluster,
// over them until the informers show it (overlay.go), so an allocation
// lists nothing at the API server and no CIDR is handed out twice while an
// informer lags.
//
// A CIDR is free only when neither a ContainerMachine annotation nor a Node
// holds it: the machine's finalizer never waits for the Node, which Cluster
// API deletes last, and the Node keeps the CIDR reserved until then
// (kubernetes#127792). See docs/node-ipam.md.
package nodeipam
