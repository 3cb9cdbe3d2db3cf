"""A time window of a trace file as an XSpace: every plane and line, the events that overlap
the window clipped to it, with their metadata and stats.

:func:`xspace_window` reads an ``.xplane.pb`` in place (memory-mapped when the C decoder is
built), each XLine in pieces of :data:`PIECE_BYTES` whose event times are decoded into arrays
first; only the pieces holding events of the window are parsed by protobuf, so memory is
bounded by the window, not the file. :func:`tracejson_window` turns the window of a
Chrome-trace JSON (``.trace.json.gz``) into the same XSpace form (a process is a plane, a
thread a line, an event name an XEventMetadata, ``args`` the XStats).

Clocks. The window is given on the op table's clock (:mod:`traceview.model.schema`). On a TPU
plane that is the device clock (``device_offset_ps``), while the timeline's XEvents are
host-aligned (``XLine.timestamp_ns * 1000 + offset_ps``); each TPU plane's window is moved
onto the host-aligned clock by the device-minus-host offset of its ``XLA Ops`` events at the
window's ends, and that offset is returned (``shifts``) so that what is drawn on top of the
plane is moved alike. Planes without a device clock (host threads, GPU streams, XLA:CPU) use
the window as given, or, on a TPU trace, the union of the TPU planes' host-aligned windows. In
an XSpace of several ranks (:attr:`Window.per_plane`) each rank's planes are cut as its own
file would be: at its devices' windows, its other planes at its own window (on a TPU trace the
union of its TPU planes' host-aligned windows).

Errors: :class:`~traceview.errors.TraceUnreadable` naming the file on malformed bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from traceview.errors import LimitExceeded, TraceUnreadable
from traceview.read.xplane import wire
from traceview.read.xplane.protos import XLine, XSpace, XStat

#: XLines are walked in pieces of about this many bytes (only pieces with events of the window
#: are parsed by protobuf)
PIECE_BYTES = 4 << 20
#: most events a window may hold (XSpace and JSON are built in memory: about 1 KB an event for
#: both); over it :class:`~traceview.errors.LimitExceeded`
MAX_WINDOW_EVENTS = 4_000_000
#: a gzip-compressed XSpace is inflated into memory up to this many bytes (the reader's cap)
MAX_XSPACE_BYTES = 8 << 30


class PlaneCut(NamedTuple):
    """Where :attr:`Window.per_plane` cuts one plane of the file: ``lo_ps`` / ``hi_ps`` (the
    op table's clock), ``name``, the plane's name without its rank (the name that says
    whether it is a TPU plane), and ``rank``, its rank's index in the file (on a TPU trace a
    plane without a device clock is cut at the union of its rank's TPU planes' windows)."""

    lo_ps: int
    hi_ps: int
    name: str
    rank: int = 0


@dataclass
class Window:
    """Where to cut: ``lo_ps`` / ``hi_ps`` (the op table's clock, ps) for every plane, and
    ``planes``: plane name -> (lo_ps, hi_ps) for the planes cut elsewhere (a device's own
    steps)."""

    lo_ps: int
    hi_ps: int
    planes: dict = field(default_factory=dict)
    #: for an XSpace of several ranks whose planes share names: given the file's planes and
    #: hostnames, plane index -> :class:`PlaneCut` (the caller tells the ranks apart)
    per_plane: object = None

    def of(self, name: str) -> tuple[int, int]:
        return self.planes.get(name, (self.lo_ps, self.hi_ps))

    def cuts(self, planes: list, hostnames: list) -> dict:
        """:attr:`per_plane` of the file's ``planes`` and ``hostnames`` ({} without it); raises
        TypeError when it gives anything but a :class:`PlaneCut` for a plane index."""
        if self.per_plane is None:
            return {}
        out = self.per_plane(planes, hostnames)
        for i, cut in out.items():
            if not isinstance(cut, PlaneCut) or not isinstance(i, int) or not 0 <= i < len(planes):
                raise TypeError(f"Window.per_plane gave {i!r}: {cut!r}; it must map a plane index of the file "
                                f"(0..{len(planes) - 1}) to a PlaneCut")
        return out


@dataclass
class SpaceWindow:
    """An XSpace holding a window (``space``, :class:`~traceview.read.xplane.protos.XSpace`),
    the host-aligned window of each plane (``aligned``: plane name -> (lo_ps, hi_ps)) and the
    op-clock minus host-aligned offset used on each plane (``shifts``: plane name -> ps, 0 where
    the plane has one clock); ``events``: XEvents kept."""

    space: object
    aligned: dict
    shifts: dict
    events: int = 0


def _clip_events(raw_piece_events, base_ps: int, lo: int, hi: int, out_line, moves=None, clock=None) -> int:
    """Append to ``out_line`` the events of ``raw_piece_events`` (protobuf XEvents of a line
    whose start is ``base_ps``), clipped to [lo, hi) on the host-aligned clock, or, given
    ``moves`` (per event: (host start, host end, device start, device duration) after the
    cut, device ones -1 where the event has no device clock) and ``clock`` (the stat ids of
    ``device_offset_ps`` and ``device_duration_ps``), placed there with those stats
    rewritten; their offsets are relative to ``out_line``'s timestamp. Returns how many were
    kept."""
    out_base = out_line.timestamp_ns * 1000
    kept = 0
    for j, ev in enumerate(raw_piece_events):
        if ev.WhichOneof("data") != "offset_ps":
            continue  # pre-aggregated: no place on a timeline
        if moves is not None:
            s2, e2, dev, ddur = moves[j]
        else:
            s = base_ps + ev.offset_ps
            e = s + max(ev.duration_ps, 0)
            if not (s < hi and (e > lo or (e == s and s >= lo))):
                continue
            s2, e2, dev, ddur = max(s, lo), min(e, hi), -1, -1
        new = out_line.events.add()
        new.CopyFrom(ev)
        new.offset_ps = s2 - out_base
        new.duration_ps = e2 - s2
        if dev >= 0 and clock is not None:
            for st in new.stats:
                if st.metadata_id in clock:
                    value = dev if st.metadata_id == clock[0] else ddur
                    if st.WhichOneof("value") == "uint64_value":
                        st.uint64_value = value
                    else:
                        st.int64_value = value
        kept += 1
    return kept


def _piece_events(raw, path: str, stat_id: int = -1, stat_id2: int = -1):
    """Yield (piece bytes, starts ps, ends ps, occurrences, stat values, stat values 2) for the
    pieces of a serialized XLine (host-aligned times; the integer XStats ``stat_id`` /
    ``stat_id2`` of each event, -1 where absent), a piece's events decoded into arrays (C
    decoder) before protobuf sees it. Memory: one piece at a time."""
    if wire._fast is None:
        data = raw if isinstance(raw, bytes) else bytes(raw)
        le = wire.decode_line(data, path, stat_id, stat_id2)
        yield data, le.starts, le.starts + np.maximum(le.durations, 0), le.occurrences, le.stat_values, le.stat_values2
        return
    try:
        _n, head, bounds = wire._fast.line_layout(raw, PIECE_BYTES)
    except ValueError as exc:
        raise TraceUnreadable(wire._line_fault(exc), path) from None
    base = int(wire._line_base_ps(head[4]))
    for a, b in zip(bounds[:-1], bounds[1:]):
        piece = wire._copy(raw[a:b], path)
        le = wire.decode_line(piece, path, stat_id, stat_id2)
        offs = le.starts - wire._line_base_ps(le.header.timestamp_ns)
        starts = offs + base
        yield piece, starts, starts + np.maximum(le.durations, 0), le.occurrences, le.stat_values, le.stat_values2


def _too_many(path: str) -> LimitExceeded:
    return LimitExceeded(f"the window holds more than {MAX_WINDOW_EVENTS:,} trace events; export fewer steps "
                         f"(--steps A:B) or a shorter --window-ps", path)


#: TPU plane lines of step-level spans on the host-aligned clock: kept whole, never cut
WHOLE_LINES = ("XLA Modules", "Steps")


def _cut_line(raw, path: str, lo: int, hi: int, out_line, budget: int = MAX_WINDOW_EVENTS, clock=None) -> int:
    """Copy the events of one serialized XLine overlapping [lo, hi) (host-aligned) into
    ``out_line``, clipped to it; raise LimitExceeded past ``budget`` events.

    ``clock``: (``device_offset_ps`` stat id, ``device_duration_ps`` stat id, window start,
    window end on the device clock, the ops' (host-aligned starts ascending, device-minus-host
    offsets) or None) for a TPU plane, whose events are placed by their own
    clocks, since the offset between the clocks differs from op to op (an async copy's strays
    far from the median): an event carrying both stats is kept when its device interval
    overlaps the device window and clipped there (its host-aligned times cut by the same
    amounts, the two stats rewritten). On :data:`WHOLE_LINES` (program executions, step
    markers: host-aligned, off their ops by more than a single op's offset) an event is kept
    when its middle lies in [lo, hi), whole but for its end, moved so that on the ops' clock
    (the reader maps a host-aligned time by the offset of the first op at or after it) the
    execution ends where the next one on the line begins, which is where the reader ends that
    step in the whole trace; so a step never becomes a fragment that reads back as a step of
    its own, and the window's last step keeps its length."""
    head = _header_of(raw, path)
    base = int(wire._line_base_ps(head.timestamp_ns))
    kept = 0
    whole_line = clock is not None and head.name in WHOLE_LINES
    off_id, dur_id = (clock[0], clock[1]) if clock is not None and not whole_line else (-1, -1)
    nexts = None
    if whole_line:  # a small line: every start, for each event's next
        nexts = np.sort(np.concatenate([st[occ == 0] for _p, st, _e, occ, _a, _b in _piece_events(raw, path)]
                                       or [np.zeros(0, dtype=np.int64)]))
    for piece, starts, ends, occ, dev, ddur in _piece_events(raw, path, off_id, dur_id):
        moves = None
        if clock is None:
            hit = (starts < hi) & ((ends > lo) | ((ends == starts) & (starts >= lo))) & (occ == 0)
        elif whole_line:
            mid = starts + (ends - starts) // 2
            hit = (mid >= lo) & (mid < hi) & (occ == 0)
            s2, e2 = starts, ends
            anchors = clock[4] if len(clock) > 4 else None
            if anchors is not None and len(anchors[0]) and len(nexts):
                # the reader puts an execution on the ops' clock by the offset of the first op
                # at or after its start, and ends a step where the next execution begins: the
                # end is moved so that this execution ends there on the ops' clock
                def on_ops(t):
                    at = np.clip(np.searchsorted(anchors[0], t, side="left"), 0, len(anchors[0]) - 1)
                    return t + anchors[1][at]
                at = np.searchsorted(nexts, starts, side="right")
                has_next = at < len(nexts)
                nxt = nexts[np.minimum(at, len(nexts) - 1)]
                e2 = np.where(has_next, starts + (on_ops(nxt) - on_ops(starts)), ends)
                e2 = np.maximum(e2, starts)
            d2 = l2 = np.full(len(starts), -1, dtype=np.int64)
        else:
            dlo, dhi = clock[2], clock[3]
            has = (dev >= 0) & (ddur >= 0)
            dend = dev + np.maximum(ddur, 0)
            on_dev = has & (dev < dhi) & ((dend > dlo) | ((ddur == 0) & (dev >= dlo)))
            on_host = ~has & (starts < hi) & ((ends > lo) | ((ends == starts) & (starts >= lo)))
            hit = (on_dev | on_host) & (occ == 0)
            cut_lo = np.where(on_dev, np.maximum(dlo - dev, 0), np.maximum(lo - starts, 0))
            cut_hi = np.where(on_dev, np.maximum(dend - dhi, 0), np.maximum(ends - hi, 0))
            s2 = np.minimum(starts + cut_lo, ends)
            e2 = np.maximum(ends - cut_hi, s2)
            d2 = np.where(on_dev, dev + cut_lo, -1)
            l2 = np.where(on_dev, np.maximum(dend - cut_hi - (dev + cut_lo), 0), -1)
        if not hit.any():
            continue
        idx = np.flatnonzero(hit)
        if kept + len(idx) > budget:
            raise _too_many(path)
        try:
            evs = XLine.FromString(piece).events
        except Exception as exc:  # DecodeError, ValueError
            raise TraceUnreadable(f"malformed XLine {head.name!r} ({exc})", path) from None
        if clock is not None:
            moves = list(zip(s2[idx].tolist(), e2[idx].tolist(), d2[idx].tolist(), l2[idx].tolist()))
        kept += _clip_events((evs[i] for i in idx.tolist()), base, lo, hi, out_line, moves,
                             None if clock is None else (clock[0], clock[1]))
    return kept


def _header_of(raw, path: str):
    if wire._fast is not None:
        try:
            return wire.LineHeader(*wire._fast.line_header(raw))
        except ValueError as exc:
            raise TraceUnreadable(wire._line_fault(exc), path) from None
    return wire.line_header(raw if isinstance(raw, bytes) else bytes(raw), path)


def _device_stat_ids(plane) -> tuple[int, int]:
    """The stat metadata ids of ``device_offset_ps`` and ``device_duration_ps`` (-1: none)."""
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    return (next((k for k, v in names.items() if v == "device_offset_ps"), -1),
            next((k for k, v in names.items() if v == "device_duration_ps"), -1))


def _device_offsets(plane, path: str, lo: int, hi: int, ops_clock: list | None = None) -> tuple[int, int] | None:
    """(device-minus-host offset at ``lo``, at ``hi``) of a TPU plane's ``XLA Ops`` events
    (ps): the median offset of the ops whose device start lies in [lo, hi), for both ends (one
    op's own offset strays by tens of ms: an async copy's); without such ops, that of the first
    op at or after ``lo`` (else the last before it) and of the last op before ``hi`` (else the
    first after it); None when they carry no device clock (``device_offset_ps`` and
    ``device_duration_ps``). The line is read a piece at a time. ``ops_clock``: a list that gets
    (host-aligned starts ascending, their device-minus-host offsets) of every op with a device
    clock, the reader's anchors for events on the host-aligned clock."""
    off_id, dur_id = _device_stat_ids(plane)
    if off_id < 0 or dur_id < 0:
        return None
    best: dict = {}  # at_lo, before_lo, at_hi, after_hi -> (device start, delta)
    inside: list = []  # the deltas of the ops starting in [lo, hi)
    host_at: list = []  # every op's host-aligned start and delta, for ops_clock
    for raw in plane.lines:
        if _header_of(raw, path).name != "XLA Ops":
            continue
        for _piece, starts, _ends, _occ, dev, ddur in _piece_events(raw, path, off_id, dur_id):
            has = (dev >= 0) & (ddur >= 0)
            if not has.any():
                continue
            d, delta = dev[has], dev[has] - starts[has]
            inside.append(delta[(d >= lo) & (d < hi)])
            host_at.append((starts[has], delta))
            for key, mask, earliest in (("at_lo", d >= lo, True), ("before_lo", d < lo, False),
                                        ("at_hi", d < hi, False), ("after_hi", d >= hi, True)):
                if not mask.any():
                    continue
                idx = np.flatnonzero(mask)
                i = idx[np.argmin(d[idx])] if earliest else idx[np.argmax(d[idx])]
                cand = (int(d[i]), int(delta[i]))
                old = best.get(key)
                if old is None or (cand[0] < old[0] if earliest else cand[0] > old[0]):
                    best[key] = cand
        break
    if ops_clock is not None and host_at:
        a = np.concatenate([x for x, _ in host_at])
        dl = np.concatenate([y for _, y in host_at])
        o = np.argsort(a, kind="stable")
        ops_clock.extend((a[o], dl[o]))
    both = np.concatenate(inside) if inside else np.empty(0, dtype=np.int64)
    if both.size:  # one offset for the window: single ops' offsets stray by tens of ms (async copies)
        med = int(np.median(both))
        return med, med
    first = best.get("at_lo") or best.get("before_lo")
    last = best.get("at_hi") or best.get("after_hi")
    if first is None or last is None:
        return None
    return first[1], last[1]


def _union(windows: list) -> tuple[int, int]:
    return min(w[0] for w in windows), max(w[1] for w in windows)


def xspace_window(path: str, window: Window) -> SpaceWindow:
    """The events of the ``.xplane.pb`` at ``path`` in ``window`` (module doc), as an XSpace:
    every plane with its id, name, stats and stat metadata, the event metadata its kept events
    use (and every metadata with stats or children, e.g. HLO protos), every line that keeps an
    event (its id, names and timestamp, now the window's start). Raises TraceUnreadable."""
    from pathlib import Path

    mapped = wire.map_xspace(Path(path)) if wire.has_decoder() else None
    if mapped is None:
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            raise TraceUnreadable(f"cannot read file ({exc.strerror or exc})", str(path)) from None
        from traceview.read.inflate import GZIP_MAGIC, gunzip, not_gzip

        if data[:2] == GZIP_MAGIC:  # <host>.xplane.pb.gz
            data = gunzip(data, str(path), MAX_XSPACE_BYTES, "XSpace")
        elif str(path).endswith(".gz"):  # read as is (inflated, its name kept), else said so
            try:
                mapped = wire.read_xspace_bytes(data, str(path))
            except TraceUnreadable:
                raise not_gzip(data, str(path), "a gzip-compressed XSpace") from None
        if mapped is None:
            mapped = wire.read_xspace_bytes(data, str(path))
        del data
    p = str(path)
    out = XSpace()
    out.hostnames.extend(mapped.hostnames)
    out.errors.extend(mapped.errors)
    out.warnings.extend(mapped.warnings)
    aligned, shifts = {}, {}  # by plane name, as returned (ranks sharing names: the last)
    # per plane (file order): its window on the op clock, its host-aligned window, its shift
    # and the ops' clock anchors when it has a device clock
    by_index = window.cuts(list(mapped.planes), list(mapped.hostnames))
    wins = [(by_index[i].lo_ps, by_index[i].hi_ps) if i in by_index else window.of(plane.name)
            for i, plane in enumerate(mapped.planes)]
    # the plane's own name, without a rank's prefix (given with its window)
    names = [by_index[i].name if i in by_index else plane.name for i, plane in enumerate(mapped.planes)]
    p_aligned: dict = {}
    p_shift: dict = {}
    anchors_of: dict = {}
    tpu_windows = []
    tpu_of_rank: dict = {}  # a rank's TPU planes' host-aligned windows (per_plane)
    for i, plane in enumerate(mapped.planes):  # first the device clocks
        lo, hi = wins[i]
        anchors: list = []
        d = _device_offsets(plane, p, lo, hi, anchors) if names[i].startswith("/device:TPU") else None
        if d is not None:
            anchors_of[i] = anchors
            p_aligned[i] = (lo - d[0], hi - d[1])
            p_shift[i] = d[0]
            tpu_windows.append(p_aligned[i])
            if i in by_index:
                tpu_of_rank.setdefault(by_index[i].rank, []).append(p_aligned[i])
    host_window = _union(tpu_windows) if tpu_windows else (window.lo_ps, window.hi_ps)
    kept = 0
    for i, plane in enumerate(mapped.planes):
        if i not in p_aligned:
            if not tpu_windows:
                p_aligned[i] = wins[i]
            else:
                ranks_tpu = tpu_of_rank.get(by_index[i].rank) if i in by_index else None
                p_aligned[i] = _union(ranks_tpu) if ranks_tpu else host_window
            p_shift[i] = 0
        lo, hi = p_aligned[i]
        aligned[plane.name], shifts[plane.name] = p_aligned[i], p_shift[i]
        clock = None
        if i in anchors_of:  # a device clock: each event placed by its own
            clock = (*_device_stat_ids(plane), *wins[i], anchors_of[i] or None)
        np_ = out.planes.add()
        np_.id = plane.id
        np_.name = plane.name
        for k, v in plane.stat_metadata.items():
            np_.stat_metadata[k].CopyFrom(v)
        np_.stats.extend(plane.stats)
        used = set()
        for raw in plane.lines:
            head = _header_of(raw, p)
            line = XLine(id=head.id, display_id=head.display_id, name=head.name, display_name=head.display_name,
                         timestamp_ns=math.floor(lo / 1000), duration_ps=max(hi - lo, 0))
            n = _cut_line(raw, p, lo, hi, line, MAX_WINDOW_EVENTS - kept, clock)
            if n:
                kept += n
                used.update(e.metadata_id for e in line.events)
                np_.lines.append(line)
        for k, v in plane.event_metadata.items():
            if k in used or len(v.stats) or len(v.child_id):
                np_.event_metadata[k].CopyFrom(v)
        for m in getattr(plane, "mapped_lines", ()):
            m.release()
    return SpaceWindow(out, aligned, shifts, kept)


# -- Chrome-trace JSON ----------------------------------------------------------------------

def _stat_of(value):
    """An XStat value for one ``args`` value: (field, value)."""
    if isinstance(value, bool):
        return "int64_value", int(value)
    if isinstance(value, int) and -(1 << 63) <= value < (1 << 63):
        return "int64_value", value
    if isinstance(value, float) and math.isfinite(value):
        return "double_value", value
    if isinstance(value, str):
        return "str_value", value
    import orjson

    return "str_value", orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode("utf-8", "replace")


def _ps(x) -> int | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return int(round(x * 1e6))


def _int_arg(args, key):
    v = args.get(key) if isinstance(args, dict) else None
    try:
        return int(v) if v is not None and not isinstance(v, bool) else None
    except (TypeError, ValueError):
        return None


def tracejson_window(path: str, window: Window, *, max_decompressed_bytes: int | None = None) -> SpaceWindow:
    """The ``X`` events of the Chrome-trace JSON at ``path`` in ``window`` (module doc), as an
    XSpace: one plane per process (named by its ``process_name``), one line per thread (its
    ``thread_name``), one XEventMetadata per event name, ``args`` as XStats (numbers as
    int64/double, strings as they are, anything else as its JSON text). A process whose events
    carry ``device_offset_ps`` (TPU) is cut on that clock as :func:`xspace_window` does.
    Raises TraceUnreadable, LimitExceeded, NoTraceFound as
    :func:`traceview.read.tracejson.read_json_bytes`."""
    import orjson

    from traceview.read import tracejson

    kw = {"max_decompressed_bytes": max_decompressed_bytes} if max_decompressed_bytes else {}
    text = tracejson.read_json_bytes(path, **kw)
    events = tracejson._load_json(text, str(path))
    del text
    pnames, tnames = {}, {}
    xs = []
    for e in events:
        if type(e) is not dict:
            continue
        ph = e.get("ph")
        if ph == "M":
            a = e.get("args") if isinstance(e.get("args"), dict) else {}
            if e.get("name") == "process_name" and isinstance(a.get("name"), str):
                pnames[e.get("pid")] = a["name"]
            elif e.get("name") == "thread_name" and isinstance(a.get("name"), str):
                tnames[(e.get("pid"), e.get("tid"))] = a["name"]
        elif ph == "X":
            s, d = _ps(e.get("ts")), _ps(e.get("dur", 0))
            if s is not None:
                xs.append((e.get("pid"), e.get("tid"), s, max(d or 0, 0), e))
    del events
    # per process: the device-minus-host offsets near the window's ends (TPU device clock)
    aligned, shifts = {}, {}
    by_pid: dict = {}
    for x in xs:
        by_pid.setdefault(x[0], []).append(x)
    pname = {pid: (pnames.get(pid) if isinstance(pnames.get(pid), str) else f"pid {pid}") for pid in by_pid}
    tpu = []
    for pid, evs in by_pid.items():
        lo, hi = window.of(pname[pid])
        dev = [(_int_arg(x[4].get("args"), "device_offset_ps"), x[2]) for x in evs]
        dev = sorted((d, d - s) for d, s in dev if d is not None)
        if dev:
            keys = [d for d, _ in dev]
            import bisect

            i_lo = min(bisect.bisect_left(keys, lo), len(keys) - 1)
            i_hi = max(bisect.bisect_left(keys, hi) - 1, 0)
            aligned[pname[pid]] = (lo - dev[i_lo][1], hi - dev[i_hi][1])
            shifts[pname[pid]] = dev[i_lo][1]
            tpu.append(aligned[pname[pid]])
    host_window = (min(w[0] for w in tpu), max(w[1] for w in tpu)) if tpu else (window.lo_ps, window.hi_ps)
    out = XSpace()
    kept = 0
    for plane_id, pid in enumerate(sorted(by_pid, key=lambda p: (str(type(p)), str(p)))):
        name = pname[pid]
        if name not in aligned:
            aligned[name] = host_window if tpu else window.of(name)
            shifts[name] = 0
        lo, hi = aligned[name]
        plane = out.planes.add(id=plane_id, name=name)
        meta_ids: dict = {}
        stat_ids: dict = {}
        lines: dict = {}
        for _pid, tid, s, d, e in by_pid[pid]:
            end = s + d
            if not (s < hi and (end > lo or (d == 0 and s >= lo))):
                continue
            line = lines.get(tid)
            if line is None:
                line = lines[tid] = XLine(id=len(lines), display_id=len(lines),
                                          name=tnames.get((pid, tid), f"tid {tid}"),
                                          timestamp_ns=math.floor(lo / 1000), duration_ps=max(hi - lo, 0))
            nm = e.get("name")
            nm = nm if isinstance(nm, str) else orjson.dumps(nm).decode() if nm is not None else ""
            mid = meta_ids.get(nm)
            if mid is None:
                mid = meta_ids[nm] = len(meta_ids) + 1
                plane.event_metadata[mid].id = mid
                plane.event_metadata[mid].name = nm
            s2, e2 = max(s, lo), min(end, hi)
            ev = line.events.add(metadata_id=mid, offset_ps=s2 - line.timestamp_ns * 1000, duration_ps=e2 - s2)
            args = e.get("args")
            if isinstance(args, dict):
                for k, v in args.items():
                    sid = stat_ids.get(k)
                    if sid is None:
                        sid = stat_ids[k] = len(stat_ids) + 1
                        plane.stat_metadata[sid].id = sid
                        plane.stat_metadata[sid].name = str(k)
                    fld, val = _stat_of(v)
                    st = XStat(metadata_id=sid)
                    setattr(st, fld, val)
                    ev.stats.append(st)
            kept += 1
            if kept > MAX_WINDOW_EVENTS:
                raise _too_many(str(path))
        for tid in sorted(lines, key=lambda t: (str(type(t)), str(t))):
            plane.lines.append(lines[tid])
    return SpaceWindow(out, aligned, shifts, kept)
