#!/usr/bin/env bash
# Lays out clusterctl's local repositories for `make quickstart`, and a
# clusterctl configuration that points every provider and cert-manager at them
# (file:// URLs; nothing is fetched from GitHub):
#
#   out/quickstart/repository/cluster-api/<v>/core-components.yaml             kustomize build config/default
#   out/quickstart/repository/bootstrap-kubeadm/<v>/bootstrap-components.yaml   ... bootstrap/kubeadm/config/default
#   out/quickstart/repository/control-plane-kubeadm/<v>/control-plane-components.yaml
#   out/quickstart/repository/*/<v>/metadata.yaml                                the module's metadata.yaml
#   out/quickstart/clusterctl.yaml
#
# The components are rendered from the sigs.k8s.io/cluster-api module that
# hack/tools/capi/go.mod pins, the way CAPI's `make release-manifests` does
# after `manifest-modification`: each manager_image_patch.yaml set to
# registry.k8s.io/cluster-api/<image>:<v> and imagePullPolicy IfNotPresent (the
# images are built by build-capi-images.sh and loaded into the management
# node; nothing is pulled). CAPCT's own repository is `make release-manifests`'
# out/infrastructure-container/<QUICKSTART_VERSION>/ (rewritten on every run),
# cert-manager's is out/quickstart/repository/cert-manager/<version>/cert-manager.yaml
# (build-cert-manager.sh).
#
# Environment: QUICKSTART_VERSION (CAPCT's, default v0.1.0), CERT_MANAGER_VERSION (v1.21.1).
set -euo pipefail
# shellcheck source=hack/quickstart/lib.sh
source "$(dirname "$0")/lib.sh"

v=$CAPI_VERSION
capct_version=${QUICKSTART_VERSION:-v0.1.0}
cm_version=${CERT_MANAGER_VERSION:-v1.21.1}
registry=${CAPI_REGISTRY:-registry.k8s.io/cluster-api}
repo="$QS_OUT/repository"

step "kustomize"
kustomize="$QS_CACHE/bin/kustomize-$(tool_version kustomize sigs.k8s.io/kustomize/kustomize/v5)"
build_go_tool "$kustomize" "$CAPCT_TOOLS/kustomize" sigs.k8s.io/kustomize/kustomize/v5

step "cluster-api $v components"
mod=$(cd "$CAPCT_TOOLS/capi" && go mod download -json sigs.k8s.io/cluster-api | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[[ -d "$mod/config/default" ]] || die "cannot find sigs.k8s.io/cluster-api@$v in the module cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# (provider dir, components file, config dir, image name)
providers=(
  "cluster-api core-components.yaml config cluster-api-controller"
  "bootstrap-kubeadm bootstrap-components.yaml bootstrap/kubeadm/config kubeadm-bootstrap-controller"
  "control-plane-kubeadm control-plane-components.yaml controlplane/kubeadm/config kubeadm-control-plane-controller"
)
for p in "${providers[@]}"; do
  read -r dir file config image <<<"$p"
  mkdir -p "$work/src/$(dirname "$config")"
  cp -r "$mod/$config" "$work/src/$config"
  chmod -R u+w "$work/src"
  sed -i -e "s@image: .*@image: $registry/$image:$v@" "$work/src/$config/default/manager_image_patch.yaml"
  sed -i -e 's@imagePullPolicy: .*@imagePullPolicy: IfNotPresent@' "$work/src/$config/default/manager_pull_policy.yaml"
  dest="$repo/$dir/$v"
  mkdir -p "$dest"
  "$kustomize" build "$work/src/$config/default" > "$dest/$file.tmp"
  grep -q "image: $registry/$image:$v" "$dest/$file.tmp" || die "$file does not use $registry/$image:$v"
  mv "$dest/$file.tmp" "$dest/$file"
  cp "$mod/metadata.yaml" "$dest/metadata.yaml"
  log "wrote $dest/$file ($(grep -c '^kind:' "$dest/$file") objects)"
done

step "CAPCT $capct_version components"
capct="$QS_ROOT/out/infrastructure-container/$capct_version"
# always: it takes a second, and a stale copy would hide changes to config/ or templates/
"$QS_ROOT/hack/release-manifests.sh" "$capct_version" "$QS_ROOT/out" >&2

# engine_settings: the clusterctl variables that differ by the workload
# clusters' engine.
engine_settings() {
  if [[ "$QS_ENGINE" == podman ]]; then
    cat <<YAML
# The workload clusters run on Podman (docs/runtime.md): the manager is told
# so, with Podman's socket mounted, and each cluster gets a network of its
# own there (Managed), which the management node, on a Docker network,
# reaches through the host: Docker isolates its own bridges only.
CAPCT_ENGINE: podman
CAPCT_ENGINE_SOCKET: $PODMAN_SOCKET
CAPCT_NETWORK_MODE: Managed
YAML
    return
  fi
  cat <<YAML
# Workload clusters join the management cluster's network (Unmanaged: CAPCT
# neither owns nor deletes it), so that the controllers in the management
# node reach their load balancers; Docker isolates bridge networks.
CAPCT_NETWORK: ${MGMT_NETWORK:-${MGMT_NAME:-capct-mgmt}}
CAPCT_NETWORK_MODE: Unmanaged
YAML
}

step "clusterctl.yaml"
mkdir -p "$QS_OUT"
cat > "$QS_OUT/clusterctl.yaml.tmp" <<YAML
# Written by hack/quickstart/capi-repository.sh: clusterctl's providers and
# cert-manager from local repositories, so that \`clusterctl init\` fetches nothing.
providers:
- name: cluster-api
  type: CoreProvider
  url: file://$repo/cluster-api/$v/core-components.yaml
- name: kubeadm
  type: BootstrapProvider
  url: file://$repo/bootstrap-kubeadm/$v/bootstrap-components.yaml
- name: kubeadm
  type: ControlPlaneProvider
  url: file://$repo/control-plane-kubeadm/$v/control-plane-components.yaml
- name: container
  type: InfrastructureProvider
  url: file://$capct/infrastructure-components.yaml
cert-manager:
  url: file://$repo/cert-manager/$cm_version/cert-manager.yaml
  version: $cm_version
  timeout: 10m
# The images are loaded into the management node; never pull them.
CAPCT_MANAGER_IMAGE: docker.io/capct/manager:$capct_version
CAPCT_MANAGER_IMAGE_PULL_POLICY: Never
EXP_MACHINE_POOL: "true"
# The workload clusters' defaults: the offline node and LB images
# (make node-image / make lb-image), never an image from a registry.
KUBERNETES_VERSION: ${KUBERNETES_VERSION:-v1.35.4}
CAPCT_NODE_IMAGE: ${NODE_IMAGE:-capct/node:${KUBERNETES_VERSION:-v1.35.4}}
CAPCT_LB_IMAGE: ${LB_IMAGE:-capct/haproxy:2.6}
$(engine_settings)
CLUSTER_TOPOLOGY: "true"
YAML
mv "$QS_OUT/clusterctl.yaml.tmp" "$QS_OUT/clusterctl.yaml"
log "wrote $QS_OUT/clusterctl.yaml"

clusterctl="$QS_CACHE/bin/clusterctl-$v"
if [[ -x "$clusterctl" ]]; then
  step "check with clusterctl"
  export CLUSTERCTL_DISABLE_VERSIONCHECK=true
  # only the providers that point at the local repositories
  "$clusterctl" config repositories --config "$QS_OUT/clusterctl.yaml" | grep -E '^NAME|file://' >&2
  for args in "--core cluster-api" "--bootstrap kubeadm" "--control-plane kubeadm" "--infrastructure container"; do
    # shellcheck disable=SC2086
    n=$("$clusterctl" generate provider $args --config "$QS_OUT/clusterctl.yaml" | grep -c '^kind:')
    log "clusterctl generate provider $args: $n objects"
  done
else
  log "($clusterctl is not built yet: run build-capi-images.sh, then this again to check the repositories)"
fi
finish
