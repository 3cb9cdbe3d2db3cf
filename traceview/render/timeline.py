"""A trace window and traceview's lines written out for timeline viewers.

:func:`with_tracks` adds the lines of an :class:`~traceview.analysis.export.ExportPlan`
(steps and their phase, families, exposed communication, findings) to the XSpace of a window
(:class:`~traceview.read.window.SpaceWindow`), on the plane of each device, moved onto the
plane's host-aligned clock; :func:`xspace_bytes` serializes it (``.xplane.pb``: XProf,
TensorBoard's trace viewer, xprof-rs). :func:`chrome_trace` writes the same events as
Chrome-trace JSON (orjson) the way Perfetto's JSON importer needs them:

* one process per plane (``process_name``/``process_sort_index`` metadata events), one thread
  per line (``thread_name``/``thread_sort_index``); planes without events are left out;
* complete (``X``) events only, each with a name, ``ts``/``dur`` in µs as floats rounded to
  the ps (1e-6 µs), ``ts`` counted from the window's start (``otherData.time_origin_ps``
  gives it on the trace's clock), so the doubles keep ps precision whatever the trace's epoch;
* on each thread, slices properly nested: Perfetto drops a slice that overlaps another
  without nesting in it (perfetto issues #6277 and #6251, JAX traces), so a line whose
  events overlap is split over several threads (``line``, ``line [2]``, ...). The nesting is
  worked out on the times Perfetto's importer will hold: each ``ts``/``dur`` as integer ns
  (``llround(µs * 1000)``, its ``CoerceToTs``), events in its order (start, longer first,
  file order), a slice closed at its end (intervals closed on the left, open on the right);
  each event goes to the first thread where it nests in the open slice or none is open, and
  is written in that order. Deterministic: the same window gives the same file.
"""

from __future__ import annotations

import math

from traceview.model.naming import printable
from traceview.read.xplane.protos import XLine, XStat

#: strings of event args cut at this many characters in the JSON (HLO texts can be long)
MAX_ARG_CHARS = 4096


def _stat_value(stat, names: dict):
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    v = getattr(stat, kind)
    if kind == "ref_value":
        return names.get(v, str(v))
    if kind == "bytes_value":
        return f"<{len(v)} bytes>"
    if kind == "double_value" and not math.isfinite(v):
        return str(v)
    if kind == "uint64_value" and v >= 1 << 53:
        return str(v)
    if kind == "int64_value" and abs(v) >= 1 << 53:
        return str(v)
    if kind == "str_value" and len(v) > MAX_ARG_CHARS:
        return v[:MAX_ARG_CHARS] + "…"
    return v


def _free_ids(used):
    """Ids 1, 2, ... not in ``used`` (a trace's ids may be anything up to 2**63 - 1)."""
    used = set(used)
    i = 0
    while True:
        i += 1
        if i not in used:
            yield i


def _set_stat(plane, stat_ids: dict, key: str, value, free) -> XStat:
    sid = stat_ids.get(key)
    if sid is None:
        sid = next(free)
        stat_ids[key] = sid
        plane.stat_metadata[sid].id = sid
        plane.stat_metadata[sid].name = key
    st = XStat(metadata_id=sid)
    if isinstance(value, bool):
        st.int64_value = int(value)
    elif isinstance(value, int) and -(1 << 63) <= value < (1 << 63):
        st.int64_value = value
    elif isinstance(value, float) and math.isfinite(value):
        st.double_value = value
    elif isinstance(value, str):
        st.str_value = printable(value)  # a path's undecodable bytes as \xff: a proto string is UTF-8
    else:
        import orjson

        st.str_value = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=str).decode()
    return st


def with_tracks(window, tracks, lines) -> object:
    """``window.space`` (modified in place and returned) with ``tracks`` (TrackEvents of one
    host) drawn on their device's plane (created when the window has none of that name), one
    XLine per name of ``lines`` that has events, after the plane's own lines. Times move by
    the plane's ``window.shifts`` (op clock -> host-aligned) and are clipped to the plane's
    window (an op that began before it). Lines of ``lines``' names the window already has (it
    was cut from an export) are dropped first: drawn again, a step would be read back twice."""
    space = window.space
    own = set(lines)
    for p in space.planes:
        for i in reversed(range(len(p.lines))):
            if p.lines[i].name in own:
                del p.lines[i]
    planes = {p.name: p for p in space.planes}
    by_plane: dict = {}
    for t in tracks:
        by_plane.setdefault(t.device, []).append(t)
    for dev in sorted(by_plane):
        plane = planes.get(dev)
        if plane is None:
            plane = space.planes.add(id=next(_free_ids(p.id for p in space.planes)), name=dev)
            planes[dev] = plane
        shift = int(window.shifts.get(dev, 0))
        lo, hi = window.aligned.get(dev, (min(t.start_ps for t in by_plane[dev]) - shift,
                                         max(t.start_ps + t.dur_ps for t in by_plane[dev]) - shift))
        line_ids = _free_ids(ln.id for ln in plane.lines)
        meta_ids = _free_ids(plane.event_metadata.keys())
        free_stats = _free_ids(plane.stat_metadata.keys())
        meta: dict = {}
        stat_ids: dict = {v.name: k for k, v in plane.stat_metadata.items()}
        for name in lines:
            evs = sorted((t for t in by_plane[dev] if t.line == name), key=lambda t: (t.start_ps, -t.dur_ps, t.name))
            if not evs:
                continue
            lid = next(line_ids)
            line = XLine(id=lid, display_id=lid, name=name, display_name=name,
                         timestamp_ns=math.floor(lo / 1000), duration_ps=max(hi - lo, 0))
            base = line.timestamp_ns * 1000
            for t in evs:
                s, e = max(t.start_ps - shift, lo), min(t.start_ps + max(t.dur_ps, 0) - shift, hi)
                if e < s:
                    continue  # outside the plane's window
                mid = meta.get(t.name)
                if mid is None:
                    mid = meta[t.name] = next(meta_ids)
                    plane.event_metadata[mid].id = mid
                    plane.event_metadata[mid].name = t.name
                    plane.event_metadata[mid].display_name = t.name
                ev = line.events.add(metadata_id=mid, offset_ps=s - base, duration_ps=e - s)
                for k, v in t.args.items():
                    if v is not None:
                        ev.stats.append(_set_stat(plane, stat_ids, k, v, free_stats))
            if len(line.events):
                plane.lines.append(line)
    return space


def xspace_bytes(space) -> bytes:
    """The serialized XSpace (``.xplane.pb``)."""
    return space.SerializeToString()


def _nest(events: list) -> list:
    """Thread index per event (events as (start, end, ...) in (start, longer first) order) so
    that on each thread every event nests in the open one or starts after it ends (module
    doc). Returns a list of ints, one per event."""
    stacks: list[list] = []
    out = []
    for ev in events:
        s, e = ev[0], ev[1]
        for k, st in enumerate(stacks):
            while st and st[-1] <= s:
                st.pop()
            if not st or e <= st[-1]:
                st.append(e)
                out.append(k)
                break
        else:
            stacks.append([e])
            out.append(len(stacks) - 1)
    return out


def _us(ps: int) -> float:
    """ps -> µs, rounded to the ps."""
    return round(ps / 1e6, 6)


def perfetto_ns(us: float) -> int:
    """The integer ns Perfetto's JSON importer makes of a ``ts``/``dur`` of ``us`` µs
    (``CoerceToTs``: an integral double times 1000, else ``llround(us * 1000)``)."""
    if us == math.trunc(us):
        return int(us) * 1000
    x = us * 1000.0
    return int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1)


def chrome_trace(spaces: list, *, title: str = "") -> bytes:
    """Chrome-trace JSON of ``spaces`` ((host or "", XSpace) pairs: several hosts' planes are
    named ``host: plane``), as the module doc says. Returns UTF-8 bytes."""
    import orjson

    origin = None
    for _h, space in spaces:
        for p in space.planes:
            for ln in p.lines:
                for ev in ln.events:
                    t = ln.timestamp_ns * 1000 + ev.offset_ps
                    origin = t if origin is None or t < origin else origin
    origin = origin or 0
    out = []
    pid = 0
    for host, space in spaces:
        for p in space.planes:
            if not any(len(ln.events) for ln in p.lines):
                continue
            pid += 1
            pname = f"{host}: {p.name}" if host else p.name
            out.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": pname}})
            out.append({"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": pid}})
            snames = {k: v.name for k, v in p.stat_metadata.items()}
            mnames, margs = {}, {}
            for k, m in p.event_metadata.items():
                mnames[k] = m.display_name or m.name or f"event {k}"
                if len(m.stats):
                    margs[k] = {snames.get(s.metadata_id, str(s.metadata_id)): _stat_value(s, snames) for s in m.stats}
            tid = 0
            for ln in p.lines:
                if not len(ln.events):
                    continue
                base = ln.timestamp_ns * 1000 - origin
                evs = []
                for i, e in enumerate(ln.events):
                    ts, dur = _us(base + e.offset_ps), _us(max(e.duration_ps, 0))
                    t_ns = perfetto_ns(ts)
                    evs.append((t_ns, t_ns + perfetto_ns(dur), i, ts, dur))
                evs.sort(key=lambda x: (x[0], x[0] - x[1], x[2]))
                threads = _nest(evs)
                lname = ln.display_name or ln.name or f"line {ln.id}"
                first_tid = tid + 1
                for k in range(max(threads) + 1):
                    t = first_tid + k
                    out.append({"ph": "M", "pid": pid, "tid": t, "name": "thread_name",
                                "args": {"name": lname if k == 0 else f"{lname} [{k + 1}]"}})
                    out.append({"ph": "M", "pid": pid, "tid": t, "name": "thread_sort_index", "args": {"sort_index": t}})
                tid = first_tid + max(threads)
                for (_s, _e, i, ts, dur), k in zip(evs, threads):
                    ev = ln.events[i]
                    args = dict(margs.get(ev.metadata_id, ()))
                    for st in ev.stats:
                        args[snames.get(st.metadata_id, str(st.metadata_id))] = _stat_value(st, snames)
                    item = {"ph": "X", "pid": pid, "tid": first_tid + k, "ts": ts, "dur": dur,
                            "name": mnames.get(ev.metadata_id, f"event {ev.metadata_id}")}
                    if args:
                        item["args"] = args
                    out.append(item)
    doc = {"traceEvents": out, "displayTimeUnit": "ns",
           "otherData": {"producer": "traceview export", "title": title, "time_origin_ps": origin}}
    return orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS, default=str)
