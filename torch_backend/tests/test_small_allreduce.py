"""all_reduce on "ddpd" at world 2, 3 and 4, bit for bit against the one-process rank-order
reduction, for every served op and dtype, on both sides of the one-phase threshold
(rank_small_allreduce.py)."""

import re
from pathlib import Path

import pytest

from ranks import run_ranks

HEADER = Path(__file__).resolve().parents[2] / "core/src/shm/shm_process_group.h"


def one_phase_max_bytes():
    """kOnePhaseMaxBytes as the header declares it (the one place it is declared)."""
    text = HEADER.read_text()
    m = re.search(r"kOnePhaseMaxBytes = int64_t\{(\d+)\} << (\d+);", text)
    assert m, f"kOnePhaseMaxBytes not found in {HEADER} in the form 'int64_t{{N}} << K;'"
    return int(m.group(1)) << int(m.group(2))


@pytest.mark.parametrize("world", [2, 3, 4])
def test_small_all_reduces_are_bitwise_the_rank_order_reduction(world):
    outputs = run_ranks("rank_small_allreduce.py", world, args=[one_phase_max_bytes()])
    for o in outputs:
        assert o.result["transport"] == "shm", o.stderr
        assert o.result["failures"] == [], f"rank {o.rank}"
        # 4 floating dtypes x 5 ops + 5 integer dtypes x 7 ops, 5 sizes each.
        assert o.result["checks"] == (4 * 5 + 5 * 7) * 5
