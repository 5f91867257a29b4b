#!/usr/bin/env bash
# Entry point of the containers that run Keel's Celery worker: a Ray worker node and the worker, side by side.
#
#   worker-entrypoint.sh RAY_START_OPTIONS... -- COMMAND [ARGS...]
#   e.g. worker-entrypoint.sh --num-cpus=4 --num-gpus=0 -- keel worker --concurrency 1
#
# Why a Ray node: the Celery worker is a Ray driver, and a driver joins a cluster through a Ray node on
# its own host (ray.init(address=...) looks for a local raylet process). So this script runs
# `ray start --address=$KEEL_RAY_ADDRESS --block` with the options given (--num-cpus is required: Ray
# would otherwise offer the whole host's CPUs, not this container's share), waits until a driver can
# connect here, then starts COMMAND with the same KEEL_RAY_ADDRESS.
#
# Why not `exec COMMAND`: then nothing would stop the Ray node. On SIGTERM or SIGINT this script stops
# COMMAND first (Celery's warm shutdown: it finishes the running job, or the job resumes elsewhere from
# its last checkpoint) and the Ray node after it (it leaves the cluster cleanly). If either exits on its
# own, the other is stopped and the script exits non-zero, so the container restarts.
#
# Environment: KEEL_RAY_ADDRESS (required, host:port of the Ray head's GCS), RAY_NODE_NAME (default: the
# hostname), RAY_NODE_START_TIMEOUT_S (default 180), and Ray's own (RAY_AUTH_MODE, RAY_AUTH_TOKEN, ...).
set -euo pipefail

log() { echo "worker-entrypoint: $*" >&2; }

ray_args=()
while (($#)) && [[ $1 != -- ]]; do
  ray_args+=("$1")
  shift
done
if (($# < 2)); then
  log "usage: worker-entrypoint.sh RAY_START_OPTIONS... -- COMMAND [ARGS...]"
  exit 2
fi
shift # the --
if [[ " ${ray_args[*]:-} " != *" --num-cpus"[=\ ]* ]]; then
  log "--num-cpus is required (what this container offers the Ray cluster)"
  exit 2
fi
: "${KEEL_RAY_ADDRESS:?set KEEL_RAY_ADDRESS to the Ray head, host:port}"
node_name="${RAY_NODE_NAME:-$HOSTNAME}"

cmd_pid=""
stopping=0
on_signal() {
  stopping=1
  if [[ -n $cmd_pid ]]; then
    log "stopping: $1 (Celery warm shutdown), then the Ray node"
    kill -TERM "$cmd_pid" 2>/dev/null || true
  fi
}
trap 'on_signal "$*"' TERM INT

stop_ray() {
  # `ray start --block` takes its raylet and workers down with it. While it is still dialling the head
  # it ignores SIGTERM, hence the KILL after a grace period (its reaper then cleans up).
  kill -TERM "$ray_pid" 2>/dev/null || true
  local waited=0
  while kill -0 "$ray_pid" 2>/dev/null; do
    ((waited++ < 30)) || kill -KILL "$ray_pid" 2>/dev/null || true
    sleep 1
  done
  wait "$ray_pid" 2>/dev/null || true
}

ray start --address="$KEEL_RAY_ADDRESS" --node-name="$node_name" "${ray_args[@]}" --block &
ray_pid=$!

# Ready = a driver started here connects and the cluster lists this node alive: what `keel worker`
# needs before it takes a job.
probe='
import os, sys, ray
ray.init(address=os.environ["KEEL_RAY_ADDRESS"], log_to_driver=False, logging_level="ERROR")
sys.exit(0 if any(n["Alive"] and n["NodeName"] == sys.argv[1] for n in ray.nodes()) else 1)
'
deadline=$((SECONDS + ${RAY_NODE_START_TIMEOUT_S:-180}))
while :; do
  # In the background, so that a signal interrupts the wait at once.
  timeout 60 python -c "$probe" "$node_name" >/dev/null 2>&1 &
  probe_pid=$!
  wait "$probe_pid" && break
  kill -TERM "$probe_pid" 2>/dev/null || true
  if ((stopping)); then
    stop_ray
    exit 143
  fi
  if ! kill -0 "$ray_pid" 2>/dev/null; then
    log "the Ray node exited before it joined $KEEL_RAY_ADDRESS"
    exit 1
  fi
  if ((SECONDS >= deadline)); then
    log "the Ray node did not join $KEEL_RAY_ADDRESS within ${RAY_NODE_START_TIMEOUT_S:-180}s"
    stop_ray
    exit 1
  fi
  log "waiting for the Ray node $node_name to join $KEEL_RAY_ADDRESS"
  sleep 2 &
  wait $! || true
done
if ((stopping)); then
  stop_ray
  exit 143
fi
log "Ray node $node_name joined $KEEL_RAY_ADDRESS; starting: $*"

"$@" &
cmd_pid=$!
set +e
while :; do
  unset done_pid
  wait -n -p done_pid "$cmd_pid" "$ray_pid"
  rc=$?
  [[ -n ${done_pid:-} ]] && break # else a signal interrupted the wait: its trap ran, keep waiting
done
if [[ $done_pid == "$cmd_pid" ]]; then
  log "$1 exited ($rc); stopping the Ray node"
  stop_ray
  ((stopping && rc == 0)) && exit 0
  exit $((rc == 0 ? 1 : rc)) # a worker that stops by itself must be restarted
fi
log "the Ray node exited ($rc); stopping $1"
kill -TERM "$cmd_pid" 2>/dev/null || true
while kill -0 "$cmd_pid" 2>/dev/null; do wait "$cmd_pid" || true; done
exit 1
