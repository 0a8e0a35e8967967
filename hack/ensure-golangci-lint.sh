#!/usr/bin/env bash
# Builds golangci-lint, the Go linter `make verify` runs (.golangci.yml
# configures it), once per version into CAPCT's cache, and prints the
# binary's path. Prebuilt releases cannot be downloaded on CAPCT's build
# machines, so it is compiled from source fetched through the Go module
# proxy; hack/tools/golangci-lint pins the version. A cold build takes about
# 4 minutes on 2 cores; later runs return at once.
set -euo pipefail

log_name=ensure-golangci-lint
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"

version=$(tool_version golangci-lint github.com/golangci/golangci-lint/v2)
[[ -n "$version" ]] || die "hack/tools/golangci-lint/go.mod does not require golangci-lint"
out="$CAPCT_CACHE_DIR/bin/golangci-lint-$version"

if [[ ! -x "$out" ]]; then
  log "Building golangci-lint $version from source (about 4 minutes cold)"
  start=$SECONDS
  CGO_ENABLED=0 build_go_tool "$out" "$CAPCT_TOOLS/golangci-lint" github.com/golangci/golangci-lint/v2/cmd/golangci-lint
  log "Built golangci-lint in $((SECONDS - start))s"
fi
echo "$out"
