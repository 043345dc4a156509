#!/usr/bin/env bash
# Benchmark (not a test): every strategy of ddpd-worker and the Python PyTorch DDP peer on the
# same config in one run; prints median step time, exposed communication and ours/peer.
# Both sides run one compute thread per rank (the peer calls torch.set_num_threads(1);
# OPENBLAS_NUM_THREADS=1 keeps OpenBLAS from adding its own threads to either).
# Usage: tests/bench/bench_ddp.sh [STEPS]   (run scripts/build.sh first)
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-20}
D=256 FF=1024 L=4 H=4 V=10000 CTX=128 BATCH=8 BUCKET=25
peer=../shared/peers/torch_ddp_ref.py
worker=build/bin/ddpd-worker
export OPENBLAS_NUM_THREADS=1
[ -x "$worker" ] || { echo "build first: bash scripts/build.sh" >&2; exit 1; }
[ -f "$peer" ] || { echo "peer script not found at $peer" >&2; exit 1; }

common=(run ddp --d-model $D --d-ff $FF --layers $L --heads $H --vocab $V --context $CTX
        --batch $BATCH --steps "$steps" --warmup-steps 2 --threads 1 --spread-every 0 --json)

peer_ms() { timeout 300 /usr/bin/python3 "$peer" "$1" $D $FF $L $H $V $CTX $BATCH "$steps" $BUCKET |
            sed -n 's/.*median_step_ms=\([0-9.]*\).*/\1/p'; }
ours() {  # world, extra flags... → "median_step_ms exposed_ms comm_ms"
  local world=$1; shift
  local out
  if [ "$world" = 1 ]; then out=$("$worker" "${common[@]}" "$@")
  else out=$(bash scripts/launch-local.sh "$world" -- "$worker" "${common[@]}" "$@"); fi
  /usr/bin/python3 tests/bench/result_figures.py <<<"$out"
}

echo "config: d_model $D, d_ff $FF, layers $L, heads $H, vocab $V, context $CTX, global batch $BATCH, $steps steps (2 warm-up), $(nproc) cores"
peer1=$(peer_ms 1)
peer2=$(peer_ms 2)
printf "%-28s %10s %12s %10s %10s %12s\n" run "step ms" "exposed ms" "comm ms" "peer ms" "ours/peer"
row() { printf "%-28s %10s %12s %10s %10s %12s\n" "$1" "$2" "$3" "$4" "$5" \
        "$(/usr/bin/python3 -c "print(f'{$2/$5:.3f}')")"; }
read -r t e c <<<"$(ours 1)"; row "1 process" "$t" "$e" "$c" "$peer1"
for s in naive flat overlap bucketed fsdp; do
  read -r t e c <<<"$(ours 2 --strategy $s --bucket-mb $BUCKET)"; row "2 ranks $s" "$t" "$e" "$c" "$peer2"
done
read -r t e c <<<"$(ours 2 --strategy bucketed --bucket-mb $BUCKET --shard-optimizer)"
row "2 ranks bucketed+zero1" "$t" "$e" "$c" "$peer2"
echo "peer: PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') DistributedDataParallel (bucket_cap_mb $BUCKET) over gloo; 1 process: plain training"
