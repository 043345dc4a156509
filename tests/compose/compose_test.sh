#!/usr/bin/env bash
# The docker-compose stack end to end: images from this build (deploy/docker/build-images.sh),
# `up` with 2 workers, a 2-rank DDP job and a comm job submitted with ddpctl, both SUCCEEDED,
# their series in the stack's Prometheus, a coordinator container restart that keeps the
# history (SQLite volume) and gets the workers back, then `down -v`.
# Starts dockerd if none answers (as the machine's root) and stops the one it started.
# Usage: compose_test.sh BIN_DIR   (exit 0 pass, 1 fail, 77 skip: no Docker engine here)
set -uo pipefail
source "$(dirname "$0")/../support/shell_helpers.sh"
bin=$(cd "${1:?usage: compose_test.sh BIN_DIR}" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
skip() { echo "SKIP: $*"; exit 77; }
command -v docker >/dev/null || skip "no docker client (scripts/setup.sh installs docker.io)"
command -v docker-compose >/dev/null || skip "no docker-compose (scripts/setup.sh installs it)"

work=$(mktemp -d /tmp/ddpd-compose-XXXXXX)
project="ddpdtest$$"
compose=(docker-compose -f "$repo/deploy/docker-compose.yml" -p "$project")
started_dockerd=""
export DDPD_TOKEN="compose-$$-$RANDOM" DDPD_PORT=$(( 40000 + $$ % 9000 ))
export DDPD_PROMETHEUS_PORT=$(( 49100 + $$ % 800 ))
ctl() { "$bin/ddpctl" --coordinator "127.0.0.1:$DDPD_PORT" "$@"; }

# On every exit (a pass, a failure, a skip, INT/TERM/HUP): `down -v` (containers, network,
# volume), then the dockerd this test started, if any. A second signal does not cut it short.
cleanup() {
  trap '' INT TERM HUP
  if ! "${compose[@]}" down -v >"$work/down.log" 2>&1 && [ -n "$stack_up" ]; then
    echo "WARNING: docker-compose down failed:"; tail -n 5 "$work/down.log"
  fi
  stop_started_dockerd
  finish_work "$work"
}
stack_up=""
on_exit cleanup
fail() {
  echo "FAIL: $*"
  "${compose[@]}" logs --tail 30 >"$work/compose.log" 2>&1; tail -n 60 "$work/compose.log"
  failed=1; exit 1
}

ensure_dockerd "$work/dockerd.log"  # cleanup stops the one it starts

t0=$(now)
DDPD_BIN_DIR="$bin" "$repo/deploy/docker/build-images.sh" >"$work/images.log" 2>&1 ||
  fail "building images: $(tail -n 5 "$work/images.log")"
t_images=$(now)
echo "image sizes: $(grep -E '^ddpd(-prometheus)?:latest ' "$work/images.log" | tr '\n' ';')"
stack_up=1
"${compose[@]}" up -d --scale worker=2 >"$work/up.log" 2>&1 || fail "up: $(tail -n 5 "$work/up.log")"
idle_workers() { [ "$(ctl workers | grep -c ' IDLE ')" = 2 ]; }
wait_for 90 "2 idle workers" idle_workers
t_up=$(now)
echo "images built in $(elapsed "$t0" "$t_images") s; stack up (coordinator, 2 workers, prometheus) with both workers registered in $(elapsed "$t_images" "$t_up") s"

# On the text the image carries for the demo (docs/data.md): the workers must find it.
# --transport auto: the workers' containers share the host's /dev/shm (ipc: host), so the
# ranks use shared memory.
ddp_job=$(ctl submit ddp --world-size 2 --model tiny --batch 4 --context 16 --steps 6 \
  --data-text /usr/share/common-licenses/GPL-3 --transport auto | head -n1)
ctl watch "$ddp_job" >/dev/null || fail "DDP job $ddp_job: $(ctl show "$ddp_job")"
comm_job=$(ctl submit comm --world-size 2 --sizes 64KB,1MB --warmup 1 --iters 3 --transport auto |
  head -n1)
ctl watch "$comm_job" >/dev/null || fail "comm job $comm_job: $(ctl show "$comm_job")"
for job in "$ddp_job" "$comm_job"; do
  transport=$(ctl show "$job" --json | /usr/bin/python3 -c \
    'import json,sys; d=json.load(sys.stdin); print(d.get("transport"), d.get("transport_note", ""))')
  [ "$transport" = "shm " ] || fail "job $job ran over '$transport', not shm across containers"
done
echo "jobs: $ddp_job (ddp) and $comm_job (comm) SUCCEEDED, both over shared memory (ipc: host)"

query() {  # PromQL → number of series
  curl -sf "http://127.0.0.1:$DDPD_PROMETHEUS_PORT/api/v1/query" --data-urlencode "query=$1" |
    /usr/bin/python3 -c "import json,sys; print(len(json.load(sys.stdin)['data']['result']))"
}
series_is() { [ "$(query "$1")" = "$2" ]; }
q="ddpd_step_duration_seconds_count{job_id=\"$ddp_job\",transport=\"shm\"} == 6"
wait_for 60 "Prometheus: $q from both ranks" series_is "$q" 2
q="ddpd_comm_busbw_bytes_per_second{job_id=\"$comm_job\",rank=\"0\",collective=\"all_reduce\"}"
wait_for 60 "Prometheus: $q at 2 sizes" series_is "$q" 2
q="ddpd_coordinator_jobs{state=\"SUCCEEDED\"} == 2"
wait_for 60 "Prometheus: $q" series_is "$q" 1
echo "prometheus: step-time series from both ranks, busbw at both sizes, 2 jobs SUCCEEDED"
# Targets come from the coordinator's registry: the two workers that run and the coordinator,
# all up, and no target down (a static list of ports would show the absent ones down).
wait_for 60 "Prometheus: 3 targets up" series_is "up == 1" 3
series_is 'up{component="worker"} == 1' 2 || fail "workers up: $(query 'up{component="worker"}')"
series_is "up == 0" 0 || fail "targets down: $(curl -s "http://127.0.0.1:$DDPD_PROMETHEUS_PORT/api/v1/query" --data-urlencode 'query=up == 0')"
echo "prometheus: 3 targets up (coordinator and the 2 workers, from the coordinator's registry), none down"

t_restart=$(now)
"${compose[@]}" restart coordinator >"$work/restart.log" 2>&1 || fail "restart coordinator"
wait_for 90 "workers to re-register after the restart" idle_workers
echo "coordinator restarted; workers back in $(elapsed "$t_restart" "$(now)") s"
for job in "$ddp_job" "$comm_job"; do
  ctl list | grep -q "^$job *SUCCEEDED" || fail "history lost $job: $(ctl list)"
done
steps=$(ctl show "$ddp_job" --json | /usr/bin/python3 -c "import json,sys; print(len(json.load(sys.stdin)['rank_steps']))")
[ "$steps" = 12 ] || fail "expected 12 rank step reports of $ddp_job after the restart, got $steps"
echo "history kept across the restart: both jobs SUCCEEDED, 12 rank step reports"
echo PASS
