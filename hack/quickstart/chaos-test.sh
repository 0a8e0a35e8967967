#!/usr/bin/env bash
# make test-chaos (docs/restarts.md, "Chaos"): CAPCT's manager killed with
# SIGKILL at 20 random points during a MachinePool 0->10 and the cluster's
# deletion, and the engine restarted once in the middle of the scale-out.
#
# Through the quickstart's machinery (it sources quickstart.sh), under its
# own names: management cluster capct-chtest, workload cluster chtest of one
# control plane and an empty MachineDeployment and MachinePool, files in
# out/chaos-test/. It brings the clusters up, then runs the Go test
# test/chaos (build tag realcluster; output also in out/chaos-test/go-test-chaos.log),
# which scales, kills, restarts the engine through restart-test.sh's
# engine-stop and engine-start, deletes the cluster and checks what is left;
# then the quickstart's down, which must find nothing of the cluster.
#
# Variables (the Go test reads them): CHAOS_KILLS (20 in all: during the
# scale-out until every Node is Ready, the rest during the deletion),
# CHAOS_DELETE_KILLS (at least 6 of them for the deletion),
# CHAOS_RESTART_AFTER (the engine restarts after the 5th kill),
# CHAOS_REPLICAS (10), CHAOS_MAX_WORK (4: the most seconds a new manager
# leads before it is killed), CHAOS_SEED (random; the test logs it, to
# replay a run).
#
# It stops the engine: run it alone, under the Docker lock
# (flock /tmp/capct-docker.lock make test-chaos) where others share it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export MGMT_NAME=${MGMT_NAME:-capct-chtest}
export QUICKSTART_CLUSTER=${QUICKSTART_CLUSTER:-chtest}
export QUICKSTART_OUT=${QUICKSTART_OUT:-$root/out/chaos-test}
export QUICKSTART_WORKERS=0
export LOG_NAME=chaos-test
# shellcheck source=hack/quickstart/quickstart.sh
source "$root/hack/quickstart/quickstart.sh"

on_failure() {
  start_engine_if_stopped
  diagnose
  if $remove_on_failure; then
    remove_on_failure=false
    log "---- removing the test's clusters"
    (delete_timeout=120 down) || true
  fi
}

main() {
  remove_on_failure=true
  rm -f "$QS_OUT/engine-stopped"
  step "compile test/chaos"
  (cd "$QS_ROOT" && go test -tags realcluster -c -o /dev/null ./test/chaos)
  up
  step "kill the manager during a MachinePool 0->10 and the deletion; restart the engine once (test/chaos)"
  go_test test/chaos 60m RESTART_ENGINE_CONTROL="$QS_ROOT/hack/quickstart/restart-test.sh"
  end_step
  down
}

main
