#!/usr/bin/env bash
# Benchmark (not a test): what each sharding design holds per rank, and what it costs in time.
# Part 1, the memory and time table (docs/fsdp.md): at world 2 and 4 on a Transformer of 8
# blocks (d_model 256), one row each for bucketed, bucketed + ZeRO-1, fsdp as one unit
# (--fsdp-units whole), fsdp per block, and fsdp per block with --reshard-after-forward false.
# Columns, rank 0: peak full parameters and gradients alive during the last step (the strategy's
# own byte accounting), optimizer state, peak RSS, median step time; then `ddpctl plan memory`'s
# prediction for the same model.
# Part 2, the performance goal: fsdp per block against bucketed on tests/bench/bench_ddp.sh's
# config at world 2, the median of ROUNDS alternating rounds.
# Usage: tests/bench/bench_fsdp.sh [STEPS] [ROUNDS]   (run scripts/build.sh first)
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-8}
rounds=${2:-3}
worker=build/bin/ddpd-worker
ddpctl=build/bin/ddpctl
export OPENBLAS_NUM_THREADS=1
[ -x "$worker" ] || { echo "build first: bash scripts/build.sh" >&2; exit 1; }

run_json() {  # world, flags... → the rank-0 result JSON on one line
  local world=$1; shift
  bash scripts/launch-local.sh "$world" -- "$worker" run ddp --threads 1 --spread-every 0 \
    --warmup-steps 2 --json "$@"
}
figures() {  # result JSON → "peak_unsharded peak_params optimizer rss step_ms"
  /usr/bin/python3 -c '
import json, sys
r = json.loads(sys.stdin.read().strip().splitlines()[-1])
m = r["memory"]
print(m["step_peak_unsharded_bytes"], m["step_peak_unsharded_parameter_bytes"],
      m["after_step"]["optimizer_state_bytes"], m["after_step"]["peak_bytes"],
      r["summary"]["median_step_seconds"] * 1e3)'
}
mib() { /usr/bin/python3 -c "print(f'{$1 / 2**20:.1f}')"; }

model=(--d-model 256 --d-ff 1024 --layers 8 --heads 4 --vocab 10000 --context 128 --batch 8
       --steps "$steps")
declare -A rows=(
  [bucketed]="--strategy bucketed"
  [bucketed+zero1]="--strategy bucketed --shard-optimizer"
  [fsdp-whole]="--strategy fsdp --fsdp-units whole"
  [fsdp-block]="--strategy fsdp"
  [fsdp-block-keep]="--strategy fsdp --reshard-after-forward false"
)
order=(bucketed bucketed+zero1 fsdp-whole fsdp-block fsdp-block-keep)
echo "model: d_model 256, d_ff 1024, 8 blocks, vocab 10000, context 128, global batch 8, $steps steps, $(nproc) cores"
for world in 2 4; do
  echo
  echo "world $world (rank 0; MiB; peak unsharded = full parameters + full gradients alive at once)"
  printf "%-18s %14s %14s %12s %12s %10s\n" row "peak unsharded" "of it params" "optimizer" "peak RSS" "step ms"
  for row in "${order[@]}"; do
    # shellcheck disable=SC2086
    read -r unsharded params optimizer rss ms <<<"$(run_json "$world" "${model[@]}" ${rows[$row]} | figures)"
    printf "%-18s %14s %14s %12s %12s %10.1f\n" "$row" "$(mib "$unsharded")" "$(mib "$params")" \
      "$(mib "$optimizer")" "$(mib "$rss")" "$ms"
  done
  echo "ddpctl plan memory's prediction:"
  "$ddpctl" plan memory --d-model 256 --d-ff 1024 --layers 8 --vocab 10000 --world "$world"
done

echo
D=256 FF=1024 L=4 H=4 V=10000 CTX=128 BATCH=8
config=(--d-model $D --d-ff $FF --layers $L --heads $H --vocab $V --context $CTX --batch $BATCH
        --steps 20)
echo "performance: bench_ddp.sh's config (d_model $D, $L blocks, vocab $V, context $CTX, batch $BATCH), world 2, 20 steps, median of $rounds alternating rounds"
declare -a bucketed block
for r in $(seq "$rounds"); do
  read -r _ _ _ _ t <<<"$(run_json 2 "${config[@]}" --strategy bucketed | figures)"; bucketed+=("$t")
  read -r _ p _ _ t <<<"$(run_json 2 "${config[@]}" --strategy fsdp | figures)"; block+=("$t")
  echo "round $r: bucketed ${bucketed[-1]} ms, fsdp per block ${block[-1]} ms"
done
/usr/bin/python3 - "${bucketed[@]}" -- "${block[@]}" <<'EOF'
import statistics, sys
args = sys.argv[1:]
cut = args.index("--")
b, f = statistics.median(map(float, args[:cut])), statistics.median(map(float, args[cut + 1:]))
print(f"bucketed {b:.1f} ms, fsdp per block {f:.1f} ms: fsdp / bucketed = {f / b:.3f} (goal <= 1.10)")
EOF
read -r _ p _ _ _ <<<"$(run_json 2 "${config[@]}" --strategy fsdp | figures)"
read -r _ full _ _ _ <<<"$(run_json 2 "${config[@]}" --strategy bucketed | figures)"
echo "fsdp per block's peak full parameters: $(mib "$p") MiB of the model's $(mib "$full") MiB ($(/usr/bin/python3 -c "print(f'{100 * $p / $full:.0f}')") %; goal <= 40 %)"
