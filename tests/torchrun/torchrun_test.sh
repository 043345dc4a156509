#!/usr/bin/env bash
# The real launcher: PyTorch 2.11's torchrun (.venv) starts ddpd-worker at world 2 with
# --standalone (its agent serves the store: TORCHELASTIC_USE_AGENT_STORE), the job succeeds, and
# its per-step losses and final parameters' spread equal those of scripts/launch-local.sh on the
# same flags: the same ranks, data and arithmetic, so equal to the last bit.
# Usage: torchrun_test.sh BIN_DIR SOURCE_DIR
set -uo pipefail
bin=$(cd "${1:?usage: torchrun_test.sh BIN_DIR SOURCE_DIR}" && pwd)
src=$(cd "${2:?}" && pwd)
torchrun=$src/.venv/bin/torchrun
python=$src/.venv/bin/python
[ -x "$torchrun" ] || { echo "FAIL: no $torchrun: run scripts/setup.sh"; exit 1; }
work=$(mktemp -d /tmp/ddpd-torchrun-XXXXXX)
trap 'rm -rf "$work"' EXIT
flags=(run ddp --model tiny --strategy bucketed --bucket-mb 1 --steps 6 --batch 4 --context 32
       --threads 1 --spread-every 3 --json)
export OPENBLAS_NUM_THREADS=1

"$torchrun" --standalone --nproc-per-node 2 --no-python "$bin/ddpd-worker" "${flags[@]}" \
  >"$work/torchrun.out" 2>"$work/torchrun.err"
rc=$?
[ "$rc" = 0 ] || { echo "FAIL: torchrun exited $rc"; tail -n 30 "$work/torchrun.err"; exit 1; }
bash "$src/scripts/launch-local.sh" 2 -- "$bin/ddpd-worker" "${flags[@]}" \
  >"$work/local.out" 2>"$work/local.err" ||
  { echo "FAIL: launch-local.sh"; tail -n 30 "$work/local.err"; exit 1; }

"$python" - "$work/torchrun.out" "$work/local.out" <<'PY'
import json, sys
def result(path):
    lines = [l for l in open(path) if l.lstrip().startswith("{")]
    if len(lines) != 1:
        sys.exit(f"FAIL: {path}: expected one JSON result line, got {len(lines)}")
    return json.loads(lines[0])
launched, local = result(sys.argv[1]), result(sys.argv[2])
for name, r in (("torchrun", launched), ("launch-local", local)):
    if r["state"] != "SUCCEEDED":
        sys.exit(f"FAIL: {name}: {r['state']}: {r.get('error')}")
a = [s["loss"] for s in launched["steps"]]
b = [s["loss"] for s in local["steps"]]
if len(a) != 6 or a != b:
    sys.exit(f"FAIL: losses differ:\n torchrun     {a}\n launch-local {b}")
print(f"torchrun and launch-local.sh: 6 equal losses, {a[0]:.6f} -> {a[-1]:.6f}")
PY
[ $? = 0 ] || exit 1
echo "torchrun: $("$torchrun" --help >/dev/null 2>&1 && "$python" -c 'import torch; print("PyTorch", torch.__version__)')"
echo PASS
