"""Peer for `ddpd-bench-attention --device cuda --json`: PyTorch's own attention on the same GPU
and shapes. torch.nn.functional.scaled_dot_product_attention (PyTorch picks its fused kernel:
FlashAttention for bf16, memory-efficient attention for fp32) and the same naive attention
in PyTorch ops, forward+backward per call, causal. Prints one JSON object per point with the
fields the C++ benchmark prints: {"seq","head_dim","sdpa":{ms,extra_mb}|{oom},"torch_naive":...}.
Usage: $PYTHON attention_sdpa_ref.py [--max-seq 4096] [--head-dims 32,64] [--dtype fp32|bf16]
       [--batch 1] [--heads 4] [--reps 3]"""
import argparse, json, math, torch
import torch.nn.functional as F


def naive(q, k, v):
    t = q.shape[-2]
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return s.softmax(-1) @ v


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def measure(fn, a, t, d, dtype):
    try:
        torch.manual_seed(0)
        q, k, v = (torch.randn(a.batch, a.heads, t, d, device="cuda", dtype=dtype, requires_grad=True)
                   for _ in range(3))
        fn(q, k, v).sum().backward()  # warm-up
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(a.reps):
            fn(q, k, v).sum().backward()
        end.record()
        end.synchronize()
        return {"ms": start.elapsed_time(end) / a.reps,
                "extra_mb": (torch.cuda.max_memory_allocated() - before) / 2**20}
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return {"oom": True}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max-seq", type=int, default=4096)
    p.add_argument("--head-dims", default="32,64")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--reps", type=int, default=3)
    a = p.parse_args()
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    for d in (int(x) for x in a.head_dims.split(",")):
        t, naive_fits = 256, True
        while t <= a.max_seq:
            row = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "dtype": a.dtype, "seq": t, "head_dim": d, "sdpa": measure(sdpa, a, t, d, dtype)}
            row["torch_naive"] = measure(naive, a, t, d, dtype) if naive_fits else {"oom": True}
            naive_fits = "oom" not in row["torch_naive"]
            print(json.dumps(row), flush=True)
            t *= 2


if __name__ == "__main__":
    main()
