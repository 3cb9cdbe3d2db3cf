"""The diagnosis of a truncated xplane at every cut size, up to the 20M-event file (issue 13).

Usage (from the repository root; the scaled files come from ``benchmarks/scale.py``)::

    python benchmarks/cuts.py [FILE ...] [--cuts 1000]

For each FILE (default: the scaled TPU traces under ``benchmarks/out``, 40 MB to 842 MB), maps
it and runs :func:`traceview.read.diagnose.xspace_fault` on ``--cuts`` prefixes: every 1/Nth
of the file plus a log-spaced set from 1 byte, as a reader would see the file cut there. It
prints how many cuts were called truncated, re-encoded, or neither, the slowest diagnosis,
and the EF BF BD sequences the whole valid file holds (the old absolute rule called a file
re-encoded from 3).
"""

from __future__ import annotations

import argparse
import mmap
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from traceview.read.diagnose import REPLACEMENT, xspace_fault  # noqa: E402


def run(path: Path, n_cuts: int) -> dict:
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    size = len(mm)
    cuts = {max(1, size * i // n_cuts) for i in range(1, n_cuts)}
    k = 1
    while k < size:
        cuts.add(k)
        k = k * 2 + 1
    out = {"truncated": 0, "re-encoded": 0, "other": 0, "slowest_s": 0.0, "cuts": len(cuts)}
    view = memoryview(mm)
    for at in sorted(cuts):
        t = time.perf_counter()
        why = xspace_fault(view[:at]) or ""
        out["slowest_s"] = max(out["slowest_s"], time.perf_counter() - t)
        key = "re-encoded" if "re-encoded" in why else "truncated" if "truncated" in why else "other"
        out[key] += 1
    out["replacements_in_file"] = sum(bytes(view[i:i + (64 << 20)]).count(REPLACEMENT)
                                      for i in range(0, size, (64 << 20) - 2))
    view.release()
    mm.close()
    out["bytes"] = size
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--cuts", type=int, default=1000)
    args = ap.parse_args(argv)
    files = [Path(f) for f in args.files] or sorted((ROOT / "benchmarks" / "out").glob("tpu_v6e_x*.xplane.pb"))
    for f in files:
        r = run(f, args.cuts)
        print(f"{f.name}: {r['bytes']:,} bytes, {r['replacements_in_file']} EF BF BD in the file; {r['cuts']} cuts: "
              f"{r['truncated']} truncated, {r['re-encoded']} re-encoded, {r['other']} other; "
              f"slowest diagnosis {r['slowest_s'] * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
