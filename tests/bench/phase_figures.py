"""Reads a ddpd result JSON on stdin; prints rank 0's median phase times (ms) over the steps
after 2 warm-up steps, in torch_ddp_profile.py's format. other = the step minus forward,
backward, optimizer and exposed communication: zero_grad (bucketed zeroes its flat buffers)."""
import json, statistics, sys

steps = json.loads(sys.stdin.read())["steps"]
steps = steps[2:] or steps
def median_ms(key):
    return statistics.median(s[key] for s in steps) * 1e3
print(" ".join(f"{name}_ms={median_ms(key):.1f}" for name, key in (
    ("forward", "forward_seconds"), ("backward", "backward_seconds"),
    ("optimizer", "optimizer_seconds"), ("step", "step_seconds"), ("comm", "comm_seconds"),
    ("exposed", "exposed_comm_seconds"))) +
    f" other_ms={statistics.median(s['step_seconds'] - s['forward_seconds'] - s['backward_seconds'] - s['optimizer_seconds'] - s['exposed_comm_seconds'] for s in steps) * 1e3:.1f}")
