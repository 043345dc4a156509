"""One rank of test_failures.py.

"kill": every rank all-reduces 4 MiB in a loop and prints LOOPING once it is in it; the test
SIGKILLs one rank from outside, mid-collective, and each survivor's all-reduce must fail with an
error naming that rank, before init_process_group's timeout (TIMEOUT_S["kill"]). Each survivor
reports the wall-clock time of its failure, which the test subtracts from the kill's.
"timeout": the last rank stays away from the second all-reduce and the others' must fail at
init_process_group's timeout (TIMEOUT_S["timeout"]), saying so."""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import ddpd_torch  # noqa: F401
from rank_common import emit

# init_process_group's timeout by mode. "kill" is detected by the shm group's liveness checks
# (the pid is gone, or, while the killed rank is an unreaped zombie, its heartbeat has been
# silent for 2 s), long before this.
TIMEOUT_S = {"kill": 20, "timeout": 3}
LOOPING = "LOOPING"
DONE_KEY = "ddpd-test-done"


def leave_together(expected):
    """Waits on the job's store (rank 0's TCPStore, which outlives the broken group) until
    `expected` ranks have finished, so that no rank exits while a peer may still be deciding
    which rank is gone (a survivor that left early could be the one it names)."""
    store = dist.distributed_c10d._get_default_store()
    store.add(DONE_KEY, 1)
    deadline = time.monotonic() + 60
    try:
        while store.add(DONE_KEY, 0) < expected and time.monotonic() < deadline:
            time.sleep(0.01)
        if dist.get_rank() == 0:
            time.sleep(0.2)  # the others read the count before the store goes
    except RuntimeError:
        pass  # rank 0, and its store, left: everyone is done
    os._exit(0)  # the group is broken: skip destroy_process_group's goodbyes to a gone peer


def fail_in_all_reduce(t):
    """Runs all_reduce until one fails: (error, wall-clock time of the failure, count)."""
    count = 0
    while True:
        try:
            dist.all_reduce(t)
        except RuntimeError as e:
            return str(e), time.time(), count
        count += 1
        if count == 1:
            print(LOOPING, flush=True)


def main():
    mode = sys.argv[1]
    dist.init_process_group("ddpd", timeout=timedelta(seconds=TIMEOUT_S[mode]))
    rank, world = dist.get_rank(), dist.get_world_size()
    if mode == "kill":
        error, failed_at, count = fail_in_all_reduce(torch.ones(1 << 20))
        emit(error=error, failed_at=failed_at, all_reduces=count)
        leave_together(world - 1)
    t = torch.ones(1000)
    dist.all_reduce(t)
    start, error = time.monotonic(), ""
    if rank != world - 1:
        try:
            dist.all_reduce(t)
        except RuntimeError as e:
            error = str(e)
    emit(error=error, seconds=time.monotonic() - start)
    leave_together(world)


if __name__ == "__main__":
    main()
