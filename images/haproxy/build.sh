#!/usr/bin/env bash
# Builds CAPCT's load-balancer image from Debian's haproxy, with nothing
# pulled from any image registry:
#
#   images/haproxy/build.sh         ->  ${LB_IMAGE:-capct/haproxy:<major.minor of Debian's haproxy>}
#   images/haproxy/build.sh rootfs  ->  only the cached Debian root file system
#
# stdout gets the built image's name and nothing else; progress goes to
# stderr. The image: Dockerfile and haproxy.cfg here (the configuration
# CAPCT renders for a cluster with no control-plane machine yet; see the
# Dockerfile). When its inputs are unchanged the script returns at once.
#
# Environment (and images/lib.sh's): LB_IMAGE, the tag to produce.
set -euo pipefail
log_name=lb-image
# shellcheck source=images/lib.sh
source "$(dirname "$0")/../lib.sh"

here="$root/images/haproxy"
lb_packages=(haproxy ca-certificates)

build_lb() {
  step "rootfs: haproxy (debootstrap $suite, 0.5-1 min cold)"
  local lb_rootfs version lb_image inputs
  lb_rootfs=$(rootfs_image haproxy "${lb_packages[@]}")
  version=$(docker run --rm --network none --entrypoint haproxy "$lb_rootfs" -v | sed -n 's/^HAProxy version \([0-9]*\.[0-9]*\).*/\1/p')
  [[ -n "$version" ]] || die "cannot tell the haproxy version of $lb_rootfs"
  lb_image=${LB_IMAGE:-capct/haproxy:$version}
  inputs=$( { echo "$lb_rootfs $lb_image"; cat "$here/Dockerfile" "$here/haproxy.cfg"; } | hash_of)
  if [[ -z "${FORCE:-}" ]] && [[ "$(image_label "$lb_image" io.capct.node-image.inputs)" == "$inputs" ]]; then
    end_step
    log "$lb_image is up to date; total $((SECONDS - script_start))s"
    echo "$lb_image"; return
  fi
  step "lb image $lb_image"
  local ctx="$cache/ctx/haproxy"
  rm -rf "$ctx"; mkdir -p "$ctx"
  cp "$here/haproxy.cfg" "$ctx/"
  sed -e "s|@ROOTFS@|$lb_rootfs|" -e "s|@INPUTS@|$inputs|" "$here/Dockerfile" > "$ctx/Dockerfile"
  local previous
  previous=$(docker image inspect -f '{{.Id}}' "$lb_image" 2>/dev/null || true)
  dbuild -t "$lb_image" "$ctx"
  drop_previous "$previous" "$lb_image"
  rm -rf "$ctx"
  end_step
  log "built $lb_image in $((SECONDS - script_start))s"
  echo "$lb_image"
}

case "${1:-image}" in
  image) build_lb ;;
  rootfs) # only the cached Debian rootfs image (warms the cache)
    step "rootfs image"
    rootfs_image haproxy "${lb_packages[@]}"
    end_step ;;
  *) die "usage: $0 [image|rootfs]" ;;
esac
