"""Peer reference with a DDP communication hook: the peer script's model and loop
(../shared/peers/torch_ddp_ref.py), with torch.distributed.algorithms.ddp_comm_hooks'
fp16_compress_hook or bf16_compress_hook registered on DistributedDataParallel.
Usage: .venv/bin/python torch_ddp_hook_ref.py HOOK WORLD D_MODEL D_FF LAYERS HEADS VOCAB CTX
       GLOBAL_BATCH STEPS [bucket_mb]      (HOOK: fp16 | bf16)
Prints median step ms (max over ranks), or HOOK_ERROR <message> when the hook cannot run."""
import importlib.util, os, statistics, sys, time
import torch, torch.distributed as dist, torch.multiprocessing as mp, torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

peer_path = os.path.join(os.path.dirname(__file__), "../../../shared/peers/torch_ddp_ref.py")
spec = importlib.util.spec_from_file_location("torch_ddp_ref", peer_path)
peer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(peer)

def run(rank, world, hook, cfg, port):
    torch.set_num_threads(1); torch.manual_seed(0)
    d, dff, L, h, V, ctx, gb, steps, bucket = cfg
    os.environ["MASTER_ADDR"] = "127.0.0.1"; os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = nn.parallel.DistributedDataParallel(peer.LM(V, ctx, d, dff, L, h), bucket_cap_mb=bucket)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    times = []
    try:
        model.register_comm_hook(None, default_hooks.fp16_compress_hook if hook == "fp16"
                                 else default_hooks.bf16_compress_hook)
        for step in range(steps):
            x = torch.randint(0, V, (gb, ctx + 1), generator=g)
            lb = gb // world; xs = x[rank * lb:(rank + 1) * lb]
            t0 = time.perf_counter()
            logits = model(xs[:, :-1]); loss = F.cross_entropy(logits.reshape(-1, V), xs[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
            times.append(time.perf_counter() - t0)
    except Exception as e:  # the hook's collective failed: report it, as the benchmark asks
        if rank == 0: print(f"HOOK_ERROR {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)
        os._exit(0)
    med = statistics.median(times[2:]) if steps > 3 else statistics.median(times)
    out = [None] * world; dist.all_gather_object(out, med)
    if rank == 0: print(f"world={world} hook={hook} median_step_ms={max(out)*1e3:.1f}", flush=True)
    dist.destroy_process_group()

if __name__ == "__main__":
    a = sys.argv[1:]; hook = a[0]; world = int(a[1])
    cfg = [int(v) for v in a[2:10]] + [float(a[10]) if len(a) > 10 else 25.0]
    mp.spawn(run, args=(world, hook, cfg, peer.free_port()), nprocs=world, join=True)
