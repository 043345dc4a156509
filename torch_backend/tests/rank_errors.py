"""One rank of test_errors.py: what ddpd does not serve fails at launch on every rank, with a
NotImplementedError naming the collective, the op, the dtype and the device, and leaves the
group working: the next all-reduce on it gives the right answer at once, so no peer was left
waiting inside a collective."""

import time

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

import ddpd_torch
from rank_common import emit, join


def cases(rank, world):
    """(what, call, words the message must hold)."""
    f32 = torch.ones(6)
    return [
        ("all_reduce PRODUCT", lambda: dist.all_reduce(f32.clone(), op=ReduceOp.PRODUCT),
         ["all_reduce", "PRODUCT", "float32", "cpu"]),
        ("all_reduce AVG int64", lambda: dist.all_reduce(torch.ones(6, dtype=torch.int64),
                                                         op=ReduceOp.AVG),
         ["all_reduce", "AVG", "int64", "cpu", "floating"]),
        ("all_reduce SUM bool", lambda: dist.all_reduce(torch.ones(6, dtype=torch.bool)),
         ["all_reduce", "SUM", "bool", "cpu"]),
        ("all_reduce BAND int32", lambda: dist.all_reduce(torch.ones(6, dtype=torch.int32),
                                                          op=ReduceOp.BAND),
         ["all_reduce", "BAND", "int32", "cpu"]),
        ("reduce_scatter_tensor MAX",
         lambda: dist.reduce_scatter_tensor(torch.empty(3), torch.ones(3 * world),
                                            op=ReduceOp.MAX),
         ["reduce_scatter_tensor", "MAX", "float32", "cpu"]),
        ("all_gather_into_tensor dtypes",
         lambda: dist.all_gather_into_tensor(torch.empty(3 * world, dtype=torch.float64),
                                             torch.ones(3)),
         ["all_gather_into_tensor", "float64", "cpu", "float32"]),
        ("all_to_all_single", lambda: dist.all_to_all_single(torch.empty(2 * world),
                                                             torch.ones(2 * world)),
         ["all_to_all_single", "float32", "cpu"]),
        ("reduce", lambda: dist.reduce(f32.clone(), dst=0),
         ["reduce", "SUM", "float32", "cpu"]),
        ("send/recv", lambda: (dist.send(f32.clone(), dst=1) if rank == 0
                               else dist.recv(f32.clone(), src=0)),
         ["float32", "cpu", "point-to-point"]),
    ]


def main():
    rank, world = join("ddpd")
    failures, checks, slowest = [], 0, 0.0
    for what, call, words in cases(rank, world):
        start = time.monotonic()
        try:
            call()
            failures.append(f"{what}: no error")
        except NotImplementedError as e:
            missing = [w for w in words if w not in str(e)]
            if missing:
                failures.append(f"{what}: the message lacks {missing}: {e}")
        except Exception as e:  # noqa: BLE001  (the wrong kind of error is the finding)
            failures.append(f"{what}: {type(e).__name__} instead of NotImplementedError: {e}")
        slowest = max(slowest, time.monotonic() - start)
        # The group still works: every rank failed at launch, none is inside a collective.
        t = torch.full((4,), float(rank + 1))
        dist.all_reduce(t)
        if not torch.equal(t, torch.full((4,), world * (world + 1) / 2)):
            failures.append(f"after {what}: the next all_reduce gave {t.tolist()}")
        checks += 1
    emit(transport=ddpd_torch.transport(), checks=checks, slowest_error_s=slowest,
         failures=failures)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
