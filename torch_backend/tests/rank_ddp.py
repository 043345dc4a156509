"""One rank of test_ddp.py: PyTorch DDP on a small float64 model, on the default "ddpd" group
and on a Gloo group of the same processes, from the same start, on the same batches.

World 2: the two all-reduces add the same two terms (x0 + x1 == x1 + x0), so the gradients and
the parameters after every step are bit-equal, and so is DDP with a Python comm hook
(allreduce_hook, through the Work's future). World 3 and up: ddpd adds in rank order and Gloo's
ring in another (measured at world 3 and 4: not bit-equal, up to half the bound), so each
step's gradients may differ by rank_common.order_bound of the gradients DDP adds (each rank's
gradient / world, the same rounded values on both); the Gloo replica then takes ddpd's parameters,
so every step is checked from equal parameters and no difference compounds."""

import copy
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import ddpd_torch
from rank_common import batch, compare, emit, join, make_model, order_bound

LR = 0.1


def local_abs_grads(module, x, y, world, gloo):
    """sum over ranks of |each rank's gradient / world|: what the order bound scales with."""
    plain = copy.deepcopy(module)
    nn.functional.mse_loss(plain(x), y).backward()
    sums = []
    for p in plain.parameters():
        s = p.grad.abs() / world
        dist.all_reduce(s, group=gloo)
        sums.append(s)
    return sums


def train_step(model, optimizer, x, y):
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    optimizer.step()
    return grads


def run(rank, world, gloo, steps):
    """DDP on the default ("ddpd") group against DDP on `gloo`: {"steps", "worst_ratio",
    "failures"}."""
    # Different starting weights on each rank: DDP's broadcast from rank 0 must make them equal.
    ddpd_model = DDP(make_model(1234 + rank))
    gloo_model = DDP(make_model(1234 + rank), process_group=gloo)
    hooked = DDP(make_model(1234 + rank)) if world == 2 else None
    models = [m for m in (ddpd_model, gloo_model, hooked) if m is not None]
    if hooked is not None:
        hooked.register_comm_hook(None, default_hooks.allreduce_hook)
    opts = [torch.optim.SGD(m.parameters(), lr=LR) for m in models]
    failures, worst = [], 0.0
    compare("start", list(ddpd_model.parameters()), list(gloo_model.parameters()),
            [None] * 4, failures)
    for step in range(steps):
        x, y = batch(step, rank)
        abs_sums = local_abs_grads(ddpd_model.module, x, y, world, gloo)
        grads = [train_step(m, o, x, y) for m, o in zip(models, opts)]
        bounds = [None if world == 2 else order_bound(s, world, torch.float64) for s in abs_sums]
        worst = max(worst, compare(f"step {step} grads", grads[0], grads[1], bounds, failures))
        if hooked is not None:
            compare(f"step {step} allreduce_hook grads", grads[2], grads[1], bounds, failures)
        if world > 2:  # from equal parameters again: no difference compounds
            with torch.no_grad():
                for p, q in zip(gloo_model.parameters(), ddpd_model.parameters()):
                    p.copy_(q)
    if world == 2:
        compare(f"parameters after {steps} steps", list(ddpd_model.parameters()),
                list(gloo_model.parameters()), [None] * 4, failures)
    return dict(steps=steps, worst_ratio=worst, failures=failures)


def main():
    rank, world = join("ddpd")
    result = run(rank, world, dist.new_group(backend="gloo"), int(sys.argv[1]))
    emit(transport=ddpd_torch.transport(), **result)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
