#!/usr/bin/env bash
# CAPCT against CAPD (Cluster API's Docker provider, the anchor), side by side
# on this machine (make bench-capd). One management cluster runs both
# providers (`clusterctl init --infrastructure container,docker`); each
# creates the same cluster, one after the other, ROUNDS times (default 2):
# 1 KubeadmControlPlane machine and 2 MachineDeployment workers, the same
# node image (capct/node), the same kubeadm settings (templates/parts; CAPD's
# template: hack/bench/capd-cluster.sh), the same LB image (capct/haproxy),
# all on the Docker network "kind" that CAPD always uses (CAPCT joins it as
# an Unmanaged network). For each it prints
#   ready:  kubectl apply -> all 3 Machines Running (infrastructure
#           provisioned and a Node registered, Cluster API's phase)
#   delete: kubectl delete cluster -> the Cluster is gone
# Nodes Ready is not compared: CAPD relies on a CNI add-on (kindnet or
# Calico) that cannot be pulled here, while CAPCT's node IPAM needs none.
#
# Environment: ROUNDS (2), BENCH_TIMEOUT (seconds per cluster, 600).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export QUICKSTART_OUT=${QUICKSTART_OUT:-$root/out/bench}
export MGMT_NAME=${MGMT_NAME:-capct-bench} MGMT_NETWORK=kind
export LOG_NAME=bench
# shellcheck source=hack/quickstart/lib.sh
source "$root/hack/quickstart/lib.sh"

rounds=${ROUNDS:-2}
timeout=${BENCH_TIMEOUT:-600}
k8s_version=v1.35.4
capd_version=$(tool_version capd sigs.k8s.io/cluster-api/test)
capd_image=gcr.io/k8s-staging-cluster-api/capd-manager:$capd_version
mgmt_kubeconfig=$QS_OUT/management.kubeconfig
clusterctl=$QS_CACHE/bin/clusterctl-$CAPI_VERSION
kubectl=$QS_CACHE/bin/kubectl-$k8s_version
config=$QS_OUT/clusterctl-bench.yaml
export CLUSTERCTL_DISABLE_VERSIONCHECK=true
kmgmt() { "$kubectl" --kubeconfig "$mgmt_kubeconfig" "$@"; }

build_capd() {
  step "CAPD $capd_version: manager image and clusterctl repository"
  local key bin mod work dest
  key=$( (go version; cat "$CAPCT_TOOLS/capd/go.mod" "$CAPCT_TOOLS/capd/go.sum") | hash_of)
  bin="$QS_CACHE/capd/$capd_version-$key/manager"
  CGO_ENABLED=0 build_go_tool "$bin" "$CAPCT_TOOLS/capd" sigs.k8s.io/cluster-api/test/infrastructure/docker -trimpath
  build_scratch_image "$capd_image" "$key" "$bin" 0:0 # root: the Docker socket

  mod=$(cd "$CAPCT_TOOLS/capd" && go mod download -json sigs.k8s.io/cluster-api/test | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  work=$(mktemp -d)
  cp -r "$mod/infrastructure/docker/config" "$work/config"
  chmod -R u+w "$work"
  sed -i -e "s@image: .*@image: $capd_image@" "$work/config/default/manager_image_patch.yaml"
  sed -i -e 's@imagePullPolicy: .*@imagePullPolicy: IfNotPresent@' "$work/config/default/manager_pull_policy.yaml"
  dest="$QS_OUT/repository/infrastructure-docker/$capd_version"
  mkdir -p "$dest"
  "$QS_CACHE/bin/kustomize-$(tool_version kustomize sigs.k8s.io/kustomize/kustomize/v5)" build "$work/config/default" >"$dest/infrastructure-components.yaml"
  rm -rf "$work"
  # CAPD's module ships no metadata.yaml; clusterctl needs one.
  cat >"$dest/metadata.yaml" <<YAML
apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3
kind: Metadata
releaseSeries:
- major: 1
  minor: 13
  contract: v1beta2
YAML
  sed "s@^providers:@providers:\n- name: docker\n  type: InfrastructureProvider\n  url: file://$dest/infrastructure-components.yaml@" \
    "$QS_OUT/clusterctl.yaml" >"$config"
}

# wait_running CLUSTER: seconds until its 3 Machines are Running.
wait_running() {
  local start=$SECONDS n
  while :; do
    n=$(kmgmt get machines -n default -l "cluster.x-k8s.io/cluster-name=$1" -o json |
      jq '[.items[] | select(.status.phase == "Running")] | length')
    ((n == 3)) && break
    ((SECONDS - start < timeout)) || die "$1: $n of 3 Machines Running after ${timeout}s"
    sleep 1
  done
  echo $((SECONDS - start))
}

# run PROVIDER ROUND: creates, times and deletes one cluster.
results=()
run() {
  local provider=$1 name="$1-b$2" manifest ready start deleted
  step "round $2: $provider"
  manifest="$QS_OUT/$name.yaml"
  if [[ $provider == capct ]]; then
    "$clusterctl" generate cluster "$name" --infrastructure container --kubernetes-version "$k8s_version" \
      --control-plane-machine-count 1 --worker-machine-count 2 --target-namespace default \
      --config "$config" --kubeconfig "$mgmt_kubeconfig" >"$manifest"
  else
    "$QS_ROOT/hack/bench/capd-cluster.sh" >"$QS_OUT/capd-cluster-template.yaml"
    "$clusterctl" generate cluster "$name" --from "$QS_OUT/capd-cluster-template.yaml" --kubernetes-version "$k8s_version" \
      --control-plane-machine-count 1 --worker-machine-count 2 --target-namespace default \
      --config "$config" --kubeconfig "$mgmt_kubeconfig" >"$manifest"
  fi
  local tries=0
  until kmgmt apply -f "$manifest" >/dev/null 2>&1; do
    ((++tries < 30)) || kmgmt apply -f "$manifest" >&2 || die "applying $manifest failed"
    sleep 2
  done
  ready=$(wait_running "$name")
  start=$SECONDS
  kmgmt delete cluster "$name" -n default --timeout="${timeout}s" >/dev/null
  deleted=$((SECONDS - start))
  log "$provider round $2: 3 Machines Running in ${ready}s, deleted in ${deleted}s"
  results+=("$provider $2 $ready $deleted")
}

step "prerequisites and the providers' images"
"$QS_ROOT/hack/quickstart/quickstart.sh" prepare
build_capd

step "management cluster $MGMT_NAME on network kind, with both providers"
"$QS_ROOT/hack/quickstart/mgmt-cluster.sh" up
docker save "$capd_image" | docker exec -i "$MGMT_NAME" ctr -n k8s.io images import --no-unpack - >/dev/null
if ! kmgmt get providers.clusterctl.cluster.x-k8s.io -A -o name | grep -q infrastructure-docker; then
  "$clusterctl" init --infrastructure container,docker --config "$config" --kubeconfig "$mgmt_kubeconfig" --wait-providers >&2
fi

for round in $(seq "$rounds"); do
  run capct "$round"
  run capd "$round"
done
end_step

{
  echo "provider round ready_s delete_s"
  printf '%s\n' "${results[@]}"
} | column -t | tee "$QS_OUT/results.txt" >&2
log "results in $QS_OUT/results.txt; 'MGMT_NAME=$MGMT_NAME MGMT_NETWORK=kind hack/quickstart/mgmt-cluster.sh down' removes the management cluster"
finish
