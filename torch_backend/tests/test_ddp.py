"""PyTorch DDP on "ddpd" against DDP on Gloo (rank_ddp.py derives the comparison)."""

import pytest

from ranks import run_ranks

STEPS = 5


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_matches_gloo(world):
    outputs = run_ranks("rank_ddp.py", world, args=[STEPS])
    for o in outputs:
        assert o.result["transport"] == "shm", o.stderr
        assert o.result["steps"] == STEPS
        assert o.result["failures"] == [], f"rank {o.rank}"
        # Within the bound (at world 2 the ratio is 0: bit-equal).
        assert o.result["worst_ratio"] <= 1.0
