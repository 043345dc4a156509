"""FSDP2 (fully_shard) on "ddpd" against FSDP2 on Gloo (rank_fsdp2.py derives the comparison),
at world 2, 3 and 4: all_gather_into_tensor and reduce_scatter_tensor under a real FSDP2 step."""

import pytest

from ranks import FSDP2_STEPS, models_at


@pytest.mark.parametrize("world", [2, 3, 4])
def test_fsdp2_matches_gloo(world):
    for o in models_at(world):
        assert o.result["transport"] == "shm", o.stderr
        fsdp2 = o.result["fsdp2"]
        assert fsdp2["steps"] == FSDP2_STEPS
        assert fsdp2["failures"] == [], f"rank {o.rank}"
        assert fsdp2["worst_ratio"] <= (0.0 if world == 2 else 1.0), f"rank {o.rank}: {fsdp2}"
