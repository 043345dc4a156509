#!/usr/bin/env bash
# Benchmark (not a test): ddpd against PyTorch 2.11 DDP on a real shape, a SmolLM2-135M-shaped
# Llama (hidden 576, 30 layers, 9 heads, 3 KV heads, ff 1536, vocab 49152, tied, rope_theta
# 1e5), randomly initialised and saved by transformers. Both sides start from those weights:
# ddpd through --init-from, the peer (tests/bench/hf_ddp_ref.py) as transformers'
# LlamaForCausalLM under DistributedDataParallel, configured as an expert would (DDP_EXPERT=1:
# gradient_as_bucket_view=True, static_graph=True), gloo, one compute thread per rank, bucket 25
# MB, AdamW. 2 ranks, the same global batch and context, random tokens; ddpd bucketed.
# Prints step ms, tokens/s, peak RSS per rank and ours/peer, with the peer's versions. The runs
# alternate ROUNDS times so drift on a shared host hits both (ROUNDS 0: none).
# First it measures the import itself (--steps 0): how far rank 0's resident memory rises while
# the model is built and its weights read (memory.loading_peak_rss_rise_bytes), under fsdp at
# world 2 and 3, where each rank reads only its shards, and bucketed, whose share is the whole
# model, beside the bound the import keeps: the rank's share plus the largest tensor.
# Last, activation checkpointing at context AC_CONTEXT (1024) and global batch AC_BATCH (2), 2 ranks,
# AC_STEPS steps (4, 2 warm-up): ddpd bucketed with --activation-checkpointing none, block and
# selective (memory.step_peak_activation_bytes, docs/activation-checkpointing.md) beside the peer
# without and with transformers' gradient_checkpointing_enable(); ours/peer on the step and the
# peak RSS. ONLY_AC=1 runs only that table.
# Usage: tests/bench/bench_hf.sh [STEPS] [ROUNDS] [GLOBAL_BATCH] [CONTEXT]   (build first)
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-8}
rounds=${2:-2}
batch=${3:-4}
context=${4:-256}
python=$PWD/.venv/bin/python
worker=build/bin/ddpd-worker
export OPENBLAS_NUM_THREADS=1
[ -x "$python" ] || { echo "no $python: run scripts/setup.sh" >&2; exit 1; }
[ -x "$worker" ] || { echo "build first: bash scripts/build.sh" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
model=$tmp/smollm2-135m-shape

"$python" - "$model" <<'PY'
import sys, torch, transformers
config = transformers.LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
    num_attention_heads=9, num_key_value_heads=3, vocab_size=49152, tie_word_embeddings=True,
    rms_norm_eps=1e-5, rope_theta=100000.0, max_position_embeddings=8192)
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(config)
model.save_pretrained(sys.argv[1])
print(f"model: SmolLM2-135M shape, {sum(p.numel() for p in model.parameters())/1e6:.1f} M parameters")
PY

ac_ours() {  # MODE → "step_ms peak_rss_mb activation_mb tensor_mb" (rank 0)
  bash scripts/launch-local.sh 2 -- "$worker" run ddp --init-from "$model" --strategy bucketed \
    --batch "$ac_batch" --context "$ac_context" --steps "$ac_steps" --warmup-steps 2 --threads 1 \
    --spread-every 0 --activation-checkpointing "$1" --json >"$tmp/ac.json"
  "$python" - "$tmp/ac.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
m = r["memory"]
print(f"{r['summary']['median_step_seconds'] * 1e3:.0f} {m['after_step']['peak_bytes'] / 2**20:.0f} "
      f"{m['step_peak_activation_bytes'] / 2**20:.0f} {m['step_peak_tensor_bytes'] / 2**20:.0f}")
PY
}
ac_peer() {  # [--gradient-checkpointing] → "step_ms peak_rss_mb"; keeps the version line
  local out
  out=$(DDP_EXPERT=1 timeout 1800 "$python" tests/bench/hf_ddp_ref.py "$model" 2 "$ac_batch" \
        "$ac_context" "$ac_steps" 25 "$@")
  echo "$out" >"$tmp/ac_peer.line"
  sed -n 's/.*median_step_ms=\([0-9.]*\) tokens_per_s=[0-9]* peak_rss_mb=\([0-9]*\).*/\1 \2/p' <<<"$out"
}
activation_checkpointing() {
  echo "activation checkpointing: 2 ranks, global batch $ac_batch, context $ac_context," \
    "$ac_steps steps (2 warm-up), bucketed, attention naive (ours) / sdpa (transformers)"
  read -r n_ms n_rss n_act n_tensor < <(ac_ours none)
  read -r b_ms b_rss b_act b_tensor < <(ac_ours block)
  read -r s_ms s_rss s_act s_tensor < <(ac_ours selective)
  read -r pn_ms pn_rss < <(ac_peer)
  read -r pc_ms pc_rss < <(ac_peer --gradient-checkpointing)
  echo "peer: $(sed 's/ median_step_ms.*//' "$tmp/ac_peer.line")"
  ratio() { "$python" -c "print(f'{$1/$2:.2f}')"; }
  printf '| run | step ms | peak RSS MiB/rank | activation peak MiB | tensor peak MiB |\n'
  printf '| --- | ---: | ---: | ---: | ---: |\n'
  printf '| ddpd none | %s | %s | %s | %s |\n' "$n_ms" "$n_rss" "$n_act" "$n_tensor"
  printf '| ddpd block | %s | %s | %s | %s |\n' "$b_ms" "$b_rss" "$b_act" "$b_tensor"
  printf '| ddpd selective | %s | %s | %s | %s |\n' "$s_ms" "$s_rss" "$s_act" "$s_tensor"
  printf '| DDP + transformers | %s | %s | | |\n' "$pn_ms" "$pn_rss"
  printf '| DDP + transformers, gradient_checkpointing_enable() | %s | %s | | |\n' "$pc_ms" "$pc_rss"
  echo "block: activation peak none/block $(ratio "$n_act" "$b_act") (goal >= 3)," \
    "step block/none $(ratio "$b_ms" "$n_ms") (goal <= 1.35)"
  echo "selective: activation peak none/selective $(ratio "$n_act" "$s_act")," \
    "step selective/none $(ratio "$s_ms" "$n_ms")"
  echo "ours/peer with checkpointing: step $(ratio "$b_ms" "$pc_ms"), peak RSS $(ratio "$b_rss" "$pc_rss")"
  echo "ours/peer without: step $(ratio "$n_ms" "$pn_ms"), peak RSS $(ratio "$n_rss" "$pn_rss")"
}
ac_context=${AC_CONTEXT:-1024}
ac_batch=${AC_BATCH:-2}
ac_steps=${AC_STEPS:-4}
if [ "${ONLY_AC:-0}" = 1 ]; then activation_checkpointing; exit 0; fi

loading() {  # STRATEGY WORLD → "rise_mb model_mb largest_mb" (rank 0's rise)
  bash scripts/launch-local.sh "$2" -- "$worker" run ddp --init-from "$model" --strategy "$1" \
    --batch 6 --context "$context" --steps 0 --threads 1 --json >"$tmp/load.json"
  "$python" - "$tmp/load.json" "$model/model.safetensors" <<'PY'
import json, sys
from safetensors import safe_open
rise = json.load(open(sys.argv[1]))["memory"]["loading_peak_rss_rise_bytes"]
with safe_open(sys.argv[2], "pt") as f:
    sizes = [f.get_slice(k).get_shape() for k in f.keys()]
counts = [eval("*".join(map(str, s)) or "1") for s in sizes]
print(f"{rise / 2**20:.0f} {4 * sum(counts) / 2**20:.0f} {4 * max(counts) / 2**20:.0f}")
PY
}
printf '| import (--steps 0, float32) | world | rank 0 rise MiB | share + largest tensor MiB | whole model MiB |\n'
printf '| --- | ---: | ---: | ---: | ---: |\n'
for setting in "fsdp 2" "fsdp 3" "bucketed 2"; do
  read -r strategy world <<<"$setting"
  read -r rise model_mb largest_mb < <(loading "$strategy" "$world")
  share_mb=$model_mb  # replicated: every rank holds the whole model
  [ "$strategy" != fsdp ] || share_mb=$("$python" -c "print($model_mb / $world)")
  bound=$("$python" -c "print(round($share_mb + $largest_mb))")
  printf '| %s | %s | %s | %s | %s |\n' "$strategy" "$world" "$rise" "$bound" "$model_mb"
done

ours() {  # → "step_ms tokens_per_s peak_rss_mb"
  local out
  out=$(bash scripts/launch-local.sh 2 -- "$worker" run ddp --init-from "$model" --strategy bucketed \
        --batch "$batch" --context "$context" --steps "$steps" --warmup-steps 2 --threads 1 \
        --spread-every 0 --json)
  echo "$out" >"$tmp/ours.json"
  "$python" - "$tmp/ours.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s, m = r["summary"], r["memory"]["after_step"]
print(f"{s['median_step_seconds'] * 1e3:.1f} {s['tokens_per_second']:.0f} {m['peak_bytes'] / 2**20:.0f}")
PY
}
peer() {  # → "step_ms tokens_per_s peak_rss_mb" ; keeps the version line
  local out
  out=$(DDP_EXPERT=1 timeout 900 "$python" tests/bench/hf_ddp_ref.py "$model" 2 "$batch" "$context" "$steps" 25)
  echo "$out" >"$tmp/peer.line"
  sed -n 's/.*median_step_ms=\([0-9.]*\) tokens_per_s=\([0-9]*\) peak_rss_mb=\([0-9]*\).*/\1 \2 \3/p' <<<"$out"
}

our_ms=() peer_ms=()
for ((r = 1; r <= rounds; r++)); do
  read -r o_ms o_tps o_rss < <(ours)
  read -r p_ms p_tps p_rss < <(peer)
  echo "round $r: ddpd $o_ms ms ($o_tps tokens/s, $o_rss MB), peer $p_ms ms ($p_tps tokens/s, $p_rss MB)"
  our_ms+=("$o_ms") peer_ms+=("$p_ms")
done
median() { "$python" -c "import statistics, sys; print(statistics.median(map(float, sys.argv[1:])))" "$@"; }
[ "$rounds" -gt 0 ] || exit 0
om=$(median "${our_ms[@]}") pm=$(median "${peer_ms[@]}")
echo "peer: $(sed 's/ median_step_ms.*//' "$tmp/peer.line") (DistributedDataParallel, gloo, LlamaForCausalLM sdpa)"
echo "config: 2 ranks, global batch $batch, context $context, $steps steps (2 warm-up), $(nproc) cores"
printf '| | step ms | tokens/s | peak RSS MB/rank |\n| --- | ---: | ---: | ---: |\n'
printf '| ddpd bucketed | %.1f | %.0f | %s |\n' "$om" "$("$python" -c "print($batch*$context/($om/1e3))")" "$o_rss"
printf '| PyTorch DDP (expert) | %.1f | %.0f | %s |\n' "$pm" "$("$python" -c "print($batch*$context/($pm/1e3))")" "$p_rss"
echo "ours/peer: $("$python" -c "print(f'{$om/$pm:.3f}')") (goal <= 0.85)"
activation_checkpointing
