"""Where a PyTorch DDP step's time goes, by torch.profiler: the peer's model and loop
(../shared/peers/torch_ddp_ref.py, imported from PEER), DDP as an expert configures it
(gradient_as_bucket_view, static_graph), one thread per rank, Gloo. Profiles the steps after 2
warm-up steps on every rank and prints rank 0's medians (ms) over those steps:
  forward, backward (DDP's wait for its last all-reduce included), optimizer (zero_grad and
  AdamW), step; comm = gloo:all_reduce events' total time (on Gloo's threads, overlapped with
  backward); exposed = backward at N ranks minus backward in one process (the run prints both).
Usage: torch_ddp_profile.py PEER WORLD d dff L h V ctx global_batch steps bucket_mb"""
import importlib.util, os, statistics, sys, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function


def load_peer(path):
    spec = importlib.util.spec_from_file_location("torch_ddp_ref", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(rank, world, peer_path, cfg, port):
    peer = load_peer(peer_path)
    torch.set_num_threads(1); torch.manual_seed(0)
    d, dff, L, h, V, ctx, gb, steps, bucket = cfg
    if world > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"; os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
    model = peer.LM(V, ctx, d, dff, L, h)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(
            model, bucket_cap_mb=bucket, gradient_as_bucket_view=True, static_graph=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    phases = {"forward": [], "backward": [], "optimizer": [], "step": []}

    def one_step(record):
        x = torch.randint(0, V, (gb, ctx + 1), generator=g)
        lb = gb // world; xs = x[rank * lb:(rank + 1) * lb]
        t = [time.perf_counter()]
        with record_function("forward"):
            logits = model(xs[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, V), xs[:, 1:].reshape(-1))
        t.append(time.perf_counter())
        with record_function("backward"):
            loss.backward()
        t.append(time.perf_counter())
        with record_function("optimizer"):
            opt.step(); opt.zero_grad(set_to_none=True)
        t.append(time.perf_counter())
        if record:
            for name, a, b in (("forward", 0, 1), ("backward", 1, 2), ("optimizer", 2, 3),
                               ("step", 0, 3)):
                phases[name].append((t[b] - t[a]) * 1e3)

    for _ in range(2):
        one_step(False)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps - 2):
            one_step(True)
    comm_us = sum(e.cpu_time_total for e in prof.key_averages() if "all_reduce" in e.key)
    medians = {k: statistics.median(v) for k, v in phases.items()}
    if world > 1:
        dist.destroy_process_group()
    if rank == 0:
        print(f"torch={torch.__version__} world={world} " +
              " ".join(f"{k}_ms={v:.1f}" for k, v in medians.items()) +
              f" comm_ms={comm_us / 1e3 / (steps - 2):.1f}", flush=True)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


if __name__ == "__main__":
    a = sys.argv[1:]
    peer_path, world = a[0], int(a[1])
    cfg = [int(v) for v in a[2:10]] + [float(a[10])]
    if world == 1:
        run(0, 1, peer_path, cfg, 0)
    else:
        mp.spawn(run, args=(world, peer_path, cfg, free_port()), nprocs=world, join=True)
