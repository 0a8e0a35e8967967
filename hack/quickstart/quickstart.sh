#!/usr/bin/env bash
# The quickstart (docs/quickstart.md), offline, in one command:
#
#   quickstart.sh up     build what is missing, boot the management cluster,
#                        `clusterctl init --infrastructure container`, create
#                        the workload cluster "demo" (1 control plane, 2
#                        MachineDeployment and 2 MachinePool workers), wait for
#                        every node Ready printing machine phases, then prove
#                        pod-to-pod traffic across workers and through a Service
#   quickstart.sh down   delete "demo" (and any other Cluster) through the
#                        management cluster (CAPCT's deletion path) when it
#                        answers, else remove by the labels that CAPCT and the
#                        quickstart put on containers, networks and volumes;
#                        remove the management cluster; fail if anything
#                        labelled is left
#   quickstart.sh test   up, scale the MachineDeployment 2->3 and the
#                        MachinePool 2->1, create and delete a
#                        ContainerCluster with an empty spec (the Go test
#                        test/emptyspec), a pod pulling through a registry
#                        mirror on a Node made for it (test/mirror), down
#                        (make test-quickstart)
#   quickstart.sh smoke  up, then down (make test-podman)
#   quickstart.sh prepare   only build what is missing (up's first two steps)
#   quickstart.sh diagnose  the conditions and controller logs it prints on failure
#
# Every step is cached: a second `up` rebuilds nothing and reuses the running
# clusters; after the engine restarted it starts the management node if
# needed, waits for its API server and for the workload nodes, or says what
# is broken and what to run (docs/restarts.md). On failure it names the
# step, prints the cluster's conditions and the controllers' last log lines,
# and leaves everything for inspection.
#
# Environment: QUICKSTART_CLUSTER (demo), QUICKSTART_WORKERS (replicas of the
# MachineDeployment and of the MachinePool, 2), QUICKSTART_TIMEOUT (seconds
# to wait for nodes, 900), QUICKSTART_DELETE_TIMEOUT (seconds for down to
# delete through the management cluster before it falls back to the labels,
# 300), QUICKSTART_VERSION (CAPCT's, v0.1.0), KUBERNETES_VERSION (v1.35.4),
# MGMT_NAME (capct-mgmt), MGMT_API_PORT, CAPCT_ENGINE (docker; podman puts
# the workload cluster on Podman, the management cluster staying on Docker).
#
# hack/quickstart/restart-test.sh and scale-out-test.sh source this file for
# its functions; run directly, it runs the command named by $1.
set -euo pipefail
# shellcheck source=hack/quickstart/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cluster=${QUICKSTART_CLUSTER:-demo}
namespace=default
k8s_version=${KUBERNETES_VERSION:-v1.35.4}
node_image=${NODE_IMAGE:-capct/node:$k8s_version}
timeout=${QUICKSTART_TIMEOUT:-900}
delete_timeout=${QUICKSTART_DELETE_TIMEOUT:-300}
workers=${QUICKSTART_WORKERS:-2}
mgmt_name=${MGMT_NAME:-capct-mgmt}
mgmt_network=${MGMT_NETWORK:-$mgmt_name}
mgmt_kubeconfig=$QS_OUT/management.kubeconfig
kubeconfig=$QS_OUT/$cluster.kubeconfig
clusterctl=$QS_CACHE/bin/clusterctl-$CAPI_VERSION
kubectl=$QS_CACHE/bin/kubectl-$k8s_version
probe_image=capct/busybox:quickstart
export CLUSTERCTL_DISABLE_VERSIONCHECK=true # there is no GitHub to ask
export QUICKSTART_VERSION=${QUICKSTART_VERSION:-v0.1.0}

kmgmt() { "$kubectl" --kubeconfig "$mgmt_kubeconfig" "$@"; }
kwl() { "$kubectl" --kubeconfig "$kubeconfig" "$@"; }
elapsed() { printf '%4ds' $((SECONDS - script_start)); }

# ---- memory ----

# The peak of the host's used memory (MemTotal - MemAvailable) while the
# script runs, sampled every 2 s by a background loop.
mem_file=""
start_memory_sampler() {
  mem_file=$(mktemp)
  used_mib >"$mem_file.base"
  (
    peak=0
    while sleep 2; do
      m=$(used_mib)
      if ((m > peak)); then peak=$m && echo "$peak" >"$mem_file"; fi
    done
  ) &
  mem_pid=$!
  trap 'kill "$mem_pid" 2>/dev/null || true; rm -f "$mem_file" "$mem_file.base"' EXIT
}
used_mib() { awk '/^MemTotal:/ {t=$2} /^MemAvailable:/ {a=$2} END {print int((t - a) / 1024)}' /proc/meminfo; }
report_memory() {
  log "peak host memory in use: $(cat "$mem_file" 2>/dev/null || used_mib) MiB (before the run: $(cat "$mem_file.base") MiB)"
}

# ---- up ----

prerequisites() {
  step "prerequisites: Docker${QS_ENGINE/docker/}, node and LB images, kubectl"
  "$QS_ROOT/hack/ensure-docker.sh" >&2
  if [[ "$QS_ENGINE" == podman ]]; then
    "$QS_ROOT/hack/ensure-podman.sh" >&2
  fi
  KUBERNETES_VERSION=$k8s_version NODE_IMAGE=$node_image "$QS_ROOT/images/node/build.sh" >/dev/null
  "$QS_ROOT/images/haproxy/build.sh" >/dev/null
  load_into_engine "$node_image" "${LB_IMAGE:-capct/haproxy:2.6}"
  if [[ ! -x "$kubectl" ]]; then
    # the node image's kubectl, version-stamped by its build; the host may have none
    local id
    id=$(docker create "$node_image")
    mkdir -p "$(dirname "$kubectl")"
    docker cp "$id:/usr/bin/kubectl" "$kubectl.tmp" >/dev/null
    docker rm "$id" >/dev/null
    mv "$kubectl.tmp" "$kubectl"
  fi
  log "$node_image, $("$kubectl" version --client -o json | jq -r .clientVersion.gitVersion) kubectl"
}

controller_images() {
  step "controller images: CAPCT, Cluster API $CAPI_VERSION, cert-manager"
  make --no-print-directory -C "$QS_ROOT" docker-build QUICKSTART_VERSION="$QUICKSTART_VERSION" >&2
  "$here/build-capi-images.sh"
  "$here/build-cert-manager.sh"
  "$here/capi-repository.sh"
}

init_providers() {
  step "clusterctl init --infrastructure container"
  if kmgmt get providers.clusterctl.cluster.x-k8s.io -A -o name 2>/dev/null | grep -q infrastructure-container; then
    log "already initialised; reusing it"
    return
  fi
  # A cluster that names no network joins the management cluster's, the
  # only one the manager in it reaches (docs/templates.md).
  CAPCT_DEFAULT_NETWORK=$mgmt_network "$clusterctl" init --infrastructure container --config "$QS_OUT/clusterctl.yaml" \
    --kubeconfig "$mgmt_kubeconfig" --wait-providers >&2
}

create_cluster() {
  step "clusterctl generate cluster $cluster --flavor quickstart"
  # Generated once, applied every time: applying an unchanged manifest
  # changes nothing, and it completes an apply that an earlier run left
  # half done.
  if [[ -s "$QS_OUT/$cluster.yaml" ]] && kmgmt get cluster "$cluster" -n "$namespace" >/dev/null 2>&1; then
    log "reusing $QS_OUT/$cluster.yaml"
  else
    generate_cluster
  fi
  apply_cluster
}

generate_cluster() {
  "$clusterctl" generate cluster "$cluster" --infrastructure container --flavor quickstart \
    --kubernetes-version "$k8s_version" --control-plane-machine-count 1 --worker-machine-count "$workers" \
    --target-namespace "$namespace" --config "$QS_OUT/clusterctl.yaml" --kubeconfig "$mgmt_kubeconfig" \
    >"$QS_OUT/$cluster.yaml.tmp"
  mv "$QS_OUT/$cluster.yaml.tmp" "$QS_OUT/$cluster.yaml"
}

apply_cluster() {
  # `clusterctl init --wait-providers` waits for the Deployments, not for
  # kube-proxy to route their webhook Services: retry while a webhook
  # refuses connections (apply is idempotent).
  local tries=0 out
  until out=$(kmgmt apply -f "$QS_OUT/$cluster.yaml" 2>&1); do
    if ((++tries >= 30)) || ! grep -q "failed calling webhook" <<<"$out"; then
      echo "$out" >&2
      die "kubectl apply -f $QS_OUT/$cluster.yaml failed"
    fi
    sleep 2
  done
  log "applied $QS_OUT/$cluster.yaml ($((tries + 1)) attempts)"
}

# print_phases: one line for every ContainerMachine whose phase changed since
# the last call. The phase is the last lifecycle condition that is True; a
# failed machine ends the wait (unless die_on_failed_machine=false), since
# CAPCT does not retry a failed phase.
declare -A last_phase=()
die_on_failed_machine=true
print_phases() {
  local name phase
  while IFS=$'\t' read -r name phase; do
    [[ -n "$name" && "${last_phase[$name]:-}" != "$phase" ]] || continue
    log "$(elapsed)  ContainerMachine $name: $phase"
    last_phase[$name]=$phase
    [[ "$phase" != Failed* ]] || ! $die_on_failed_machine || die "ContainerMachine $name failed"
  done < <(kmgmt get containermachines -n "$namespace" -l "cluster.x-k8s.io/cluster-name=$cluster" -o json 2>/dev/null | jq -r '
    ["Launched", "Bootstrapped", "Registered", "Initialized"] as $order
    | .items[]
    | (.status.conditions // []) as $c
    | [.metadata.name,
       (if .metadata.deletionTimestamp then "Deleting"
        elif .status.phase == "Failed" then
          "Failed: " + ([$c[] | select(.type == "Ready") | .message][0] // "" | gsub("\\s+"; " ") | .[0:300])
        else ([$order[] as $t | select(any($c[]; .type == $t and .status == "True")) | $t] | last) // "Pending"
        end)]
    | @tsv')
}

fetch_kubeconfig() {
  [[ -s "$kubeconfig" ]] && return
  "$clusterctl" get kubeconfig "$cluster" -n "$namespace" --kubeconfig "$mgmt_kubeconfig" >"$kubeconfig.tmp" 2>/dev/null || return 1
  chmod 600 "$kubeconfig.tmp"
  mv "$kubeconfig.tmp" "$kubeconfig"
  log "$(elapsed)  wrote $kubeconfig"
}

# nodes_ready MD MP: true when the workload cluster has exactly 1 control
# plane, MD MachineDeployment and MP MachinePool nodes, all Ready.
last_nodes=""
nodes_ready() {
  local want_md=$1 want_mp=$2 counts
  fetch_kubeconfig || return 1
  counts=$(kwl get nodes --request-timeout=10s -o json 2>/dev/null | jq -r '
    def ready: any(.status.conditions[]; .type == "Ready" and .status == "True");
    def count(f): [.items[] | select(f)] | length;
    "\(count(ready)) \(.items | length) \(count(.metadata.name | test("-md-0-"))) \(count(.metadata.name | test("-mp-0-")))"') || return 1
  if [[ "$counts" != "$last_nodes" ]]; then
    read -r r t md mp <<<"$counts"
    log "$(elapsed)  nodes: $r of $t Ready ($md MachineDeployment, $mp MachinePool)"
    last_nodes=$counts
  fi
  [[ "$counts" == "$((1 + want_md + want_mp)) $((1 + want_md + want_mp)) $want_md $want_mp" ]]
}

# wait_for_nodes MD MP: waits for nodes_ready, printing machine phases.
# After an engine restart it dies saying what is broken and what to run,
# rather than waiting out the timeout: when containers of the cluster stay
# stopped for 90 s (neither the engine nor CAPCT starts them), or run for
# 90 s on another address than the one their machine was provisioned on
# (their kubelets, API server and etcd were set up on the old one).
wait_for_nodes() {
  local deadline=$((SECONDS + timeout)) name detail
  declare -A since=()
  local stuck=()
  until nodes_ready "$1" "$2"; do
    print_phases
    stuck=()
    while read -r name detail; do
      [[ -n "$name" ]] || continue
      : "${since[$name]:=$SECONDS}"
      ((SECONDS - since[$name] < 90)) || stuck+=("$name: $detail")
    done < <(stopped_containers; moved_containers)
    if ((${#stuck[@]} > 0)); then
      printf '%s\n' "${stuck[@]}" | while read -r line; do log "container $line"; done
      die "Cluster $cluster cannot come back by itself: its containers above have been stopped, or on an address other than their machine's, for 90s; 'docker start' may help a stopped one; else run 'make quickstart-down' (it removes everything labelled), then 'make quickstart'"
    fi
    ((SECONDS < deadline)) || die "timed out after ${timeout}s waiting for 1+$1+$2 Ready nodes"
    sleep 2
  done
  print_phases
}

# stopped_containers: "NAME DETAIL" for each container of the cluster that
# CAPCT made and that is not running.
stopped_containers() {
  local name dead=(--filter status=dead)
  # Podman has no "dead" state, and refuses the filter.
  [[ "$QS_ENGINE" == docker ]] || dead=()
  wl_engine ps -a --filter "label=io.x-k8s.capct.cluster=$cluster" --filter status=exited --filter status=created \
    "${dead[@]}" --format '{{.Names}}' | while read -r name; do
    echo "$name $(wl_engine inspect -f '{{.State.Status}} since {{.State.FinishedAt}}, exit code {{.State.ExitCode}}, restart policy {{.HostConfig.RestartPolicy.Name}}' "$name" 2>/dev/null)"
  done
}

# moved_containers: "NAME DETAIL" for each running machine container whose
# address is not the InternalIP its ContainerMachine recorded.
moved_containers() {
  local name recorded current
  kmgmt get containermachines -n "$namespace" -l "cluster.x-k8s.io/cluster-name=$cluster" -o json 2>/dev/null | jq -r '
    .items[] | select(.spec.providerID != null)
    | [(.spec.providerID | sub("^container:///"; "")),
       ([(.status.addresses // [])[] | select(.type == "InternalIP" and (.address | test("^[0-9.]+$"))) | .address][0] // "")]
    | @tsv' | while IFS=$'\t' read -r name recorded; do
    [[ -n "$recorded" ]] || continue
    # shellcheck disable=SC2016 # a Go template, not a shell expansion
    current=$(wl_engine inspect -f '{{if .State.Running}}{{range $n, $e := .NetworkSettings.Networks}}{{if eq $n $.HostConfig.NetworkMode}}{{$e.IPAddress}}{{end}}{{end}}{{end}}' "$name" 2>/dev/null) || continue
    [[ -z "$current" || "$current" == "$recorded" ]] || echo "$name runs on $current, but its machine was provisioned on $recorded"
  done
}

# load_probe_image NODE...: the probe pods' image, busybox from the host, put
# into the nodes' containerd (no registry to pull it from).
load_probe_image() {
  local key ctx node
  key=$(sha256sum /bin/busybox | hash_of)
  if [[ "$(image_label "$probe_image" io.capct.quickstart.inputs)" != "$key" ]]; then
    ctx=$(mktemp -d)
    cp /bin/busybox "$ctx/busybox"
    printf 'FROM scratch\nCOPY busybox /bin/busybox\nLABEL io.capct.quickstart.inputs="%s"\nENTRYPOINT ["/bin/busybox"]\n' "$key" >"$ctx/Dockerfile"
    docker build -q -t "$probe_image" "$ctx" >/dev/null
    rm -rf "$ctx"
  fi
  for node in "$@"; do
    docker save "$probe_image" | node_engine "$node" exec -i "$node" ctr -n k8s.io images import - >/dev/null
  done
}

# node_engine NODE ARGS...: the CLI of the engine that runs NODE's
# container, with ARGS: the workload engine (hack/multihost/cluster-test.sh
# runs nodes on two engines, and says which).
node_engine() {
  shift
  wl_engine "$@"
}

# http_get HOST PORT: the body's last line of GET / from the client pod.
# Through nc: Debian's static busybox wget crashes in glibc's resolver.
http_get() {
  kwl exec qs-client -- busybox sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | busybox nc -w 5 $1 $2" | tail -n 1 | tr -d '\r'
}

# start_probes: a busybox HTTP server pod qs-server (with a Service) on a
# MachineDeployment worker and a client pod qs-client on a MachinePool
# worker, both Ready.
start_probes() {
  local server_node client_node
  server_node=$(kwl get nodes -o name | sed -n 's|^node/\(.*-md-0-.*\)|\1|p' | head -1)
  client_node=$(kwl get nodes -o name | sed -n 's|^node/\(.*-mp-0-.*\)|\1|p' | head -1)
  [[ -n "$server_node" && -n "$client_node" ]] || die "no MachineDeployment or MachinePool node to run the probe pods on"
  load_probe_image "$server_node" "$client_node"
  kwl delete pod qs-server qs-client --ignore-not-found --wait >/dev/null
  kwl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: qs-server
  labels: {app: qs-server}
spec:
  nodeName: $server_node
  containers:
  - name: httpd
    image: $probe_image
    imagePullPolicy: Never
    command: [/bin/busybox, sh, -c, 'mkdir -p /www && echo "hello from \$(busybox hostname) on $server_node" > /www/index.html && exec busybox httpd -f -p 8080 -h /www']
    ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata:
  name: qs-server
spec:
  selector: {app: qs-server}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata:
  name: qs-client
spec:
  nodeName: $client_node
  containers:
  - name: client
    image: $probe_image
    imagePullPolicy: Never
    command: [/bin/busybox, sleep, "86400"]
YAML
  kwl wait --for=condition=Ready pod/qs-server pod/qs-client --timeout=120s >/dev/null
  log "probe pods: qs-server on $server_node, qs-client on $client_node"
}

# check_traffic: the client pod reaches the server pod by pod IP (node
# IPAM's routes between the two node containers) and through the Service by
# its DNS name (kube-proxy, CoreDNS).
check_traffic() {
  local server_node client_node server_ip want got tries=0
  server_node=$(kwl get pod qs-server -o jsonpath='{.spec.nodeName}')
  client_node=$(kwl get pod qs-client -o jsonpath='{.spec.nodeName}')
  server_ip=$(kwl get pod qs-server -o jsonpath='{.status.podIP}')
  want="hello from qs-server on $server_node"
  # A Node is Ready once its CNI configuration is written; the routes
  # between the nodes' pod CIDRs follow with the cluster's next pod network
  # sync, seconds later on a busy host, and a minute after an engine
  # restart, which clears every node's routes while the Nodes still show
  # Ready from before it.
  until got=$(http_get "$server_ip" 8080 2>/dev/null) && [[ "$got" == "$want" ]]; do
    ((++tries < 40)) || die "pod on $client_node got '$got' from $server_ip:8080, want '$want'"
    sleep 2
  done
  log "pod qs-client on $client_node -> pod qs-server $server_ip:8080 on $server_node: '$got' (attempt $((tries + 1)))"
  tries=0
  # CoreDNS starts once the nodes have pod networks; the Service's rules
  # reach every node's kube-proxy a moment after the endpoints exist.
  kwl -n kube-system rollout status deployment/coredns --timeout=120s >/dev/null
  until got=$(http_get qs-server.default.svc.cluster.local 80 2>/dev/null) && [[ "$got" == "$want" ]]; do
    ((++tries < 30)) || die "the Service qs-server answered '$got', want '$want'"
    sleep 2
  done
  log "pod qs-client -> Service qs-server.default.svc.cluster.local:80: '$got' (attempt $((tries + 1)))"
}

remove_probes() {
  kwl delete pod qs-server qs-client --ignore-not-found --wait=false >/dev/null
  kwl delete service qs-server --ignore-not-found >/dev/null
}

# prove: pod-to-pod traffic across a MachineDeployment and a MachinePool
# worker, and through a Service.
prove() {
  step "prove: pod to pod across workers, and through a Service"
  start_probes
  check_traffic
  remove_probes
}

up() {
  start_memory_sampler
  prerequisites
  controller_images
  step "management cluster"
  LOG_NAME=mgmt-cluster "$here/mgmt-cluster.sh" up
  init_providers
  create_cluster
  step "wait for 1 + $workers + $workers nodes Ready"
  # Fetched again: a reused cluster's endpoint may have changed since.
  rm -f "$kubeconfig"
  wait_for_nodes "$workers" "$workers"
  if ((workers > 0)); then
    prove
  fi
  end_step
  log "workload cluster $cluster is up; kubeconfig: $kubeconfig"
  log "management cluster kubeconfig: $mgmt_kubeconfig"
  kwl get nodes -o wide >&2
  report_memory
  finish
}

# ---- down ----

# labelled_containers: the containers to remove: those CAPCT labelled for
# the cluster, and any container carrying one of CAPCT's ownership labels
# (io.x-k8s.capct.cluster, .cluster-uid or any other .cluster* key, or
# .machine) on the management cluster's network, where every workload
# cluster of the quickstart lives. By the labels' presence, not by an
# owner's identity, which only the (maybe gone) management cluster knows.
labelled_containers() {
  {
    docker ps -aq --filter "label=io.x-k8s.capct.cluster=$cluster"
    if docker network inspect "$mgmt_network" >/dev/null 2>&1; then
      docker ps -aq --filter "network=$mgmt_network" | while read -r id; do
        if docker inspect -f '{{range $k, $v := .Config.Labels}}{{println $k}}{{end}}' "$id" |
          grep -qE '^io\.x-k8s\.capct\.(cluster|machine)'; then
          echo "$id"
        fi
      done
    fi
  } | sort -u
}

# leftovers: what CAPCT labelled for this cluster, or the quickstart for
# this management cluster, and is still there, as "kind id name" lines.
leftovers() {
  local label
  for label in "io.x-k8s.capct.cluster=$cluster" "$QS_LABEL=$mgmt_name"; do
    docker ps -a --filter "label=$label" --format 'container {{.ID}} {{.Names}}'
    docker network ls --filter "label=$label" --format 'network {{.ID}} {{.Name}}'
    docker volume ls -q --filter "label=$label" | sed 's/^/volume /'
  done | sort -u
  if [[ "$QS_ENGINE" != docker ]]; then
    label="io.x-k8s.capct.cluster=$cluster"
    wl_engine ps -a --filter "label=$label" --format "$QS_ENGINE container {{.ID}} {{.Names}}"
    wl_engine network ls --filter "label=$label" --format "$QS_ENGINE network {{.ID}} {{.Name}}"
    wl_engine volume ls -q --filter "label=$label" | sed "s/^/$QS_ENGINE volume /"
  fi
}

# mgmt_answers: true when the management node runs and its API server
# answers within a minute (it may still be starting after an engine
# restart), through a kubeconfig written afresh.
mgmt_answers() {
  [[ -x "$kubectl" ]] || return 1
  [[ "$(docker inspect -f '{{.State.Running}}' "$mgmt_name" 2>/dev/null)" == true ]] || return 1
  LOG_NAME=mgmt-cluster "$here/mgmt-cluster.sh" kubeconfig >/dev/null 2>&1 || return 1
  local deadline=$((SECONDS + 60))
  until kmgmt get --raw /readyz --request-timeout=5s >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 2
  done
}

# delete_clusters: deletes every Cluster in the management cluster (it is
# going away), so that CAPCT's deletion path removes their containers and
# networks. False when they are not gone within delete_timeout.
delete_clusters() {
  local clusters
  clusters=$(kmgmt get clusters -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}' 2>/dev/null) || return 1
  if [[ -z "$clusters" ]]; then
    log "no Cluster in the management cluster"
    return 0
  fi
  log "deleting $(tr '\n' ' ' <<<"$clusters")through the management cluster (up to ${delete_timeout}s)"
  kmgmt delete clusters --all -A --wait=false >&2 || return 1
  local deadline=$((SECONDS + delete_timeout))
  until [[ -z "$(kmgmt get clusters -A -o name 2>/dev/null)" ]]; do
    if ((SECONDS >= deadline)); then
      log "still there after ${delete_timeout}s: $(kmgmt get clusters -A -o name 2>/dev/null | tr '\n' ' ')"
      return 1
    fi
    sleep 2
  done
}

# down: deletes the workload clusters through the management cluster when
# it answers (CAPCT's deletion path runs), else falls back to the labels;
# then removes what is left by label, containers first, then networks, then
# volumes, and the management cluster. Fails if anything labelled is left,
# or if CAPCT's own deletion left something.
down() {
  step "delete the workload clusters through the management cluster"
  local through=false leaked ids
  if mgmt_answers; then
    if delete_clusters; then
      through=true
    else
      log "deleting through the management cluster did not finish; falling back to the labels"
    fi
  else
    log "the management cluster $mgmt_name does not answer (or does not exist); falling back to the labels"
  fi
  rm -f "$kubeconfig" "$QS_OUT/$cluster.yaml"

  step "remove what CAPCT labelled, then the management cluster $mgmt_name"
  if ! $through; then
    # CAPCT's manager still runs there, and would make again what is
    # removed below: a Cluster waiting for its workers keeps its load
    # balancer, and recreates it when it goes. Only the container the
    # quickstart labelled as this management cluster.
    mapfile -t ids < <(docker ps -q --filter "label=$QS_LABEL=$mgmt_name")
    ((${#ids[@]} == 0)) || docker stop -t 10 "${ids[@]}" >/dev/null 2>&1 || true
  fi
  mapfile -t ids < <(labelled_containers)
  if ((${#ids[@]} > 0)); then
    leaked=$(docker inspect -f '{{.Name}}' "${ids[@]}" | tr -d / | tr '\n' ' ')
    log "removing containers: $leaked"
    docker rm -f -v "${ids[@]}" >/dev/null
  fi
  LOG_NAME=mgmt-cluster "$here/mgmt-cluster.sh" down || true
  mapfile -t ids < <(docker network ls -q --filter "label=io.x-k8s.capct.cluster=$cluster")
  ((${#ids[@]} == 0)) || docker network rm "${ids[@]}" >/dev/null || true
  mapfile -t ids < <(docker volume ls -q --filter "label=io.x-k8s.capct.cluster=$cluster")
  ((${#ids[@]} == 0)) || docker volume rm "${ids[@]}" >/dev/null || true
  if [[ "$QS_ENGINE" != docker ]]; then
    remove_from_engine
  fi

  step "check that nothing CAPCT labelled for $cluster, or the quickstart for $mgmt_name, is left"
  local left
  left=$(leftovers)
  if [[ -n "$left" ]]; then
    log "left behind:"
    echo "$left" >&2
    die "could not remove the objects above"
  fi
  if $through && [[ -n "${leaked:-}" ]]; then
    die "CAPCT's deletion left containers (now removed): $leaked"
  fi
  log "nothing left"
  finish
}

# remove_from_engine: what CAPCT labelled for the cluster on the workload
# engine when that is not Docker: containers (recorded as leaked, as in
# down), then networks, then volumes.
remove_from_engine() {
  local ids names label="io.x-k8s.capct.cluster=$cluster"
  mapfile -t ids < <(wl_engine ps -aq --filter "label=$label")
  if ((${#ids[@]} > 0)); then
    names=$(wl_engine inspect -f '{{.Name}}' "${ids[@]}" | tr -d / | tr '\n' ' ')
    leaked+=" $names"
    log "removing $QS_ENGINE containers: $names"
    wl_engine rm -f -v "${ids[@]}" >/dev/null
  fi
  mapfile -t ids < <(wl_engine network ls -q --filter "label=$label")
  ((${#ids[@]} == 0)) || wl_engine network rm "${ids[@]}" >/dev/null || true
  mapfile -t ids < <(wl_engine volume ls -q --filter "label=$label")
  ((${#ids[@]} == 0)) || wl_engine volume rm "${ids[@]}" >/dev/null || true
}

# ---- test ----

test_flow() {
  # A failed test removes what it made once the diagnostics are out, so
  # that a CI machine does not keep clusters between runs.
  remove_on_failure=true
  # Compiled, and test/mirror's registry image built, before up, so that
  # a broken test fails in seconds rather than after the clusters.
  step "compile test/emptyspec and test/mirror, build capct/registry"
  (cd "$QS_ROOT" && go test -tags realcluster -c -o /dev/null ./test/emptyspec &&
    go test -tags realcluster -c -o /dev/null ./test/mirror)
  "$QS_ROOT/images/registry/build.sh" >/dev/null
  up
  script_start=$SECONDS
  step "scale MachineDeployment $cluster-md-0 2->3 and MachinePool $cluster-mp-0 2->1"
  kmgmt scale machinedeployment "$cluster-md-0" -n "$namespace" --replicas=3 >&2
  kmgmt scale machinepool "$cluster-mp-0" -n "$namespace" --replicas=1 >&2
  wait_for_nodes 3 1
  step "a ContainerCluster with spec: {} Provisioned, then deleted (test/emptyspec)"
  go_test test/emptyspec 15m
  step "a pod on a new Node pulls through a registry mirror, one on an old Node cannot (test/mirror)"
  go_test test/mirror 15m MIRROR_SOURCE_IMAGE="$probe_image"
  end_step
  down
}

# start_engine_if_stopped: for a failure path. A test that restarts the
# engine does it through restart-test.sh engine-stop and engine-start, and
# engine-stop leaves $QS_OUT/engine-stopped until the engine is started:
# should the test have failed in between, the engine is started again.
start_engine_if_stopped() {
  [[ -e "$QS_OUT/engine-stopped" ]] || return 0
  log "starting the engine again"
  "$QS_ROOT/hack/quickstart/restart-test.sh" engine-start || log "could not start the engine; see /var/log/capct-dockerd.log"
}

# go_test PACKAGE TIMEOUT [NAME=VALUE...]: runs the Go tests of PACKAGE
# (build tag realcluster) against the clusters up now, with where they are
# in REALCLUSTER_* (test/realcluster) and the variables given; the output
# also in $QS_OUT/go-test-<the package's last element>.log. The test flow
# runs test/emptyspec and test/mirror with it; restart-test.sh,
# scale-out-test.sh, chaos-test.sh and hack/multihost/cluster-test.sh run
# theirs.
go_test() {
  local out
  out="$QS_OUT/go-test-$(basename "$1").log"
  log "go test -tags realcluster ./$1 (output also in $out)"
  (cd "$QS_ROOT" && env REALCLUSTER_MGMT_KUBECONFIG="$mgmt_kubeconfig" REALCLUSTER_KUBECONFIG="$kubeconfig" \
    REALCLUSTER_CLUSTER="$cluster" REALCLUSTER_NAMESPACE="$namespace" REALCLUSTER_MGMT_NAME="$mgmt_name" \
    REALCLUSTER_KUBECTL="$kubectl" REALCLUSTER_OUT="$QS_OUT" REALCLUSTER_NODE_TIMEOUT="$timeout" "${@:3}" \
    go test -tags realcluster -count=1 -v -timeout "$2" "./$1") 2>&1 | tee "$out" >&2
}

# smoke_flow: up, then down: the quickstart's cluster and its traffic
# proof without the scaling (make test-podman, with QUICKSTART_WORKERS=1).
smoke_flow() {
  remove_on_failure=true
  up
  script_start=$SECONDS
  down
}

# on_failure: for the ERR trap and die (lib.sh).
remove_on_failure=false
on_failure() {
  diagnose
  if $remove_on_failure; then
    remove_on_failure=false # once, even if down fails too
    log "---- removing the test's clusters"
    (down) || true
  fi
}

# diagnose: what failed, and where to look.
diagnose() {
  [[ -s "$mgmt_kubeconfig" && -x "$kubectl" ]] || return 0
  log "---- diagnostics; everything is left in place ('make quickstart-down' removes it)"
  if kmgmt get cluster "$cluster" -n "$namespace" >/dev/null 2>&1; then
    "$clusterctl" describe cluster "$cluster" -n "$namespace" --kubeconfig "$mgmt_kubeconfig" --show-conditions all >&2 || true
    kmgmt get containermachines -n "$namespace" -o json | jq -r '
      .items[] | select(.status.phase != "Running")
      | "ContainerMachine \(.metadata.name) (\(.status.phase // "Pending")):",
        ((.status.conditions // [])[] | select(.status != "True") | "  \(.type)=\(.status) \(.reason): \(.message // "")")' >&2 || true
  fi
  local d
  for d in capct-system/capct-controller-manager capi-system/capi-controller-manager \
    capi-kubeadm-control-plane-system/capi-kubeadm-control-plane-controller-manager \
    capi-kubeadm-bootstrap-system/capi-kubeadm-bootstrap-controller-manager; do
    log "---- last log lines of $d"
    kmgmt logs -n "${d%%/*}" "deploy/${d#*/}" --tail=15 2>&1 | cut -c1-400 >&2 || true
  done
}

# Sourced by the tests for its functions: they run their own flow.
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0

case "${1:-}" in
  up) up ;;
  down) down ;;
  test) test_flow ;;
  smoke) smoke_flow ;;
  prepare)
    prerequisites
    controller_images
    finish
    ;;
  diagnose) diagnose ;;
  *) echo "usage: $0 up|down|test|smoke|prepare|diagnose" >&2; exit 2 ;;
esac
