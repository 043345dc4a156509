#!/usr/bin/env bash
# Benchmark (not a test): the shared-memory transport against Gloo's TCP and the
# torch.distributed Gloo peer, in one run (docs/shm-transport.md).
#  1. Headline: all-reduce of 100 MB at world 2: busbw of ours over shm (private buffers, and
#     shm-shared: buffers every rank maps, --shared-buffers, as bucketed's gradients) and Gloo, the
#     peer's, the ratio to the peer, and the fraction of this host's memcpy and loopback
#     ceilings (measured by the comm job itself, every rank at once, with their spread).
#  2. The table: all-reduce at world 2, 4 and 6 for 1 MB-1 GB over gloo, shm and shm-shared, and the
#     peer at 100 MB for each world size.
#  3. DDP: tests/bench/bench_ddp.sh's config (2 ranks, bucketed 25 MB) over both transports
#     against the PyTorch DDP peer: median step time and exposed communication.
# The peers run on the checkout's .venv/bin/python (PyTorch 2.11, scripts/setup.sh).
# Usage: tests/bench/bench_transport.sh [ITERS] [DDP_STEPS]   (run scripts/build.sh first)
set -euo pipefail
cd "$(dirname "$0")/../.."
iters=${1:-10}
ddp_steps=${2:-20}
worker=build/bin/ddpd-worker
allreduce_peer=../shared/peers/torch_allreduce_ref.py
ddp_peer=../shared/peers/torch_ddp_ref.py
python=$PWD/.venv/bin/python  # PyTorch 2.11 for the peers, installed by scripts/setup.sh
export OPENBLAS_NUM_THREADS=1
[ -x "$python" ] || { echo "no $python: run scripts/setup.sh (it creates .venv with PyTorch)" >&2; exit 1; }
[ -x "$worker" ] || { echo "build first: bash scripts/build.sh" >&2; exit 1; }
[ -f "$allreduce_peer" ] || { echo "peer script not found at $allreduce_peer" >&2; exit 1; }

comm_json() {  # world transport|shm-shared sizes → the comm job's JSON (rank 0)
  local transport=$2 shared=()
  # shm-shared: buffers every rank maps, read in place (--shared-buffers), as bucketed's are
  [ "$transport" = shm-shared ] && { transport=shm; shared=(--shared-buffers); }
  bash scripts/launch-local.sh "$1" -- "$worker" run comm --collective all_reduce --sizes "$3" \
    --iters "$iters" --warmup 3 --transport "$transport" "${shared[@]}" --json | grep '^{'
}
peer_busbw() {  # world size_mb → GB/s
  timeout 600 "$python" "$allreduce_peer" "$1" "$2" "$iters" 2>/dev/null |
    sed -n 's/.*busbw \([0-9.]*\) GB\/s.*/\1/p' | tail -n1
}
field() {  # JSON python-expression → value (d: the result)
  "$python" -c "import json,sys; d=json.load(sys.stdin); print($1)"
}

echo "host: $(nproc) cores; all-reduce float32, $iters timed iterations after 3 warm-up"
torch_version=$("$python" -c 'import torch; print(torch.__version__)')
echo "peer: PyTorch $torch_version ($python)," \
  "torch.distributed backend gloo, 1 thread per rank ($allreduce_peer; DDP: $ddp_peer)"
echo
echo "== 1. all-reduce 100 MB at world 2"
shm=$(comm_json 2 shm 100MB)
shared=$(comm_json 2 shm-shared 100MB)
gloo=$(comm_json 2 gloo 100MB)
peer=$(peer_busbw 2 100)
row='d["rows"][0]'
shm_bw=$(field "$row[\"busbw_bytes_per_second\"]/1e9" <<<"$shm")
gloo_bw=$(field "$row[\"busbw_bytes_per_second\"]/1e9" <<<"$gloo")
printf "%-28s %10s %12s %12s %12s\n" run "busbw GB/s" "of memcpy" "of in place" "of loopback"
for transport in shm shm-shared gloo; do
  result=$shm; [ "$transport" = gloo ] && result=$gloo; [ "$transport" = shm-shared ] && result=$shared
  printf "%-28s %10.3f %11.1f%% %11.1f%% %11.1f%%\n" "ours, $transport" \
    "$(field "$row[\"busbw_bytes_per_second\"]/1e9" <<<"$result")" \
    "$(field "100*$row[\"fraction_of_memcpy\"]" <<<"$result")" \
    "$(field "100*$row[\"fraction_of_in_place\"]" <<<"$result")" \
    "$(field "100*$row[\"fraction_of_loopback\"]" <<<"$result")"
done
printf "%-28s %10.3f\n" "torch.distributed gloo (peer)" "$peer"
echo "ceilings (shm run, median and spread): $(field '"memcpy %.2f GB/s (%.2f-%.2f), in place %.2f GB/s (%.2f-%.2f), loopback %.2f GB/s (%.2f-%.2f)" % (d["memcpy_bytes_per_second"]/1e9, *[x/1e9 for x in d["memcpy_spread_bytes_per_second"]], d["in_place_bytes_per_second"]/1e9, *[x/1e9 for x in d["in_place_spread_bytes_per_second"]], d["loopback_bytes_per_second"]/1e9, *[x/1e9 for x in d["loopback_spread_bytes_per_second"]])' <<<"$shm")"
shared_bw=$(field "$row[\"busbw_bytes_per_second\"]/1e9" <<<"$shared")
echo "shm-shared / peer: $("$python" -c "print(f'{$shared_bw/$peer:.2f}')")   shm-shared / in place: $(field "f'{$row[\"fraction_of_in_place\"]:.2f}'" <<<"$shared")  (goal >= 0.50)"
echo "shm / peer: $("$python" -c "print(f'{$shm_bw/$peer:.2f}')")  (goal >= 3)   shm / memcpy: $(field "f'{$row[\"fraction_of_memcpy\"]:.2f}'" <<<"$shm")  (goal >= 0.40)"
echo
echo "== 2. all-reduce by world size and transport (busbw GB/s; peer at 100 MB)"
# "of own ceiling" at 100 MB: algbw against the in-place rate for shm, busbw against loopback for
# gloo (docs/metrics.md#comm-result: at world N, shm busbw may pass the in-place rate by 2(N-1)/N).
printf "%-6s %-10s %10s %10s %10s %10s %12s %15s\n" world transport 1MB 10MB 100MB 1GB "peer 100MB" \
  "of own ceiling"
for world in 2 4 6; do
  peer=$(peer_busbw "$world" 100)
  for transport in gloo shm shm-shared; do
    result=$(comm_json "$world" "$transport" 1MB,10MB,100MB,1GB)
    own=fraction_of_in_place; [ "$transport" = gloo ] && own=fraction_of_loopback
    printf "%-6s %-10s %s %12s %14.1f%%\n" "$world" "$transport" \
      "$(field "' '.join('%10.3f' % (r['busbw_bytes_per_second'] / 1e9) for r in d['rows'] if r['collective'] == 'all_reduce')" <<<"$result")" \
      "$peer" \
      "$(field "[100 * r['$own'] for r in d['rows'] if r['collective'] == 'all_reduce'][2]" <<<"$result")"
  done
done
echo
echo "== 3. DDP step on tests/bench/bench_ddp.sh's config, 2 ranks, bucketed 25 MB"
D=256 FF=1024 L=4 H=4 V=10000 CTX=128 BATCH=8 BUCKET=25
ddp=(run ddp --d-model $D --d-ff $FF --layers $L --heads $H --vocab $V --context $CTX
     --batch $BATCH --steps "$ddp_steps" --warmup-steps 2 --threads 1 --spread-every 0 --json
     --strategy bucketed --bucket-mb $BUCKET)
printf "%-28s %10s %12s %10s %10s\n" run "step ms" "exposed ms" "comm ms" "ours/peer"
peer_ms=$(DDP_EXPERT=0 timeout 600 "$python" "$ddp_peer" 2 $D $FF $L $H $V $CTX $BATCH "$ddp_steps" $BUCKET 2>/dev/null |
  sed -n 's/.*median_step_ms=\([0-9.]*\).*/\1/p')
for transport in gloo shm; do
  read -r step exposed comm <<<"$(bash scripts/launch-local.sh 2 -- "$worker" "${ddp[@]}" \
    --transport "$transport" | "$python" tests/bench/result_figures.py)"
  printf "%-28s %10s %12s %10s %10s\n" "ours, $transport" "$step" "$exposed" "$comm" \
    "$("$python" -c "print(f'{$step/$peer_ms:.3f}')")"
done
printf "%-28s %10s\n" "PyTorch DDP (peer, gloo)" "$peer_ms"
echo "DDP peer: PyTorch $torch_version DistributedDataParallel, backend gloo," \
  "threads 1, bucket_cap_mb $BUCKET, DDP defaults (DDP_EXPERT=0)"
