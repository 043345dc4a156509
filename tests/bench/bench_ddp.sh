#!/usr/bin/env bash
# Benchmark (not a test): every strategy of ddpd-worker and the Python PyTorch DDP peer on the
# same config in one run; prints median step time, exposed communication and ours/peer.
# Both sides run one compute thread per rank (the peer calls torch.set_num_threads(1);
# OPENBLAS_NUM_THREADS=1 keeps OpenBLAS from adding its own threads to either).
# The headline rows (1 process, the independent pair, 2-rank bucketed) are the median of ROUNDS
# rounds that alternate ours and the peer's, so drift on this shared host hits both; the scaling
# efficiency is 1-process step / (N × N-rank step) at the same global batch, and the pair gives
# the same figure's ceiling without communication (pair_ms). Compressed gradients run against
# the peer's DDP with fp16_compress_hook / bf16_compress_hook (tests/bench/torch_ddp_hook_ref.py).
# The peer runs on the checkout's .venv/bin/python (PyTorch 2.11, scripts/setup.sh) twice at 2
# ranks: DDP as an expert configures it (DDP_EXPERT=1: gradient_as_bucket_view=True,
# static_graph=True), the headline and the other rows' reference, and DDP's defaults, its own row.
# Usage: tests/bench/bench_ddp.sh [STEPS] [ROUNDS]   (run scripts/build.sh first)
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-20}
rounds=${2:-3}
source tests/bench/bench_config.sh
shape=($D $FF $L $H $V $CTX $BATCH "$steps" $BUCKET)

# peer_ms world [expert: 0 DDP defaults | 1 DDP_EXPERT] → ms; one retry: the peer's rendezvous
# port can be taken between pick and bind
peer_ms() {
  local ms expert=${2:-0}
  for _ in 1 2; do
    ms=$(DDP_EXPERT=$expert timeout 300 "$python" "$peer" "$1" "${shape[@]}" 2>/dev/null |
         sed -n 's/.*median_step_ms=\([0-9.]*\).*/\1/p') || true
    [ -n "$ms" ] && { echo "$ms"; return; }
  done
  echo "peer failed twice: DDP_EXPERT=$expert $python $peer $1 ${shape[*]}" >&2; exit 1
}
peer_hook() {  # hook world → "ms" or "error: …"
  local out
  out=$(timeout 300 "$python" tests/bench/torch_ddp_hook_ref.py "$1" "$2" "${shape[@]}" 2>&1) || true
  if grep -q HOOK_ERROR <<<"$out"; then sed -n 's/.*HOOK_ERROR \(.*\)/error: \1/p' <<<"$out" | head -n1
  else sed -n 's/.*median_step_ms=\([0-9.]*\).*/\1/p' <<<"$out"; fi
}
ours() {  # world, extra flags... → "median_step_ms exposed_ms comm_ms"
  local world=$1; shift
  local out
  if [ "$world" = 1 ]; then out=$("$worker" "${common[@]}" "$@")
  else out=$(bash scripts/launch-local.sh "$world" -- "$worker" "${common[@]}" "$@"); fi
  "$python" tests/bench/result_figures.py <<<"$out"
}
# The no-communication ceiling at N=2: two 1-process runs of half the global batch each, started
# together, share the cores' caches and memory bandwidth as two ranks do and exchange nothing. A
# 2-rank step that matched this pair would lose to contention only; what it takes beyond the pair
# is the price of synchronising. pair_ms ours|peer → the mean of the two runs' median steps.
# Prints nothing when either run fails (the caller stops): half a pair is no ceiling.
pair_ms() {
  local half=$((BATCH / 2)) a b pid i
  if [ "$1" = ours ]; then
    local args=("${common[@]}")
    for i in "${!args[@]}"; do [ "${args[$i]}" = --batch ] && args[i + 1]=$half; done
    "$worker" "${args[@]}" >"$tmp/pair.a" & pid=$!
    "$worker" "${args[@]}" >"$tmp/pair.b" || return 0
    wait "$pid" || return 0
    a=$("$python" tests/bench/result_figures.py <"$tmp/pair.a" | cut -d' ' -f1)
    b=$("$python" tests/bench/result_figures.py <"$tmp/pair.b" | cut -d' ' -f1)
  else
    local shape_half=($D $FF $L $H $V $CTX $half "$steps" $BUCKET)
    timeout 300 "$python" "$peer" 1 "${shape_half[@]}" >"$tmp/pair.a" 2>"$tmp/pair.a.err" & pid=$!
    timeout 300 "$python" "$peer" 1 "${shape_half[@]}" >"$tmp/pair.b" 2>"$tmp/pair.b.err" ||
      { cat "$tmp/pair.b.err" >&2; return 0; }
    wait "$pid" || { cat "$tmp/pair.a.err" >&2; return 0; }
    a=$(sed -n 's/.*median_step_ms=\([0-9.]*\).*/\1/p' "$tmp/pair.a")
    b=$(sed -n 's/.*median_step_ms=\([0-9.]*\).*/\1/p' "$tmp/pair.b")
  fi
  [[ -n "$a" && -n "$b" ]] && "$python" -c "print(f'{($a + $b) / 2:.1f}')"
  return 0
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
median() { "$python" -c "import statistics, sys; print(statistics.median(map(float, sys.argv[1:])))" "$@"; }
ratio() { "$python" -c "print(f'{$1/$2:.3f}')"; }

torch_version=$("$python" -c 'import torch; print(torch.__version__)')
echo "config: d_model $D, d_ff $FF, layers $L, heads $H, vocab $V, context $CTX, global batch $BATCH, $steps steps (2 warm-up), $(nproc) cores"
echo "peer: PyTorch $torch_version ($python) DistributedDataParallel, backend gloo, threads 1, bucket_cap_mb $BUCKET;" \
  "expert: gradient_as_bucket_view=True static_graph=True (DDP_EXPERT=1); default: both False"
declare -a o1 p1 o2 p2 d2 e2 c2 op pp
for r in $(seq "$rounds"); do
  read -r t _ _ <<<"$(ours 1)"; o1+=("$t"); p1+=("$(peer_ms 1)")
  op+=("$(pair_ms ours)"); pp+=("$(pair_ms peer)")
  [[ -n "${op[-1]}" && -n "${pp[-1]}" ]] || { echo "the independent pair failed (round $r)" >&2; exit 1; }
  read -r t e c <<<"$(ours 2 --strategy bucketed --bucket-mb $BUCKET)"; o2+=("$t"); e2+=("$e"); c2+=("$c")
  p2+=("$(peer_ms 2 1)")
  d2+=("$(peer_ms 2 0)")
  echo "round $r: 1 process ours ${o1[-1]} peer ${p1[-1]}; independent pair ours ${op[-1]} peer ${pp[-1]}; 2 ranks bucketed ours ${o2[-1]} peer expert ${p2[-1]} default ${d2[-1]} ms"
done
ours1=$(median "${o1[@]}") peer1=$(median "${p1[@]}") ours2=$(median "${o2[@]}") peer2=$(median "${p2[@]}")
peer2_default=$(median "${d2[@]}")
echo "peer ms below: PyTorch DDP expert (gradient_as_bucket_view, static_graph) unless the row says otherwise"
printf "%-34s %10s %12s %10s %10s %12s\n" run "step ms" "exposed ms" "comm ms" "peer ms" "ours/peer"
row() { printf "%-34s %10s %12s %10s %10s %12s\n" "$1" "$2" "$3" "$4" "$5" "$(ratio "$2" "$5")"; }
row "1 process (median of $rounds)" "$ours1" "0" "0" "$peer1"
row "2 ranks bucketed (median)" "$ours2" "$(median "${e2[@]}")" "$(median "${c2[@]}")" "$peer2"
row "2 ranks bucketed vs DDP default" "$ours2" "$(median "${e2[@]}")" "$(median "${c2[@]}")" "$peer2_default"
for s in naive flat overlap fsdp; do
  read -r t e c <<<"$(ours 2 --strategy $s --bucket-mb $BUCKET)"; row "2 ranks $s" "$t" "$e" "$c" "$peer2"
done
read -r t e c <<<"$(ours 2 --strategy bucketed --bucket-mb $BUCKET --shard-optimizer)"
row "2 ranks bucketed+zero1" "$t" "$e" "$c" "$peer2"
for wire in fp16 bf16; do
  read -r t e c <<<"$(ours 2 --strategy bucketed --bucket-mb $BUCKET --grad-compression $wire)"
  theirs=$(peer_hook $wire 2)
  if [[ "$theirs" == error:* ]]; then
    echo "peer ${wire}_compress_hook: $theirs; compared with the expert peer without a hook"
    row "2 ranks bucketed $wire" "$t" "$e" "$c" "$peer2"
  else
    row "2 ranks bucketed $wire (peer hook)" "$t" "$e" "$c" "$theirs"
  fi
done
ours_pair=$(median "${op[@]}") peer_pair=$(median "${pp[@]}")
row "2 independent processes, batch $((BATCH / 2)) each" "$ours_pair" "0" "0" "$peer_pair"
echo "no-communication ceiling at N=2 (1-process step / (2 x independent-pair step)): ours $("$python" -c "print(f'{$ours1/(2*$ours_pair):.3f}')"), peer $("$python" -c "print(f'{$peer1/(2*$peer_pair):.3f}')");" \
  "2-rank step over the pair: ours $(ratio "$ours2" "$ours_pair"), peer expert $(ratio "$peer2" "$peer_pair")"
echo "scaling efficiency at N=2 (1-process step / (2 x 2-rank step)): ours $("$python" -c "print(f'{$ours1/(2*$ours2):.3f}')"), peer expert $("$python" -c "print(f'{$peer1/(2*$peer2):.3f}')"), peer default $("$python" -c "print(f'{$peer1/(2*$peer2_default):.3f}')")"
echo "peer: PyTorch $torch_version DistributedDataParallel (bucket_cap_mb $BUCKET, backend gloo, threads 1;" \
  "expert rows gradient_as_bucket_view=True static_graph=True, default row both False);" \
  "peer hook rows: DDP defaults + the hook; 1 process: plain training"
