#!/bin/sh
# Runs on a node (piped into `sh -s`, or written by a KubeadmConfig): writes
# a plain ptp CNI configuration with host-local IPAM for the node's pod CIDR,
# so that the Node can go Ready without a CNI add-on (none can be pulled
# here). It uses only the plugins kind's node images ship (ptp, host-local,
# portmap), which are all the node image has. Not for CAPCT's workload
# nodes: its node IPAM and pod network configure those.
#
#   node-cni.sh CIDR  for CIDR, at once (the quickstart's management node,
#                     before kubeadm init)
#   node-cni.sh       for the Node's spec.podCIDR, which kube-controller-
#                     manager allocates from the Cluster's pod network, read
#                     with the kubelet's own credentials once it has
#                     registered (make bench-capd's CAPD nodes and floor,
#                     started in the background by systemd-run after
#                     kubeadm, so that it delays nothing else)
#
# ptp's ipMasq masquerades what the pods send outside the node's pod CIDR:
# these nodes route no other node's pods, so nothing is lost by it, and
# their pods reach the Services and the world.
set -eu
cidr=${1:-}
while [ -z "$cidr" ]; do
  cidr=$(kubectl --kubeconfig /etc/kubernetes/kubelet.conf get node "$(hostname)" -o 'jsonpath={.spec.podCIDR}' 2>/dev/null || true)
  [ -n "$cidr" ] || sleep 1
done
mkdir -p /etc/cni/net.d
cat >/etc/cni/net.d/10-node-cni.conflist.tmp <<JSON
{
  "cniVersion": "1.0.0",
  "name": "node-cni",
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
# Renamed into place (containerd ignores the .tmp), so that it never loads
# half a file. The bridge configuration this script wrote before goes: it
# sorts first, so containerd would keep using it.
mv /etc/cni/net.d/10-node-cni.conflist.tmp /etc/cni/net.d/10-node-cni.conflist
rm -f /etc/cni/net.d/10-bridge.conflist
