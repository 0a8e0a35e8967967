#!/usr/bin/env bash
# What a node container costs its host (docs/bench.md, "Per node"): the CPU
# seconds of its cgroup from the container's start to its Node Ready, and,
# Ready and left alone, its idle CPU (cores, over IDLE_SECONDS) and memory
# (the cgroup's usage, and that less its page cache). Read on the container
# host from the container's own cgroup (v1 or v2), so that everything the
# node runs counts (systemd, containerd, the kubelet, its pods) and the
# reading costs the node nothing.
#
#   node-cost.sh cluster [WORKERS]   a throwaway cluster of NODE_IMAGE
#       (default capct/node:v1.35.4) on a network of its own: a control
#       plane (kubeadm init) and WORKERS (3) workers started and joined in
#       parallel, as a MachinePool scale-out does, with the kubelet settings
#       of CAPCT's templates and the node container flags CAPCT uses. Prints
#       each node's numbers and the workers' medians; removes the cluster
#       (KEEP=1 keeps it). The way to compare two node images:
#         NODE_IMAGE=capct/node:v1.35.4 hack/bench/node-cost.sh cluster 3
#         NODE_IMAGE=<your tag>         hack/bench/node-cost.sh cluster 3
#   node-cost.sh node CONTAINER...   node containers that exist (of any
#       cluster, CAPCT's or CAPD's): waits for each Node to be Ready (asked
#       with the node's own kubelet credentials) and reads its CPU then,
#       which is its CPU to Ready only if it was not Ready yet; then the
#       idle window.
#
# Output: one JSON object per node on stdout ({name, role, ready_s,
# cpu_to_ready_s, cpu_to_idle_s: its CPU from its start to the idle window,
# which takes in what follows Ready, such as its kube-proxy's start;
# idle_cores, memory_mib, memory_nocache_mib}), a table
# and the processes that used the most CPU in one node's idle window on
# stderr.
# Logs and the JSON lines: out/node-cost (NODE_COST_OUT).
# Environment: IDLE_SECONDS (60), SETTLE_SECONDS (20: after the last Node
# Ready, before the idle window), NODE_COST_TIMEOUT (300 s to Ready).
# Run it under the Docker lock: flock /tmp/capct-docker.lock hack/bench/node-cost.sh ...
#
# hack/bench/capd-vs-capct.sh sources this file for its cgroup readers
# (node_cgroup, cgroup_read); sourced, it defines them and returns.

# node_cgroup CONTAINER: prints "VERSION CPU_DIR MEMORY_DIR", the folders
# on this host of the container's cgroup (not of its init's: the node's
# systemd moves itself into init.scope below it).
node_cgroup() {
  local id pid path cpath mpath
  read -r id pid < <(docker inspect -f '{{.Id}} {{.State.Pid}}' "$1") || return 1
  [[ $pid != 0 && -r /proc/$pid/cgroup ]] || return 1
  # the path's components up to the one that names the container
  # (/docker/<id>, /system.slice/docker-<id>.scope, .../libpod-<id>.scope)
  trim() { sed -E "s#^(.*${id}[^/]*).*#\1#"; }
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    path=$(sed -n 's/^0:://p' "/proc/$pid/cgroup" | trim)
    echo "2 /sys/fs/cgroup$path /sys/fs/cgroup$path"
  else
    cpath=$(awk -F: '$2 ~ /(^|,)cpuacct(,|$)/ {print $3}' "/proc/$pid/cgroup" | trim)
    mpath=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' "/proc/$pid/cgroup" | trim)
    local d
    for d in /sys/fs/cgroup/cpuacct /sys/fs/cgroup/cpu,cpuacct /sys/fs/cgroup/cpuacct,cpu; do
      [[ -f $d$cpath/cpuacct.usage ]] && break
    done
    echo "1 $d$cpath /sys/fs/cgroup/memory$mpath"
  fi
}

# cgroup_read VERSION CPU_DIR MEMORY_DIR: prints "CPU_NS MEMORY_BYTES
# PAGE_CACHE_BYTES" of the cgroup and everything below it.
cgroup_read() {
  local cpu mem cache
  if [[ $1 == 2 ]]; then
    cpu=$(($(sed -n 's/^usage_usec //p' "$2/cpu.stat") * 1000))
    mem=$(cat "$3/memory.current")
    cache=$(sed -n 's/^file //p' "$3/memory.stat")
  else
    cpu=$(cat "$2/cpuacct.usage")
    mem=$(cat "$3/memory.usage_in_bytes")
    cache=$(sed -n 's/^total_cache //p' "$3/memory.stat")
  fi
  echo "$cpu $mem ${cache:-0}"
}

# proc_cpu CONTAINER_ID: "PID COMMAND CPU_TICKS" of each process of the
# container (its own and its children's that it waited for), read from
# /proc on this host: the node's units and pods by name, on cgroup v1
# hosts too, where a separate cpuacct hierarchy is not the node's systemd's.
proc_cpu() {
  local f
  grep -l "$1" /proc/[0-9]*/cgroup 2>/dev/null | while read -r f; do
    f=${f%/cgroup}
    # the fields after "PID (COMMAND) ": utime, stime, cutime and cstime are the 12th to 15th
    { read -r stat <"$f/stat" && echo "${f#/proc/} $(sed -E 's/^[0-9]+ \((.*)\) .*/\1/; s/ /_/g' <<<"$stat") $(sed -E 's/^.*\) //' <<<"$stat" | awk '{print $12 + $13 + $14 + $15}')"; } 2>/dev/null || true
  done
}

[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0

set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
log_name=node-cost
# shellcheck source=hack/lib.sh
source "$root/hack/lib.sh"

image=${NODE_IMAGE:-capct/node:v1.35.4}
idle=${IDLE_SECONDS:-60}
settle=${SETTLE_SECONDS:-20}
timeout=${NODE_COST_TIMEOUT:-300}
label=io.capct.bench.node-cost
out=${NODE_COST_OUT:-$root/out/node-cost} # the logs and JSON lines of each run
mkdir -p "$out"
now() { date +%s.%N; }

# started_at CONTAINER: the container's start, epoch seconds.
started_at() { date -d "$(docker inspect -f '{{.State.StartedAt}}' "$1")" +%s.%N; }

# ready_names CONTROL_PLANE: the Ready Nodes' names, one per line.
ready_names() {
  docker exec "$1" kubectl --kubeconfig /etc/kubernetes/admin.conf --request-timeout=5s get nodes \
    -o jsonpath='{range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null |
    awk '$2 == "True" {print $1}' || true
}

# self_ready CONTAINER: whether the node's own Node is Ready, asked with its
# kubelet's credentials.
self_ready() {
  [[ "$(docker exec "$1" sh -c 'kubectl --kubeconfig /etc/kubernetes/kubelet.conf --request-timeout=5s get node "$(hostname)" \
    -o jsonpath="{.status.conditions[?(@.type==\"Ready\")].status}"' 2>/dev/null)" == True ]]
}

declare -A cg=() role=() ready_s=() cpu_ready=()

# watch_ready NAME...: polls every second until each node is Ready (through
# the control plane $cp when set, else each node itself), reading its
# cgroup's CPU at the poll that first sees it Ready.
watch_ready() {
  local deadline=$((SECONDS + timeout)) left=("$@") n names cpu mem cache rest
  while ((${#left[@]} > 0)); do
    ((SECONDS < deadline)) || die "not Ready after ${timeout}s: ${left[*]}"
    names=""
    [[ -z "${cp:-}" ]] || names=$(ready_names "$cp")
    rest=()
    for n in "${left[@]}"; do
      if [[ -n "${cp:-}" ]] && grep -qxF "$n" <<<"$names" || { [[ -z "${cp:-}" ]] && self_ready "$n"; }; then
        # shellcheck disable=SC2086 # the cgroup's three fields
        read -r cpu mem cache < <(cgroup_read ${cg[$n]})
        cpu_ready[$n]=$cpu
        ready_s[$n]=$(awk -v a="$(now)" -v b="$(started_at "$n")" 'BEGIN { printf "%.1f", a - b }')
        log "$n Ready ${ready_s[$n]}s after its start, $(awk -v c="$cpu" 'BEGIN { printf "%.1f", c / 1e9 }') CPU-s;" \
          "of its running processes: $(proc_cpu "$(docker inspect -f '{{.Id}}' "$n")" | awk -v hz="$(getconf CLK_TCK)" '
            { used[$2] += $3 } END { for (c in used) printf "%s %.2f, ", c, used[c] / hz }')"
      else
        rest+=("$n")
      fi
    done
    left=("${rest[@]}")
    ((${#left[@]} == 0)) || sleep 1
  done
}

# measure FIRST NAME...: the idle window of the Ready nodes NAME, and
# their JSON lines; on stderr, the processes that used the most CPU in
# FIRST's window.
measure() {
  local first=$1 n cpu mem cache t0 t1 tree_before
  local -A before=()
  shift
  log "settling ${settle}s, then an idle window of ${idle}s"
  sleep "$settle"
  t0=$(now)
  for n in "$@"; do
    # shellcheck disable=SC2086
    read -r cpu mem cache < <(cgroup_read ${cg[$n]})
    before[$n]=$cpu
  done
  tree_before=$(proc_cpu "$(docker inspect -f '{{.Id}}' "$first")")
  sleep "$idle"
  t1=$(now)
  for n in "$@"; do
    # shellcheck disable=SC2086
    read -r cpu mem cache < <(cgroup_read ${cg[$n]})
    jq -nc --arg n "$n" --arg r "${role[$n]:-node}" --arg rs "${ready_s[$n]:-}" --arg cr "${cpu_ready[$n]:-}" \
      --argjson c0 "${before[$n]}" --argjson c1 "$cpu" --argjson w "$(awk -v a="$t1" -v b="$t0" 'BEGIN { print a - b }')" \
      --argjson m "$mem" --argjson k "$cache" '
      def r(d): . * d | round / d;
      {name: $n, role: $r, ready_s: (if $rs == "" then null else $rs | tonumber end),
       cpu_to_ready_s: (if $cr == "" then null else ($cr | tonumber) / 1e9 | r(10) end),
       cpu_to_idle_s: ($c0 / 1e9 | r(10)),
       idle_cores: (($c1 - $c0) / 1e9 / $w | r(1000)),
       memory_mib: ($m / 1048576 | r(10)), memory_nocache_mib: (($m - $k) / 1048576 | r(10))}'
  done
  log "the processes of $first that used the most CPU in the idle window (CPU-s by command):"
  awk -v hz="$(getconf CLK_TCK)" 'NR == FNR { before[$1] = $3; next }
    { used[$2] += $3 - ($1 in before ? before[$1] : 0) }
    END { for (c in used) if (used[c] > 0) printf "  %.2f %s\n", used[c] / hz, c }' \
    <(echo "$tree_before") <(proc_cpu "$(docker inspect -f '{{.Id}}' "$first")") | sort -rn | head -12 >&2
}

# table: the JSON lines of stdin as a table on stderr, and the medians of
# the workers (or of every node when there are no workers).
table() {
  jq -rs '
    def median: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
    def f: if . == null then "-" else tostring end;
    (map(select(.role == "worker")) | if length == 0 then null else . end) as $w | ($w // .) as $m |
    "node role ready_s cpu_to_ready_s cpu_to_idle_s idle_cores memory_mib memory_nocache_mib",
    (.[] | "\(.name) \(.role) \(.ready_s|f) \(.cpu_to_ready_s|f) \(.cpu_to_idle_s|f) \(.idle_cores|f) \(.memory_mib|f) \(.memory_nocache_mib|f)"),
    "median \(if $w then "worker" else "all" end) \([$m[].ready_s | select(. != null)] | median | f) \([$m[].cpu_to_ready_s | select(. != null)] | median | f) \([$m[].cpu_to_idle_s] | median | f) \([$m[].idle_cores] | median | f) \([$m[].memory_mib] | median | f) \([$m[].memory_nocache_mib] | median | f)"' |
    column -t >&2
}

# run_node NAME NETWORK: a node container with the flags CAPCT gives its
# machines (docs/node-image.md), once its containerd answers.
run_node() {
  docker run -d --name "$1" --hostname "$1" --label "$label=$prefix" --network "$2" \
    --privileged --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    --tmpfs /tmp --tmpfs /run --mount "type=volume,dst=/var,volume-label=$label=$prefix" \
    --volume /lib/modules:/lib/modules:ro --cgroupns private "$image" >/dev/null
  local deadline=$((SECONDS + 60))
  until docker exec "$1" ctr -n k8s.io version >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "$1: containerd does not answer after 60s"
    sleep 0.5
  done
}

# node_setup NAME CIDR CONFIG: the node's CNI configuration for its own pod
# CIDR (hack/quickstart/node-cni.sh) and its kubeadm configuration.
node_setup() {
  docker exec -i "$1" sh -s "$2" <"$root/hack/quickstart/node-cni.sh"
  docker exec -i "$1" sh -c 'mkdir -p /run/kubeadm && cat >/run/kubeadm/kubeadm.yaml' <<<"$3"
}

# The node registration of CAPCT's templates (templates/cluster-template.yaml).
node_registration='nodeRegistration:
  criSocket: unix:///var/run/containerd/containerd.sock
  ignorePreflightErrors: [SystemVerification, Swap, FileContent--proc-sys-net-bridge-bridge-nf-call-iptables]
  kubeletExtraArgs:
  - {name: cgroup-root, value: /kubelet}
  - {name: runtime-cgroups, value: /system.slice/containerd.service}
  - {name: fail-swap-on, value: "false"}
  - {name: eviction-hard, value: "nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%"}
  - {name: image-gc-high-threshold, value: "100"}'

cleanup() {
  [[ -z "${KEEP:-}" ]] || { log "KEEP=1: left $prefix (docker rm -f -v \$(docker ps -aq --filter label=$label=$prefix); docker network rm $prefix)"; return; }
  local ids
  ids=$(docker ps -aq --filter "label=$label=$prefix")
  [[ -z "$ids" ]] || xargs docker rm -f -v <<<"$ids" >/dev/null || true
  docker network rm "$prefix" >/dev/null 2>&1 || true
}

cluster() {
  local workers=${1:-3} version cp_ip i n join names=() cfg
  [[ $workers =~ ^[0-9]+$ ]] || die "usage: $0 cluster [WORKERS]"
  version=$(docker image inspect -f '{{index .Config.Labels "io.capct.kubernetes-version"}}' "$image") ||
    die "no image $image (make node-image, or NODE_IMAGE=<tag>)"
  prefix=capct-nodecost-$(head -c4 /dev/urandom | od -An -tx1 | tr -d ' \n')
  trap cleanup EXIT
  docker network create --label "$label=$prefix" "$prefix" >/dev/null

  step "control plane $prefix-cp ($image)"
  cp=$prefix-cp
  role[$cp]=control-plane
  run_node "$cp" "$prefix"
  cg[$cp]=$(node_cgroup "$cp")
  cp_ip=$(docker inspect -f "{{(index .NetworkSettings.Networks \"$prefix\").IPAddress}}" "$cp")
  cfg="apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
$node_registration
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $version
controlPlaneEndpoint: $cp_ip:6443
networking: {podSubnet: 10.244.0.0/16, serviceSubnet: 10.96.0.0/16}
controllerManager:
  extraArgs: [{name: allocate-node-cidrs, value: \"false\"}]
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
cgroupRoot: /kubelet
failSwapOn: false
failCgroupV1: false
${KUBELET_CONFIG_EXTRA:-}
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
conntrack: {maxPerCore: 0}"
  node_setup "$cp" 10.244.0.0/24 "$cfg"
  docker exec "$cp" kubeadm init --config /run/kubeadm/kubeadm.yaml >"$out/$prefix-cp.log" 2>&1 ||
    die "kubeadm init failed: $(tail -20 "$out/$prefix-cp.log")"
  watch_ready "$cp"

  step "$workers workers, started and joined in parallel"
  join=$(docker exec "$cp" kubeadm token create --print-join-command)
  for ((i = 1; i <= workers; i++)); do
    n=$prefix-w$i
    names+=("$n")
    role[$n]=worker
    (
      run_node "$n" "$prefix"
      node_setup "$n" "10.244.$i.0/24" "apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
$node_registration
discovery:
  bootstrapToken:
    apiServerEndpoint: $cp_ip:6443
    token: $(awk '{for (i = 1; i < NF; i++) if ($i == "--token") print $(i + 1)}' <<<"$join")
    caCertHashes: [$(awk '{for (i = 1; i < NF; i++) if ($i == "--discovery-token-ca-cert-hash") print $(i + 1)}' <<<"$join")]"
      # kubeadm's own CPU (bash's time: user, system) goes to the log
      docker exec "$n" bash -c 'time kubeadm join --config /run/kubeadm/kubeadm.yaml'
    ) >"$out/$n.log" 2>&1 &
  done
  # each worker's cgroup once its container exists
  for n in "${names[@]}"; do
    until docker inspect -f '{{.State.Running}}' "$n" 2>/dev/null | grep -q true; do sleep 0.2; done
    cg[$n]=$(node_cgroup "$n")
  done
  watch_ready "${names[@]}"
  wait || die "a worker's join failed ($out/$prefix-w*.log)"

  step "idle"
  measure "${names[0]:-$cp}" "$cp" "${names[@]}" | tee "$out/$prefix.jsonl"
  table <"$out/$prefix.jsonl"
  end_step
}

nodes() {
  local n
  (($# > 0)) || die "usage: $0 node CONTAINER..."
  local pending=()
  for n in "$@"; do
    cg[$n]=$(node_cgroup "$n") || die "no running container $n"
    if self_ready "$n"; then log "$n is Ready already: its CPU to Ready is not known"; else pending+=("$n"); fi
  done
  ((${#pending[@]} == 0)) || watch_ready "${pending[@]}"
  measure "$1" "$@" | tee "$out/node.jsonl"
  table <"$out/node.jsonl"
}

case "${1:-}" in
  cluster) shift; cluster "$@" ;;
  node) shift; nodes "$@" ;;
  *) die "usage: $0 cluster [WORKERS] | node CONTAINER..." ;;
esac
finish
