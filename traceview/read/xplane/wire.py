"""Serialized XSpace and XLine bytes to numpy arrays, without polars.

This is the wire layer under :mod:`traceview.model.from_xplane`: it parses an XSpace (whole, or in place
from a memory-mapped file with only the planes' small fields going through protobuf,
:func:`map_xspace`), reads an XLine's header (:func:`line_header`), counts its events
(:func:`count_events`) and decodes them into flat arrays (:func:`decode_line`; TPU lines with
their device-clock stats by :func:`decode_tpu_line`; GPU stream, CPU thunk and host lines,
whose ops are named by per-event stats, by :func:`decode_annotated`: integer columns per
event, each distinct (metadata id, stat values) and string once per line). Wire format:
OpenXLA's profiler schema (``xplane.proto``). The optional C
accelerator ``traceview.read.xplane._decode`` does the walking when it is built; the protobuf
fallbacks give the same arrays. Every function raises
:class:`~traceview.errors.TraceUnreadable` naming the file on malformed bytes.

It imports numpy and protobuf only, so that a file can be decoded on a thread while the rest
of traceview (polars) is still being imported (:mod:`traceview.read.prefetch`).
"""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError

# at module level: a decoding thread (traceview.read.prefetch) imports nothing
from traceview.read.diagnose import _varint, protobuf_fault, walk_fault, xspace_fault
from traceview.read import hugearrays
from traceview.read.xplane.protos import XLine, XLineEventsLoose, XLineEventsRaw, XLineHeader, XSpaceLazy
from traceview.errors import TraceUnreadable

try:  # optional C accelerator (setup.py builds it when a compiler is available)
    from traceview.read.xplane import _decode as _fast
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _fast = None



def has_decoder() -> bool:
    """Whether the C decoder is built (files are then read in place, :func:`map_xspace`)."""
    return _fast is not None

_U64 = (1 << 64) - 1


def read_xspace_bytes(data: bytes, path: str):
    """Parse serialized XSpace bytes into the lazy view (lines kept as raw bytes).

    Raises :class:`TraceUnreadable` naming ``path``."""
    space = XSpaceLazy()
    try:
        space.ParseFromString(data)
    except (DecodeError, RecursionError, ValueError) as exc:
        why = xspace_fault(data) or protobuf_fault(exc)
        raise TraceUnreadable(f"not a valid XSpace protobuf: {why}", path) from None
    return space



def _varint_bytes(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


class MappedLine:
    """One XLine left in the memory-mapped file: ``view`` (a memoryview of its bytes) and
    ``release()``, which hands its pages back to the OS (they are re-read from the page
    cache if touched again)."""

    __slots__ = ("view", "mm", "start", "end")

    def __init__(self, mm, start: int, end: int):
        self.mm, self.start, self.end = mm, start, end
        self.view = memoryview(mm)[start:end]

    def release(self, lo: int = 0, hi: int | None = None) -> None:
        """madvise(DONTNEED) the whole pages inside [start + lo, start + hi)."""
        import mmap as _mmap

        if (self.end if hi is None else self.start + hi) - (self.start + lo) < _mmap.PAGESIZE:
            return  # no whole page inside
        if not hasattr(_mmap, "MADV_DONTNEED"):
            return
        a = self.start + lo
        b = self.end if hi is None else self.start + hi
        page = _mmap.PAGESIZE
        a = -(-a // page) * page
        b = (b // page) * page
        if b > a:
            try:
                self.mm.madvise(_mmap.MADV_DONTNEED, a, b - a)
            except (OSError, ValueError):
                pass


#: event_metadata entries from which a mapped plane's map is left in the file and each entry
#: parsed when asked for (:class:`LazyEventMetadata`): the op-table columns are read from the
#: bytes, so protobuf's parse of a large map is memory and time for nothing (figures in
#: ``benchmarks/RESULTS.md``, "Large inputs")
LAZY_METADATA_ENTRIES = 4096


class LazyEventMetadata:
    """A plane's ``event_metadata`` map (XPlane field 4) left in the mapped file: a read-only
    mapping of int64 id -> XEventMetadata, each entry parsed by protobuf when it is looked up
    (not cached) or iterated, in the order of the entries in the file; a repeated id is its
    last entry, as protobuf's map parse keeps (protobuf iterates a map in an order of its own). :meth:`names` gives every entry's name without protobuf.
    Raises :class:`~traceview.errors.TraceUnreadable` naming the file on an entry protobuf
    refuses, ``KeyError`` on an unknown id."""

    __slots__ = ("_mm", "_span", "_path", "_ids", "_starts", "_ends", "_order")

    def __init__(self, mm, span: tuple, path: str, keys: bytes, starts: bytes, ends: bytes):
        self._mm, self._span, self._path = mm, span, path
        k = np.frombuffer(keys, dtype=np.int64)
        uniq, rev = np.unique(k[::-1], return_index=True)  # sorted ids, each one's last entry
        row = len(k) - 1 - rev
        self._ids = uniq
        self._starts = np.frombuffer(starts, dtype=np.int64)[row]
        self._ends = np.frombuffer(ends, dtype=np.int64)[row]
        self._order = np.argsort(row, kind="stable")  # iteration: the entries' order in the file

    def _row(self, key) -> int:
        try:
            k = int(key)
        except (TypeError, ValueError):
            return -1
        i = int(np.searchsorted(self._ids, k))
        return i if i < len(self._ids) and int(self._ids[i]) == k else -1

    def _parse(self, i: int):
        from traceview.read.xplane.protos import XEventMetadata

        try:
            return XEventMetadata.FromString(_fast.copy_bytes(self._mm, int(self._starts[i]), int(self._ends[i])))
        except (DecodeError, RecursionError, ValueError) as exc:
            raise TraceUnreadable(f"event metadata {int(self._ids[i])} is not a valid XEventMetadata: "
                                  f"{protobuf_fault(exc)}", self._path) from None

    def __getitem__(self, key):
        i = self._row(key)
        if i < 0:
            raise KeyError(key)
        return self._parse(i)

    def get(self, key, default=None):
        i = self._row(key)
        return default if i < 0 else self._parse(i)

    def __contains__(self, key) -> bool:
        return self._row(key) >= 0

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self):
        return iter(self.keys())

    def keys(self):
        return self._ids[self._order].tolist()

    def values(self):
        return (self._parse(i) for i in self._order.tolist())

    def items(self):
        return ((int(self._ids[i]), self._parse(i)) for i in self._order.tolist())

    def contains_any(self, needles: tuple[bytes, ...]) -> bool:
        """Whether any of ``needles`` occurs in the bytes of the map's entries (a necessary
        condition for a name to contain it; True when the bytes cannot be searched)."""
        if not len(self._ids):
            return False
        mm = self._mm
        try:
            return _fast.contains_any(mm, int(self._starts.min()), int(self._ends.max()), tuple(needles))
        except (ValueError, TypeError):
            return True

    def names(self) -> dict[int, str]:
        """id -> name of every entry, read from the bytes (the C decoder's metadata walk)."""
        mm, lo, hi = self._span
        try:
            mids, names, _, _, _, _ = _fast.decode_metadata(mm, lo, hi, np.zeros(0, dtype=np.int64),
                                                             np.zeros(0, dtype=np.int64), 0)
        except ValueError:
            return {k: md.name for k, md in self.items()}  # protobuf names the fault
        return dict(zip(np.frombuffer(mids, dtype=np.int64).tolist(), names))


def metadata_bytes(plane, limit: int) -> bytes | None:
    """The serialized event_metadata entries of a mapped plane (:class:`MappedPlane`), when
    they lie side by side in the file and hold at most ``limit`` bytes, else None: two planes
    with the same bytes have the same metadata (a merged profile's ranks run the same
    programs)."""
    md_span, span = getattr(plane, "metadata_span", None), getattr(plane, "span", None)
    if md_span is None or span is None or md_span[1] - md_span[0] > limit:
        return None
    try:
        return _fast.copy_bytes(span[0], md_span[0], md_span[1])
    except ValueError:
        return None


def metadata_names(plane, containing: tuple[bytes, ...] = ()):
    """(id, name) of the XEventMetadata of ``plane`` (an XPlane, lazy or mapped), an iterator:
    all of them, or, given ``containing`` (UTF-8 byte strings), at least those whose name
    contains one of them. A :class:`LazyEventMetadata` map's names are read from its bytes;
    none is read when none of ``containing`` occurs in the entries' bytes (a mapped plane's
    entries side by side, or a lazy map's)."""
    md_span, span = getattr(plane, "metadata_span", None), getattr(plane, "span", None)
    if containing and md_span is not None and span is not None and _fast is not None:
        try:  # the entries' bytes, side by side in the mapping: searched without parsing a name
            if not _fast.contains_any(span[0], md_span[0], md_span[1], tuple(containing)):
                return iter(())
        except (ValueError, TypeError):
            pass
    table = plane.event_metadata
    if isinstance(table, LazyEventMetadata):
        if containing and not table.contains_any(containing):
            return iter(())
        return iter(table.names().items())
    return ((k, md.name) for k, md in table.items())


class MappedPlane:
    """An XPlane read in place: the parsed small fields (``id``, ``name``,
    ``event_metadata``, ``stat_metadata``, ``stats``) and ``lines``, the XLines as memoryviews
    (``mapped_lines``: the same as :class:`MappedLine`). ``event_metadata`` is a
    :class:`LazyEventMetadata` when the plane has :data:`LAZY_METADATA_ENTRIES` or more."""

    def __init__(self, msg, mapped_lines: list, span: tuple | None = None, event_metadata=None,
                 metadata_span: tuple | None = None):
        self._msg = msg
        self.name = msg.name  # read often: kept here, not looked up through the message each time
        self.mapped_lines = mapped_lines
        self.lines = [m.view for m in mapped_lines]
        self.span = span  # (mapping, start, end) of the XPlane message's bytes
        self.metadata_span = metadata_span  # (start, end) of its event_metadata entries, side by side
        if event_metadata is not None:
            self.event_metadata = event_metadata

    def __getattr__(self, name):
        return getattr(self._msg, name)


class MappedSpace:
    """An XSpace read in place (:func:`map_xspace`): ``planes`` (:class:`MappedPlane`),
    ``hostnames``, ``errors``, ``warnings``."""

    def __init__(self, msg, planes: list):
        self._msg = msg
        self.planes = planes

    def __getattr__(self, name):
        return getattr(self._msg, name)


def map_xspace(path: Path):
    """The XSpace of ``path`` read in place through ``mmap`` (C accelerator required), or
    None when the file cannot be mapped or its wire structure is malformed (the caller
    then reads it the classic way, which reports the fault).

    Method: ``scan_message`` lists the top-level XSpace fields and ``scan_plane`` splits each
    plane; everything except the XLines (the planes' names, metadata, stats, the hostnames) is
    copied out and parsed by protobuf as an XSpace whose planes have no lines; the XLines stay
    as views into the mapping, and so does a metadata map of :data:`LAZY_METADATA_ENTRIES` or
    more entries (:class:`LazyEventMetadata`)."""
    mm = _map_readonly(path)
    if mm is None:
        return None
    try:
        top = _fast.scan_message(mm, 0, len(mm))
        skeleton = bytearray()
        plane_lines: list[list] = []
        spans, entries = [], []
        for field, wt, tag, vs, ve in top:
            if field == 1 and wt == 2:
                # the plane's fields but its XLines (and a large metadata map), copied under
                # the guard: the file may shrink meanwhile
                rest, line_spans, md, md_span = _fast.scan_plane(mm, vs, ve, LAZY_METADATA_ENTRIES)
                plane_lines.append([MappedLine(mm, a, b) for a, b in line_spans])
                spans.append((mm, vs, ve))
                entries.append((md, md_span))
                skeleton += b"\x0a" + _varint_bytes(len(rest)) + rest
            else:
                skeleton += _fast.copy_bytes(mm, tag, ve)
        msg = XSpaceLazy()
        msg.ParseFromString(bytes(skeleton))
    except (ValueError, DecodeError, RecursionError):
        return None
    if len(msg.planes) != len(plane_lines):
        return None
    name = str(path)
    return MappedSpace(msg, [MappedPlane(pm, ls, sp, None if md is None else LazyEventMetadata(mm, sp, name, *md),
                                         md_span) for pm, ls, sp, (md, md_span) in zip(msg.planes, plane_lines, spans, entries)])



def _map_readonly(path: Path):
    """``path`` memory-mapped read-only, or None when it cannot be (missing, empty, a pipe)."""
    import mmap as _mmap

    try:
        with open(path, "rb") as fh:
            return _mmap.mmap(fh.fileno(), 0, access=_mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None


def mapped_fault(path: Path) -> str | None:
    """:func:`traceview.read.diagnose.xspace_fault` on the memory-mapped file when its top
    level is malformed (:func:`~traceview.read.diagnose.walk_fault`): the fault named without
    reading the file into memory (the first MiB and the top-level field keys). None when the
    file cannot be mapped or its top level is well formed (protobuf then decides)."""
    mm = _map_readonly(path)
    if mm is None:
        return None
    try:
        return xspace_fault(mm) if walk_fault(mm) else None
    except (OSError, ValueError, IndexError):  # the file shrank meanwhile
        return None
    finally:
        mm.close()


class LineEvents:
    """The events of one XLine as flat arrays: ``mids`` (XEventMetadata ids), ``starts`` (ps
    since session start), ``durations`` (ps), ``occurrences`` (``num_occurrences``, 0 for
    timed events), ``has_stats`` (bool: the event carries per-event stats)."""

    __slots__ = ("name", "header", "mids", "starts", "durations", "occurrences", "has_stats", "raw", "stat_values", "stat_values2")

    def __len__(self) -> int:
        return len(self.mids)


#: An XLine's own fields (what :class:`~traceview.read.xplane.protos.XLineHeader` holds).
LineHeader = namedtuple("LineHeader", "id display_id name display_name timestamp_ns duration_ps")


def _line_fault(exc: Exception, name: str | None = None) -> str:
    """The one-line fault for a line the decoder refused: the C guard's "the file changed
    while it was read" as it is, anything else as a malformed XLine."""
    text = str(exc)
    if "changed while it was read" in text:
        return text
    return f"malformed XLine {name!r} ({text})" if name is not None else f"malformed XLine ({text})"


def line_header(raw: bytes, path: str) -> LineHeader:
    """The header fields of one serialized XLine, its events skipped (C accelerator when
    built, else protobuf). Raises :class:`TraceUnreadable` on malformed bytes."""
    if _fast is not None:
        try:
            return LineHeader(*_fast.line_header(raw))
        except ValueError as exc:  # UnicodeDecodeError included
            raise TraceUnreadable(_line_fault(exc), path) from None
    try:
        h = XLineHeader.FromString(raw)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise TraceUnreadable(_line_fault(exc), path) from None
    return LineHeader(h.id, h.display_id, h.name, h.display_name, h.timestamp_ns, h.duration_ps)


def line_walk(raw, path: str) -> tuple[LineHeader, int | None]:
    """(:func:`line_header`, the line's event count) from one walk over the line (C
    accelerator when built; without it, the header and None). Raises as :func:`line_header`."""
    if _fast is not None:
        try:
            head, n = _fast.line_header(raw, True)
        except ValueError as exc:  # UnicodeDecodeError included
            raise TraceUnreadable(_line_fault(exc), path) from None
        return LineHeader(*head), n
    return line_header(raw, path), None


def line_name(raw, path: str) -> str:
    """The name of one serialized XLine, read from the fields before its events when it comes
    first (XProf writes a line's fields in number order: id, name, timestamp_ns, then the
    events): only the line's first bytes are touched, not the pages of its events (a mapped
    line's pages, once released, stay released); of several names there, the last (as
    protobuf keeps); a name after the events is not looked for. Without a name before the
    events, or on anything unexpected, the name :func:`line_header` reads (which walks the
    whole line, and raises on malformed bytes)."""
    name = None
    try:
        pos, n = 0, len(raw)
        while pos < n:
            key, pos = _varint(raw, pos)
            if key is None:
                break
            field, wire_type = key >> 3, key & 7
            if field == 4:  # the events begin: the name is not before them
                break
            if wire_type == 0:
                _, pos = _varint(raw, pos)
            elif wire_type == 2:
                size, pos = _varint(raw, pos)
                if size is None or pos + size > n:
                    break
                if field == 2:
                    name = bytes(raw[pos:pos + size]).decode("utf-8")
                pos += size
            elif wire_type == 1:
                pos += 8
            elif wire_type == 5:
                pos += 4
            else:
                break
    except (ValueError, TypeError):
        name = None
    return name if name is not None else line_header(raw, path).name


def count_events(raw: bytes, path: str) -> int:
    """Number of XEvents in one serialized XLine, without decoding them."""
    if _fast is not None:
        try:
            return _fast.count_events(raw)
        except ValueError as exc:
            raise TraceUnreadable(_line_fault(exc), path) from None
    try:  # the events are not looked into, as the C decoder does not
        return len(XLineEventsRaw.FromString(raw).events)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise TraceUnreadable(_line_fault(exc), path) from None


def decode_line(raw: bytes, path: str, stat_id: int = -1, stat_id2: int = -1) -> LineEvents:
    """Decode one serialized XLine (header + event arrays) with the C accelerator when it is
    built, else with protobuf. ``stat_values`` holds each event's integer XStat with
    metadata id ``stat_id`` (-1 where absent), ``stat_values2`` the same for ``stat_id2``. Raises :class:`TraceUnreadable` on malformed
    bytes."""
    le = LineEvents()
    le.raw = raw
    le.header = line_header(raw, path)
    le.name = le.header.name
    if _fast is not None:
        try:
            ts, n, mids, offs, durs, occs, flags, svals, svals2 = _fast.decode_line(raw, stat_id, stat_id2)
        except ValueError as exc:
            raise TraceUnreadable(_line_fault(exc, le.name), path) from None
        le.mids = np.frombuffer(mids, dtype=np.int64)
        offsets = np.frombuffer(offs, dtype=np.int64)
        le.durations = np.frombuffer(durs, dtype=np.int64)
        le.occurrences = np.frombuffer(occs, dtype=np.int64)
        le.has_stats = np.frombuffer(flags, dtype=np.bool_)
        le.stat_values = np.frombuffer(svals, dtype=np.int64)
        le.stat_values2 = np.frombuffer(svals2, dtype=np.int64)
    else:
        try:
            evs = XLineEventsLoose.FromString(raw).events
        except (DecodeError, RecursionError, ValueError) as exc:
            raise TraceUnreadable(_line_fault(exc, le.name), path) from None
        n = len(evs)
        le.mids = np.fromiter((e.metadata_id for e in evs), dtype=np.int64, count=n)
        offsets = np.fromiter((e.offset_ps for e in evs), dtype=np.int64, count=n)
        le.durations = np.fromiter((e.duration_ps for e in evs), dtype=np.int64, count=n)
        le.occurrences = np.fromiter((e.num_occurrences for e in evs), dtype=np.int64, count=n)
        le.has_stats = np.fromiter((len(e.stats) > 0 for e in evs), dtype=np.bool_, count=n)
        le.stat_values = np.full(n, -1, dtype=np.int64)
        le.stat_values2 = np.full(n, -1, dtype=np.int64)
        if stat_id >= 0 or stat_id2 >= 0:  # as the C decoder: then every stat is read
            try:
                for i, e in enumerate(evs):
                    for sraw in e.stats:
                        sid, v = _stat_int_fields(sraw)
                        if v is not None and sid >= 0:
                            if sid == stat_id:
                                le.stat_values[i] = v
                            if sid == stat_id2:
                                le.stat_values2[i] = v
            except ValueError as exc:
                raise TraceUnreadable(_line_fault(exc, le.name), path) from None
    le.starts = offsets + _line_base_ps(le.header.timestamp_ns)
    return le


def _line_base_ps(timestamp_ns: int) -> np.int64:
    """``timestamp_ns * 1000`` as int64 ps, wrapping like the event arithmetic does when a
    corrupt line's timestamp is out of range (the reader notes such times; it never raises)."""
    return np.int64(((int(timestamp_ns) * 1000 + (1 << 63)) & _U64) - (1 << 63))


def _stat_int_fields(raw: bytes) -> tuple[int, int | None]:
    """(metadata_id, integer value or None) of one serialized XStat, read field by field as
    the C decoder reads it (``stat_int`` in ``_decode.c``: the last int64/uint64 value
    field counts, as int64); malformed bytes raise ValueError."""
    sid, val, i, n = -1, None, 0, len(raw)
    while i < n:
        key, i = _varint(raw, i)
        if key is None:
            raise ValueError("bad stat")
        f, w = (key >> 3) & 0xFFFFFFFF, key & 7  # C: (int)(key >> 3)
        if w == 0:
            v, i = _varint(raw, i)
            if v is None:
                raise ValueError("bad stat")
            v = v & _U64
            v = v - (1 << 64) if v >= 1 << 63 else v  # int64, as the C decoder casts it
            if f == 1:
                sid = v
            elif f in (3, 4):
                val = v
        else:
            i = _skip_value(raw, i, key, 0)
    return sid, val


def _skip_value(raw: bytes, i: int, key: int, depth: int) -> int:
    """Index after the value of the field whose ``key`` ends at ``raw[i]`` (``skip_field`` in
    ``_decode.c``: groups to their matching end tag, at most 100 deep)."""
    n, w = len(raw), key & 7
    if w == 0:
        v, i = _varint(raw, i)
        if v is None:
            raise ValueError("bad stat")
        return i
    if w in (1, 5):
        i += 8 if w == 1 else 4
        if i > n:
            raise ValueError("bad stat")
        return i
    if w == 2:
        ln, i = _varint(raw, i)
        if ln is None or ln > n - i:
            raise ValueError("bad stat")
        return i + ln
    if w == 3 and depth < 100:
        while True:
            k, i = _varint(raw, i)
            if k is None or (k >> 3) == 0 or (k >> 3) > 0x1FFFFFFF:
                raise ValueError("bad stat")
            if k & 7 == 4:
                if (k >> 3) != (key >> 3):
                    raise ValueError("bad stat")
                return i
            i = _skip_value(raw, i, k, depth + 1)
    raise ValueError("bad stat")


def _copy(raw, path: str) -> bytes:
    """The bytes of a mapped XLine, copied under the C truncation guard (a plain ``bytes()``
    of a mapping whose file shrank would die of SIGBUS)."""
    try:
        return _fast.copy_bytes(raw, 0, len(raw))
    except ValueError as exc:
        raise TraceUnreadable(f"cannot read the XLine ({exc})", path) from None


def _full_line(raw, path: str):
    if not isinstance(raw, bytes):
        raw = _copy(raw, path)
    try:
        return XLine.FromString(raw)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise TraceUnreadable(_line_fault(exc), path) from None


class TpuLine:
    """The events of one TPU XLine on the clocks traceview uses: ``mids`` (XEventMetadata
    ids), ``starts`` / ``durations`` (ps; the device clock's ``device_offset_ps`` /
    ``device_duration_ps`` where the event carries both, else the host-aligned line times),
    ``aligned`` (host-aligned start, ps), ``device_clock`` (bool: the device clock was used),
    ``occurrences`` (``num_occurrences``, 0 for timed events; None when no event is
    pre-aggregated)."""

    __slots__ = ("name", "mids", "starts", "durations", "aligned", "device_clock", "occurrences", "n")

    def __len__(self) -> int:
        return self.n


#: XLines larger than this are decoded in pieces of about this size, each released after use
PIECE_BYTES = 32 << 20


#: the TPU lines whose events traceview uses (the others are only counted)
TPU_LINES_USED = ("XLA Ops", "XLA Modules", "Steps")


def decode_tpu_line(raw, path: str, off_id: int, dur_id: int, mapped: "MappedLine | None" = None,
                    only: tuple[str, ...] | None = None) -> TpuLine:
    """Decode one TPU XLine (see :class:`TpuLine`). With the C accelerator the events are
    written straight into preallocated arrays (5 arrays, 29 bytes per event), in pieces of
    :data:`PIECE_BYTES` whose file pages are released behind the decoder when the line lives
    in a mapped file; a line with pre-aggregated events or metadata ids past 32 bits takes
    the general decoder. A line whose name is not in ``only`` (when given) is walked for its
    name and event count only (its arrays are None). Raises :class:`TraceUnreadable` on
    malformed bytes."""
    out = TpuLine()
    if _fast is not None:
        try:  # one pass: header (validated as line_header does), event count, piece bounds
            n, head, bounds = _fast.line_layout(raw, PIECE_BYTES)
        except ValueError as exc:  # UnicodeDecodeError included
            raise TraceUnreadable(_line_fault(exc), path) from None
        out.name, out.n, ts_ns = head[2], n, head[4]
    else:
        out.name = line_header(raw, path).name
    if only is not None and out.name not in only:
        if _fast is None:
            out.n = count_events(raw, path)
        if mapped is not None:
            mapped.release()
        out.mids = out.starts = out.durations = out.aligned = out.device_clock = out.occurrences = None
        return out
    if _fast is not None:
        try:
            if n * 8 < hugearrays.MIN_BYTES:  # a small line (thousands of planes): plain arrays, no pages to release
                mids, starts, durs, al = (np.empty(n, np.uint32), np.empty(n, np.int64), np.empty(n, np.int64),
                                          np.empty(n, np.int64))
                flags = np.empty(n, np.uint8)
            else:
                mids = hugearrays.empty(n, np.uint32)
                starts = hugearrays.empty(n, np.int64)
                durs = hugearrays.empty(n, np.int64)
                al = hugearrays.empty(n, np.int64)
                flags = hugearrays.empty(n, np.uint8)
            base = ((int(ts_ns) * 1000 + (1 << 63)) & _U64) - (1 << 63)  # int(_line_base_ps(ts_ns))
            if len(bounds) == 2:
                _fast.decode_tpu(raw, base, off_id, dur_id, mids, starts, durs, al, flags, 0)
            else:
                i = 0
                for a, b in zip(bounds[:-1], bounds[1:]):
                    i += _fast.decode_tpu(raw[a:b], base, off_id, dur_id, mids, starts, durs, al, flags, i)
                    if mapped is not None:
                        mapped.release(a, b)
        except ValueError as exc:  # UnicodeDecodeError included
            raise TraceUnreadable(_line_fault(exc, out.name), path) from None
        if mapped is not None:
            mapped.release()
        if not (flags & 6).any():
            out.mids, out.starts, out.durations, out.aligned = mids, starts, durs, al
            out.device_clock = (flags & 1).astype(bool)
            out.occurrences = None
            return out
    le = decode_line(raw if isinstance(raw, bytes) else _copy(raw, path), path, off_id, dur_id)
    both = (le.stat_values >= 0) & (le.stat_values2 >= 0)
    out.name = le.name
    out.mids = le.mids
    out.aligned = le.starts
    out.device_clock = both
    out.starts = np.where(both, le.stat_values, le.starts) if both.any() else le.starts
    out.durations = np.where(both, le.stat_values2, le.durations) if both.any() else le.durations
    out.occurrences = le.occurrences if (le.occurrences > 0).any() else None
    out.n = len(le.mids)
    return out




class AnnotatedLine:
    """The events of one XLine whose ops are named by per-event stats (GPU streams, CPU
    thunk-executor and host threads), as columns (:func:`decode_annotated`). Per event:
    ``starts`` / ``durations`` (ps), ``occurrences`` (``num_occurrences``, 0 for timed
    events), ``has_stats`` (bool), ``combo`` (uint32: index of the event's distinct
    (metadata id, key stat values)), ``extra_kinds`` / ``extra_values`` ((n, extra slots):
    the extra stats' values). Per combo, in order of first appearance: ``combo_mids``
    (int64 XEventMetadata ids), ``combo_kinds`` / ``combo_values`` ((m, key slots)).
    A value is (kind, int64): :data:`KIND_ABSENT`, ... :data:`KIND_NONE`; str and bytes
    values index ``strings`` (each distinct value once), a double holds its bits."""

    __slots__ = ("name", "header", "starts", "durations", "occurrences", "has_stats", "combo", "extra_kinds",
                 "extra_values", "combo_mids", "combo_kinds", "combo_values", "strings")

    def __len__(self) -> int:
        return len(self.starts)


#: value kinds of :class:`AnnotatedLine` (``_decode.c`` ``decode_annotated``)
KIND_ABSENT, KIND_DOUBLE, KIND_UINT64, KIND_INT64, KIND_STR, KIND_BYTES, KIND_REF, KIND_NONE = range(8)
#: at most this many stat slots per call (``ANNOT_MAX_SLOTS`` in ``_decode.c``)
MAX_SLOTS = 32


def decode_annotated(raw, path: str, ids, slots, nkey: int, nslot: int, walked=None) -> AnnotatedLine:
    """Decode one XLine whose events are named by per-event stats into an
    :class:`AnnotatedLine`: an XStat whose metadata id is ``ids[i]`` fills slot ``slots[i]``
    (the later stat of an event wins); slots below ``nkey`` key the event's combo, the others
    are per-event columns. C accelerator when built, else protobuf and the stat reader of
    :func:`_stat_value_fields` (the same arrays). ``walked``: :func:`line_walk` of ``raw``
    when the caller has it (the line is not walked again). Raises :class:`TraceUnreadable` on
    malformed bytes (a str value of a slot that is not UTF-8 included)."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    slots = np.ascontiguousarray(slots, dtype=np.int64)
    if not 0 <= nkey <= nslot <= MAX_SLOTS or len(ids) != len(slots):
        raise ValueError("bad stat slots")
    out = AnnotatedLine()
    out.header, counted = walked if walked is not None else (line_header(raw, path), None)
    out.name = out.header.name
    nx = nslot - nkey
    if _fast is not None:
        try:
            (ts, n, offs, durs, occs, flags, combo, xk, xv, cm, ck, cv,
             strings) = _fast.decode_annotated(raw, ids, slots, nkey, nslot, -1 if counted is None else counted)
        except ValueError as exc:  # UnicodeDecodeError included
            raise TraceUnreadable(_line_fault(exc, out.name), path) from None
        offsets = np.frombuffer(offs, dtype=np.int64)
        out.durations = np.frombuffer(durs, dtype=np.int64)
        out.occurrences = np.frombuffer(occs, dtype=np.int64)
        out.has_stats = np.frombuffer(flags, dtype=np.bool_)
        out.combo = np.frombuffer(combo, dtype=np.uint32)
        out.extra_kinds = np.frombuffer(xk, dtype=np.uint8).reshape(n, nx)
        out.extra_values = np.frombuffer(xv, dtype=np.int64).reshape(n, nx)
        out.combo_mids = np.frombuffer(cm, dtype=np.int64)
        m = len(out.combo_mids)
        out.combo_kinds = np.frombuffer(ck, dtype=np.uint8).reshape(m, nkey)
        out.combo_values = np.frombuffer(cv, dtype=np.int64).reshape(m, nkey)
        out.strings = strings
        del occs, xv
        # columns without a value (no pre-aggregated event, no extra stat): one read-only zero
        # instead of 8 bytes per event (a whole plane's lines may be held at once: prefetch)
        if n and not out.occurrences.any():
            out.occurrences = np.broadcast_to(np.int64(0), (n,))
        if n and nx and not out.extra_kinds.any():  # KIND_ABSENT is 0
            out.extra_values = np.broadcast_to(np.int64(0), (n, nx))
    else:
        try:
            _annotated_python(out, raw if isinstance(raw, bytes) else bytes(raw), ids, slots, nkey, nslot)
        except (DecodeError, RecursionError, ValueError) as exc:
            raise TraceUnreadable(_line_fault(exc, out.name), path) from None
        offsets = out.starts
    out.starts = offsets + _line_base_ps(out.header.timestamp_ns)
    return out


def annotated_layout(raw, path: str, piece_bytes: int) -> tuple[LineHeader, list[int], list[int]]:
    """(header, bounds, counts) of one XLine for :func:`decode_annotated_piece`: its header,
    byte offsets cutting it into pieces of about ``piece_bytes`` at field boundaries (the
    first 0, the last its length) and the events before each offset (the last its event
    count), from one walk over the line. C accelerator only. Raises :class:`TraceUnreadable`
    on malformed bytes."""
    try:
        _n, head, bounds, counts = _fast.line_layout(raw, max(int(piece_bytes), 1), True)
    except ValueError as exc:  # UnicodeDecodeError included
        raise TraceUnreadable(_line_fault(exc), path) from None
    return LineHeader(*head), bounds, counts


def annotated_arrays(n: int, nx: int) -> tuple:
    """The per-event arrays of an :class:`AnnotatedLine` of ``n`` events and ``nx`` extra
    slots that :func:`decode_annotated_piece` fills, uninitialized: offsets, durations,
    has_stats, combo, extra_kinds (the occurrences and extra values are each piece's own)."""
    return (hugearrays.empty(n, np.int64), hugearrays.empty(n, np.int64), hugearrays.empty(n, np.uint8),
            hugearrays.empty(n, np.uint32), hugearrays.empty(n * nx, np.uint8))


def decode_annotated_piece(piece, path: str, name: str, ids, slots, nkey: int, nslot: int, n: int, arrays: tuple,
                           index: int) -> tuple:
    """Decode the ``n`` events of one piece of an XLine (:func:`annotated_layout`'s
    ``raw[bounds[k]:bounds[k + 1]]``, ``n`` = ``counts[k + 1] - counts[k]``) into ``arrays``
    (:func:`annotated_arrays` of the whole line) from event ``index`` on, as
    :func:`decode_annotated` decodes them; returns, for :func:`join_annotated`, the piece's own
    (combo_mids, combo_kinds, combo_values, strings) and its occurrences and extra values
    (None when all zero: no pre-aggregated event, no extra stat). C accelerator only;
    pieces of a line may be decoded on several threads at once. Raises
    :class:`TraceUnreadable` (``name``: the line's) on malformed bytes."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    slots = np.ascontiguousarray(slots, dtype=np.int64)
    if not 0 <= nkey <= nslot <= MAX_SLOTS or len(ids) != len(slots):
        raise ValueError("bad stat slots")
    nx = nslot - nkey
    offs, durs, flags, combo, xk = arrays
    occs, xv = np.empty(n, dtype=np.int64), np.empty(n * nx, dtype=np.int64)
    a, b = index, index + n
    try:
        got = _fast.decode_annotated_into(piece, ids, slots, nkey, nslot, n, offs[a:b], durs[a:b], occs, flags[a:b],
                                          combo[a:b], xk[a * nx:b * nx], xv, 0)
    except ValueError as exc:  # UnicodeDecodeError included
        raise TraceUnreadable(_line_fault(exc, name), path) from None
    return got + (occs if occs.any() else None, xv if xk[a * nx:b * nx].any() else None)


def join_annotated(header: LineHeader, arrays: tuple, counts: list[int], pieces: list[tuple], nkey: int,
                   nslot: int) -> AnnotatedLine:
    """The :class:`AnnotatedLine` of a line decoded in pieces (:func:`decode_annotated_piece`,
    piece ``k`` holding events ``counts[k]:counts[k + 1]`` of ``arrays`` and returning
    ``pieces[k]``): the same arrays, combos and strings :func:`decode_annotated` gives the
    whole line. The pieces' strings and combos are numbered again in order of first
    appearance in the line and the events' combo ids and string values renumbered in place."""
    nx = nslot - nkey
    offs, durs, flags, combo, xk = arrays
    n = len(offs)
    xk = xk.reshape(n, nx)
    occs = np.zeros(n, dtype=np.int64) if any(p[4] is not None for p in pieces) else None
    xv = np.zeros((n, nx), dtype=np.int64) if nx and any(p[5] is not None for p in pieces) else None
    strings: list = []
    string_id: dict = {}  # a str and a bytes value never compare equal: one key space
    mids, kinds, vals = [], [], []
    for (a, b), (cm, ck, cv, strs, p_occ, p_xv) in zip(zip(counts[:-1], counts[1:]), pieces):
        smap = np.empty(len(strs), dtype=np.int64)
        for j, v in enumerate(strs):
            g = string_id.get(v)
            if g is None:
                g = string_id[v] = len(strings)
                strings.append(v)
            smap[j] = g
        m = len(cm) // 8
        ck_ = np.frombuffer(ck, dtype=np.uint8).reshape(m, nkey)
        cv_ = np.frombuffer(cv, dtype=np.int64).reshape(m, nkey)
        is_str = (ck_ == KIND_STR) | (ck_ == KIND_BYTES)
        if is_str.any():
            cv_ = np.where(is_str, smap[np.where(is_str, cv_, 0)], cv_)
        if p_occ is not None:
            occs[a:b] = p_occ
        if p_xv is not None:
            p_xv = p_xv.reshape(b - a, nx)
            xs = (xk[a:b] == KIND_STR) | (xk[a:b] == KIND_BYTES)
            xv[a:b] = np.where(xs, smap[np.where(xs, p_xv, 0)], p_xv) if xs.any() else p_xv
        mids.append(np.frombuffer(cm, dtype=np.int64))
        kinds.append(ck_)
        vals.append(cv_)
    # every piece's combos end to end; a line's combo is the first of its equals
    all_mid = np.concatenate(mids)
    all_kind = np.concatenate(kinds) if nkey else np.zeros((len(all_mid), 0), dtype=np.uint8)
    all_val = np.concatenate(vals) if nkey else np.zeros((len(all_mid), 0), dtype=np.int64)
    rows = np.empty((len(all_mid), 1 + 2 * nkey), dtype=np.int64)
    rows[:, 0] = all_mid
    rows[:, 1:1 + nkey] = all_kind
    rows[:, 1 + nkey:] = all_val
    if len(rows):
        _, first, inv = np.unique(rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel(),
                                  return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty(len(first), dtype=np.int64)
        rank[order] = np.arange(len(first), dtype=np.int64)
        glob = rank[inv.reshape(-1)]  # per piece combo, its line combo
        keep = first[order]
    else:
        glob = keep = np.zeros(0, dtype=np.int64)
    off = 0
    for (a, b), cm in zip(zip(counts[:-1], counts[1:]), mids):
        m = len(cm)
        lut = glob[off:off + m]
        if b > a and not (lut == np.arange(m)).all():
            np.take(lut.astype(np.uint32), combo[a:b], out=combo[a:b], mode="clip")
        off += m
    out = AnnotatedLine()
    out.header, out.name = header, header.name
    out.durations = durs
    out.has_stats = flags.view(np.bool_)
    out.combo = combo
    out.extra_kinds = xk
    out.combo_mids = np.ascontiguousarray(all_mid[keep])
    out.combo_kinds = np.ascontiguousarray(all_kind[keep]).reshape(len(keep), nkey)
    out.combo_values = np.ascontiguousarray(all_val[keep]).reshape(len(keep), nkey)
    out.strings = strings
    # as decode_annotated: one read-only zero for a column without a value
    out.occurrences = occs if occs is not None else np.broadcast_to(np.int64(0), (n,))
    out.extra_values = xv if xv is not None else np.broadcast_to(np.int64(0), (n, nx))
    np.add(offs, _line_base_ps(header.timestamp_ns), out=offs)
    out.starts = offs
    return out


def _annotated_python(out: AnnotatedLine, raw: bytes, ids, slots, nkey: int, nslot: int) -> None:
    """The pure-Python :func:`decode_annotated` (``out.starts`` left as the offsets)."""
    evs = XLineEventsLoose.FromString(raw).events
    n, nx = len(evs), nslot - nkey
    slot_of: dict[int, list[int]] = {}
    for i, s in zip(ids.tolist(), slots.tolist()):
        slot_of.setdefault(i, []).append(s)
    strings: list = []
    string_ids: dict = {}
    combos: dict = {}
    combo = np.zeros(n, dtype=np.uint32)
    xk = np.zeros((n, nx), dtype=np.uint8)
    xv = np.zeros((n, nx), dtype=np.int64)
    for e_i, e in enumerate(evs):
        kinds, vals = [0] * nslot, [0] * nslot
        for sraw in e.stats:
            sid, kind, val = _stat_value_fields(sraw)
            for s in slot_of.get(sid, ()):
                v = val
                if kind in (KIND_STR, KIND_BYTES):
                    key = (kind, val)
                    if key not in string_ids:
                        string_ids[key] = len(strings)
                        strings.append(val.decode("utf-8") if kind == KIND_STR else val)
                    v = string_ids[key]
                kinds[s], vals[s] = kind, v
        ck = (e.metadata_id, tuple(kinds[:nkey]), tuple(vals[:nkey]))
        combo[e_i] = combos.setdefault(ck, len(combos))
        if nx:
            xk[e_i] = kinds[nkey:]
            xv[e_i] = vals[nkey:]
    out.starts = np.fromiter((e.offset_ps for e in evs), dtype=np.int64, count=n)
    out.durations = np.fromiter((e.duration_ps for e in evs), dtype=np.int64, count=n)
    out.occurrences = np.fromiter((e.num_occurrences for e in evs), dtype=np.int64, count=n)
    out.has_stats = np.fromiter((len(e.stats) > 0 for e in evs), dtype=np.bool_, count=n)
    out.combo, out.extra_kinds, out.extra_values = combo, xk, xv
    m = len(combos)
    out.combo_mids = np.array([k[0] for k in combos], dtype=np.int64).reshape(m)
    out.combo_kinds = np.array([k[1] for k in combos], dtype=np.uint8).reshape(m, nkey)
    out.combo_values = np.array([k[2] for k in combos], dtype=np.int64).reshape(m, nkey)
    out.strings = strings


def _stat_value_fields(raw: bytes):
    """(metadata_id, kind, value) of one serialized XStat, read field by field as the C
    decoder reads it (``stat_full`` in ``_decode.c``: the last value field wins; a double as
    its int64 bits, str and bytes as bytes); malformed bytes raise ValueError."""
    sid, kind, val, i, n = -1, KIND_NONE, 0, 0, len(raw)
    while i < n:
        key, i = _varint(raw, i)
        if key is None:
            raise ValueError("bad stat")
        f, w = (key >> 3) & 0xFFFFFFFF, key & 7  # C: (int)(key >> 3)
        if w == 0 and f in (1, 3, 4, 7):
            v, i = _varint(raw, i)
            if v is None:
                raise ValueError("bad stat")
            v = v & _U64
            v = v - (1 << 64) if v >= 1 << 63 else v
            if f == 1:
                sid = v
            else:
                kind, val = {3: KIND_UINT64, 4: KIND_INT64, 7: KIND_REF}[f], v
        elif w == 1 and f == 2:
            if n - i < 8:
                raise ValueError("bad stat")
            kind, val = KIND_DOUBLE, int.from_bytes(raw[i:i + 8], "little", signed=True)
            i += 8
        elif w == 2 and f in (5, 6):
            ln, i = _varint(raw, i)
            if ln is None or ln > n - i:
                raise ValueError("bad stat")
            kind, val = (KIND_STR if f == 5 else KIND_BYTES), bytes(raw[i:i + ln])
            i += ln
        else:
            i = _skip_value(raw, i, key, 0)
    return sid, kind, val


class MetadataColumns:
    """The XEventMetadata of one plane as columns (:func:`decode_metadata`), one row per map
    entry in file order (a later entry of an id replaces an earlier one): ``mids`` (int64
    map keys), ``names``, ``display_names`` (str lists), ``kinds`` / ``values`` ((n, slots):
    the stats asked for, as :class:`AnnotatedLine` values), ``strings``."""

    __slots__ = ("mids", "names", "display_names", "kinds", "values", "strings")


def decode_metadata(plane, ids, slots, nslot: int) -> MetadataColumns | None:
    """The XEventMetadata of a plane read in place (:class:`MappedPlane`) as columns, with the
    C accelerator; None when the plane is not mapped, the accelerator is not built, or the
    bytes are refused (the caller then reads ``plane.event_metadata``, which protobuf
    parsed already and which names any fault)."""
    span = getattr(plane, "span", None)
    if _fast is None or span is None:
        return None
    mm, lo, hi = span
    try:
        mids, names, dnames, kinds, vals, strings = _fast.decode_metadata(
            mm, lo, hi, np.ascontiguousarray(ids, dtype=np.int64), np.ascontiguousarray(slots, dtype=np.int64), nslot)
    except ValueError:  # UnicodeDecodeError included
        return None
    out = MetadataColumns()
    out.mids = np.frombuffer(mids, dtype=np.int64)
    n = len(out.mids)
    out.names, out.display_names, out.strings = names, dnames, strings
    out.kinds = np.frombuffer(kinds, dtype=np.uint8).reshape(n, nslot)
    out.values = np.frombuffer(vals, dtype=np.int64).reshape(n, nslot)
    return out
