"""A peer that dies, and a peer that is late past the timeout (rank_failures.py)."""

from ranks import run_ranks

from rank_failures import TIMEOUT_S


def test_a_killed_peer_fails_the_others_naming_it():
    outputs = run_ranks("rank_failures.py", 3, args=["kill"], check=False, timeout=120)
    assert outputs[2].returncode == -9, outputs[2].stderr
    for o in outputs[:2]:
        assert o.returncode == 0 and o.result, o.stderr
        assert "rank 2" in o.result["error"], o.result
        # The shm group's liveness checks (2 s of silence at most), not the 30 s timeout.
        assert o.result["seconds"] < TIMEOUT_S["kill"] / 3, o.result


def test_a_late_peer_fails_the_others_at_the_timeout():
    outputs = run_ranks("rank_failures.py", 2, args=["timeout"], check=False, timeout=120)
    o = outputs[0]
    assert o.returncode == 0 and o.result, o.stderr
    timeout = TIMEOUT_S["timeout"]
    assert f"timed out after {timeout * 1000} ms" in o.result["error"], o.result
    assert timeout * 0.9 <= o.result["seconds"] < timeout + 5, o.result
