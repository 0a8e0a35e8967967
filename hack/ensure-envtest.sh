#!/usr/bin/env bash
# Builds the kube-apiserver and etcd that envtest runs, once per version, into
# a cache outside the repository, and prints the folder for KUBEBUILDER_ASSETS.
#
# Prebuilt envtest binaries cannot be downloaded on CAPCT's build machines, so
# they are compiled from source fetched through the Go module proxy
# (hack/tools/kubernetes and hack/tools/etcd pin the versions). A cold build takes
# about 5 minutes on 2 cores; later runs reuse the cache and return at once.
set -euo pipefail

log_name=ensure-envtest
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
# The same pin the node image builds by default (hack/tools/kubernetes).
kube_version=$(tool_version kubernetes k8s.io/kubernetes)
etcd_version=$(tool_version etcd go.etcd.io/etcd/server/v3)
assets="$CAPCT_CACHE_DIR/envtest/kube-${kube_version}-etcd-${etcd_version}"

if [[ -x "$assets/kube-apiserver" && -x "$assets/etcd" ]]; then
  echo "$assets"
  exit 0
fi

mkdir -p "$assets"

if [[ ! -x "$assets/kube-apiserver" ]]; then
  log "Building kube-apiserver ${kube_version} from source (about 4-5 minutes cold)"
  start=$SECONDS
  CGO_ENABLED=0 build_go_tool "$assets/kube-apiserver" "$CAPCT_TOOLS/kubernetes" k8s.io/kubernetes/cmd/kube-apiserver
  log "Built kube-apiserver in $((SECONDS - start))s"
fi

if [[ ! -x "$assets/etcd" ]]; then
  log "Building etcd ${etcd_version} from source (about 1 minute cold)"
  start=$SECONDS
  CGO_ENABLED=0 build_go_tool "$assets/etcd" "$CAPCT_TOOLS/etcd" go.etcd.io/etcd/server/v3
  log "Built etcd in $((SECONDS - start))s"
fi

echo "$assets"
