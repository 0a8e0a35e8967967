# Shared helpers of the quickstart scripts (sourced, not run).
# shellcheck shell=bash disable=SC2034 # the variables are used by the scripts that source this

QS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
QS_CACHE=${CAPCT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capct}
QS_OUT=${QUICKSTART_OUT:-$QS_ROOT/out/quickstart}
QS_LABEL=io.x-k8s.capct.quickstart
CAPI_VERSION=$(awk '$1 == "sigs.k8s.io/cluster-api" && $2 ~ /^v/ {print $2; exit}' "$QS_ROOT/hack/tools/capi/go.mod")
export DOCKER_BUILDKIT=0 # the legacy builder needs nothing pulled for FROM scratch

qs_name=${QS_NAME:-$(basename "$0" .sh)}
qs_start=$SECONDS
qs_step_start=$SECONDS
qs_step_name=""

log() { echo "$qs_name: $*" >&2; }
die() { log "ERROR: $*"; fail 1; }
step() { # step NAME: starts timing a step (ending the previous one)
  end_step
  qs_step_name=$1
  qs_step_start=$SECONDS
  log "==> $qs_step_name"
}
end_step() {
  if [[ -n "$qs_step_name" ]]; then
    log "<== $qs_step_name: $((SECONDS - qs_step_start))s"
    qs_step_name=""
  fi
}
finish() { end_step; log "done in $((SECONDS - qs_start))s"; }
hash_of() { sha256sum | cut -c1-16; }
# fail RC: runs the script's own on_failure function when it defines one,
# says which step failed, and exits with RC. In a subshell it only exits:
# the main shell reports.
fail() {
  local rc=$1
  [[ $BASHPID == "$$" ]] || exit "$rc"
  trap - ERR
  if declare -F on_failure >/dev/null; then on_failure || true; fi
  log "FAILED in step '${qs_step_name:-?}' (exit $rc) after $((SECONDS - qs_start))s"
  exit "$rc"
}
set -o errtrace # the ERR trap also fires inside functions
trap 'fail $?' ERR

# image_label IMAGE LABEL: prints the label's value, empty when the image or label is missing
image_label() {
  docker image inspect -f "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true
}

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
