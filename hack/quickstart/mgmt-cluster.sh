#!/usr/bin/env bash
# The quickstart's management cluster: one capct/node container initialised
# with kubeadm, the host's Docker socket mounted so that CAPCT's manager
# (running in it) can create the workload clusters' containers next to it.
#
#   mgmt-cluster.sh up      boot it (or reuse it), write out/quickstart/management.kubeconfig,
#                           load the controller images into its containerd
#   mgmt-cluster.sh load    only load the controller images (those present in Docker)
#   mgmt-cluster.sh down    remove its container, network and /var volume
#
# The node: container and hostname capct-mgmt on its own bridge network
# capct-mgmt, everything labelled io.x-k8s.capct.quickstart=<name>, the API
# server published on 127.0.0.1:<MGMT_API_PORT, default a free port>;
# kubeadm settings of docs/node-image.md; a bridge CNI conflist for its
# pod CIDR 10.244.0.0/24 (podSubnet 10.244.0.0/16); the control-plane taint
# removed so that the controllers schedule on it.
#
# Environment: NODE_IMAGE (capct/node:v1.35.4), MGMT_NAME (capct-mgmt),
# MGMT_NETWORK (the network's name, default MGMT_NAME),
# MGMT_API_PORT, QUICKSTART_VERSION (v0.1.0, the manager image's tag),
# CERT_MANAGER_VERSION (v1.21.1).
set -euo pipefail
# shellcheck source=hack/quickstart/lib.sh
source "$(dirname "$0")/lib.sh"

node=${MGMT_NAME:-capct-mgmt}
network=${MGMT_NETWORK:-$node}
node_image=${NODE_IMAGE:-capct/node:v1.35.4}
k8s_version=${node_image##*:}
label="$QS_LABEL=$node" # per management cluster, so that down removes only its own
kubeconfig="$QS_OUT/management.kubeconfig"
kubectl_in_node=(docker exec "$node" kubectl --kubeconfig=/etc/kubernetes/admin.conf)

# The controller images the quickstart runs in the management cluster.
images=(
  "registry.k8s.io/cluster-api/cluster-api-controller:$CAPI_VERSION"
  "registry.k8s.io/cluster-api/kubeadm-bootstrap-controller:$CAPI_VERSION"
  "registry.k8s.io/cluster-api/kubeadm-control-plane-controller:$CAPI_VERSION"
  "docker.io/capct/manager:${QUICKSTART_VERSION:-v0.1.0}"
  "quay.io/jetstack/cert-manager-controller:${CERT_MANAGER_VERSION:-v1.21.1}"
  "quay.io/jetstack/cert-manager-webhook:${CERT_MANAGER_VERSION:-v1.21.1}"
  "quay.io/jetstack/cert-manager-cainjector:${CERT_MANAGER_VERSION:-v1.21.1}"
)

# retry SECONDS WHAT CMD...: runs CMD until it succeeds or SECONDS pass
retry() {
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    if (( SECONDS >= deadline )); then
      log "timed out waiting for $what; last attempt:"
      "$@" >&2 || true
      return 1
    fi
    sleep 1
  done
}

node_running() { [[ "$(docker inspect -f '{{.State.Running}}' "$node" 2>/dev/null)" == true ]]; }

load_images() {
  step "load controller images into $node's containerd"
  local image id stamp
  docker exec "$node" mkdir -p /var/lib/capct-quickstart/images
  for image in "${images[@]}"; do
    if ! id=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null); then
      log "skip $image: not built"
      continue
    fi
    stamp="/var/lib/capct-quickstart/images/$(echo "$image" | tr '/:' '__')"
    if [[ "$(docker exec "$node" cat "$stamp" 2>/dev/null)" == "$id" ]]; then
      log "$image: already loaded"
      continue
    fi
    docker save "$image" | docker exec -i "$node" ctr -n k8s.io images import --no-unpack - >/dev/null
    echo "$id" | docker exec -i "$node" tee "$stamp" >/dev/null
    log "$image: loaded"
  done
}

up() {
  step "prerequisites"
  "$QS_ROOT/hack/ensure-docker.sh" >&2
  if ! docker image inspect "$node_image" >/dev/null 2>&1; then
    NODE_IMAGE=$node_image "$QS_ROOT/hack/node-image/build-node-image.sh" node >/dev/null
  fi

  if node_running && [[ -s "$kubeconfig" ]] && "${kubectl_in_node[@]}" get --raw /readyz >/dev/null 2>&1; then
    log "$node is up; reusing it"
  else
    if docker inspect "$node" >/dev/null 2>&1; then
      die "$node exists but is not a working management cluster; run '$0 down' first"
    fi
    step "network and node container"
    if ! docker network inspect "$network" >/dev/null 2>&1; then
      docker network create --driver bridge --label "$label" "$network" >/dev/null
    fi
    docker run -d --name "$node" --hostname "$node" \
      --label "$label" --network "$network" \
      --privileged \
      --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
      --tmpfs /tmp --tmpfs /run \
      --mount "type=volume,dst=/var,volume-label=$label" \
      --volume /lib/modules:/lib/modules:ro \
      --volume /var/run/docker.sock:/var/run/docker.sock \
      --cgroupns private \
      --publish "127.0.0.1:${MGMT_API_PORT:-}:6443" \
      "$node_image" >/dev/null
    retry 60 "$node's containerd" docker exec "$node" ctr -n k8s.io version

    step "kubeadm init"
    local ip
    ip=$(docker inspect -f "{{ (index .NetworkSettings.Networks \"$network\").IPAddress }}" "$node")
    docker exec -i "$node" bash -c 'mkdir -p /kind /etc/cni/net.d && cat > /kind/kubeadm.conf' <<YAML
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: $ip
  bindPort: 6443
nodeRegistration:
  name: $node
  criSocket: unix:///run/containerd/containerd.sock
  kubeletExtraArgs:
  - name: node-ip
    value: $ip
  ignorePreflightErrors:
  - SystemVerification
  - Swap
  - FileContent--proc-sys-net-bridge-bridge-nf-call-iptables
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $k8s_version
clusterName: $node
controlPlaneEndpoint: $node:6443
apiServer:
  certSANs: [localhost, 127.0.0.1, $node, $ip]
networking:
  podSubnet: 10.244.0.0/16
  serviceSubnet: 10.96.0.0/16
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
cgroupRoot: /kubelet
failSwapOn: false
failCgroupV1: false
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
conntrack:
  maxPerCore: 0
YAML
    docker exec -i "$node" tee /etc/cni/net.d/10-capct.conflist >/dev/null <<'JSON'
{
  "cniVersion": "1.0.0",
  "name": "capct-mgmt",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
    local out
    if ! out=$(docker exec "$node" kubeadm init --config=/kind/kubeadm.conf --skip-token-print --v=1 2>&1); then
      echo "$out" | tail -40 >&2
      die "kubeadm init failed; $node is left for inspection ('$0 down' removes it)"
    fi
    "${kubectl_in_node[@]}" taint nodes --all node-role.kubernetes.io/control-plane- >/dev/null 2>&1 || true
  fi

  step "kubeconfig"
  local port
  port=$(docker port "$node" 6443/tcp | sed -n 's/^127\.0\.0\.1:\([0-9]*\)$/\1/p' | head -1)
  [[ -n "$port" ]] || die "cannot find the published API server port of $node"
  mkdir -p "$QS_OUT"
  docker exec "$node" cat /etc/kubernetes/admin.conf |
    sed "s|server: https://.*|server: https://127.0.0.1:$port|" > "$kubeconfig.tmp"
  mv "$kubeconfig.tmp" "$kubeconfig"
  chmod 600 "$kubeconfig"
  log "wrote $kubeconfig (https://127.0.0.1:$port)"

  step "node Ready"
  retry 180 "node $node Ready" bash -c "[[ \$(${kubectl_in_node[*]} get node $node -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}') == True ]]"
  retry 60 "the API server through 127.0.0.1:$port" kubectl --kubeconfig "$kubeconfig" get --raw /readyz

  load_images
  finish
}

down() {
  step "remove $node"
  local ids
  docker rm -f -v "$node" >/dev/null 2>&1 || true
  docker network rm "$network" >/dev/null 2>&1 || true
  # anything else the quickstart labelled (leftover volumes of failed runs)
  mapfile -t ids < <(docker ps -aq --filter "label=$label")
  (( ${#ids[@]} == 0 )) || docker rm -f -v "${ids[@]}" >/dev/null
  mapfile -t ids < <(docker volume ls -q --filter "label=$label")
  (( ${#ids[@]} == 0 )) || docker volume rm "${ids[@]}" >/dev/null
  mapfile -t ids < <(docker network ls -q --filter "label=$label")
  (( ${#ids[@]} == 0 )) || docker network rm "${ids[@]}" >/dev/null
  rm -f "$kubeconfig"
  finish
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  load)
    node_running || die "$node is not running"
    load_images
    finish
    ;;
  *) echo "usage: $0 up|load|down" >&2; exit 2 ;;
esac
