"""A peer SIGKILLed mid-collective, and a peer that is late past the timeout (rank_failures.py)."""

import signal
import time
from pathlib import Path

from ranks import run_ranks

from rank_failures import LOOPING, TIMEOUT_S

KILLED = 1  # a middle rank of 3: neither the store's host nor the last


def kill_when_looping(victim, kills):
    """run_ranks' `during`: SIGKILLs rank `victim` once every rank is in its all-reduce loop, and
    records (wall-clock time of the kill, pid) in `kills`."""

    def during(procs, stdout_paths):
        deadline = time.monotonic() + 120
        while not all(LOOPING in Path(p).read_text() for p in stdout_paths):
            assert time.monotonic() < deadline, "the ranks never reached their all-reduce loop"
            assert all(p.poll() is None for p in procs), "a rank exited before the kill"
            time.sleep(0.02)
        time.sleep(0.3)  # a few more all-reduces: the kill lands inside one
        kills.append((time.time(), procs[victim].pid))
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait()  # reaped at once, as torchrun's agent does: its pid is gone

    return during


def test_a_peer_killed_mid_collective_fails_the_others_naming_it():
    kills = []
    outputs = run_ranks("rank_failures.py", 3, args=["kill"], check=False, timeout=120,
                        during=kill_when_looping(KILLED, kills))
    assert outputs[KILLED].returncode == -signal.SIGKILL, outputs[KILLED].stderr
    for o in outputs:
        if o.rank == KILLED:
            continue
        assert o.returncode == 0 and o.result, o.stderr
        assert o.result["all_reduces"] >= 1, o.result
        # The shm group's liveness checks name the rank, its pid and the cause: the pid is gone,
        # or (should the survivor not run for 2 s) the rank's heartbeat stopped.
        error = o.result["error"]
        assert f"rank {KILLED} (pid {kills[0][1]})" in error, o.result
        assert "is gone (its process exited)" in error or "stopped its heartbeat" in error, error
        # Within init_process_group's timeout (0.1 s measured on the 2-core host).
        detected = o.result["failed_at"] - kills[0][0]
        print(f"rank {o.rank}: failed {detected:.2f} s after the kill: {o.result['error']}")
        assert 0 < detected < TIMEOUT_S["kill"], o.result


def test_a_late_peer_fails_the_others_at_the_timeout():
    outputs = run_ranks("rank_failures.py", 2, args=["timeout"], check=False, timeout=120)
    o = outputs[0]
    assert o.returncode == 0 and o.result, o.stderr
    timeout = TIMEOUT_S["timeout"]
    assert f"timed out after {timeout * 1000} ms" in o.result["error"], o.result
    assert timeout * 0.9 <= o.result["seconds"] < timeout + 5, o.result
