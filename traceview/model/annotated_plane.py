"""The decoded XLines of a plane whose ops are named by per-event stats (GPU stream lines,
CPU thunk-executor threads), numpy only, and the prefetch plan of a file.

Everything the prefetch thread runs is imported with this module, before the thread starts:
an import on the thread would race the caller's imports (under pytest both rewrite modules
through ``ast``, which CPython 3.11 does not make thread-safe).

It imports no polars, so :mod:`traceview.read.prefetch` can run :func:`decode_lines` on a
thread while polars is imported; :func:`traceview.model.from_xplane._read_annotated_plane`
turns the lines into the op table, here or after a prefetch (the same function on the same
bytes either way). Raises :class:`~traceview.errors.TraceUnreadable` on malformed lines.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from traceview.model.naming import DERIVED_LINES
from traceview.model.tpu_plane import plane_arrays
from traceview.read.xplane import wire

#: the per-event stats that name an op and key its combo (the event's description), in slot order
KEY_STATS = ("hlo_op", "hlo_module", "program_id", "tf_op", "name", "device_ordinal")
#: per-event stats read as columns after the key stats
EXTRA_STATS = ("step_num",)


def stat_slots(stat_names: dict[int, str]) -> tuple[np.ndarray, np.ndarray]:
    """(XStatMetadata ids, slot per id) of the stats in :data:`KEY_STATS` then
    :data:`EXTRA_STATS` (every id bearing one of the names)."""
    slot_of = {nm: i for i, nm in enumerate(KEY_STATS + EXTRA_STATS)}
    pairs = [(k, slot_of[v]) for k, v in stat_names.items() if v in slot_of]
    return (np.array([k for k, _ in pairs], dtype=np.int64), np.array([s for _, s in pairs], dtype=np.int64))


def iter_lines(plane, path: str, device_lines: bool, which=None):
    """Per XLine of ``plane`` (an XPlane message or a
    :class:`~traceview.read.xplane.wire.MappedPlane`, whose line pages are released once
    decoded), one at a time: its :class:`~traceview.read.xplane.wire.AnnotatedLine`, or, on a
    device plane (``device_lines``), the event count (int) of a derived line (``Steps``,
    ``XLA Modules``... of :data:`~traceview.model.naming.DERIVED_LINES`: no ops there).
    ``which``: the positions of the lines to decode, in order (default: every line).
    ``path`` names the file in errors."""
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    ids, slots = stat_slots(stat_names)
    nkey, nslot = len(KEY_STATS), len(KEY_STATS) + len(EXTRA_STATS)
    mapped = getattr(plane, "mapped_lines", None) or []
    lines = plane.lines
    for i in range(len(lines)) if which is None else which:
        raw = lines[i]
        walked = wire.line_walk(raw, path)  # header and event count: one walk, not one per use
        if device_lines and walked[0].name.startswith(DERIVED_LINES):
            yield walked[1] if walked[1] is not None else wire.count_events(raw, path)
            continue
        le = wire.decode_annotated(raw, path, ids, slots, nkey, nslot, walked)
        if i < len(mapped):
            mapped[i].release()  # the file's pages, re-read from the page cache if touched again
        yield le


def decode_lines(plane, path: str, device_lines: bool, which=None) -> list:
    """:func:`iter_lines` of the plane (of its lines ``which``), as a list (a prefetch's work)."""
    return list(iter_lines(plane, path, device_lines, which))


#: a plane's lines of at least this share of its bytes are decoded as parts of their own by
#: a prefetch (the two threads share a plane of a few large lines); the others as one part
PART_SHARE = 1 / 16


def _parts(plane, device_lines: bool) -> list[tuple]:
    """The prefetch parts ``(plane, work, weight)`` of an annotated plane, in line order: each
    line of at least :data:`PART_SHARE` of its bytes alone, the lines between two such
    together; ``weight``: their bytes."""
    sizes = [len(raw) for raw in plane.lines]
    total = sum(sizes)
    big = [n >= total * PART_SHARE for n in sizes]
    if sum(big) < 2:
        return [(plane, partial(decode_lines, device_lines=device_lines), total)]
    cuts: list[list[int]] = []
    for i, b in enumerate(big):
        if b or not cuts or big[cuts[-1][-1]]:
            cuts.append([i])
        else:
            cuts[-1].append(i)
    return [(plane, partial(decode_lines, device_lines=device_lines, which=c), sum(sizes[i] for i in c)) for c in cuts]


def consume(lines: list):
    """The items of ``lines`` (:func:`decode_lines`) in order, each dropped from the list as
    it is handed out, so a line's arrays are freed once its reader moves on."""
    lines.reverse()
    while lines:
        yield lines.pop()


def _device_lines(plane) -> bool:
    return plane.name.startswith(("/device:GPU:", "/device:CUSTOM:"))


def prefetch_plan(space) -> list[tuple]:
    """What a prefetch of ``space`` decodes: ``(plane, work)`` pairs, ``work(plane, path)``.
    TPU planes through :func:`traceview.model.tpu_plane.plane_arrays`; GPU and CUSTOM device
    planes through :func:`decode_lines`; the ``/host:CPU`` planes too when the space has no
    device plane of those kinds (a CPU trace: the host plane holds the ops; the reader reads
    it only then)."""
    planes = list(space.planes)
    tpu = [(p, plane_arrays) for p in planes if p.name.startswith("/device:TPU:")]
    dev = [part for p in planes if _device_lines(p) for part in _parts(p, True)]
    if tpu or dev:
        return tpu + dev
    return [part for p in planes if p.name == "/host:CPU" for part in _parts(p, False)]
