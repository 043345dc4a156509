"""Runs a rank script as W real processes, the way a user's script runs: plain MASTER_ADDR,
MASTER_PORT, RANK and WORLD_SIZE (or under torchrun). Each rank prints one line
"RESULT <json>" (rank_common.emit); run_ranks returns them, or fails naming the rank that did
not finish, with its stderr."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULT_PREFIX = "RESULT "


@dataclass
class RankOutput:
    rank: int
    returncode: int
    result: dict  # the rank's RESULT line; {} when it printed none
    stderr: str


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _parse(rank, returncode, stdout, stderr):
    result = {}
    for line in stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX):])
    return RankOutput(rank, returncode, result, stderr)


def _rank_env(rank, world, port, extra):
    env = dict(os.environ)
    # One intra-op thread per rank: W ranks share this host's cores (2 on the test host).
    env.update(OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               RANK=str(rank), WORLD_SIZE=str(world), PYTHONUNBUFFERED="1")
    env.update(extra or {})
    return env


def _wait_all(procs, timeout):
    deadline = time.monotonic() + timeout
    for rank, proc in enumerate(procs):
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            for p in procs:
                p.wait()
            return rank
    return None


def run_ranks(script, world, args=(), env=None, timeout=300, prefix=(), check=True, during=None):
    """Starts `world` ranks of tests/<script> (each under `prefix`, a wrapper command, if any).
    check: every rank must exit 0 and print its RESULT line. during: called with the processes
    and the paths of their stdout files once all are started (test_failures.py kills one)."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        procs, files = [], []
        for rank in range(world):
            out = open(os.path.join(tmp, f"{rank}.out"), "w+")
            err = open(os.path.join(tmp, f"{rank}.err"), "w+")
            files.append((out, err))
            command = [*prefix, sys.executable, str(HERE / script), *map(str, args)]
            procs.append(subprocess.Popen(command, env=_rank_env(rank, world, port, env),
                                          stdout=out, stderr=err, text=True))
        if during is not None:
            try:
                during(procs, [f.name for f, _ in files])
            except BaseException:
                for p in procs:
                    p.kill()
                    p.wait()
                raise
        hung = _wait_all(procs, timeout)
        outputs = []
        for rank, (out, err) in enumerate(files):
            out.seek(0)
            err.seek(0)
            outputs.append(_parse(rank, procs[rank].returncode, out.read(), err.read()))
            out.close()
            err.close()
    if hung is not None:
        raise AssertionError(f"{script} at world {world}: rank {hung} did not finish within "
                             f"{timeout} s\n" + describe(outputs))
    if check:
        for o in outputs:
            if o.returncode != 0 or not o.result:
                raise AssertionError(f"{script} at world {world}: rank {o.rank} exited "
                                     f"{o.returncode}\n" + describe(outputs))
    return outputs


def describe(outputs):
    return "\n".join(f"--- rank {o.rank} (exit {o.returncode}) stderr:\n{o.stderr[-4000:]}"
                     for o in outputs)


# The steps of the model tests: few, as each step's comparison starts from equal parameters (world
# 2: bit-equal, so a difference would show at the first step and grow).
DDP_STEPS = 4
FSDP2_STEPS = 3


@lru_cache(maxsize=None)
def models_at(world):
    """rank_models.py's results at `world` (DDP, then FSDP2, in one launch), shared by
    test_ddp.py and test_fsdp2.py."""
    return tuple(run_ranks("rank_models.py", world, args=[DDP_STEPS, FSDP2_STEPS]))
