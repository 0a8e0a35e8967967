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
