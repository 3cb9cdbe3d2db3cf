"""The op and module-execution arrays of one TPU XPlane, numpy only.

A TPU plane (``/device:TPU:<n>``) has an ``XLA Ops`` line (one event per HLO op execution)
and an ``XLA Modules`` line (one event per program execution), and a ``Steps`` line (one event
per training/serving step) when the program marked its steps. :func:`plane_arrays` decodes
the three (``Steps`` times moved onto the ops' clock as module executions are; :func:`traceview.read.xplane.wire.decode_tpu_line`; the other lines are only counted) and derives,
per op event, what the op table needs:

* **times** on the device clock (``device_offset_ps`` / ``device_duration_ps`` stats, ps)
  where the event carries them, else host-aligned;
* **order**: the ops in device-start order (stable). The line is stored in host-aligned order,
  and device-clock starts can be slightly out of it;
* **self time**: duration minus directly nested ops (:func:`traceview.model.timeline.self_times`,
  XProf's ``self_time`` for ``XLA Ops``);
* **enclosing execution**: the index of the ``XLA Modules`` event whose host-aligned interval
  holds the op's host-aligned start (both lines share that clock), -1 for none.

Module executions without device times are moved onto the ops' device clock by the
device-minus-host offset of the first op at or after each execution's start (the offset
drifts over a trace, so no single shift fits).

It imports no polars, so :mod:`traceview.read.prefetch` can run it on a thread while polars is
imported. Raises :class:`~traceview.errors.TraceUnreadable` on malformed lines.
"""

from __future__ import annotations

import numpy as np

from traceview.read import hugearrays
from traceview.model.timeline import enclosing, self_times
from traceview.read.xplane.wire import TPU_LINES_USED, decode_tpu_line


class PlaneArrays:
    """The arrays of one TPU plane (see the module doc). ``n_events``: events on all its
    lines (counted, decoded or not). Module executions, in line order: ``mod_mids``
    (XEventMetadata ids, uint32), ``mod_starts`` (ps, ops' clock), ``mod_durs`` (ps); all
    None when the plane has no ``XLA Modules`` events. Ops, in device-start order:
    ``mids`` (uint32), ``starts``, ``durs``, ``selfs`` (int64 ps), ``occ`` (``num_occurrences``
    per event, 0 for timed events; None when no event is pre-aggregated), ``enc`` (int64
    index into the executions, -1 for none); ``mids`` is None when there is no op. Steps
    (``Steps`` line, in line order): ``step_mids``, ``step_starts`` (ps, ops' clock),
    ``step_durs``; None when the plane has no ``Steps`` events."""

    __slots__ = ("n_events", "mod_mids", "mod_starts", "mod_durs", "mids", "starts", "durs", "selfs", "occ", "enc",
                 "step_mids", "step_starts", "step_durs")

    def __init__(self):
        self.n_events = 0
        self.mod_mids = self.mod_starts = self.mod_durs = None
        self.mids = self.starts = self.durs = self.selfs = self.occ = self.enc = None
        self.step_mids = self.step_starts = self.step_durs = None


def stat_ids(plane, names: dict[int, str] | None = None) -> tuple[int, int]:
    """The XStatMetadata ids of ``device_offset_ps`` and ``device_duration_ps`` on
    ``plane`` (-1 where absent); ``names``: its stat names (id -> name) when read already."""
    if names is None:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
    off_id = dur_id = -1
    for k, v in names.items():  # the first id of each name
        if v == "device_offset_ps" and off_id == -1:
            off_id = k
        elif v == "device_duration_ps" and dur_id == -1:
            dur_id = k
    return off_id, dur_id


def _on_ops_clock(line, op_line) -> np.ndarray:
    """Starts (ps) of a line's events on the ops' clock: their device-clock start where they
    have one, else the host-aligned start plus the device-minus-host offset of the first op at
    or after it (module doc)."""
    starts = line.starts
    if (not line.device_clock.all() and op_line is not None and len(op_line)
            and op_line.device_clock.any()):
        has = op_line.device_clock
        a_ops = op_line.aligned[has]
        delta = op_line.starts[has] - a_ops
        order = np.argsort(a_ops, kind="stable")
        a_sorted, d_sorted = a_ops[order], delta[order]
        a_ev = line.aligned
        pos = np.clip(np.searchsorted(a_sorted, a_ev, side="left"), 0, len(a_sorted) - 1)
        shift = np.where(line.device_clock, 0, d_sorted[pos])
        starts = np.where(line.device_clock, line.starts, a_ev + shift)
    return starts


def plane_arrays(plane, path: str, stat_names: dict[int, str] | None = None) -> PlaneArrays:
    """Decode one TPU plane (an XPlane message or a :class:`~traceview.read.xplane.wire.MappedPlane`,
    whose line pages are released as they are decoded) into :class:`PlaneArrays`.
    ``path`` names the file in errors; ``stat_names``: the plane's stat names when read
    already. Raises TraceUnreadable on malformed bytes."""
    off_id, dur_id = stat_ids(plane, stat_names)
    mapped = getattr(plane, "mapped_lines", None)
    counted = [decode_tpu_line(raw, path, off_id, dur_id, mapped[i] if mapped else None, only=TPU_LINES_USED)
               for i, raw in enumerate(plane.lines)]
    out = PlaneArrays()
    out.n_events = sum(len(le) for le in counted)
    by_name = {le.name: le for le in counted if le.mids is not None}
    mod_line = by_name.get("XLA Modules")
    op_line = by_name.get("XLA Ops")
    mod_intervals = None
    step_line = by_name.get("Steps")
    if step_line is not None and len(step_line):
        out.step_mids, out.step_starts, out.step_durs = step_line.mids, _on_ops_clock(step_line, op_line), \
            step_line.durations
    if mod_line is not None and len(mod_line):
        mod_starts = _on_ops_clock(mod_line, op_line)
        out.mod_mids, out.mod_starts, out.mod_durs = mod_line.mids, mod_starts, mod_line.durations
        mod_intervals = (mod_line.aligned, mod_line.aligned + mod_line.durations)
    if op_line is None or not len(op_line):
        return out
    starts, durs, occ, mids = op_line.starts, op_line.durations, op_line.occurrences, op_line.mids
    if mod_intervals is not None:  # in line (host-aligned) order, which enclosing merges in one pass
        a_st = op_line.aligned
        enc = enclosing(a_st, a_st + durs, *mod_intervals)
        del a_st
    else:
        enc = np.full(len(starts), -1, dtype=np.int64)
    if len(starts) > 1 and not (starts[1:] >= starts[:-1]).all():
        # one sort here instead of one in self time and one in the step anatomy
        order = np.argsort(starts, kind="stable")
        starts, durs, mids, enc = (hugearrays.take(a, order) for a in (starts, durs, mids, enc))
        occ = occ[order] if occ is not None else None
        del order
    out.selfs = self_times(starts, durs)
    out.mids, out.starts, out.durs, out.occ, out.enc = mids, starts, durs, occ, enc
    return out
