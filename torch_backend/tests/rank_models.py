"""One rank of test_ddp.py and test_fsdp2.py together: DDP (rank_ddp.run), then FSDP2
(rank_fsdp2.run), in one process group. One launch per world instead of two: each rank's
Python start and torch import cost ~1.7 s of CPU, and at world 4 the 2-core test host runs them
4 at a time."""

import sys

import torch.distributed as dist

import ddpd_torch
import rank_ddp
import rank_fsdp2
from rank_common import emit, join


def main():
    ddp_steps, fsdp2_steps = int(sys.argv[1]), int(sys.argv[2])
    rank, world = join("ddpd")
    gloo = dist.new_group(backend="gloo")
    ddp = rank_ddp.run(rank, world, gloo, ddp_steps)
    fsdp2 = rank_fsdp2.run(rank, world, gloo, fsdp2_steps)
    emit(transport=ddpd_torch.transport(), ddp=ddp, fsdp2=fsdp2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
