"""Peer for ddpd-train's step time on one GPU: the model of ../shared/peers/torch_ddp_ref.py
(imported from there, unchanged: it uses scaled_dot_product_attention when PyTorch has it)
trained by plain PyTorch on CUDA with AdamW(lr 1e-3) on random tokens, timed with CUDA
synchronisation around each step. Prints median_step_ms=... peak_mb=... params=...
Usage: $PYTHON step_ref_cuda.py PEER_SCRIPT D_MODEL D_FF LAYERS HEADS VOCAB CTX BATCH STEPS WARMUP [bf16]"""
import importlib.util, statistics, sys, time, torch
import torch.nn.functional as F


def main():
    peer_path = sys.argv[1]
    d, dff, layers, heads, vocab, ctx, batch, steps, warmup = map(int, sys.argv[2:11])
    bf16 = len(sys.argv) > 11 and sys.argv[11] == "bf16"
    spec = importlib.util.spec_from_file_location("peer", peer_path)
    peer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peer)
    torch.manual_seed(0)
    model = peer.LM(vocab, ctx, d, dff, layers, heads).cuda()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    times = []
    torch.cuda.reset_peak_memory_stats()
    for step in range(steps):
        tokens = torch.randint(0, vocab, (batch, ctx + 1), generator=g).cuda()
        torch.cuda.synchronize()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    print(f"median_step_ms={statistics.median(times) * 1e3:.3f} "
          f"peak_mb={torch.cuda.max_memory_allocated() / 2**20:.1f} params={params} "
          f"loss={loss.item():.4f} torch={torch.__version__}")


if __name__ == "__main__":
    main()
