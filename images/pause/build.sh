#!/usr/bin/env bash
# Builds the pod sandbox program of CAPCT's node image and its image, with
# nothing pulled from any registry:
#
#   images/pause/build.sh binary     ->  the path of the static pause binary (cached)
#   images/pause/build.sh image TAG  ->  TAG, FROM scratch with that binary (Dockerfile)
#
# images/node/build.sh runs both, with the tag `kubeadm config images list`
# prints for pause (registry.k8s.io/pause:<version>), and preloads the image
# into the node's containerd; stdout gets the result and nothing else.
#
# Its Go module is here, beside the image, not in hack/tools: hack/tools
# holds the pins of upstream modules whose programs CAPCT builds (kubernetes,
# etcd, coredns, kustomize, ...), each a go.mod and go.sum and nothing of
# CAPCT's own. pause is CAPCT's own program (main.go), with no dependency to
# pin, so its source belongs with the one image that ships it.
set -euo pipefail
log_name=pause-image
# shellcheck source=images/lib.sh
source "$(dirname "$0")/../lib.sh"

here="$root/images/pause"

case "${1:-}" in
  binary) build_tool pause "$here" . ;;
  image)
    [[ -n "${2:-}" ]] || die "usage: $0 image TAG"
    bin=$(build_tool pause "$here" .)
    ctx=$(mktemp -d "$cache/tmp/img.XXXXXX")
    cp "$bin" "$here/Dockerfile" "$ctx/"
    dbuild -t "$2" "$ctx"
    rm -rf "$ctx"
    echo "$2"
    ;;
  *) die "usage: $0 binary|image TAG" ;;
esac
