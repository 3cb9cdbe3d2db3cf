"""The decoded XLines of a plane whose ops are named by per-event stats (GPU stream lines,
CPU thunk-executor threads), and the prefetch plan of a file.

Everything the prefetch thread runs is imported before the thread starts: an import on the
thread would race the caller's imports (under pytest both rewrite modules through ``ast``,
which CPython 3.11 does not make thread-safe). This module imports neither numpy nor polars
(:mod:`traceview.read.xplane.mapped` and protobuf only), so a prefetch of a CPU or GPU trace
(:func:`decode_lines_raw`) starts before they are imported; :func:`prefetch_plan` imports
the TPU decoders, on the calling thread, for a file with TPU planes.
:func:`traceview.model.from_xplane._read_annotated_plane` turns the lines into the op table,
here or after a prefetch (the same decoder on the same bytes either way). Raises
:class:`~traceview.errors.TraceUnreadable` on malformed lines.
"""

from __future__ import annotations

from array import array
from functools import partial

from traceview.model.naming import DERIVED_LINES
from traceview.read.xplane import mapped

#: the per-event stats that name an op and key its combo (the event's description), in slot order
KEY_STATS = ("hlo_op", "hlo_module", "program_id", "tf_op", "name", "device_ordinal")
#: per-event stats read as columns after the key stats
EXTRA_STATS = ("step_num",)


def _slot_pairs(stat_names: dict[int, str]) -> tuple[list[int], list[int]]:
    slot_of = {nm: i for i, nm in enumerate(KEY_STATS + EXTRA_STATS)}
    pairs = [(k, slot_of[v]) for k, v in stat_names.items() if v in slot_of]
    return [k for k, _ in pairs], [s for _, s in pairs]


def stat_slots(stat_names: dict[int, str]):
    """(XStatMetadata ids, slot per id) of the stats in :data:`KEY_STATS` then
    :data:`EXTRA_STATS` (every id bearing one of the names), int64 numpy arrays."""
    import numpy as np

    ids, slots = _slot_pairs(stat_names)
    return np.array(ids, dtype=np.int64), np.array(slots, dtype=np.int64)


def iter_lines(plane, path: str, device_lines: bool):
    """Per XLine of ``plane`` (an XPlane message or a
    :class:`~traceview.read.xplane.wire.MappedPlane`, whose line pages are released once
    decoded), one at a time: its :class:`~traceview.read.xplane.wire.AnnotatedLine`, or, on a
    device plane (``device_lines``), the event count (int) of a derived line (``Steps``,
    ``XLA Modules``... of :data:`~traceview.model.naming.DERIVED_LINES`: no ops there).
    ``path`` names the file in errors."""
    from traceview.read.xplane import wire

    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    ids, slots = stat_slots(stat_names)
    nkey, nslot = len(KEY_STATS), len(KEY_STATS) + len(EXTRA_STATS)
    mlines = getattr(plane, "mapped_lines", None) or []
    for i, raw in enumerate(plane.lines):
        if device_lines and wire.line_header(raw, path).name.startswith(DERIVED_LINES):
            yield wire.count_events(raw, path)
            continue
        le = wire.decode_annotated(raw, path, ids, slots, nkey, nslot)
        if i < len(mlines):
            mlines[i].release()  # the file's pages, re-read from the page cache if touched again
        yield le


def decode_lines(plane, path: str, device_lines: bool) -> list:
    """:func:`iter_lines` of the whole plane, as a list."""
    return list(iter_lines(plane, path, device_lines))


def decode_lines_raw(plane, path: str, device_lines: bool) -> list:
    """:func:`decode_lines` of a mapped plane (C decoder required) without numpy, a prefetch's
    work: each line's :class:`~traceview.read.xplane.mapped.RawAnnotated` (or a derived line's
    event count), made into its :class:`~traceview.read.xplane.wire.AnnotatedLine` by
    :func:`consume`. The same decoder on the same bytes, the same errors."""
    from traceview.errors import TraceUnreadable

    ids, slots = _slot_pairs({k: v.name for k, v in plane.stat_metadata.items()})
    ids, slots = array("q", ids).tobytes(), array("q", slots).tobytes()
    nkey, nslot = len(KEY_STATS), len(KEY_STATS) + len(EXTRA_STATS)
    fast = mapped._fast
    out: list = []
    for i, raw in enumerate(plane.lines):
        if device_lines:
            try:
                name = fast.line_header(raw)[2]
                derived = name.startswith(DERIVED_LINES)
                if derived:
                    out.append(fast.count_events(raw))
            except ValueError as exc:  # UnicodeDecodeError included
                raise TraceUnreadable(mapped._line_fault(exc), path) from None
            if derived:
                continue
        out.append(mapped.decode_annotated_raw(raw, path, ids, slots, nkey, nslot))
        if i < len(plane.mapped_lines):
            plane.mapped_lines[i].release()  # the file's pages, re-read from the page cache if touched again
    return out


def consume(lines: list):
    """The items of ``lines`` (:func:`decode_lines` or :func:`decode_lines_raw`) in order, each
    dropped from the list as it is handed out, so a line's arrays are freed once its reader
    moves on; a raw line is handed out as its :class:`~traceview.read.xplane.wire.AnnotatedLine`."""
    from traceview.read.xplane.wire import annotated_line

    lines.reverse()
    while lines:
        le = lines.pop()
        if isinstance(le, mapped.RawAnnotated):
            le = annotated_line(le)  # the raw columns go now: only the arrays stay while it is read
        yield le


def _device_lines(plane) -> bool:
    return plane.name.startswith(("/device:GPU:", "/device:CUSTOM:"))


def prefetch_plan(space) -> list[tuple]:
    """What a prefetch of ``space`` decodes: ``(plane, work)`` pairs, ``work(plane, path)``.
    TPU planes through :func:`traceview.model.tpu_plane.plane_arrays`; GPU and CUSTOM device
    planes through :func:`decode_lines`; the ``/host:CPU`` planes too when the space has no
    device plane of those kinds (a CPU trace: the host plane holds the ops; the reader reads
    it only then). Lines are decoded by :func:`decode_lines_raw` on a mapped space (without
    numpy), else by :func:`decode_lines`. Call it on the thread that imports (a TPU plane's
    decoder is imported here)."""
    planes = list(space.planes)
    tpu = [p for p in planes if p.name.startswith("/device:TPU:")]
    if tpu:
        from traceview.model.tpu_plane import plane_arrays

        tpu = [(p, plane_arrays) for p in tpu]
    lines = decode_lines_raw if mapped.has_decoder() and all(hasattr(p, "mapped_lines") for p in planes) else decode_lines
    dev = [(p, partial(lines, device_lines=True)) for p in planes if _device_lines(p)]
    if tpu or dev:
        return tpu + dev
    return [(p, partial(lines, device_lines=False)) for p in planes if p.name == "/host:CPU"]
