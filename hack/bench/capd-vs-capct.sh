#!/usr/bin/env bash
# CAPCT against CAPD (Cluster API's Docker provider, the anchor), side by side
# on this machine (make bench-capd; docs/bench.md, "Against CAPD"). One
# management cluster runs both providers (`clusterctl init --infrastructure
# container,docker`) with an audit policy on its API server
# (hack/bench/audit-policy.yaml: every write, Metadata level). Both build the
# same cluster: 1 KubeadmControlPlane machine, 2 MachineDeployment workers and
# an empty MachinePool, the same node image (capct/node), the same kubeadm
# settings (templates/parts; CAPD's template: hack/bench/capd-cluster.sh,
# whose nodes get a ptp CNI configuration from hack/quickstart/node-cni.sh),
# the same LB image (capct/haproxy), all on the Docker network "kind" that
# CAPD always uses (CAPCT joins it as an Unmanaged network).
#
# Each round runs both providers, alternating which goes first (ABAB):
#   create     kubectl apply -> 3 Machines Running, -> 3 Nodes Ready
#   scale-out  MachinePool 0 -> N: N more Machines Running, N more Nodes Ready
#   scale-in   MachinePool N -> 0: the pool's Machines, Nodes and containers gone
#   delete     kubectl delete cluster -> gone; leftovers listed (must be none)
# and once, on CAPD's cluster after its scale-in, the floor: N node
# containers started and joined by this script alone (docker run, kubeadm
# join with a token, in parallel, the same KubeadmConfig files and commands
# as CAPD's pool), timed to N Nodes registered and Ready.
# In the last round each provider's cluster, scaled out, then stays up alone
# for STEADY_SECONDS: its steady-state window, which the audit log reads
# for that provider's writes. Every phase runs with only one provider's
# cluster up: two scaled-out clusters at once (3 + N nodes each) exhaust
# this 2-core host (2026-12-04: CAPD's nodes beside CAPCT's did not go
# Ready in 900 s), and a phase beside the other's cluster would not
# measure the provider alone.
#
# From the node containers' cgroups on this host (hack/bench/node-cost.sh's
# readers): each scale-out node's CPU seconds from its container's start to
# the poll that first sees its Node Ready, and its idle CPU (cores) over the
# steady window and memory at its end (with and without page cache).
#
# From the audit log: each manager's writes (by its service account) per
# provisioned machine during scale-out (from the scale to SETTLE_SECONDS
# after all Nodes Ready) and per minute in the steady window, with and
# without its leader-election lease renewals. From the managers' cgroups in
# the management node: CPU seconds and peak memory over the whole run.
#
# Results: out/bench/results.json (every phase, medians, ratios, writes by
# kind), a table on stderr, each phase's polls (out/bench/*-series.tsv) and
# the charts drawn from them into docs/bench (hack/bench/chart).
# Environment: ROUNDS (3), N (10), STEADY_SECONDS (300), SETTLE_SECONDS
# (15), BENCH_TIMEOUT (seconds per phase, 900), FIRST (the provider that
# goes first in odd rounds: capct or capd). With the
# argument "results" it only recomputes the results of the last run (its
# management cluster must still be up, for the audit log).
# Run it under the Docker lock: flock /tmp/capct-docker.lock make bench-capd.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export QUICKSTART_OUT=${QUICKSTART_OUT:-$root/out/bench}
export MGMT_NAME=${MGMT_NAME:-capct-bench} MGMT_NETWORK=kind
export MGMT_AUDIT_POLICY=$root/hack/bench/audit-policy.yaml
export LOG_NAME=bench
# shellcheck source=hack/quickstart/lib.sh
source "$root/hack/quickstart/lib.sh"
# shellcheck source=hack/bench/node-cost.sh
source "$root/hack/bench/node-cost.sh" # node_cgroup, cgroup_read

rounds=${ROUNDS:-3}
# FIRST names the provider that goes first in odd rounds (capct), so that
# either provider's cluster can be the first after the managers start.
first=${FIRST:-capct}
[[ $first == capct || $first == capd ]] || die "FIRST must be capct or capd, not $first"
replicas=${N:-10}
steady=${STEADY_SECONDS:-300}
settle=${SETTLE_SECONDS:-15}
timeout=${BENCH_TIMEOUT:-900}
k8s_version=v1.35.4
node_image=capct/node:$k8s_version
capd_version=$(tool_version capd sigs.k8s.io/cluster-api/test)
capd_image=gcr.io/k8s-staging-cluster-api/capd-manager:$capd_version
mgmt_kubeconfig=$QS_OUT/management.kubeconfig
clusterctl=$QS_CACHE/bin/clusterctl-$CAPI_VERSION
kubectl=$QS_CACHE/bin/kubectl-$k8s_version
config=$QS_OUT/clusterctl-bench.yaml
audit_log=/var/log/kubernetes/audit/audit.log # in the management node
phases=$QS_OUT/phases.jsonl
floor_label=io.x-k8s.capct.bench.floor
export CLUSTERCTL_DISABLE_VERSIONCHECK=true
kmgmt() { "$kubectl" --kubeconfig "$mgmt_kubeconfig" "$@"; }
kwl() { "$kubectl" --kubeconfig "$QS_OUT/$1.kubeconfig" --request-timeout=10s "${@:2}"; }
now() { date +%s.%N; }

# Each provider's manager namespace (its service accounts write as
# system:serviceaccount:NS:...) and the label its containers carry.
declare -A manager_ns=([capct]=capct-system [capd]=capd-system)
declare -A container_label=([capct]=io.x-k8s.capct.cluster [capd]=io.x-k8s.kind.cluster)

build_capd() {
  step "CAPD $capd_version: manager image and clusterctl repository"
  local key bin mod work dest
  key=$( (go version; cat "$CAPCT_TOOLS/capd/go.mod" "$CAPCT_TOOLS/capd/go.sum") | hash_of)
  bin="$QS_CACHE/capd/$capd_version-$key/manager"
  CGO_ENABLED=0 build_go_tool "$bin" "$CAPCT_TOOLS/capd" sigs.k8s.io/cluster-api/test/infrastructure/docker -trimpath
  build_scratch_image "$capd_image" "$key" "$bin" 0:0 # root: the Docker socket

  mod=$(cd "$CAPCT_TOOLS/capd" && go mod download -json sigs.k8s.io/cluster-api/test | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  work=$(mktemp -d)
  cp -r "$mod/infrastructure/docker/config" "$work/config"
  chmod -R u+w "$work"
  sed -i -e "s@image: .*@image: $capd_image@" "$work/config/default/manager_image_patch.yaml"
  sed -i -e 's@imagePullPolicy: .*@imagePullPolicy: IfNotPresent@' "$work/config/default/manager_pull_policy.yaml"
  dest="$QS_OUT/repository/infrastructure-docker/$capd_version"
  mkdir -p "$dest"
  "$QS_CACHE/bin/kustomize-$(tool_version kustomize sigs.k8s.io/kustomize/kustomize/v5)" build "$work/config/default" >"$dest/infrastructure-components.yaml"
  rm -rf "$work"
  # CAPD's module ships no metadata.yaml; clusterctl needs one.
  cat >"$dest/metadata.yaml" <<YAML
apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3
kind: Metadata
releaseSeries:
- major: 1
  minor: 13
  contract: v1beta2
YAML
  sed "s@^providers:@providers:\n- name: docker\n  type: InfrastructureProvider\n  url: file://$dest/infrastructure-components.yaml@" \
    "$QS_OUT/clusterctl.yaml" >"$config"
}

# ---- what the phases observe ----

# machines_running NAME: how many of the cluster's Machines are Running.
machines_running() {
  kmgmt get machines -n default -l "cluster.x-k8s.io/cluster-name=$1" -o json |
    jq '[.items[] | select(.status.phase == "Running")] | length'
}

# node_counts NAME: "REGISTERED READY" Nodes of the workload cluster, "0 0"
# while its API server does not answer yet. The names of the Ready Nodes go
# to $QS_OUT/NAME-ready.txt, for node_cost_poll.
node_counts() {
  local nodes
  nodes=$(kwl "$1" get nodes -o json 2>/dev/null) || { echo "0 0"; return; }
  jq -r '.items[] | select(any(.status.conditions[]; .type == "Ready" and .status == "True")) | .metadata.name' \
    <<<"$nodes" >"$QS_OUT/$1-ready.txt" || true
  jq -r '"\(.items | length) \([.items[] | select(any(.status.conditions[]; .type == "Ready" and .status == "True"))] | length)"' \
    <<<"$nodes" 2>/dev/null || echo "0 0"
}

# ---- what a node costs (hack/bench/node-cost.sh reads the cgroups) ----

# node_cost_poll PROVIDER NAME: for each container of the cluster's
# scale-out (not in base_containers) whose Node is newly Ready (in
# $QS_OUT/NAME-ready.txt: a node's name is its container's, for both
# providers), a line of $QS_OUT/NAME-node-cost.jsonl with its seconds and
# its cgroup's CPU seconds from the container's start to the poll that
# first saw it Ready. Called by await_up after each count, in its subshell:
# cost_done lives there. Only files are read (the cgroup, the Ready
# names), and docker inspect once per container.
declare -A cost_done=()
node_cost_poll() {
  local c cg cpu mem cache started out=$QS_OUT/$2-node-cost.jsonl
  [[ -s $QS_OUT/$2-ready.txt ]] || return 0
  while read -r c; do
    [[ -z "${cost_done[$c]:-}" ]] || continue
    grep -qxF "$c" <<<"${base_containers[$2]}" && continue
    grep -qxF "$c" "$QS_OUT/$2-ready.txt" || continue
    cost_done[$c]=1
    cg=$(node_cgroup "$c") || { log "WARNING: no cgroup of $c"; continue; }
    # shellcheck disable=SC2086 # the cgroup's three fields
    read -r cpu mem cache < <(cgroup_read $cg)
    started=$(date -d "$(docker inspect -f '{{.State.StartedAt}}' "$c")" +%s.%N)
    jq -nc --arg n "$c" --argjson c "$cpu" --argjson s "$started" --argjson t "$(now)" \
      '{name: $n, ready_s: ($t - $s | . * 10 | round / 10), cpu_to_ready_s: ($c / 1e9 | . * 100 | round / 100)}' >>"$out"
  done < <(container_names "$1" "$2")
}

# node_idle PROVIDER NAME [BEFORE]: the CPU (ns) of each container of the
# cluster's scale-out, a JSON object by name; with BEFORE (such an object,
# read SECONDS earlier), their idle cores over that window and their memory
# instead, a JSON array.
node_idle() {
  local c cg cpu mem cache
  while read -r c; do
    grep -qxF "$c" <<<"${base_containers[$2]}" && continue
    cg=$(node_cgroup "$c") || continue
    # shellcheck disable=SC2086
    read -r cpu mem cache < <(cgroup_read $cg)
    jq -nc --arg n "$c" --argjson c "$cpu" --argjson m "$mem" --argjson k "$cache" '{name: $n, cpu_ns: $c, mem: $m, cache: $k}'
  done < <(container_names "$1" "$2") | if [[ -z "${3:-}" ]]; then jq -sc 'map({key: .name, value: .cpu_ns}) | from_entries'; else
    jq -sc --argjson b "$3" --argjson w "$4" 'map(select($b[.name] != null) | {name, idle_cores: ((.cpu_ns - $b[.name]) / 1e9 / $w | . * 1000 | round / 1000),
      memory_mib: (.mem / 1048576 | . * 10 | round / 10), memory_nocache_mib: ((.mem - .cache) / 1048576 | . * 10 | round / 10)})'
  fi
}

# container_names PROVIDER NAME: the cluster's containers, by the
# provider's label, sorted.
container_names() { docker ps -a --filter "label=${container_label[$1]}=$2" --format '{{.Names}}' | sort; }

fetch_kubeconfig() {
  [[ -s "$QS_OUT/$1.kubeconfig" ]] ||
    "$clusterctl" get kubeconfig "$1" -n default --kubeconfig "$mgmt_kubeconfig" >"$QS_OUT/$1.kubeconfig" 2>/dev/null ||
    { rm -f "$QS_OUT/$1.kubeconfig"; return 1; }
}

# series_start FILE: a phase's series of polls, for the charts of
# docs/bench.md (hack/bench/chart): one row per poll with the seconds since
# the phase's start and what the poll counted, "-" for a count it did not
# read (its target already reached, or the read failed).
series_start() { printf 'elapsed_s\tmachines_running\tnodes_registered\tnodes_ready\n' >"$1"; }
# series_row FILE START RUNNING REGISTERED READY: one poll's row, timed now.
series_row() {
  awk -v t="$(now)" -v s="$2" -v m="$3" -v g="$4" -v r="$5" 'BEGIN { printf "%.2f\t%s\t%s\t%s\n", t - s, m, g, r }' >>"$1"
}

# await_up NAME PHASE START MACHINES NODES: waits until MACHINES of the
# cluster's Machines are Running and NODES of its Nodes Ready; prints the two
# times (epoch seconds) at which each was first seen. Every poll is a row of
# $QS_OUT/NAME-PHASE-series.tsv, timed from START (series_start).
await_up() {
  local name=$1 start=$3 machines=$4 nodes=$5 deadline=$((SECONDS + timeout)) running="" ready="" series m reg rdy
  rm -f "$QS_OUT/$name-ready.txt" "$QS_OUT/$name-node-cost.jsonl"
  series=$QS_OUT/$1-$2-series.tsv
  series_start "$series"
  until [[ -n "$running" && -n "$ready" ]]; do
    ((SECONDS < deadline)) || die "$name: not $machines Machines Running and $nodes Nodes Ready after ${timeout}s (Machines Running: $(machines_running "$name"), Nodes: $(node_counts "$name"))"
    m=- reg=- rdy=-
    if [[ -z "$running" ]]; then
      # A failed read is no count: compared as one, its empty answer was an
      # arithmetic error, which counted the Machines as Running.
      m=$(machines_running "$name") || true
      [[ $m =~ ^[0-9]+$ ]] || m=-
      [[ $m == - ]] || ((m < machines)) || running=$(now)
    fi
    if [[ -z "$ready" ]]; then
      reg=0 rdy=0 # no kubeconfig yet: no API server to register Nodes with
      if fetch_kubeconfig "$name"; then read -r reg rdy < <(node_counts "$name"); fi
      # a failed reading costs the node numbers, not the run
      [[ $2 != scale-out ]] || node_cost_poll "${name%-b*}" "$name" || log "WARNING: $name: reading its nodes' cgroups failed"
      ((rdy < nodes)) || ready=$(now)
    fi
    series_row "$series" "$start" "$m" "$reg" "$rdy"
    [[ -n "$running" && -n "$ready" ]] || sleep 1
  done
  echo "$running $ready"
}

# record JSON: one phase's result, a line of $phases.
record() { jq -c . <<<"$1" >>"$phases"; }

# ---- the clusters ----

# manifest PROVIDER NAME: the cluster's manifest, its MachinePool at 0.
manifest() {
  local template=$QS_OUT/$1-cluster-template.yaml
  if [[ $1 == capct ]]; then
    cat "$QS_ROOT/templates/cluster-template.yaml" "$QS_ROOT/templates/parts/machinepool.yaml" >"$template"
  else
    "$QS_ROOT/hack/bench/capd-cluster.sh" >"$template"
  fi
  "$clusterctl" generate cluster "$2" --from "$template" --kubernetes-version "$k8s_version" \
    --control-plane-machine-count 1 --worker-machine-count 2 --target-namespace default \
    --config "$config" --kubeconfig "$mgmt_kubeconfig" |
    yq -y 'if .kind == "MachinePool" then .spec.replicas = 0 else . end' >"$QS_OUT/$2.yaml"
}

# The containers of each cluster before its scale-out: what its scale-in
# must return to.
declare -A base_containers=()

# providers_available waits until every provider's manager (Cluster API's,
# the kubeadm providers', CAPCT's, CAPD's) is Available, so that no phase
# starts, or stops, while one of them restarts: under a scale-out's load a
# manager can lose its leader election or fail its liveness probe and be
# away for minutes with its back-off, which stopped the runs of 2026-12-04
# evening and 2026-12-05 morning in their second round.
#
# Available is not enough: a manager's new pod is Available before it
# leads, and one that replaced a pod that did not give up its lease waits
# out the lease (a minute for the kubeadm control plane's). The first
# cluster of every run before 2026-12-07 was 2.6 times slower than the next
# for that reason alone: relax_probes rolls every provider's pods just
# before round 1, and the KubeadmControlPlane controller made the first
# control-plane Machine 61 s after the apply. So it also waits until every
# provider's leader-election lease is held by one of its running pods.
providers_available() {
  kmgmt wait deployment -A -l cluster.x-k8s.io/provider --for=condition=Available --timeout=600s >/dev/null ||
    die "the providers' managers did not come back within 600s: $(kmgmt get pods -A -l cluster.x-k8s.io/provider --no-headers | tr -s ' ' | tr '\n' ';')"
  local deadline=$((SECONDS + 180)) waiting
  while :; do
    waiting=$(providers_not_leading)
    [[ -n "$waiting" ]] || return 0
    ((SECONDS < deadline)) || die "no running pod of theirs leads these providers after 180s: $waiting"
    sleep 2
  done
}

# providers_not_leading lists the provider namespaces whose leader-election
# leases are held by no running pod of theirs (a holder identity is
# "<pod>_<uuid>").
providers_not_leading() {
  local ns holders pods
  for ns in $(kmgmt get deployment -A -l cluster.x-k8s.io/provider -o jsonpath='{range .items[*]}{.metadata.namespace}{"\n"}{end}' | sort -u); do
    pods=$(kmgmt get pods -n "$ns" --field-selector=status.phase=Running -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
    holders=$(kmgmt get leases -n "$ns" -o jsonpath='{range .items[*]}{.spec.holderIdentity}{"\n"}{end}')
    [[ -n "$holders" ]] || { echo -n "$ns "; continue; }
    while read -r holder; do
      grep -qxF "${holder%%_*}" <<<"$pods" || { echo -n "$ns "; break; }
    done <<<"$holders"
  done
}

# relax_probes gives every provider's manager the same patient liveness
# probe (10 s to answer, 12 failures), so that a loaded
# host delays a manager instead of having the kubelet kill it. Each provider
# gets the same, so the comparison stays fair.
relax_probes() {
  local ns name
  while read -r ns name; do
    kmgmt patch deployment -n "$ns" "$name" --type=strategic -p '{"spec":{"template":{"spec":{"containers":[{"name":"manager",
      "livenessProbe":{"timeoutSeconds":10,"failureThreshold":12},"readinessProbe":{"timeoutSeconds":10}}]}}}}' >/dev/null
  done < <(kmgmt get deployment -A -l cluster.x-k8s.io/provider -o jsonpath='{range .items[*]}{.metadata.namespace} {.metadata.name}{"\n"}{end}')
}

# up PROVIDER ROUND: creates the cluster and scales its pool out.
up() {
  local provider=$1 round=$2 name="$1-b$2" start running ready times tries=0
  step "round $round: $provider up (create, MachinePool 0->$replicas)"
  providers_available
  manifest "$provider" "$name"
  rm -f "$QS_OUT/$name.kubeconfig"
  start=$(now)
  until kmgmt apply -f "$QS_OUT/$name.yaml" >/dev/null 2>&1; do
    ((++tries < 30)) || kmgmt apply -f "$QS_OUT/$name.yaml" >&2 || die "applying $QS_OUT/$name.yaml failed"
    sleep 2
  done
  times=$(await_up "$name" create "$start" 3 3)
  read -r running ready <<<"$times"
  record "$(jq -n --arg p "$provider" --argjson r "$round" --argjson s "$start" --argjson m "$running" --argjson n "$ready" \
    '{provider: $p, round: $r, phase: "create", start: $s, running: ($m - $s), ready: ($n - $s)}')"
  log "$provider round $round: 3 Machines Running in $(jq -n "$running - $start | . * 10 | round / 10")s, 3 Nodes Ready in $(jq -n "$ready - $start | . * 10 | round / 10")s"
  # Where the creation's time went: the objects' conditions (their
  # transition times), from the apply at $start.
  kmgmt get cluster,kubeadmcontrolplane,machines,containermachines,dockermachines,containercluster,dockercluster -n default \
    -l "cluster.x-k8s.io/cluster-name=$name" -o json | jq --argjson s "$start" '. + {start: $s}' >"$QS_OUT/$name-create.json" || true
  base_containers[$name]=$(container_names "$provider" "$name")

  start=$(now)
  kmgmt scale machinepool "$name-mp-0" -n default --replicas="$replicas" >/dev/null
  times=$(await_up "$name" scale-out "$start" $((3 + replicas)) $((3 + replicas)))
  read -r running ready <<<"$times"
  sleep "$settle" # the writes that follow Ready still count as this phase's
  # The machines' conditions, for where the time went (their transition times).
  kmgmt get machines,containermachines,dockermachines -n default -l "cluster.x-k8s.io/cluster-name=$name" -o json >"$QS_OUT/$name-scale-out.json"
  record "$(jq -n --arg p "$provider" --argjson r "$round" --argjson s "$start" --argjson m "$running" --argjson n "$ready" \
    --argjson e "$(now)" --slurpfile nc <(cat "$QS_OUT/$name-node-cost.jsonl" 2>/dev/null || true) \
    '{provider: $p, round: $r, phase: "scale-out", start: $s, running: ($m - $s), ready: ($n - $s), end: $e, nodes: $nc}')"
  log "$provider round $round: MachinePool 0->$replicas: Machines Running in $(jq -n "$running - $start | . * 10 | round / 10")s, Nodes Ready in $(jq -n "$ready - $start | . * 10 | round / 10")s"
}

# steady PROVIDER ROUND: the provider's cluster, scaled out, left alone
# for STEADY_SECONDS; the results count the provider's writes in it, and
# each scale-out node's idle CPU over it and its memory at its end.
steady() {
  local start before end
  step "round $2: $1 steady state, its cluster up alone for ${steady}s"
  start=$(now)
  before=$(node_idle "$1" "$1-b$2")
  sleep "$steady"
  end=$(now)
  record "$(jq -n --arg p "$1" --argjson r "$2" --argjson s "$start" --argjson e "$end" \
    --argjson i "$(node_idle "$1" "$1-b$2" "$before" "$(jq -n "$end - $start")")" \
    '{provider: $p, round: $r, phase: "steady", start: $s, end: $e, nodes: $i}')"
}

# leftovers PROVIDER NAME: what is left of a deleted cluster, one per line:
# its containers, volumes and networks by the provider's label, and its
# Machines and infrastructure machines in the management cluster.
leftovers() {
  local label="${container_label[$1]}=$2"
  docker ps -a --filter "label=$label" --format 'container {{.Names}}'
  docker volume ls --filter "label=$label" --format 'volume {{.Name}}'
  docker network ls --filter "label=$label" --format 'network {{.Name}}'
  kmgmt get machines,machinepools,containermachines,dockermachines -n default -l "cluster.x-k8s.io/cluster-name=$2" -o name 2>/dev/null || true
}

# down PROVIDER ROUND: scales the pool in (and, for CAPD, runs the
# floor on its cluster), then deletes the cluster.
down() {
  local provider=$1 round=$2 name="$1-b$2" start deadline end="" left reg rdy tries
  step "round $round: $provider down (MachinePool $replicas->0, delete)"
  providers_available
  start=$(now)
  deadline=$((SECONDS + timeout))
  kmgmt scale machinepool "$name-mp-0" -n default --replicas=0 >/dev/null
  until [[ -n "$end" ]]; do
    read -r reg rdy < <(node_counts "$name")
    if (($(kmgmt get machines -n default -l "cluster.x-k8s.io/cluster-name=$name" -o name | wc -l) == 3 && reg == 3)) &&
      [[ "$(container_names "$provider" "$name")" == "${base_containers[$name]}" ]]; then
      end=$(now)
    elif ((SECONDS >= deadline)); then
      break
    else
      sleep 1
    fi
  done
  left=$(comm -13 <(echo "${base_containers[$name]}") <(container_names "$provider" "$name"))
  record "$(jq -n --arg p "$provider" --argjson r "$round" --argjson s "$start" --arg e "$end" --arg l "$left" \
    '{provider: $p, round: $r, phase: "scale-in", start: $s, time: (if $e == "" then null else ($e | tonumber) - $s end),
      leftovers: ($l | split("\n") | map(select(. != "")))}')"
  [[ -n "$end" ]] || log "WARNING: $provider round $round: the pool is not gone after ${timeout}s"
  log "$provider round $round: MachinePool $replicas->0 in $([[ -n "$end" ]] && jq -n "$end - $start | . * 10 | round / 10" || echo "-")s"

  [[ $provider != capd ]] || floor "$name" "$round"
  [[ $provider != capct || -z "$end" ]] || warm_scale_out "$name" "$round"

  providers_available
  start=$(now)
  # Cluster API's webhook may still be away (its manager restarting after
  # the floor's load): wait for it again, and count that time too, as the
  # deletion waits for it.
  tries=0
  until kmgmt delete cluster "$name" -n default --timeout="${timeout}s" >/dev/null; do
    ((++tries < 5)) || die "deleting Cluster $name failed 5 times"
    providers_available
  done
  end=$(now)
  left=$(leftovers "$provider" "$name")
  record "$(jq -n --arg p "$provider" --argjson r "$round" --argjson s "$start" --argjson e "$end" --arg l "$left" \
    '{provider: $p, round: $r, phase: "delete", start: $s, time: ($e - $s), leftovers: ($l | split("\n") | map(select(. != "")))}')"
  log "$provider round $round: deleted in $(jq -n "$end - $start | . * 10 | round / 10")s${left:+; LEFT: $(tr '\n' ' ' <<<"$left")}"
}

# ---- the warm pool ----

# warm_scale_out NAME ROUND: CAPCT's cluster NAME, its MachinePool at 0,
# keeps N warm machines (spec.warmPool.size), then scales 0->N: the
# scale-out from booted containers, which docs/machinepool.md describes.
# The warm pool is emptied before the MachinePool goes back to 0, so that
# the pool makes no new warm machines, and the cluster is as before.
warm_scale_out() {
  local name=$1 round=$2 pool="$1-mp-0" start running ready times deadline
  step "round $round: capct MachinePool 0->$replicas from $replicas warm machines"
  kmgmt patch containermachinepool "$pool" -n default --type merge -p "{\"spec\":{\"warmPool\":{\"size\":$replicas}}}" >/dev/null
  deadline=$((SECONDS + timeout))
  until [[ "$(kmgmt get containermachinepool "$pool" -n default -o jsonpath='{.status.warmReplicas}')" == "$replicas" ]]; do
    ((SECONDS < deadline)) || die "$name: not $replicas warm machines booted after ${timeout}s"
    sleep 2
  done
  log "capct round $round: $replicas warm machines booted; the host settles for ${settle}s"
  sleep "$settle"
  start=$(now)
  kmgmt scale machinepool "$pool" -n default --replicas="$replicas" >/dev/null
  times=$(await_up "$name" scale-out-warm "$start" $((3 + replicas)) $((3 + replicas)))
  read -r running ready <<<"$times"
  record "$(jq -n --argjson r "$round" --argjson s "$start" --argjson m "$running" --argjson n "$ready" \
    '{provider: "capct", round: $r, phase: "scale-out-warm", start: $s, running: ($m - $s), ready: ($n - $s)}')"
  log "capct round $round: MachinePool 0->$replicas from warm machines: Machines Running in $(jq -n "$running - $start | . * 10 | round / 10")s, Nodes Ready in $(jq -n "$ready - $start | . * 10 | round / 10")s"
  kmgmt patch containermachinepool "$pool" -n default --type merge -p '{"spec":{"warmPool":{"size":0}}}' >/dev/null
  kmgmt scale machinepool "$pool" -n default --replicas=0 >/dev/null
  deadline=$((SECONDS + timeout))
  until [[ "$(container_names capct "$name")" == "${base_containers[$name]}" ]]; do
    ((SECONDS < deadline)) || { log "WARNING: capct round $round: the warm scale-out's machines are not gone after ${timeout}s"; break; }
    sleep 2
  done
}

# ---- the floor ----

# floor NAME ROUND: N node containers joined to CAPD's cluster NAME by this
# script alone, in parallel: docker run, the pool's KubeadmConfig files,
# kubeadm join with a fresh token and the pool's JoinConfiguration, its
# postKubeadmCommands. Timed from the first docker run to N Nodes
# registered and Ready; then the Nodes and containers are removed.
floor() {
  local cluster=$1 round=$2 cp token endpoint config start registered="" ready="" reg rdy deadline i names=() series
  series=$QS_OUT/floor-b$round-scale-out-series.tsv
  step "round $round: the floor, $replicas nodes joined by a script"
  cp=$(docker ps -q --filter "label=io.x-k8s.kind.cluster=$cluster" --filter "label=io.x-k8s.kind.role=control-plane" | head -1)
  token=$(docker exec "$cp" kubeadm token create --ttl 30m)
  endpoint=$(kmgmt get cluster "$cluster" -n default -o jsonpath='{.spec.controlPlaneEndpoint.host}:{.spec.controlPlaneEndpoint.port}')
  # shellcheck disable=SC2016 # $n is yq's variable, not the shell's
  config=$(yq -c --arg n "$cluster-mp-0" 'select(.kind == "KubeadmConfig" and .metadata.name == $n) | .spec' "$QS_OUT/$cluster.yaml")
  jq -n --arg e "$endpoint" --arg t "$token" --argjson c "$config" '{
    apiVersion: "kubeadm.k8s.io/v1beta4", kind: "JoinConfiguration",
    discovery: {bootstrapToken: {apiServerEndpoint: $e, token: $t, unsafeSkipCAVerification: true}},
    nodeRegistration: $c.joinConfiguration.nodeRegistration, patches: $c.joinConfiguration.patches}' >"$QS_OUT/floor-join.json"
  jq '.files' <<<"$config" >"$QS_OUT/floor-files.json"
  jq -r '.postKubeadmCommands // [] | .[]' <<<"$config" >"$QS_OUT/floor-post.sh"
  for ((i = 1; i <= replicas; i++)); do names+=("$cluster-floor-$i"); done
  series_start "$series"
  start=$(now)
  for i in "${names[@]}"; do floor_node "$i" >"$QS_OUT/$i.log" 2>&1 & done
  deadline=$((SECONDS + timeout))
  until [[ -n "$registered" && -n "$ready" ]]; do
    ((SECONDS < deadline)) || die "the floor: not $replicas Nodes Ready after ${timeout}s; see $QS_OUT/$cluster-floor-*.log"
    read -r reg rdy < <(node_counts "$cluster")
    [[ -n "$registered" ]] || ((reg < 3 + replicas)) || registered=$(now)
    [[ -n "$ready" ]] || ((rdy < 3 + replicas)) || ready=$(now)
    series_row "$series" "$start" - "$reg" "$rdy"
    [[ -n "$registered" && -n "$ready" ]] || sleep 1
  done
  wait
  record "$(jq -n --argjson r "$round" --argjson s "$start" --argjson m "$registered" --argjson n "$ready" \
    '{provider: "floor", round: $r, phase: "scale-out", start: $s, running: ($m - $s), ready: ($n - $s)}')"
  log "floor round $round: $replicas Nodes registered in $(jq -n "$registered - $start | . * 10 | round / 10")s, Ready in $(jq -n "$ready - $start | . * 10 | round / 10")s"
  kwl "$cluster" delete nodes "${names[@]}" --wait=false >/dev/null
  docker rm -f -v "${names[@]}" >/dev/null
}

# floor_node NAME: one node of the floor, as CAPD makes its containers
# (privileged, /var a volume, the host's modules) and runs its bootstrap.
floor_node() {
  local name=$1 n i
  docker run -d --name "$name" --hostname "$name" --label "$floor_label=$name" --network kind \
    --privileged --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    --tmpfs /tmp --tmpfs /run --volume /var --volume /lib/modules:/lib/modules:ro --cgroupns private \
    "$node_image" >/dev/null
  until docker exec "$name" systemctl is-active --quiet containerd; do sleep 0.2; done
  n=$(jq length "$QS_OUT/floor-files.json")
  for ((i = 0; i < n; i++)); do
    jq -j --argjson i "$i" '.[$i] | if .encoding == "base64" then .content | @base64d else .content end' "$QS_OUT/floor-files.json" |
      docker exec -i "$name" sh -c 'mkdir -p "$(dirname "$1")" && cat >"$1" && chmod "$2" "$1"' _ \
        "$(jq -r --argjson i "$i" '.[$i].path' "$QS_OUT/floor-files.json")" "$(jq -r --argjson i "$i" '.[$i].permissions // "0644"' "$QS_OUT/floor-files.json")"
  done
  docker exec -i "$name" sh -c 'mkdir -p /run/kubeadm && cat >/run/kubeadm/join.json' <"$QS_OUT/floor-join.json"
  docker exec "$name" kubeadm join --config /run/kubeadm/join.json
  while read -r cmd; do docker exec "$name" sh -c "$cmd"; done <"$QS_OUT/floor-post.sh"
}

# ---- the managers' cost ----

# manager_usage [reset]: one JSON object per provider: its manager
# container's CPU (ns) and peak memory (bytes) from its cgroup, and its
# process's peak resident set (VmHWM, KiB), read in the management node
# (cgroup v1 or v2). With "reset", also resets the peaks (v1's
# memory.max_usage_in_bytes, v2's memory.peak where the kernel allows, and
# VmHWM), so that they cover the run only.
manager_usage() {
  local provider id
  for provider in capct capd; do
    id=$(kmgmt get pods -n "${manager_ns[$provider]}" -o json |
      jq -r '[.items[] | select(.metadata.deletionTimestamp == null) | .status.containerStatuses[]?
              | select(.name == "manager" and .state.running) | .containerID | sub("^containerd://"; "")][0] // empty')
    [[ -n "$id" ]] || die "no running manager container in ${manager_ns[$provider]}"
    docker exec "$MGMT_NAME" bash -c '
      set -eu
      id=$1
      pid=$(ctr -n k8s.io task ls | awk -v id="$id" "\$1 == id {print \$2}")
      [ -n "$pid" ] || { echo "no running task for the $2 manager container $id" >&2; exit 1; }
      if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
        dir=/sys/fs/cgroup$(sed -n "s/^0:://p" /proc/$pid/cgroup)
        [ "$3" != reset ] || echo 0 >"$dir/memory.peak" 2>/dev/null || true
        cpu=$(($(sed -n "s/^usage_usec //p" "$dir/cpu.stat") * 1000))
        mem=$(cat "$dir/memory.peak")
        v=2
      else
        mdir=/sys/fs/cgroup/memory$(awk -F: "\$2 == \"memory\" {print \$3}" /proc/$pid/cgroup)
        cdir=$(for d in /sys/fs/cgroup/cpuacct /sys/fs/cgroup/cpu,cpuacct; do [ -d "$d" ] && echo "$d" && break; done)$(awk -F: "\$2 ~ /cpuacct/ {print \$3}" /proc/$pid/cgroup)
        [ "$3" != reset ] || echo 0 >"$mdir/memory.max_usage_in_bytes"
        cpu=$(cat "$cdir/cpuacct.usage")
        mem=$(cat "$mdir/memory.max_usage_in_bytes")
        v=1
      fi
      [ "$3" != reset ] || echo 5 >/proc/$pid/clear_refs
      hwm=$(awk "/^VmHWM:/ {print \$2}" /proc/$pid/status) # "VmHWM:<tab>  1234 kB"
      printf "{\"provider\":\"%s\",\"container\":\"%s\",\"cgroup\":%s,\"cpu_ns\":%s,\"peak_bytes\":%s,\"vmhwm_kib\":%s}\n" "$2" "$id" "$v" "$cpu" "$mem" "$hwm"
    ' _ "$id" "$provider" "${1:-}"
  done | jq -s .
}

# ---- the results ----

# results: out/bench/results.json from the phases, the audit log's writes
# of both managers, and their usage at the start and the end; prints the
# table.
results() {
  step "results"
  docker exec "$MGMT_NAME" cat "$audit_log" |
    jq -c --arg a "system:serviceaccount:${manager_ns[capct]}:" --arg d "system:serviceaccount:${manager_ns[capd]}:" '
      select(.stage == "ResponseComplete" and (.user.username | startswith($a) or startswith($d)))
      | [((.requestReceivedTimestamp[0:19] + "Z" | fromdate) + ("0" + .requestReceivedTimestamp[19:-1] | tonumber)),
         (if .user.username | startswith($a) then "capct" else "capd" end),
         .verb, (.objectRef.resource // "") + (if .objectRef.subresource then "/" + .objectRef.subresource else "" end)]' \
      >"$QS_OUT/writes.jsonl"
  jq -n --slurpfile phases "$phases" --slurpfile writes "$QS_OUT/writes.jsonl" \
    --slurpfile before "$QS_OUT/usage-start.json" --slurpfile after "$QS_OUT/usage-end.json" \
    --argjson n "$replicas" --argjson rounds "$rounds" --argjson steady "$steady" --argjson settle "$settle" \
    --arg command "$command" --argjson wall "$((SECONDS - script_start))" --arg date "$(date -u +%FT%TZ)" '
    def median: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
      else (.[length / 2 - 1] + .[length / 2]) / 2 end;
    def r1: if . == null then null else . * 10 | round / 10 end;
    def r2: if . == null then null else . * 100 | round / 100 end;
    def ratio(a; b): if a == null or b == null or b == 0 then null else a / b | r2 end;
    def writes($p; $s; $e): [$writes[] | select(.[1] == $p and .[0] >= $s and .[0] <= $e)]
      | {total: length, without_leases: map(select(.[3] != "leases")) | length,
         by_resource: (group_by(.[2] + " " + .[3]) | map({key: (.[0][2] + " " + .[0][3]), value: length}) | from_entries)};
    ($phases | map(if .phase == "scale-out" and .provider != "floor"
      then . + {writes: writes(.provider; .start; .end)} else . end)) as $ph
    # by_kind($p): for each "verb resource", the writes per machine of the
    # provider in its scale-outs, the median over its rounds (0 in a round
    # without that kind); null without a scale-out.
    | def by_kind($p): [$ph[] | select(.provider == $p and .phase == "scale-out") | .writes.by_resource] as $rs
      | if $rs == [] then null
        else [$rs[] | keys[]] | unique | map(. as $k | {key: $k, value: ([$rs[] | (.[$k] // 0) / $n] | median | r2)}) | from_entries end;
    by_kind("capct") as $kind_capct | by_kind("capd") as $kind_capd
    | def med($p; $phase; f): [$ph[] | select(.provider == $p and .phase == $phase) | f | select(. != null)] | median | r1;
    (["capct", "capd", "floor"] | map(. as $p | {key: $p, value: {
        create_running_s: med($p; "create"; .running), create_ready_s: med($p; "create"; .ready),
        scale_out_running_s: med($p; "scale-out"; .running), scale_out_ready_s: med($p; "scale-out"; .ready),
        warm_scale_out_running_s: med($p; "scale-out-warm"; .running), warm_scale_out_ready_s: med($p; "scale-out-warm"; .ready),
        scale_in_s: med($p; "scale-in"; .time), delete_s: med($p; "delete"; .time),
        scale_out_writes_per_machine: med($p; "scale-out"; .writes.total // null | if . == null then null else . / $n end),
        scale_out_writes_per_machine_without_leases: med($p; "scale-out"; .writes.without_leases // null | if . == null then null else . / $n end)
      }}) | from_entries) as $m
    | (["capct", "capd"] | map(. as $p | {key: $p, value: {
        cpu_to_ready_s: ([$ph[] | select(.provider == $p and .phase == "scale-out") | .nodes // [] | .[].cpu_to_ready_s] | median | r2),
        idle_cores: ([$ph[] | select(.provider == $p and .phase == "steady") | .nodes // [] | .[].idle_cores] | median),
        memory_mib: ([$ph[] | select(.provider == $p and .phase == "steady") | .nodes // [] | .[].memory_mib] | median | r1),
        memory_nocache_mib: ([$ph[] | select(.provider == $p and .phase == "steady") | .nodes // [] | .[].memory_nocache_mib] | median | r1)}})
        | from_entries) as $node_cost
    | (["capct", "capd"] | map(. as $p | ($ph | map(select(.phase == "steady" and .provider == $p)) | first) as $st
        | {key: $p, value: (if $st then writes($p; $st.start; $st.end) as $w
          | {per_minute: ($w.total * 60 / ($st.end - $st.start) | r2), per_minute_without_leases: ($w.without_leases * 60 / ($st.end - $st.start) | r2), by_resource: $w.by_resource}
          else null end)}) | from_entries) as $steady_writes
    | {date: $date, command: $command, wall_s: $wall, rounds: $rounds, n: $n, steady_s: $steady, settle_s: $settle,
       medians: $m,
       # per scale-out node: CPU seconds from the start of its container to its
       # Node Ready (every round), idle cores and memory (the steady window)
       node_cost: $node_cost,
       ratios: {
         create_running_capct_capd: ratio($m.capct.create_running_s; $m.capd.create_running_s),
         create_ready_capct_capd: ratio($m.capct.create_ready_s; $m.capd.create_ready_s),
         scale_out_running_capct_capd: ratio($m.capct.scale_out_running_s; $m.capd.scale_out_running_s),
         scale_out_running_capct_floor: ratio($m.capct.scale_out_running_s; $m.floor.scale_out_running_s),
         scale_out_running_capd_floor: ratio($m.capd.scale_out_running_s; $m.floor.scale_out_running_s),
         scale_out_ready_capct_capd: ratio($m.capct.scale_out_ready_s; $m.capd.scale_out_ready_s),
         scale_out_ready_capct_floor: ratio($m.capct.scale_out_ready_s; $m.floor.scale_out_ready_s),
         scale_out_ready_capd_floor: ratio($m.capd.scale_out_ready_s; $m.floor.scale_out_ready_s),
         warm_scale_out_ready_capct_capd: ratio($m.capct.warm_scale_out_ready_s; $m.capd.scale_out_ready_s),
         warm_scale_out_ready_capct_floor: ratio($m.capct.warm_scale_out_ready_s; $m.floor.scale_out_ready_s),
         writes_per_machine_capct_capd: ratio($m.capct.scale_out_writes_per_machine; $m.capd.scale_out_writes_per_machine),
         writes_per_machine_without_leases_capct_capd: ratio($m.capct.scale_out_writes_per_machine_without_leases; $m.capd.scale_out_writes_per_machine_without_leases)},
       steady_writes: $steady_writes,
       scale_out_writes_per_machine_by_kind: (($kind_capct // {}) + ($kind_capd // {}) | keys
         | map(split(" ") as $w | {resource: ($w[1:] | join(" ")), verb: $w[0],
             capct: (if $kind_capct == null then null else $kind_capct[.] // 0 end),
             capd: (if $kind_capd == null then null else $kind_capd[.] // 0 end)})
         | sort_by(-((.capct // 0) + (.capd // 0)), .resource, .verb)),
       managers: (["capct", "capd"] | map(. as $p | ($before[0][] | select(.provider == $p)) as $b | ($after[0][] | select(.provider == $p)) as $a
         | {key: $p, value: {cpu_s: (if $a.container == $b.container then ($a.cpu_ns - $b.cpu_ns) / 1e9 | r1 else null end),
             restarted: ($a.container != $b.container), cgroup_peak_mib: ($a.peak_bytes / 1048576 | r1), vmhwm_mib: ($a.vmhwm_kib / 1024 | r1)}}) | from_entries),
       phases: $ph}' >"$QS_OUT/results.json"
  jq -r '
    def f: if . == null then "-" else tostring end;
    "metric capct capd floor capct/capd capct/floor",
    "create_running_s \(.medians.capct.create_running_s|f) \(.medians.capd.create_running_s|f) - \(.ratios.create_running_capct_capd|f) -",
    "create_ready_s \(.medians.capct.create_ready_s|f) \(.medians.capd.create_ready_s|f) - \(.ratios.create_ready_capct_capd|f) -",
    "mp_0_to_\(.n)_running_s \(.medians.capct.scale_out_running_s|f) \(.medians.capd.scale_out_running_s|f) \(.medians.floor.scale_out_running_s|f) \(.ratios.scale_out_running_capct_capd|f) \(.ratios.scale_out_running_capct_floor|f)",
    "mp_0_to_\(.n)_ready_s \(.medians.capct.scale_out_ready_s|f) \(.medians.capd.scale_out_ready_s|f) \(.medians.floor.scale_out_ready_s|f) \(.ratios.scale_out_ready_capct_capd|f) \(.ratios.scale_out_ready_capct_floor|f)",
    "mp_0_to_\(.n)_ready_warm_s \(.medians.capct.warm_scale_out_ready_s|f) - - \(.ratios.warm_scale_out_ready_capct_capd|f) \(.ratios.warm_scale_out_ready_capct_floor|f)",
    "mp_\(.n)_to_0_s \(.medians.capct.scale_in_s|f) \(.medians.capd.scale_in_s|f) - - -",
    "delete_s \(.medians.capct.delete_s|f) \(.medians.capd.delete_s|f) - - -",
    "writes_per_machine \(.medians.capct.scale_out_writes_per_machine|f) \(.medians.capd.scale_out_writes_per_machine|f) - \(.ratios.writes_per_machine_capct_capd|f) -",
    "writes_per_machine_no_leases \(.medians.capct.scale_out_writes_per_machine_without_leases|f) \(.medians.capd.scale_out_writes_per_machine_without_leases|f) - \(.ratios.writes_per_machine_without_leases_capct_capd|f) -",
    "steady_writes_per_min \(.steady_writes.capct.per_minute|f) \(.steady_writes.capd.per_minute|f) - - -",
    "steady_writes_per_min_no_leases \(.steady_writes.capct.per_minute_without_leases|f) \(.steady_writes.capd.per_minute_without_leases|f) - - -",
    "node_cpu_to_ready_s \(.node_cost.capct.cpu_to_ready_s|f) \(.node_cost.capd.cpu_to_ready_s|f) - - -",
    "node_idle_cores \(.node_cost.capct.idle_cores|f) \(.node_cost.capd.idle_cores|f) - - -",
    "node_memory_mib \(.node_cost.capct.memory_mib|f) \(.node_cost.capd.memory_mib|f) - - -",
    "node_memory_nocache_mib \(.node_cost.capct.memory_nocache_mib|f) \(.node_cost.capd.memory_nocache_mib|f) - - -",
    "manager_cpu_s \(.managers.capct.cpu_s|f) \(.managers.capd.cpu_s|f) - - -",
    "manager_cgroup_peak_mib \(.managers.capct.cgroup_peak_mib|f) \(.managers.capd.cgroup_peak_mib|f) - - -",
    "manager_peak_rss_mib \(.managers.capct.vmhwm_mib|f) \(.managers.capd.vmhwm_mib|f) - - -",
    "leftovers \([.phases[] | .leftovers // [] | .[]] | length) - - - -"' "$QS_OUT/results.json" | column -t >&2
  log "results in $QS_OUT/results.json"
  # The charts of docs/bench.md, redrawn from this results.json and the
  # phases' series. A failure only warns: the results are written already.
  (cd "$QS_ROOT" && go run ./hack/bench/chart -in "$QS_OUT" -out "$QS_ROOT/docs/bench") ||
    log "WARNING: the charts were not drawn (go run ./hack/bench/chart -in $QS_OUT -out docs/bench)"
}

# ---- the run ----

command="make bench-capd ROUNDS=$rounds N=$replicas STEADY_SECONDS=$steady"
if [[ "${1:-}" == results ]]; then # only recompute the results of the last run
  # A run that failed before its end read no managers' usage: read it now,
  # so that the rounds it finished still give medians.
  [[ -f "$QS_OUT/usage-end.json" ]] || manager_usage >"$QS_OUT/usage-end.json"
  results
  exit
fi
step "prerequisites and the providers' images"
"$QS_ROOT/hack/quickstart/quickstart.sh" prepare
build_capd

step "management cluster $MGMT_NAME on network kind, with both providers and an audit log"
"$QS_ROOT/hack/quickstart/mgmt-cluster.sh" up
docker exec "$MGMT_NAME" test -f "$audit_log" ||
  die "$MGMT_NAME has no audit log (an older run made it without hack/bench/audit-policy.yaml); remove it with 'MGMT_NAME=$MGMT_NAME MGMT_NETWORK=kind hack/quickstart/mgmt-cluster.sh down'"
docker save "$capd_image" | docker exec -i "$MGMT_NAME" ctr -n k8s.io images import --no-unpack - >/dev/null
if ! kmgmt get providers.clusterctl.cluster.x-k8s.io -A -o name | grep -q infrastructure-docker; then
  "$clusterctl" init --infrastructure container,docker --config "$config" --kubeconfig "$mgmt_kubeconfig" --wait-providers >&2
fi
# Fresh managers for every run, on the images just loaded: the cost measured
# is this run's, and of this tree's CAPCT.
relax_probes
kmgmt rollout restart deployment -n "${manager_ns[capct]}" capct-controller-manager >/dev/null
kmgmt rollout restart deployment -n "${manager_ns[capd]}" capd-controller-manager >/dev/null
kmgmt rollout status deployment -n "${manager_ns[capct]}" capct-controller-manager --timeout=300s >&2
kmgmt rollout status deployment -n "${manager_ns[capd]}" capd-controller-manager --timeout=300s >&2
providers_available
[[ -z "$(kmgmt get clusters -A -o name)" ]] || die "the management cluster still has Clusters (an interrupted run?): $(kmgmt get clusters -A -o name | tr '\n' ' ')"

: >"$phases"
rm -f "$QS_OUT"/*-series.tsv # an earlier run's rounds are not this run's
manager_usage reset >"$QS_OUT/usage-start.json"
for round in $(seq "$rounds"); do
  second=capd
  [[ $first == capct ]] || second=capct
  if ((round % 2 == 1)); then order=("$first" "$second"); else order=("$second" "$first"); fi
  for provider in "${order[@]}"; do
    up "$provider" "$round"
    ((round < rounds)) || steady "$provider" "$round"
    down "$provider" "$round"
  done
done
manager_usage >"$QS_OUT/usage-end.json"
# The managers' logs, for where a phase's time went (each manager's
# current pod; one that restarted during the rounds has lost the rest).
for provider in capct capd; do
  kmgmt logs -n "${manager_ns[$provider]}" "deployment/$provider-controller-manager" >"$QS_OUT/$provider-manager.log" 2>&1 ||
    log "WARNING: no log of the $provider manager"
done
results
log "'MGMT_NAME=$MGMT_NAME MGMT_NETWORK=kind hack/quickstart/mgmt-cluster.sh down' removes the management cluster"
finish
