"""Medians of ``benchmarks/alternate.sh``'s runs as a markdown table: wall (range), CPU
(user + sys), peak MB (max RSS KiB x 1.024 / 1000) per (trace, command), base against new.

    python benchmarks/alternate_summary.py OUT
"""

from __future__ import annotations

import collections
import statistics
import sys


def main(path: str) -> None:
    runs: dict = collections.defaultdict(list)
    for line in open(path):
        parts = line.split()
        if len(parts) != 7:  # a line /usr/bin/time wrote about a failed command
            continue
        trace, cmd, side, wall, user, sys_s, rss = parts
        runs[(trace, cmd, side)].append((float(wall), float(user) + float(sys_s), int(rss) * 1.024 / 1000))
    print("| trace | command | base wall s | new wall s | base CPU s | new CPU s | base peak MB | new peak MB "
          "| wall ratio | peak ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for trace, cmd in dict.fromkeys((k[0], k[1]) for k in runs):
        b, n = runs[(trace, cmd, "b")], runs[(trace, cmd, "n")]
        if not b or not n:
            continue

        def med(xs, i):
            return statistics.median(x[i] for x in xs)

        def rng(xs):
            return f"({min(x[0] for x in xs):.2f}-{max(x[0] for x in xs):.2f})"

        print(f"| {trace} | {cmd} | {med(b, 0):.2f} {rng(b)} | {med(n, 0):.2f} {rng(n)} | {med(b, 1):.2f} | "
              f"{med(n, 1):.2f} | {med(b, 2):.0f} | {med(n, 2):.0f} | {med(n, 0) / med(b, 0):.2f} | "
              f"{med(n, 2) / med(b, 2):.2f} |")


if __name__ == "__main__":
    main(sys.argv[1])
