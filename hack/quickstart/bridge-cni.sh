#!/bin/sh
# Runs on a node (piped into `sh -s`, or written by a KubeadmConfig): writes
# a plain bridge CNI configuration with host-local IPAM for the node's pod
# CIDR, so that the Node can go Ready without a CNI add-on (none can be
# pulled here). Not for CAPCT's workload nodes: its node IPAM and pod
# network configure those.
#
#   bridge-cni.sh CIDR  for CIDR, at once (the quickstart's management node,
#                       before kubeadm init)
#   bridge-cni.sh       for the Node's spec.podCIDR, which kube-controller-
#                       manager allocates from the Cluster's pod network, read
#                       with the kubelet's own credentials once it has
#                       registered (make bench-capd's CAPD nodes and floor,
#                       started in the background by systemd-run after
#                       kubeadm, so that it delays nothing else)
set -eu
cidr=${1:-}
while [ -z "$cidr" ]; do
  cidr=$(kubectl --kubeconfig /etc/kubernetes/kubelet.conf get node "$(hostname)" -o 'jsonpath={.spec.podCIDR}' 2>/dev/null || true)
  [ -n "$cidr" ] || sleep 1
done
mkdir -p /etc/cni/net.d
cat >/etc/cni/net.d/10-bridge.conflist.tmp <<JSON
{
  "cniVersion": "1.0.0",
  "name": "bridge",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
# Renamed into place (containerd ignores the .tmp), so that it never loads
# half a file.
mv /etc/cni/net.d/10-bridge.conflist.tmp /etc/cni/net.d/10-bridge.conflist
