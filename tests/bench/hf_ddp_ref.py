"""Peer for tests/bench/bench_hf.sh: PyTorch DistributedDataParallel training transformers' own
LlamaForCausalLM from a model directory (gloo, CPU, one compute thread per rank), configured as an
expert would (DDP_EXPERT=1: gradient_as_bucket_view=True, static_graph=True; otherwise DDP's
defaults). The same weights, batch, context and AdamW as ddpd's run.

--gradient-checkpointing calls transformers' model.gradient_checkpointing_enable() (each decoder
layer recomputed in backward, torch.utils.checkpoint; static_graph=True is what DDP needs with
its reentrant variant), the peer of ddpd's --activation-checkpointing block.

Usage: PYTHON hf_ddp_ref.py MODEL_DIR WORLD GLOBAL_BATCH CONTEXT STEPS [BUCKET_MB]
                            [--gradient-checkpointing]
Prints one line: versions, settings, median_step_ms (max over ranks, after 2 warm-up steps),
tokens_per_s and peak_rss_mb (max over ranks)."""
import os
import resource
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import transformers  # noqa: E402


def run(rank, world, model_dir, batch, context, steps, bucket, port, checkpointing):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if world > 1:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.config.use_cache = False
    model.train()
    if checkpointing:
        model.gradient_checkpointing_enable()
    expert = os.environ.get("DDP_EXPERT") == "1"
    if world > 1:
        kw = dict(gradient_as_bucket_view=True, static_graph=True) if expert else {}
        model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket, **kw)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    vocab = transformers.AutoConfig.from_pretrained(model_dir).vocab_size
    g = torch.Generator().manual_seed(1)
    local = batch // world
    times = []
    for _ in range(steps):
        x = torch.randint(0, vocab, (batch, context + 1), generator=g)[rank * local:(rank + 1) * local]
        t0 = time.perf_counter()
        logits = model(input_ids=x[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                                 x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    median = statistics.median(times[2:] if steps > 3 else times)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if world > 1:
        out = [None] * world
        dist.all_gather_object(out, (median, rss_mb))
        median, rss_mb = max(o[0] for o in out), max(o[1] for o in out)
    if rank == 0:
        print(f"torch={torch.__version__} transformers={transformers.__version__} expert={int(expert)} "
              f"world={world} bucket_cap_mb={bucket} threads=1 "
              f"gradient_checkpointing={int(checkpointing)} median_step_ms={median * 1e3:.1f} "
              f"tokens_per_s={batch * context / median:.0f} peak_rss_mb={rss_mb:.0f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    checkpointing = "--gradient-checkpointing" in sys.argv
    argv = [a for a in sys.argv if a != "--gradient-checkpointing"]
    model_dir, world, batch, context, steps = argv[1], *map(int, argv[2:6])
    bucket = float(argv[6]) if len(argv) > 6 else 25.0
    args = (world, model_dir, batch, context, steps, bucket, free_port(), checkpointing)
    if world == 1:
        run(0, *args)
    else:
        mp.spawn(run, args=args, nprocs=world, join=True)
