"""What "ddpd" does not serve fails at launch with a clear error and leaves the group working
(rank_errors.py)."""

from rank_errors import RECV_TIMEOUT_S
from ranks import run_ranks


def test_unserved_calls_fail_at_launch_naming_op_dtype_and_device():
    outputs = run_ranks("rank_errors.py", 2, timeout=120)
    for o in outputs:
        assert o.result["transport"] == "shm", o.stderr
        assert o.result["failures"] == [], f"rank {o.rank}"
        assert o.result["checks"] == 10
        # At launch, not after a peer's timeout (30 min by default): a few milliseconds.
        assert o.result["slowest_error_s"] < 1.0
    # A recv with no sender: the group's 2 s timeout, not the default 30 min, naming the peer.
    r0 = outputs[0].result
    assert "recv from rank 1" in r0["recv_error"], r0
    assert RECV_TIMEOUT_S * 0.9 <= r0["recv_seconds"] < RECV_TIMEOUT_S + 10, r0
