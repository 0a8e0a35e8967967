#!/usr/bin/env bash
# Fails when the README or a docs/ page points at something that is not in
# the repository: a Go test, fuzz target or benchmark named in the text
# (TestX, FuzzX, BenchmarkX must be a func of some _test.go file), or a
# relative Markdown link whose file is missing. Run by make verify, so that
# a renamed test or a moved file cannot leave the documents behind.
# CHANGELOG.md is history and may name what is gone; it is not checked.
set -euo pipefail

log_name=verify-docs
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$CAPCT_ROOT"

docs=(README.md docs/*.md)
failed=0

declare -A defined=()
while read -r name; do
  defined[$name]=1
done < <(git ls-files '*_test.go' | xargs sed -nE 's/^func ((Test|Fuzz|Benchmark)[A-Z][A-Za-z0-9_]*)\(.*/\1/p')

while IFS=: read -r file name; do
  if [[ -z "${defined[$name]:-}" ]]; then
    log "$file names $name, which no _test.go file defines"
    failed=1
  fi
done < <(grep -oHE '\b(Test|Fuzz|Benchmark)[A-Z][A-Za-z0-9_]*' "${docs[@]}" | sort -u)

while IFS=: read -r file target; do
  path=${target%%#*}
  [[ -z "$path" ]] && continue
  if [[ ! -e "$(dirname "$file")/$path" ]]; then
    log "$file links to $path, which does not exist"
    failed=1
  fi
done < <(grep -oHE '\]\([^)[:space:]]+\)' "${docs[@]}" | sed -E 's/\]\((.*)\)$/\1/' | grep -vE ':(https?|mailto):' | sort -u)

exit "$failed"
