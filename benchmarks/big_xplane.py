"""Synthetic XSpaces that stress the xplane reader's per-plane and per-description costs
(issue 23.5), and a timer for them.

* :func:`many_planes` — a merged multi-rank profile: ``n`` TPU device planes
  (``/device:TPU:<i>``, as tpu-inference's ``merge_xprof.py`` writes one per rank), each with
  an ``XLA Modules`` line (one execution) and an ``XLA Ops`` line of ``ops`` op events named
  by HLO text.
* :func:`many_descriptions` — one TPU plane whose ``XLA Ops`` line holds ``n`` events of ``n``
  distinct XEventMetadata (op descriptions), each with its program id, category and costs.

Usage::

    python benchmarks/big_xplane.py planes 4096 /tmp/NAME/planes.xplane.pb
    python benchmarks/big_xplane.py descriptions 1000000 /tmp/NAME/desc.xplane.pb

Each writes the file, then reads it with ``traceview.model.from_xplane.read_xplane`` and
prints the read time, the op events and descriptions read and the peak RSS (``ru_maxrss``).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

_STATS = ["program_id", "hlo_category", "flops", "bytes_accessed", "device_offset_ps", "device_duration_ps"]


def _plane(xs, name: str, n_ops: int, distinct: int, t0_ps: int = 0, prog: int = 7):
    """Append a TPU plane with ``n_ops`` op events over ``distinct`` descriptions."""
    p = xs.planes.add()
    p.id = len(xs.planes)
    p.name = name
    sid = {}
    for i, s in enumerate(_STATS, start=1):
        p.stat_metadata[i].id = i
        p.stat_metadata[i].name = s
        sid[s] = i
    mod = p.event_metadata[1]
    mod.id, mod.name = 1, f"jit_step({prog})"
    for k in range(distinct):
        mid = k + 2
        md = p.event_metadata[mid]
        md.id = mid
        md.name = f"%fusion.{k} = f32[8,{k % 512 + 1}]{{1,0}} fusion(f32[8,{k % 512 + 1}]{{1,0}} %p.{k}), kind=kLoop"
        md.display_name = f"fusion.{k}"
        for s, v in (("program_id", prog), ("flops", 8 * (k % 512 + 1)), ("bytes_accessed", 64 * (k % 512 + 1))):
            st = md.stats.add()
            st.metadata_id = sid[s]
            st.int64_value = v
        st = md.stats.add()
        st.metadata_id = sid["hlo_category"]
        st.str_value = "loop fusion"
    dur = 1_000_000  # ps per op
    mods = p.lines.add()
    mods.id, mods.name, mods.timestamp_ns = 1, "XLA Modules", t0_ps // 1000
    ev = mods.events.add()
    ev.metadata_id, ev.offset_ps, ev.duration_ps = 1, 0, n_ops * dur
    ops = p.lines.add()
    ops.id, ops.name, ops.timestamp_ns = 2, "XLA Ops", t0_ps // 1000
    for j in range(n_ops):
        ev = ops.events.add()
        ev.metadata_id, ev.offset_ps, ev.duration_ps = 2 + j % distinct, j * dur, dur
    return p


def many_planes(n: int, ops: int = 16) -> bytes:
    """A serialized XSpace of ``n`` TPU planes of ``ops`` op events (``ops`` descriptions) each."""
    from traceview.read.xplane.protos import XSpace

    xs = XSpace()
    for i in range(n):
        _plane(xs, f"/device:TPU:{i}", ops, ops)
    xs.hostnames.append("merged")
    return xs.SerializeToString()


def many_descriptions(n: int) -> bytes:
    """A serialized XSpace of one TPU plane whose ``n`` op events have ``n`` distinct descriptions."""
    from traceview.read.xplane.protos import XSpace

    xs = XSpace()
    _plane(xs, "/device:TPU:0", n, n)
    xs.hostnames.append("desc")
    return xs.SerializeToString()


def timed_read(path: Path) -> tuple[float, int, int]:
    """(seconds, op events, descriptions) of one ``read_xplane``."""
    from traceview.model.from_xplane import read_xplane

    t = time.perf_counter()
    td = read_xplane(path)
    return time.perf_counter() - t, td.table.height, td.table.attrs.height


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=["planes", "descriptions"])
    ap.add_argument("n", type=int)
    ap.add_argument("dst", help="output .xplane.pb (keep it out of the repository)")
    args = ap.parse_args(argv)
    data = many_planes(args.n) if args.kind == "planes" else many_descriptions(args.n)
    Path(args.dst).write_bytes(data)
    del data
    import traceview.model.from_xplane  # noqa: F401  (imports outside the timing)

    secs, events, descs = timed_read(Path(args.dst))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{args.kind} {args.n:,}: {Path(args.dst).stat().st_size / 1e6:.1f} MB, read in {secs:.2f} s, "
          f"{events:,} op events, {descs:,} descriptions, peak RSS {rss:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
