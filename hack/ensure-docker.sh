#!/usr/bin/env bash
# Makes sure a Docker engine answers on this machine, for the tests and the
# quickstart. On a fresh Debian machine it installs Debian's docker.io and
# starts dockerd; where the capability bounding set lacks CAP_SYS_RESOURCE
# (so `docker run --privileged` would fail) it registers the runc wrapper in
# hack/runc-drop-sys-resource as the default runtime; and it raises the host
# limits that many node containers on one host run into (raise_host_limits
# below). docs/environment.md explains why. Safe to run again: it changes
# only what is missing, and never lowers a limit.
set -euo pipefail

log_name=ensure-docker
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"

# The host-wide limits that node containers share, as "sysctl minimum why".
# Every node (systemd, journald, containerd, kubelet) holds inotify
# instances and watches of the host's root user; at Debian's default of 128
# instances a few nodes exhaust them and containerd's CRI plugin fails to
# load ("too many open files"), kind's first known issue. The key limits are
# per non-root user (rootless engines; root has root_maxkeys); LXD documents
# them for many containers. docs/environment.md has the same list as a
# sysctl.d snippet for hosts this script does not set up.
host_limits=(
  "fs.inotify.max_user_instances 8192 inotify instances per user"
  "fs.inotify.max_user_watches 524288 inotify watches per user"
  "kernel.keys.maxkeys 2000 kernel keys per non-root user, one session keyring per container"
  "kernel.keys.maxbytes 2000000 kernel key bytes per non-root user"
  "fs.file-max 1048576 open files on the host"
)

# raise_host_limits: raises each limit of host_limits that is below its
# minimum, says what it changed, and warns (without failing) where it may
# not write /proc/sys. The change lasts until the next boot.
raise_host_limits() {
  local entry key want why file current changed=false
  for entry in "${host_limits[@]}"; do
    read -r key want why <<<"$entry"
    file=/proc/sys/${key//.//}
    [[ -r "$file" ]] || continue
    current=$(<"$file")
    ((current < want)) || continue
    if { echo "$want" >"$file"; } 2>/dev/null; then
      log "raised $key from $current to $want: $why"
      changed=true
    else
      log "WARNING: $key is $current, below the $want that many nodes need ($why), and cannot be raised here; as root: sysctl -w $key=$want"
    fi
  done
  if $changed; then
    log "these sysctls reset at boot; docs/environment.md has a sysctl.d snippet that keeps them"
  fi
}

# mount_cgroup_controllers: on a cgroup v1 host (a tmpfs at /sys/fs/cgroup),
# mounts every enabled controller that no mount here holds, together with
# the controllers that share its hierarchy, as cgroupfs-mount and systemd
# do. runc gives a container a cgroup of its own only in the hierarchies
# mounted here, but shows the container all of them. A controller left
# unmounted can still get a hierarchy later (a privileged systemd in a
# container mounts what it finds missing: seen with a node container on
# Podman); node containers started after that fail in their kubelet with
# 'cgroup ["kubelet"] has some missing paths: /sys/fs/cgroup/hugetlb/kubelet.slice'.
mount_cgroup_controllers() {
  [[ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" == tmpfs ]] || return 0
  local name hierarchy enabled key opts mounted
  local -A groups=()
  while read -r name hierarchy _ enabled; do
    [[ "$name" != \#* && "$enabled" == 1 ]] || continue
    key=$name
    ((hierarchy == 0)) || key=h$hierarchy
    groups[$key]+=${groups[$key]:+,}$name
  done </proc/cgroups
  mounted=$(awk '$3 == "cgroup" {print $4}' /proc/self/mounts | tr ',' '\n')
  for opts in "${groups[@]}"; do
    grep -qx "${opts%%,*}" <<<"$mounted" && continue
    if mkdir -p "/sys/fs/cgroup/$opts" && mount -t cgroup -o "$opts" cgroup "/sys/fs/cgroup/$opts" 2>/dev/null; then
      log "mounted the cgroup controllers $opts at /sys/fs/cgroup/$opts"
    else
      log "WARNING: cannot mount the cgroup controllers $opts; node containers may fail if another engine or container mounts them later"
    fi
  done
}

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
  install -m 0755 "$CAPCT_ROOT/hack/runc-drop-sys-resource" /usr/local/bin/capct-runc
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

raise_host_limits
mount_cgroup_controllers

if docker info >/dev/null 2>&1; then
  if $config_changed; then
    # runtimes and default-runtime are reloadable without a restart.
    pkill -HUP -x dockerd || true
  fi
else
  log "Starting dockerd (log: /var/log/capct-dockerd.log)"
  # dockerd outlives this script: in a session of its own, so that it
  # outlives the shell (and the job) that started it, and without the
  # caller's open files, or it would hold them (a flock(1) lock, say) for as
  # long as it runs. The log is appended to, so that it keeps earlier runs.
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      if (( fd > 2 )); then eval "exec ${fd}>&-" 2>/dev/null || true; fi
    done
    exec setsid nohup dockerd </dev/null >>/var/log/capct-dockerd.log 2>&1
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
