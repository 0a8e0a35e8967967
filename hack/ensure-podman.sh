#!/usr/bin/env bash
# Makes sure a rootful Podman service answers on this machine, for
# `make test-podman` and `CAPCT_ENGINE=podman make quickstart`, as
# hack/ensure-docker.sh does for Docker. On a fresh Debian machine it
# installs Debian's podman (4.3) with netavark and aardvark-dns, writes a
# containers.conf drop-in, and starts `podman system service` on
# /run/podman/podman.sock, the socket CAPCT's Podman backend talks to (its
# Docker-compatible API; docs/runtime.md). It coexists with a running
# dockerd: Podman's networks are bridges of their own (podman0, podman1...),
# netavark adds chains of its own to iptables and leaves Docker's alone, and
# CAPCT derives each network's subnet from its name and moves on when the
# host already routes it. Safe to run again: it changes only what is missing.
set -euo pipefail

log_name=ensure-podman
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=hack/engine-host.sh
source "$(dirname "$0")/engine-host.sh"

socket=/run/podman/podman.sock
service_log=/var/log/capct-podman.log
conf=/etc/containers/containers.conf.d/50-capct.conf

# busybox-static: the engine tests build their small test image from
# /bin/busybox; jq is for the runc wrapper.
if ! command -v podman >/dev/null 2>&1 || [[ ! -x /usr/lib/podman/netavark ]] ||
  ! command -v jq >/dev/null 2>&1 || [[ ! -x /bin/busybox ]]; then
  log "Installing Debian's podman, netavark, aardvark-dns, jq and busybox-static"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends podman crun conmon runc netavark aardvark-dns \
    uidmap slirp4netns fuse-overlayfs catatonit iptables jq busybox-static >/dev/null
fi

# The drop-in: netavark (Debian also ships a CNI config, which would make
# Podman warn about CNI plugins it does not have), events in a file (there
# may be no journald to read them back from), and, where the capability
# bounding set lacks CAP_SYS_RESOURCE, what a --privileged container needs
# here: the runc wrapper that hack/ensure-docker.sh registers with Docker
# (crun, Podman's default, fails the same way), and resource limits within
# this process's own. Podman sets RLIMIT_NOFILE to 1048576 and RLIMIT_NPROC
# to 4194304 for rootful containers unless told otherwise, and only
# CAP_SYS_RESOURCE may raise a hard limit; Podman 4.3 runs with a hard
# RLIMIT_NPROC of at most 32768 itself.
wanted="# Written by hack/ensure-podman.sh.
[network]
network_backend = \"netavark\"
"
engine="[engine]
events_logger = \"file\"
"
if lacks_cap_sys_resource; then
  install_runc_wrapper
  nofile=$(ulimit -Hn)
  nproc=$(ulimit -Hu)
  [[ "$nproc" == unlimited ]] || ((nproc > 32768)) && nproc=32768
  [[ "$nofile" == unlimited ]] && nofile=1048576
  wanted+="
[containers]
default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]
"
  engine+="runtime = \"capct-runc\"

[engine.runtimes]
capct-runc = [\"/usr/local/bin/capct-runc\"]
"
fi
wanted+="
$engine"
conf_changed=false
if [[ ! -f "$conf" || "$(cat "$conf")" != "${wanted%$'\n'}" ]]; then
  log "Writing $conf"
  mkdir -p "$(dirname "$conf")"
  printf '%s' "$wanted" > "$conf"
  conf_changed=true
fi

# Beside dockerd, the FORWARD chains' policy is DROP (Docker sets it), and
# the host's bridges pass their packets through iptables (Docker loads
# br_netfilter). Netavark accepts a Podman network's packets by its subnet
# only, so traffic between a cluster's pods on different nodes, whose
# addresses are the pods' and not the network's, would be dropped on the
# very bridge the nodes share. Docker accepts everything bridged within its
# own bridges; this rule does the same for Podman's, and nothing else:
# packets bridged (not routed) from a podman bridge port to another.
forward_bridged() {
  local tool=$1 rule=(FORWARD -i 'podman+' -o 'podman+' -m physdev --physdev-is-bridged
    -m comment --comment "capct: bridged within Podman bridges, hack/ensure-podman.sh" -j ACCEPT)
  command -v "$tool" >/dev/null 2>&1 || return 0
  [[ "$("$tool" -S FORWARD 2>/dev/null | head -1)" == "-P FORWARD DROP" ]] || return 0
  if ! "$tool" -C "${rule[@]}" 2>/dev/null; then
    "$tool" -I "${rule[@]}"
    log "$tool: accepting packets bridged within Podman's bridges (the FORWARD policy is DROP)"
  fi
}
forward_bridged iptables
forward_bridged ip6tables

raise_host_limits
mount_cgroup_controllers

answers() { podman --remote --url "unix://$socket" version >/dev/null 2>&1; }
if answers && $conf_changed; then
  # The service reads containers.conf when it starts; it may run
  # containers, so it is not this script's to stop.
  log "WARNING: the running podman service predates $conf; restart it to apply the change"
fi
if ! answers; then
  log "Starting podman system service on $socket (log: $service_log)"
  mkdir -p "$(dirname "$socket")"
  # --time=0: the service never exits for want of clients.
  start_detached "$service_log" podman system service --time=0 "unix://$socket"
  for _ in $(seq 1 60); do
    answers && break
    sleep 0.5
  done
  if ! answers; then
    log "podman system service did not answer within 30s; last lines of its log:"
    tail -n 20 "$service_log" >&2
    exit 1
  fi
fi
log "Podman $(podman --remote --url "unix://$socket" version --format '{{.Server.Version}}') is up on unix://$socket"
