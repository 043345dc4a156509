"""All-reduce bus bandwidth of "ddpd" against Gloo, in the same processes, one host.

    .venv/bin/python torch_backend/bench/allreduce_busbw.py [--world 2] [--max-mib 64]
        [--sizes BYTES,...] [--rows]

Starts --world ranks of itself (plain MASTER_ADDR/RANK/WORLD_SIZE, LOCAL_WORLD_SIZE as torchrun
sets it). Each size runs on both groups in alternation, after two warm-up calls, and the median
of --rounds timings of iterations() calls on zeros (a sum that stays finite) is kept; the C++
peers of tests/bench/bench_torch_backend.sh time the same way (allreduce_bench_loop.h). busbw = algbw * 2(W-1)/W (nccl-tests' convention); algbw = bytes / time. Rank 0 prints a
Markdown table. Every result is checked against the expected sum first, as nccl-tests does.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

from placement import core_binding


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--min-kib", type=int, default=1)
    p.add_argument("--max-mib", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--sizes", default="", help="comma-separated bytes (instead of min/max)")
    p.add_argument("--rows", action="store_true",
                   help="print 'ROW <peer> <bytes> <seconds>' lines instead of the table")
    p.add_argument("--bind-cores", action="store_true",
                   help="bind rank r to the r-th core it may run on, while the cores suffice")
    return p.parse_args()



def launch(args):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(args.world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(args.world), LOCAL_WORLD_SIZE=str(args.world),
                   OMP_NUM_THREADS=str(args.threads))
        procs.append(subprocess.Popen([sys.executable, __file__, *sys.argv[1:]], env=env,
                                      preexec_fn=core_binding(rank, args.world, args.bind_cores)))
    return max(p.wait() for p in procs)


def iterations(nbytes, warm_seconds):
    # About 64 MiB moved per timing (small sizes need many calls to time), at most about 0.25 s
    # of calls by the warm-up's time per call, at least 3 calls. allreduce_bench_loop.h, which
    # times the C++ peers, has the same rule.
    by_bytes = min(2000, (64 << 20) // max(nbytes, 1))
    return max(3, min(by_bytes, int(0.25 / max(warm_seconds, 1e-9))))


def warm_up(torch, dist, tensor, group):
    """Two calls; rank 0's seconds per call, on every rank (so all run the same count)."""
    per_call = torch.tensor([timed(tensor, group, 2)], dtype=torch.float64)
    if dist.get_rank() != 0:
        per_call.zero_()
    dist.all_reduce(per_call, group=group)
    return per_call.item()


def timed(tensor, group, iters):
    import torch.distributed as dist

    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor, group=group)
    return (time.perf_counter() - start) / iters


def verify(torch, dist, numel, group, world):
    t = torch.full((numel,), float(dist.get_rank() + 1))
    dist.all_reduce(t, group=group)
    expected = world * (world + 1) / 2
    if not torch.equal(t, torch.full((numel,), expected)):
        raise SystemExit(f"all_reduce of {numel} floats gave a wrong sum on {group}")


def sizes(args):
    if args.sizes:
        return [int(v) for v in args.sizes.split(",")]
    out, nbytes = [], args.min_kib << 10
    while nbytes <= args.max_mib << 20:
        out.append(nbytes)
        nbytes *= 4
    return out


def measure(args):
    import torch
    import torch.distributed as dist

    import ddpd_torch

    dist.init_process_group("ddpd")
    world, rank = dist.get_world_size(), dist.get_rank()
    groups = {"ddpd": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    rows = []
    for nbytes in sizes(args):
        numel = nbytes // 4
        tensor = torch.zeros(numel)
        medians, iters = {}, {}
        for name, group in groups.items():
            verify(torch, dist, numel, group, world)
            iters[name] = iterations(nbytes, warm_up(torch, dist, tensor, group))
        samples = {name: [] for name in groups}
        for _ in range(args.rounds):
            for name, group in groups.items():
                samples[name].append(timed(tensor, group, iters[name]))
        for name in groups:
            medians[name] = statistics.median(samples[name])
        rows.append((nbytes, medians))
        if rank == 0 and args.rows:
            for name, seconds in medians.items():
                print(f"ROW {name} {nbytes} {seconds:.9g}", flush=True)
    if rank == 0 and args.rows:
        print(f"VERSION torch {torch.__version__} transport {ddpd_torch.transport()}")
    elif rank == 0:
        report(rows, world, torch.__version__, ddpd_torch.transport())
    dist.destroy_process_group()


def size_text(nbytes):
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def report(rows, world, version, transport):
    factor = 2 * (world - 1) / world
    print(f"world {world}, torch {version}, ddpd transport {transport}, float32 SUM, "
          "median of rounds")
    print("| size | ddpd us | gloo us | ddpd busbw GB/s | gloo busbw GB/s | ddpd / gloo |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for nbytes, t in rows:
        bus = {k: nbytes / v * factor / 1e9 for k, v in t.items()}
        print(f"| {size_text(nbytes)} | {t['ddpd'] * 1e6:.1f} | {t['gloo'] * 1e6:.1f} | "
              f"{bus['ddpd']:.2f} | {bus['gloo']:.2f} | {t['gloo'] / t['ddpd']:.2f}x |")


def main():
    args = parse()
    if "RANK" not in os.environ:
        sys.exit(launch(args))
    measure(args)


if __name__ == "__main__":
    main()
