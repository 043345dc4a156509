#!/usr/bin/env bash
# The docker-compose stack end to end: images from this build (deploy/docker/build-images.sh),
# `up` with 2 workers, a 2-rank DDP job and a comm job submitted with ddpctl, both SUCCEEDED,
# their series in the stack's Prometheus, a coordinator container restart that keeps the
# history (SQLite volume) and gets the workers back, a coordinator that crashes mid-job and is
# started again by compose's restart policy and adopts the job (it SUCCEEDS in its first
# attempt, with no restart), then `down -v`.
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

# The coordinator crashes mid-job (its process killed, as a crash would end it): compose's
# restart policy (unless-stopped) starts it again on the ddpd-db volume, the workers train on
# through the outage and register again, and the new coordinator adopts the job (an "adopted"
# incident): it SUCCEEDS in its first attempt, with no restart incident, and every step of both
# ranks is stored once.
job_json() { ctl show "$1" --json >"$work/$1.json" && cat "$work/$1.json"; }
job_eval() {  # JOB EXPRESSION: a Python expression over d, the job's `ddpctl show --json`
  job_json "$1" | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2"
}
# Rank 0's compute stretched 8 times (--inject slow: a sleep, the arithmetic unchanged), so the
# job outlives the outage by time, not work: the ranks mostly sleep, and the tests beside this one
# under ctest -j2 get the CPU (tests/e2e/adoption_test.cpp's kOutliving).
shape=(--world-size 2 --model tiny --batch 16 --context 64
       --data-text /usr/share/common-licenses/GPL-3 --transport auto
       --inject slow:rank=0,step=0,factor=8 --straggler-threshold 0)
# The long job: about 20 s of steps on this host (30 to 3,000 steps), timed by a 10-step probe
# of the same shape; the workers were back on it 6.4 s after the crash in the clean-clone suite.
probe=$(ctl submit ddp "${shape[@]}" --steps 10 | head -n1)
ctl watch "$probe" >/dev/null || fail "probe job $probe: $(ctl show "$probe")"
step_s=$(job_eval "$probe" 'sorted(s["step_seconds"] for s in d["rank_steps"])[len(d["rank_steps"]) // 2]')
long_steps=$(/usr/bin/python3 -c "import math; print(min(3000, max(30, math.ceil(20 / max($step_s, 1e-3)))))")
long_job=$(ctl submit ddp "${shape[@]}" --steps "$long_steps" | head -n1)
reported() { [ "$(job_eval "$long_job" 'len(d["rank_steps"])')" -ge 10 ]; }
wait_for 120 "$long_job to report 10 steps" reported
[ "$(job_eval "$long_job" 'd["state"]')" = RUNNING ] || fail "$long_job is not RUNNING before the crash"
step_at_crash=$(job_eval "$long_job" 'max(s["step"] for s in d["rank_steps"])')

cid=$("${compose[@]}" ps -q coordinator)
[ -n "$cid" ] || fail "no coordinator container"
restarts=$(docker inspect -f '{{.RestartCount}}' "$cid")
pid=$(docker inspect -f '{{.State.Pid}}' "$cid")
# The container's first process, seen from this host when the engine runs here (and it is ours
# to signal only if it is the coordinator: a remote engine's pid means nothing here).
is_ours() { [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" == ddpd-coordinator\ * ]]; }
t_crash=$(now)
if [ "${pid:-0}" -gt 0 ] && is_ours && kill -KILL "$pid" 2>/dev/null; then
  how="its process killed; the restart policy started it again"
  restarted() {
    [ "$(docker inspect -f '{{.State.Running}}' "$cid")" = true ] &&
      [ "$(docker inspect -f '{{.RestartCount}}' "$cid")" -gt "$restarts" ]
  }
  wait_for 30 "compose's restart policy to start the coordinator again" restarted
else
  # An engine on another host, or rootless: its process is not this shell's to kill. `docker
  # kill` counts as a stop, which the restart policy leaves alone, so compose starts it.
  how="docker kill, then docker-compose start"
  docker kill "$cid" >/dev/null || fail "docker kill $cid"
  docker wait "$cid" >/dev/null
  "${compose[@]}" start coordinator >"$work/start.log" 2>&1 ||
    fail "start coordinator: $(tail -n 5 "$work/start.log")"
fi
# Both workers register again with the rank they kept running: BUSY on the job, not ended.
came_back=""
back_on_job() { [ "$(ctl workers | grep -c " BUSY *$long_job ")" = 2 ] && came_back=1; }
back_or_ended() {
  back_on_job || [[ "$(job_eval "$long_job" 'd["state"]')" =~ ^(SUCCEEDED|FAILED|CANCELLED)$ ]]
}
wait_for 90 "both workers to register again on $long_job" back_or_ended
[ -n "$came_back" ] || fail "$long_job ended before its workers registered again (it crashed at step \
$step_at_crash of $long_steps): $(ctl show "$long_job")"
echo "coordinator crashed at step $step_at_crash of $long_job's $long_steps ($how); both workers \
back on the job in $(elapsed "$t_crash" "$(now)") s"
ctl watch "$long_job" >/dev/null || true
job_json "$long_job" >/dev/null || fail "show $long_job after the crash"
verdict=$(/usr/bin/python3 - "$work/$long_job.json" "$long_steps" <<'PY'
import collections, json, sys
d, steps = json.load(open(sys.argv[1])), int(sys.argv[2])
problems = []
if d["state"] != "SUCCEEDED":
    problems.append(f"state {d['state']} ({d.get('error', '')})")
if d["attempts"] != 1:
    problems.append(f"{d['attempts']} attempts, not 1")
restarts = [e["message"] for e in d["events"] if e["kind"] == "restart"]
if restarts:
    problems.append(f"restart incidents: {restarts}")
stored = collections.Counter((s["rank"], s["step"]) for s in d["rank_steps"])
twice = sorted(key for key, n in stored.items() if n > 1)
if twice:
    problems.append(f"{len(twice)} step reports stored more than once, e.g. {twice[0]}")
for rank in (0, 1):
    have = {step for (r, step) in stored if r == rank}
    if len(have) != steps:
        problems.append(f"rank {rank}: {len(have)} of {steps} steps stored")
adopted = sum(e["kind"] == "adopted" for e in d["events"])
if not adopted:
    problems.append("no adopted incident")
print("; ".join(problems) if problems else f"ok {adopted}")
PY
) || fail "reading $long_job's show --json"
[[ "$verdict" == ok* ]] || fail "$long_job after the coordinator's crash: $verdict"
echo "$long_job SUCCEEDED through the crash: 1 attempt, no restart, ${verdict#ok } 'adopted' \
incident(s), all $long_steps steps of both ranks stored once"
echo PASS
