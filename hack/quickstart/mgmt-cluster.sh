#!/usr/bin/env bash
# The quickstart's management cluster: one capct/node container initialised
# with kubeadm, the host's Docker socket mounted so that CAPCT's manager
# (running in it) can create the workload clusters' containers next to it.
#
#   mgmt-cluster.sh up          boot it, or reuse it (starting it and waiting for
#                               its API server when the engine restarted), write
#                               out/quickstart/management.kubeconfig, load the
#                               controller images into its containerd
#   mgmt-cluster.sh kubeconfig  only rewrite the kubeconfig, when the node runs
#   mgmt-cluster.sh load        only load the controller images (those present in Docker)
#   mgmt-cluster.sh down        remove its container, network and /var volume
#
# Under CAPCT_ENGINE=podman the node runs on Docker all the same, with
# Podman's socket mounted too, for the manager to put the workload clusters
# on Podman (docs/runtime.md).
#
# The node: container and hostname capct-mgmt on its own bridge network
# capct-mgmt, everything labelled io.x-k8s.capct.quickstart=<name>, the API
# server published on 127.0.0.1:<MGMT_API_PORT, default the first free port
# from 26443>; kubeadm settings of docs/node-image.md; a ptp CNI conflist
# for its pod CIDR 10.244.0.0/24 (podSubnet 10.244.0.0/16); the
# control-plane taint removed so that the controllers schedule on it.
#
# It survives a restart of the engine (docs/restarts.md): restart policy
# unless-stopped; a fixed address on its network (the network's subnet is
# derived from its name as CAPCT derives its own networks', its upper half is
# the engine's range for dynamic addresses, and the node takes the last but
# one address of the lower half); and a fixed host port for the API server,
# chosen once and kept in the container's port binding, so that kubeconfigs
# written before stay valid.
#
# Environment: NODE_IMAGE (capct/node:v1.35.4), MGMT_NAME (capct-mgmt),
# MGMT_NETWORK (the network's name, default MGMT_NAME), MGMT_API_PORT,
# MGMT_IPV6 (true: the network gets an IPv6 /64 too, derived as CAPCT
# derives its own, so that dual-stack and IPv6 workload clusters can share
# it as their Unmanaged network; the management cluster stays IPv4),
# MGMT_RESTART_TIMEOUT (seconds to wait for an existing node's API server,
# 240), QUICKSTART_VERSION (v0.1.0, the manager image's tag),
# CERT_MANAGER_VERSION (v1.21.1), MGMT_AUDIT_POLICY (an audit policy file:
# a new node's API server then writes its audit log to
# /var/log/kubernetes/audit/audit.log in the node; make bench-capd counts the
# providers' writes in it).
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
restart_timeout=${MGMT_RESTART_TIMEOUT:-240}
audit_policy=${MGMT_AUDIT_POLICY:-}
# What to run when an existing management cluster cannot be brought back.
remedy="run 'make quickstart-down' (it removes everything the quickstart and CAPCT labelled, even with this cluster broken), then 'make quickstart'"

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

node_exists() { docker inspect "$node" >/dev/null 2>&1; }
node_running() { [[ "$(docker inspect -f '{{.State.Running}}' "$node" 2>/dev/null)" == true ]]; }
api_answers() { "${kubectl_in_node[@]}" get --raw /readyz >/dev/null 2>&1; }

# ---- addresses and ports ----

ip2int() { local IFS=. a b c d; read -r a b c d <<<"$1"; echo $(((a << 24) | (b << 16) | (c << 8) | d)); }
int2ip() { echo "$(($1 >> 24 & 255)).$(($1 >> 16 & 255)).$(($1 >> 8 & 255)).$(($1 & 255))"; }

# name_hash NAME ATTEMPT: sha256(NAME, ATTEMPT as 4 big-endian bytes) in
# hex, the hash container.Subnets derives subnets from.
name_hash() {
  { printf '%s' "$1"; printf '%b' "\\x00\\x00\\x00\\x$(printf %02x "$2")"; } | sha256sum
}

# derived_subnet NAME ATTEMPT: the /20 inside 172.16.0.0/12 that CAPCT's
# container.Subnets derives for a network of that name: the first byte n of
# sha256(NAME, ATTEMPT as 4 big-endian bytes) gives 172.(16+n>>4).((n&15)<<4).0/20.
derived_subnet() {
  local n
  n=$(name_hash "$1" "$2")
  n=$((16#${n:0:2}))
  echo "172.$((16 + (n >> 4))).$(((n & 15) << 4)).0/20"
}

# overlaps_existing SUBNET: true when an existing network's IPv4 subnet
# overlaps SUBNET. Checked before creating: Docker 20.10's bridge driver may
# treat a new network that conflicts with the default bridge docker0
# (172.17.0.0/16) as proof that docker0 is stale, and delete it.
overlaps_existing() {
  local base=${1%/*} bits=${1#*/} other obase obits shortest mask ids
  mapfile -t ids < <(docker network ls -q)
  ((${#ids[@]} > 0)) || return 1
  while read -r other; do
    [[ "$other" =~ ^[0-9.]+/[0-9]+$ ]] || continue
    obase=${other%/*} obits=${other#*/}
    shortest=$((bits < obits ? bits : obits))
    mask=$(((0xffffffff << (32 - shortest)) & 0xffffffff))
    (((($(ip2int "$base") ^ $(ip2int "$obase")) & mask) == 0)) && return 0
  done < <(docker network inspect -f '{{range .IPAM.Config}}{{println .Subnet}}{{end}}' "${ids[@]}")
  return 1
}

# derived_ipv6_prefix NAME ATTEMPT: the first four groups of the /64 inside
# fc00::/8 that CAPCT's container.Subnets derives: fc, then bytes 1-7 of
# sha256(NAME, ATTEMPT as 4 big-endian bytes).
derived_ipv6_prefix() {
  local h
  h=$(name_hash "$1" "$2")
  echo "fc${h:2:2}:${h:4:4}:${h:8:4}:${h:12:4}"
}

# create_network: the bridge network, on the first derived subnet that no
# network uses, with the upper half of it as the engine's range for dynamic
# addresses (the lower half is for fixed ones: this node's and CAPCT's).
# With MGMT_IPV6=true also an IPv6 /64, with the engine's range where
# container.DynamicRange puts it (:8000::/66; Docker 20.10 cannot use a
# range that ends at the subnet's last address).
create_network() {
  local attempt subnet base out v6=()
  for attempt in 0 1 2 3 4; do
    subnet=$(derived_subnet "$network" "$attempt")
    if overlaps_existing "$subnet"; then
      continue
    fi
    base=$(ip2int "${subnet%/*}")
    if [[ "${MGMT_IPV6:-false}" == true ]]; then
      local p6
      p6=$(derived_ipv6_prefix "$network" "$attempt")
      v6=(--ipv6 --subnet "$p6::/64" --gateway "$p6::1" --ip-range "$p6:8000::/66")
    fi
    if out=$(docker network create --driver bridge --label "$label" \
      --subnet "$subnet" --gateway "$(int2ip $((base + 1)))" --ip-range "$(int2ip $((base + 2048)))/21" \
      "${v6[@]}" "$network" 2>&1); then
      log "created network $network: $subnet, dynamic addresses from $(int2ip $((base + 2048)))/21${v6:+; ${v6[2]}, dynamic from ${v6[6]}}"
      return
    fi
    grep -qi overlap <<<"$out" || die "docker network create $network failed: $out"
  done
  die "every subnet derived for $network overlaps an existing network (last: $subnet); remove one or set MGMT_NETWORK"
}

# fixed_address: the node's address on the network: the last but one
# address below the network's dynamic range. Fails when the network has no
# subnet or range of its creator's (the engine then refuses fixed addresses).
fixed_address() {
  local config subnet range start base
  config=$(docker network inspect -f '{{json .IPAM.Config}}' "$network")
  subnet=$(jq -r '[.[]? | select(.Subnet | test("^[0-9.]+/"))][0].Subnet // empty' <<<"$config")
  range=$(jq -r '[.[]? | select(.Subnet | test("^[0-9.]+/"))][0].IPRange // empty' <<<"$config")
  [[ -n "$subnet" && -n "$range" ]] || return 1
  start=$(ip2int "${range%/*}")
  base=$(ip2int "${subnet%/*}")
  ((start - 2 > base + 1)) || return 1
  int2ip $((start - 2))
}

# free_port: MGMT_API_PORT, or the first port from 26443 that nothing listens
# on and no container's port binding claims (a stopped container's binding is
# taken again when it starts). Below the kernel's ephemeral range, so that no
# outgoing connection holds it.
free_port() {
  if [[ -n "${MGMT_API_PORT:-}" ]]; then
    echo "$MGMT_API_PORT"
    return
  fi
  local taken port ids
  mapfile -t ids < <(docker ps -aq)
  taken=$(
    awk 'NR > 1 && $4 == "0A" {split($2, a, ":"); print a[2]}' /proc/net/tcp /proc/net/tcp6 |
      while read -r hex; do echo $((16#$hex)); done
    if ((${#ids[@]} > 0)); then
      docker inspect -f '{{range $p, $b := .HostConfig.PortBindings}}{{range $b}}{{println .HostPort}}{{end}}{{end}}' "${ids[@]}"
    fi
  )
  for ((port = 26443; port < 26643; port++)); do
    grep -qx "$port" <<<"$taken" || { echo "$port"; return; }
  done
  die "no free port in 26443-26642 for the API server; set MGMT_API_PORT"
}

# published_port: the host port the container's binding fixes for 6443,
# empty when it was left to the engine (which then picks another one at
# every start).
published_port() {
  docker inspect -f '{{range (index .HostConfig.PortBindings "6443/tcp")}}{{.HostPort}}{{end}}' "$node" 2>/dev/null || true
}

# ---- an existing node ----

# check_node: what of the node would not survive an engine restart (an older
# quickstart made it), one line each; fixes the restart policy in place.
check_node() {
  local policy static
  policy=$(docker inspect -f '{{.HostConfig.RestartPolicy.Name}}' "$node")
  if [[ "$policy" != unless-stopped ]]; then
    docker update --restart unless-stopped "$node" >/dev/null
    log "set $node's restart policy to unless-stopped (it was '${policy:-no}')"
  fi
  static=$(docker inspect -f "{{with index .NetworkSettings.Networks \"$network\"}}{{with .IPAMConfig}}{{.IPv4Address}}{{end}}{{end}}" "$node")
  [[ -n "$static" ]] || echo "its address on $network is not fixed: the engine may give it another one when it restarts"
  [[ -n "$(published_port)" ]] || echo "its API server's host port is not fixed: the engine picks another one when it restarts, and kubeconfigs written before go stale"
}

# explain_node: why an existing node does not answer, for the error message.
explain_node() {
  local state ip advertised
  state=$(docker inspect -f '{{.State.Status}} (exit code {{.State.ExitCode}}, restart policy {{.HostConfig.RestartPolicy.Name}}, started {{.State.StartedAt}})' "$node")
  log "$node: $state"
  node_running || return 0
  ip=$(docker inspect -f "{{with index .NetworkSettings.Networks \"$network\"}}{{.IPAddress}}{{end}}" "$node")
  advertised=$(docker exec "$node" sed -n 's/^ *advertiseAddress: *//p' /kind/kubeadm.conf 2>/dev/null || true)
  if [[ -n "$advertised" && "$ip" != "$advertised" ]]; then
    log "$node's address is now $ip, but its API server and etcd were set up on $advertised: they cannot come back on this address"
  fi
  log "its control plane's containers (crictl ps -a):"
  docker exec "$node" crictl ps -a 2>&1 | awk 'NR == 1 || /kube-apiserver|etcd|kube-controller|kube-scheduler/' | cut -c1-160 >&2 || true
}

# reuse_node: brings an existing node back (starting it when it is stopped)
# and waits for its API server; dies naming what is broken when it does not
# answer within restart_timeout.
reuse_node() {
  local problems
  problems=$(check_node)
  if ! node_running; then
    log "$node exists but is stopped; starting it"
    docker start "$node" >/dev/null || { explain_node; die "$node does not start; $remedy"; }
  fi
  if ! api_answers; then
    log "waiting up to ${restart_timeout}s for $node's API server"
    if ! retry "$restart_timeout" "$node's API server" "${kubectl_in_node[@]}" get --raw /readyz; then
      explain_node
      [[ -z "$problems" ]] || log "$node was made by an older quickstart: $problems"
      die "$node exists but its API server does not answer; $remedy"
    fi
  fi
  log "$node is up; reusing it"
  if [[ -n "$problems" ]]; then
    while read -r line; do log "WARNING: $node was made by an older quickstart: $line"; done <<<"$problems"
    log "WARNING: 'make quickstart-down', then 'make quickstart', recreates it with a fixed address and port"
  fi
}

# ---- a new node ----

create_node() {
  step "network and node container"
  local ip port address_flag=()
  if ! docker network inspect "$network" >/dev/null 2>&1; then
    create_network
  fi
  if ip=$(fixed_address); then
    address_flag=(--ip "$ip")
  elif [[ "$(docker network inspect -f "{{index .Labels \"$QS_LABEL\"}}" "$network")" == "$node" ]]; then
    die "network $network was made by an older quickstart, without a range for dynamic addresses; $remedy"
  else
    log "WARNING: network $network (not the quickstart's) has no subnet and range of its creator's: $node gets a dynamic address, which can change when the engine restarts"
  fi
  port=$(free_port)
  # Under Podman, CAPCT's manager in this node creates the workload
  # clusters' containers through Podman's socket, mounted beside Docker's.
  local engine_socket=()
  if [[ "$QS_ENGINE" == podman ]]; then
    engine_socket=(--volume "$PODMAN_SOCKET:$PODMAN_SOCKET")
  fi
  docker run -d --name "$node" --hostname "$node" \
    --label "$label" --network "$network" "${address_flag[@]}" \
    --restart unless-stopped \
    --privileged \
    --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    --tmpfs /tmp --tmpfs /run \
    --mount "type=volume,dst=/var,volume-label=$label" \
    --volume /lib/modules:/lib/modules:ro \
    --volume /var/run/docker.sock:/var/run/docker.sock "${engine_socket[@]}" \
    --cgroupns private \
    --publish "127.0.0.1:$port:6443" \
    "$node_image" >/dev/null
  log "$node: ${ip:-dynamic address} on $network, API server on 127.0.0.1:$port"
  retry 60 "$node's containerd" docker exec "$node" ctr -n k8s.io version

  step "kubeadm init"
  ip=$(docker inspect -f "{{ (index .NetworkSettings.Networks \"$network\").IPAddress }}" "$node")
  # kubeadm's configuration API of the node image's release
  # (internal/kubeversion).
  local kubeadm_api
  kubeadm_api=$(cd "$QS_ROOT" && go run ./hack/kubeversion kubeadm-api "$k8s_version") ||
    die "no kubeadm configuration API known for $node_image's Kubernetes $k8s_version (above)"
  # The API server's audit settings, when asked for: the policy and the log
  # on the node's disk, mounted into the static pod. The log is large enough
  # not to rotate during a benchmark.
  local audit=""
  if [[ -n "$audit_policy" ]]; then
    docker exec -i "$node" bash -c 'mkdir -p /etc/kubernetes/audit /var/log/kubernetes/audit && cat > /etc/kubernetes/audit/policy.yaml' <"$audit_policy"
    audit="  extraArgs:
  - {name: audit-policy-file, value: /etc/kubernetes/audit/policy.yaml}
  - {name: audit-log-path, value: /var/log/kubernetes/audit/audit.log}
  - {name: audit-log-maxsize, value: \"2048\"}
  - {name: audit-log-maxbackup, value: \"1\"}
  extraVolumes:
  - {name: audit-policy, hostPath: /etc/kubernetes/audit, mountPath: /etc/kubernetes/audit, readOnly: true, pathType: Directory}
  - {name: audit-log, hostPath: /var/log/kubernetes/audit, mountPath: /var/log/kubernetes/audit, pathType: DirectoryOrCreate}"
  fi
  docker exec -i "$node" bash -c 'mkdir -p /kind /etc/cni/net.d && cat > /kind/kubeadm.conf' <<YAML
apiVersion: $kubeadm_api
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
apiVersion: $kubeadm_api
kind: ClusterConfiguration
kubernetesVersion: $k8s_version
clusterName: $node
controlPlaneEndpoint: $node:6443
apiServer:
  certSANs: [localhost, 127.0.0.1, $node, $ip]
$audit
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
# The node shares the container host's disk, which other work fills: never
# evict for it (the workload nodes' template does the same). With the
# default 10 %, a host with less free evicted the controllers mid-benchmark.
evictionHard:
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
imageGCHighThresholdPercent: 100
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
conntrack:
  maxPerCore: 0
YAML
  docker exec -i "$node" sh -s 10.244.0.0/24 <"$QS_ROOT/hack/quickstart/node-cni.sh"
  local out
  if ! out=$(docker exec "$node" kubeadm init --config=/kind/kubeadm.conf --skip-token-print --v=1 2>&1); then
    echo "$out" | tail -40 >&2
    die "kubeadm init failed; $node is left for inspection ('$0 down' removes it)"
  fi
  "${kubectl_in_node[@]}" taint nodes --all node-role.kubernetes.io/control-plane- >/dev/null 2>&1 || true
}

# write_kubeconfig: the admin kubeconfig with the server on the published port.
write_kubeconfig() {
  local port
  port=$(docker port "$node" 6443/tcp | sed -n 's/^127\.0\.0\.1:\([0-9]*\)$/\1/p' | head -1)
  [[ -n "$port" ]] || die "cannot find the published API server port of $node"
  mkdir -p "$QS_OUT"
  docker exec "$node" cat /etc/kubernetes/admin.conf |
    sed "s|server: https://.*|server: https://127.0.0.1:$port|" > "$kubeconfig.tmp"
  mv "$kubeconfig.tmp" "$kubeconfig"
  chmod 600 "$kubeconfig"
  log "wrote $kubeconfig (https://127.0.0.1:$port)"
}

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
  if [[ "$QS_ENGINE" == podman ]]; then
    "$QS_ROOT/hack/ensure-podman.sh" >&2
  fi
  if ! docker image inspect "$node_image" >/dev/null 2>&1; then
    NODE_IMAGE=$node_image "$QS_ROOT/images/node/build.sh" >/dev/null
  fi

  if node_exists; then
    step "reuse $node"
    reuse_node
    if [[ "$QS_ENGINE" == podman ]] && ! docker exec "$node" test -S "$PODMAN_SOCKET"; then
      die "$node was made without Podman's socket; run 'make quickstart-down', then CAPCT_ENGINE=podman make quickstart"
    fi
  else
    create_node
  fi

  step "kubeconfig"
  write_kubeconfig
  local port
  port=$(docker port "$node" 6443/tcp | sed -n 's/^127\.0\.0\.1:\([0-9]*\)$/\1/p' | head -1)

  step "node Ready"
  retry 180 "node $node Ready" bash -c "[[ \$(${kubectl_in_node[*]} get node $node -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}') == True ]]"
  retry 60 "the API server through 127.0.0.1:$port" kubectl --kubeconfig "$kubeconfig" get --raw /readyz

  load_images
  finish
}

# down: the node (with its /var volume), then anything else labelled for it,
# containers first, then networks, then volumes. Fails when something is
# left, e.g. a network that other containers are still attached to.
down() {
  step "remove $node"
  local ids left
  docker rm -f -v "$node" >/dev/null 2>&1 || true
  mapfile -t ids < <(docker ps -aq --filter "label=$label")
  (( ${#ids[@]} == 0 )) || docker rm -f -v "${ids[@]}" >/dev/null
  if docker network inspect "$network" >/dev/null 2>&1 &&
    [[ "$(docker network inspect -f "{{index .Labels \"$QS_LABEL\"}}" "$network")" == "$node" ]]; then
    docker network rm "$network" >/dev/null 2>&1 || true
  fi
  mapfile -t ids < <(docker network ls -q --filter "label=$label")
  (( ${#ids[@]} == 0 )) || docker network rm "${ids[@]}" >/dev/null 2>&1 || true
  mapfile -t ids < <(docker volume ls -q --filter "label=$label")
  (( ${#ids[@]} == 0 )) || docker volume rm "${ids[@]}" >/dev/null
  rm -f "$kubeconfig"
  left=$( { docker ps -aq --filter "label=$label"; docker network ls -q --filter "label=$label"; docker volume ls -q --filter "label=$label"; } | wc -l)
  if ((left > 0)); then
    if docker network inspect "$network" >/dev/null 2>&1; then
      log "network $network is still in use by: $(docker network inspect -f '{{range .Containers}}{{.Name}} {{end}}' "$network")"
      log "'make quickstart-down' removes the containers of CAPCT's workload clusters on it; remove or disconnect (docker network disconnect $network NAME) any other"
    fi
    die "$left objects labelled $label are left"
  fi
  finish
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  kubeconfig)
    node_running || die "$node is not running"
    write_kubeconfig
    ;;
  load)
    node_running || die "$node is not running"
    load_images
    finish
    ;;
  *) echo "usage: $0 up|kubeconfig|load|down" >&2; exit 2 ;;
esac
