# Shared helpers of the quickstart scripts (sourced, not run).
# shellcheck shell=bash disable=SC2034 # the variables are used by the scripts that source this

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

QS_ROOT=$CAPCT_ROOT
QS_CACHE=$CAPCT_CACHE_DIR
QS_OUT=${QUICKSTART_OUT:-$QS_ROOT/out/quickstart}
QS_LABEL=io.x-k8s.capct.quickstart
CAPI_VERSION=$(tool_version capi sigs.k8s.io/cluster-api)
export DOCKER_BUILDKIT=0 # the legacy builder needs nothing pulled for FROM scratch
# The engine of the workload clusters' containers, as the manager reads it
# (CAPCT_ENGINE, else KIND_EXPERIMENTAL_PROVIDER, else docker). The
# management cluster runs on Docker either way, with the engine's socket
# mounted (docs/runtime.md).
QS_ENGINE=${CAPCT_ENGINE:-${KIND_EXPERIMENTAL_PROVIDER:-docker}}
case "$QS_ENGINE" in
  docker | podman) ;;
  *) die "CAPCT_ENGINE=$QS_ENGINE: the quickstart runs on docker or podman" ;;
esac
PODMAN_SOCKET=/run/podman/podman.sock

# wl_engine ARGS...: the engine's CLI for the workload clusters' containers
# (podman's takes the docker commands the quickstart uses).
wl_engine() { "$QS_ENGINE" "$@"; }

# load_into_engine IMAGE...: copies each image from Docker into the
# workload engine's storage unless it holds the same image (same ID) already;
# nothing to do when that engine is Docker. No registry: docker save | podman
# load.
load_into_engine() {
  local image id
  [[ "$QS_ENGINE" != docker ]] || return 0
  for image in "$@"; do
    id=$(docker image inspect -f '{{.Id}}' "$image") || die "$image is not in Docker"
    if [[ "$(wl_engine image inspect -f '{{.Id}}' "$image" 2>/dev/null)" == "${id#sha256:}" ]]; then
      log "$image: already in $QS_ENGINE"
      continue
    fi
    docker save "$image" | wl_engine load -q >/dev/null
    log "$image: loaded into $QS_ENGINE"
  done
}

# A failed command fails the script through fail (hack/lib.sh), which runs
# the script's on_failure (diagnostics, clean-up) before it exits.
set -o errtrace # the ERR trap also fires inside functions
trap 'fail $?' ERR

# build_scratch_image TAG INPUTS_KEY BINARY [USER]: builds TAG FROM scratch with
# BINARY as /manager (its ENTRYPOINT), unless TAG already carries INPUTS_KEY.
build_scratch_image() {
  local tag=$1 key=$2 bin=$3 user=${4:-65532:65532} ctx out
  if [[ "$(image_label "$tag" io.capct.quickstart.inputs)" == "$key" && -z "${FORCE:-}" ]]; then
    log "$tag is up to date"
    return
  fi
  ctx=$(mktemp -d)
  cp "$bin" "$ctx/manager"
  cat > "$ctx/Dockerfile" <<DOCKERFILE
FROM scratch
COPY manager /manager
USER $user
LABEL io.capct.quickstart.inputs="$key"
ENTRYPOINT ["/manager"]
DOCKERFILE
  if ! out=$(docker build -q -t "$tag" "$ctx" 2>&1); then
    rm -rf "$ctx"
    echo "$out" >&2
    die "docker build of $tag failed"
  fi
  rm -rf "$ctx"
  log "built $tag"
}
