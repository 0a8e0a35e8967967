#!/usr/bin/env bash
# Builds the kube-apiserver and etcd that envtest runs, once per version, into
# a cache outside the repository, and prints the folder for KUBEBUILDER_ASSETS.
#
# Prebuilt envtest binaries cannot be downloaded on CAPCT's build machines, so
# they are compiled from source fetched through the Go module proxy
# (hack/tools/kubernetes and hack/tools/etcd pin the versions). A cold build takes
# about 5 minutes on 2 cores; later runs reuse the cache and return at once.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
kube_version=v1.35.4
etcd_version=v3.6.16
cache=${CAPCT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capct}
assets="$cache/envtest/kube-${kube_version}-etcd-${etcd_version}"

if [[ -x "$assets/kube-apiserver" && -x "$assets/etcd" ]]; then
  echo "$assets"
  exit 0
fi

mkdir -p "$assets"
log() { echo "ensure-envtest: $*" >&2; }

if [[ ! -x "$assets/kube-apiserver" ]]; then
  log "Building kube-apiserver ${kube_version} from source (about 4-5 minutes cold)"
  start=$SECONDS
  (cd "$root/hack/tools/kubernetes" && CGO_ENABLED=0 go build -o "$assets/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
  mv "$assets/kube-apiserver.tmp" "$assets/kube-apiserver"
  log "Built kube-apiserver in $((SECONDS - start))s"
fi

if [[ ! -x "$assets/etcd" ]]; then
  log "Building etcd ${etcd_version} from source (about 1 minute cold)"
  start=$SECONDS
  (cd "$root/hack/tools/etcd" && CGO_ENABLED=0 go build -o "$assets/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$assets/etcd.tmp" "$assets/etcd"
  log "Built etcd in $((SECONDS - start))s"
fi

echo "$assets"
