#!/usr/bin/env bash
# scripts/tokenize_text.py with a real tokenizer trained here, offline, by PyPI's tokenizers: the token
# file holds exactly the tokenizer's ids in the dtype the vocabulary needs, and bad input is
# refused naming the file.   tests/hf/tokenize_test.sh PYTHON
set -euo pipefail
python=$1
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A byte-level BPE tokenizer trained on a licence text, and a config.json whose vocab fits it.
"$python" - "$work" <<'PY'
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
work = sys.argv[1]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel()
tok.train(["/usr/share/common-licenses/GPL-3"], trainers.BpeTrainer(vocab_size=400, show_progress=False))
tok.save(f"{work}/tokenizer.json")
json.dump({"model_type": "llama", "vocab_size": 512}, open(f"{work}/config.json", "w"))
ids = tok.encode(open("/usr/share/common-licenses/GPL-2").read()).ids
json.dump(ids, open(f"{work}/expected.json", "w"))
PY

out=$("$python" "$repo/scripts/tokenize_text.py" "$work" /usr/share/common-licenses/GPL-2 "$work/gpl2.bin")
echo "$out"
grep -q -- "--data-dtype uint16" <<<"$out" || fail "uint16 not chosen for a 400-token vocabulary"
"$python" - "$work" <<'PY' || fail "the token file differs from the tokenizer's ids"
import json, sys
import numpy as np
work = sys.argv[1]
got = np.fromfile(f"{work}/gpl2.bin", dtype=np.uint16).tolist()
want = json.load(open(f"{work}/expected.json"))
assert got == want, (len(got), len(want))
print(f"tokenize_test: {len(got)} tokens equal the tokenizer's ids")
PY

# The sidecar describes the file: dtype, the tokenizer's vocabulary, the tokenizer.
"$python" - "$work" <<'PY' || fail "gpl2.bin.json does not describe the token file"
import json, sys
work = sys.argv[1]
meta = json.load(open(f"{work}/gpl2.bin.json"))
assert meta["dtype"] == "uint16" and meta["vocab_size"] == 400, meta
assert meta["tokenizer"] == f"{work}/tokenizer.json", meta
assert meta["tokens"] * 2 == __import__("os").path.getsize(f"{work}/gpl2.bin"), meta
PY

# A relative OUT, typed in another directory, is printed absolute: the workers read it elsewhere.
mkdir "$work/user"
rel=$(cd "$work/user" && "$python" "$repo/scripts/tokenize_text.py" "$work" /usr/share/common-licenses/GPL-2 rel.u16)
grep -qF -- "--data $work/user/rel.u16 --data-dtype uint16" <<<"$rel" || fail "OUT not printed absolute: $rel"

refused() {  # refused EXPECTED-TEXT ARGS...
  local expected=$1; shift
  local err
  if err=$("$python" "$repo/scripts/tokenize_text.py" "$@" 2>&1); then fail "accepted: $*"; fi
  grep -qF -- "$expected" <<<"$err" || fail "expected '$expected' in: $err"
}
: >"$work/empty.txt"
refused "$work/empty.txt: the text is empty" "$work" "$work/empty.txt" "$work/x.bin"
mkdir "$work/none"
refused "$work/none/tokenizer.json: no tokenizer" "$work/none" /usr/share/common-licenses/GPL-2 "$work/x.bin"
echo '{"vocab_size": 300}' >"$work/config.json"
refused "larger than the model's vocab_size (300)" "$work" /usr/share/common-licenses/GPL-2 "$work/x.bin"
# A vocabulary past 16 bits is written as int32.
echo '{"vocab_size": 70000}' >"$work/config.json"
"$python" "$repo/scripts/tokenize_text.py" "$work" /usr/share/common-licenses/GPL-2 "$work/big.bin" | grep -q -- "--data-dtype int32" ||
  fail "int32 not chosen for a 70000-token model vocabulary"
[ "$(stat -c %s "$work/big.bin")" -eq $((4 * $(stat -c %s "$work/gpl2.bin") / 2)) ] || fail "int32 file size"
echo "tokenize_test: passed"
