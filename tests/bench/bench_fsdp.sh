#!/usr/bin/env bash
# Benchmark (not a test): what each sharding design holds per rank, and what it costs in time.
# Part 1, the memory and time table (docs/fsdp.md): at world 2 and 4 on a Transformer of 8
# blocks (d_model 256), one row each for bucketed, bucketed + ZeRO-1, fsdp as one unit
# (--fsdp-units whole), fsdp per block (over shm, the default, and over Gloo, the peer's
# transport), and fsdp per block with --reshard-after-forward false.
# Columns, rank 0: peak full parameters and gradients alive during the last step (the strategy's
# own byte accounting), of it the parameters and the gradients, optimizer state, peak RSS, median
# step time; then `ddpctl plan memory`'s
# prediction for the same model. Beside them, the PyTorch FSDP2 peer (tests/bench/torch_fsdp2_ref.py:
# fully_shard per block, then the root, on the DDP peer's model of the same shape, CPU, gloo, one
# thread; on the checkout's .venv/bin/python, PyTorch 2.11) with reshard_after_forward 1 and 0:
# its step time, peak RSS and peak of full parameters alive, and ours/peer against fsdp per block
# and fsdp per block --reshard-after-forward false.
# Part 2, the performance goal: fsdp per block against bucketed on tests/bench/bench_ddp.sh's
# config at world 2, the median of ROUNDS alternating rounds.
# Usage: tests/bench/bench_fsdp.sh [STEPS] [ROUNDS]   (run scripts/build.sh first)
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-8}
rounds=${2:-3}
worker=build/bin/ddpd-worker
ddpctl=build/bin/ddpctl
python=$PWD/.venv/bin/python  # PyTorch 2.11 for the FSDP2 peer, installed by scripts/setup.sh
fsdp2_peer=tests/bench/torch_fsdp2_ref.py
export OPENBLAS_NUM_THREADS=1
[ -x "$python" ] || { echo "no $python: run scripts/setup.sh (it creates .venv with PyTorch)" >&2; exit 1; }
[ -x "$worker" ] || { echo "build first: bash scripts/build.sh" >&2; exit 1; }

run_json() {  # world, flags... → the rank-0 result JSON on one line
  local world=$1; shift
  bash scripts/launch-local.sh "$world" -- "$worker" run ddp --threads 1 --spread-every 0 \
    --warmup-steps 2 --json "$@"
}
figures() {  # result JSON → "peak_unsharded peak_params optimizer rss step_ms peak_grads"
  "$python" -c '
import json, sys
r = json.loads(sys.stdin.read().strip().splitlines()[-1])
m = r["memory"]
print(m["step_peak_unsharded_bytes"], m["step_peak_unsharded_parameter_bytes"],
      m["after_step"]["optimizer_state_bytes"], m["after_step"]["peak_bytes"],
      r["summary"]["median_step_seconds"] * 1e3, m["step_peak_unsharded_gradient_bytes"])'
}
mib() { "$python" -c "print(f'{$1 / 2**20:.1f}')"; }
ratio() { "$python" -c "print(f'{$1 / $2:.2f}')"; }
# peer_line world reshard_after_forward(0|1) → the FSDP2 peer's result line (settings and
# figures); one retry: its rendezvous port can be taken between pick and bind.
peer_line() {
  local line
  for _ in 1 2; do
    line=$(FSDP_RESHARD_AFTER_FORWARD=$2 timeout 600 "$python" "$fsdp2_peer" "$1" 256 1024 8 4 \
           10000 128 8 "$steps" 2>/dev/null | grep 'median_step_ms=') || true
    [ -n "$line" ] && { echo "$line"; return; }
  done
  echo "FSDP2 peer failed twice: FSDP_RESHARD_AFTER_FORWARD=$2 $python $fsdp2_peer $1 256 1024 8 4" \
    "10000 128 8 $steps" >&2
  exit 1
}
peer_figures() {  # peer line → "peak_unsharded_param_bytes peak_rss_mib step_ms"
  "$python" -c '
import sys
f = dict(kv.split("=", 1) for kv in sys.stdin.read().split() if "=" in kv)
print(f["peak_unsharded_param_bytes"], f["peak_rss_mb"], f["median_step_ms"])'
}

model=(--d-model 256 --d-ff 1024 --layers 8 --heads 4 --vocab 10000 --context 128 --batch 8
       --steps "$steps")
declare -A rows=(
  [bucketed]="--strategy bucketed"
  [bucketed+zero1]="--strategy bucketed --shard-optimizer"
  [fsdp-whole]="--strategy fsdp --fsdp-units whole"
  [fsdp-block]="--strategy fsdp"
  [fsdp-block-gloo]="--strategy fsdp --transport gloo"
  [fsdp-block-keep]="--strategy fsdp --reshard-after-forward false"
)
order=(bucketed bucketed+zero1 fsdp-whole fsdp-block fsdp-block-gloo fsdp-block-keep)
echo "model: d_model 256, d_ff 1024, 8 blocks, vocab 10000, context 128, global batch 8, $steps steps, $(nproc) cores"
for world in 2 4; do
  echo
  echo "world $world (rank 0; MiB; peak unsharded = full parameters + full gradients alive at once)"
  printf "%-18s %14s %14s %12s %12s %12s %10s\n" row "peak unsharded" "of it params" "of it grads" \
    "optimizer" "peak RSS" "step ms"
  declare -A our_params=() our_rss=() our_ms=()
  for row in "${order[@]}"; do
    # shellcheck disable=SC2086
    read -r unsharded params optimizer rss ms grads \
      <<<"$(run_json "$world" "${model[@]}" ${rows[$row]} | figures)"
    printf "%-18s %14s %14s %12s %12s %12s %10.1f\n" "$row" "$(mib "$unsharded")" "$(mib "$params")" \
      "$(mib "$grads")" "$(mib "$optimizer")" "$(mib "$rss")" "$ms"
    our_params[$row]=$params our_rss[$row]=$(mib "$rss") our_ms[$row]=$ms
  done
  echo "PyTorch FSDP2 peer, same model and steps (MiB; peak params = full parameters alive at once," \
    "max over ranks and timed steps; peak RSS max over ranks; ours above: rank 0)"
  printf "%-18s %14s %12s %10s   %-18s %s\n" row "peak params" "peak RSS" "step ms" "ours" \
    "ours/peer: params RSS step"
  for raf in 1 0; do
    line=$(peer_line "$world" "$raf")
    read -r p_params p_rss p_ms <<<"$(peer_figures <<<"$line")"
    ours_rows=(fsdp-block fsdp-block-gloo); [ "$raf" = 0 ] && ours_rows=(fsdp-block-keep)
    for ours_row in "${ours_rows[@]}"; do
      printf "%-18s %14s %12s %10s   %-18s %s %s %s\n" "fsdp2-peer-raf$raf" "$(mib "$p_params")" \
        "$p_rss" "$p_ms" "$ours_row" "$(ratio "${our_params[$ours_row]}" "$p_params")" \
        "$(ratio "${our_rss[$ours_row]}" "$p_rss")" "$(ratio "${our_ms[$ours_row]}" "$p_ms")"
    done
    echo "  peer: $line"
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
  read -r _ _ _ _ t _ <<<"$(run_json 2 "${config[@]}" --strategy bucketed | figures)"; bucketed+=("$t")
  read -r _ p _ _ t _ <<<"$(run_json 2 "${config[@]}" --strategy fsdp | figures)"; block+=("$t")
  echo "round $r: bucketed ${bucketed[-1]} ms, fsdp per block ${block[-1]} ms"
done
"$python" - "${bucketed[@]}" -- "${block[@]}" <<'EOF'
import statistics, sys
args = sys.argv[1:]
cut = args.index("--")
b, f = statistics.median(map(float, args[:cut])), statistics.median(map(float, args[cut + 1:]))
print(f"bucketed {b:.1f} ms, fsdp per block {f:.1f} ms: fsdp / bucketed = {f / b:.3f} (goal <= 1.10)")
EOF
read -r _ p _ _ _ _ <<<"$(run_json 2 "${config[@]}" --strategy fsdp | figures)"
read -r _ full _ _ _ _ <<<"$(run_json 2 "${config[@]}" --strategy bucketed | figures)"
echo "fsdp per block's peak full parameters: $(mib "$p") MiB of the model's $(mib "$full") MiB ($("$python" -c "print(f'{100 * $p / $full:.0f}')") %; goal <= 40 %)"
