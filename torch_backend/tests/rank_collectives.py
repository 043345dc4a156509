"""One rank of test_collectives.py: every served collective on the default "ddpd" group against
the same call on a Gloo group of the same processes, at odd sizes, for every dtype.

Exact equality (bits) where both sides do the same arithmetic: world 2 (x0 + x1 == x1 + x0,
x0 * x1 == x1 * x0), MIN, MAX, the bitwise ops, every integer dtype (two's-complement sums and
products are exact mod 2^n in any order), small-integer float inputs (every partial sum and
product is exact, bfloat16 included), and every data move. Otherwise ddpd reduces in rank order
and Gloo in another; each result of W terms is within gamma(W-1) of the exact one, relative to
sum |x_i| (SUM, rank_common.order_bound) or to |prod x_i| (PRODUCT), so the two are within twice
that. Gloo has no int16 at all ("Invalid scalar type"): int16's reference is computed here, exactly,
from every rank's input (each rank regenerates its peers' inputs from their seeds)."""

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

import ddpd_torch
from rank_common import emit, gamma, join, order_bound

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
SIZES = [1, 7, 1031, 65537]
OPS = {"SUM": ReduceOp.SUM, "AVG": ReduceOp.AVG, "PRODUCT": ReduceOp.PRODUCT,
       "MIN": ReduceOp.MIN, "MAX": ReduceOp.MAX, "BAND": ReduceOp.BAND, "BOR": ReduceOp.BOR,
       "BXOR": ReduceOp.BXOR}
FLOAT_OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX"]
INT_OPS = ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
GLOO_LACKS = {torch.int16}


def make_input(seed, rank, numel, dtype, kind="randn"):
    """Rank `rank`'s input for `seed`: any rank can make any rank's (the int16 references)."""
    g = torch.Generator().manual_seed(7919 * seed + rank)
    if not dtype.is_floating_point:
        low, high = (0, 256) if dtype == torch.uint8 else (-100, 100)
        return torch.randint(low, high, (numel,), generator=g).to(dtype)
    if kind == "ints":
        return torch.randint(-4, 5, (numel,), generator=g).to(dtype)
    if kind == "prod":  # |x| in [0.5, 2): products of W terms stay far from under- and overflow
        sign = torch.randint(0, 2, (numel,), generator=g) * 2 - 1
        return (sign * (0.5 + 1.5 * torch.rand(numel, generator=g, dtype=torch.float64))).to(dtype)
    return torch.randn(numel, generator=g, dtype=torch.float64).to(dtype)


def local_reduce(xs, op_name):
    """The reduction of `xs` in rank order, for dtypes Gloo lacks (integers: exact)."""
    out = xs[0].clone()
    for x in xs[1:]:
        if op_name == "SUM":
            out += x
        elif op_name == "PRODUCT":
            out *= x
        elif op_name == "MIN":
            out = torch.minimum(out, x)
        elif op_name == "MAX":
            out = torch.maximum(out, x)
        elif op_name == "BAND":
            out &= x
        elif op_name == "BOR":
            out |= x
        elif op_name == "BXOR":
            out ^= x
    return out


class Checks:
    def __init__(self, rank, world, gloo):
        self.rank, self.world, self.gloo = rank, world, gloo
        self.count, self.failures = 0, []

    def inputs(self, seed, numel, dtype, kind="randn"):
        """Every rank's input, this rank's at [rank]."""
        return [make_input(seed, r, numel, dtype, kind) for r in range(self.world)]

    def same(self, name, got, want, bound=None):
        """Bit-equal, or within `bound` (elementwise, float64) when one is given."""
        self.count += 1
        if got.dtype != want.dtype or got.shape != want.shape:
            self.failures.append(f"{name}: {got.dtype}{tuple(got.shape)} against Gloo's "
                                 f"{want.dtype}{tuple(want.shape)}")
            return
        if bound is None:
            if not torch.equal(got, want):
                diff = (got.double() - want.double()).abs().max().item() if got.numel() else 0
                self.failures.append(f"{name}: not bit-equal to Gloo (max diff {diff:g})")
            return
        excess = (got.double() - want.double()).abs() - bound.reshape(got.shape)
        if got.numel() and excess.max().item() > 0:
            self.failures.append(f"{name}: exceeds the order bound by {excess.max().item():g}")

    def bound(self, xs, op_name, dtype, kind):
        """None (exact), or how far ddpd's and Gloo's results may be apart (float64)."""
        if (self.world == 2 or op_name in ("MIN", "MAX") or kind == "ints"
                or not dtype.is_floating_point):
            return None
        g, g64 = gamma(self.world, dtype), gamma(self.world, torch.float64)
        wide = [x.double() for x in xs]
        if op_name == "PRODUCT":
            exact = local_reduce(wide, "PRODUCT").abs()  # itself within g64 of the exact product
            return (2 * g + 4 * g64) * exact
        s = torch.stack(wide).abs().sum(0)
        b = order_bound(s, self.world, dtype)
        if op_name == "AVG":  # the sums' bound, plus one rounding of the division
            eps = torch.finfo(dtype).eps
            b = (b + eps * s * (1 + g)) / self.world
        return b


def reference_reduce(c, xs, op_name, gloo_call):
    """Gloo's answer for `op_name` (AVG: Gloo's SUM divided by the world, as PyTorch does), or,
    for a dtype Gloo lacks, the exact one."""
    if xs[0].dtype in GLOO_LACKS:
        return local_reduce(xs, op_name)
    result = gloo_call(ReduceOp.SUM if op_name == "AVG" else OPS[op_name])
    return result.div_(c.world) if op_name == "AVG" else result


def check_all_reduce(c, seed, numel, dtype, kind, op_name, shape=None):
    xs = c.inputs(seed, numel, dtype, kind)
    x = xs[c.rank]
    if shape:  # a transposed, non-contiguous view
        x = x.reshape(shape).t()
    got = x.clone()
    dist.all_reduce(got, op=OPS[op_name])

    def gloo(op):
        want = x.clone()
        dist.all_reduce(want, op=op, group=c.gloo)
        return want

    want = reference_reduce(c, [t.reshape(x.shape) if not shape else t.reshape(shape).t()
                                for t in xs], op_name, gloo)
    b = c.bound(xs, op_name, dtype, kind)
    c.same(f"all_reduce {op_name} {dtype} {kind} {tuple(x.shape)}", got, want,
           None if b is None else b.reshape(shape).t() if shape else b)


def check_reduce_scatter(c, seed, numel, dtype, kind, op_name):
    xs = c.inputs(seed, numel * c.world, dtype, kind)
    x = xs[c.rank]
    got = torch.empty(numel, dtype=dtype)
    dist.reduce_scatter_tensor(got, x, op=OPS[op_name])

    def gloo(op):
        want = torch.empty(numel, dtype=dtype)
        dist.reduce_scatter_tensor(want, x, op=op, group=c.gloo)
        return want

    mine = slice(c.rank * numel, (c.rank + 1) * numel)
    want = reference_reduce(c, [t[mine] for t in xs], op_name, gloo)
    b = c.bound([t[mine] for t in xs], op_name, dtype, kind)
    c.same(f"reduce_scatter_tensor {op_name} {dtype} {kind} {numel}", got, want, b)
    # The list form: one input per rank, each the output's size.
    got_list = torch.empty(numel, dtype=dtype)
    dist.reduce_scatter(got_list, list(x.chunk(c.world)), op=OPS[op_name])
    c.same(f"reduce_scatter (list) {op_name} {dtype} {kind} {numel}", got_list, want, b)


def check_reductions(c, seed, numel, dtype):
    ops = FLOAT_OPS if dtype.is_floating_point else INT_OPS
    for op_name in ops:
        kinds = ["randn"]
        if dtype.is_floating_point:
            kinds = ["prod", "ints"] if op_name == "PRODUCT" else ["randn"]
            if op_name in ("SUM", "AVG"):
                kinds.append("ints")
        for kind in kinds:
            seed += 1
            check_all_reduce(c, seed, numel, dtype, kind, op_name)
            check_reduce_scatter(c, seed, numel, dtype, kind, op_name)
    return seed


def check_data_moves(c, seed, numel, dtype):
    xs = c.inputs(seed, numel, dtype)
    x = xs[c.rank]
    lacks = dtype in GLOO_LACKS
    for root in range(c.world):
        got, want = x.clone(), x.clone()
        dist.broadcast(got, src=root)
        if lacks:
            want = xs[root]
        else:
            dist.broadcast(want, src=root, group=c.gloo)
        c.same(f"broadcast root {root} {dtype} {numel}", got, want)
    got = [torch.empty_like(x) for _ in range(c.world)]
    want = [torch.empty_like(x) for _ in range(c.world)]
    dist.all_gather(got, x)
    if lacks:
        want = xs
    else:
        dist.all_gather(want, x, group=c.gloo)
    c.same(f"all_gather {dtype} {numel}", torch.stack(got), torch.stack(want))
    got = torch.empty(c.world * numel, dtype=dtype)
    want = torch.cat(xs) if lacks else torch.empty(c.world * numel, dtype=dtype)
    dist.all_gather_into_tensor(got, x)
    if not lacks:
        dist.all_gather_into_tensor(want, x, group=c.gloo)
    c.same(f"all_gather_into_tensor {dtype} {numel}", got, want)
    # A non-contiguous (world, numel) output: staged, then copied back in the Work.
    strided = torch.empty(numel, c.world, dtype=dtype).t()
    dist.all_gather_into_tensor(strided, x)
    c.same(f"all_gather_into_tensor strided {dtype} {numel}", strided, want.reshape(c.world, numel))


def split(src, dst, numel):
    """Rows rank `src` sends rank `dst` in the unequal all-to-all: some zero, all different."""
    return (numel + 3 * src + 5 * dst) % 7


def check_all_to_all(c, seed, numel, dtype):
    """all_to_all_single with equal splits (numel rows each) and unequal ones, on (rows, 3)
    tensors: splits count rows."""
    w, r = c.world, c.rank
    lacks = dtype in GLOO_LACKS
    cases = [("equal", None, None)]
    cases.append(("unequal", [split(r, d, numel) for d in range(w)],
                  [split(s, r, numel) for s in range(w)]))
    for name, in_splits, out_splits in cases:
        rows_in = w * numel if in_splits is None else sum(in_splits)
        rows_out = w * numel if out_splits is None else sum(out_splits)
        xs = [make_input(seed, s, 3 * (w * numel if in_splits is None else
                                       sum(split(s, d, numel) for d in range(w))), dtype, "randn")
              .reshape(-1, 3) for s in range(w)]
        x = xs[r]
        assert x.shape[0] == rows_in
        got = torch.empty(rows_out, 3, dtype=dtype)
        dist.all_to_all_single(got, x, out_splits, in_splits)
        if lacks:  # what each source sends this rank: its rows for destination r
            pieces = []
            for s in range(w):
                sizes = [numel] * w if in_splits is None else [split(s, d, numel) for d in range(w)]
                pieces.append(xs[s][sum(sizes[:r]):sum(sizes[:r + 1])])
            want = torch.cat(pieces)
        else:
            want = torch.empty(rows_out, 3, dtype=dtype)
            dist.all_to_all_single(want, x, out_splits, in_splits, group=c.gloo)
        c.same(f"all_to_all_single {name} {dtype} {numel}", got, want)
    # Async, into a non-contiguous output, through the future.
    x = make_input(seed, r, 3 * w * numel, dtype).reshape(-1, 3)
    out = torch.empty(3, w * numel, dtype=dtype).t()
    fut = dist.all_to_all_single(out, x, async_op=True).get_future()
    value = fut.wait()[0]
    want = torch.empty(w * numel, 3, dtype=dtype)
    if lacks:
        want = torch.cat([make_input(seed, s, 3 * w * numel, dtype).reshape(-1, 3)
                          [r * numel:(r + 1) * numel] for s in range(w)])
    else:
        dist.all_to_all_single(want, x, group=c.gloo)
    c.same(f"all_to_all_single async strided {dtype} {numel}", out, want)
    c.same(f"all_to_all_single future value {dtype} {numel}", value, want)


def check_send_recv(c, seed, numel, dtype):
    """A ring: each rank sends its tensor to the next and receives the previous one's, async;
    then the same into a non-contiguous target, with a tag, through the future."""
    w, r = c.world, c.rank
    xs = c.inputs(seed, numel, dtype)
    nxt, prev = (r + 1) % w, (r - 1) % w
    got = torch.empty(numel, dtype=dtype)
    works = [dist.isend(xs[r], nxt), dist.irecv(got, prev)]
    for work in works:
        work.wait()
    if dtype in GLOO_LACKS:
        want = xs[prev]
    else:
        want = torch.empty(numel, dtype=dtype)
        gloo_works = [dist.isend(xs[r], nxt, group=c.gloo), dist.irecv(want, prev, group=c.gloo)]
        for work in gloo_works:
            work.wait()
    c.same(f"send/recv ring {dtype} {numel}", got, want)
    target = torch.zeros(2, numel, dtype=dtype)[:, :].t()[:, 1]  # stride 2
    send = dist.isend(xs[r], nxt, tag=5)
    recv = dist.irecv(target, prev, tag=5)
    value = recv.get_future().then(lambda f: f.value()[0].clone()).wait()
    send.wait()
    c.same(f"recv strided, tag 5, future {dtype} {numel}", target, want)
    c.same(f"recv future value {dtype} {numel}", value, want)


def check_rooted(c, seed, numel, dtype):
    """reduce: the root's result is ddpd's own all_reduce's, bit for bit (that one is checked
    against Gloo above), and the others keep their input. gather and scatter: the root's list is
    every rank's tensor, the pieces every rank's own (each rank regenerates them from the seeds),
    into contiguous and strided tensors."""
    w, r = c.world, c.rank
    root = seed % w
    xs = c.inputs(seed, numel, dtype)
    for op_name in FLOAT_OPS if dtype.is_floating_point else INT_OPS:
        want = xs[r].clone()
        dist.all_reduce(want, op=OPS[op_name])
        got = xs[r].clone()
        dist.reduce(got, dst=root, op=OPS[op_name])
        c.same(f"reduce {op_name} root {root} {dtype} {numel}", got, want if r == root else xs[r])
    targets = [torch.empty(numel, dtype=dtype) for _ in range(w)] if r == root else None
    dist.gather(xs[r], targets, dst=root)
    strided = torch.zeros(numel, w, dtype=dtype)
    dist.gather(xs[r], list(strided.t()) if r == root else None, dst=root)
    if r == root:
        c.same(f"gather root {root} {dtype} {numel}", torch.stack(targets), torch.stack(xs))
        c.same(f"gather strided root {root} {dtype} {numel}", strided.t(), torch.stack(xs))
    pieces = [make_input(seed, w + s, numel, dtype) for s in range(w)]
    got = torch.empty(numel, dtype=dtype)
    dist.scatter(got, pieces if r == root else None, src=root)
    c.same(f"scatter root {root} {dtype} {numel}", got, pieces[r])
    got = torch.zeros(2, numel, dtype=dtype).t()[:, 1]
    dist.scatter(got, [p.flip(0) for p in pieces] if r == root else None, src=root)
    c.same(f"scatter strided root {root} {dtype} {numel}", got, pieces[r].flip(0))


def check_coalesced(c, seed, dtype):
    """The coalesced forms (dist._coalescing_manager's) on tensors of unequal sizes: the bits of
    the same calls made one by one on ddpd."""
    sizes = [1, 7, 1031, 3]
    for op_name in ["SUM", "MAX"] if dtype.is_floating_point else ["SUM", "BXOR"]:
        op = OPS[op_name]
        xs = [make_input(seed + i, c.rank, n, dtype) for i, n in enumerate(sizes)]
        want, got = [x.clone() for x in xs], [x.clone().reshape(1, -1) for x in xs]
        for t in want:
            dist.all_reduce(t, op=op)
        with dist._coalescing_manager():
            for t in got:
                dist.all_reduce(t, op=op)
        c.same(f"all_reduce coalesced {op_name} {dtype}", torch.cat([g.reshape(-1) for g in got]),
               torch.cat(want))
        xs = [make_input(seed + 10 + i, c.rank, c.world * n, dtype) for i, n in enumerate(sizes)]
        want = [torch.empty(n, dtype=dtype) for n in sizes]
        got = [torch.empty(n, dtype=dtype) for n in sizes]
        for out, x in zip(want, xs):
            dist.reduce_scatter_tensor(out, x, op=op)
        with dist._coalescing_manager():
            for out, x in zip(got, xs):
                dist.reduce_scatter_tensor(out, x, op=op)
        c.same(f"reduce_scatter_tensor coalesced {op_name} {dtype}", torch.cat(got),
               torch.cat(want))
    xs = [make_input(seed + 20 + i, c.rank, n, dtype) for i, n in enumerate(sizes)]
    want = [torch.empty(c.world * n, dtype=dtype) for n in sizes]
    got = [torch.empty(n, c.world, dtype=dtype).t() for n in sizes]  # (world, n), strided
    for out, x in zip(want, xs):
        dist.all_gather_into_tensor(out, x)
    with dist._coalescing_manager():
        for out, x in zip(got, xs):
            dist.all_gather_into_tensor(out, x)
    c.same(f"all_gather_into_tensor coalesced {dtype}", torch.cat([g.reshape(-1) for g in got]),
           torch.cat(want))
    return seed + 30


def check_multi_chunk(c, seed):
    """Tensors of several 2 MiB slot chunks (the transport's chunk loop), float64 and float32."""
    for dtype, numel in ((torch.float64, 600_001), (torch.float32, 1_100_003)):
        seed += 1
        check_all_reduce(c, seed, numel, dtype, "randn", "SUM")
        check_all_reduce(c, seed, numel, dtype, "randn", "AVG")
        check_reduce_scatter(c, seed, numel // c.world + 1, dtype, "randn", "SUM")
        check_data_moves(c, seed, numel // c.world + 1, dtype)
    return seed


def check_async(c):
    """async_op=True: the Work's future carries the finished values (AVG divided) to `then`."""
    t = torch.full((5,), float(c.rank + 1), dtype=torch.float64)
    work = dist.all_reduce(t, op=ReduceOp.AVG, async_op=True)
    doubled = work.get_future().then(lambda f: f.value()[0] * 2).wait()
    work.wait()
    mean = (c.world + 1) / 2
    c.same("async all_reduce AVG then()", doubled, torch.full((5,), 2 * mean, dtype=torch.float64))
    c.same("async all_reduce AVG wait()", t, torch.full((5,), mean, dtype=torch.float64))
    p = torch.full((3,), 2, dtype=torch.int32)
    work = dist.all_reduce(p, op=ReduceOp.PRODUCT, async_op=True)
    c.same("async all_reduce PRODUCT future", work.get_future().wait()[0],
           torch.full((3,), 2 ** c.world, dtype=torch.int32))
    for _ in range(3):
        dist.barrier()
    c.count += 1


def main():
    rank, world = join("ddpd")
    gloo = dist.new_group(backend="gloo")
    c = Checks(rank, world, gloo)
    seed = 0
    for dtype in FLOATS + INTS:
        for numel in SIZES:
            seed = check_reductions(c, seed, numel, dtype)
            seed += 1
            check_data_moves(c, seed, numel, dtype)
            seed += 1
            check_all_to_all(c, seed, numel, dtype)
            seed += 1
            check_send_recv(c, seed, numel, dtype)
            seed += 1
            check_rooted(c, seed, numel, dtype)
        seed = check_coalesced(c, seed + 1, dtype)
        check_all_reduce(c, seed, 33 * 17, dtype, "ints", "SUM", shape=(33, 17))
    seed = check_multi_chunk(c, seed)
    check_async(c)
    emit(transport=ddpd_torch.transport(), checks=c.count, failures=c.failures[:30])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
