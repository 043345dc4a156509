"""One rank of test_fsdp2.py: FSDP2 (fully_shard) on rank_common's float64 MLP, on a mesh of the
default "ddpd" group and on a mesh of a Gloo group of the same processes, from the same start, on
the same batches. Each step all-gathers every layer's parameters (all_gather_into_tensor) and
reduce-scatters the gradients (reduce_scatter_tensor); the test compares the gradients and the
parameters.

What FSDP2 computes (torch 2.11, _fsdp_collectives.py, float64 gradients, "overflow risk"): each
rank's gradient g_i is divided by pre = 2 (exact), reduce-scattered with SUM, and the shard divided
by post = world / 2 (1 at world 2, 1.5 at world 3: rounded, 2 at world 4: exact).
World 2: both sums add the same two terms (a + b == b + a), so every gradient and every parameter
is bit-equal after every step. World 3 and 4: ddpd adds in rank order and Gloo in its own order
(measured: not bit-equal), so each sum is within rank_common.order_bound of the other, and the
division by post adds at most one rounding on each side (u * |value| each, u = eps / 2). As in
rank_ddp.py, the Gloo replica then takes ddpd's parameters, so no difference compounds."""

import copy
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

import ddpd_torch
from rank_common import batch, compare, emit, gamma, join, make_model, order_bound

LR = 0.1


def sharded(group):
    """The model with each Linear and the root fully_shard-ed over `group`. The same seed on
    every rank: fully_shard keeps each rank's slice of its local weights (no broadcast)."""
    model = make_model(4321)
    mesh = DeviceMesh.from_group(group, "cpu")
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def grad_bounds(model, x, y, world, gloo):
    """Per parameter, the largest |ddpd's gradient - Gloo's| the arithmetic allows (None: equal
    bits). S = sum over ranks of |g_i / pre|, exact to a rounding in float64."""
    if world == 2:
        return [None for _ in model.parameters()]
    plain = copy.deepcopy(model)
    nn.functional.mse_loss(plain(x), y).backward()
    pre, post = 2.0, world / 2.0
    bounds = []
    for p in plain.parameters():
        s = p.grad.abs() / pre
        dist.all_reduce(s, group=gloo)
        summed = order_bound(s, world, torch.float64)
        rounding = torch.finfo(torch.float64).eps * s * (1 + gamma(world, torch.float64))
        bounds.append((summed + (rounding if post != int(post) else 0)) / post)
    return bounds


def shard(full, rank, world):
    """This rank's rows of `full`, as fully_shard splits dim 0 (torch.chunk: the last shards may
    be shorter or empty)."""
    chunks = torch.chunk(full, world, dim=0)
    return chunks[rank] if rank < len(chunks) else full[:0]


def shards(tensors, rank, world):
    return [None if t is None else shard(t, rank, world) for t in tensors]


def gather(local, full_shape, world, group):
    """The full tensor from each rank's shard (padded to ceil(rows / world) rows, as FSDP2 pads)."""
    rows = -(-full_shape[0] // world)
    padded = local.new_zeros((rows, *full_shape[1:]))
    padded[:local.shape[0]] = local
    out = local.new_empty((rows * world, *full_shape[1:]))
    dist.all_gather_into_tensor(out, padded, group=group)
    return out[:full_shape[0]]


def local_grads(model):
    return [p.grad.to_local() for p in model.parameters()]


def local_params(model):
    return [p.to_local() for p in model.parameters()]


def run(rank, world, gloo, steps):
    """FSDP2 on the default ("ddpd") group against FSDP2 on `gloo`: {"steps", "worst_ratio",
    "failures"}."""
    reference = make_model(4321)  # what every rank's replica starts from
    models = [sharded(dist.group.WORLD), sharded(gloo)]
    opts = [torch.optim.SGD(m.parameters(), lr=LR) for m in models]
    failures, worst = [], 0.0
    start = shards(list(reference.parameters()), rank, world)
    for name, m in (("start", models[0]), ("start (gloo)", models[1])):
        compare(name, local_params(m), start, [None] * 4, failures)
    for step in range(steps):
        x, y = batch(step, rank)
        bounds = shards(grad_bounds(reference, x, y, world, gloo), rank, world)
        for m, o in zip(models, opts):
            o.zero_grad()
            nn.functional.mse_loss(m(x), y).backward()
        grads = [local_grads(m) for m in models]
        worst = max(worst, compare(f"step {step} grads", grads[0], grads[1], bounds, failures))
        for o in opts:
            o.step()
        with torch.no_grad():
            if world > 2:  # from equal parameters again: no difference compounds
                for p, q in zip(models[1].parameters(), models[0].parameters()):
                    p.to_local().copy_(q.to_local())
            for p, q in zip(reference.parameters(), models[0].parameters()):
                # The next step's bound is taken at ddpd's parameters: gathered on Gloo.
                p.copy_(gather(q.to_local(), p.shape, world, gloo))
    if world == 2:  # (at world 3 and 4 the Gloo replica has just taken ddpd's parameters)
        compare(f"parameters after {steps} steps", local_params(models[0]),
              local_params(models[1]), [None] * 4, failures)
    return dict(steps=steps, worst_ratio=worst, failures=failures)


def main():
    rank, world = join("ddpd")
    result = run(rank, world, dist.new_group(backend="gloo"), int(sys.argv[1]))
    emit(transport=ddpd_torch.transport(), **result)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
