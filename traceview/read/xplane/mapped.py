"""An ``.xplane.pb`` read in place (:func:`map_xspace`) and its annotated lines decoded to the C
decoder's raw columns (:func:`decode_annotated_raw`), without numpy.

A prefetch (:mod:`traceview.read.prefetch`) maps the file and decodes a CPU or GPU trace's lines
with this module alone, so it starts before numpy and polars are imported; the numpy arrays
are made from the raw columns afterwards (:func:`traceview.read.xplane.wire.annotated_line`).
:mod:`traceview.read.xplane.wire` re-exports the names here.
"""

from __future__ import annotations

import mmap as _mmap
from pathlib import Path

from google.protobuf.message import DecodeError

from traceview.read.xplane.protos import XSpaceLazy

try:  # optional C accelerator (setup.py builds it when a compiler is available)
    from traceview.read.xplane import _decode as _fast
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _fast = None


def has_decoder() -> bool:
    """Whether the C decoder is built (files are then read in place, :func:`map_xspace`)."""
    return _fast is not None


def _line_fault(exc: Exception, name: str | None = None) -> str:
    """The one-line fault for a line the decoder refused: the C guard's "the file changed
    while it was read" as it is, anything else as a malformed XLine."""
    text = str(exc)
    if "changed while it was read" in text:
        return text
    return f"malformed XLine {name!r} ({text})" if name is not None else f"malformed XLine ({text})"


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
#: parsed when asked for (:class:`~traceview.read.xplane.wire.LazyEventMetadata`): the op-table columns are read from the
#: bytes, so protobuf's parse of a large map is memory and time for nothing (figures in
#: ``benchmarks/RESULTS.md``, "Large inputs")
LAZY_METADATA_ENTRIES = 4096


class MappedPlane:
    """An XPlane read in place: the parsed small fields (``id``, ``name``,
    ``event_metadata``, ``stat_metadata``, ``stats``) and ``lines``, the XLines as memoryviews
    (``mapped_lines``: the same as :class:`MappedLine`). ``event_metadata`` is a
    :class:`~traceview.read.xplane.wire.LazyEventMetadata` when the plane has
    :data:`LAZY_METADATA_ENTRIES` or more (``lazy_metadata``: its arguments, the map made on
    first access)."""

    def __init__(self, msg, mapped_lines: list, span: tuple | None = None, event_metadata=None,
                 metadata_span: tuple | None = None, lazy_metadata: tuple | None = None):
        self._msg = msg
        self.name = msg.name  # read often: kept here, not looked up through the message each time
        self.mapped_lines = mapped_lines
        self.lines = [m.view for m in mapped_lines]
        self.span = span  # (mapping, start, end) of the XPlane message's bytes
        self.metadata_span = metadata_span  # (start, end) of its event_metadata entries, side by side
        self._lazy_metadata = lazy_metadata  # (mapping, span, path, keys, starts, ends) of a large map
        if event_metadata is not None:
            self.event_metadata = event_metadata

    def __getattr__(self, name):
        if name == "event_metadata" and self.__dict__.get("_lazy_metadata") is not None:
            from traceview.read.xplane.wire import LazyEventMetadata  # imported by whoever reads a map

            self.event_metadata = LazyEventMetadata(*self._lazy_metadata)
            self._lazy_metadata = None
            return self.event_metadata
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
    more entries (:class:`~traceview.read.xplane.wire.LazyEventMetadata`)."""
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
    return MappedSpace(msg, [MappedPlane(pm, ls, sp, None, md_span, None if md is None else (mm, sp, name, *md))
                             for pm, ls, sp, (md, md_span) in zip(msg.planes, plane_lines, spans, entries)])



def _map_readonly(path: Path):
    """``path`` memory-mapped read-only, or None when it cannot be (missing, empty, a pipe)."""
    try:
        with open(path, "rb") as fh:
            return _mmap.mmap(fh.fileno(), 0, access=_mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None


class RawAnnotated:
    """One annotated XLine as the C decoder returns it (:func:`decode_annotated_raw`):
    ``header`` (the ``line_header`` fields) and ``columns`` (``decode_annotated``'s tuple, an
    all-zero occurrences or extra-values column as None), for
    :func:`traceview.read.xplane.wire.annotated_line`; ``nkey`` / ``nslot`` as given."""

    __slots__ = ("header", "columns", "nkey", "nslot")

    def __init__(self, header: tuple, columns: tuple, nkey: int, nslot: int):
        self.header, self.columns, self.nkey, self.nslot = header, columns, nkey, nslot

    def __len__(self) -> int:
        return self.columns[1]


def decode_annotated_raw(raw, path: str, ids: bytes, slots: bytes, nkey: int, nslot: int) -> RawAnnotated:
    """:func:`traceview.read.xplane.wire.decode_annotated`'s decoding (C decoder required) without
    its numpy arrays: ``ids`` / ``slots`` as native int64 bytes. Raises
    :class:`~traceview.errors.TraceUnreadable` as that function does."""
    from traceview.errors import TraceUnreadable

    try:
        header = _fast.line_header(raw)
    except ValueError as exc:  # UnicodeDecodeError included
        raise TraceUnreadable(_line_fault(exc), path) from None
    try:
        cols = _fast.decode_annotated(raw, ids, slots, nkey, nslot, 1)
    except ValueError as exc:
        raise TraceUnreadable(_line_fault(exc, header[2]), path) from None
    return RawAnnotated(header, cols, nkey, nslot)
