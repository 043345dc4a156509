"""One rank of test_failures.py. "kill": after a first all-reduce, the last rank SIGKILLs itself
and the others' next all-reduce must fail naming it, long before the 30 s timeout. "timeout":
the last rank sleeps past init_process_group's 3 s timeout and the others' all-reduce must fail
saying so."""

import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import ddpd_torch  # noqa: F401
from rank_common import emit

# init_process_group's timeout by mode. "kill" is detected by the shm group's liveness checks:
# the pid is gone, or, while the killed rank is an unreaped zombie, its heartbeat has been silent
# for 2 s.
TIMEOUT_S = {"kill": 30, "timeout": 3}


def main():
    mode = sys.argv[1]
    dist.init_process_group("ddpd", timeout=timedelta(seconds=TIMEOUT_S[mode]))
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.ones(1000)
    dist.all_reduce(t)
    last = rank == world - 1
    if last and mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if last and mode == "timeout":
        time.sleep(2 * TIMEOUT_S[mode])
        emit(error="", seconds=0.0)
        os._exit(0)  # its peers have failed: nothing to meet them in
    start = time.monotonic()
    error = ""
    try:
        dist.all_reduce(t)
    except RuntimeError as e:
        error = str(e)
    emit(error=error, seconds=time.monotonic() - start)
    # Stay a moment: a survivor that exits at once could be the gone rank the other one names.
    time.sleep(3)
    os._exit(0)  # the group is broken: skip destroy_process_group's goodbyes to a dead peer


if __name__ == "__main__":
    main()
