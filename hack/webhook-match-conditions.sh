#!/usr/bin/env bash
# Adds to every webhook of config/webhook/manifests.yaml (written by
# controller-gen, which has no marker for it) a match condition that leaves
# out the writes of an object being deleted that keep its spec, labels and
# annotations: the removal of its finalizer above all. Those writes need no
# validation or defaulting, and must not depend on the webhook answering:
# while CAPCT's manager restarts, is killed, or is not running at all, its
# webhook does not answer, and without this an object being deleted could
# not have its finalizer removed, by CAPCT's next manager or by hand. What a
# deletion acts on (the spec, the cluster-name label, the engine
# annotation) is still validated when it changes.
set -euo pipefail
manifests=${1:-config/webhook/manifests.yaml}
grep -q '^  matchConditions:' "$manifests" && exit 0
# controller-gen writes each webhook's keys in order; matchConditions goes
# before matchPolicy, which every webhook has.
awk '
/^  matchPolicy:/ {
  print "  matchConditions:"
  print "  - expression: >-"
  print "      !has(object.metadata.deletionTimestamp)"
  for (i = 1; i <= 3; i++) {
    f = (i == 1) ? "object.spec" : (i == 2) ? "object.metadata.labels" : "object.metadata.annotations"
    o = "old" toupper(substr(f, 1, 1)) substr(f, 2)
    printf "      || has(%s) != has(%s) || (has(%s) && %s != %s)\n", f, o, f, f, o
  }
  print "    name: not-a-deletion-keeping-what-it-acts-on"
}
{ print }
' "$manifests" > "$manifests.tmp"
mv "$manifests.tmp" "$manifests"
