# What the engines' hosts need alike (sourced by hack/ensure-docker.sh and
# hack/ensure-podman.sh, not run): the host-wide limits that many node
# containers run into, every cgroup v1 controller mounted, the runc wrapper
# for hosts whose capability bounding set lacks CAP_SYS_RESOURCE, and
# starting an engine's daemon so that it outlives the script. docs/environment.md explains why.
# shellcheck shell=bash

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

# lacks_cap_sys_resource: true when CAP_SYS_RESOURCE (capability 24) is
# outside this process's bounding set, so that a runtime asked for every
# capability (--privileged) fails with "unable to apply caps".
lacks_cap_sys_resource() {
  local cap_bnd
  cap_bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
  (( (16#$cap_bnd >> 24 & 1) == 0 ))
}

# install_runc_wrapper: installs hack/runc-drop-sys-resource as
# /usr/local/bin/capct-runc, for the engine's configuration to name.
install_runc_wrapper() {
  install -m 0755 "$CAPCT_ROOT/hack/runc-drop-sys-resource" /usr/local/bin/capct-runc
}

# start_detached LOG COMMAND...: starts an engine's daemon in the background,
# appending its output to LOG.
start_detached() {
  local log_file=$1
  shift
  # The daemon outlives this script: in a session of its own, so that it
  # outlives the shell (and the job) that started it, and without the
  # caller's open files, or it would hold them (a flock(1) lock, say) for as
  # long as it runs. The log is appended to, so that it keeps earlier runs.
  (
    for fd in /proc/"$BASHPID"/fd/*; do
      fd=${fd##*/}
      if (( fd > 2 )); then eval "exec ${fd}>&-" 2>/dev/null || true; fi
    done
    # From /, not the caller's directory: a daemon whose working directory
    # is removed (a clone deleted and made again) runs on, but Podman's
    # conmon then fails every container start ("Failed to get working
    # directory"), seen when a second CI run reused a deleted clone's path.
    cd /
    exec setsid nohup "$@" </dev/null >>"$log_file" 2>&1
  ) &
}
