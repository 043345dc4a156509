"""One rank of test_small_allreduce.py: all_reduce of every served op and dtype on the "ddpd"
group, at sizes on both sides of the one-phase threshold (kOnePhaseMaxBytes in
core/src/shm/shm_process_group.h, read from there by the test and passed as argv[1]), each
compared bit for bit with the one-process reference: every rank's input regenerated from its
seed and reduced here in rank order, ((x0 op x1) op x2) ..., with the same Tensor ops in the same
dtype (AVG: that sum divided by the world). Both the one-phase path (every rank reduces the whole
tensor) and the three-phase path (each rank reduces its sub-range) must give these bits at every
world size, not only within a rounding bound."""

import sys

import torch
import torch.distributed as dist

import ddpd_torch
from rank_collectives import FLOAT_OPS, FLOATS, INT_OPS, INTS, OPS, local_reduce, make_input
from rank_common import emit, join


def sizes_for(dtype, threshold):
    """Element counts: tiny, odd, and just under, at and just over the threshold."""
    at = threshold // torch.empty((), dtype=dtype).element_size()
    return [1, 1031, at - 1, at, at + 1]


def reference(xs, op_name, world):
    if op_name == "AVG":
        return local_reduce(xs, "SUM").div_(world)
    return local_reduce(xs, op_name)


def main():
    threshold = int(sys.argv[1])
    rank, world = join()
    checks, failures, seed = 0, [], 0
    for dtype in FLOATS + INTS:
        for op_name in FLOAT_OPS if dtype.is_floating_point else INT_OPS:
            # "prod": |x| in [0.5, 2), so float products of 4 terms stay normal (integers wrap,
            # on both sides alike).
            kind = "prod" if op_name == "PRODUCT" else "randn"
            for numel in sizes_for(dtype, threshold):
                seed += 1
                xs = [make_input(seed, r, numel, dtype, kind) for r in range(world)]
                got = xs[rank].clone()
                dist.all_reduce(got, op=OPS[op_name])
                want = reference(xs, op_name, world)
                checks += 1
                # Bits, not values: the byte views also tell -0.0 from 0.0.
                same = got.view(torch.uint8).equal(want.view(torch.uint8))
                if not same:
                    failures.append(f"all_reduce {op_name} {dtype} {numel}")
    emit(rank=rank, world=world, transport=ddpd_torch.transport(), checks=checks, failures=failures[:20])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
