#!/usr/bin/env bash
# Makes sure a Docker engine answers on this machine, for the tests and the
# quickstart. On a fresh Debian machine it installs Debian's docker.io and
# starts dockerd; where the capability bounding set lacks CAP_SYS_RESOURCE
# (so `docker run --privileged` would fail) it registers the runc wrapper in
# hack/runc-drop-sys-resource as the default runtime. docs/environment.md
# explains why. Safe to run again: it changes only what is missing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
log() { echo "ensure-docker: $*" >&2; }

# busybox-static: the Docker tests build their small test image from
# /bin/busybox, since no image can be pulled.
if ! command -v dockerd >/dev/null 2>&1 || ! command -v jq >/dev/null 2>&1 || [[ ! -x /bin/busybox ]]; then
  log "Installing Debian's docker.io, jq and busybox-static"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io jq busybox-static >/dev/null
fi

# CAP_SYS_RESOURCE is capability 24; test its bit in the bounding set.
cap_bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
needs_wrapper=false
if (( (16#$cap_bnd >> 24 & 1) == 0 )); then
  needs_wrapper=true
fi

config_changed=false
if $needs_wrapper; then
  install -m 0755 "$root/hack/runc-drop-sys-resource" /usr/local/bin/capct-runc
  mkdir -p /etc/docker
  current='{}'
  [[ -s /etc/docker/daemon.json ]] && current=$(cat /etc/docker/daemon.json)
  wanted=$(jq -S '.runtimes["capct-runc"] = {"path": "/usr/local/bin/capct-runc"} | ."default-runtime" = "capct-runc"' <<<"$current")
  if [[ "$(jq -S . <<<"$current")" != "$wanted" ]]; then
    log "Registering the capct-runc runtime (CAP_SYS_RESOURCE is outside this host's bounding set)"
    echo "$wanted" > /etc/docker/daemon.json
    config_changed=true
  fi
fi

if docker info >/dev/null 2>&1; then
  if $config_changed; then
    # runtimes and default-runtime are reloadable without a restart.
    pkill -HUP -x dockerd || true
  fi
else
  log "Starting dockerd (log: /var/log/capct-dockerd.log)"
  # dockerd outlives this script: it must not inherit the caller's open
  # files, or it would hold them (a flock(1) lock, say) for as long as it
  # runs.
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      if (( fd > 2 )); then eval "exec ${fd}>&-" 2>/dev/null || true; fi
    done
    exec nohup dockerd </dev/null >/var/log/capct-dockerd.log 2>&1
  ) &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  if ! docker info >/dev/null 2>&1; then
    log "dockerd did not answer within 30s; last lines of its log:"
    tail -n 20 /var/log/capct-dockerd.log >&2
    exit 1
  fi
fi
log "Docker $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})') is up"
