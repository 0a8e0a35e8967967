#!/usr/bin/env bash
# make-each.sh TARGET...: runs `make TARGET` for each target in turn, stops
# at the first that fails, and ends, failed or not, with how long each took
# (make test; CI keeps only the end of the output, and the suite's time is
# held to a budget, so that is where its split has to be).
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"

took=()
summary() {
  local rc=$?
  log "time per target (of $((SECONDS - script_start))s in all):"
  printf '  %s\n' "${took[@]}" >&2
  return "$rc"
}
trap summary EXIT
for target in "$@"; do
  start=$SECONDS
  rc=0
  "${MAKE:-make}" "$target" || rc=$?
  took+=("$(printf '%-18s %5ds%s' "$target" $((SECONDS - start)) "$( ((rc == 0)) || echo "  FAILED (exit $rc)")")")
  ((rc == 0)) || exit "$rc"
done
