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
#     and the cluster on both, the network Unmanaged;
#   - asserts both failure domains, the control plane on engine 1 and a
#     worker on each engine, the node image copied to engine 2, every Node
#     Ready and registered on its overlay address, pod-to-pod traffic across
#     the engines and a Service answering pods on both;
#   - prints the time from the cluster's creation to every Node Ready;
#   - with a MachineHealthCheck on the workers, loses engine 2's host
#     (engine.sh stop): the worker there must be reported EngineUnreachable,
#     engine-2 must leave the failure domains, and the worker must be
#     replaced on engine 1, every Node Ready again; prints the time from the
#     loss to that; then the host comes back (engine.sh start) and CAPCT
#     must remove the lost worker's container there;
#   - deletes the cluster through CAPCT and checks that nothing labelled is
#     left on either engine, then removes the management cluster.
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

check_placement() {
  step "placement: failure domains, the control plane on engine 1, a worker on each engine"
  local domains name engine role n1=0 n2=0
  domains=$(kmgmt get containercluster "$cluster" -n "$namespace" -o jsonpath='{range .status.failureDomains[*]}{.name}{" "}{end}')
  [[ "$domains" == "engine-1 engine-2 " ]] || die "failure domains are '$domains', want engine-1 and engine-2"
  while read -r name; do
    engine=$(engine_of "$name")
    role=$(on_engine "$engine" inspect -f '{{index .Config.Labels "io.x-k8s.capct.role"}}' "$name")
    log "node $name ($role) on engine $engine at $(on_engine "$engine" inspect -f "{{with index .NetworkSettings.Networks \"$overlay\"}}{{.IPAddress}}{{end}}" "$name")"
    case "$engine/$role" in
      1/control-plane) ;;
      1/worker) n1=$((n1 + 1)) ;;
      2/worker) n2=$((n2 + 1)) ;;
      *) die "node $name ($role) runs on engine '$engine'" ;;
    esac
  done < <(kwl get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
  ((n1 == 1 && n2 == 1)) || die "workers: $n1 on engine 1 and $n2 on engine 2, want one on each"
  # Pods get the overlay's MTU, smaller than a bridge's by VXLAN's 50 bytes.
  for name in $(kwl get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}'); do
    node_engine "$name" exec "$name" cat /etc/cni/net.d/10-capct.conflist | grep -q '"mtu": 1450' ||
      die "the CNI configuration of $name does not give pods the overlay's MTU (1450)"
  done
  log "every node's pods get the overlay's MTU, 1450"
  # Each Node registered on its overlay address, which the other engine's
  # nodes reach, not its docker_gwbridge address, which they do not.
  local bad
  bad=$(kwl get nodes -o json | jq -r --arg cidr "${MH_CLUSTER_CIDR%.*}." '.items[]
    | [.metadata.name, ([.status.addresses[] | select(.type == "InternalIP") | .address][0])]
    | select(.[1] | startswith($cidr) | not) | join(" ")')
  [[ -z "$bad" ]] || die "Nodes not on the overlay: $bad"
  engine2 image inspect "$node_image" >/dev/null 2>&1 || die "$node_image is not on engine 2"
  log "engine 2 holds $node_image, copied there by CAPCT"
}

# node_engine NODE ARGS...: docker on the engine that runs NODE's container
# (quickstart.sh's load_probe_image uses it).
node_engine() {
  local node=$1
  shift
  on_engine "$(engine_of "$node")" "$@"
}

# probe_pod NAME NODE: a busybox pod on NODE.
probe_pod() {
  kwl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: {app: $1}}
spec:
  nodeName: $2
  containers:
  - name: main
    image: $probe_image
    imagePullPolicy: Never
    command: [/bin/busybox, sh, -c, 'mkdir -p /www && echo "hello from $1 on $2" > /www/index.html && exec busybox httpd -f -p 8080 -h /www']
    ports: [{containerPort: 8080}]
YAML
}

# worker_on N: a worker Node whose container runs on engine N.
worker_on() {
  local n
  for n in $(kwl get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}'); do
    if [[ $n == *-md-* && $(engine_of "$n") == "$1" ]]; then
      echo "$n"
      return
    fi
  done
}

# get POD HOST PORT: the last line of GET / from the pod.
get() {
  kwl exec "$1" -- busybox sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | busybox nc -w 5 $2 $3" | tail -n 1 | tr -d '\r'
}

prove_across() {
  step "prove: pod to pod across the engines, and a Service from pods on both"
  local w1 w2 ip1 ip2 got tries
  w1=$(worker_on 1)
  w2=$(worker_on 2)
  [[ -n "$w1" && -n "$w2" ]] || die "no worker on each engine"
  load_probe_image "$w1" "$w2"
  kwl delete pod mh-1 mh-2 --ignore-not-found --wait >/dev/null
  probe_pod mh-1 "$w1"
  probe_pod mh-2 "$w2"
  kwl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Service
metadata: {name: mh-2}
spec:
  selector: {app: mh-2}
  ports: [{port: 80, targetPort: 8080}]
YAML
  kwl wait --for=condition=Ready pod/mh-1 pod/mh-2 --timeout=120s >/dev/null
  ip1=$(kwl get pod mh-1 -o jsonpath='{.status.podIP}')
  ip2=$(kwl get pod mh-2 -o jsonpath='{.status.podIP}')
  got=$(get mh-1 "$ip2" 8080)
  [[ "$got" == "hello from mh-2 on $w2" ]] || die "pod mh-1 (engine 1) got '$got' from mh-2 $ip2:8080 (engine 2)"
  log "pod mh-1 on engine 1 -> pod mh-2 $ip2:8080 on engine 2: '$got'"
  got=$(get mh-2 "$ip1" 8080)
  [[ "$got" == "hello from mh-1 on $w1" ]] || die "pod mh-2 (engine 2) got '$got' from mh-1 $ip1:8080 (engine 1)"
  log "pod mh-2 on engine 2 -> pod mh-1 $ip1:8080 on engine 1: '$got'"
  kwl -n kube-system rollout status deployment/coredns --timeout=120s >/dev/null
  for pod in mh-1 mh-2; do
    tries=0
    until got=$(get "$pod" mh-2.default.svc.cluster.local 80 2>/dev/null) && [[ "$got" == "hello from mh-2 on $w2" ]]; do
      ((++tries < 30)) || die "the Service mh-2 answered '$got' to pod $pod"
      sleep 2
    done
    log "pod $pod -> Service mh-2.default.svc.cluster.local:80: '$got' (attempt $((tries + 1)))"
  done
  kwl delete pod mh-1 mh-2 --ignore-not-found --wait=false >/dev/null
  kwl delete service mh-2 --ignore-not-found >/dev/null
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

# machine_on_engine N: the ContainerMachine recorded on engine-N.
machine_on_engine() {
  kmgmt get containermachines -n "$namespace" -l "cluster.x-k8s.io/cluster-name=$cluster" -o json |
    jq -r --arg e "engine-$1" '.items[] | select(.metadata.annotations["container.infrastructure.cluster.x-k8s.io/engine"] == $e
      and (.metadata.labels["cluster.x-k8s.io/control-plane"] == null) and .metadata.deletionTimestamp == null) | .metadata.name' | head -1
}

# lose_engine2: a MachineHealthCheck on the workers, then engine 2's host is
# lost (engine.sh stop). Its worker must be reported EngineUnreachable, not
# failed; engine-2 must leave the failure domains; the MachineHealthCheck
# replaces the worker, on engine 1; every Node Ready again. Prints T_replace,
# from the loss to every Node Ready. Then the host comes back (engine.sh
# start), and the lost worker's container, restarted by its engine, must be
# removed by CAPCT as an orphan.
lose_engine2() {
  step "lose engine 2: MachineHealthCheck, engine.sh stop"
  local lost lost_container t0 deadline reason seen_unreachable=false mhc_checks
  # The flavor's own MachineHealthCheck on the workers (docs/remediation.md),
  # made quick for the test, and put back as it was at the end. A second
  # one over the same Machines would be refused by Cluster API.
  mhc_checks=$(kmgmt get machinehealthcheck "$cluster-md-0" -n "$namespace" -o jsonpath='{.spec.checks}')
  [[ -n "$mhc_checks" ]] || die "the flavor made no MachineHealthCheck $cluster-md-0"
  kmgmt patch machinehealthcheck "$cluster-md-0" -n "$namespace" --type=merge -p \
    '{"spec":{"checks":{"unhealthyNodeConditions":[{"type":"Ready","status":"Unknown","timeoutSeconds":30},{"type":"Ready","status":"False","timeoutSeconds":30}]}}}' >/dev/null
  # An unreachable Node's pods never finish terminating: do not wait for
  # them (the default waits until they are 5 minutes old).
  kmgmt patch machinedeployment "$cluster-md-0" -n "$namespace" --type=merge \
    -p '{"spec":{"template":{"spec":{"deletion":{"nodeDrainTimeoutSeconds":10,"nodeVolumeDetachTimeoutSeconds":10}}}}}' >/dev/null
  lost=$(machine_on_engine 2)
  [[ -n "$lost" ]] || die "no worker on engine 2"
  lost_container=$(kmgmt get containermachine "$lost" -n "$namespace" -o jsonpath='{.spec.providerID}')
  lost_container=${lost_container#container:///}
  t0=$SECONDS
  engine2_lost=true
  "$root/hack/multihost/engine.sh" stop
  step "wait for the lost worker $lost to be replaced on engine 1"
  deadline=$((SECONDS + 600))
  until nodes_ready "$workers" 0 && [[ -z "$(kmgmt get containermachine "$lost" -n "$namespace" -o name 2>/dev/null)" ]]; do
    print_phases
    if ! $seen_unreachable; then
      reason=$(kmgmt get containermachine "$lost" -n "$namespace" -o jsonpath='{.status.conditions[?(@.type=="ContainerRunning")].reason}' 2>/dev/null || true)
      if [[ "$reason" == EngineUnreachable ]]; then
        seen_unreachable=true
        log "$(elapsed)  $lost: ContainerRunning EngineUnreachable $((SECONDS - t0))s after the loss"
      fi
    fi
    ((SECONDS < deadline)) || die "timed out waiting for $lost to be replaced"
    sleep 2
  done
  t_replace=$((SECONDS - t0))
  $seen_unreachable || log "WARNING: $lost was never seen EngineUnreachable (replaced before a sample caught it)"
  [[ "$(kmgmt get containercluster "$cluster" -n "$namespace" -o jsonpath='{range .status.failureDomains[*]}{.name}{" "}{end}')" == "engine-1 " ]] ||
    die "engine-2 is still a failure domain of $cluster"
  [[ -n "$(machine_on_engine 1)" ]] || die "no worker on engine 1"
  local replacement
  replacement=$(kmgmt get containermachines -n "$namespace" -l "cluster.x-k8s.io/deployment-name=$cluster-md-0" -o json |
    jq -r '[.items[] | select(.metadata.annotations["container.infrastructure.cluster.x-k8s.io/engine"] == "engine-1")] | length')
  ((replacement == 2)) || die "$replacement workers on engine 1, want both, the replacement among them"
  log "T_replace: the lost worker replaced on engine 1, every Node Ready, ${t_replace}s after engine 2 was lost"

  step "engine 2 comes back: the lost worker's container goes"
  "$root/hack/multihost/engine.sh" start
  engine2_lost=false
  deadline=$((SECONDS + 300))
  until [[ -z "$(engine2 ps -aq --filter "name=^$lost_container\$")" ]]; do
    ((SECONDS < deadline)) || die "CAPCT did not remove $lost_container from engine 2 within 300s of its return"
    sleep 2
  done
  log "$lost_container removed from engine 2 $((SECONDS - t0))s after the loss"
  if kwl get node "$lost_container" >/dev/null 2>&1; then
    log "WARNING: Node $lost_container, registered again by its kubelet before CAPCT removed its container, is left in the workload cluster"
  fi
  kmgmt patch machinehealthcheck "$cluster-md-0" -n "$namespace" --type=merge -p "{\"spec\":{\"checks\":$mhc_checks}}" >/dev/null
}

# engine2_leftovers: what CAPCT labelled for the cluster and is still on
# engine 2.
engine2_leftovers() {
  engine2 ps -a --filter "label=io.x-k8s.capct.cluster=$cluster" --format 'container {{.ID}} {{.Names}}' 2>/dev/null || true
}

# down_both: the quickstart's down, which deletes the cluster through CAPCT
# and removes the management cluster and the overlay (labelled for it);
# then nothing of the cluster may be left on engine 2 either.
down_both() {
  local left
  (down)
  left=$(engine2_leftovers)
  if [[ -n "$left" ]]; then
    # shellcheck disable=SC2046 # one argument per container
    engine2 rm -f -v $(awk '{print $2}' <<<"$left") >/dev/null 2>&1 || true
    die "CAPCT's deletion left on engine 2 (now removed): $left"
  fi
  log "nothing of $cluster left on engine 2"
}

engine2_lost=false
on_failure() {
  diagnose
  if $engine2_lost; then
    # Back, so that the cluster's deletion reaches its containers there.
    "$root/hack/multihost/engine.sh" start || true
  fi
  if $remove_on_failure; then
    remove_on_failure=false
    log "---- removing the test's clusters"
    (down) || true
    # shellcheck disable=SC2046 # one argument per container
    engine2 rm -f -v $(engine2_leftovers | awk '{print $2}') >/dev/null 2>&1 || true
  fi
}

remove_on_failure=true
prerequisites
controller_images
step "management cluster"
LOG_NAME=mgmt-cluster "$here/mgmt-cluster.sh" up
make_overlay
init_providers
make_engines
quick_deletion
multihost_cluster
check_placement
prove_across
lose_engine2
down_both
log "T_up=${t_up}s T_replace=${t_replace}s"
finish
