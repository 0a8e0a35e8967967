# What CAPCT's image builds share (sourced by images/*/build.sh, not run):
# the build cache, quiet docker builds, the Debian root file systems that
# the node and load-balancer images start from, and static Go binaries
# cached by their inputs. hack/lib.sh has the helpers of every script
# (logging, steps, pinned tools); this file has only what building an image
# needs. docs/node-image.md describes the images and the cache.
#
# Environment:
#   DEBIAN_MIRROR       default: the mirror this machine's apt uses
#   DEBIAN_SUITE        default: bookworm
#   FORCE=1             rebuild the final image even if its inputs are unchanged
# shellcheck shell=bash disable=SC2034 # the variables are used by the scripts that source this
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../hack/lib.sh"

root=$CAPCT_ROOT
# The cache keeps the name it had when one script built every image, so
# that a machine's cached binaries and root file systems stay valid.
cache="$CAPCT_CACHE_DIR/node-image"
mkdir -p "$cache"/{rootfs,bin,images,ctx,tmp}
export DOCKER_BUILDKIT=0 # the legacy builder uses local base images and is always there

suite=${DEBIAN_SUITE:-bookworm}
go_version=$(go env GOVERSION)
# The libraries are inputs of every image built with them.
image_libs=("$root/hack/lib.sh" "$root/images/lib.sh")

# dbuild ARGS...: docker build, quiet unless it fails
dbuild() {
  local out
  if ! out=$(docker build -q "$@" 2>&1); then
    echo "$out" >&2
    die "docker build $* failed"
  fi
}
# prune DIR GLOB KEEP: removes older cache entries of one kind
prune() {
  local f
  for f in "$1"/$2; do
    [[ -e "$f" && "$f" != "$3" ]] && rm -rf "$f"
  done
  return 0
}
# drop_previous ID TAG: removes the image TAG pointed to before a rebuild, if
# nothing else uses it (a running node keeps it)
drop_previous() {
  [[ -n "$1" && "$1" != "$(docker image inspect -f '{{.Id}}' "$2" 2>/dev/null)" ]] || return 0
  docker rmi "$1" >/dev/null 2>&1 || true
}
image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# with_progress WHAT COMMAND...: runs COMMAND (a program or a function) in
# the background and logs "WHAT: still running, 1m30s" every
# PROGRESS_INTERVAL seconds (30) until it ends; returns its exit code. A
# cold compile is otherwise silent for minutes. COMMAND's stdout stays the
# caller's (a $(...) gets it); the ticker writes only to stderr, and takes
# its sleep with it when it stops, so it never holds a $(...) open.
with_progress() {
  local what=$1 interval=${PROGRESS_INTERVAL:-30} start=$SECONDS pid ticker rc=0
  shift
  "$@" &
  pid=$!
  (
    nap=""
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    while kill -0 "$pid" 2>/dev/null; do
      sleep "$interval" &
      nap=$!
      wait "$nap"
      kill -0 "$pid" 2>/dev/null || break
      log "$what: still running, $(elapsed_since "$start")"
    done
  ) >&2 &
  ticker=$!
  wait "$pid" || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  return "$rc"
}

# elapsed_since START: the time since START (a $SECONDS) as 45s or 1m30s.
elapsed_since() {
  local s=$((SECONDS - $1))
  if ((s < 60)); then echo "${s}s"; else echo "$((s / 60))m$((s % 60))s"; fi
}

docker info >/dev/null 2>&1 || die "Docker is unreachable (run hack/ensure-docker.sh)"

# ---------------------------------------------------------------------------
# Debian mirror
# ---------------------------------------------------------------------------
find_mirror() {
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    # deb822: take the URIs of a stanza whose Suites name the wanted suite
    uri=$(awk -v s="$suite" '
      /^[[:space:]]*$/ { if (u != "" && ok) { print u; exit } u=""; ok=0; next }
      tolower($1) == "uris:" { u=$2 }
      tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == s) ok=1 }
      END { if (u != "" && ok) print u }' "$f" | head -n1)
    [[ -n "$uri" ]] && { echo "$uri"; return; }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$f" ]] || continue
    uri=$(awk -v s="$suite" '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i ~ /:\/\//) { if ($(i+1) == s) { print $i; exit } break } }' "$f")
    [[ -n "$uri" ]] && { echo "$uri"; return; }
  done
  echo "http://deb.debian.org/debian"
}
mirror=${DEBIAN_MIRROR:-$(find_mirror)}

# ---------------------------------------------------------------------------
# Rootfs images: debootstrap --variant=minbase, cached as a tarball keyed by
# the suite, mirror and package list, imported as capct/rootfs:<name>-<key>.
# ---------------------------------------------------------------------------
# rootfs_image NAME PACKAGES... -> prints the image name
rootfs_image() {
  local name=$1; shift
  local key image tarball
  key=$( { echo "$suite $mirror"; printf '%s\n' "$@"; declare -f rootfs_postprocess; } | hash_of)
  image="capct/rootfs:$name-$key"
  tarball="$cache/rootfs/$name-$key.tar"
  if image_exists "$image"; then
    echo "$image"; return
  fi
  if [[ ! -s "$tarball" ]]; then
    command -v debootstrap >/dev/null || {
      log "installing debootstrap"
      apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    }
    local dir="$cache/tmp/rootfs-$name"
    rm -rf "$dir"; mkdir -p "$dir" "$cache/debs"
    log "debootstrap $suite ($name) from $mirror"
    local include
    include=$(IFS=,; echo "$*")
    debootstrap --variant=minbase --cache-dir="$cache/debs" --include="$include" \
      "$suite" "$dir" "$mirror" > "$cache/tmp/debootstrap-$name.log" 2>&1 \
      || { tail -n 30 "$cache/tmp/debootstrap-$name.log" >&2; die "debootstrap failed"; }
    rootfs_postprocess "$dir"
    tar --numeric-owner --xattrs -C "$dir" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$dir"
    prune "$cache/rootfs" "$name-*.tar" "$tarball"
  fi
  docker import "$tarball" "$image" >/dev/null
  echo "$image"
}

rootfs_postprocess() {
  local dir=$1
  # apt sources as seen from inside; no package lists, caches, docs or man pages
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/* "$dir"/var/cache/debconf/*-old \
    "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/var/log/*.log \
    "$dir"/var/log/apt/* "$dir"/var/lib/dpkg/*-old
  # the host's files leak in through debootstrap
  : > "$dir/etc/hostname"
  rm -f "$dir/etc/resolv.conf" "$dir/etc/machine-id" "$dir/var/lib/dbus/machine-id"
  : > "$dir/etc/machine-id"
}

# ---------------------------------------------------------------------------
# Go binaries, cached by version and a hash of their inputs
# ---------------------------------------------------------------------------
# build_tool NAME DIR PACKAGE -> prints the binary: PACKAGE of the Go module
# in DIR, static and stripped, under a cache key of the Go version and the
# module's go.mod, go.sum and sources; older builds of NAME are pruned.
build_tool() {
  local name=$1 dir=$2 pkg=$3 key out
  key=$( { echo "$go_version $pkg"; cat "$dir"/go.mod "$dir"/go.sum 2>/dev/null; cat "$dir"/*.go 2>/dev/null || true; } | hash_of)
  out="$cache/bin/$name-$key/$name"
  if [[ ! -x "$out" ]]; then
    log "go build $pkg"
    # || die: callers run build_tool in a $(...), where set -e is off.
    CGO_ENABLED=0 with_progress "go build $name" build_go_tool "$out" "$dir" "$pkg" -ldflags "-s -w" || die "go build $pkg failed"
    prune "$cache/bin" "$name-*" "$(dirname "$out")"
  fi
  echo "$out"
}

