#!/usr/bin/env bash
# make test-restart (docs/restarts.md): a real cluster survives a restart of
# the container engine.
#
# Through the quickstart's machinery (it sources quickstart.sh), under its
# own names: management cluster capct-rstest, workload cluster rstest of one
# control plane, one MachineDeployment and one MachinePool worker, files in
# out/restart-test/. A pod on each worker; then the engine is stopped and
# started again (through systemd where dockerd runs under it, else SIGTERM
# to the pid in /var/run/docker.pid and hack/ensure-docker.sh to start it).
# Within RESTART_TIMEOUT seconds (300) of the engine answering again it
# expects, and then asserts one by one:
#   management node   running, same address, same API host port, and its API
#                     answers through the kubeconfig written before
#   load balancer     running, started again by the engine (before the
#                     management API answered), same address and host port; the Cluster's
#                     endpoint and the ContainerCluster's hostPort unchanged;
#                     the workload API answers through the kubeconfig written
#                     before and through 127.0.0.1:<host port>
#   node containers   every one running, on the address it had
#   Nodes Ready       every Node Ready, posted by a kubelet after the restart
#   Cluster Available the Cluster's Available condition True
#   probe pods        the same two pods, their containers started again, Ready
# then pod-to-pod traffic, waited for within the same bound (CAPCT puts the
# routes back once its manager runs again), and Service traffic (the
# quickstart's check). It prints the
# time from the engine answering to every Node Ready and to Cluster
# Available, and the states each object passed through (sampled every 3 s),
# then runs the quickstart's down, which must leave nothing. On failure:
# the engine is started if it is stopped, the states and the quickstart's
# diagnostics are printed, and everything is removed.
#
# It stops the engine: run it alone, under the Docker lock
# (flock /tmp/capct-docker.lock make test-restart) where others share it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export MGMT_NAME=${MGMT_NAME:-capct-rstest}
export QUICKSTART_CLUSTER=${QUICKSTART_CLUSTER:-rstest}
export QUICKSTART_OUT=${QUICKSTART_OUT:-$root/out/restart-test}
export QUICKSTART_WORKERS=1
export LOG_NAME=restart-test
# shellcheck source=hack/quickstart/quickstart.sh
source "$root/hack/quickstart/quickstart.sh"

restart_timeout=${RESTART_TIMEOUT:-300}
states_file=$QS_OUT/restart-states.tsv
engine_stopped=false
engine_method=""
t_stop=0   # epoch seconds: the engine was told to stop
t_answer=0 # epoch seconds: the engine answered again
sampler_pid=""
reported=false # the states and checks are printed

# ---- the engine ----

under_systemd() { [[ -d /run/systemd/system ]] && systemctl is-active --quiet docker 2>/dev/null; }

stop_engine() {
  if under_systemd; then
    engine_method=systemd
    engine_stopped=true
    log "systemctl stop docker"
    systemctl stop docker.socket docker.service 2>/dev/null || systemctl stop docker.service
  else
    engine_method="pid file"
    local pid deadline
    pid=$(cat /var/run/docker.pid 2>/dev/null) || die "no /var/run/docker.pid: cannot tell which process is the engine"
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == dockerd ]] || die "pid $pid of /var/run/docker.pid is not dockerd"
    engine_stopped=true
    log "SIGTERM to dockerd (pid $pid, from /var/run/docker.pid)"
    kill -TERM "$pid"
    deadline=$((SECONDS + 120))
    while [[ -e "/proc/$pid" ]]; do
      ((SECONDS < deadline)) || die "dockerd (pid $pid) did not exit within 120s of SIGTERM"
      sleep 1
    done
  fi
  ! docker info >/dev/null 2>&1 || die "the engine still answers after it was stopped"
}

start_engine() {
  if [[ "$engine_method" == systemd ]]; then
    systemctl start docker.service
  fi
  # Starts dockerd when it does not answer, raises the host limits, and
  # returns once `docker info` answers.
  "$QS_ROOT/hack/ensure-docker.sh" >&2
  engine_stopped=false
}

# ---- what must survive ----

declare -A before=()

# container_ip NAME: its IPv4 address on its own network, empty when none.
container_ip() {
  docker inspect -f '{{range $n, $e := .NetworkSettings.Networks}}{{if eq $n $.HostConfig.NetworkMode}}{{$e.IPAddress}}{{end}}{{end}}' "$1" 2>/dev/null || true
}
lb_container() {
  docker ps -a --filter "label=io.x-k8s.capct.cluster=$cluster" --filter "label=io.x-k8s.capct.role=load-balancer" --format '{{.Names}}' | head -1
}
# node_containers: the cluster's containers other than the load balancer.
node_containers() {
  docker ps -a --filter "label=io.x-k8s.capct.cluster=$cluster" --format '{{.Names}} {{.Label "io.x-k8s.capct.role"}}' |
    awk '$2 != "load-balancer" {print $1}' | sort
}
host_port() { { docker port "$1" 6443/tcp 2>/dev/null || true; } | sed -n 's/^127\.0\.0\.1:\([0-9]*\)$/\1/p' | head -1; }
endpoint() { kmgmt get cluster "$cluster" -n "$namespace" --request-timeout=5s -o jsonpath='{.spec.controlPlaneEndpoint.host}:{.spec.controlPlaneEndpoint.port}'; }
cc_host_port() { kmgmt get containercluster "$cluster" -n "$namespace" --request-timeout=5s -o jsonpath='{.status.loadBalancer.hostPort}'; }
pod_uid() { kwl get pod "$1" --request-timeout=5s -o jsonpath='{.metadata.uid}'; }

record_before() {
  local lb c
  before[mgmt.ip]=$(container_ip "$mgmt_name")
  before[mgmt.port]=$(host_port "$mgmt_name")
  lb=$(lb_container)
  [[ -n "$lb" ]] || die "no load balancer container of Cluster $cluster"
  before[lb]=$lb
  before[lb.ip]=$(container_ip "$lb")
  before[lb.port]=$(host_port "$lb")
  before[endpoint]=$(endpoint)
  before[cc.port]=$(cc_host_port)
  before[nodes]=$(node_containers | tr '\n' ' ')
  for c in ${before[nodes]}; do before[ip.$c]=$(container_ip "$c"); done
  before[node.names]=$(kwl get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | sort | tr '\n' ' ')
  before[uid.qs-server]=$(pod_uid qs-server)
  before[uid.qs-client]=$(pod_uid qs-client)
  local k
  for k in $(printf '%s\n' "${!before[@]}" | sort); do log "before: $k = ${before[$k]}"; done
}

# ---- the checks ----

declare -a results=()
# check NAME DETAIL-OF-FAILURE...: records NAME as failed with the details,
# or as passed when none are given.
check() {
  local name=$1
  shift
  if (($# == 0)); then
    results+=("PASS  $name")
  else
    local details
    details=$(printf '%s; ' "$@")
    results+=("FAIL  $name: ${details%; }")
  fi
}

check_mgmt() {
  local problems=() state
  state=$(docker inspect -f '{{.State.Status}}' "$mgmt_name" 2>/dev/null || echo missing)
  [[ "$state" == running ]] || problems+=("container $state")
  [[ "$(container_ip "$mgmt_name")" == "${before[mgmt.ip]}" ]] || problems+=("address $(container_ip "$mgmt_name"), was ${before[mgmt.ip]}")
  [[ "$(host_port "$mgmt_name")" == "${before[mgmt.port]}" ]] || problems+=("API host port '$(host_port "$mgmt_name")', was ${before[mgmt.port]}")
  kmgmt get --raw /readyz --request-timeout=5s >/dev/null 2>&1 || problems+=("API does not answer through the kubeconfig written before")
  check "management node $mgmt_name: running, same address and API host port, API answers" "${problems[@]}"
}

check_lb() {
  local problems=() lb=${before[lb]} state port
  state=$(docker inspect -f '{{.State.Status}} (restart policy {{.HostConfig.RestartPolicy.Name}})' "$lb" 2>/dev/null || echo missing)
  [[ "$state" == running* ]] || problems+=("container $state")
  [[ "$(container_ip "$lb")" == "${before[lb.ip]}" ]] || problems+=("address '$(container_ip "$lb")', was ${before[lb.ip]}")
  port=$(host_port "$lb")
  [[ "$port" == "${before[lb.port]}" ]] || problems+=("host port '$port', was ${before[lb.port]}")
  [[ "$(endpoint 2>/dev/null)" == "${before[endpoint]}" ]] || problems+=("Cluster endpoint '$(endpoint 2>/dev/null)', was ${before[endpoint]}")
  [[ "$(cc_host_port 2>/dev/null)" == "${before[cc.port]}" ]] || problems+=("ContainerCluster hostPort '$(cc_host_port 2>/dev/null)', was ${before[cc.port]}")
  kwl get --raw /readyz --request-timeout=5s >/dev/null 2>&1 || problems+=("workload API does not answer through the kubeconfig written before")
  kwl --server "https://127.0.0.1:${before[lb.port]}" get --raw /readyz --request-timeout=5s >/dev/null 2>&1 ||
    problems+=("workload API does not answer on 127.0.0.1:${before[lb.port]}")
  # Started again by the engine, as the nodes are: CAPCT, which would start
  # it too, runs in the management cluster and can act only once that
  # answers again.
  local started mgmt_back
  started=$(date -d "$(docker inspect -f '{{.State.StartedAt}}' "$lb" 2>/dev/null)" +%s 2>/dev/null || echo 0)
  mgmt_back=$(awk -F'\t' -v t="$t_answer" '$1 >= t && $2 == "management API" && $3 == "answers" { print $1; exit }' "$states_file")
  if [[ -n "$mgmt_back" ]] && ((started >= mgmt_back)); then
    problems+=("started again at +$((started - t_stop))s, once the management API answered (+$((mgmt_back - t_stop))s): by CAPCT, not by the engine")
  fi
  check "load balancer $lb: running (started again by the engine), same address and host port, same endpoint, API answers" "${problems[@]}"
}

check_node_containers() {
  local problems=() c state ip
  for c in ${before[nodes]}; do
    state=$(docker inspect -f '{{.State.Status}} (restart policy {{.HostConfig.RestartPolicy.Name}})' "$c" 2>/dev/null || echo missing)
    [[ "$state" == running* ]] || problems+=("$c $state")
    ip=$(container_ip "$c")
    [[ "$ip" == "${before[ip.$c]}" ]] || problems+=("$c on '$ip', was ${before[ip.$c]}")
  done
  check "node containers: every one running on the address it had" "${problems[@]}"
}

# check_nodes: every Node Ready, with a status a kubelet posted after the
# engine stopped (a status from before says nothing about now).
check_nodes() {
  local out
  if ! out=$(kwl get nodes --request-timeout=5s -o json 2>/dev/null | jq -r --argjson t0 "$t_stop" '
      .items[] | (.status.conditions[] | select(.type == "Ready")) as $r
      | select($r.status != "True" or ($r.lastHeartbeatTime | fromdateiso8601) < $t0)
      | "\(.metadata.name) Ready=\($r.status) (\($r.reason // "")), last heartbeat \($r.lastHeartbeatTime)"'); then
    check "every Node Ready after the restart" "the workload API does not answer"
    return
  fi
  local names problems=()
  [[ -z "$out" ]] || mapfile -t problems <<<"$out"
  names=$(kwl get nodes --request-timeout=5s -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' 2>/dev/null | sort | tr '\n' ' ')
  [[ "$names" == "${before[node.names]}" ]] || problems+=("Nodes '$names', were '${before[node.names]}'")
  check "every Node Ready after the restart" "${problems[@]}"
}

# cluster_available: prints the Cluster's Available condition as
# "STATUS REASON LAST-TRANSITION-EPOCH".
cluster_available() {
  kmgmt get cluster "$cluster" -n "$namespace" --request-timeout=5s -o json 2>/dev/null | jq -r '
    (.status.conditions // [])[] | select(.type == "Available")
    | "\(.status) \(.reason // "-") \(.lastTransitionTime | fromdateiso8601)"'
}

check_available() {
  local status reason since
  read -r status reason since <<<"$(cluster_available)"
  if [[ "$status" == True ]]; then
    check "Cluster $cluster Available"
  else
    check "Cluster $cluster Available" "Available=${status:-unknown} ($reason)"
  fi
}

check_pods() {
  local problems=() pod out more
  for pod in qs-server qs-client; do
    if ! out=$(kwl get pod "$pod" --request-timeout=5s -o json 2>/dev/null); then
      problems+=("$pod: cannot be read")
      continue
    fi
    [[ "$(jq -r .metadata.uid <<<"$out")" == "${before[uid.$pod]}" ]] || problems+=("$pod is not the pod of before")
    mapfile -t more < <(jq -r --argjson t0 "$t_stop" '
      (.status.containerStatuses[0].state.running.startedAt // "") as $s
      | (if $s == "" or ($s | fromdateiso8601) < $t0 then "\(.metadata.name) has not run again since the restart" else empty end),
        (if any(.status.conditions[]?; .type == "Ready" and .status == "True") then empty else "\(.metadata.name) is not Ready" end)' <<<"$out")
    problems+=("${more[@]}")
  done
  check "probe pods qs-server and qs-client: the same pods, running again, Ready" "${problems[@]}"
}

# evaluate: runs every check into results; true when all passed.
evaluate() {
  results=()
  check_mgmt
  check_lb
  check_node_containers
  check_nodes
  check_available
  check_pods
  ! printf '%s\n' "${results[@]}" | grep -q '^FAIL'
}

# wait_pod_traffic waits, up to restart_timeout from the engine answering,
# for the client pod to reach the server pod by pod IP, and prints how long
# that took. The routes between node containers live in the containers'
# network namespaces, which a restart empties: CAPCT puts them back when the
# containers' start events reach it, so only after its manager, in the
# management cluster, runs again.
wait_pod_traffic() {
  local server_ip want deadline
  server_ip=$(kwl get pod qs-server -o jsonpath='{.status.podIP}')
  want="hello from qs-server on $(kwl get pod qs-server -o jsonpath='{.spec.nodeName}')"
  deadline=$((t_answer + restart_timeout))
  until [[ "$(http_get "$server_ip" 8080 2>/dev/null)" == "$want" ]]; do
    (($(date +%s) < deadline)) || die "pod-to-pod traffic did not come back within ${restart_timeout}s of the engine answering"
    sleep 2
  done
  log "measured: engine answering -> pod-to-pod traffic $(($(date +%s) - t_answer))s"
}

# ---- the states objects pass through ----

# sample: one "object<TAB>state" line per object, from the engine and both
# API servers, each read with a short timeout.
sample() {
  local out
  if docker ps -q >/dev/null 2>&1; then
    echo -e "engine\tanswers"
    docker ps -a --filter "label=io.x-k8s.capct.cluster=$cluster" --format 'container {{.Names}}\t{{.State}}' 2>/dev/null || true
    docker ps -a --filter "label=$QS_LABEL=$mgmt_name" --format 'container {{.Names}}\t{{.State}}' 2>/dev/null || true
  else
    echo -e "engine\tdown"
  fi
  if out=$(kmgmt get containermachines,machines,clusters,containerclusters -n "$namespace" --request-timeout=3s -o json 2>/dev/null); then
    echo -e "management API\tanswers"
    # The phase, then for a Cluster its availability conditions, for the
    # others Ready and every condition that is not True (Paused and
    # Deleting are False when all is well).
    jq -r '
      def cond: "\(.type)=\(.status)" + (if .status != "True" then "(\(.reason // ""))" else "" end);
      .items[]
      | .kind as $kind
      | [($kind + " " + .metadata.name),
         ([.status.phase // empty]
          + [(.status.conditions // [])[]
             | select(if $kind == "Cluster"
                      then (.type | IN("Available", "RemoteConnectionProbe", "ControlPlaneAvailable", "WorkersAvailable"))
                      else .type == "Ready" or (.status != "True" and (.type | IN("Paused", "Deleting") | not)) end)
             | cond]
          | join(" "))]
      | @tsv' <<<"$out"
  else
    echo -e "management API\tunreachable"
  fi
  if out=$(kwl get nodes,pods -A --request-timeout=3s -o json 2>/dev/null); then
    echo -e "workload API\tanswers"
    jq -r '
      .items[]
      | select(.kind == "Node" or (.metadata.name | test("^qs-")))
      | [(.kind + " " + .metadata.name),
         ([(.status.conditions // [])[] | select(.type == "Ready") | "Ready=\(.status)" + (if .reason then "(\(.reason))" else "" end)]
          + (if .kind == "Pod" then [.status.phase, "restarts=\(.status.containerStatuses[0].restartCount // 0)"] else [] end)
          | join(" "))]
      | @tsv' <<<"$out"
  else
    echo -e "workload API\tunreachable"
  fi
}

# start_sampler: samples every 3 s in the background, appending
# "epoch<TAB>object<TAB>state" to states_file whenever an object's state
# changes. Bounded: it ends by itself after an hour.
start_sampler() {
  : >"$states_file"
  (
    trap - ERR
    set +e
    declare -A last=()
    end=$((SECONDS + 3600))
    while ((SECONDS < end)); do
      now=$(date +%s)
      while IFS=$'\t' read -r obj state; do
        [[ -n "$obj" && "${last[$obj]:-}" != "$state" ]] || continue
        last[$obj]=$state
        printf '%s\t%s\t%s\n' "$now" "$obj" "$state" >>"$states_file"
      done < <(sample)
      sleep 3
    done
  ) &
  sampler_pid=$!
}

stop_sampler() {
  [[ -n "$sampler_pid" ]] || return 0
  kill "$sampler_pid" 2>/dev/null || true
  wait "$sampler_pid" 2>/dev/null || true
  sampler_pid=""
}

# print_states: the table of states, times in seconds since the engine was
# told to stop.
print_states() {
  [[ -s "$states_file" ]] || return 0
  log "states seen (seconds since the engine was told to stop; it answered again at +$((t_answer - t_stop))s), from $states_file:"
  awk -F'\t' -v t0="$t_stop" '
    { if (!($2 in first)) { order[++n] = $2; first[$2] = 1 }
      seq[$2] = seq[$2] sprintf("\n      %+5ds  %s", $1 - t0, $3) }
    END { for (i = 1; i <= n; i++) printf "  %s%s\n", order[i], seq[order[i]] }' "$states_file" >&2
}

# ---- the flow ----

on_failure() {
  stop_sampler
  if $engine_stopped; then
    log "starting the engine again"
    start_engine || log "could not start the engine; see /var/log/capct-dockerd.log"
  fi
  if ! $reported; then
    print_states
    if ((${#results[@]} > 0)); then
      log "checks:"
      printf '  %s\n' "${results[@]}" >&2
    fi
  fi
  diagnose
  if $remove_on_failure; then
    remove_on_failure=false
    log "---- removing the test's clusters"
    # A cluster that did not come back may not delete either: fall back
    # to the labels sooner.
    (delete_timeout=120 down) || true
  fi
}

main() {
  remove_on_failure=true
  up
  step "probe pods on both workers, and what must survive"
  start_probes
  record_before

  step "stop the engine"
  start_sampler
  sleep 4 # a sample of the states before
  t_stop=$(date +%s)
  stop_engine
  log "engine stopped ($engine_method) in $(($(date +%s) - t_stop))s"

  step "start the engine"
  start_engine
  t_answer=$(date +%s)
  log "engine answers again $((t_answer - t_stop))s after it was told to stop"

  step "wait up to ${restart_timeout}s for the clusters to come back"
  local deadline=$((SECONDS + restart_timeout)) t_nodes="" t_available="" status reason since
  until evaluate; do
    if [[ -z "$t_nodes" ]] && printf '%s\n' "${results[@]}" | grep -q '^PASS  every Node Ready'; then
      t_nodes=$(($(date +%s) - t_answer))
      log "every Node Ready ${t_nodes}s after the engine answered"
    fi
    read -r status reason since <<<"$(cluster_available)"
    if [[ -z "$t_available" && "$status" == True ]] && { ((since >= t_stop)) || [[ -n "$t_nodes" ]]; }; then
      t_available=$(($(date +%s) - t_answer))
      log "Cluster Available ${t_available}s after the engine answered"
    fi
    ((SECONDS < deadline)) || break
    sleep 3
  done
  : "${t_nodes:=$(($(date +%s) - t_answer))}" "${t_available:=$(($(date +%s) - t_answer))}"
  sleep 4 # a last sample
  stop_sampler
  print_states
  reported=true
  log "checks, $((SECONDS - deadline + restart_timeout))s after the engine answered:"
  printf '  %s\n' "${results[@]}" >&2
  if printf '%s\n' "${results[@]}" | grep -q '^FAIL'; then
    die "after the engine restart: $(printf '%s\n' "${results[@]}" | grep -c '^FAIL') of ${#results[@]} checks failed (first: $(printf '%s\n' "${results[@]}" | grep -m1 '^FAIL' | cut -c7-))"
  fi
  read -r status reason since <<<"$(cluster_available)"
  log "measured: engine answering -> every Node Ready ${t_nodes}s, -> Cluster Available ${t_available}s$( ((since >= t_stop)) || echo ' (its Available condition never went False)')"

  step "traffic after the restart"
  wait_pod_traffic
  check_traffic
  remove_probes
  end_step
  down
}

main
