#!/usr/bin/env bash
# Builds CAPCT's node image from source and Debian packages, with nothing
# pulled from any image registry:
#
#   images/node/build.sh         ->  ${NODE_IMAGE:-capct/node:<kubernetes version>}
#   images/node/build.sh rootfs  ->  only the cached Debian root file systems
#
# stdout gets the built image's name and nothing else; progress goes to stderr.
# docs/node-image.md describes what is in the image and how to boot a node.
# Every step is cached under ${CAPCT_CACHE:-~/.cache/capct}/node-image (Go's
# build cache, rootfs tarballs keyed by their package lists, binaries and
# images keyed by version and a hash of their inputs); each step prints how
# long it took. When nothing changed the script returns in a second or two.
#
# The image: Dockerfile and files/ here; the control-plane images it
# preloads are built here too (FROM scratch), but for the pod sandbox's,
# which images/pause builds.
#
# Environment (and images/lib.sh's):
#   KUBERNETES_VERSION  must equal the k8s.io/kubernetes version that
#                       hack/tools/kubernetes/go.mod pins (default: that pin)
#   NODE_IMAGE          the tag to produce
#   KIND_VERSION        sigs.k8s.io/kind module whose node boot files are used (v0.33.0)
set -euo pipefail
log_name=node-image
# shellcheck source=images/lib.sh
source "$(dirname "$0")/../lib.sh"

here="$root/images/node"
pause_dir="$root/images/pause"

# ---------------------------------------------------------------------------
# Versions
# ---------------------------------------------------------------------------
kube_tools="$CAPCT_TOOLS/kubernetes"
etcd_tools="$CAPCT_TOOLS/etcd"
coredns_tools="$CAPCT_TOOLS/coredns"

pinned_kube=$(tool_version kubernetes k8s.io/kubernetes)
KUBERNETES_VERSION=${KUBERNETES_VERSION:-$pinned_kube}
if [[ "$KUBERNETES_VERSION" != "$pinned_kube" ]]; then
  die "KUBERNETES_VERSION=$KUBERNETES_VERSION but hack/tools/kubernetes pins k8s.io/kubernetes $pinned_kube.
Binaries are built from that module: change its pin (and the staging modules' replace lines to v0.${KUBERNETES_VERSION#v1.}) to pick another version. See docs/node-image.md."
fi
etcd_version=$(tool_version etcd go.etcd.io/etcd/server/v3)
coredns_version=$(tool_version coredns github.com/coredns/coredns)
# kind's node boot files (entrypoint, systemd units) are taken from this module
kind_version=${KIND_VERSION:-v0.33.0}

# ---------------------------------------------------------------------------
# Rootfs images (images/lib.sh builds them)
# ---------------------------------------------------------------------------
node_packages=(
  systemd
  containerd runc containernetworking-plugins
  iptables ebtables conntrack ethtool socat kmod iproute2
  util-linux mount procps ca-certificates libseccomp2 bash
)
proxy_packages=(iptables conntrack kmod ipset)

# ---------------------------------------------------------------------------
# Kubernetes binaries, cached by version and a hash of their inputs, and
# images FROM scratch for the control plane's
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
# The node image, with the images kubeadm runs preloaded, tagged as
# `kubeadm config images list` prints them
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
    cat "$0" "${image_libs[@]}" "$here/Dockerfile" "$here/files/containerd-config.toml" "$here/files/kube-proxy-wrapper"
    cat "$pause_dir/build.sh" "$pause_dir/Dockerfile"
    for d in "$kube_tools" "$etcd_tools" "$coredns_tools" "$pause_dir"; do cat "$d"/go.mod "$d"/go.sum "$d"/*.go 2>/dev/null || true; done
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
  pause_bin=$("$pause_dir/build.sh" binary)

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
    cat "$pause_dir/build.sh" "$pause_dir/Dockerfile"
  } | hash_of)
  images_tar="$cache/images/containerd-$KUBERNETES_VERSION-$images_key.tar"
  if [[ ! -s "$images_tar" ]]; then
    local b
    for b in kube-apiserver kube-controller-manager kube-scheduler; do
      scratch_image "${want[$b]}" "$kbin/$b"
    done
    scratch_image "${want[etcd]}" "$etcd_bin"
    "$pause_dir/build.sh" image "${want[pause]}" >/dev/null
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
    -e "s|@KUBERNETES_VERSION@|$KUBERNETES_VERSION|" "$here/Dockerfile" > "$ctx/Dockerfile"
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

case "${1:-image}" in
  image) build_node ;;
  rootfs) # only the cached Debian rootfs images (warms the cache)
    step "rootfs images"
    rootfs_image node "${node_packages[@]}"
    rootfs_image kube-proxy "${proxy_packages[@]}"
    end_step ;;
  *) die "usage: $0 [image|rootfs]" ;;
esac
