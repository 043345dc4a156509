"""One rank of test_collectives.py: every served collective on the default "ddpd" group
against the same call on a Gloo group of the same processes, at odd sizes, for each dtype.

Exact equality where the arithmetic is the same on both: world 2 (x0 + x1 == x1 + x0), MIN and
MAX, integer dtypes, and small-integer inputs (every partial sum is exact in bfloat16 too).
Otherwise ddpd adds in rank order and Gloo's ring in another: the results may differ by
rank_common.order_bound."""

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

import ddpd_torch
from rank_common import emit, gamma, join, order_bound

FLOATS = [torch.float32, torch.float64, torch.bfloat16]
SIZES = [1, 7, 4099, 1_000_003]  # 1_000_003 float64 is 4 slots of 2 MiB: several chunks
OPS = {"SUM": ReduceOp.SUM, "AVG": ReduceOp.AVG, "MIN": ReduceOp.MIN, "MAX": ReduceOp.MAX}


class Checks:
    def __init__(self, rank, world, gloo):
        self.rank, self.world, self.gloo = rank, world, gloo
        self.count, self.failures = 0, []

    def input(self, seed, numel, dtype, kind):
        g = torch.Generator().manual_seed(7919 * seed + self.rank)
        if kind == "ints" or not dtype.is_floating_point:
            return torch.randint(-4, 5, (numel,), generator=g).to(dtype)
        return torch.randn(numel, generator=g, dtype=torch.float64).to(dtype)

    def abs_sum(self, x):
        total = x.abs().to(torch.float64)
        dist.all_reduce(total, group=self.gloo)
        return total

    def same(self, name, got, want, bound=None):
        """Bit-equal, or within `bound` (elementwise, float64) when one is given."""
        self.count += 1
        if bound is None:
            if not torch.equal(got, want):
                diff = (got.double() - want.double()).abs().max().item() if got.numel() else 0
                self.failures.append(f"{name}: not bit-equal to Gloo (max diff {diff:g})")
            return
        excess = (got.double() - want.double()).abs() - bound.reshape(got.shape)
        if got.numel() and excess.max().item() > 0:
            self.failures.append(f"{name}: exceeds the order bound by {excess.max().item():g}")

    def exact(self, op_name, dtype, kind):
        return (self.world == 2 or op_name in ("MIN", "MAX") or kind == "ints"
                or not dtype.is_floating_point)

    def reduce_bound(self, x, op_name, dtype, kind):
        """None (exact), or the bound of a sum (AVG: of a sum divided by the world, rounded)."""
        if self.exact(op_name, dtype, kind):
            return None
        s = self.abs_sum(x)
        bound = order_bound(s, self.world, dtype)
        if op_name == "AVG":
            eps = torch.finfo(dtype).eps
            bound = (bound + eps * s * (1 + gamma(self.world, dtype))) / self.world
        return bound


def gloo_reduce(checks, op_name, run):
    """Gloo's answer for `op_name`: Gloo has no AVG, so SUM then the same division ddpd does."""
    op = ReduceOp.SUM if op_name == "AVG" else OPS[op_name]
    result = run(op)
    return result.div_(checks.world) if op_name == "AVG" else result


def check_all_reduce(c, seed, numel, dtype, kind, op_name, shape=None):
    x = c.input(seed, numel, dtype, kind)
    if shape:  # a transposed, non-contiguous view
        x = x.reshape(shape).t()
    got = x.clone()
    dist.all_reduce(got, op=OPS[op_name])

    def gloo(op):
        want = x.clone()
        dist.all_reduce(want, op=op, group=c.gloo)
        return want

    want = gloo_reduce(c, op_name, gloo)
    c.same(f"all_reduce {op_name} {dtype} {kind} {tuple(x.shape)}", got, want,
           c.reduce_bound(x, op_name, dtype, kind))


def check_reduce_scatter(c, seed, numel, dtype, kind, op_name):
    x = c.input(seed, numel * c.world, dtype, kind)
    got = torch.empty(numel, dtype=dtype)
    dist.reduce_scatter_tensor(got, x, op=OPS[op_name])

    def gloo(op):
        want = torch.empty(numel, dtype=dtype)
        dist.reduce_scatter_tensor(want, x, op=op, group=c.gloo)
        return want

    want = gloo_reduce(c, op_name, gloo)
    bound = c.reduce_bound(x, op_name, dtype, kind)
    if bound is not None:
        bound = bound[c.rank * numel:(c.rank + 1) * numel]
    c.same(f"reduce_scatter_tensor {op_name} {dtype} {kind} {numel}", got, want, bound)
    # The list form: one input per rank, each the output's size.
    got_list = torch.empty(numel, dtype=dtype)
    dist.reduce_scatter(got_list, list(x.chunk(c.world)), op=OPS[op_name])
    c.same(f"reduce_scatter (list) {op_name} {dtype} {kind} {numel}", got_list, want, bound)


def check_data_moves(c, seed, numel, dtype):
    x = c.input(seed, numel, dtype, "randn")
    for root in range(c.world):
        got, want = x.clone(), x.clone()
        dist.broadcast(got, src=root)
        dist.broadcast(want, src=root, group=c.gloo)
        c.same(f"broadcast root {root} {dtype} {numel}", got, want)
    got = [torch.empty_like(x) for _ in range(c.world)]
    want = [torch.empty_like(x) for _ in range(c.world)]
    dist.all_gather(got, x)
    dist.all_gather(want, x, group=c.gloo)
    c.same(f"all_gather {dtype} {numel}", torch.stack(got), torch.stack(want))
    got = torch.empty(c.world * numel, dtype=dtype)
    want = torch.empty(c.world * numel, dtype=dtype)
    dist.all_gather_into_tensor(got, x)
    dist.all_gather_into_tensor(want, x, group=c.gloo)
    c.same(f"all_gather_into_tensor {dtype} {numel}", got, want)
    # A non-contiguous (world, numel) output: staged, then copied back in the Work.
    strided = torch.empty(numel, c.world, dtype=dtype).t()
    dist.all_gather_into_tensor(strided, x)
    c.same(f"all_gather_into_tensor strided {dtype} {numel}", strided, want.reshape(c.world, numel))


def check_async(c):
    """async_op=True: the Work's future carries the finished values (AVG divided) to `then`."""
    t = torch.full((5,), float(c.rank + 1), dtype=torch.float64)
    work = dist.all_reduce(t, op=ReduceOp.AVG, async_op=True)
    doubled = work.get_future().then(lambda f: f.value()[0] * 2).wait()
    work.wait()
    mean = (c.world + 1) / 2
    c.same("async all_reduce AVG then()", doubled, torch.full((5,), 2 * mean, dtype=torch.float64))
    c.same("async all_reduce AVG wait()", t, torch.full((5,), mean, dtype=torch.float64))
    for _ in range(3):
        dist.barrier()
    c.count += 1


def main():
    rank, world = join("ddpd")
    gloo = dist.new_group(backend="gloo")
    c = Checks(rank, world, gloo)
    seed = 0
    for dtype in FLOATS + [torch.int64]:
        for numel in SIZES:
            for kind in ("randn", "ints") if dtype.is_floating_point else ("ints",):
                for op_name in OPS:
                    if op_name == "AVG" and not dtype.is_floating_point:
                        continue
                    seed += 1
                    check_all_reduce(c, seed, numel, dtype, kind, op_name)
                    if op_name in ("SUM", "AVG"):
                        check_reduce_scatter(c, seed, numel, dtype, kind, op_name)
            seed += 1
            check_data_moves(c, seed, numel, dtype)
        seed += 1
        check_all_reduce(c, seed, 33 * 17, dtype, "ints", "SUM", shape=(33, 17))
    check_async(c)
    emit(transport=ddpd_torch.transport(), checks=c.count, failures=c.failures[:30])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
