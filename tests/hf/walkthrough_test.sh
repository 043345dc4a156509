#!/usr/bin/env bash
# docs/models.md's walk-through, as a user types it, in a directory of its own with relative
# paths: a tiny Llama and a BPE tokenizer made offline, a text tokenized with its tokenizer, a
# fine-tune with `ddpctl local` that checkpoints and exports, then transformers loads the export
# with AutoTokenizer and generates; `ddpctl export` of the checkpoint carries the tokenizer too,
# and refuses to overwrite a directory without --force.
#   tests/hf/walkthrough_test.sh BIN PYTHON   (BIN: the folder of ddpctl and the daemons)
set -euo pipefail
bin=$1
python=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cd "$work"

# 1. A model directory and its tokenizer (a real one: huggingface-cli download ...).
"$python" "$repo/tests/hf/hf_reference.py" make llama_gqa_tied tiny-llama >/dev/null
"$python" "$repo/tests/hf/hf_reference.py" tokenizer tiny-llama /usr/share/common-licenses/GPL-3 \
  >/dev/null
# 2. A text in the model's own tokens.
out=$("$python" "$repo/scripts/tokenize_text.py" tiny-llama /usr/share/common-licenses/GPL-3 train.u16)
echo "$out"
grep -qF -- "--data $work/train.u16 --data-dtype uint16" <<<"$out" || fail "flags: $out"
# 3. Fine-tune from its weights on it, checkpoint and export.
"$bin/ddpctl" local --workers 2 ddp --init-from tiny-llama --data train.u16 --data-dtype uint16 \
  --steps 4 --batch 4 --context 32 --threads 1 --checkpoint-dir run --checkpoint-every 4 \
  --export-hf trained >"$work/local.log" 2>&1 || { cat "$work/local.log"; fail "ddpctl local"; }
for f in config.json model.safetensors tokenizer.json tokenizer_config.json generation_config.json; do
  [ -s "trained/$f" ] || fail "--export-hf wrote no $f: $(ls trained)"
done
# 4. Generate from the export.
"$python" - trained <<'PY' || fail "transformers cannot generate from the export"
import os, sys
os.environ["HF_HUB_OFFLINE"] = "1"
from transformers import AutoModelForCausalLM, AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
prompt = tokenizer("This License", return_tensors="pt")
ids = model.generate(**prompt, max_new_tokens=8, do_sample=False)
assert ids.shape[1] == prompt["input_ids"].shape[1] + 8, ids.shape
print("walkthrough: generated:", repr(tokenizer.decode(ids[0])))
PY
# 5. The offline export of the checkpoint carries the tokenizer too; it does not overwrite.
"$bin/ddpctl" export run --hf step4 >/dev/null
cmp trained/tokenizer.json step4/tokenizer.json || fail "ddpctl export: tokenizer.json differs"
cmp trained/model.safetensors step4/model.safetensors || fail "ddpctl export: weights differ"
if err=$("$bin/ddpctl" export run --hf step4 2>&1); then fail "export over step4 accepted"; fi
grep -qF -- "--hf: step4 is not empty (config.json, generation_config.json, model.safetensors, …): pass --force" <<<"$err" ||
  fail "refusal: $err"
"$bin/ddpctl" export run --hf step4 --force >/dev/null || fail "export --force"
echo "walkthrough_test: passed"
