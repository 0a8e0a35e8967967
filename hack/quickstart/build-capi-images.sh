#!/usr/bin/env bash
# Builds Cluster API's controllers and clusterctl from the module that
# hack/tools/capi/go.mod pins, with nothing pulled from any registry:
#
#   registry.k8s.io/cluster-api/cluster-api-controller:<v>           sigs.k8s.io/cluster-api
#   registry.k8s.io/cluster-api/kubeadm-bootstrap-controller:<v>     .../bootstrap/kubeadm
#   registry.k8s.io/cluster-api/kubeadm-control-plane-controller:<v> .../controlplane/kubeadm
#   ${CAPCT_CACHE:-~/.cache/capct}/bin/clusterctl-<v>                .../cmd/clusterctl
#
# Binaries are static (CGO_ENABLED=0, -trimpath), stamped like CAPI's release
# (-X sigs.k8s.io/cluster-api/version.*; gitCommit is a hash of the tools
# module, buildDate the module version's publication time, so builds repeat).
# Images are FROM scratch with /manager as entrypoint, user 65532 (as
# upstream's distroless:nonroot). Cached: binaries under
# $CAPCT_CACHE/capi/<key>/, images skipped when their label
# io.capct.quickstart.inputs matches. FORCE=1 rebuilds the images.
set -euo pipefail
# shellcheck source=hack/quickstart/lib.sh
source "$(dirname "$0")/lib.sh"
# with_progress: a cold compile logs that it is still running.
# shellcheck source=images/lib.sh
source "$QS_ROOT/images/lib.sh"

tools="$CAPCT_TOOLS/capi"
registry=${CAPI_REGISTRY:-registry.k8s.io/cluster-api}
v=$CAPI_VERSION
[[ "$v" =~ ^v([0-9]+)\.([0-9]+)\. ]] || die "cannot read the cluster-api version from $tools/go.mod"
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}

step "resolve inputs"
modcache=$(go env GOMODCACHE)
(cd "$tools" && go mod download sigs.k8s.io/cluster-api)
build_date=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$modcache/cache/download/sigs.k8s.io/cluster-api/@v/$v.info")
build_date=${build_date%%.*}; build_date=${build_date%Z}Z
commit=$(cat "$tools/go.mod" "$tools/go.sum" | sha1sum | cut -d' ' -f1)
x() { printf -- "-X 'sigs.k8s.io/cluster-api/version.%s=%s' " "$1" "$2"; }
ldflags="$(x gitVersion "$v")$(x gitMajor "$major")$(x gitMinor "$minor")$(x gitCommit "$commit")$(x gitTreeState clean)$(x gitReleaseCommit "$commit")$(x buildDate "$build_date")-s -w"
key=$( { go version; echo "$ldflags"; cat "$tools/go.mod" "$tools/go.sum"; } | hash_of)
bindir="$QS_CACHE/capi/$v-$key"
log "cluster-api $v, inputs $key"

declare -A pkgs=(
  [cluster-api-controller]=sigs.k8s.io/cluster-api
  [kubeadm-bootstrap-controller]=sigs.k8s.io/cluster-api/bootstrap/kubeadm
  [kubeadm-control-plane-controller]=sigs.k8s.io/cluster-api/controlplane/kubeadm
  [clusterctl]=sigs.k8s.io/cluster-api/cmd/clusterctl
)
order=(clusterctl cluster-api-controller kubeadm-bootstrap-controller kubeadm-control-plane-controller)

for name in "${order[@]}"; do
  if [[ -x "$bindir/$name" ]]; then continue; fi
  step "go build $name"
  CGO_ENABLED=0 with_progress "go build $name" build_go_tool "$bindir/$name" "$tools" "${pkgs[$name]}" -trimpath -ldflags "$ldflags"
done
# Older builds of the same kind are pruned.
for d in "$QS_CACHE"/capi/*/; do
  [[ "${d%/}" == "$bindir" ]] || rm -rf "$d"
done

step "clusterctl"
mkdir -p "$QS_CACHE/bin"
if ! cmp -s "$bindir/clusterctl" "$QS_CACHE/bin/clusterctl-$v"; then
  cp "$bindir/clusterctl" "$QS_CACHE/bin/clusterctl-$v.tmp"
  mv "$QS_CACHE/bin/clusterctl-$v.tmp" "$QS_CACHE/bin/clusterctl-$v"
fi
log "$QS_CACHE/bin/clusterctl-$v: $("$QS_CACHE/bin/clusterctl-$v" version -o short 2>/dev/null || true)"

step "images"
for name in cluster-api-controller kubeadm-bootstrap-controller kubeadm-control-plane-controller; do
  sum=$(sha256sum < "$bindir/$name" | cut -c1-16)
  build_scratch_image "$registry/$name:$v" "$key-$sum" "$bindir/$name"
done
finish
