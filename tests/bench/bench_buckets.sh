#!/usr/bin/env bash
# Benchmark (not a test): the bucket advisor against reality. Measures the all-reduce with a comm
# job (including back-to-back asynchronous calls, as DDP issues buckets), then runs bucketed DDP
# on 2 ranks at several bucket sizes and prints the measured exposed communication beside
# - the advisor's closed form s/(n·w) + n·α (the recommended-size formula), and
# - its simulation: the model's tensors in backward order, packed into buckets (first 1 MiB),
#   ready as backward's compute proceeds (the run's own measured backward time), all-reduced one
#   at a time at the measured back-to-back cost.
# Usage: tests/bench/bench_buckets.sh [STEPS]   (run scripts/build.sh first)
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-12}
bin=build/bin
python=$PWD/.venv/bin/python  # the checkout's venv, created by scripts/setup.sh
export OPENBLAS_NUM_THREADS=1
[ -x "$python" ] || { echo "no $python: run scripts/setup.sh (it creates .venv)" >&2; exit 1; }
# ~44M parameters (176 MB of FP32 gradients): big enough for 1, 10, 100 and 1000 MB buckets.
shape=(--d-model 512 --d-ff 2048 --layers 8 --vocab 10000)
comm=$(mktemp)
bash scripts/launch-local.sh 2 -- $bin/ddpd-worker run comm --collective all_reduce \
  --sizes 64KB,256KB,1MB,4MB,16MB,64MB,256MB --warmup 2 --iters 5 --json > "$comm"
plan=($bin/ddpctl plan bucket --from-result "$comm" --model tiny "${shape[@]}")
"${plan[@]}" | head -2
# Per step, the rank that finished backward last: its exposed communication is the all-reduce
# tail alone (the other rank's also holds its wait for the slower rank, which is load imbalance,
# not communication), and its backward is the one the simulation needs. Medians after warm-up.
figures() {
  "$python" -c "
import json, statistics, sys
ranks = {}
for s in json.load(sys.stdin)['rank_steps']:
    ranks.setdefault(s['step'], []).append(s)
last = [max(r, key=lambda s: s['backward_seconds']) for step, r in sorted(ranks.items())][2:]
med = lambda key: statistics.median(s[key] for s in last) * 1e3
print(f\"{med('step_seconds'):.1f} {med('backward_seconds'):.1f} {med('exposed_comm_seconds'):.1f}\")"
}
printf "%10s %10s %12s %13s %12s %14s %12s\n" "bucket MB" "step ms" "backward ms" "exposed ms" \
  "formula ms" "simulated ms" "sim/meas"
for mb in 1 10 100 1000; do
  read -r step backward exposed <<<"$($bin/ddpctl local --workers 2 ddp "${shape[@]}" --heads 8 \
    --strategy bucketed --bucket-mb $mb --batch 4 --context 64 --steps "$steps" \
    --warmup-steps 2 --threads 1 --spread-every 0 --json 2>/dev/null | figures)"
  read -r formula simulated <<<"$("${plan[@]}" --backward-ms "$backward" --json |
    "$python" -c "
import json, sys
p = [c for c in json.load(sys.stdin)['curve'] if c['bucket_mb'] == float(sys.argv[1])][0]
print(f\"{p['overhead_seconds'] * 1e3:.1f} {p['simulated_exposed_seconds'] * 1e3:.1f}\")" $mb)"
  printf "%10s %10s %12s %13s %12s %14s %12s\n" $mb "$step" "$backward" "$exposed" "$formula" \
    "$simulated" "$("$python" -c "print(f'{$simulated / max($exposed, 1e-9):.2f}')")"
done
rm -f "$comm"
