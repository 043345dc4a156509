"""All-reduce bus bandwidth of "ddpd" against Gloo, in the same processes, one host.

    .venv/bin/python torch_backend/bench/allreduce_busbw.py [--world 2] [--max-mib 64]

Starts --world ranks of itself (plain MASTER_ADDR/RANK/WORLD_SIZE). Each size runs on both
groups in alternation, after warm-up, and the median of --rounds timings of --iters calls is
kept. busbw = algbw * 2(W-1)/W (nccl-tests' convention); algbw = bytes / time. Rank 0 prints a
Markdown table. Every result is checked against the expected sum first, as nccl-tests does.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--min-kib", type=int, default=1)
    p.add_argument("--max-mib", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    return p.parse_args()


def launch(args):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(args.world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(args.world), OMP_NUM_THREADS=str(args.threads))
        procs.append(subprocess.Popen([sys.executable, __file__, *sys.argv[1:]], env=env))
    return max(p.wait() for p in procs)


def iterations(nbytes):
    # About 64 MiB moved per timing, at least 3 calls: small sizes need many calls to time.
    return max(3, min(2000, (64 << 20) // max(nbytes, 1)))


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


def measure(args):
    import torch
    import torch.distributed as dist

    import ddpd_torch

    dist.init_process_group("ddpd")
    world, rank = dist.get_world_size(), dist.get_rank()
    groups = {"ddpd": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    rows, nbytes = [], args.min_kib << 10
    while nbytes <= args.max_mib << 20:
        numel = nbytes // 4
        tensor = torch.ones(numel)
        medians = {}
        for name, group in groups.items():
            verify(torch, dist, numel, group, world)
            timed(tensor, group, 2)  # warm-up
        iters = iterations(nbytes)
        samples = {name: [] for name in groups}
        for _ in range(args.rounds):
            for name, group in groups.items():
                samples[name].append(timed(tensor, group, iters))
        for name in groups:
            medians[name] = statistics.median(samples[name])
        rows.append((nbytes, medians))
        nbytes *= 4
    if rank == 0:
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
