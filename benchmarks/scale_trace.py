"""Make large traces out of a real one by repeating its device events in time.

Benchmarks need multi-million-event traces with real op names, HLO shapes and stats; the
shared traces are small. This scaler repeats every event of the chosen device lines ``R``
times, each repetition shifted by a fixed time step, so the result is what the same
programs running ``R`` times as long would record:

* **xplane.pb** — on every device plane (``/device:*``), the events of the repeated lines
  (default: every line of a device plane: TPU ``XLA Ops``, ``XLA Modules``, ``Async XLA
  Ops``, ``XLA TraceMe``; GPU ``Stream #N`` lines; ``--op-lines-only`` keeps only
  ``XLA Ops``/``XLA Modules`` and GPU stream lines) are written ``R`` times. Repetition
  ``k`` adds ``k * step_ps`` to each event's ``offset_ps`` and, when the event carries it,
  to its ``device_offset_ps`` stat (TPU device clock). Metadata, host planes and
  ``/host:metadata`` (HLO protos) are copied unchanged.
* **trace.json(.gz)** — every ``ph:"X"`` event of a ``/device:*`` process is written ``R``
  times; repetition ``k`` adds ``k * step_ps`` ps to ``ts`` (µs) and to the
  ``device_offset_ps`` arg (a decimal string of ps), and ``k * id_step`` to the ``run_id``
  and ``step_num`` args.

``step_ps`` is one shift for the whole file: the span of all device events (host-aligned
``offset_ps`` and device-clock ``device_offset_ps`` alike) plus a 1 µs gap, rounded up to a
whole µs. One shift for every line (rather than each line's own span) keeps each op inside
the ``XLA Modules`` execution that encloses it and keeps devices aligned, so per-population
occurrences, total time and self time of the scaled trace are exactly ``R`` times the
original's.

The xplane writer is memory-frugal at 20M+ events: it never holds more than one line's
events as protobuf objects. Each repeated line's events are serialized repetition by
repetition (as raw ``XLine`` field-4 bytes) into a spool file beside the output; the final
file is then assembled from the spools with length prefixes computed from their sizes.

Usage::

    python benchmarks/scale_trace.py SRC DST --repeat R       # or --events N (target size)

Library: :func:`scale_xplane`, :func:`scale_trace_json`, :func:`count_device_events`.
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

#: Lines of a device plane repeated with ``op_lines_only``: TPU op and module lines (GPU
#: stream lines are matched by prefix).
OP_LINES = ("XLA Ops", "XLA Modules")
_GPU_STREAM = "Stream #"
_GAP_PS = 1_000_000  # 1 µs between repetitions
#: Per-event id stats/args made distinct per repetition (module runs, steps).
ID_STATS = ("run_id", "step_num")


# -- protobuf wire helpers -------------------------------------------------------------------

def _varint(n: int) -> bytes:
    """Protobuf base-128 varint of an int64/uint64 (negative int64 as 10-byte two's
    complement), by traceview's own encoder."""
    from traceview.read.xplane.wire import _varint_bytes

    return _varint_bytes(n & ((1 << 64) - 1))


def _len_field(field: int, length: int) -> bytes:
    """Tag + length prefix of a length-delimited field (wire type 2) of ``length`` bytes."""
    return _varint((field << 3) | 2) + _varint(length)


# -- xplane ----------------------------------------------------------------------------------

def _repeated_line(plane_name: str, line_name: str, op_lines_only: bool, host_cpu: bool = False) -> bool:
    if host_cpu and plane_name == "/host:CPU":
        return True
    if not plane_name.startswith("/device:"):
        return False
    if not op_lines_only:
        return True
    return line_name in OP_LINES or line_name.startswith(_GPU_STREAM)


def _stat_ids(plane, name: str) -> set[int]:
    return {k for k, v in plane.stat_metadata.items() if v.name == name}


def xplane_step_ps(space, op_lines_only: bool = False, host_cpu: bool = False) -> tuple[int, int]:
    """(shift per repetition in ps, events repeated once) for an XSpace.

    The shift is the span of every repeated event on both clocks (line ``timestamp_ns`` +
    ``offset_ps`` .. + ``duration_ps``, and ``device_offset_ps`` .. + ``device_duration_ps``)
    plus :data:`_GAP_PS`, rounded up to a whole µs.
    """
    lo, hi = math.inf, -math.inf
    n = 0
    for plane in space.planes:
        off_ids = _stat_ids(plane, "device_offset_ps")
        dur_ids = _stat_ids(plane, "device_duration_ps")
        for line in plane.lines:
            if not _repeated_line(plane.name, line.name, op_lines_only, host_cpu) or not len(line.events):
                continue
            base = line.timestamp_ns * 1000
            for ev in line.events:
                n += 1
                s = base + ev.offset_ps
                lo = min(lo, s)
                hi = max(hi, s + ev.duration_ps)
                doff = ddur = None
                for st in ev.stats:
                    if st.metadata_id in off_ids:
                        doff = _int_value(st)
                    elif st.metadata_id in dur_ids:
                        ddur = _int_value(st)
                if doff is not None:
                    lo = min(lo, doff)
                    hi = max(hi, doff + (ddur or 0))
    if n == 0:
        return _GAP_PS, 0
    span = int(hi - lo) + _GAP_PS
    return -(-span // 1_000_000) * 1_000_000, n


def xplane_id_step(space, op_lines_only: bool = False, host_cpu: bool = False) -> int:
    """Shift per repetition of the :data:`ID_STATS` ids: the largest integer value any of
    them takes on a repeated event, plus one (1 when there is none)."""
    hi = 0
    for plane in space.planes:
        ids = set().union(*(_stat_ids(plane, n) for n in ID_STATS))
        if not ids:
            continue
        for line in plane.lines:
            if not _repeated_line(plane.name, line.name, op_lines_only, host_cpu):
                continue
            for ev in line.events:
                for st in ev.stats:
                    if st.metadata_id in ids:
                        v = _int_value(st)
                        if v is not None and v > hi:
                            hi = v
    return hi + 1


def _int_value(st):
    kind = st.WhichOneof("value")
    if kind in ("int64_value", "uint64_value"):
        return getattr(st, kind)
    return None


def _spool_line(line, plane, repeat: int, step_ps: int, fh, id_step: int = 1) -> int:
    """Write ``repeat`` shifted copies of ``line``'s events (XLine field-4 entries) to ``fh``
    (times by ``step_ps``, :data:`ID_STATS` by ``id_step``).

    Returns the number of bytes written. Only this line's events live as protobuf objects.
    """
    from traceview.read.xplane.protos import XLine

    off_ids = _stat_ids(plane, "device_offset_ps")
    id_ids = set().union(*(_stat_ids(plane, n) for n in ID_STATS))
    work = XLine()
    work.events.extend(line.events)  # events only: serializes to field-4 entries alone
    events = work.events
    targets = []  # (event, device_offset_ps stat or None, its value kind, [(id stat, kind)])
    for ev in events:
        stat = None
        idst = []
        for st in ev.stats:
            if st.metadata_id in off_ids and _int_value(st) is not None:
                stat = st
            elif st.metadata_id in id_ids and _int_value(st) is not None:
                idst.append((st, st.WhichOneof("value")))
        targets.append((ev, stat, stat.WhichOneof("value") if stat is not None else None, idst))
    written = 0
    for k in range(repeat):
        if k:
            for ev, stat, kind, idst in targets:
                if ev.HasField("offset_ps") or not ev.num_occurrences:
                    ev.offset_ps += step_ps
                if stat is not None:
                    setattr(stat, kind, getattr(stat, kind) + step_ps)
                for st, ik in idst:
                    setattr(st, ik, getattr(st, ik) + id_step)
        data = work.SerializeToString()
        fh.write(data)
        written += len(data)
    return written


def scale_xplane(src: str | os.PathLike, dst: str | os.PathLike, repeat: int, *,
                 op_lines_only: bool = False, host_cpu: bool = False, progress=None) -> dict:
    """Write ``dst``: the XSpace in ``src`` with its device events repeated ``repeat`` times.

    Returns a dict: ``events`` (XEvents in the output, all planes), ``device_events``
    (repeated events, all repetitions), ``step_ps`` (shift per repetition, ps), ``bytes``
    (output size), ``id_step`` (run_id/step_num shift per repetition), ``seconds`` (wall
    time). ``host_cpu``: repeat the ``/host:CPU`` plane's lines too. ``progress(k_line, n_lines)`` is called after
    each spooled line when given. The output is written to a temp file beside ``dst`` and
    renamed into place.
    """
    from traceview.read.xplane.protos import XLine, XPlane, XSpace

    t0 = time.perf_counter()
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    space = XSpace.FromString(Path(src).read_bytes())
    step_ps, per_rep = xplane_step_ps(space, op_lines_only, host_cpu)
    id_step = xplane_id_step(space, op_lines_only, host_cpu)
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    spool_dir = Path(tempfile.mkdtemp(prefix=".scale-", dir=dst.parent))
    total_events = 0
    try:
        # 1. spool each repeated line's events; keep every other part as small bytes
        planes = []  # per plane: (plane bytes without lines, [(header bytes, spool path | events bytes, size)])
        n_lines = sum(len(p.lines) for p in space.planes)
        done = 0
        for pi, plane in enumerate(space.planes):
            shell = XPlane()
            shell.CopyFrom(plane)
            del shell.lines[:]
            lines = []
            for li, line in enumerate(plane.lines):
                header = XLine()
                header.CopyFrom(line)
                del header.events[:]
                rep = (_repeated_line(plane.name, line.name, op_lines_only, host_cpu) and len(line.events)
                       and repeat > 1)
                if rep:
                    if line.duration_ps:
                        header.duration_ps = line.duration_ps + (repeat - 1) * step_ps
                    path = spool_dir / f"{pi}_{li}.bin"
                    with open(path, "wb") as fh:
                        size = _spool_line(line, plane, repeat, step_ps, fh, id_step)
                    lines.append((header.SerializeToString(), path, size))
                    total_events += repeat * len(line.events)
                else:
                    ev_only = XLine()
                    ev_only.events.extend(line.events)
                    data = ev_only.SerializeToString()
                    lines.append((header.SerializeToString(), data, len(data)))
                    total_events += len(line.events)
                done += 1
                if progress is not None:
                    progress(done, n_lines)
            planes.append((shell.SerializeToString(), lines))
        rest = XSpace()
        rest.CopyFrom(space)
        del rest.planes[:]
        del space
        # 2. assemble: XSpace field 1 = planes, XPlane field 3 = lines, XLine field 4 = events
        tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as out:
            for shell_bytes, lines in planes:
                line_msgs = [(len(h) + size) for h, _, size in lines]
                plane_len = len(shell_bytes) + sum(len(_len_field(3, m)) + m for m in line_msgs)
                out.write(_len_field(1, plane_len))
                out.write(shell_bytes)
                for (h, body, size), m in zip(lines, line_msgs):
                    out.write(_len_field(3, m))
                    out.write(h)
                    if isinstance(body, Path):
                        with open(body, "rb") as fh:
                            shutil.copyfileobj(fh, out, 16 << 20)
                        body.unlink()
                    else:
                        out.write(body)
            out.write(rest.SerializeToString())
        os.replace(tmp, dst)
    finally:
        shutil.rmtree(spool_dir, ignore_errors=True)
    return {"events": total_events, "device_events": per_rep * repeat, "step_ps": step_ps, "id_step": id_step,
            "bytes": dst.stat().st_size, "seconds": time.perf_counter() - t0}


def count_device_events(src: str | os.PathLike, op_lines_only: bool = False, host_cpu: bool = False) -> tuple[int, int]:
    """(events repeated per repetition, other events) of the xplane ``src``."""
    from traceview.read.xplane.protos import XSpace

    space = XSpace.FromString(Path(src).read_bytes())
    rep = other = 0
    for plane in space.planes:
        for line in plane.lines:
            if _repeated_line(plane.name, line.name, op_lines_only, host_cpu):
                rep += len(line.events)
            else:
                other += len(line.events)
    return rep, other


# -- trace.json(.gz) -------------------------------------------------------------------------

_PLACEHOLDER = re.compile(rb'"\\u0000P(\d+)\\u0000"')


def _ps_of(ts) -> int:
    return round(float(ts) * 1e6)


def _us_text(ps: int) -> bytes:
    """Integer ps as a JSON number of µs with up to 6 decimals (exact, no float noise)."""
    neg = ps < 0
    ps = abs(ps)
    whole, frac = divmod(ps, 1_000_000)
    s = f"{whole}.{frac:06d}".rstrip("0").rstrip(".") if frac else f"{whole}"
    return (b"-" if neg else b"") + s.encode()


def scale_trace_json(src: str | os.PathLike, dst: str | os.PathLike, repeat: int, *,
                     compresslevel: int = 6) -> dict:
    """Write ``dst`` (gzip when it ends with ``.gz``; by ISA-L at level ``min(compresslevel, 3)``
    where python-isal is installed): the Chrome trace ``src`` with every
    ``ph:"X"`` event of a ``/device:*`` process repeated ``repeat`` times.

    Repetition ``k`` adds ``k * step_ps`` ps to ``ts`` (written as an exact decimal µs
    number) and to the ``device_offset_ps`` arg, and ``k * id_step`` to the :data:`ID_STATS`
    args (``id_step``: their largest value among the repeated events, plus one). Non-device events, metadata rows and the
    closing ``{}`` are kept once. Returns a dict: ``events`` (array elements written),
    ``device_events`` (repeated events, all repetitions), ``step_ps``, ``bytes`` (output
    size), ``json_bytes`` (uncompressed JSON size), ``id_step``, ``seconds``.
    """
    import orjson

    t0 = time.perf_counter()
    raw = Path(src).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = orjson.loads(raw)
    del raw
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    procs = {e.get("pid"): str(e.get("args", {}).get("name", "")) for e in events
             if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "process_name"}
    dev = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"
           and procs.get(e.get("pid"), "").startswith("/device:") and "ts" in e]
    lo, hi = math.inf, -math.inf
    for e in dev:
        s = _ps_of(e["ts"])
        lo, hi = min(lo, s), max(hi, s + _ps_of(e.get("dur", 0) or 0))
        a = e.get("args") or {}
        if "device_offset_ps" in a:
            d = int(a["device_offset_ps"])
            lo, hi = min(lo, d), max(hi, d + int(a.get("device_duration_ps", 0) or 0))
    step_ps = -(-(int(hi - lo) + _GAP_PS) // 1_000_000) * 1_000_000 if dev else _GAP_PS
    id_step = 1
    for e in dev:
        a = e.get("args")
        if isinstance(a, dict):
            for k in ID_STATS:
                v = a.get(k)
                if isinstance(v, (int, str)) and not isinstance(v, bool):
                    try:
                        id_step = max(id_step, int(v) + 1)
                    except ValueError:
                        pass
    # ts numbers are spliced in as exact decimal text: orjson writes the event with a
    # placeholder ts that is then replaced
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    if dst.name.endswith(".gz"):
        try:  # ISA-L compresses several times faster (levels 0-3)
            from isal import igzip

            opener = lambda p: igzip.open(p, "wb", compresslevel=min(compresslevel, igzip._COMPRESS_LEVEL_BEST))  # noqa: E731
        except ImportError:
            opener = lambda p: gzip.open(p, "wb", compresslevel=compresslevel)  # noqa: E731
    else:
        opener = lambda p: open(p, "wb")  # noqa: E731
    head = {k: v for k, v in doc.items() if k != "traceEvents"} if isinstance(doc, dict) else None
    n_out = 0
    json_bytes = 0
    with opener(tmp) as out:
        def w(b: bytes):
            nonlocal json_bytes
            out.write(b)
            json_bytes += len(b)

        if head is not None:
            w(orjson.dumps(head)[:-1] + (b',"traceEvents":[' if head else b'"traceEvents":['))
        else:
            w(b"[")
        first = True
        tail = []
        for e in events:
            if isinstance(e, dict) and not e:
                tail.append(e)  # the exporter's closing {}
                continue
            w((b"" if first else b",") + orjson.dumps(e))
            first = False
            n_out += 1
        if repeat > 1 and dev:
            # each repeated event is a template: its text split around the values a
            # repetition shifts (ts, device_offset_ps, the ID_STATS args), written back as
            # exact integer text of the same JSON type (number or string)
            templates = []
            for e in dev:
                a = e.get("args") if isinstance(e.get("args"), dict) else None
                e2 = dict(e)
                e2["ts"] = "\x00P0\x00"
                fills = [("ts", _ps_of(e["ts"]))]
                if a is not None:
                    a2 = e2["args"] = dict(a)
                    for k in ("device_offset_ps",) + ID_STATS:
                        v = a.get(k)
                        if isinstance(v, bool) or not isinstance(v, (int, str)):
                            continue
                        try:
                            iv = int(v)
                        except ValueError:
                            continue
                        a2[k] = f"\x00P{len(fills)}\x00"
                        fills.append(("ps" if k == "device_offset_ps" else "id", iv, isinstance(v, str)))
                pieces = _PLACEHOLDER.split(orjson.dumps(e2))  # text, index, text, ...
                templates.append((pieces[0::2], [fills[int(i)] for i in pieces[1::2]]))
            buf = []
            for k in range(1, repeat):
                shift = k * step_ps
                ids = k * id_step
                for parts, fills in templates:
                    out_parts = [b",", parts[0]]
                    for i, f in enumerate(fills):
                        if f[0] == "ts":
                            out_parts.append(_us_text(f[1] + shift))
                        else:
                            t = str(f[1] + (shift if f[0] == "ps" else ids)).encode()
                            out_parts.append(b'"' + t + b'"' if f[2] else t)
                        out_parts.append(parts[i + 1])
                    buf.append(b"".join(out_parts))
                n_out += len(templates)
                if len(buf) > 50_000:
                    w(b"".join(buf))
                    buf.clear()
            w(b"".join(buf))
        for e in tail:
            w((b"" if first else b",") + orjson.dumps(e))
            n_out += 1
        w(b"]}" if head is not None else b"]")
    os.replace(tmp, dst)
    return {"events": n_out, "device_events": len(dev) * repeat, "step_ps": step_ps, "id_step": id_step,
            "bytes": dst.stat().st_size, "json_bytes": json_bytes, "seconds": time.perf_counter() - t0}


# -- command line ----------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="a real .xplane.pb or .trace.json(.gz)")
    ap.add_argument("dst", help="output path (keep it out of the repository: /tmp or benchmarks/out/)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--repeat", type=int, help="repetitions of the device events")
    g.add_argument("--events", type=int, help="target total events (xplane only); picks --repeat")
    ap.add_argument("--op-lines-only", action="store_true",
                    help="xplane: repeat only XLA Ops / XLA Modules / GPU stream lines")
    ap.add_argument("--host-cpu", action="store_true",
                    help="xplane: repeat the /host:CPU plane's lines too (an engine CPU trace)")
    args = ap.parse_args(argv)
    src = str(args.src)
    is_json = ".json" in Path(src).name
    repeat = args.repeat
    if repeat is None:
        if is_json:
            ap.error("--events is for xplane sources; use --repeat")
        per, other = count_device_events(src, args.op_lines_only, args.host_cpu)
        repeat = max(1, round((args.events - other) / max(per, 1)))
    if is_json:
        info = scale_trace_json(src, args.dst, repeat)
    else:
        info = scale_xplane(src, args.dst, repeat, op_lines_only=args.op_lines_only, host_cpu=args.host_cpu)
    info["repeat"] = repeat
    print(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in info.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
