"""Merge several ranks' XSpaces into one ``.xplane.pb``, the ways tpu-inference's
``scripts/merge_xprof.py`` does, to build merged-rank inputs for traceview's tests and
benchmarks (issue 27).

Data-parallel serving (tpu-inference, MPMD) writes one XSpace per rank; its
``merge_xprof.py`` stitches them into one file. Every rank numbers its devices from 0, so the
ranks' planes collide. Three layouts are written here, each as that script writes it:

* ``renumber`` (default; the script since tpu-inference PR #2738): the inputs are grouped by
  their first ``XSpace.hostnames`` entry (one group for inputs without one) and, within a
  group, taken in the order of their file names. A plane named ``<prefix>:<n>`` (optionally
  followed by a space and a tail, e.g. ``/device:TPU:0 SparseCore 0``) gets a new ``n``
  counted per prefix across the group: the k-th distinct ``(prefix, n)`` met, file by file,
  becomes ``<prefix>:k`` (the tail kept), so two ranks' ``/device:TPU:0,1`` become
  ``/device:TPU:0..3``. Any other plane (``/host:CPU``, ``/host:metadata``,
  ``Task Environment``, ``/device:CUSTOM:Megascale Trace``) gets its file's index in the group
  appended after a space (``/host:CPU 1``). Plane ids are reassigned 1, 2, ... over the output;
  one hostname is kept per group.
* ``naive`` (the script before that fix): the planes concatenated as they are, names and
  ids colliding (every rank's ``/device:TPU:0`` with the same id); every input's hostnames
  kept.
* ``prefix`` (the older script's ``--prefix-planes``): ``naive`` with each plane's name
  prefixed by its file's stem and ``": "`` (``dp0_host: /device:TPU:0``).

The output is written plane by plane (each plane is parsed, renamed and serialized on its
own; fields traceview's schema does not declare are kept as they are), to a temporary file
moved into place, so merging hundreds of copies of a trace holds one input at a time.

Usage::

    python benchmarks/merge_ranks.py A.xplane.pb B.xplane.pb -o /tmp/NAME/merged.xplane.pb
    python benchmarks/merge_ranks.py T.xplane.pb --repeat 128 --mode naive -o /tmp/NAME/m.xplane.pb --read

``--repeat N`` takes the inputs N times over (N ranks of one trace); ``--read`` then reads
the output with ``traceview.model.from_xplane.read_xplane`` and prints the read time, the
devices, hosts (ranks) and op events, and the peak RSS (``ru_maxrss``).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import sys
import time
from pathlib import Path

MODES = ("renumber", "naive", "prefix")

#: ``<prefix>:<n>`` with an optional space-led tail: the planes the renumbering counts
NUMBERED = re.compile(r"^(\S+):(\d+)(\s.*)?$")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _space(path: Path):
    from traceview.read.xplane.protos import XSpace

    xs = XSpace()
    xs.ParseFromString(path.read_bytes())
    return xs


def _stem(path: Path) -> str:
    name = path.name
    return name[: -len(".xplane.pb")] if name.endswith(".xplane.pb") else name


def merge(inputs: list[Path], output: Path, mode: str = "renumber") -> dict:
    """Write the merged XSpace of ``inputs`` (ranks, in order) to ``output``; returns
    {planes, ranks, hosts, bytes}. ``mode``: one of :data:`MODES` (module doc). Raises
    ValueError on an unknown mode, OSError / DecodeError on an unreadable input."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: one of {', '.join(MODES)}")
    inputs = [Path(p) for p in inputs]
    if mode == "renumber":  # group by the first hostname; by file name within a group
        groups: dict[str, list[Path]] = {}
        for p in inputs:
            hn = list(_space(p).hostnames)
            groups.setdefault(hn[0] if hn else "", []).append(p)
        order = [(h, sorted(ps, key=lambda q: q.name)) for h, ps in groups.items()]
    else:
        order = [("", inputs)]
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp")
    next_id, n_planes, hosts = 1, 0, []
    with open(tmp, "wb") as out:
        for host, files in order:
            counter: dict[str, int] = {}  # renumber: next new n per prefix, over the group
            if mode == "renumber" and host:
                hosts.append(host)
            for rank, p in enumerate(files):
                xs = _space(p)
                local: dict[tuple[str, int], int] = {}
                for plane in xs.planes:
                    if mode == "prefix":
                        plane.name = f"{_stem(p)}: {plane.name}"
                    elif mode == "renumber":
                        m = NUMBERED.match(plane.name)
                        if m:
                            key = (m.group(1), int(m.group(2)))
                            if key not in local:
                                local[key] = counter.get(key[0], 0)
                                counter[key[0]] = local[key] + 1
                            plane.name = f"{key[0]}:{local[key]}{m.group(3) or ''}"
                        else:
                            plane.name = f"{plane.name} {rank}"
                        plane.id = next_id
                        next_id += 1
                    out.write(_field(1, plane.SerializeToString()))
                    n_planes += 1
                for number, values in ((2, xs.errors), (3, xs.warnings)):
                    for v in values:
                        out.write(_field(number, v.encode()))
                if mode != "renumber":
                    hosts.extend(xs.hostnames)
                del xs
        for h in hosts:
            out.write(_field(4, h.encode()))
    os.replace(tmp, output)
    return {"planes": n_planes, "ranks": len(inputs), "hosts": hosts, "bytes": output.stat().st_size}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", type=Path, help="the ranks' .xplane.pb files, in rank order")
    ap.add_argument("-o", "--output", required=True, type=Path, help="merged .xplane.pb (keep it out of the repository)")
    ap.add_argument("--mode", choices=MODES, default="renumber")
    ap.add_argument("--repeat", type=int, default=1, metavar="N", help="take the inputs N times over")
    ap.add_argument("--read", action="store_true", help="read the output with traceview and print what it holds")
    args = ap.parse_args(argv)
    if args.output.resolve() in {p.resolve() for p in args.inputs}:
        ap.error("the output is one of the inputs")
    t = time.perf_counter()
    info = merge(args.inputs * max(1, args.repeat), args.output, args.mode)
    print(f"merged {info['ranks']} rank(s) ({args.mode}) -> {args.output}: {info['planes']} planes, "
          f"{info['bytes'] / 1e6:.1f} MB in {time.perf_counter() - t:.1f} s")
    if args.read:
        from traceview.model.from_xplane import read_xplane

        t, c = time.perf_counter(), time.process_time()
        td = read_xplane(args.output)
        secs, cpu = time.perf_counter() - t, time.process_time() - c
        hosts = sorted({d.host for d in td.devices})
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"read in {secs:.2f} s ({cpu:.2f} s CPU): {len(td.devices)} devices on {len(hosts)} host label(s), "
              f"{td.table.height:,} op rows, {td.op_events if hasattr(td, 'op_events') else td.table.events['count'].sum():,} "
              f"op events; peak RSS {rss:.0f} MB")
        for n in td.notes:
            print(f"note: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
