#!/usr/bin/env bash
# Makes sure shellcheck is installed: make verify runs it on every script
# of the repository. On a fresh Debian machine it installs Debian's package
# of it. Safe to run again.
set -euo pipefail

log_name=ensure-shellcheck
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"

if command -v shellcheck >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  log "make verify runs shellcheck, which is not installed"
  exit 1
fi
log "Installing Debian's shellcheck for make verify"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq shellcheck >/dev/null
