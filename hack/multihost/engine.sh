#!/usr/bin/env bash
# A second container engine on this machine, for the multi-engine tests
# (docs/multihost.md, section 7): dockerd in a network namespace of its own,
# joined to the host by a veth pair, reached only over TCP with TLS both
# ways, as a remote host's engine is. It touches only what it made.
#
#   engine.sh up     namespace, link, certificates, engine 2, and both
#                    engines in one swarm; writes out/multihost/engine.env
#                    (MH_ENDPOINT, MH_PKI, MH_DATA_ROOT, MH_OVERLAY_CIDR,
#                    MH_CLUSTER_CIDR, MH_SOCKET)
#   engine.sh stop   its host is lost: its packets dropped, engine 2 stopped
#   engine.sh start  its host is back: engine 2 started, packets flow
#   engine.sh down   stops engine 2 and removes everything up made;
#                    idempotent, and run by up itself when up fails
#
# Engine 2 shares the host's kernel and mounts; its own are its data and
# exec roots, its socket, its namespace's interfaces and iptables, and its
# cgroup parent. The swarm carries attachable overlay networks between the
# two engines over the link. The host's engine is put in a swarm only when
# it is in none, and leaves it in down only then, so a swarm this script did
# not make is never left; a host engine already in a swarm is refused, since
# engine 2 could not join a swarm the script knows nothing of. The mark of
# the swarm up made is a label on the host's swarm node, not a file of this
# checkout: a run killed in one clone leaves the swarm in the engine's data
# root, and down from any other clone must still find it and leave it.
set -euo pipefail

log_name=multihost-engine
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/../lib.sh"
# shellcheck source=hack/engine-host.sh
source "$CAPCT_ROOT/hack/engine-host.sh"
trap 'fail $?' ERR

netns=capct-mh
host_if=capct-mh0
ns_if=capct-mh1
# A /30 that no interface or route of this machine holds (checked below):
# the host's end is its first address, engine 2's the second.
link_cidr=${MH_LINK_CIDR:-10.254.0.0/30}
data_root=/var/lib/capct-mh
exec_root=/run/capct-mh
socket=$exec_root/docker.sock
pidfile=$exec_root/docker.pid
daemon_log=/var/log/capct-mh-dockerd.log
out=${MH_OUT:-$CAPCT_ROOT/out/multihost}
pki=$out/pki
port=2376
swarm_label=capct.multihost.made
# Where the swarm takes its overlay networks' subnets from (Docker's default
# is 10.0.0.0/8), and the subnet, outside it, of the tests' overlay network.
addr_pool=${MH_ADDR_POOL:-10.254.64.0/18}
overlay_cidr=${MH_OVERLAY_CIDR:-10.254.128.0/24}
# The overlay network the test cluster runs on (cluster-test.sh), outside
# both.
cluster_cidr=${MH_CLUSTER_CIDR:-10.254.144.0/20}

base=${link_cidr%/*}
host_addr=${base%.*}.$((${base##*.} + 1))
ns_addr=${base%.*}.$((${base##*.} + 2))
endpoint=tcp://$ns_addr:$port

engine2() { docker -H "unix://$socket" "$@"; }

# swarm_made: whether the host's engine is in a swarm up made (its node
# carries swarm_label).
swarm_made() {
  local id
  id=$(docker info --format '{{.Swarm.NodeID}}')
  [[ -n $id ]] && docker node inspect "$id" --format "{{index .Spec.Labels \"$swarm_label\"}}" 2>/dev/null | grep -qx true
}

# free_link: dies when an address or route of the link's /30 is held by
# anything but this script's interface.
free_link() {
  local held
  held=$( { ip -4 -o addr show; ip -4 route show; } | grep -F " ${base%.*}." | grep -v "$host_if" || true)
  [[ -z "$held" ]] || die "$link_cidr overlaps what this machine holds (set MH_LINK_CIDR): $held"
}

make_pki() {
  # Kept while its server certificate names engine 2's address.
  if [[ -s $pki/client.key ]] && openssl x509 -in "$pki/server.crt" -noout -ext subjectAltName 2>/dev/null | grep -qw "IP Address:$ns_addr"; then
    return 0
  fi
  rm -rf "$pki"
  mkdir -p "$pki"
  (
    cd "$pki"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj "/CN=capct multihost CA" \
      -keyout ca.key -out ca.crt 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=engine-2" -keyout server.key -out server.csr 2>/dev/null
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -out server.crt \
      -extfile <(printf 'subjectAltName=IP:%s\nextendedKeyUsage=serverAuth\n' "$ns_addr") 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=capct-manager" -keyout client.key -out client.csr 2>/dev/null
    openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -out client.crt \
      -extfile <(printf 'extendedKeyUsage=clientAuth\n') 2>/dev/null
    rm -f ./*.csr ca.srl
    chmod 0600 ./*.key
  )
}

# start_engine2: dockerd 2 in the namespace, unless it answers already;
# returns once it answers.
start_engine2() {
  if ! engine2 info >/dev/null 2>&1; then
    mkdir -p "$exec_root" "$data_root"
    # Its own configuration file: dockerd reads /etc/docker/daemon.json
    # otherwise, whose settings are engine 1's.
    local config='{}'
    if lacks_cap_sys_resource; then
      install_runc_wrapper
      config='{"runtimes": {"capct-runc": {"path": "/usr/local/bin/capct-runc"}}, "default-runtime": "capct-runc"}'
    fi
    echo "$config" >"$exec_root/daemon.json"
    # nsenter, not ip netns exec: the latter remounts /sys, and dockerd
    # then finds no cgroups (issue #21).
    start_detached "$daemon_log" nsenter --net="/run/netns/$netns" dockerd \
      --config-file "$exec_root/daemon.json" --data-root "$data_root" --exec-root "$exec_root/exec" \
      --pidfile "$pidfile" --cgroup-parent capct-mh -H "unix://$socket" -H "$endpoint" \
      --tlsverify --tlscacert "$pki/ca.crt" --tlscert "$pki/server.crt" --tlskey "$pki/server.key"
    for _ in $(seq 1 60); do
      engine2 info >/dev/null 2>&1 && break
      sleep 0.5
    done
    if ! engine2 info >/dev/null 2>&1; then
      tail -n 20 "$daemon_log" >&2
      die "engine 2 did not answer on $socket within 30s (log: $daemon_log)"
    fi
  fi
}

up() {
  if ! command -v openssl >/dev/null 2>&1; then
    log "Installing Debian's openssl, for engine 2's certificates"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
  fi
  step "link"
  if [[ ! -e /run/netns/$netns ]]; then
    free_link
    ip netns add "$netns"
  fi
  if ! ip link show "$host_if" >/dev/null 2>&1; then
    ip link add "$host_if" type veth peer name "$ns_if"
    ip link set "$ns_if" netns "$netns"
    ip addr add "$host_addr/30" dev "$host_if"
    ip -n "$netns" addr add "$ns_addr/30" dev "$ns_if"
    ip link set "$host_if" up
    ip -n "$netns" link set "$ns_if" up
    ip -n "$netns" link set lo up
  fi

  step "certificates"
  make_pki

  step "engine 2"
  start_engine2

  step "swarm"
  local state
  state=$(docker info --format '{{.Swarm.LocalNodeState}}')
  if [[ $state == inactive ]]; then
    docker swarm init --advertise-addr "$host_addr" --listen-addr "$host_addr:2377" \
      --default-addr-pool "$addr_pool" --default-addr-pool-mask-length 24 >/dev/null
    docker node update --label-add "$swarm_label=true" "$(docker info --format '{{.Swarm.NodeID}}')" >/dev/null
  elif ! swarm_made; then
    die "the host's engine is already in a swarm (state $state) that engine.sh did not make; leave it first"
  fi
  if [[ $(engine2 info --format '{{.Swarm.LocalNodeState}}') == inactive ]]; then
    engine2 swarm join --token "$(docker swarm join-token -q worker)" \
      --advertise-addr "$ns_addr" --listen-addr "$ns_addr:2377" "$host_addr:2377" >/dev/null
  fi
  printf 'MH_ENDPOINT=%s\nMH_PKI=%s\nMH_DATA_ROOT=%s\nMH_OVERLAY_CIDR=%s\nMH_CLUSTER_CIDR=%s\nMH_SOCKET=%s\n' \
    "$endpoint" "$pki" "$data_root" "$overlay_cidr" "$cluster_cidr" "unix://$socket" >"$out/engine.env"
  log "engine 2 (Docker $(engine2 version --format '{{.Server.Version}}')) answers on $endpoint with TLS; $out/engine.env"
  finish
}

down() {
  step "down"
  lost_rules -D
  if engine2 info >/dev/null 2>&1; then
    engine2 swarm leave --force >/dev/null 2>&1 || true
  fi
  if swarm_made; then
    # Only the swarm up made, and with it the bridge swarm mode added to the
    # host's engine; a bridge some container still uses stays.
    docker swarm leave --force >/dev/null 2>&1 || true
    docker network rm docker_gwbridge >/dev/null 2>&1 || true
  fi
  stop_engine2
  # What a killed engine left mounted under its roots.
  awk -v d="$data_root" -v e="$exec_root" 'index($2, d) == 1 || index($2, e) == 1 {print $2}' /proc/self/mounts |
    sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf "$data_root" "$exec_root"
  # The cgroup parent dockerd made in each hierarchy; rmdir removes only
  # an empty one.
  find /sys/fs/cgroup -maxdepth 2 -type d -name capct-mh -exec rmdir {} + 2>/dev/null || true
  if [[ -e /run/netns/$netns ]]; then
    ip netns del "$netns"
  fi
  # The host's end goes with its peer's namespace; a half-made link may not.
  ip link del "$host_if" 2>/dev/null || true
  rm -f "$out/engine.env"
  finish
}

# stop_engine2: dockerd 2 stopped by its pidfile, as when its host dies:
# its containers stop with it.
stop_engine2() {
  local pid
  [[ -s $pidfile ]] || return 0
  pid=$(<"$pidfile")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "engine 2 (pid $pid) did not stop within 30s; killing it"
      kill -9 "$pid" 2>/dev/null || true
    fi
  fi
}

# lost_rules ACTION: -I inserts, -D deletes, the rules that drop every packet
# this machine sends or forwards to engine 2's link, as when its host is
# gone. The link itself stays up: with it down, the link's route would go
# and the packets would leave by the default route for whatever holds that
# address elsewhere.
lost_rules() {
  local chain
  for chain in OUTPUT FORWARD; do
    if [[ $1 == -D ]]; then
      while iptables -w -D "$chain" -d "$link_cidr" -m comment --comment "capct multihost: engine 2 lost" -j DROP 2>/dev/null; do :; done
    else
      iptables -w -I "$chain" 1 -d "$link_cidr" -m comment --comment "capct multihost: engine 2 lost" -j DROP
    fi
  done
}

# stop: the host of engine 2 is lost: its packets are dropped first, so
# that the manager and the other engine's nodes see no answer rather than a
# refusal, then its engine and containers stop.
stop() {
  step "stop"
  lost_rules -D
  lost_rules -I
  stop_engine2
  finish
}

# start: the host comes back: its packets flow again, and engine 2 starts
# on the data root it had, in the swarm it was in, its containers
# restarted by their restart policies.
start() {
  step "start"
  lost_rules -D
  start_engine2
  finish
}

on_failure() { [[ ${cmd:-} != up ]] || down; }

cmd=${1:-}
[[ $EUID -eq 0 ]] || die "engine.sh needs root (network namespaces, dockerd)"
case "$cmd" in
up) up ;;
down) down ;;
stop) stop ;;
start) start ;;
*) die "usage: engine.sh up|stop|start|down" ;;
esac
