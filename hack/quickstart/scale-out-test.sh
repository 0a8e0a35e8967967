#!/usr/bin/env bash
# make test-scale-out (issue #13; docs/quickstart.md, "Scale-out and node
# capacity"): MachinePool scale-out on real nodes, and what happens when the
# host runs out of inotify instances.
#
# Through the quickstart's machinery (it sources quickstart.sh), under its
# own names: management cluster capct-sotest, workload cluster sotest of one
# control plane and an empty MachineDeployment and MachinePool, files in
# out/scale-out-test/.
#
#   scale-out-test.sh test       (make test-scale-out)
#     brings the clusters up, then runs the Go test test/scaleout (build tag
#     realcluster; its output also in out/scale-out-test/go-test-scaleout.log):
#     1. the MachinePool 0->10, every Node Ready; prints the time
#     2. 10->0: every machine, Node and container of the pool gone
#     3. the host's fs.inotify.max_user_instances lowered to what is in use
#        plus SCALE_OUT_HEADROOM (8), restored afterwards whatever happens
#        (by the test, and by this script after it); 0->10 again. For
#        LOWERED_WINDOW seconds (120) no ContainerMachine may fail, and they
#        must wait with the Launched condition's reason
#        WaitingForHostCapacity; then the limit is restored and all 10 Nodes
#        must become Ready; then 10->0.
#     then the quickstart's down.
#   scale-out-test.sh profile    (make bench-scale-out-profile)
#     the MachinePool 0->10 with the manager's pprof endpoint on
#     (--profiler-address): a goroutine profile every PROFILE_INTERVAL
#     seconds (5) and a CPU profile of the scale-out into
#     out/scale-out-test/profile/, then when each machine's conditions
#     turned True in seconds from the scale (Launched, Bootstrapped,
#     Registered, PodCIDRAllocated, Initialized), and the time to every
#     Node Ready;
#     then 10->0 and down (PROFILE_KEEP=true leaves the clusters up;
#     PROFILE_ARGS adds manager flags, e.g. --max-concurrent-bootstraps=0)
#   scale-out-test.sh capacity   (make bench-node-capacity)
#     the MachinePool to 10, 20, ... CAPACITY_MAX (30), each step waiting for
#     every Node Ready (up to CAPACITY_STEP_TIMEOUT, 900 s) and then holding
#     30 s; prints per step the host's memory, CPU, threads and inotify use
#     against their limits, and stops at the first step that does not get
#     Ready, naming what ran out.
#
# Runs real clusters and changes a host-wide sysctl: run it alone, under the
# Docker lock (flock /tmp/capct-docker.lock make test-scale-out).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export MGMT_NAME=${MGMT_NAME:-capct-sotest}
export QUICKSTART_CLUSTER=${QUICKSTART_CLUSTER:-sotest}
export QUICKSTART_OUT=${QUICKSTART_OUT:-$root/out/scale-out-test}
export QUICKSTART_WORKERS=0
export LOG_NAME=scale-out-test
# shellcheck source=hack/quickstart/quickstart.sh
source "$root/hack/quickstart/quickstart.sh"

replicas=${SCALE_OUT_REPLICAS:-10}
headroom=${SCALE_OUT_HEADROOM:-8}
lowered_window=${LOWERED_WINDOW:-120}
step_timeout=${CAPACITY_STEP_TIMEOUT:-900}
capacity_max=${CAPACITY_MAX:-30}
pool=$cluster-mp-0
limit_file=/proc/sys/fs/inotify/max_user_instances
original_limit=""

# ---- the host ----

# inotify_in_use: inotify instances held by root's processes (every node's
# systemd, journald, containerd and kubelet run as the host's root).
# find fails on processes that end while it reads them: its count stands.
inotify_in_use() { { find /proc/[0-9]*/fd -user 0 -lname 'anon_inode:inotify' 2>/dev/null || true; } | wc -l; }

# inotify_watches: watches of those instances.
inotify_watches() {
  { find /proc/[0-9]*/fd -user 0 -lname 'anon_inode:inotify' 2>/dev/null || true; } | sed 's|/fd/|/fdinfo/|' |
    { xargs -r cat 2>/dev/null || true; } | grep -c '^inotify wd' || true
}

# save_limit and restore_limit: the test lowers the limit and restores it
# itself; this script restores it too, should the test not get to (a Go
# test's timeout runs no clean-up).
save_limit() { original_limit=$(<"$limit_file"); }
restore_limit() {
  [[ -n "$original_limit" ]] || return 0
  if [[ "$(<"$limit_file")" != "$original_limit" ]]; then
    echo "$original_limit" >"$limit_file"
    log "restored fs.inotify.max_user_instances to $original_limit"
  fi
  original_limit=""
}

# host_usage: one line of what the host uses against its limits, CPU busy
# measured over SECONDS (default 20).
host_usage() {
  local window=${1:-20} a b mem threads
  read -r -a a < <(head -1 /proc/stat)
  sleep "$window"
  read -r -a b < <(head -1 /proc/stat)
  local busy total i
  busy=0 total=0
  for i in 1 2 3 6 7 8; do busy=$((busy + b[i] - a[i])); done
  for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
  mem=$(awk '/^MemTotal:/ {t=$2} /^MemAvailable:/ {a=$2} END {printf "%d of %d MiB", (t - a) / 1024, t / 1024}' /proc/meminfo)
  threads=$({ find /proc/[0-9]*/task -maxdepth 1 -mindepth 1 2>/dev/null || true; } | wc -l)
  echo "memory $mem; CPU busy $((100 * busy / total))% over ${window}s, load $(cut -d' ' -f1-3 /proc/loadavg); threads $threads of pid_max $(</proc/sys/kernel/pid_max); inotify instances $(inotify_in_use) of $(<"$limit_file"), watches $(inotify_watches) of $(</proc/sys/fs/inotify/max_user_watches); open files $(cut -f1 /proc/sys/fs/file-nr) of $(</proc/sys/fs/file-max)"
}

# ---- the pool ----

scale_pool() { kmgmt scale machinepool "$pool" -n "$namespace" --replicas="$1" >/dev/null; }

# failed_machines: ContainerMachines of the cluster that failed for good.
failed_machines() {
  kmgmt get containermachines -n "$namespace" -l "cluster.x-k8s.io/cluster-name=$cluster" -o json 2>/dev/null |
    jq -r '.items[] | select(.status.phase == "Failed") | .metadata.name'
}

# wait_pool N BOUND: waits for the control plane and N pool Nodes Ready.
# Returns 1 after BOUND seconds, 2 as soon as a machine has failed for good.
wait_pool() {
  local want=$1 deadline=$((SECONDS + $2))
  until nodes_ready 0 "$want"; do
    print_phases
    [[ -z "$(failed_machines)" ]] || return 2
    ((SECONDS < deadline)) || return 1
    sleep 2
  done
  print_phases
}

# pool_gone: nothing of the pool left: no ContainerMachine, no Node, no
# container. The Nodes go last (Cluster API deletes a Node after its
# machine's infrastructure), so they are waited for too, not checked once.
pool_gone() {
  local bound=$((SECONDS + 300))
  until [[ -z "$(kmgmt get containermachines -n "$namespace" -l "cluster.x-k8s.io/cluster-name=$cluster" -o name | grep -- "/$pool-" || true)" &&
    -z "$(docker ps -aq --filter "label=io.x-k8s.capct.cluster=$cluster" --filter "label=io.x-k8s.capct.role=worker")" ]] &&
    nodes_ready 0 0; do
    ((SECONDS < bound)) || return 1
    sleep 2
  done
}

scale_in() {
  step "scale MachinePool $pool ->0"
  local start=$SECONDS
  scale_pool 0
  pool_gone || die "the pool's machines, Nodes or containers are still there 300s after scaling to 0"
  log "MachinePool $pool at 0, every machine, Node and container gone, in $((SECONDS - start))s"
}

# ---- the flows ----

on_failure() {
  restore_limit
  start_engine_if_stopped
  diagnose
  if $remove_on_failure; then
    remove_on_failure=false
    log "---- removing the test's clusters"
    (down) || true
  fi
}

test_scale_out() {
  remove_on_failure=true
  step "compile test/scaleout and test/chaos"
  (cd "$QS_ROOT" && go test -tags realcluster -c -o /dev/null ./test/scaleout && go test -tags realcluster -c -o /dev/null ./test/chaos)
  up
  trap 'restore_limit; kill "$mem_pid" 2>/dev/null || true' EXIT
  trap 'exit 143' TERM INT
  step "MachinePool $pool 0->$replicas and back, then with the host's inotify instances nearly exhausted (test/scaleout)"
  save_limit
  go_test test/scaleout 90m SCALE_OUT_REPLICAS="$replicas" SCALE_OUT_HEADROOM="$headroom" LOWERED_WINDOW="$lowered_window"
  restore_limit
  # make test-chaos's test on the same clusters, which are as it wants
  # them now (the pool at 0): it deletes the cluster at its end.
  step "kill the manager during a MachinePool 0->$replicas and the deletion; restart the engine once (test/chaos)"
  rm -f "$QS_OUT/engine-stopped"
  go_test test/chaos 30m RESTART_ENGINE_CONTROL="$QS_ROOT/hack/quickstart/restart-test.sh" CHAOS_REPLICAS="$replicas"
  end_step
  down
}

# profile: see the header. The goroutine profiles show what each worker
# waits on (a lock, an engine call); the event timeline shows which phase
# the time went to.
profile() {
  remove_on_failure=true
  up
  local dir=$QS_OUT/profile interval=${PROFILE_INTERVAL:-5} deployment=capct-controller-manager
  rm -rf "$dir" && mkdir -p "$dir"
  step "the manager's pprof endpoint"
  local args arg
  args=$(kmgmt -n capct-system get deployment "$deployment" -o jsonpath='{.spec.template.spec.containers[0].args}')
  for arg in --profiler-address=127.0.0.1:6060 ${PROFILE_ARGS:-}; do
    grep -q -- "\"$arg\"" <<<"$args" && continue
    kmgmt -n capct-system patch deployment "$deployment" --type=json \
      -p "[{\"op\":\"add\",\"path\":\"/spec/template/spec/containers/0/args/-\",\"value\":\"$arg\"}]" >/dev/null
  done
  kmgmt -n capct-system rollout status deployment "$deployment" --timeout=300s >&2
  local pod
  # The new pod, not one the rollout is still terminating.
  pod=$(kmgmt -n capct-system get pods -l control-plane=controller-manager -o json |
    jq -r '[.items[] | select(.metadata.deletionTimestamp == null and .status.phase == "Running")] | sort_by(.metadata.creationTimestamp) | last | "pod/\(.metadata.name)"')
  # The manager's pod is reached through the management API server; the
  # port-forward ends with this script (and must not outlive it: it would
  # hold the Docker lock's descriptor).
  kmgmt -n capct-system port-forward "$pod" 16060:6060 >"$dir/port-forward.log" 2>&1 &
  # Not local: the EXIT trap runs after this function has returned, and
  # an unset variable there would end the trap before it stops the memory
  # sampler, which then holds the Docker lock's descriptor for good.
  port_forward_pid=$!
  trap 'kill "${port_forward_pid:-}" "${mem_pid:-}" 2>/dev/null || true' EXIT
  local i
  for i in $(seq 30); do
    curl -sf -o /dev/null http://127.0.0.1:16060/debug/pprof/ && break
    sleep 1
  done
  # Lease renewals and the cache's first sync come before the clock starts.
  sleep 20
  step "scale MachinePool $pool 0->$replicas with profiles every ${interval}s"
  local start=$SECONDS t0
  t0=$(date +%s)
  scale_pool "$replicas"
  curl -s -o "$dir/cpu.pprof" "http://127.0.0.1:16060/debug/pprof/profile?seconds=60" &
  local cpu=$!
  until nodes_ready 0 "$replicas"; do
    curl -s -o "$dir/goroutines-$(printf %03d $((SECONDS - start))).txt" "http://127.0.0.1:16060/debug/pprof/goroutine?debug=2" || true
    [[ -z "$(failed_machines)" ]] || die "a machine of $pool failed"
    ((SECONDS - start < timeout)) || die "MachinePool $pool did not reach $replicas Ready Nodes within ${timeout}s"
    sleep "$interval"
  done
  log "measured: MachinePool 0->$replicas to every Node Ready in $((SECONDS - start))s"
  wait "$cpu" || true
  kmgmt -n capct-system logs "$pod" >"$dir/manager.log" 2>&1 || true
  # When each machine's lifecycle conditions turned True, in seconds from
  # the scale (the machines emit no events for them: a condition's
  # transition time says the same).
  kmgmt get containermachines -n "$namespace" -o json | jq -r --argjson t0 "$t0" --arg pool "$pool-" '
    [.items[] | select(.metadata.name | startswith($pool)) | .status.conditions[]?
     | select(.status == "True" and (.type | IN("Launched", "Bootstrapped", "Registered", "PodCIDRAllocated", "Initialized")))
     | {r: .type, t: ((.lastTransitionTime | fromdateiso8601) - $t0)}]
    | group_by(.r) | .[] | "\(.[0].r): \([.[].t] | sort | map(tostring) | join(" "))"' | tee "$dir/timeline.txt" >&2
  node_timeline "$t0" | tee "$dir/nodes.txt" >&2
  log "profiles in $dir (go tool pprof -top $dir/cpu.pprof)"
  kill "$port_forward_pid" 2>/dev/null || true
  if [[ "${PROFILE_KEEP:-false}" == true ]]; then
    log "clusters left up (PROFILE_KEEP=true)"
    return
  fi
  scale_in
  down
}

# node_timeline T0: where each pool node's time went, in seconds from T0
# (the scale), read from the engine and inside each node, and the median of
# each column: the container created and started, containerd active, the
# bootstrap attempt claimed, the kubelet's last start (kubeadm join's), the
# Node created, the CNI configuration written, the attempt's exit mark, the
# Node Ready. The conditions' times above say when CAPCT saw each step;
# these say when it happened.
node_timeline() {
  local t0=$1 nodes name rows=()
  nodes=$(kwl get nodes -o json)
  for name in $(jq -r --arg p "$pool-" '.items[].metadata.name | select(startswith($p))' <<<"$nodes"); do
    # Inside the node: its clock now, the boot time of the host's monotonic
    # clock (systemd's Monotonic timestamps count from it) and the marks'
    # modification times, those of the latest attempt. The paths are
    # provisioning.RunDir's and podnetwork.CNIConfigPath.
    rows+=("$(jq -c -n --arg n "$name" --argjson t0 "$t0" \
      --argjson node "$(jq -c --arg n "$name" '.items[] | select(.metadata.name == $n)' <<<"$nodes")" \
      --argjson c "$(docker inspect "$name" | jq -c '.[0] | {created: .Created, started: .State.StartedAt}')" \
      --argjson in "$(docker exec "$name" sh -c '
        d=/var/lib/capct/bootstrap
        a=$d/attempts/$(cat $d/attempt 2>/dev/null || echo 1)
        mtime() { stat -c %.9Y "$1" 2>/dev/null || echo null; }
        boot=$(awk -v now="$(date +%s.%N)" "{ printf \"%.6f\", now - \$1 }" /proc/uptime)
        mono() { systemctl show -p "$2" --value "$1" 2>/dev/null | awk -v b="$boot" "\$1 > 0 { printf \"%.6f\", b + \$1 / 1e6; ok = 1 } END { if (!ok) print \"null\" }"; }
        echo "{\"containerd\": $(mono containerd ActiveEnterTimestampMonotonic), \"kubelet\": $(mono kubelet ExecMainStartTimestampMonotonic), \"claimed\": $(mtime $a/started), \"exited\": $(mtime $a/exit), \"cni\": $(mtime /etc/cni/net.d/10-capct.conflist)}"')" '
      def rel: if . == null then null else . - $t0 | . * 10 | round / 10 end;
      def ts: sub("\\.[0-9]+Z$"; "Z") | fromdateiso8601;
      {node: $n, created: ($c.created | ts | rel), started: ($c.started | ts | rel),
       containerd: ($in.containerd | rel), claimed: ($in.claimed | rel), kubelet: ($in.kubelet | rel),
       registered: ($node.metadata.creationTimestamp | fromdateiso8601 | rel), cni: ($in.cni | rel),
       exited: ($in.exited | rel),
       ready: ([$node.status.conditions[] | select(.type == "Ready" and .status == "True") | .lastTransitionTime | fromdateiso8601 | rel] | first)}')")
  done
  printf '%s\n' "${rows[@]}" | jq -r -s '
    def cols: ["created", "started", "containerd", "claimed", "kubelet", "registered", "cni", "exited", "ready"];
    def median: map(select(. != null)) | sort | if length == 0 then "-" else .[length / 2 | floor] end;
    (["node"] + cols | join("\t")),
    (sort_by(.ready)[] | [.node] + [.[cols[]] | tostring] | join("\t")),
    (. as $r | ["median"] + [cols[] as $k | $r | map(.[$k]) | median | tostring] | join("\t"))' | column -t
}

capacity() {
  remove_on_failure=true
  up
  trap 'kill "$mem_pid" 2>/dev/null || true' EXIT
  local n start rc rows=() verdict=""
  rows+=("0 nodes in the pool: $(host_usage 20)")
  die_on_failed_machine=false
  for ((n = 10; n <= capacity_max; n += 10)); do
    step "MachinePool $pool ->$n"
    start=$SECONDS
    scale_pool "$n"
    rc=0
    wait_pool "$n" "$step_timeout" || rc=$?
    if ((rc != 0)); then
      verdict="$n: not every Node Ready after $((SECONDS - start))s ($( ((rc == 2)) && echo "machines failed: $(failed_machines | tr '\n' ' ')" || echo "timed out"))"
      rows+=("$n nodes, NOT all Ready: $(host_usage 10)")
      break
    fi
    local took=$((SECONDS - start))
    log "$n pool Nodes Ready in ${took}s; holding 30s"
    sleep 10
    rows+=("$n nodes Ready (in ${took}s): $(host_usage 20)")
    nodes_ready 0 "$n" || { verdict="$n: Nodes went NotReady while held"; break; }
    log "${rows[-1]}"
  done
  end_step
  log "capacity, 1 control plane + the pool, on $(nproc) cores and $(awk '/^MemTotal:/ {printf "%d MiB", $2 / 1024}' /proc/meminfo):"
  printf '  %s\n' "${rows[@]}" >&2
  log "${verdict:-every step up to $capacity_max nodes was Ready}"
  die_on_failed_machine=true
  down
}

case "${1:-test}" in
  test) test_scale_out ;;
  profile) profile ;;
  capacity) capacity ;;
  *) echo "usage: $0 test|profile|capacity" >&2; exit 2 ;;
esac
