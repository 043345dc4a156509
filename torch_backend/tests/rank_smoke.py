"""One rank of the launch tests: joins as the launcher says (plain environment or torchrun),
runs one all-reduce, and reports the transport the group chose."""

import os

import torch
import torch.distributed as dist

import ddpd_torch
from rank_common import emit, join


def main():
    rank, world = join(os.environ.get("SMOKE_BACKEND", "ddpd"))
    t = torch.full((1001,), float(rank + 1))
    dist.all_reduce(t)
    ok = torch.equal(t, torch.full((1001,), world * (world + 1) / 2))
    emit(rank=rank, world=world, transport=ddpd_torch.transport(), correct=ok)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
