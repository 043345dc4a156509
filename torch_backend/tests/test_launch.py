"""How a "ddpd" group comes up: torchrun, the plain environment, a device-mapped backend string,
and the fall back to Gloo with its reason logged once."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ranks import HERE, run_ranks

FALLBACK_LINE = "ddpd: this process group runs on Gloo"


def test_torchrun_launch_uses_shm():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    # The torchrun a user types: the entry point beside the Python running the tests (.venv/bin).
    torchrun = Path(sys.executable).parent / "torchrun"
    run = subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node", "2", str(HERE / "rank_smoke.py")],
        env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-4000:]
    results = [line for line in run.stdout.splitlines() if "RESULT " in line]
    assert len(results) == 2, run.stdout
    for line in results:
        assert '"transport": "shm"' in line and '"correct": true' in line, line


def test_device_mapped_backend_string():
    for o in run_ranks("rank_smoke.py", 2, env={"SMOKE_BACKEND": "cpu:ddpd"}):
        assert o.result["transport"] == "shm" and o.result["correct"], o.stderr


def test_world_of_one():
    (o,) = run_ranks("rank_smoke.py", 1)
    assert o.result["transport"] == "shm" and o.result["correct"], o.stderr


def test_gloo_when_asked_logged_once_by_rank_zero():
    outputs = run_ranks("rank_smoke.py", 2, env={"DDPD_TORCH_TRANSPORT": "gloo"})
    for o in outputs:
        assert o.result["transport"] == "gloo" and o.result["correct"], o.stderr
    assert outputs[0].stderr.count(FALLBACK_LINE) == 1, outputs[0].stderr
    assert all(FALLBACK_LINE not in o.stderr for o in outputs[1:])


def test_unknown_transport_names_the_variable():
    outputs = run_ranks("rank_smoke.py", 1, env={"DDPD_TORCH_TRANSPORT": "nccl"}, check=False)
    assert outputs[0].returncode != 0
    assert "DDPD_TORCH_TRANSPORT='nccl' is not a transport" in outputs[0].stderr


def private_shm_prefix(tmp_path):
    """A wrapper that gives rank 1 a /dev/shm of its own (a container without ipc: host), as
    tests/multirank/transport_test.cpp's ShmUnusable does; None where that needs what we lack."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return None
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        return None
    wrapper = tmp_path / "private-shm.sh"
    wrapper.write_text(
        "#!/bin/sh\n"
        'case "$RANK" in 1) ;; *) exec "$@" ;; esac\n'
        "exec unshare --mount sh -c 'mount -t tmpfs -o size=64m none /dev/shm && "
        'exec "$0" "$@"\' "$@"\n')
    wrapper.chmod(0o755)
    return [str(wrapper)]


def test_auto_falls_back_to_gloo_when_a_rank_cannot_map_the_segment(tmp_path):
    prefix = private_shm_prefix(tmp_path)
    if prefix is None:
        pytest.skip("a private /dev/shm needs root and unshare --mount")
    outputs = run_ranks("rank_smoke.py", 2, prefix=prefix)
    for o in outputs:
        assert o.result["transport"] == "gloo" and o.result["correct"], o.stderr
    assert outputs[0].stderr.count(FALLBACK_LINE) == 1, outputs[0].stderr
    assert "rank 1 cannot open the segment" in outputs[0].stderr
    # Required shm: an error naming the reason, on every rank.
    outputs = run_ranks("rank_smoke.py", 2, prefix=prefix, check=False,
                        env={"DDPD_TORCH_TRANSPORT": "shm"})
    for o in outputs:
        assert o.returncode != 0
        assert "transport shm: rank 1 cannot open the segment" in o.stderr, o.stderr
