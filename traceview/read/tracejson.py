"""Chrome-trace JSON (``<host>.trace.json.gz``) as bytes, then as event objects.

:func:`read_json_bytes` gives a file's JSON text (gunzipped by :mod:`traceview.read.inflate`
when it starts with the gzip magic; a leading UTF-8 byte order mark dropped), within a byte
limit. :func:`decode_events` decodes it into :data:`Event` objects with the attributes the
converter reads (``ph``, ``pid``, ``tid``, ``ts``, ``dur``, ``name``, ``args`` and, on
``args``, the keys in :data:`ARG_FIELDS`), through a typed msgspec decode, else orjson.
A file over :data:`STREAM_ABOVE` bytes is not held whole: :func:`text_blocks` inflates it
as it is read and :func:`stream_event_chunks` decodes its ``traceEvents`` array a chunk at a
time. :mod:`traceview.model.from_tracejson` turns the events into the op table. Errors are
:class:`~traceview.errors.TraceUnreadable`, :class:`~traceview.errors.NoTraceFound` and
:class:`~traceview.errors.LimitExceeded`, each one line naming the file.
"""

from __future__ import annotations

import codecs
import contextlib
import gc
import os
import re
from typing import Annotated, Union

import orjson

try:  # the typed JSON decoder; without it orjson reads everything (the general path)
    import msgspec
except ImportError:  # pragma: no cover - depends on the environment
    msgspec = None

from traceview.errors import LimitExceeded, NoTraceFound, TraceUnreadable
from traceview.read.inflate import GZIP_MAGIC as _GZIP_MAGIC
from traceview.read.inflate import gunzip as _gunzip
from traceview.read.inflate import iter_gunzip as _iter_gunzip
from traceview.read.inflate import not_gzip as _not_gzip

#: Default memory budget for reading one trace JSON file, bytes (``--max-bytes``).
MAX_MEMORY_BYTES = 4 << 30
#: Peak memory of reading a trace JSON file (text, events, tables) per byte of JSON text and
#: per event beyond it, measured on the project's traces (benchmarks/RESULTS.md, "Memory of
#: a trace JSON"): peak ≈ TEXT_FACTOR × text + EVENT_BYTES × events.
TEXT_FACTOR = 2.25
EVENT_BYTES = 400
#: The default text limit (what ``max_bytes / TEXT_FACTOR`` gives for the default budget).
MAX_DECOMPRESSED_BYTES = int(MAX_MEMORY_BYTES / TEXT_FACTOR)
_LIMIT_HINT = "raise it with --max-bytes or TRACEVIEW_MAX_BYTES; the library's max_bytes"
#: Files (gzip-compressed or not) larger than this many bytes are read as a stream of event
#: chunks (:func:`stream_event_chunks`): their text is never held whole, and memory grows
#: with the events kept (:data:`STREAM_EVENT_BYTES` each) and their distinct descriptions.
STREAM_ABOVE = 16 << 20
#: A streamed file's text may be this many times the memory budget (its memory does not
#: grow with the text; the limit bounds the time a gzip bomb can take).
STREAM_TEXT_FACTOR = 4
#: Memory kept per streamed event (description index, start, duration, device-clock start
#: and duration: 8 bytes each, and the columns' copies while the op table is built) and per
#: distinct description (its strings), bytes: the estimate checked against the budget.
STREAM_EVENT_BYTES = 96
STREAM_DESC_BYTES = 4096
_STREAM_CHUNK = 16 << 20  # text decoded at a time
_INFLATE_BLOCK = 512 << 10  # text read or inflated at a time
_STREAM_MAX_PIECE = 256 << 20  # text without an event boundary before the stream is read whole


def text_limit_for(max_bytes: int) -> int:
    """The most JSON text reading may inflate within a memory budget of ``max_bytes``."""
    return max(1, int(max_bytes / TEXT_FACTOR))


def reading_cost(text) -> tuple[int, int]:
    """``(events, bytes)``: the number of events in ``text`` (its ``"ph"`` keys, counted in one
    pass) and the estimated peak memory of reading them (see :data:`TEXT_FACTOR`)."""
    n = text.count(b'"ph"')
    return n, int(TEXT_FACTOR * len(text) + EVENT_BYTES * n)


def check_reading_cost(text, max_bytes: int, path: str) -> None:
    """Raise :class:`LimitExceeded` when reading ``text`` would take more than ``max_bytes``
    (:func:`reading_cost`), before any event is decoded."""
    n, cost = reading_cost(text)
    if cost > max_bytes:
        raise LimitExceeded(f"its {n:,} events in {len(text):,} bytes of JSON would take about {cost / 2**30:.1f} GiB "
                            f"to read, over the {max_bytes:,}-byte memory limit ({_LIMIT_HINT})", path)


def check_stream_cost(n_events: int, n_descs: int, n_text: int, max_bytes: int, path: str) -> None:
    """Raise :class:`LimitExceeded` when the events streamed so far (``n_events`` in the first
    ``n_text`` bytes of text, ``n_descs`` distinct descriptions) would take more than
    ``max_bytes`` (:data:`STREAM_EVENT_BYTES`, :data:`STREAM_DESC_BYTES`)."""
    cost = STREAM_EVENT_BYTES * n_events + STREAM_DESC_BYTES * n_descs
    if cost > max_bytes:
        raise LimitExceeded(f"its events (over {n_events:,} in the first {n_text:,} bytes of JSON) would take more "
                            f"than the {max_bytes:,}-byte memory limit to read ({_LIMIT_HINT})", path)


# -- bytes -> document ---------------------------------------------------------------------

_BOM = b"\xef\xbb\xbf"


def _without_bom(data):
    """``data`` without a leading UTF-8 byte order mark (RFC 8259 lets a parser ignore one;
    orjson and msgspec refuse it). Copies only when there is one."""
    return data[3:] if data[:3] == _BOM else data


def read_json_bytes(path: str | os.PathLike, *, max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
                    max_bytes: int | None = None) -> bytes | bytearray:
    """The JSON text of a trace file: gunzipped when it starts with the gzip magic, else as is,
    without a leading UTF-8 byte order mark.

    Reads the whole file (opened read-only); decompression streams into a buffer capped at
    ``max_decompressed_bytes`` (``max_bytes``: the memory limit it was derived from, named in
    the message). Raises :class:`NoTraceFound` when the file does not exist,
    :class:`TraceUnreadable` when it cannot be read, is not gzip nor JSON-looking, or its gzip
    stream is corrupt or truncated, :class:`LimitExceeded` over the limit.
    """
    p = str(path)
    why = (f"the text a {max_bytes:,}-byte memory limit allows, as reading takes about {TEXT_FACTOR} "
           f"bytes of memory per byte of text; " if max_bytes else "")
    try:
        with open(p, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > max_decompressed_bytes:
                # its text (or, gzip aside, its decompressed text) cannot fit: not read at all
                raise LimitExceeded(f"file is {size:,} bytes, over the {max_decompressed_bytes:,}-byte limit on its "
                                    f"text ({why}{_LIMIT_HINT})", p)
            data = fh.read()
    except FileNotFoundError:
        raise NoTraceFound("does not exist", p) from None
    except OSError as exc:
        raise TraceUnreadable(f"cannot read file ({exc.strerror or exc})", p) from None
    if not data:
        raise TraceUnreadable("file is empty", p)
    if data[:2] == _GZIP_MAGIC:
        try:
            return _without_bom(_gunzip(data, p, max_decompressed_bytes))
        except LimitExceeded as exc:
            raise LimitExceeded(f"{exc.fault} on its text ({why}{_LIMIT_HINT})", p) from None
    data = _without_bom(data)
    head = data[:64].lstrip()
    if head[:1] in (b"{", b"["):
        if len(data) > max_decompressed_bytes:
            raise LimitExceeded(
                f"JSON file is {len(data):,} bytes, over the {max_decompressed_bytes:,}-byte limit on its text "
                f"({why}{_LIMIT_HINT})", p)
        return data
    if re.match(rb"(null|true|false|-?[0-9]|\")", head):  # JSON, but a bare value: no object, no array
        raise TraceUnreadable(f"JSON holding a bare value (starts with {data[:8]!r}), not a trace's object or array "
                              "of events: not a Chrome trace", p)
    if p.endswith(".gz"):
        raise _not_gzip(data, p, "a Chrome-trace JSON")
    raise TraceUnreadable(f"neither gzip nor JSON (starts with {data[:8]!r}); expected a Chrome-trace JSON", p)


def _utf8_ok(text, end: int | None = None) -> bool:
    """Whether ``text`` (bytes or bytearray; its first ``end`` bytes when given) is valid
    UTF-8 (orjson rejects anything else; the typed decode does not look inside the values it
    skips). ASCII, the exporter's output, is checked in one fast pass (of the whole of
    ``text``); anything else is decoded in 4 MiB pieces and thrown away."""
    if text.isascii():
        return True
    dec = codecs.getincrementaldecoder("utf-8")()
    with memoryview(text) as whole:
        view = whole[:end]
        try:
            for i in range(0, len(view), 1 << 22):
                dec.decode(view[i:i + (1 << 22)])
            dec.decode(b"", True)
        except UnicodeDecodeError:
            return False
        finally:
            view.release()
    return True


def decode_events(text, path: str) -> tuple[list, int, bool]:
    """The trace's events as :data:`Event` objects (only ``X`` and ``M`` ones on the general
    path), the number of other non-empty events left out of that list, and whether the typed
    decode took the text (its values are then of the declared types).

    The typed decode (msgspec) is tried first; whatever it does not take — a value of an
    unexpected type, an event key outside the trace format, an integer past int64, invalid
    JSON, the array form's non-object values, no ``traceEvents`` — goes down the general path
    (orjson, then dicts -> objects), which gives the reader's documented errors. Both give
    the same events for any file the typed decode takes. One difference remains: a number
    beyond the float64 range (``1e400``) in a value the reader never reads (an unknown
    ``args`` key, an unknown top-level key) is skipped by msgspec, while orjson fails the
    file on it; such a file is now read.
    """
    if _DECODER is not None and _utf8_ok(text):
        try:
            doc = _DECODER.decode(text)
        except Exception:  # msgspec.DecodeError/ValidationError, RecursionError: the general path decides
            doc = None
        if doc is not None:
            events = doc if type(doc) is list else doc.traceEvents
            if events is not UNSET:
                return events, 0, True
    return _from_dicts(_load_json(text, path)) + (False,)


def _load_json(text, path: str) -> list:
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise TraceUnreadable(f"not valid JSON ({exc})", path) from None
    if isinstance(doc, dict):
        if "traceEvents" not in doc:
            keys = ", ".join(list(doc)[:5])
            raise TraceUnreadable(f"JSON without traceEvents (top-level keys: {keys or 'none'}): not a Chrome trace", path)
        events = doc["traceEvents"]
    elif isinstance(doc, list):
        events = doc  # the Chrome-trace "JSON array" form
    else:
        raise TraceUnreadable(f"JSON top level is a {type(doc).__name__}, not a Chrome trace object", path)
    if not isinstance(events, list):
        raise TraceUnreadable(f"traceEvents is a {type(events).__name__}, not a list", path)
    if events and not any(type(e) is dict for e in events):
        raise TraceUnreadable(f"no trace event objects among the {len(events)} JSON values: not a Chrome trace", path)
    return events


def _from_dicts(events: list) -> tuple[list, int]:
    """orjson's event dicts -> (:data:`Event` objects for the ``X`` and ``M`` events, number
    of the other non-empty event objects). Values are kept as they are, of any type."""
    out: list = []
    append = out.append
    n_other = 0
    fields = ARG_FIELDS
    for e in events:
        if type(e) is not dict:
            continue
        ph = e.get("ph")
        if ph == "X" or ph == "M":
            a = e.get("args")
            append(Event(ph, e.get("pid"), e.get("tid"), e.get("ts"), e.get("dur"), e.get("name", UNSET),
                          Args(*[a.get(k) for k in fields]) if type(a) is dict else None))
        elif e:
            n_other += 1
    return out, n_other


# -- streamed text -> chunks of events ------------------------------------------------------

class StreamFallback(Exception):
    """The text is not in the form :func:`stream_event_chunks` takes (or not valid JSON):
    read it whole, whose errors are the documented ones."""


def stream_limit(max_bytes: int) -> int:
    """The most JSON text a streamed file may inflate to within a memory budget of
    ``max_bytes`` (:data:`STREAM_TEXT_FACTOR`)."""
    return max(1, STREAM_TEXT_FACTOR * max_bytes)


def text_blocks(path: str, limit: int, why: str = ""):
    """The JSON text of a trace file as blocks of bytes (gunzipped as read when it starts
    with the gzip magic), at most ``limit`` bytes in all.

    Raises :class:`NoTraceFound`, :class:`TraceUnreadable` (cannot read, corrupt or truncated
    gzip stream) and :class:`LimitExceeded` as :func:`read_json_bytes` does.
    """
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise NoTraceFound("does not exist", path) from None
    except OSError as exc:
        raise TraceUnreadable(f"cannot read file ({exc.strerror or exc})", path) from None
    with fh:
        try:
            magic = fh.read(2)
            fh.seek(0)
            if magic == _GZIP_MAGIC:
                try:  # blocks under glibc's mmap threshold for a big input (cli.process.tune_allocator):
                    # each is then a reused heap block, not fresh pages faulted in and unmapped
                    yield from _iter_gunzip(fh, path, limit, block=_INFLATE_BLOCK)
                except LimitExceeded as exc:
                    raise LimitExceeded(f"{exc.fault} on its text ({why}{_LIMIT_HINT})", path) from None
                return
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                raise LimitExceeded(f"JSON file is {size:,} bytes, over the {limit:,}-byte limit on its text "
                                    f"({why}{_LIMIT_HINT})", path)
            while True:
                b = fh.read(_INFLATE_BLOCK)
                if not b:
                    return
                yield b
        except OSError as exc:
            raise TraceUnreadable(f"cannot read file ({exc.strerror or exc})", path) from None


_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
# the end of one object element of the events array and the start of the next (a key's
# quote: inside a string a quote is escaped, so a match there ends the string, which the
# decode of the piece before it then refuses)
_BOUNDARY = re.compile(rb'\}\s*,\s*(\{)\s*"')
_WS = b" \t\r\n"


def stream_event_chunks(blocks, path: str):
    """The events of a Chrome-trace JSON text given as an iterator of byte blocks, decoded a
    chunk of about 16 MiB of text at a time: yields ``(events, n_other, typed, text_bytes)``
    per chunk as :func:`decode_events` gives them, in file order.

    Takes the exporter's forms: ``{..."traceEvents": [...]}`` (the events array the last
    member; other members before it are checked as JSON) or a bare array. Each chunk ends
    where an event object ends; a piece that does not decode means the split or the text is
    off. Raises :class:`StreamFallback` for anything else (the caller reads the text whole
    and gives its errors).
    """
    it = iter(blocks)
    buf = bytearray()
    eof = False

    def more() -> bool:
        nonlocal eof
        if eof:
            return False
        b = next(it, None)
        if b is None:
            eof = True
            return False
        buf.extend(b)
        return True

    while len(buf) < (1 << 20) and more():
        pass
    if buf[:3] == _BOM:
        del buf[:3]
    i = 0
    while i < len(buf) and buf[i] in _WS:
        i += 1
    if i >= len(buf):
        raise StreamFallback
    if buf[i] == ord("["):
        start, closer = i + 1, b"]"
    elif buf[i] == ord("{"):
        m = _EVENTS_KEY.search(buf, i)
        if m is None:
            raise StreamFallback
        try:
            head = orjson.loads(bytes(buf[i:m.start()]) + b'"traceEvents":[]}')
        except orjson.JSONDecodeError:
            raise StreamFallback from None
        if type(head) is not dict:
            raise StreamFallback
        start, closer = m.end(), b"]}"
    else:
        raise StreamFallback
    # buf[0] is the '[' before the first element: each piece is decoded in place as a JSON
    # array, buf[0] and the byte after its last element set to the brackets (no copy of the
    # piece: on a big input every copy would be fresh pages, cli.process.tune_allocator)
    del buf[:start - 1]
    buf[0] = 0x5B  # [
    while True:
        m = None
        while True:
            if len(buf) > _STREAM_CHUNK:
                m = _BOUNDARY.search(buf, _STREAM_CHUNK)
                if m is not None:
                    break
            if len(buf) > _STREAM_MAX_PIECE or not more():
                break
        if m is None:
            if eof:
                break
            raise StreamFallback
        end = m.start() + 1  # after the piece's last element: a space or the comma
        kept = buf[end]
        buf[end] = 0x5D  # ]
        got = []
        try:
            got.append(_decode_piece(buf, end + 1, path))
        finally:
            buf[end] = kept
        yield got.pop()  # not kept in this frame while the caller works on it
        del buf[:m.start(1) - 1]  # up to the byte before the next element, which becomes its '['
        buf[0] = 0x5B
    # the last elements, the array's end and the document's
    tail = bytes(memoryview(buf)[1:]).rstrip(_WS)
    del buf
    if closer == b"]}":
        if not tail.endswith(b"}"):
            raise StreamFallback
        tail = tail[:-1].rstrip(_WS)
    if not tail.endswith(b"]"):
        raise StreamFallback
    tail = tail[:-1]
    if tail.strip(_WS):
        text = b"[" + tail + b"]"
        yield _decode_piece(text, len(text), path)


def _decode_piece(buf, end: int, path: str) -> tuple[list, int, bool, int]:
    """``buf[:end]`` (a JSON array of whole elements of the events array, read in place)
    decoded as :func:`decode_events` does, with its element text's size (``end`` less the
    brackets); :class:`StreamFallback` when it does not decode."""
    with memoryview(buf) as whole:
        text = whole[:end]
        try:
            if _LIST_DECODER is not None and _utf8_ok(buf, end):
                try:
                    return _LIST_DECODER.decode(text), 0, True, end - 2
                except Exception:  # msgspec.DecodeError/ValidationError, RecursionError: orjson decides
                    pass
            try:
                values = orjson.loads(text)
            except orjson.JSONDecodeError:
                raise StreamFallback from None
        finally:
            text.release()
    if not any(type(e) is dict for e in values):
        raise StreamFallback  # read whole: "no trace event objects" is said of the whole array
    events, n_other = _from_dicts(values)
    return events, n_other, False, end - 2


@contextlib.contextmanager
def gc_paused():
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# -- event objects -------------------------------------------------------------------------
#
# The reader works on event objects with attributes: ph, pid, tid, ts, dur, name, args, and
# on ``args`` the keys listed in ARG_FIELDS (the only ones read). With msgspec they come
# straight out of a typed decode of the JSON text: other ``args`` keys are skipped, never
# allocated, and an event is one small untracked object instead of two dicts (faster than
# orjson on the exporter's files, and fewer objects). The general path (orjson)
# builds the same objects from its dicts. On an event, an absent field is UNSET and an
# explicit null is None: ``name`` defaults differently on the two (module names), and an
# event with no field at all is the ``{}`` that ends the exporter's array (not counted).

#: the ``args`` keys the reader reads
ARG_FIELDS = ("name", "long_name", "hlo_category", "source", "source_stack", "tf_op", "model_flops",
               "bytes_accessed", "shape_with_layout", "device_offset_ps", "device_duration_ps", "hlo_op",
               "hlo_module", "program_id", "run_id", "device_ordinal")
#: the event fields the reader reads, in Event's order
_EVENT_FIELDS = ("ph", "pid", "tid", "ts", "dur", "name", "args")
#: the Chrome trace format's other event keys: never read, only declared so that the typed
#: decode takes them; an event with any other key sends the file down the general path, so
#: that an event made only of unknown keys is still told from an empty one
_OTHER_EVENT_KEYS = ("cat", "tts", "tdur", "id", "id2", "bp", "s", "sf", "stack", "esf", "estack", "cname",
                     "bind_id", "flow_in", "flow_out", "scope")

if msgspec is not None:
    UNSET = msgspec.UNSET
    # orjson reads an integer outside int64..uint64 as a float: the typed decode takes int64
    # only (anything else goes down the general path)
    _Int = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
    _Str = Union[str, None]
    _Num = Union[_Int, float, str, None]
    _NUM_ARGS = ("model_flops", "bytes_accessed", "device_offset_ps", "device_duration_ps", "program_id", "run_id")
    Args = msgspec.defstruct("Args", [(k, _Num if k in _NUM_ARGS else _Str, None) for k in ARG_FIELDS],
                              gc=False, module=__name__)
    _U = msgspec.UnsetType
    Event = msgspec.defstruct(
        "Event",
        [("ph", Union[str, None, _U], UNSET), ("pid", Union[_Int, str, None, _U], UNSET),
         ("tid", Union[_Int, str, None, _U], UNSET), ("ts", Union[_Num, _U], UNSET),
         ("dur", Union[_Num, _U], UNSET), ("name", Union[str, None, _U], UNSET),
         ("args", Union[Args, None, _U], UNSET)]
        + [(k, Union[msgspec.Raw, _U], UNSET) for k in _OTHER_EVENT_KEYS],
        gc=False, forbid_unknown_fields=True, module=__name__)
    _Doc = msgspec.defstruct("_Doc", [("traceEvents", Union[list[Event], _U], UNSET)], gc=False, module=__name__)
    _DECODER = msgspec.json.Decoder(Union[_Doc, list[Event]])
    _LIST_DECODER = msgspec.json.Decoder(list[Event])
else:  # pragma: no cover - msgspec is a dependency; this keeps an exotic platform working
    UNSET = type("_Unset", (), {"__repr__": lambda self: "UNSET", "__bool__": lambda self: False})()

    def _plain(name: str, fields: tuple, default):
        def __init__(self, *values):
            for k, v in zip(fields, values):
                setattr(self, k, v)
            for k in fields[len(values):]:
                setattr(self, k, default)
        return type(name, (), {"__slots__": fields, "__init__": __init__})

    Args = _plain("Args", ARG_FIELDS, None)
    Event = _plain("Event", _EVENT_FIELDS + _OTHER_EVENT_KEYS, UNSET)
    _DECODER = None
    _LIST_DECODER = None

_ALL_EVENT_FIELDS = _EVENT_FIELDS + _OTHER_EVENT_KEYS


def has_fields(e) -> bool:
    return any(getattr(e, k) is not UNSET for k in _ALL_EVENT_FIELDS)


