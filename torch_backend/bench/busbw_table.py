"""The table of tests/bench/bench_torch_backend.sh: reads "ROW <world> <peer> <bytes> <seconds>"
lines on stdin (median seconds per all-reduce call) and prints, per world, one Markdown table:
size, then algbw / busbw in GB/s for each peer, then the ratios ddpd/gloo and ddpd/openmpi (of
busbw, which is the inverse ratio of the times). algbw = bytes / time, busbw = algbw * 2(W-1)/W
(nccl-tests' convention). A peer that did not run shows "–"; the goals' cells are marked "*"
where ddpd misses them (>= 3x Gloo and >= Open MPI from 64 KiB up).
"""

import sys
from collections import defaultdict

PEERS = ("ddpd", "gloo", "openmpi", "oneccl")
GOAL_FROM = 64 << 10


def size_text(nbytes):
    if nbytes >= 1 << 20:
        return f"{nbytes >> 20} MiB"
    return f"{nbytes >> 10} KiB" if nbytes >= 1 << 10 else f"{nbytes} B"


def read(lines):
    times = defaultdict(dict)  # (world, bytes) -> peer -> seconds
    for line in lines:
        parts = line.split()
        if len(parts) == 5 and parts[0] == "ROW":
            times[(int(parts[1]), int(parts[3]))][parts[2]] = float(parts[4])
    return times


def ratio(t, a, b, goal):
    if a not in t or b not in t:
        return "–"
    r = t[b] / t[a]
    return f"{r:.2f}x" + ("*" if goal is not None and r < goal else "")


def table(world, rows):
    factor = 2 * (world - 1) / world
    peers = [p for p in PEERS if any(p in t for _, t in rows)]
    print(f"world {world}: algbw / busbw, GB/s (median of rounds)")
    print("| size | " + " | ".join(peers) + " | ddpd/gloo | ddpd/openmpi |")
    print("| ---: | " + " | ".join("---:" for _ in peers) + " | ---: | ---: |")
    for nbytes, t in rows:
        cells = []
        for p in peers:
            if p in t:
                alg = nbytes / t[p] / 1e9
                cells.append(f"{alg:.2f} / {alg * factor:.2f}")
            else:
                cells.append("–")
        goal = nbytes >= GOAL_FROM
        print(f"| {size_text(nbytes)} | " + " | ".join(cells) + " | " +
              ratio(t, "ddpd", "gloo", 3.0 if goal else None) + " | " +
              ratio(t, "ddpd", "openmpi", 1.0 if goal else None) + " |")
    print()


def main():
    times = read(sys.stdin)
    for world in sorted({w for w, _ in times}):
        table(world, sorted((b, t) for (w, b), t in times.items() if w == world))


if __name__ == "__main__":
    main()
