#!/usr/bin/env bash
# Builds CAPCT's image registry from source, with nothing pulled from any
# image registry:
#
#   images/registry/build.sh          ->  ${REGISTRY_IMAGE:-capct/registry:<version>}
#   images/registry/build.sh binary   ->  the path of the static registry binary (cached)
#
# The server is the distribution project's (github.com/distribution/distribution/v3),
# pinned in hack/tools/registry and built static (CGO_ENABLED=0) into an
# image FROM scratch with config.yml here: a plain registry over HTTP on
# :5000. The pull tests (internal/test/registry) run it as a container on
# the local engine, published on 127.0.0.1 only; docs/registries.md shows
# how to run it by hand. stdout gets the result and nothing else; progress
# goes to stderr. When its inputs are unchanged the script returns at once.
#
# Environment (and images/lib.sh's): REGISTRY_IMAGE, the tag to produce.
set -euo pipefail
log_name=registry-image
# shellcheck source=images/lib.sh
source "$(dirname "$0")/../lib.sh"

here="$root/images/registry"
tools="$CAPCT_TOOLS/registry"
module=github.com/distribution/distribution/v3
version=$(tool_version registry "$module")
[[ -n "$version" ]] || die "hack/tools/registry/go.mod pins no $module"

# registry_binary: the static server, cached by the Go version and the pin.
registry_binary() {
  local key out
  key=$( { echo "$go_version $version"; cat "$tools/go.mod" "$tools/go.sum" "$tools/tools.go"; } | hash_of)
  out="$cache/bin/registry-$key/registry"
  if [[ ! -x "$out" ]]; then
    log "go build $module/cmd/registry $version (about a minute cold)"
    CGO_ENABLED=0 build_go_tool "$out" "$tools" "$module/cmd/registry" \
      -trimpath -ldflags "-s -w -X $module/version.version=$version"
    prune "$cache/bin" "registry-*" "$(dirname "$out")"
  fi
  echo "$out"
}

build_image() {
  local image=${REGISTRY_IMAGE:-capct/registry:${version#v}}
  step "registry binary $version"
  local bin inputs
  bin=$(registry_binary)
  end_step
  inputs=$( { echo "$image"; sha256sum <"$bin"; cat "$here/Dockerfile" "$here/config.yml"; } | hash_of)
  if [[ -z "${FORCE:-}" ]] && [[ "$(image_label "$image" io.capct.image.inputs)" == "$inputs" ]]; then
    log "$image is up to date; total $((SECONDS - script_start))s"
    echo "$image"; return
  fi
  step "registry image $image"
  local ctx previous
  ctx=$(mktemp -d "$cache/tmp/registry.XXXXXX")
  cp "$bin" "$here/config.yml" "$ctx/"
  mkdir "$ctx/empty"
  sed -e "s|@INPUTS@|$inputs|" "$here/Dockerfile" > "$ctx/Dockerfile"
  previous=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
  dbuild -t "$image" "$ctx"
  drop_previous "$previous" "$image"
  rm -rf "$ctx"
  end_step
  log "built $image in $((SECONDS - script_start))s"
  echo "$image"
}

# The pull tests of several packages run this at once (go test runs
# packages in parallel): one builds, the others then find it built.
exec {build_lock}>"$cache/tmp/registry-build.lock"
flock "$build_lock"

case "${1:-image}" in
  image) build_image ;;
  binary) registry_binary ;;
  *) die "usage: $0 [image|binary]" ;;
esac
