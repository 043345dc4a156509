"""PyTorch DDP on "ddpd" against DDP on Gloo (rank_ddp.py derives the comparison), at world 2, 3
and 4. The ranks run FSDP2's test too, in the same launch (ranks.models_at)."""

import pytest

from ranks import DDP_STEPS, models_at


@pytest.mark.parametrize("world", [2, 3, 4])
def test_ddp_matches_gloo(world):
    for o in models_at(world):
        assert o.result["transport"] == "shm", o.stderr
        ddp = o.result["ddp"]
        assert ddp["steps"] == DDP_STEPS
        assert ddp["failures"] == [], f"rank {o.rank}"
        # Within the bound; at world 2 the ratio is 0: bit-equal, parameters included.
        assert ddp["worst_ratio"] <= (0.0 if world == 2 else 1.0), f"rank {o.rank}: {ddp}"
