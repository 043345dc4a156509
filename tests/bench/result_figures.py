"""Reads a ddpd result JSON on stdin; prints 'median_step_ms median_exposed_ms median_comm_ms'
over the steps after warm-up."""
import json, statistics, sys

result = json.loads(sys.stdin.read())
steps = result["steps"][2:] or result["steps"]
def median_ms(key):
    return statistics.median(s[key] for s in steps) * 1e3
print(f'{result["summary"]["median_step_seconds"] * 1e3:.1f} '
      f'{median_ms("exposed_comm_seconds"):.1f} {median_ms("comm_seconds"):.1f}')
