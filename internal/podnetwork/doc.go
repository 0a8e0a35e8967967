// Package podnetwork is the data path of CAPCT's node IPAM: it makes the
// pod CIDRs that internal/nodeipam records reachable. For each node
// container of a cluster it writes the CNI configuration (ptp with
// host-local IPAM over the node's own CIDRs, then portmap: only plugins
// that kind's node images ship too), a masquerade rule for what its pods
// send outside the pod network, and a route to every other node's pod
// CIDRs through that node's address on the cluster network.
//
// The ContainerCluster controller runs the Syncer once per change of the
// cluster's nodes (a machine's record, a node container that starts, a
// machine that goes) and on its periodic pass, not once per machine: a
// sync runs one command in each node where something changed and none in
// the others, so a scale-out of N nodes costs O(N) commands per change
// rather than O(N) per machine. The Initialization phase writes a new
// node's CNI configuration itself through the same Syncer (ConfigureNode)
// as soon as the node has its CIDRs, since the Node is Ready only once it
// is there and a scale-out's syncs take seconds. See docs/node-ipam.md.
package podnetwork
