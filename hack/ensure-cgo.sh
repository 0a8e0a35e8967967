#!/usr/bin/env bash
# Makes sure cgo can build, which the race detector (`go test -race`, run by
# make test-go) needs: Go's own toolchain brings no C compiler. On a fresh
# Debian machine it installs Debian's gcc and libc6-dev; make test-go sets
# CGO_ENABLED=1 itself. Safe to run again.
set -euo pipefail

log_name=ensure-cgo
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"

cc=$(CGO_ENABLED=1 go env CC)
if command -v "${cc%% *}" >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  log "go test -race needs a C compiler (go env CC is '$cc') and none is installed"
  exit 1
fi
log "Installing Debian's gcc and libc6-dev for the race detector"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq gcc libc6-dev >/dev/null
