// Package nodeipam is CAPCT's node IPAM: it runs the pod CIDR allocator of
// internal/ipam for the ContainerMachine controller.
//
// The Assigner (see New) implements lifecycle.PodCIDRAssigner. For each
// machine it rebuilds the cluster's allocator from every ContainerMachine's
// pod-cidrs annotation and every Node's spec.podCIDRs, allocates under a
// per-cluster lock, persists the result in the machine's annotation before
// anything else sees it, sets Node.spec.podCIDR(s) with server-side apply,
// writes the node's bridge/host-local CNI config into its container and
// syncs the routes between the cluster's node containers (SyncRoutes).
//
// A CIDR is free only when neither a ContainerMachine annotation nor a Node
// holds it: the machine's finalizer never waits for the Node, which Cluster
// API deletes last, and the Node keeps the CIDR reserved until then
// (kubernetes#127792). See docs/node-ipam.md.
package nodeipam
