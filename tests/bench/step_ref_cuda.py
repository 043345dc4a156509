"""PyTorch eager peer for ddpd's training step on one GPU, on ddpd's own weights.

ddpd's Transformer LM written in plain PyTorch, parameter for parameter under ddpd's names
(embedding, blocks.N.{norm1,norm2,q,k,v,o,w1,w3,w2}, final_norm, head; RMSNorm eps 1e-5, RoPE
over even/odd lanes with theta 10000, SwiGLU, no biases), attention by
F.scaled_dot_product_attention (ddpd's CUDA default), loss as ddpd's (cross-entropy of the
logits in float32). It reads the parameters of a ddpd checkpoint (docs/checkpoints.md: float32
chunks named in metadata.json), then:
  1. the loss of one batch of TOKENS on those weights: ddpd's loss for the step after the
     checkpoint on the same batch must match it;
  2. STEPS steps of AdamW (lr 1e-3, fused=True: what an expert uses), timed with CUDA
     synchronisation around each step; the median after WARMUP steps, and peak memory.
TOKENS is a uint16 token file of exactly CTX + 1 tokens: one window, so every row of every
batch is that window in ddpd's data order too (docs/data.md).
Prints one line: loss=... median_step_ms=... peak_mb=... params=... and the peer's settings.
Usage: python3 step_ref_cuda.py CHECKPOINT_STEP_DIR TOKENS BATCH STEPS WARMUP fp32|bf16"""
import json, math, os, statistics, sys, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_checkpoint_params(step_dir):
    meta = json.load(open(os.path.join(step_dir, "metadata.json")))
    params = {}
    for name, t in meta["tensors"].items():
        if not name.startswith("param/"):
            continue
        flat = np.zeros(int(np.prod(t["shape"])), dtype=np.float32)
        for c in t["chunks"]:
            data = np.fromfile(os.path.join(step_dir, c["file"]), dtype=np.float32,
                               count=c["numel"], offset=c["byte_offset"])
            flat[c["element_offset"]:c["element_offset"] + c["numel"]] = data
        params[name[len("param/"):]] = torch.from_numpy(flat.reshape(t["shape"]))
    return meta["model"], params


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


class Rope:
    def __init__(self, head_dim, t, device, theta=10000.0):
        inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.arange(t, dtype=torch.float32)[:, None] * inv[None, :]
        self.cos, self.sin = angles.cos().to(device), angles.sin().to(device)

    def __call__(self, x):
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * self.cos - x2 * self.sin, x1 * self.sin + x2 * self.cos),
                           -1).flatten(-2)


class Block(nn.Module):
    def __init__(self, d, dff, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(d, dff, bias=False), nn.Linear(d, dff, bias=False)
        self.w2 = nn.Linear(dff, d, bias=False)

    def forward(self, x, rope):
        b, t, d = x.shape
        y = self.norm1(x)
        q, k, v = (m(y).view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for m in (self.q, self.k, self.v))
        q, k = rope(q), rope(k)
        a = F.scaled_dot_product_attention(q.to(v.dtype), k.to(v.dtype), v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        z = self.norm2(x)
        return x + self.w2(F.silu(self.w1(z)) * self.w3(z))


class LM(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.embedding = nn.Embedding(m["vocab_size"], m["d_model"])
        self.blocks = nn.ModuleList(Block(m["d_model"], m["d_ff"], m["num_heads"])
                                    for _ in range(m["num_layers"]))
        self.final_norm = RMSNorm(m["d_model"])
        self.head = nn.Linear(m["d_model"], m["vocab_size"], bias=False)
        self.head_dim = m["d_model"] // m["num_heads"]
        self.rope = None

    def forward(self, tokens):
        if self.rope is None or self.rope.cos.size(0) != tokens.size(1):
            self.rope = Rope(self.head_dim, tokens.size(1), tokens.device)
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x, self.rope)
        return self.head(self.final_norm(x))


def main():
    step_dir, token_file = sys.argv[1], sys.argv[2]
    batch, steps, warmup = map(int, sys.argv[3:6])
    bf16 = sys.argv[6] == "bf16"
    model_shape, params = read_checkpoint_params(step_dir)
    model = LM(model_shape)
    model.load_state_dict(params, strict=True)
    model = model.cuda()
    window = torch.from_numpy(np.fromfile(token_file, dtype=np.uint16).astype(np.int64))
    rows = window.unsqueeze(0).expand(batch, -1).contiguous().cuda()
    inputs, targets = rows[:, :-1], rows[:, 1:]

    def loss_of():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            logits = model(inputs)
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))

    with torch.no_grad():
        first_loss = loss_of().item()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_of().backward()
        opt.step()
        torch.cuda.synchronize()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    n = sum(p.numel() for p in model.parameters())
    print(f"loss={first_loss:.6f} median_step_ms={statistics.median(times) * 1e3:.3f} "
          f"peak_mb={torch.cuda.max_memory_allocated() / 2**20:.1f} params={n} "
          f"settings=torch {torch.__version__}, sdpa, AdamW(fused=True), "
          f"{'bf16 autocast' if bf16 else 'fp32'}, tf32 matmul "
          f"{torch.backends.cuda.matmul.allow_tf32}")


if __name__ == "__main__":
    main()
