#!/usr/bin/env bash
# Benchmark (not a test): what --shard-replicas 1 costs a healthy sharded step (docs/healing.md).
# The bench config's model (d_model 256, 4 layers, vocab 10000, context 128; bench_config.sh) at
# world 3 and 4, global batch 12, standalone ranks over shared memory, one thread each: ROUNDS
# alternating rounds without and with --shard-replicas 1. Prints each round's median step ms and
# median optimizer ms (rank 0, after 2 warm-up steps), then per world the medians of the rounds,
# the ratio with/without of the step, and rank 0's optimizer state.
# STRATEGY=zero1 (the default): bucketed with --shard-optimizer. The replica costs a second AdamW
# step over 1/N of the parameters and that much state; no byte travels for it.
# STRATEGY=fsdp: the replica costs each reduce-scatter's copy of the predecessor's sum (over shm,
# inside the collective: 2/N of the gradients' bytes more per rank), and a second AdamW step over
# 1/N.
# PRESET=small (or another --model preset) runs that model instead of the bench config's shape.
# WORLDS="3" runs one world size only.
# Usage: [STRATEGY=zero1|fsdp] [PRESET=P] [WORLDS=...] tests/bench/bench_shard_replicas.sh [STEPS] [ROUNDS]
#        (run scripts/build.sh first)
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-12}
rounds=${2:-3}
source tests/bench/bench_config.sh
BATCH=12  # divisible by 3 and 4
shape=(--d-model $D --d-ff $FF --layers $L --heads $H --vocab $V)
case ${STRATEGY:-zero1} in
  zero1) sharding=(--strategy bucketed --bucket-mb "$BUCKET" --shard-optimizer) ;;
  fsdp) sharding=(--strategy fsdp) ;;
  *) echo "bench_shard_replicas: STRATEGY must be zero1 or fsdp" >&2; exit 2 ;;
esac
[ -n "${PRESET:-}" ] && shape=(--model "$PRESET")

run_figures() {  # world, flags... → "median_step_ms median_optimizer_ms state_bytes" of rank 0
  local world=$1; shift
  bash scripts/launch-local.sh "$world" -- "$worker" run ddp "${shape[@]}" \
    --context $CTX --batch $BATCH --steps "$steps" \
    --warmup-steps 2 --threads 1 --spread-every 0 "${sharding[@]}" --json "$@" 2>/dev/null |
    "$python" -c '
import json, sys
for line in sys.stdin.read().strip().splitlines():
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if "summary" in r:
        import statistics
        optimizer = [s["optimizer_seconds"] for s in r["steps"][2:]]
        print(r["summary"]["median_step_seconds"] * 1e3, statistics.median(optimizer) * 1e3,
              r["memory"]["after_step"]["optimizer_state_bytes"])
        break'
}
median() { "$python" -c 'import statistics, sys; print(f"{statistics.median(map(float, sys.argv[1:])):.2f}")' "$@"; }

echo "ddpd $(git rev-parse --short HEAD), $(nproc) cores; ${shape[*]}; ${sharding[*]};" \
  "steps $steps, rounds $rounds"
rows=()
for world in ${WORLDS:-3 4}; do
  without=() with=() opt_without=() opt_with=()
  for ((round = 1; round <= rounds; round++)); do
    read -r ms_without o_without state_without < <(run_figures "$world")
    read -r ms_with o_with state_with < <(run_figures "$world" --shard-replicas 1)
    printf 'world %d round %d: step %.1f / %.1f ms, optimizer %.2f / %.2f ms (without / with)\n' \
      "$world" "$round" "$ms_without" "$ms_with" "$o_without" "$o_with"
    without+=("$ms_without") with+=("$ms_with") opt_without+=("$o_without") opt_with+=("$o_with")
  done
  a=$(median "${without[@]}") b=$(median "${with[@]}")
  ratio=$("$python" -c "print(f'{$b / $a:.3f}')")
  mb=$("$python" -c "print(f'{$state_without / 1e6:.1f} / {$state_with / 1e6:.1f}')")
  rows+=("$(printf '| %d | %s | %s | %s | %s / %s | %s |' "$world" "$a" "$b" "$ratio" \
    "$(median "${opt_without[@]}")" "$(median "${opt_with[@]}")" "$mb")")
done
printf '| world | step ms without | with | with/without | optimizer ms without / with | optimizer state MB without / with |\n'
printf '| ---: | ---: | ---: | ---: | --- | --- |\n'
printf '%s\n' "${rows[@]}"
