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
#: per-event stats read as columns after the key stats: step markers, and the CUDA graph and
#: graph node of a kernel run in a command buffer (:mod:`traceview.model.command_buffers`)
EXTRA_STATS = ("step_num", "cuda_graph_id", "cuda_graph_node_id")


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
#: a line of more than this share of its plane's bytes (and :data:`SPLIT_MIN_BYTES` or more)
#: is decoded by a prefetch in pieces of about :data:`PIECE_SHARE` of the plane's bytes, which
#: both threads take (:class:`SplitLine`): by whole lines, one thread would decode it alone
SPLIT_SHARE = 1 / 2
SPLIT_MIN_BYTES = 8 << 20
PIECE_SHARE = 1 / 8
#: pieces of a split line are at least this many bytes
PIECE_MIN_BYTES = 1 << 20


class SplitLine:
    """One XLine of a plane decoded by a prefetch in pieces (:func:`decode_piece`, one part
    each), all into one set of arrays; :meth:`join` gives the line's
    :class:`~traceview.read.xplane.wire.AnnotatedLine`, the same :func:`iter_lines` gives."""

    __slots__ = ("raw", "mapped", "header", "bounds", "counts", "ids", "slots", "arrays", "results", "path")

    def __init__(self, plane, i: int, piece_bytes: int):
        self.raw = plane.lines[i]
        mapped = getattr(plane, "mapped_lines", None) or []
        self.mapped = mapped[i] if i < len(mapped) else None
        self.header, self.bounds, self.counts = wire.annotated_layout(self.raw, "", piece_bytes)
        self.ids, self.slots = stat_slots({k: v.name for k, v in plane.stat_metadata.items()})
        self.arrays = wire.annotated_arrays(self.counts[-1], len(EXTRA_STATS))
        self.results: list = [None] * (len(self.bounds) - 1)
        self.path = ""

    def join(self):
        """The line's AnnotatedLine once every piece is decoded; a piece refused: the whole
        line decoded again as :func:`iter_lines` does, which raises its fault."""
        nkey, nslot = len(KEY_STATS), len(KEY_STATS) + len(EXTRA_STATS)
        if any(not isinstance(r, tuple) for r in self.results):
            raw = self.raw
            return wire.decode_annotated(raw, self.path, self.ids, self.slots, nkey, nslot,
                                         wire.line_walk(raw, self.path))
        out = wire.join_annotated(self.header, self.arrays, self.counts, self.results, nkey, nslot)
        self.arrays = self.results = None
        if self.mapped is not None:
            self.mapped.release()
        return out


def decode_piece(plane, path: str, line: SplitLine, k: int) -> list:
    """Decode piece ``k`` of ``line`` (a prefetch's work); ``[line]`` for its first piece
    (the line's place in the plane's list), else ``[]``."""
    a, b = line.bounds[k], line.bounds[k + 1]
    nkey, nslot = len(KEY_STATS), len(KEY_STATS) + len(EXTRA_STATS)
    try:
        line.results[k] = wire.decode_annotated_piece(memoryview(line.raw)[a:b], path, line.header.name, line.ids,
                                                      line.slots, nkey, nslot, line.counts[k + 1] - line.counts[k],
                                                      line.arrays, line.counts[k])
    except Exception as exc:  # noqa: BLE001 - the line is decoded whole at the join, which names the fault
        line.results[k] = exc
    if line.mapped is not None:
        line.mapped.release(a, b)
    if k == 0:
        line.path = path
        return [line]
    return []


def _split(plane, i: int, device_lines: bool, piece_bytes: int) -> SplitLine | None:
    """Line ``i`` of ``plane`` as a :class:`SplitLine`, None for a derived line (no ops) or
    one that would be a single piece."""
    line = SplitLine(plane, i, piece_bytes)
    if len(line.bounds) < 3 or (device_lines and line.header.name.startswith(DERIVED_LINES)):
        return None
    return line


def _parts(plane, device_lines: bool) -> list[tuple]:
    """The prefetch parts ``(plane, work, weight)`` of an annotated plane, in line order: each
    line of at least :data:`PART_SHARE` of its bytes alone (or in pieces, :data:`SPLIT_SHARE`),
    the lines between two such together; ``weight``: their bytes."""
    sizes = [len(raw) for raw in plane.lines]
    total = sum(sizes)
    split = {}
    if wire.has_decoder():
        for i, n in enumerate(sizes):
            if n >= SPLIT_MIN_BYTES and n > total * SPLIT_SHARE:
                line = _split(plane, i, device_lines, max(int(total * PIECE_SHARE), PIECE_MIN_BYTES))
                if line is not None:
                    split[i] = line
    big = [n >= total * PART_SHARE for n in sizes]
    if not split and sum(big) < 2:
        return [(plane, partial(decode_lines, device_lines=device_lines), total)]
    parts: list[tuple] = []
    run: list[int] = []  # small lines, decoded together

    def close():
        if run:
            parts.append((plane, partial(decode_lines, device_lines=device_lines, which=list(run)),
                          sum(sizes[j] for j in run)))
            run.clear()

    for i, b in enumerate(big):
        if i in split:
            close()
            line = split[i]
            parts.extend((plane, partial(decode_piece, line=line, k=k), line.bounds[k + 1] - line.bounds[k])
                         for k in range(len(line.bounds) - 1))
        elif b:
            close()
            parts.append((plane, partial(decode_lines, device_lines=device_lines, which=[i]), sizes[i]))
        else:
            run.append(i)
    close()
    return parts


def consume(lines: list):
    """The items of ``lines`` (:func:`decode_lines`, :class:`SplitLine` joined) in order,
    each dropped from the list as it is handed out, so a line's arrays are freed once its
    reader moves on."""
    lines.reverse()
    while lines:
        item = lines.pop()
        yield item.join() if isinstance(item, SplitLine) else item


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
