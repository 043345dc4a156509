"""Peer reference: PyTorch FSDP2 (torch.distributed.fsdp.fully_shard; Python, gloo, CPU) on the
DDP peer's model (../shared/peers/torch_ddp_ref.py: LM, Block, RMSNorm are imported from it, not
copied; $DDPD_PEER names another copy of that file).

fully_shard is applied to each transformer block, then to the root LM, whose own group holds the
embedding, the final RMSNorm and the head. Blocks take reshard_after_forward from
$FSDP_RESHARD_AFTER_FORWARD (1, the default: free a block's full parameters after its forward and
all-gather them again in backward; 0: keep them from forward to backward). The root is left at
FSDP2's default for a root (reshard_after_forward=None: not resharded after forward, since
backward needs the head first), as ddpd's fsdp keeps its head unit. One device mesh over all
ranks (CPU, gloo); torch.set_num_threads(1), torch.manual_seed(0), AdamW(lr=1e-3), random tokens
from torch.Generator().manual_seed(1) sliced per rank, all as the DDP peer does.

Usage: PYTHON torch_fsdp2_ref.py WORLD D_MODEL D_FF LAYERS HEADS VOCAB CTX GLOBAL_BATCH STEPS

Rank 0 prints one line with the settings (torch version, backend, reshard_after_forward, world,
parameter count and bytes) and
  median_step_ms        max over ranks of each rank's median step (forward, zero_grad, backward,
                        optimizer step), after 2 warm-up steps (all steps when STEPS <= 3);
  peak_rss_mb           max over ranks of resource.getrusage(RUSAGE_SELF).ru_maxrss (KiB on
                        Linux) / 1024, read after the last step: each process's high-water mark
                        (rss_after_import_mb: the same, read once torch is imported, before the
                        process group and the model: the Python + torch baseline in it);
  peak_unsharded_param_bytes
                        max over ranks, and over the timed steps, of the bytes of unsharded (full)
                        parameters alive at once on the rank.

How peak_unsharded_param_bytes is measured. FSDP2 keeps one FSDPParamGroup per fully_shard'ed
module (module._get_fsdp_state()._fsdp_param_group, torch/distributed/fsdp/_fully_shard/
_fsdp_param_group.py) with a state ShardedState.SHARDED, SHARDED_POST_FORWARD or UNSHARDED
(group.is_unsharded). Every change of state goes through three methods of the group:
_to_unsharded() (after an all-gather's copy-out, when it registers the full parameters on the
module: pre-forward, pre-backward, or a backward prefetch), _to_sharded() (reshard after forward
or after backward) and _to_sharded_post_forward() (reshard to a smaller mesh; unused here). The
script wraps those three methods on each group instance; after every call it sums, over the groups
whose state is UNSHARDED, the bytes of their full parameters (numel x element size of each
FSDPParam's unsharded_param, the tensor registered on the module) and keeps the maximum. The
running value is reset to the current one at the start of each step, so the figure is the peak
within one step, not a leftover of the previous one. Not counted: the flat all-gather buffer a
group's copy-out reads from (FSDP2 frees it after the copy-out, or after the next group's copy-out
in forward, where it overlaps one all-gather with the next copy-out), the padding of each full
parameter's storage to a multiple of the world size, gradients and optimizer state.
"""
import os, resource, statistics, sys, time
import torch, torch.distributed as dist, torch.multiprocessing as mp, torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

peer_file = os.environ.get("DDPD_PEER") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "../../../shared/peers/torch_ddp_ref.py")
sys.path.insert(0, os.path.dirname(os.path.abspath(peer_file)))
import torch_ddp_ref as peer  # noqa: E402  (LM, Block, RMSNorm; its main is guarded)

BACKEND = "gloo"


class UnshardedParamBytes:
    """Bytes of full parameters alive over the FSDP2 parameter groups, and their peak."""

    def __init__(self, groups):
        self.groups = groups
        self.current = self.peak = 0
        for g in groups:
            for name in ("_to_unsharded", "_to_sharded", "_to_sharded_post_forward"):
                setattr(g, name, self._wrap(getattr(g, name)))  # instance attribute shadows it

    def _wrap(self, method):
        def wrapped(*args, **kwargs):
            out = method(*args, **kwargs)
            self.update()
            return out
        return wrapped

    def update(self):
        self.current = sum(fp.unsharded_param.numel() * fp.unsharded_param.element_size()
                           for g in self.groups if g.is_unsharded for fp in g.fsdp_params)
        self.peak = max(self.peak, self.current)

    def start_step(self):
        self.update()
        self.peak = self.current


def run(rank, world, cfg, reshard, port):
    base_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # torch imported
    torch.set_num_threads(1); torch.manual_seed(0)
    d, dff, L, h, V, ctx, gb, steps = cfg
    os.environ["MASTER_ADDR"] = "127.0.0.1"; os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(BACKEND, rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    model = peer.LM(V, ctx, d, dff, L, h)
    nparam = sum(p.numel() for p in model.parameters())
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh)  # root: FSDP2's default, no reshard after forward
    groups = [m._get_fsdp_state()._fsdp_param_group for m in (*model.blocks, model)]
    assert all(g is not None for g in groups), "a fully_shard'ed module has no parameter group"
    meter = UnshardedParamBytes(groups)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    times, peaks = [], []
    for step in range(steps):
        x = torch.randint(0, V, (gb, ctx + 1), generator=g)
        lb = gb // world; xs = x[rank * lb:(rank + 1) * lb]
        meter.start_step()
        t0 = time.perf_counter()
        logits = model(xs[:, :-1]); loss = F.cross_entropy(logits.reshape(-1, V), xs[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
        times.append(time.perf_counter() - t0)
        peaks.append(meter.peak)
    timed = slice(2, None) if steps > 3 else slice(None)
    med = statistics.median(times[timed])
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    mine = (med, rss_mb, max(peaks[timed]), base_rss_mb)
    out = [None] * world; dist.all_gather_object(out, mine)
    if rank == 0:
        med, rss_mb, peak, base_rss_mb = (max(o[i] for o in out) for i in range(4))
        print(f"torch={torch.__version__} backend={BACKEND} fsdp=fully_shard(per block, then root) "
              f"reshard_after_forward={int(reshard)} root_reshard_after_forward=default(0) "
              f"threads={torch.get_num_threads()} world={world} params={nparam} "
              f"full_param_bytes={param_bytes} median_step_ms={med*1e3:.1f} "
              f"peak_rss_mb={rss_mb:.1f} peak_unsharded_param_bytes={peak} "
              f"rss_after_import_mb={base_rss_mb:.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) != 9:
        sys.exit(__doc__.split("\n\n")[2])
    world = int(a[0]); cfg = [int(v) for v in a[1:9]]
    flag = os.environ.get("FSDP_RESHARD_AFTER_FORWARD", "1")
    if flag not in ("0", "1"):
        sys.exit(f"FSDP_RESHARD_AFTER_FORWARD must be 0 or 1, got {flag!r}")
    if cfg[6] % world:
        sys.exit(f"GLOBAL_BATCH {cfg[6]} is not divisible by WORLD {world}")
    mp.spawn(run, args=(world, cfg, flag == "1", peer.free_port()), nprocs=world, join=True)
