"""Resident memory after each stage of one analysis (``benchmarks/RESULTS.md``, issue 23):
imports, ``load`` (no cache), ``build_report``; with the op events' and module runs' own sizes.

    python benchmarks/memory_stages.py TRACE
"""

from __future__ import annotations

import sys
import time


def rss() -> str:
    """(VmRSS, VmHWM) of this process, from /proc/self/status (Linux)."""
    d = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return f"resident {d['VmRSS'].strip()}, peak {d['VmHWM'].strip()}"


def main(path: str) -> None:
    import numpy  # noqa: F401
    import polars  # noqa: F401

    import traceview  # noqa: F401
    from traceview.analysis.report import build_report
    from traceview.model.load import load

    print("imports:", rss())
    t = time.perf_counter()
    prof = load(path, cache=False)
    print(f"load {time.perf_counter() - t:.2f} s:", rss())
    print(f"  op events {prof.table.height:,} ({prof.table.events.estimated_size() / 1e6:.0f} MB), "
          f"descriptions {prof.table.attrs.height:,}, module runs {prof.module_runs.height:,} "
          f"({prof.module_runs.estimated_size() / 1e6:.0f} MB)")
    t = time.perf_counter()
    build_report(prof)
    print(f"build_report {time.perf_counter() - t:.2f} s:", rss())


if __name__ == "__main__":
    main(sys.argv[1])
