"""What every rank script shares: joining the job, the tolerance of a sum, and the result line."""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

import ddpd_torch  # noqa: F401  (registers "ddpd")


def join(backend="ddpd"):
    """init_process_group from the environment (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)."""
    dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size()


def emit(**result):
    """One line, in one write: ranks that share a pipe (torchrun's) cannot interleave it."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), ("RESULT " + json.dumps(result) + "\n").encode())


def gamma(terms, dtype):
    """Higham's gamma_k for the k = terms - 1 roundings of a sum of `terms` values in `dtype`:
    each partial sum is rounded once, with a relative error of at most u = eps / 2."""
    u = torch.finfo(dtype).eps / 2
    k = terms - 1
    return k * u / (1 - k * u)


def order_bound(abs_sum, world, dtype):
    """How far apart two sums of the same `world` terms may be when added in different orders
    (ddpd adds in rank order, Gloo's ring does not): each is within gamma * sum|x_i| of the exact
    sum, so they are within twice that of each other. `abs_sum`: sum over ranks of |x|, float64."""
    return 2 * gamma(world, dtype) * abs_sum


def fail_fast(message):
    print(message, file=sys.stderr, flush=True)
    sys.exit(1)


def make_model(seed):
    """The model of the DDP and FSDP2 tests: a float64 MLP whose 31-row layers split unevenly
    over 2, 3 and 4 ranks (FSDP2 pads the last shard)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(13, 31), nn.Tanh(), nn.Linear(31, 7)).double()


def batch(step, rank):
    """Rank `rank`'s batch at `step`: the same on every backend."""
    g = torch.Generator().manual_seed(100 * step + rank)
    return (torch.randn(16, 13, generator=g, dtype=torch.float64),
            torch.randn(16, 7, generator=g, dtype=torch.float64))


def compare(name, got, want, bounds, failures):
    """Max |got - want| / bound over the tensors (0 when bit-equal); a failure past 1. A bound of
    None asks for bit-equality."""
    worst = 0.0
    for i, (g, w, b) in enumerate(zip(got, want, bounds)):
        if b is None:
            if not torch.equal(g, w):
                failures.append(f"{name} [{i}]: not bit-equal "
                                f"(max diff {(g - w).abs().max().item():g})")
            continue
        diff = (g - w).abs()
        if (diff > b).any():
            failures.append(f"{name} [{i}]: exceeds the bound by {(diff - b).max().item():g}")
        worst = max(worst, (diff / b.clamp_min(1e-300)).max().item())
    return worst
