#!/usr/bin/env bash
# The two-engine cluster of make test-multihost (docs/multihost.md, section
# 7): a real Kubernetes cluster whose machines run on this machine's engine
# and on engine 2 (hack/multihost/engine.sh, which must be up), joined by an
# attachable overlay network of their swarm.
#
# Through the quickstart's machinery (it sources quickstart.sh), under its
# own names: management cluster capct-mhtest, workload cluster mhtest of one
# control plane and two MachineDeployment workers, flavor multihost, files
# in out/multihost/cluster/. It
#   - makes the overlay network capct-mhtest-overlay on MH_CLUSTER_CIDR, the
#     upper half left to the engines, labelled for the quickstart's clean-up,
#     and attaches the management node to it, as an admin attaches the
#     management cluster to an Unmanaged overlay: the controllers reach the
#     load balancer there;
#   - creates ContainerEngines engine-1 (the manager's own engine) and
#     engine-2 (TCP+TLS, its client certificate in a Secret of capct-system)
#     and the cluster on both, the network Unmanaged; prints the time from
#     the cluster's creation to every Node Ready (T_up), and loads the probe
#     pods' image into every worker;
#   - runs the Go test test/multihost/cluster (build tag realcluster; its
#     output also in out/multihost/cluster/go-test-cluster.log), which asserts both
#     failure domains, the control plane on engine 1 and a worker on each
#     engine, the node image copied to engine 2, every Node on its overlay
#     address, pod-to-pod traffic across the engines and a Service answering
#     pods on both; then, with the flavor's MachineHealthCheck made quick,
#     loses engine 2's host (engine.sh stop): the worker there must be
#     reported EngineUnreachable, engine-2 must leave the failure domains,
#     and the worker must be replaced on engine 1, every Node Ready again
#     (T_replace); the host comes back (engine.sh start) and CAPCT must
#     remove the lost worker's container there; last, it deletes the
#     cluster through CAPCT, and nothing labelled may be left on either
#     engine;
#   - removes the management cluster and the overlay (the quickstart's
#     down, which must leave nothing).
# The workload API is reached from this machine through the load
# balancer's port on 127.0.0.1: the overlay is not routed from the host.
#
# It puts containers on engine 2: run it alone, under the Docker lock, after
# `engine.sh up` (make test-multihost does both).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export MGMT_NAME=${MGMT_NAME:-capct-mhtest}
export QUICKSTART_CLUSTER=${QUICKSTART_CLUSTER:-mhtest}
export QUICKSTART_OUT=${QUICKSTART_OUT:-$root/out/multihost/cluster}
export QUICKSTART_WORKERS=2
export LOG_NAME=multihost-cluster
# shellcheck source=hack/quickstart/quickstart.sh
source "$root/hack/quickstart/quickstart.sh"

env_file=$root/out/multihost/engine.env
[[ -s $env_file ]] || die "$env_file is missing: run hack/multihost/engine.sh up first"
# shellcheck disable=SC1090
source "$env_file"
overlay=$mgmt_name-overlay
engine2() { docker -H "$MH_SOCKET" "$@"; }

# The workload kubeconfig goes to 127.0.0.1 and the load balancer's host
# port: the cluster's endpoint is on the overlay, which this machine does not
# route to. The API server's certificate names 127.0.0.1 (the flavor's
# certSANs).
fetch_kubeconfig() {
  [[ -s "$kubeconfig" ]] && return
  local port
  port=$(kmgmt get containercluster "$cluster" -n "$namespace" -o jsonpath='{.status.loadBalancer.hostPort}' 2>/dev/null)
  [[ -n "$port" ]] || return 1
  "$clusterctl" get kubeconfig "$cluster" -n "$namespace" --kubeconfig "$mgmt_kubeconfig" >"$kubeconfig.tmp" 2>/dev/null || return 1
  "$kubectl" --kubeconfig "$kubeconfig.tmp" config set-cluster "$cluster" --server "https://127.0.0.1:$port" >/dev/null
  chmod 600 "$kubeconfig.tmp"
  mv "$kubeconfig.tmp" "$kubeconfig"
  log "$(elapsed)  wrote $kubeconfig (through 127.0.0.1:$port)"
}

# engine_of NODE: 1 or 2, the engine that runs the node's container.
engine_of() {
  if docker inspect "$1" >/dev/null 2>&1; then echo 1; elif engine2 inspect "$1" >/dev/null 2>&1; then echo 2; fi
}
on_engine() { # on_engine N ARGS...: docker on engine N
  local n=$1
  shift
  if [[ $n == 1 ]]; then docker "$@"; else engine2 "$@"; fi
}

make_overlay() {
  step "overlay network $overlay on $MH_CLUSTER_CIDR, the management node attached"
  if ! docker network inspect "$overlay" >/dev/null 2>&1; then
    local base=${MH_CLUSTER_CIDR%/*} bits=${MH_CLUSTER_CIDR#*/} a b c d n upper
    IFS=. read -r a b c d <<<"$base"
    # The upper half, as CAPCT's own networks leave it to the engine.
    n=$(((a << 24 | b << 16 | c << 8 | d) + (1 << (31 - bits))))
    upper="$((n >> 24 & 255)).$((n >> 16 & 255)).$((n >> 8 & 255)).$((n & 255))/$((bits + 1))"
    docker network create --driver overlay --attachable --subnet "$MH_CLUSTER_CIDR" --ip-range "$upper" \
      --label "$QS_LABEL=$mgmt_name" "$overlay" >/dev/null
    log "created $overlay ($MH_CLUSTER_CIDR, dynamic addresses from $upper)"
  fi
  if [[ -z "$(docker inspect -f "{{with index .NetworkSettings.Networks \"$overlay\"}}{{.IPAddress}}{{end}}" "$mgmt_name")" ]]; then
    docker network connect "$overlay" "$mgmt_name"
  fi
  log "$mgmt_name is on $overlay at $(docker inspect -f "{{with index .NetworkSettings.Networks \"$overlay\"}}{{.IPAddress}}{{end}}" "$mgmt_name")"
}

make_engines() {
  step "ContainerEngines engine-1 (the manager's own) and engine-2 (TCP+TLS)"
  kmgmt -n capct-system create secret generic engine-2-tls --dry-run=client -o yaml \
    --from-file=ca.crt="$MH_PKI/ca.crt" --from-file=tls.crt="$MH_PKI/client.crt" --from-file=tls.key="$MH_PKI/client.key" |
    kmgmt apply -f - >/dev/null
  kmgmt apply -f - >/dev/null <<YAML
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: ContainerEngine
metadata: {name: engine-1}
spec:
  endpoint: ""
  allowedNamespaces: {list: [$namespace]}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: ContainerEngine
metadata: {name: engine-2}
spec:
  endpoint: $MH_ENDPOINT
  tls: {secretRef: {name: engine-2-tls}}
  allowedNamespaces: {list: [$namespace]}
YAML
  kmgmt wait --for=condition=Available containerengine/engine-1 containerengine/engine-2 --timeout=60s >/dev/null
  kmgmt get containerengines >&2
}

multihost_cluster() {
  step "clusterctl generate cluster $cluster --flavor multihost (engine-1, engine-2; network $overlay, Unmanaged)"
  CAPCT_ENGINES='[{name: engine-1}, {name: engine-2, controlPlane: false}]' \
    CAPCT_NETWORK=$overlay CAPCT_NETWORK_MODE=Unmanaged CAPCT_LB_IMAGE=${LB_IMAGE:-capct/haproxy:2.6} \
    "$clusterctl" generate cluster "$cluster" --infrastructure container --flavor multihost \
    --kubernetes-version "$k8s_version" --control-plane-machine-count 1 --worker-machine-count "$workers" \
    --target-namespace "$namespace" --config "$QS_OUT/clusterctl.yaml" --kubeconfig "$mgmt_kubeconfig" \
    >"$QS_OUT/$cluster.yaml"
  t_create=$SECONDS
  apply_cluster
  step "wait for 1 + $workers nodes Ready"
  rm -f "$kubeconfig"
  wait_for_nodes "$workers" 0
  t_up=$((SECONDS - t_create))
  log "T_up: every Node Ready ${t_up}s after the cluster was created (the node image copied to engine 2 within it)"
}

# node_engine NODE ARGS...: docker on the engine that runs NODE's container
# (quickstart.sh's load_probe_image uses it).
node_engine() {
  local node=$1
  shift
  on_engine "$(engine_of "$node")" "$@"
}

# quick_deletion: the manager gives up deleting a machine on an engine that
# does not answer after 30 s (5 min by default), so that the test does not
# wait out the default.
quick_deletion() {
  step "manager: --unreachable-engine-deletion-timeout=30s"
  if ! kmgmt -n capct-system get deployment capct-controller-manager -o jsonpath='{.spec.template.spec.containers[0].args}' |
    grep -q unreachable-engine-deletion-timeout; then
    kmgmt -n capct-system patch deployment capct-controller-manager --type=json \
      -p '[{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--unreachable-engine-deletion-timeout=30s"}]' >/dev/null
  fi
  kmgmt -n capct-system rollout status deployment/capct-controller-manager --timeout=120s >/dev/null
}

# engine2_leftovers: what CAPCT labelled for the cluster and is still on
# engine 2.
engine2_leftovers() {
  engine2 ps -a --filter "label=io.x-k8s.capct.cluster=$cluster" --format 'container {{.ID}} {{.Names}}' 2>/dev/null || true
}

# load_probe_images: the probe pods' image into every worker, on the engine
# that runs it: no registry to pull it from.
load_probe_images() {
  step "the probe pods' image into every worker"
  local nodes
  mapfile -t nodes < <(kwl get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | grep -- -md-)
  load_probe_image "${nodes[@]}"
}

on_failure() {
  diagnose
  # Back, should the test have lost it, so that the cluster's deletion
  # reaches its containers there (start does nothing to an engine that
  # answers).
  "$root/hack/multihost/engine.sh" start || true
  if $remove_on_failure; then
    remove_on_failure=false
    log "---- removing the test's clusters"
    (down) || true
    # shellcheck disable=SC2046 # one argument per container
    engine2 rm -f -v $(engine2_leftovers | awk '{print $2}') >/dev/null 2>&1 || true
  fi
}

remove_on_failure=true
step "compile test/multihost/cluster"
(cd "$root" && go test -tags realcluster -c -o /dev/null ./test/multihost/cluster)
prerequisites
controller_images
step "management cluster"
LOG_NAME=mgmt-cluster "$here/mgmt-cluster.sh" up
make_overlay
init_providers
make_engines
quick_deletion
multihost_cluster
load_probe_images
step "placement, traffic across the engines, engine 2 lost, deletion (test/multihost/cluster)"
go_test test/multihost/cluster 45m MH_SOCKET="$MH_SOCKET" MH_CLUSTER_CIDR="$MH_CLUSTER_CIDR" MH_OVERLAY_NETWORK="$overlay" \
  MH_NODE_IMAGE="$node_image" MH_PROBE_IMAGE="$probe_image" MH_ENGINE_CONTROL="$root/hack/multihost/engine.sh"
(down)
log "T_up=${t_up}s $(grep -o 'T_replace=[0-9]*s' "$QS_OUT/go-test-cluster.log" | tail -n 1)"
finish
