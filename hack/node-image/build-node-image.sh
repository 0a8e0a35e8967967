#!/usr/bin/env bash
# Builds CAPCT's offline images from source and Debian packages, with nothing
# pulled from any image registry:
#
#   build-node-image.sh node   ->  ${NODE_IMAGE:-capct/node:<kubernetes version>}
#   build-node-image.sh lb     ->  ${LB_IMAGE:-capct/haproxy:<haproxy version>}
#   build-node-image.sh rootfs ->  only the cached Debian root file systems
#
# stdout gets the built image's name and nothing else; progress goes to stderr.
# docs/node-image.md describes what is in the images and how to boot a node.
# Every step is cached under ${CAPCT_CACHE:-~/.cache/capct}/node-image (Go's
# build cache, rootfs tarballs keyed by their package lists, binaries and
# images keyed by version and a hash of their inputs); each step prints how
# long it took. When nothing changed the script returns in a second or two.
#
# Environment:
#   KUBERNETES_VERSION  must equal the k8s.io/kubernetes version that
#                       hack/tools/kubernetes/go.mod pins (default: that pin)
#   NODE_IMAGE, LB_IMAGE  the tags to produce
#   DEBIAN_MIRROR       default: the mirror this machine's apt uses
#   DEBIAN_SUITE        default: bookworm
#   KIND_VERSION        sigs.k8s.io/kind module whose node boot files are used (v0.33.0)
#   FORCE=1             rebuild the final image even if its inputs are unchanged
set -euo pipefail
log_name=build-node-image
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/../lib.sh"

root=$CAPCT_ROOT
here="$root/hack/node-image"
cache="$CAPCT_CACHE_DIR/node-image"
mkdir -p "$cache"/{rootfs,bin,images,ctx,tmp}
export DOCKER_BUILDKIT=0 # the legacy builder uses local base images and is always there

suite=${DEBIAN_SUITE:-bookworm}
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

docker info >/dev/null 2>&1 || die "Docker is unreachable (run hack/ensure-docker.sh)"

# ---------------------------------------------------------------------------
# Versions
# ---------------------------------------------------------------------------
kube_tools="$CAPCT_TOOLS/kubernetes"
etcd_tools="$CAPCT_TOOLS/etcd"
coredns_tools="$CAPCT_TOOLS/coredns"
pause_tools="$CAPCT_TOOLS/pause"

pinned_kube=$(tool_version kubernetes k8s.io/kubernetes)
KUBERNETES_VERSION=${KUBERNETES_VERSION:-$pinned_kube}
if [[ "$KUBERNETES_VERSION" != "$pinned_kube" ]]; then
  die "KUBERNETES_VERSION=$KUBERNETES_VERSION but hack/tools/kubernetes pins k8s.io/kubernetes $pinned_kube.
Binaries are built from that module: change its pin (and the staging modules' replace lines to v0.${KUBERNETES_VERSION#v1.}) to pick another version. See docs/node-image.md."
fi
etcd_version=$(tool_version etcd go.etcd.io/etcd/server/v3)
coredns_version=$(tool_version coredns github.com/coredns/coredns)
go_version=$(go env GOVERSION)
# kind's node boot files (entrypoint, systemd units) are taken from this module
kind_version=${KIND_VERSION:-v0.33.0}

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
node_packages=(
  systemd
  containerd runc containernetworking-plugins
  iptables ebtables conntrack ethtool socat kmod iproute2
  util-linux mount procps ca-certificates libseccomp2 bash
)
proxy_packages=(iptables conntrack kmod ipset)
lb_packages=(haproxy ca-certificates)

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
kube_ldflags() {
  local v=$KUBERNETES_VERSION minor commit date p flags="-s -w"
  minor=${v#v1.}; minor=${minor%%.*}
  # a stable stand-in for the git commit: the module graph that was built
  commit=$(cat "$kube_tools/go.mod" "$kube_tools/go.sum" | sha1sum | cut -c1-40)
  date=$(cd "$kube_tools" && go list -m -f '{{.Time}}' k8s.io/kubernetes | sed -E 's/ \+0000 UTC$//; s/ /T/; s/$/Z/')
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    flags+=" -X $p.gitCommit=$commit -X $p.buildDate=$date"
  done
  echo "$flags"
}

kube_binaries=(kubelet kubeadm kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy)

build_kube_binaries() { # prints the folder
  local ldflags key out pkgs=() b
  ldflags=$(kube_ldflags)
  key=$( { echo "$go_version $ldflags ${kube_binaries[*]}"; cat "$kube_tools/go.mod" "$kube_tools/go.sum"; } | hash_of)
  out="$cache/bin/kubernetes-$KUBERNETES_VERSION-$key"
  if [[ ! -f "$out/.done" ]]; then
    for b in "${kube_binaries[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
    log "go build ${kube_binaries[*]} (about 16 min cold on 2 cores)"
    rm -rf "$out"; mkdir -p "$out"
    (cd "$kube_tools" && CGO_ENABLED=0 go build -ldflags "$ldflags" -o "$out/" "${pkgs[@]}")
    touch "$out/.done"
    prune "$cache/bin" "kubernetes-$KUBERNETES_VERSION-*" "$out"
  fi
  echo "$out"
}

build_tool() { # build_tool NAME DIR PACKAGE -> prints the binary
  local name=$1 dir=$2 pkg=$3 key out
  key=$( { echo "$go_version $pkg"; cat "$dir"/go.mod "$dir"/go.sum 2>/dev/null; cat "$dir"/*.go 2>/dev/null || true; } | hash_of)
  out="$cache/bin/$name-$key/$name"
  if [[ ! -x "$out" ]]; then
    log "go build $pkg"
    CGO_ENABLED=0 build_go_tool "$out" "$dir" "$pkg" -ldflags "-s -w"
    prune "$cache/bin" "$name-*" "$(dirname "$out")"
  fi
  echo "$out"
}

# ---------------------------------------------------------------------------
# The images kubeadm runs, tagged as `kubeadm config images list` prints them
# ---------------------------------------------------------------------------
# scratch_image TAG BINARY [USER] -> builds TAG from scratch with BINARY in /usr/local/bin
scratch_image() {
  local tag=$1 bin=$2 user=${3:-} ctx
  ctx=$(mktemp -d "$cache/tmp/img.XXXXXX")
  cp "$bin" "$ctx/"
  {
    echo "FROM scratch"
    echo "ENV PATH=/usr/local/bin:/usr/bin:/bin"
    echo "COPY $(basename "$bin") /usr/local/bin/$(basename "$bin")"
    [[ -n "$user" ]] && echo "USER $user"
    echo "ENTRYPOINT [\"/usr/local/bin/$(basename "$bin")\"]"
  } > "$ctx/Dockerfile"
  dbuild -t "$tag" "$ctx"
  rm -rf "$ctx"
}

# ---------------------------------------------------------------------------
# node
# ---------------------------------------------------------------------------
build_node() {
  local node_image=${NODE_IMAGE:-capct/node:$KUBERNETES_VERSION}
  local kind_dir inputs

  step "inputs"
  kind_dir=$(cd "$cache" && go mod download -json "sigs.k8s.io/kind@$kind_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -d "$kind_dir/images/base/files" ]] || die "kind's node files not found (go mod download sigs.k8s.io/kind)"
  # everything the final image depends on, for the fast path
  inputs=$( {
    echo "$KUBERNETES_VERSION $etcd_version $coredns_version $go_version $suite $mirror $node_image $kind_version"
    printf '%s\n' "${node_packages[@]}" "${proxy_packages[@]}"
    cat "$0" "$here/Dockerfile.node" "$here/files/containerd-config.toml" "$here/files/kube-proxy-wrapper"
    for d in "$kube_tools" "$etcd_tools" "$coredns_tools" "$pause_tools"; do cat "$d"/go.mod "$d"/go.sum "$d"/*.go 2>/dev/null || true; done
    (cd "$kind_dir/images/base/files" && find . -type f | sort | xargs cat)
  } | hash_of)
  if [[ -z "${FORCE:-}" ]] && [[ "$(image_label "$node_image" io.capct.node-image.inputs)" == "$inputs" ]]; then
    end_step
    log "$node_image is up to date (inputs $inputs); total $((SECONDS - script_start))s"
    echo "$node_image"
    return
  fi

  # The root file systems mostly download and unpack: build them in the
  # background while Go compiles.
  end_step
  local node_rootfs proxy_rootfs rootfs_out rootfs_pid
  rootfs_out=$(mktemp -d "$cache/tmp/rootfs-out.XXXXXX")
  (
    start=$SECONDS
    rootfs_image node "${node_packages[@]}" > "$rootfs_out/node"
    rootfs_image kube-proxy "${proxy_packages[@]}" > "$rootfs_out/kube-proxy"
    log "<== rootfs: node and kube-proxy (debootstrap $suite, in the background): $((SECONDS - start))s"
  ) &
  rootfs_pid=$!

  step "kubernetes binaries $KUBERNETES_VERSION"
  local kbin
  kbin=$(build_kube_binaries)
  "$kbin/kubeadm" version -o short >&2

  step "etcd $etcd_version"
  local etcd_bin
  etcd_bin=$(build_tool etcd "$etcd_tools" go.etcd.io/etcd/server/v3)

  step "coredns $coredns_version (2-6 min cold)"
  local coredns_bin
  coredns_bin=$(build_tool coredns "$coredns_tools" github.com/coredns/coredns)

  step "pause"
  local pause_bin
  pause_bin=$(build_tool pause "$pause_tools" .)

  step "wait for the rootfs images"
  wait "$rootfs_pid" || die "building the root file systems failed"
  node_rootfs=$(cat "$rootfs_out/node")
  proxy_rootfs=$(cat "$rootfs_out/kube-proxy")
  rm -rf "$rootfs_out"
  [[ -n "$node_rootfs" && -n "$proxy_rootfs" ]] || die "no rootfs image"

  step "control-plane images"
  # the tags kubeadm will look for
  local -A want=()
  local img
  while read -r img; do
    [[ -n "$img" ]] || continue
    case "$img" in
      */kube-apiserver:*) want[kube-apiserver]=$img ;;
      */kube-controller-manager:*) want[kube-controller-manager]=$img ;;
      */kube-scheduler:*) want[kube-scheduler]=$img ;;
      */kube-proxy:*) want[kube-proxy]=$img ;;
      */etcd:*) want[etcd]=$img ;;
      */pause:*) want[pause]=$img ;;
      */coredns:*) want[coredns]=$img ;;
      *) die "unexpected image from kubeadm: $img" ;;
    esac
  done < <("$kbin/kubeadm" config images list --kubernetes-version "$KUBERNETES_VERSION" 2>/dev/null)
  [[ ${#want[@]} -eq 7 ]] || die "kubeadm listed ${#want[@]} images, expected 7"
  local images_key images_tar
  images_key=$( {
    printf '%s\n' "${want[@]}" | sort
    sha256sum "$kbin"/kube-* "$etcd_bin" "$coredns_bin" "$pause_bin"
    echo "$proxy_rootfs"; cat "$here/files/kube-proxy-wrapper"
    declare -f scratch_image build_proxy_image preload_images
  } | hash_of)
  images_tar="$cache/images/containerd-$KUBERNETES_VERSION-$images_key.tar"
  if [[ ! -s "$images_tar" ]]; then
    local b
    for b in kube-apiserver kube-controller-manager kube-scheduler; do
      scratch_image "${want[$b]}" "$kbin/$b"
    done
    scratch_image "${want[etcd]}" "$etcd_bin"
    scratch_image "${want[pause]}" "$pause_bin" 65535:65535
    scratch_image "${want[coredns]}" "$coredns_bin" 65532:65532
    build_proxy_image "${want[kube-proxy]}" "$kbin/kube-proxy" "$proxy_rootfs"
    log "images: ${want[*]}"
    step "preload images into containerd's content store"
    preload_images "$node_rootfs" "$images_tar" "${want[@]}"
    # the registry.k8s.io tags are only for the node's containerd; drop them here
    docker rmi "${want[@]}" >/dev/null
    prune "$cache/images" "containerd-$KUBERNETES_VERSION-*.tar" "$images_tar"
  fi

  step "node image $node_image"
  local ctx="$cache/ctx/node"
  rm -rf "$ctx"; mkdir -p "$ctx/kind" "$ctx/bin" "$ctx/etc"
  cp -a "$kind_dir/images/base/files/." "$ctx/kind/"
  chmod -R u+w "$ctx/kind"
  rm -f "$ctx/kind/etc/containerd/config.toml" "$ctx/kind/etc/systemd/system/containerd-fuse-overlayfs.service"
  for b in kubelet kubeadm kubectl; do ln "$kbin/$b" "$ctx/bin/$b" 2>/dev/null || cp "$kbin/$b" "$ctx/bin/$b"; done
  cp "$here"/files/containerd-config.toml "$ctx/etc/"
  ln "$images_tar" "$ctx/containerd-images.tar" 2>/dev/null || cp "$images_tar" "$ctx/containerd-images.tar"
  sed -e "s|@ROOTFS@|$node_rootfs|" -e "s|@INPUTS@|$inputs|" \
    -e "s|@KUBERNETES_VERSION@|$KUBERNETES_VERSION|" "$here/Dockerfile.node" > "$ctx/Dockerfile"
  local previous
  previous=$(docker image inspect -f '{{.Id}}' "$node_image" 2>/dev/null || true)
  dbuild -t "$node_image" "$ctx"
  drop_previous "$previous" "$node_image"
  rm -rf "$ctx"
  end_step
  log "built $node_image in $((SECONDS - script_start))s"
  echo "$node_image"
}

# build_proxy_image TAG BINARY ROOTFS: kube-proxy on a small Debian rootfs with
# iptables, behind a wrapper that picks the node's iptables backend.
build_proxy_image() {
  local tag=$1 bin=$2 base=$3 ctx
  ctx=$(mktemp -d "$cache/tmp/img.XXXXXX")
  cp "$bin" "$ctx/kube-proxy"
  cp "$here/files/kube-proxy-wrapper" "$ctx/"
  cat > "$ctx/Dockerfile" <<EOF
FROM $base
COPY kube-proxy /usr/local/bin/kube-proxy.real
COPY kube-proxy-wrapper /usr/local/bin/kube-proxy
RUN chmod 0755 /usr/local/bin/kube-proxy /usr/local/bin/kube-proxy.real
ENTRYPOINT ["/usr/local/bin/kube-proxy"]
EOF
  dbuild -t "$tag" "$ctx"
  rm -rf "$ctx"
}

# preload_images ROOTFS OUT TAG...: imports the images into a containerd
# content store (namespace k8s.io, not unpacked: containerd's CRI unpacks an
# image the first time a container uses it) and tars /var/lib/containerd.
preload_images() {
  local base=$1 out=$2; shift 2
  local work
  work=$(mktemp -d "$cache/tmp/preload.XXXXXX")
  mkdir -p "$work/containerd" "$work/images"
  docker save -o "$work/images/all.tar" "$@"
  cat > "$work/config.toml" <<'EOF'
version = 2
root = "/var/lib/containerd"
state = "/run/containerd-preload"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "/run/containerd-preload/containerd.sock"
EOF
  docker run --rm --network none --privileged --entrypoint /bin/bash \
    -v "$work/containerd:/var/lib/containerd" -v "$work/images:/images:ro" -v "$work/config.toml:/config.toml:ro" \
    "$base" -euc '
      containerd --config /config.toml >/tmp/containerd.log 2>&1 &
      for i in $(seq 100); do [[ -S /run/containerd-preload/containerd.sock ]] && break; sleep 0.1; done
      ctr --address /run/containerd-preload/containerd.sock -n k8s.io images import --no-unpack /images/all.tar >&2
      ctr --address /run/containerd-preload/containerd.sock -n k8s.io images ls -q >&2
      kill $!; wait || true
      rm -rf /var/lib/containerd/tmpmounts
    '
  tar --numeric-owner -C "$work/containerd" -cf "$out.tmp" .
  mv "$out.tmp" "$out"
  rm -rf "$work"
}

# ---------------------------------------------------------------------------
# lb
# ---------------------------------------------------------------------------
build_lb() {
  step "rootfs: haproxy (debootstrap $suite, 0.5-1 min cold)"
  local lb_rootfs version lb_image inputs
  lb_rootfs=$(rootfs_image haproxy "${lb_packages[@]}")
  version=$(docker run --rm --network none --entrypoint haproxy "$lb_rootfs" -v | sed -n 's/^HAProxy version \([0-9]*\.[0-9]*\).*/\1/p')
  [[ -n "$version" ]] || die "cannot tell the haproxy version of $lb_rootfs"
  lb_image=${LB_IMAGE:-capct/haproxy:$version}
  inputs=$( { echo "$lb_rootfs $lb_image"; cat "$here/Dockerfile.haproxy" "$here/files/haproxy.cfg"; } | hash_of)
  if [[ -z "${FORCE:-}" ]] && [[ "$(image_label "$lb_image" io.capct.node-image.inputs)" == "$inputs" ]]; then
    end_step
    log "$lb_image is up to date; total $((SECONDS - script_start))s"
    echo "$lb_image"; return
  fi
  step "lb image $lb_image"
  local ctx="$cache/ctx/haproxy"
  rm -rf "$ctx"; mkdir -p "$ctx"
  cp "$here/files/haproxy.cfg" "$ctx/"
  sed -e "s|@ROOTFS@|$lb_rootfs|" -e "s|@INPUTS@|$inputs|" "$here/Dockerfile.haproxy" > "$ctx/Dockerfile"
  local previous
  previous=$(docker image inspect -f '{{.Id}}' "$lb_image" 2>/dev/null || true)
  dbuild -t "$lb_image" "$ctx"
  drop_previous "$previous" "$lb_image"
  rm -rf "$ctx"
  end_step
  log "built $lb_image in $((SECONDS - script_start))s"
  echo "$lb_image"
}

case "${1:-node}" in
  node) build_node ;;
  lb) build_lb ;;
  rootfs) # only the cached Debian rootfs images (warms the cache)
    step "rootfs images"
    rootfs_image node "${node_packages[@]}"
    rootfs_image kube-proxy "${proxy_packages[@]}"
    rootfs_image haproxy "${lb_packages[@]}"
    end_step ;;
  *) die "usage: $0 node|lb|rootfs" ;;
esac
