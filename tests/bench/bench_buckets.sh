#!/usr/bin/env bash
# Benchmark (not a test): the bucket advisor against reality. Measures all-reduce alpha and
# beta with a comm job, then runs bucketed DDP on 2 ranks at several bucket sizes and prints the
# measured exposed communication beside the advisor's predicted overhead after backward.
# Usage: tests/bench/bench_buckets.sh [STEPS]   (run scripts/build.sh first)
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-8}
bin=build/bin
export OPENBLAS_NUM_THREADS=1
# ~44M parameters (176 MB of FP32 gradients): big enough for 1, 10, 100 and 1000 MB buckets.
model=(--d-model 512 --d-ff 2048 --layers 8 --heads 8 --vocab 10000)
params=$(/usr/bin/python3 -c 'd,f,l,v=512,2048,8,10000; print(2*v*d + l*(2*d+4*d*d+3*d*f) + d)')
comm=$(mktemp)
bash scripts/launch-local.sh 2 -- $bin/ddpd-worker run comm --sizes 1MB,4MB,16MB,64MB,256MB \
  --warmup 2 --iters 5 --json > "$comm"
advice=$($bin/ddpctl plan bucket --from-result "$comm" --params "$params" --json)
$bin/ddpctl plan bucket --from-result "$comm" --params "$params" | head -2
printf "%10s %14s %16s %14s\n" "bucket MB" "step ms" "exposed ms" "predicted ms"
for mb in 1 10 100 1000; do
  out=$(bash scripts/launch-local.sh 2 -- $bin/ddpd-worker run ddp "${model[@]}" --strategy bucketed \
        --bucket-mb $mb --batch 4 --context 64 --steps "$steps" --warmup-steps 2 --threads 1 \
        --spread-every 0 --json)
  read -r step exposed _ <<<"$(/usr/bin/python3 tests/bench/result_figures.py <<<"$out")"
  predicted=$(/usr/bin/python3 -c "
import json, math, sys
a = json.loads(sys.argv[1]); s, w, o = a['gradient_bytes'], a['beta_bytes_per_second'], a['alpha_seconds']
b = float(sys.argv[2]) * 2**20; n = max(1, math.ceil(s / b))
print(f'{(s / (n * w) + n * o) * 1e3:.1f}')" "$advice" $mb)
  printf "%10s %14s %16s %14s\n" $mb "$step" "$exposed" "$predicted"
done
rm -f "$comm"
