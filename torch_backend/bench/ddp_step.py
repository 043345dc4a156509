"""PyTorch DDP's median step on the bench model with a given backend: "ddpd" or "gloo".

    .venv/bin/python torch_backend/bench/ddp_step.py PEER BACKEND WORLD d dff L h V ctx batch \
        steps bucket_mb [bind]

With "bind", rank r runs on the r-th core it may use, while the cores suffice (as mpirun binds).

The model, data and loop are the PyTorch DDP peer's (../shared/peers/torch_ddp_ref.py, loaded
from PEER): the same seed, the same batches, DDP with its defaults and bucket_cap_mb, AdamW, one
intra-op thread per rank. Only the backend string differs, so the two runs time the same work.
Prints "DDP <backend> <world> <median step ms>": the median over the steps after 2 warm-up
steps, the maximum over ranks (the step a job waits for).
"""

import importlib.util
import os
import socket
import statistics
import subprocess
import sys
import time

from placement import core_binding


def load_peer(path):
    spec = importlib.util.spec_from_file_location("torch_ddp_ref", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def launch(argv):
    world = int(argv[2])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, __file__, *argv], env=env,
                                      preexec_fn=core_binding(rank, world, argv[12:13] == ["bind"])))
    return max(p.wait() for p in procs)


def train(argv):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    import ddpd_torch  # noqa: F401  registers "ddpd"

    peer = load_peer(argv[0])
    backend = argv[1]
    d, dff, layers, heads, vocab, ctx, batch, steps = (int(v) for v in argv[3:11])
    bucket = float(argv[11])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    model = torch.nn.parallel.DistributedDataParallel(
        peer.LM(vocab, ctx, d, dff, layers, heads), bucket_cap_mb=bucket)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    times = []
    for _ in range(steps):
        x = torch.randint(0, vocab, (batch, ctx + 1), generator=g)
        local = batch // world
        xs = x[rank * local:(rank + 1) * local]
        start = time.perf_counter()
        logits = model(xs[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), xs[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
    median = statistics.median(times[2:])
    medians = [None] * world
    dist.all_gather_object(medians, median)
    if rank == 0:
        print(f"DDP {backend} {world} {max(medians) * 1e3:.1f}", flush=True)
    dist.destroy_process_group()


def main():
    if len(sys.argv) not in (13, 14):
        sys.exit(__doc__)
    if "RANK" not in os.environ:
        sys.exit(launch(sys.argv[1:]))
    train(sys.argv[1:])


if __name__ == "__main__":
    main()
