"""One rank of test_errors.py: what ddpd does not serve fails at launch on every rank, with a
NotImplementedError naming the collective, the op, the dtype and the device, and leaves the
group working: the next all-reduce on it gives the right answer at once, so no peer was left
waiting inside a collective. A device other than the CPU never reaches the backend ("ddpd" is
registered for the CPU; torch refuses with "No backend type associated with device type");
core's check for it (core/src/shm/served.h) guards ddpd-train. Then a recv with no sender fails
at its group's timeout."""

import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

import ddpd_torch
from rank_common import emit, join

RECV_TIMEOUT_S = 2


def cases(rank, world):
    """(what, call, words the message must hold)."""
    f32 = torch.ones(6)
    return [
        ("all_reduce BAND float32", lambda: dist.all_reduce(f32.clone(), op=ReduceOp.BAND),
         ["all_reduce", "BAND", "float32", "cpu", "integer dtype"]),
        ("all_reduce AVG int64", lambda: dist.all_reduce(torch.ones(6, dtype=torch.int64),
                                                         op=ReduceOp.AVG),
         ["all_reduce", "AVG", "int64", "cpu", "floating"]),
        ("all_reduce SUM bool", lambda: dist.all_reduce(torch.ones(6, dtype=torch.bool)),
         ["all_reduce", "SUM", "bool", "cpu"]),
        ("all_reduce SUM uint16", lambda: dist.all_reduce(torch.ones(6, dtype=torch.uint16)),
         ["all_reduce", "SUM", "uint16", "cpu"]),
        ("all_reduce sparse", lambda: dist.all_reduce(torch.ones(6).to_sparse()),
         ["all_reduce", "SUM", "float32", "cpu", "sparse"]),
        ("reduce_scatter_tensor BXOR float64",
         lambda: dist.reduce_scatter_tensor(torch.empty(3, dtype=torch.float64),
                                            torch.ones(3 * world, dtype=torch.float64),
                                            op=ReduceOp.BXOR),
         ["reduce_scatter_tensor", "BXOR", "float64", "cpu"]),
        ("all_gather_into_tensor dtypes",
         lambda: dist.all_gather_into_tensor(torch.empty(3 * world, dtype=torch.float64),
                                             torch.ones(3)),
         ["all_gather_into_tensor", "float64", "cpu", "float32"]),
        ("all_to_all (lists)",
         lambda: dist.all_to_all([torch.empty(2) for _ in range(world)],
                                 [torch.ones(2) for _ in range(world)]),
         ["all_to_all", "float32", "cpu", "all_to_all_single"]),
        ("reduce BAND float32", lambda: dist.reduce(f32.clone(), dst=0, op=ReduceOp.BAND),
         ["reduce", "BAND", "float32", "cpu", "integer dtype"]),
        ("all_gather_coalesced", lambda: dist.all_gather_coalesced(
            [[torch.empty(6) for _ in range(world)]], [f32]),
         ["all_gather_coalesced", "float32", "cpu", "coalesced forms"]),
    ]


def recv_timeout(rank, world):
    """A recv whose sender never sends fails at its group's timeout, naming the transfer and the
    peer; the group's timeout is init_process_group's (here new_group's: 2 s)."""
    group = dist.new_group(backend="ddpd", timeout=timedelta(seconds=RECV_TIMEOUT_S))
    start, error = time.monotonic(), ""
    if rank == 0:
        try:
            dist.recv(torch.empty(4), src=1, group=group)
        except RuntimeError as e:
            error = str(e)
    seconds = time.monotonic() - start
    dist.barrier()  # rank 1 waits here for rank 0's timeout, then both go on
    return error, seconds


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
    error, seconds = recv_timeout(rank, world)
    emit(transport=ddpd_torch.transport(), checks=checks, slowest_error_s=slowest,
         failures=failures, recv_error=error, recv_seconds=seconds)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
