# The helpers every CAPCT script shares (sourced, not run): logging, timed
# steps, failing, hashing, image labels, and building a Go tool from its
# pinned module. One copy, so that a fix or a change of format reaches every
# script, and a script's log reads like every other's.
#
# Before sourcing, a script may set log_name (the prefix of its log lines);
# otherwise it is $LOG_NAME, which a script exports to have the scripts it
# runs log under its name (the quickstart's tests do), or else the script's
# file name without .sh.
# shellcheck shell=bash disable=SC2034 # the variables are used by the scripts that source this

CAPCT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The same default as the Makefile's CAPCT_CACHE, for scripts run by hand.
CAPCT_CACHE_DIR=${CAPCT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capct}
# The pinned modules of the tools CAPCT builds from source (one per tool,
# so that their dependencies never meet CAPCT's own).
CAPCT_TOOLS=$CAPCT_ROOT/hack/tools

log_name=${log_name:-${LOG_NAME:-$(basename "$0" .sh)}}
script_start=$SECONDS
step_start=$SECONDS
step_name=""

# log MESSAGE...: one line on stderr, so that stdout stays the script's
# result (an image name, a folder).
log() { echo "$log_name: $*" >&2; }
die() { log "ERROR: $*"; fail 1; }
step() { # step NAME: starts timing a step (ending the previous one)
  end_step
  step_name=$1
  step_start=$SECONDS
  log "==> $step_name"
}
end_step() {
  if [[ -n "$step_name" ]]; then
    log "<== $step_name: $((SECONDS - step_start))s"
    step_name=""
  fi
}
finish() { end_step; log "done in $((SECONDS - script_start))s"; }

# fail RC: runs the script's own on_failure function when it defines one,
# says which step failed, and exits with RC. In a subshell (a command
# substitution, a background job) it only exits: the main shell reports.
fail() {
  local rc=$1
  [[ $BASHPID == "$$" ]] || exit "$rc"
  trap - ERR
  if declare -F on_failure >/dev/null; then on_failure || true; fi
  log "FAILED in step '${step_name:-?}' (exit $rc) after $((SECONDS - script_start))s"
  exit "$rc"
}

# hash_of: a short key of stdin, for cache entries and image labels.
hash_of() { sha256sum | cut -c1-16; }

# image_label IMAGE LABEL: prints the label's value, empty when the image or label is missing
image_label() {
  docker image inspect -f "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true
}

# tool_version TOOL MODULE: the version of MODULE that hack/tools/TOOL/go.mod
# requires (in a require block or on a require line of its own).
tool_version() {
  awk -v m="$2" '$1 == "require" && $2 == m && $3 ~ /^v/ { print $3; exit }
    $1 == m && $2 ~ /^v/ { print $2; exit }' "$CAPCT_TOOLS/$1/go.mod"
}

# build_go_tool OUT MODULE_DIR PACKAGE [go build flags...]: builds PACKAGE
# as resolved by the Go module in MODULE_DIR (hack/tools/<tool> for the
# pinned tools) into OUT, unless OUT is already there: OUT's name carries
# the version or a hash of the inputs, so an existing OUT is the right one.
# The build writes OUT.tmp and renames it, so that an interrupted build
# never leaves a partial OUT behind. The caller's environment reaches go
# build (CGO_ENABLED=0 build_go_tool ... for a static binary).
build_go_tool() {
  local out=$1 dir=$2 pkg=$3
  shift 3
  [[ -x "$out" ]] && return 0
  mkdir -p "$(dirname "$out")"
  (cd "$dir" && go build "$@" -o "$out.tmp" "$pkg")
  mv "$out.tmp" "$out"
}
