"""The whatif validation (run by bench_whatif.sh): one base job measured, every other
configuration predicted from it by `ddpctl whatif`, then run for real; predicted, measured and
the error, for every row, the misses included.

Usage: whatif_validate.py DDPCTL STEPS OUTDIR"""
import json
import os
import statistics
import subprocess
import sys

ddpctl, steps, out = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(out, exist_ok=True)
# The bench config of bench_ddp.sh, with a global batch of 12 so that 1, 2 and 3 ranks divide it.
model = ["--d-model", "256", "--d-ff", "1024", "--layers", "4", "--heads", "4", "--vocab", "10000",
         "--context", "128", "--batch", "12", "--steps", steps, "--warmup-steps", "2",
         "--threads", "1", "--spread-every", "0"]
BASE = ["--strategy", "bucketed", "--bucket-mb", "25"]

# (name, world, change flags for whatif = flags of the real run, link file key or None)
CONFIGS = [
    ("own configuration (bucketed 25 MB)", 2, [], None),
    ("bucketed 1 MB", 2, ["--bucket-mb", "1"], None),
    ("bucketed 5 MB", 2, ["--bucket-mb", "5"], None),
    ("bucketed 10 MB", 2, ["--bucket-mb", "10"], None),
    ("bucketed 100 MB", 2, ["--bucket-mb", "100"], None),
    ("bucketed 1000 MB", 2, ["--bucket-mb", "1000"], None),
    ("naive", 2, ["--strategy", "naive"], None),
    ("flat", 2, ["--strategy", "flat"], None),
    ("overlap", 2, ["--strategy", "overlap"], None),
    ("bucketed 25 MB + ZeRO-1", 2, ["--shard-optimizer"], None),
    ("bucketed 25 MB, 2 micro-batches", 2, ["--grad-accum", "2"], None),
    ("bucketed 25 MB, gloo", 2, ["--transport", "gloo"], "gloo2"),
    ("1 rank", 1, [], None),
    ("bucketed 25 MB, 3 ranks", 3, [], None),
    ("bucketed 5 MB + ZeRO-1, 3 ranks", 3, ["--bucket-mb", "5", "--shard-optimizer"], None),
    ("overlap, 3 ranks", 3, ["--strategy", "overlap"], None),
    ("bucketed 25 MB, 3 ranks gloo", 3, ["--transport", "gloo"], "gloo3"),
    ("flat, 3 ranks gloo", 3, ["--strategy", "flat", "--transport", "gloo"], "gloo3"),
]


def run(args):
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(args)}\n{done.stdout}\n{done.stderr}")
    return done.stdout


def local_ddp(world, flags, path):
    text = run([ddpctl, "local", "--workers", str(world), "--json", "ddp", *model, *BASE, *flags])
    with open(path, "w") as f:
        f.write(text)
    return json.loads(text)


def measured(job):
    rows = [s for s in job["steps"] if s["step"] >= 2] or job["steps"]
    return (statistics.median(s["step_seconds"] for s in rows),
            job["memory"]["after_step"]["peak_bytes"])


def comm_links():
    text = run([ddpctl, "local", "--workers", "3", "--json", "comm", "--transport", "gloo",
                "--sizes", "1MB,4MB,16MB,64MB", "--warmup", "2", "--iters", "5",
                "--world-sizes", "2,3"])
    jobs = json.loads(text)
    jobs = jobs if isinstance(jobs, list) else [jobs]
    links = {}
    for job in jobs:
        path = os.path.join(out, f"comm_gloo_w{job['world_size']}.json")
        with open(path, "w") as f:
            json.dump(job, f)
        links[f"gloo{job['world_size']}"] = path
    return links


base_path = os.path.join(out, "base.json")
base = local_ddp(2, [], base_path)
links = comm_links()
print(f"base: bucketed 25 MB, 2 ranks, {base['transport']}; {steps} steps; links: the base "
      f"job's own all-reduces (shm), gloo from comm jobs at 2 and 3 ranks")
header = f"{'configuration':<38} {'ranks':>5} {'pred ms':>8} {'meas ms':>8} {'error':>7} " \
         f"{'pred MB':>8} {'meas MB':>8} {'mem err':>7}"
print(header)
errors, memory_errors = [], []
for name, world, flags, link in CONFIGS:
    change = [*flags] + (["--world-size", str(world)] if world != 2 else [])
    if link:
        change += ["--link-from", links[link]]
    predicted = json.loads(run([ddpctl, "whatif", "--from-file", base_path, "--json", *change]))
    p_step = predicted["predicted"]["step_seconds"]
    p_peak = predicted["predicted"]["memory"]["peak_bytes"]
    real = local_ddp(world, flags, os.path.join(out, f"run_{len(errors)}.json"))
    m_step, m_peak = measured(real)
    error = (p_step - m_step) / m_step
    memory_error = (p_peak - m_peak) / m_peak
    errors.append(error)
    memory_errors.append(memory_error)
    print(f"{name:<38} {world:>5} {p_step * 1e3:>8.1f} {m_step * 1e3:>8.1f} {error:>+7.1%} "
          f"{p_peak / 1e6:>8.1f} {m_peak / 1e6:>8.1f} {memory_error:>+7.1%}", flush=True)
print(f"fsdp: not predicted (whatif refuses it: its per-unit gathers wait on forward's per-unit "
      f"compute, which the profile does not record)")
absolute = [abs(e) for e in errors]
print(f"step time: median |error| {statistics.median(absolute):.1%}, worst {max(absolute):.1%} "
      f"over {len(errors)} configurations (goal: median <= 10%, worst <= 20%)")
advisor = {name: e for (name, _, _, _), e in zip(CONFIGS, errors) if name.startswith("bucketed")
           and name.endswith(" MB") and name.split()[1] in ("1", "10", "100", "1000")}
print("plan bucket --job (the same replay) at 1, 10, 100, 1000 MB: " +
      ", ".join(f"{name.split()[1]} MB {e:+.1%}" for name, e in advisor.items()))
absolute = [abs(e) for e in memory_errors]
print(f"peak memory: median |error| {statistics.median(absolute):.1%}, worst {max(absolute):.1%} "
      f"(goal: within 10%)")
