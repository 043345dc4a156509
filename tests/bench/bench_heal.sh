#!/usr/bin/env bash
# Benchmark (not a test): healing beside the checkpoint restart on the same job
# (docs/healing.md). A coordinator and four workers on loopback; the job runs at world 3, so one
# worker is idle; rank 1's process is SIGKILLed once the job has reported step KILL_AT. The same
# job twice, with checkpoints every 5 steps: healed (--max-restarts 1) and restarted
# (--max-restarts 1 --no-heal). For each model (tiny, small) it prints:
#   recover_s     from the SIGKILL until `ddpctl show` has every rank's report of a step trained
#                 after it (polled every 0.05 s, both paths alike), less the stall of a
#                 checkpoint saved right after that step (it delays the step's reports)
#                 (a line above it, for a heal: when the ranks trained again, from the heal
#                 incident's time and rank 0's regroup and transfer seconds)
#   twice         steps trained twice: from the one it resumed at to the last one started before
#                 the kill (the steps reported by then, plus the one in flight)
#   ckpt_read_MB  checkpoint bytes read to resume (the heal reads none)
#   step_ms       the healthy steps' median step time, uninterrupted, with --max-restarts 1
#                 (healing armed: the optimizer steps after the whole synchronisation) and 0
# ZERO1=1: every job runs ZeRO-1 (--shard-optimizer); the healed one and the armed healthy one
# keep --shard-replicas 1, which a heal needs, and the restarted and unarmed ones do not.
# FSDP=1: every job runs fsdp; the healed one and the armed healthy one keep --shard-replicas 1
# (each rank's shards copied on the next), which a heal needs. Not with ZERO1=1 (fsdp shards its
# optimizer state itself).
# SHRINK=1: three workers, none idle, and --min-world-size 2; rank 1's worker daemon is SIGKILLed
# (its rank process dies with it), so the heal is a shrink in place to 2 ranks and the restart
# resumes at world 2; the worker is started again after each run.
# MODELS="tiny" (or "small") runs those models only.
# Usage: [ZERO1=1 | FSDP=1 | SHRINK=1] [MODELS=...] tests/bench/bench_heal.sh [STEPS_TINY] [STEPS_SMALL]
#        (run scripts/build.sh first)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$PWD/build/bin
for b in ddpd-coordinator ddpd-worker ddpctl; do
  [ -x "$bin/$b" ] || { echo "build first: bash scripts/build.sh" >&2; exit 1; }
done
command -v jq >/dev/null || { echo "bench_heal.sh needs jq" >&2; exit 1; }
steps_tiny=${1:-60}
steps_small=${2:-16}
sharding=() replicas=()
if [ "${ZERO1:-0}" = 1 ]; then sharding=(--shard-optimizer) replicas=(--shard-replicas 1); fi
strategy=bucketed
if [ "${FSDP:-0}" = 1 ]; then
  if [ "${ZERO1:-0}" = 1 ]; then
    echo "bench_heal.sh: FSDP=1 goes without ZERO1=1" >&2
    exit 2
  fi
  strategy=fsdp replicas=(--shard-replicas 1)
fi
shrink=${SHRINK:-0} workers=4 shrinking=()
if [ "$shrink" = 1 ]; then workers=3 shrinking=(--min-world-size 2); fi
work=$(mktemp -d /tmp/ddpd-bench-heal.XXXXXX)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export DDPD_TOKEN=bench-heal
pids=()
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  pkill -f -- "--coordinator 127.0.0.1:$port " 2>/dev/null || true  # workers started again
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$bin/ddpd-coordinator" --listen "127.0.0.1:$port" --db "$work/db" --worker-timeout 3 \
  >"$work/coordinator.log" 2>&1 &
pids+=($!)
# Worker daemons are found by their id (worker_pid), since one started again inside faulted()'s
# subshell is not in this shell's pids.
start_worker() {  # index
  "$bin/ddpd-worker" serve --coordinator "127.0.0.1:$port" --worker-id "bench-w$1" \
    --heartbeat 0.5 >>"$work/worker$1.log" 2>&1 &
}
worker_pid() { pgrep -f -- "--worker-id bench-w$1 " | head -n1; }
for i in $(seq 0 $((workers - 1))); do start_worker "$i"; done
ctl() { "$bin/ddpctl" --coordinator "127.0.0.1:$port" "$@"; }
wait_idle() {
  for _ in $(seq 100); do
    [ "$(ctl workers 2>/dev/null | grep -c ' IDLE ')" = "$workers" ] && return
    sleep 0.2
  done
}
wait_idle

show() { ctl show "$1" --json; }
wait_end() {  # job → its final show --json
  local state
  while :; do
    state=$(show "$1" | jq -r .state)
    case $state in RUNNING | PENDING) sleep 0.3 ;; *) show "$1"; return ;; esac
  done
}
max_step() { show "$1" | jq '[.rank_steps[].step] | max // -1'; }
# The process running rank R of JOB: the one rank process (named ddpd-rank) of the rank's worker
# daemon, which may also keep its next one started and waiting.
rank_pid() {
  local worker index
  worker=$(show "$1" | jq -r ".workers[$2]")
  index=${worker##*-w}
  pgrep -P "$(worker_pid "$index")" -x ddpd-rank | head -n1
}

submit() {  # model steps dir extra... → job id
  local model=$1 steps=$2 dir=$3
  shift 3
  ctl submit ddp --world-size 3 --model "$model" --batch 6 --context 16 --threads 1 \
    --steps "$steps" --strategy "$strategy" --checkpoint-dir "$dir" --checkpoint-every 5 \
    --spread-every 0 ${sharding[@]+"${sharding[@]}"} ${shrinking[@]+"${shrinking[@]}"} "$@" |
    head -n1
}

# Whether JOB's ranks have all completed a step since the fault: the `healed` incident, or a
# step report of the restarted attempt from each of its ranks (2 of them where it shrank).
recovered() {
  show "$1" | jq -e --argjson ranks $((3 - shrink)) \
    '([.events[] | select(.kind == "healed")] | length) > 0
     or ([.rank_steps[] | select(.attempt == 1)] | length) >= $ranks' >/dev/null
}

# The fault: rank 1's process, or under SHRINK=1 its worker daemon (started again afterwards).
kill_rank1() {  # job → the worker index killed (-1: its process only)
  if [ "$shrink" = 1 ]; then
    local worker index
    worker=$(show "$1" | jq -r ".workers[1]")
    index=${worker##*-w}
    kill -9 "$(worker_pid "$index")"
    echo "$index"
  else
    kill -9 "$(rank_pid "$1" 1)"
    echo -1
  fi
}

# One faulted run: prints "recover_s twice ckpt_read_MB".
faulted() {  # model steps kill_at extra...
  local model=$1 steps=$2 kill_at=$3 dir="$work/ckpt-$RANDOM"
  shift 3
  local job killed_at recover reported shown resumed read=0 killed stall
  job=$(submit "$model" "$steps" "$dir" "$@")
  until [ "$(max_step "$job")" -ge "$kill_at" ]; do sleep 0.1; done
  killed=$(kill_rank1 "$job")
  killed_at=$(date +%s.%N)
  reported=$(max_step "$job")
  until recovered "$job"; do sleep 0.05; done
  recover=$(jq -n "$(date +%s.%N) - $killed_at")
  shown=$(wait_end "$job")
  [ "$(jq -r .state <<<"$shown")" = SUCCEEDED ] || { echo "job $job did not succeed" >&2; exit 1; }
  if [ "$killed" -ge 0 ]; then
    start_worker "$killed"
    wait_idle
  fi
  if [ "$(jq '[.events[] | select(.kind == "heal")] | length' <<<"$shown")" = 1 ]; then
    resumed=$(jq '.heals[0].resumed_step' <<<"$shown")
    jq -r '.heals[0] | "  (rank 0: regroup \(.regroup_seconds) s, state \(.state_bytes / 1e6) MB in \(.transfer_seconds) s from rank \(.source_rank))"' <<<"$shown" >&2
    # Rank 0 regroups from its failure, which comes at its next launch once the heal reaches it.
    jq -r --argjson killed "$killed_at" '
      def cs: . * 100 | round / 100;
      ([.events[] | select(.kind == "heal")][0].unix_time - $killed) as $seen
      | .heals[0] | "  (training again \($seen + .regroup_seconds + .transfer_seconds | cs) s after the kill: the heal sent after \($seen | cs) s, then rank 0 regrouped and moved the state)"' \
      <<<"$shown" >&2
  else
    resumed=$(jq -r '[.events[] | select(.kind == "restart")][0].message' <<<"$shown" |
      sed -n 's/.*resuming step-0*\([0-9][0-9]*\).*/\1/p')
    resumed=${resumed:-0}
    [ "$resumed" -gt 0 ] && read=$(du -sb "$dir/step-$(printf %06d "$resumed")" | cut -f1)
  fi
  # A checkpoint saved right after the first step it trained delays that step's reports: its
  # stall is the job's, not the recovery's.
  stall=$(jq --argjson s "$resumed" \
    '[.rank_steps[] | select(.step == $s) | .checkpoint_seconds] | max // 0' <<<"$shown")
  if [ "$(jq -n "$stall > 0")" = true ]; then
    echo "  (less the checkpoint after step $resumed: $stall s)" >&2
    recover=$(jq -n "$recover - $stall")
  fi
  printf '%.2f %d %.1f\n' "$recover" "$((reported + 2 - resumed))" "$(jq -n "$read / 1e6")"
}

median_step_ms() {  # model steps extra...
  local job
  job=$(submit "$1" "$2" "$work/ckpt-$RANDOM" "${@:3}")
  wait_end "$job" | jq '.summary.median_step_seconds * 1000'
}

printf '%-6s %-8s %10s %6s %13s\n' model path recover_s twice ckpt_read_MB
for model in ${MODELS:-tiny small}; do
  steps=$steps_tiny
  [ $model = small ] && steps=$steps_small
  kill_at=$((steps / 2))
  read -r r t c < <(faulted $model "$steps" "$kill_at" --max-restarts 1 ${replicas[@]+"${replicas[@]}"})
  printf '%-6s %-8s %10s %6s %13s\n' $model heal "$r" "$t" "$c"
  read -r r t c < <(faulted $model "$steps" "$kill_at" --max-restarts 1 --no-heal)
  printf '%-6s %-8s %10s %6s %13s\n' $model restart "$r" "$t" "$c"
  armed=$(median_step_ms $model "$steps" --max-restarts 1 ${replicas[@]+"${replicas[@]}"})
  plain=$(median_step_ms $model "$steps" --max-restarts 0)
  printf '%-6s healthy step: %.1f ms with healing armed, %.1f ms without (%+.1f %%)\n' \
    $model "$armed" "$plain" "$(jq -n "($armed / $plain - 1) * 100")"
done
