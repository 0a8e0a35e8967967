#!/usr/bin/env bash
# make test-e2e (docs/e2e.md): Cluster API's own e2e specs against CAPCT,
# offline.
#
# Through the quickstart's machinery (it sources quickstart.sh), under its
# own names: management cluster capct-e2e (network capct-e2e, which the
# e2e config's CAPCT_NETWORK names), files in out/e2e/. It builds what is
# missing (node, LB and controller images, clusterctl's local repositories
# in out/e2e/repository, CAPCT's release manifests), boots the management
# cluster, runs clusterctl init from those repositories (cert-manager from
# the quickstart's local copy too: the framework's CreateRepository writes
# no cert-manager source, so its own init would fetch it from GitHub), then
# the ginkgo suite in test/e2e with -e2e.use-existing-cluster. The ginkgo
# CLI is built from the version test/e2e/go.mod pins. The junit report and
# every log are in out/e2e/artifacts. Whatever happens, it then removes
# every cluster and the management cluster (quickstart.sh down), and fails
# if anything is left.
#
# Environment: E2E_LABELS (ginkgo label filter; empty or unset runs every
# spec), E2E_SKIP_CLEANUP=true leaves everything in place,
# E2E_TIMEOUT (ginkgo's, 2h).
#
# Runs real clusters: under the Docker lock where others share the engine
# (flock /tmp/capct-docker.lock make test-e2e).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export MGMT_NAME=${MGMT_NAME:-capct-e2e}
# No cluster of this name is made: quickstart.sh down's label fallback
# removes the specs' clusters by their labels on the management network.
export QUICKSTART_CLUSTER=${QUICKSTART_CLUSTER:-e2e}
export QUICKSTART_OUT=${QUICKSTART_OUT:-$root/out/e2e}
export LOG_NAME=e2e
# The management network gets an IPv6 /64 too, for the dual-stack
# QuickStart; the other specs' IPv4 clusters ignore it, as kind's do on its
# dual-stack network.
export MGMT_IPV6=${MGMT_IPV6:-true}
# shellcheck source=hack/quickstart/quickstart.sh
source "$root/hack/quickstart/quickstart.sh"

labels=${E2E_LABELS:-}
skip_cleanup=${E2E_SKIP_CLEANUP:-false}
artifacts=$QS_OUT/artifacts
suite=$QS_ROOT/test/e2e

[[ "$MGMT_NAME" == capct-e2e ]] || export CAPCT_NETWORK=$MGMT_NAME # the config's default names capct-e2e

run() {
  $skip_cleanup || remove_on_failure=true
  start_memory_sampler
  prerequisites
  upgrade_images
  controller_images
  previous_release
  step "management cluster"
  LOG_NAME=mgmt-cluster "$here/mgmt-cluster.sh" up
  # The manager's policy as the e2e config sets it (clusterctl reads its
  # variables from the environment too): the self-hosted and clusterctl
  # upgrade specs' machines mount the engine's socket and preload the
  # controllers, which the shipped defaults refuse.
  CAPCT_ALLOWED_HOST_PATH_PREFIXES=$(config_variable CAPCT_ALLOWED_HOST_PATH_PREFIXES) \
    CAPCT_ALLOWED_IMAGE_PREFIXES=$(config_variable CAPCT_ALLOWED_IMAGE_PREFIXES) init_providers

  step "ginkgo CLI"
  local v ginkgo
  v=$(cd "$suite" && go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2)
  ginkgo=$QS_CACHE/bin/ginkgo-$v
  [[ -x "$ginkgo" ]] || (cd "$suite" && go build -o "$ginkgo" github.com/onsi/ginkgo/v2/ginkgo)
  log "$ginkgo"

  step "Cluster API e2e specs: ${labels:-every spec}"
  rm -rf "$artifacts"
  mkdir -p "$artifacts"
  local rc=0 filter=()
  [[ -z "$labels" ]] || filter=(--label-filter "$labels")
  (cd "$suite" && "$ginkgo" run -tags e2e -v --timeout "${E2E_TIMEOUT:-2h}" "${filter[@]}" \
    --output-dir "$artifacts" --junit-report junit.e2e.xml --json-report report.e2e.json . -- \
    -e2e.config="$suite/config/container.yaml" -e2e.use-existing-cluster \
    -e2e.kubeconfig="$mgmt_kubeconfig" -e2e.artifacts-folder="$artifacts" \
    -e2e.cert-manager-from="$QS_OUT/clusterctl.yaml" \
    -e2e.previous-release="$previous_release_dir" -e2e.clusterctl="$clusterctl" \
    -e2e.skip-resource-cleanup="$skip_cleanup") || rc=$?
  log "junit report: $artifacts/junit.e2e.xml"
  report_memory
  end_step
  log "specs done in $((SECONDS - script_start))s since the start"
  if $skip_cleanup; then
    log "E2E_SKIP_CLEANUP=true: everything is left; 'MGMT_NAME=$MGMT_NAME QUICKSTART_OUT=$QS_OUT hack/quickstart/quickstart.sh down' removes it"
  else
    remove_on_failure=false
    # down prints the total time itself (its finish)
    if ! (down); then
      log "removing the clusters failed or left something (above)"
      ((rc != 0)) || rc=1
    fi
  fi
  if ((rc != 0)); then
    failures
    die "the e2e specs failed (exit $rc); see $artifacts"
  fi
}

# upgrade_images builds the node images the upgrade specs need besides the
# pinned version's, when they run: the version cluster-upgrade upgrades to
# (KUBERNETES_VERSION_UPGRADE_TO) and the one cluster-upgrade-previous
# upgrades from (KUBERNETES_VERSION_PREVIOUS_UPGRADE_FROM). Workload nodes
# run images of the host's engine, which nothing pulls.
upgrade_images() {
  if [[ -z "$labels" || "$labels" =~ (^|[^a-z-])cluster-upgrade([^a-z-]|$) ]]; then
    upgrade_image KUBERNETES_VERSION_UPGRADE_TO
  fi
  if [[ -z "$labels" || "$labels" == *cluster-upgrade-previous* ]]; then
    upgrade_image KUBERNETES_VERSION_PREVIOUS_UPGRADE_FROM
  fi
}

# upgrade_image VARIABLE builds the node image of the version the e2e
# config's VARIABLE names.
upgrade_image() {
  local v
  v=$(config_variable "$1")
  step "node image $v for the upgrade specs"
  KUBERNETES_VERSION=$v NODE_IMAGE=capct/node:$v "$QS_ROOT/images/node/build.sh" >/dev/null
  end_step
}

# previous_release builds CAPCT's previous release for the clusterctl
# upgrade spec, when it runs: the e2e config's CAPCT_PREVIOUS_RELEASE names
# a tag of this repository (CAPCT_PREVIOUS_RELEASE_COMMIT its commit), and
# that commit's own scripts write its release
# manifests (a clusterctl repository folder) and its manager image
# docker.io/capct/manager:<tag>. Built once per commit.
previous_release_dir=
previous_release() {
  [[ -z "$labels" || "$labels" == *clusterctl-upgrade* ]] || return 0
  local version commit dir image
  version=$(config_variable CAPCT_PREVIOUS_RELEASE)
  step "CAPCT's previous release $version (clusterctl upgrade)"
  # The config pins the tag's commit too: a clone without tags still finds
  # the release, and a tag moved elsewhere is refused.
  commit=$(config_variable CAPCT_PREVIOUS_RELEASE_COMMIT)
  git -C "$QS_ROOT" cat-file -e "$commit^{commit}" 2>/dev/null ||
    die "commit $commit of release $version is not in this clone (a shallow clone?): the clusterctl upgrade spec installs that release first"
  local tagged
  if tagged=$(git -C "$QS_ROOT" rev-parse --verify --quiet "$version^{commit}") && [[ "$tagged" != "$commit" ]]; then
    die "tag $version names $tagged, but the e2e config pins release $version to $commit"
  fi
  dir=$QS_OUT/previous-release/$commit
  image=docker.io/capct/manager:$version
  previous_release_dir=$dir/out/infrastructure-container/$version
  if [[ -f "$dir/.done" ]] && docker image inspect "$image" >/dev/null 2>&1 &&
    [[ "$(image_label "$image" io.capct.e2e.commit)" == "$commit" ]]; then
    log "reusing $previous_release_dir and $image"
    end_step
    return
  fi
  rm -rf "$dir"
  mkdir -p "$dir/src"
  git -C "$QS_ROOT" archive "$commit" | tar -x -C "$dir/src"
  (cd "$dir/src" && hack/release-manifests.sh "$version" "$dir/out") >/dev/null
  make --no-print-directory -C "$dir/src" docker-build QUICKSTART_VERSION="$version" >&2
  # Labelled with its commit, so that an image of the same tag built from
  # elsewhere is never taken for it.
  echo "FROM $image" | docker build -q --label "io.capct.e2e.commit=$commit" -t "$image" - >/dev/null
  touch "$dir/.done"
  end_step
}

# config_variable NAME prints the e2e config's variable NAME.
config_variable() {
  local v
  v=$(sed -nE "s/^  $1: \"?([^\"]*)\"?$/\\1/p" "$suite/config/container.yaml")
  [[ -n "$v" ]] || die "test/e2e/config/container.yaml has no $1"
  echo "$v"
}

# failures prints what each failed spec's assertion said, last, where a CI
# log that keeps only the tail of the output still shows it (the spec's
# own report is hundreds of lines above, among the framework's steps).
failures() {
  [[ -f "$artifacts/report.e2e.json" ]] || return 0
  jq -r '.[].SpecReports[]? | select(.State != "passed" and .State != "skipped" and .State != "pending")
    | "\((.ContainerHierarchyTexts // []) + [.LeafNodeText] | join(" ")) (\(.State)) at \(.Failure.Location.FileName):\(.Failure.Location.LineNumber)",
      (.Failure.Message | split("\n") | .[:40] | map("  " + .) | join("\n"))' \
    "$artifacts/report.e2e.json" | sed "s/^/$LOG_NAME: /" >&2
}

run
