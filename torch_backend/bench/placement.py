"""Where the bench's ranks run: one core each, as mpirun places them by default."""

import os


def core_binding(rank, world, bind):
    """Popen's preexec_fn that binds rank `rank` to the rank-th core this process may run on,
    while the cores suffice (world <= cores), as mpirun binds by default; None to leave it free.
    tests/bench/bench_torch_backend.sh places every peer alike (its BIND)."""
    cores = sorted(os.sched_getaffinity(0))
    if not bind or world > len(cores):
        return None
    return lambda: os.sched_setaffinity(0, {cores[rank]})
