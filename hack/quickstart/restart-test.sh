#!/usr/bin/env bash
# make test-restart (docs/restarts.md): a real cluster survives a restart of
# the container engine.
#
#   restart-test.sh [test]      the test (make test-restart)
#   restart-test.sh engine-stop the engine stopped: through systemd where
#                               dockerd runs under it, else SIGTERM to the pid
#                               in /var/run/docker.pid, waiting up to 120 s
#                               for it to exit
#   restart-test.sh engine-start the engine started again the way it was
#                               stopped (systemd, else hack/ensure-docker.sh);
#                               returns once it answers
#
# The test, through the quickstart's machinery (it sources quickstart.sh),
# under its own names: management cluster capct-rstest, workload cluster
# rstest of one control plane, one MachineDeployment and one MachinePool
# worker, files in out/restart-test/. This script brings the clusters up and
# starts a probe pod on each worker; the Go test test/restart (build tag
# realcluster) records what must survive, stops and starts the engine through
# engine-stop and engine-start, and checks, within RESTART_TIMEOUT seconds
# (300) of the engine answering again: the management node, the load
# balancer (started again by the engine, not by CAPCT), the node containers,
# every Node Ready after the restart, the Cluster Available, the probe pods,
# then pod-to-pod and Service traffic. It writes the states every object
# passed through to out/restart-test/restart-states.tsv and its output to
# out/restart-test/go-test-restart.log. Then the quickstart's down, which must leave
# nothing. On failure: the engine is started if it is stopped, the
# quickstart's diagnostics are printed, and everything is removed.
#
# It stops the engine: run it alone, under the Docker lock
# (flock /tmp/capct-docker.lock make test-restart) where others share it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export MGMT_NAME=${MGMT_NAME:-capct-rstest}
export QUICKSTART_CLUSTER=${QUICKSTART_CLUSTER:-rstest}
export QUICKSTART_OUT=${QUICKSTART_OUT:-$root/out/restart-test}
export QUICKSTART_WORKERS=1
# The MachineDeployment's worker publishes node port 30080 on the host's
# 127.0.0.1:38080; the Go test puts test/portmap's probe behind it and
# fetches it before and after the restart.
export CAPCT_WORKER_PORT_MAPPINGS=${CAPCT_WORKER_PORT_MAPPINGS:-'[{containerPort: 30080, hostPort: 38080}]'}
export LOG_NAME=restart-test
# shellcheck source=hack/quickstart/quickstart.sh
source "$root/hack/quickstart/quickstart.sh"

export RESTART_TIMEOUT=${RESTART_TIMEOUT:-300}
# How the engine was stopped ("systemd" or "pid file"), while it is: the
# Go test stops and starts it through this script, and this script's
# failure path starts it again if the test did not get to.
engine_state=$QS_OUT/engine-stopped

# ---- the engine ----

under_systemd() { [[ -d /run/systemd/system ]] && systemctl is-active --quiet docker 2>/dev/null; }

engine_stop() {
  mkdir -p "$QS_OUT"
  if under_systemd; then
    echo systemd >"$engine_state"
    log "systemctl stop docker"
    systemctl stop docker.socket docker.service 2>/dev/null || systemctl stop docker.service
  else
    local pid deadline
    pid=$(cat /var/run/docker.pid 2>/dev/null) || die "no /var/run/docker.pid: cannot tell which process is the engine"
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == dockerd ]] || die "pid $pid of /var/run/docker.pid is not dockerd"
    echo "pid file" >"$engine_state"
    log "SIGTERM to dockerd (pid $pid, from /var/run/docker.pid)"
    kill -TERM "$pid"
    deadline=$((SECONDS + 120))
    while [[ -e "/proc/$pid" ]]; do
      ((SECONDS < deadline)) || die "dockerd (pid $pid) did not exit within 120s of SIGTERM"
      sleep 1
    done
  fi
  ! docker info >/dev/null 2>&1 || die "the engine still answers after it was stopped"
}

engine_start() {
  if [[ "$(cat "$engine_state" 2>/dev/null)" == systemd ]]; then
    systemctl start docker.service
  fi
  # Starts dockerd when it does not answer, raises the host limits, and
  # returns once `docker info` answers.
  "$QS_ROOT/hack/ensure-docker.sh" >&2
  rm -f "$engine_state"
}

# ---- the test ----

# engine_only: the script runs engine-stop or engine-start for the Go test.
engine_only=false
on_failure() {
  if [[ -e "$engine_state" ]]; then
    log "starting the engine again"
    engine_start || log "could not start the engine; see /var/log/capct-dockerd.log"
  fi
  ! $engine_only || return 0
  diagnose
  if $remove_on_failure; then
    remove_on_failure=false
    log "---- removing the test's clusters"
    # A cluster that did not come back may not delete either: fall back
    # to the labels sooner.
    (delete_timeout=120 down) || true
  fi
}

main() {
  remove_on_failure=true
  rm -f "$engine_state"
  step "compile test/restart"
  (cd "$QS_ROOT" && go test -tags realcluster -c -o /dev/null ./test/restart)
  up
  step "probe pods on both workers"
  start_probes
  step "restart the engine; the checks (test/restart)"
  go_test test/restart 30m RESTART_ENGINE_CONTROL="$QS_ROOT/hack/quickstart/restart-test.sh"
  remove_probes
  end_step
  down
}

case "${1:-test}" in
  test) main ;;
  engine-stop)
    engine_only=true
    engine_stop
    ;;
  engine-start)
    engine_only=true
    engine_start
    ;;
  *) echo "usage: $0 [test|engine-stop|engine-start]" >&2; exit 2 ;;
esac
