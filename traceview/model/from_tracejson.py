"""The op-event table of a Chrome-trace JSON export (``<host>.trace.json.gz``).

The JAX profiler writes this file next to every ``.xplane.pb`` (XLA's trace-events exporter
converts the XSpace)::

    {"displayTimeUnit":"ns","metadata":{"highres-ticks":true},
     "traceEvents":[ {"ph":"M",...}, ..., {"ph":"X","pid":3,"tid":3,"ts":1144995.94963,
                     "dur":1.320453,"name":"slice.1996","args":{"long_name":"%slice.1996 = ...",
                     ...}}, ..., {}]}

* ``ph:"M"`` rows name processes (``pid`` = device: ``/device:TPU:0``, ``/host:CPU``) and
  threads (``(pid, tid)`` = timeline line: ``XLA Ops``, ``XLA Modules``, ...).
* ``ph:"X"`` rows are events; ``ts``/``dur`` are µs floats with ps precision, converted here
  to integer ps with ``round(x * 1e6)``. The exporter writes every duration as at least 1 ps.
  TPU events also carry ``device_offset_ps`` / ``device_duration_ps`` (the device clock,
  integer ps): where an ``XLA Ops`` / ``XLA Modules`` event has both they are used instead,
  as XProf's op metrics and :mod:`traceview.model.from_xplane` do, so both readers give the same times.
* ``args`` values are strings. Internal stats are dropped by the exporter, among them
  ``program_id`` and ``flops``: on TPU the module's program id is recovered from the
  enclosing ``XLA Modules`` event's name (``jit_step_fun(5120112285394406626)``), and the
  ``flops`` column is filled from ``model_flops`` (the only FLOP count left in the file).
* The array ends with an empty ``{}``.

Per platform:

* **TPU** — ops are the events of a device process's ``XLA Ops`` thread. ``args.long_name``
  is the HLO text (parsed for opcode and shape signature), else ``shape_with_layout`` gives
  the result shape only. Module and program id come from the enclosing ``XLA Modules``
  event of the same device; those events are also the ``module_runs`` rows.
* **GPU / CPU** — ops are events whose ``args`` carry ``hlo_op`` and ``hlo_module`` (GPU:
  device stream lines; CPU: ``/host:CPU`` threads, used only when no device process has
  ops; ``end: <op>`` markers are skipped). The JSON carries no HLO text, shapes or program
  ids for them: ``shape`` is "", ``has_shapes`` is False and a note says to read the
  ``.xplane.pb``. ``op_kind`` is guessed from the op name (``fusion.3`` -> ``fusion``,
  ``*_fusion`` -> ``fusion``). ``module_runs`` are derived from ops sharing ``run_id``.

``self_ps`` is the duration minus the durations of the op events directly nested in it on
the same line. The exporter keeps at most ``TF_PROFILER_TRACE_VIEWER_MAX_EVENTS`` events
(5,000,000; formerly 1,000,000), the earliest by start time: a file holding exactly that many
``X`` events was truncated, and a note says so.
"""

from __future__ import annotations

import os
import re
from array import array

import numpy as np
import polars as pl

from traceview.model.naming import DERIVED_LINES as _GPU_SKIP_LINES
from traceview.model.naming import as_float as _num
from traceview.model.naming import as_uint64 as _int
from traceview.model.naming import name_stem, printable, split_module_name, split_source
from traceview.model.optable import ATTR_COLUMNS, OpTable
from traceview.model.schema import MODULE_RUNS_SCHEMA, OPS_SCHEMA, DeviceInfo, TraceData, frame
from traceview.model.shapes import canonical_shape_text, parse_instruction, parse_shape, strip_workspace
from traceview.model.timeline import enclosing, self_times
from traceview.read.discover import host_from_filename
from traceview.model.bounds import MAX_HLO_CHARS, MAX_TEXT_CHARS, cut_text
from traceview.model.cpu_devices import cpu_device_name
from traceview.model.load import FIELD_FAULTS
from traceview.read import tracejson as _tj
from traceview.read.tracejson import (ARG_FIELDS, MAX_MEMORY_BYTES, UNSET, Args, check_reading_cost, gc_paused, has_fields,
                                      decode_events, read_json_bytes, text_limit_for)

#: Event counts at which the exporter truncates (``GetTraceViewerMaxEvents``: 5M now, 1M
#: before openxla/xla PR #44702). A file holding exactly one of these many events was cut.
EVENT_CAPS: tuple[int, ...] = (1_000_000, 5_000_000)

_I64 = 1 << 63


def _ps(x) -> int | None:
    """µs (float, int or numeric string) -> integer ps; None when missing, unparseable or NaN.
    A value past the int64 ps range (1e300, 2**70, inf) saturates at its end, so that
    :func:`traceview.model.bounds.clamp_file` clamps it with a warning instead of it
    vanishing as 0."""
    t = type(x)
    if x is None or x is UNSET or t is bool:
        return None
    try:
        f = x * 1e6 if t is float or t is int else float(x) * 1e6
    except (TypeError, ValueError, OverflowError):
        return None
    if f != f:  # NaN
        return None
    if not -_I64 <= f < _I64:
        return _I64 - 1 if f > 0 else -_I64
    v = round(f)
    return min(max(v, -_I64), _I64 - 1)


def guess_opcode(op_name: str) -> str:
    """Best guess of the HLO opcode from an instruction name when no HLO text is known:
    XLA names instructions ``<opcode>.<n>`` and fusions ``<...>_fusion[.n]``."""
    base = name_stem(op_name)
    if base.endswith("fusion"):
        return "fusion"
    return base


def _kind_of(process: str) -> str:
    if "TPU" in process:
        return "TPU"
    if "GPU" in process:
        return "GPU"
    if process.startswith("/host:"):
        return "CPU"
    return "CUSTOM" if "CUSTOM" in process.upper() else "other"


def _order(x) -> tuple:
    """Sort key for pids/tids: numbers in numeric order, anything else after, as text."""
    return (0, x, "") if type(x) is int else (1, 0, str(x))


class _Cache(dict):
    """str -> derived value, computed once per distinct string."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def __missing__(self, key):
        v = self[key] = self.fn(key)
        return v


_HEAD = re.compile(r"\s*(?:ROOT\s+)?%?([^\s=]+)\s*=\s*")
_OPCODE = re.compile(r"\s*([A-Za-z][\w\-\.]*)\(\s*")
# an array shape with plain integer dims and an optional layout, e.g. bf16[8,128]{1,0:T(8,128)}
_SIMPLE_ARRAY = re.compile(r"([a-z][a-z0-9]*\[[\d,]*\])(?:\{[^}]*\})?\s*")
_OPERAND_REF = re.compile(r"%[\w\-\.]+\s*([,)])\s*")


def _fast_hlo_info(text: str) -> tuple[str, str, str, str] | None:
    """Fast path of :func:`_hlo_info` for the common form ``%n = SHAPE op(SHAPE %a, ...)...``.

    Walks the operand list shape by shape (plain arrays copied as text, others through
    :func:`traceview.model.shapes.parse_shape`) instead of bracket-matching the whole text, the
    general parser's cost on long TPU texts. Returns None for anything else (literal
    operands, nested calls, dynamic dims), and the caller falls back to
    :func:`traceview.model.shapes.parse_instruction`; both give the same result where this one
    succeeds (tested on every op of the vLLM TPU trace).
    """
    m = _HEAD.match(text)
    if not m:
        return None
    i = m.end()
    opcode_m = None
    am = _SIMPLE_ARRAY.match(text, i)
    if am is not None:
        result_s = am.group(1)
        opcode_m = _OPCODE.match(text, am.end())
    if opcode_m is None:
        result, i = parse_shape(text, i)
        if result is None:
            return None
        opcode_m = _OPCODE.match(text, i)
        if opcode_m is None:
            return None
        opcode = opcode_m.group(1)
        result_s = str(strip_workspace(result, opcode))
    opcode = opcode_m.group(1)
    j = opcode_m.end()
    if text.startswith(")", j):
        return m.group(1), opcode, result_s, text
    ops = []
    while True:
        am = _SIMPLE_ARRAY.match(text, j)
        if am is not None:
            ops.append(am.group(1))
            k = am.end()
        else:
            shape, k = parse_shape(text, j)
            if shape is None:
                return None
            ops.append(str(shape))
            while text.startswith(" ", k):
                k += 1
        rm = _OPERAND_REF.match(text, k)
        if rm is None:
            return None
        j = rm.end()
        if rm.group(1) == ")":
            break
    return m.group(1), opcode, f"{result_s} <- {', '.join(ops)}", text


def _hlo_info(text: str) -> tuple[str, str, str, str]:
    """HLO text -> (instruction name, opcode, shape signature, hlo_text) or blanks."""
    fast = _fast_hlo_info(text)
    if fast is not None:
        return fast
    ins = parse_instruction(text)
    if ins is None:
        return "", "", "", ""
    return ins.name, ins.opcode, ins.signature(), text


def _stack(s: str) -> str:
    # newline-separated frames, innermost first, with a trailing newline
    return s.rstrip("\n")


# -- the reader ----------------------------------------------------------------------------

def read_trace_json(
    path: str | os.PathLike,
    *,
    host: str | None = None,
    run: str = "",
    max_bytes: int = MAX_MEMORY_BYTES,
    max_decompressed_bytes: int | None = None,
) -> TraceData:
    """Read a ``.trace.json.gz`` / ``.trace.json`` / ``perfetto_trace.json.gz`` file.

    Args:
        path: the file; gzip is detected by its magic bytes, not by the name.
        host: host name stored in every row (default: the file stem before ``.trace.json``).
        run: run name stored in every row ("" when none).
        max_bytes: the most memory reading the file may take, bytes (default 4 GiB). A file
            of up to :data:`~traceview.read.tracejson.STREAM_ABOVE` bytes is read whole: its
            JSON text is inflated up to ``max_bytes / TEXT_FACTOR`` bytes, and a file whose
            text and events would take more (:func:`traceview.read.tracejson.reading_cost`) is
            refused before its events are decoded. A larger one is streamed: its text (up to
            ``STREAM_TEXT_FACTOR * max_bytes`` bytes) is decoded a chunk at a time, and only
            per-event integer columns and the distinct event descriptions are kept, checked
            against ``max_bytes`` after each chunk
            (:func:`traceview.read.tracejson.check_stream_cost`). A streamed text in a form
            the chunked reader does not take is read whole.
        max_decompressed_bytes: a tighter limit on the JSON text alone, bytes (None: from
            ``max_bytes``).

    Returns:
        A :class:`~traceview.model.schema.TraceData` with ``format="trace_json"``: ``ops`` per
        :data:`~traceview.model.schema.OPS_SCHEMA` (times in integer ps), ``module_runs`` per
        :data:`~traceview.model.schema.MODULE_RUNS_SCHEMA`, one :class:`DeviceInfo` per device
        process (no peak FLOP/s or bandwidth: the JSON has none), ``notes`` (missing shapes,
        event-cap truncation), ``n_events`` = the number of ``X``/other non-metadata events.
        A file without HLO ops gives an empty ``ops`` frame (no exception).

    Raises:
        NoTraceFound: the file does not exist.
        TraceUnreadable: unreadable file, not gzip/JSON, corrupt or truncated gzip, invalid
            JSON, or JSON that is not a Chrome trace (no ``traceEvents``). One-line message.
        LimitExceeded: the decompressed JSON is larger than its limit, or reading it would take
            more than ``max_bytes``. A streamed file's gzip faults are TraceUnreadable as above.

    Never writes anything.
    """
    p = str(path)
    host = printable(host if host is not None else host_from_filename(p))
    run, label = printable(run), printable(p)
    try:
        stream = os.stat(p).st_size > _tj.STREAM_ABOVE
    except OSError:
        stream = False  # read_json_bytes says why
    # millions of small objects trigger the cyclic GC again and again while nothing here can
    # form a cycle: pausing it saves much of the general path's parse time
    with gc_paused():
        ev = None
        if stream:
            try:
                ev, n_text = _read_stream(p, max_bytes, max_decompressed_bytes)
            except _tj.StreamFallback:
                ev = None
        if ev is None:
            text_limit = text_limit_for(max_bytes) if max_decompressed_bytes is None else max_decompressed_bytes
            text = read_json_bytes(p, max_decompressed_bytes=text_limit,
                                   max_bytes=max_bytes if max_decompressed_bytes is None else None)
            check_reading_cost(text, max_bytes, p)
            ev = _Events()
            events, n_other, typed = decode_events(text, p)
            n_text = len(text)
            del text
            ev.add(events, n_other, typed)
            del events
            ev.finish()
        cut = _cut_long_strings(ev, label) if n_text > LONG_EVENT_BYTES * max(ev.n_objects, 1) else None
        td = _convert(ev, label, host, run)
    if cut:
        td.notes.append(cut)
    return td


def _read_stream(p: str, max_bytes: int, max_decompressed_bytes: int | None) -> tuple["_Events", int]:
    """The events of a large file read as a stream of chunks
    (:func:`traceview.read.tracejson.stream_event_chunks`), and its text's size. The text
    may inflate to :func:`traceview.read.tracejson.stream_limit` bytes (or
    ``max_decompressed_bytes``); the events kept are checked against ``max_bytes`` after
    each chunk. Raises StreamFallback when the text must be read whole."""
    if max_decompressed_bytes is None:
        limit = _tj.stream_limit(max_bytes)
        why = (f"the text a {max_bytes:,}-byte memory limit allows a streamed file, {_tj.STREAM_TEXT_FACTOR} bytes "
               f"of text per byte of memory; ")
    else:
        limit, why = max_decompressed_bytes, ""
    ev = _Events()
    n_text = 0
    for events, n_other, typed, size in _tj.stream_event_chunks(_tj.text_blocks(p, limit, why), p):
        ev.add(events, n_other, typed)
        n_text += size
        del events
        _tj.check_stream_cost(ev.n_events, len(ev.descs), n_text, max_bytes, p)
    ev.finish()
    return ev, n_text


#: Events average at most this many bytes of JSON in real traces (about 1 KB with HLO texts);
#: above it, a few events hold strings of megabytes, which are cut before anything copies them.
LONG_EVENT_BYTES = 4096
_HLO_ARGS = ("long_name", "hlo_op")


def _cut_long_strings(ev: "_Events", path: str) -> str | None:
    """Cut every string of the events' descriptions (their names and read ``args``) and of
    the process and thread names longer than :data:`~traceview.model.bounds.MAX_TEXT_CHARS`
    (HLO texts: :data:`~traceview.model.bounds.MAX_HLO_CHARS`) in place; the note saying
    so, or None."""
    n, longest = 0, 0

    def cut(v, limit):
        nonlocal n, longest
        if type(v) is str and len(v) > limit:
            n += 1
            longest = max(longest, len(v))
            return cut_text(v, limit)
        return v

    for d in ev.descs:
        if type(d.name) is str and len(d.name) > MAX_TEXT_CHARS:
            d.name = cut(d.name, MAX_TEXT_CHARS)
        a = d.args
        if type(a) is Args:
            for k in ARG_FIELDS:
                v = getattr(a, k)
                if type(v) is str and len(v) > MAX_TEXT_CHARS:
                    setattr(a, k, cut(v, MAX_HLO_CHARS if k in _HLO_ARGS else MAX_TEXT_CHARS))
    for names in (ev.process, ev.thread):
        for k, v in names.items():
            if len(v) > MAX_TEXT_CHARS:
                names[k] = cut(v, MAX_TEXT_CHARS)
    if not n:
        return None
    return (f"{path}: {n} string(s) of megabytes (up to {longest:,} characters) cut to {MAX_TEXT_CHARS:,} characters "
            f"({MAX_HLO_CHARS:,} for HLO texts) as they were read; the trace is corrupt or hostile")


# -- events as columns ---------------------------------------------------------------------
#
# The events are not kept as objects: per timeline line, each event is a reference to its
# description (:class:`_Desc`: name and ``args``, one object per distinct value, shared by
# every event saying the same) and its times as integer columns. A trace of millions of
# events then holds a few bytes per event plus its distinct descriptions, and the events can
# be read chunk by chunk (:func:`traceview.read.tracejson.stream_event_chunks`).

_DOFF = ARG_FIELDS.index("device_offset_ps")  # device_duration_ps follows it
_NUM_AT = tuple(i if i < _DOFF else i - 2 for i in (ARG_FIELDS.index(k) for k in
                ("model_flops", "bytes_accessed", "program_id", "run_id")))
_NUMS = {float, int}
_ALL_VALID = None


class _Desc:
    """What an event says besides its times: ``name`` and ``args`` (an :data:`Args` with
    ``device_offset_ps``/``device_duration_ps`` left out, as those are per-event columns)."""

    __slots__ = ("name", "args", "i")

    def __init__(self, name, args, i: int):
        self.name = name
        self.args = args
        self.i = i  # index in _Events.descs


class _Col:
    """A µs time field (``ts`` or ``dur``) of a run of events as integer ps: ``val``
    (``round(x * 1e6)``, as :func:`_ps` converts; 0 where it gives None), ``valid`` (bool, or
    None: all valid) and ``faults``: how many values were missing, not a number (text that is
    no number, true/false, a list or object) and numbers written as text, or None when every
    value is a JSON number (the exporter's form, read without per-value checks)."""

    __slots__ = ("val", "valid", "faults")

    def __init__(self, val, valid, faults):
        self.val, self.valid, self.faults = val, valid, faults

    @staticmethod
    def of(raw: list) -> "_Col":
        if set(map(type, raw)) <= _NUMS:
            try:
                with np.errstate(over="ignore", invalid="ignore"):  # 1e308 µs: inf, sent to the slow path
                    a = np.array(raw, dtype=np.float64) * 1e6
            except OverflowError:
                a = None
            if a is not None and (np.isfinite(a) & (np.abs(a) < 2.0 ** 63)).all():
                return _Col(np.rint(a).astype(np.int64), None, None)
        n = len(raw)
        val = np.zeros(n, dtype=np.int64)
        valid = np.ones(n, dtype=bool)
        missing = bad = text = 0
        for i, x in enumerate(raw):
            s = _ps(x)
            if s is None:
                valid[i] = False
                if x is None or x is UNSET:
                    missing += 1
                else:
                    bad += 1
            else:
                val[i] = s
                if type(x) is str:
                    text += 1
        faults = (missing, bad, text) if missing or bad or text else None
        return _Col(val, None if valid.all() else valid, faults)

    @staticmethod
    def concat(cols: list) -> "_Col":
        if len(cols) == 1:
            return cols[0]
        if not cols:
            return _Col(np.zeros(0, dtype=np.int64), None, None)
        val = np.concatenate([c.val for c in cols])
        valid = (None if all(c.valid is None for c in cols) else
                 np.concatenate([c.valid if c.valid is not None else np.ones(len(c.val), dtype=bool) for c in cols]))
        faults = [c.faults for c in cols if c.faults is not None]
        return _Col(val, valid, tuple(map(sum, zip(*faults))) if faults else None)

    def take(self, idx: np.ndarray) -> "_Col":
        return _Col(self.val[idx], None if self.valid is None else self.valid[idx], None)


def _dev_ints(args: list) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``args.device_offset_ps`` / ``args.device_duration_ps`` of a run of events as int64
    (``int(x)``; 0 where not an :data:`Args` with both in the int64 range) and where they are
    valid (None: everywhere)."""
    try:
        o = np.array([int(a.device_offset_ps) for a in args], dtype=np.int64)
        d = np.array([int(a.device_duration_ps) for a in args], dtype=np.int64)
        return o, d, None
    except (AttributeError, TypeError, ValueError, OverflowError):
        pass
    n = len(args)
    o, d, ok = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    for i, a in enumerate(args):
        if type(a) is Args:
            try:
                x, y = int(a.device_offset_ps), int(a.device_duration_ps)
            except (TypeError, ValueError, OverflowError):
                continue
            if -_I64 <= x < _I64 and -_I64 <= y < _I64:
                o[i], d[i], ok[i] = x, y, True
    return o, d, ok


class _Line:
    """One timeline line's events: ``didx`` (per event the index of its :class:`_Desc` in
    :attr:`_Events.descs`; an ``array('q')`` while events come in, an int64 array once
    :meth:`finish` ran) and then ``ts``/``dur`` (:class:`_Col`) and the device clock ``doff``/``ddur`` with
    ``dvalid``."""

    __slots__ = ("didx", "pending", "_ts", "_dur", "_dev", "ts", "dur", "doff", "ddur", "dvalid")

    def __init__(self):
        self.didx = array("q")  # 8 bytes an event, no int objects
        self.pending: list = []
        self._ts: list = []
        self._dur: list = []
        self._dev: list = []

    def flush(self, interned: dict, all_descs: list, typed: bool) -> None:
        """Turn the pending event objects into descriptions and columns."""
        evs = self.pending
        if not evs:
            return
        self.pending = []
        self._ts.append(_Col.of([e.ts for e in evs]))
        self._dur.append(_Col.of([e.dur for e in evs]))
        self._dev.append(_dev_ints([e.args for e in evs]))
        append = self.didx.append
        for e in evs:
            a = e.args
            name = e.name
            if type(a) is Args:
                t = _astuple(a)
                vals = t[:_DOFF] + t[_DOFF + 2:]
                # equal values of another type (1, 1.0, True) read differently: types are part of the key
                key = (name, vals, type(name), tuple(map(type, vals)) if not typed else
                       (type(vals[_NUM_AT[0]]), type(vals[_NUM_AT[1]]), type(vals[_NUM_AT[2]]), type(vals[_NUM_AT[3]])))
            else:
                vals = None
                key = (name, a, type(name), type(a))
            try:
                d = interned.get(key)
            except TypeError:  # an unhashable value: a description of its own
                key = d = None
            if d is None:
                d = _Desc(name, Args(*vals[:_DOFF], None, None, *vals[_DOFF:]) if vals is not None else a,
                          len(all_descs))
                all_descs.append(d)
                if key is not None:
                    interned[key] = d
            append(d.i)

    def finish(self) -> None:
        if type(self.didx) is array:
            self.didx = np.frombuffer(self.didx, dtype=np.int64) if len(self.didx) else np.zeros(0, dtype=np.int64)
        self.ts = _Col.concat(self._ts)
        self.dur = _Col.concat(self._dur)
        if len(self._dev) == 1:
            self.doff, self.ddur, self.dvalid = self._dev[0]
        elif not self._dev:
            self.doff = self.ddur = np.zeros(0, dtype=np.int64)
            self.dvalid = None
        else:
            self.doff = np.concatenate([x[0] for x in self._dev])
            self.ddur = np.concatenate([x[1] for x in self._dev])
            self.dvalid = (None if all(x[2] is None for x in self._dev) else
                           np.concatenate([x[2] if x[2] is not None else np.ones(len(x[0]), dtype=bool)
                                           for x in self._dev]))
        self._ts = self._dur = self._dev = None

    @staticmethod
    def join(lines: list) -> "_Line":
        """The events of several lines, in order, as one line."""
        if len(lines) == 1:
            return lines[0]
        out = _Line()
        out.didx = np.concatenate([ln.didx for ln in lines]) if lines else np.zeros(0, dtype=np.int64)
        out._ts = [ln.ts for ln in lines]
        out._dur = [ln.dur for ln in lines]
        out._dev = [(ln.doff, ln.ddur, ln.dvalid) for ln in lines]
        out.finish()
        return out

    def __len__(self) -> int:
        return len(self.didx)


try:
    from msgspec.structs import astuple as _astuple
except ImportError:  # pragma: no cover - msgspec is a dependency
    def _astuple(a):
        return tuple(getattr(a, k) for k in ARG_FIELDS)


class _Events:
    """The events of a trace, fed chunk by chunk (:meth:`add`), as process and thread names
    and one :class:`_Line` per ``(pid, tid)``."""

    def __init__(self):
        self.process: dict = {}
        self.thread: dict = {}
        self.buckets: dict = {}
        self.n_events = 0
        self.n_objects = 0  # event objects decoded (the long-string criterion)
        self.interned: dict = {}
        self.descs: list = []
        self.n_unhashable = 0  # X events whose pid or tid is a list or object: on no line

    def add(self, events: list, n_other: int, typed: bool) -> None:
        """One chunk of event objects (:func:`traceview.read.tracejson.decode_events`), in file
        order; ``n_other``: the other non-empty events it left out."""
        process, thread, buckets = self.process, self.thread, self.buckets
        n_events = self.n_events + n_other
        unset = UNSET
        touched = []
        for e in events:
            ph = e.ph
            if ph == "X":
                n_events += 1
                pid, tid = e.pid, e.tid
                if pid is unset:
                    pid = None
                if tid is unset:
                    tid = None
                key = (pid, tid)
                try:
                    b = buckets.get(key)
                except TypeError:  # a list or object as pid/tid: on no line
                    self.n_unhashable += 1
                    continue
                if b is None:
                    b = buckets[key] = _Line()
                if not b.pending:
                    touched.append(b)
                b.pending.append(e)
            elif ph == "M":
                args = e.args
                nm = args.name if type(args) is Args else None
                if nm is None:
                    continue
                kind = e.name
                pid, tid = e.pid, e.tid
                if pid is unset:
                    pid = None
                if tid is unset:
                    tid = None
                try:
                    if kind == "process_name":
                        process[pid] = str(nm)
                    elif kind == "thread_name":
                        thread[(pid, tid)] = str(nm)
                except TypeError:  # unhashable pid/tid: names nothing
                    continue
            elif ph is not unset or has_fields(e):  # not the empty {}
                n_events += 1
        self.n_events = n_events
        self.n_objects += len(events)
        for b in touched:
            b.flush(self.interned, self.descs, typed)

    def finish(self) -> None:
        self.interned = None
        for b in self.buckets.values():
            b.finish()


def _convert(ev: _Events, path: str, host: str, run: str) -> TraceData:
    process, thread, buckets, n_events = ev.process, ev.thread, ev.buckets, ev.n_events

    acc = _OpRows()
    runs_cols: dict[str, list] = {k: [] for k in MODULE_RUNS_SCHEMA}
    devices: list[DeviceInfo] = []
    notes: list[str] = []
    caches = (_Cache(_hlo_info), _Cache(split_source), _Cache(_stack), _Cache(canonical_shape_text), {}, [],
              ev.descs, np.full(len(ev.descs), -1, dtype=np.int64))

    device_pids = sorted((pid for pid, nm in process.items() if nm.startswith("/device:")), key=_order)
    by_pid: dict = {}
    for (pid, tid), evs in buckets.items():
        by_pid.setdefault(pid, []).append((tid, evs))
    annotated_kinds = set()
    for pid in device_pids:
        pname = process[pid]
        kind = _kind_of(pname)
        devices.append(DeviceInfo(name=pname, kind=kind, device_type=kind if kind in ("TPU", "GPU") else ""))
        lines = sorted(by_pid.get(pid, []), key=lambda t: _order(t[0]))
        names = {tid: thread.get((pid, tid), str(tid)) for tid, _ in lines}
        if any(names[tid] == "XLA Ops" for tid, _ in lines) and kind != "GPU":
            _read_tpu_process(pname, lines, names, acc, runs_cols, caches, host)
        else:
            if _read_annotated(pname, lines, names, acc, runs_cols, host, skip_derived=True, descs=ev.descs):
                annotated_kinds.add(kind if kind != "other" else "device")
    if not acc.n:
        for pid, pname in sorted(process.items(), key=lambda t: _order(t[0])):
            if not pname.startswith("/host:"):
                continue
            lines = sorted(by_pid.get(pid, []), key=lambda t: _order(t[0]))
            names = {tid: thread.get((pid, tid), str(tid)) for tid, _ in lines}
            split: list = []
            if _read_annotated(pname, lines, names, acc, runs_cols, host, skip_derived=False, descs=ev.descs,
                               split_devices=split):
                devices.extend(DeviceInfo(name=nm, kind="CPU", device_type="CPU") for nm in (split or [pname]))
                annotated_kinds.add("CPU")
    if annotated_kinds:
        which = "/".join(sorted(annotated_kinds))
        notes.append(f"{path}: trace.json carries no shapes or program ids for {which} ops; "
                     "read the .xplane.pb for shape-keyed tables")
    faults = _field_faults(ev, path)
    if faults:
        notes.append(faults)
    if n_events in EVENT_CAPS:
        notes.append(f"{path}: holds exactly {n_events:,} events, the profiler's cap: the trace was probably "
                     "truncated, keeping only the earliest events (raise TF_PROFILER_TRACE_VIEWER_MAX_EVENTS "
                     "or read the .xplane.pb)")

    ops = acc.table(host, run, path)
    module_runs = frame(runs_cols, MODULE_RUNS_SCHEMA)
    has_shapes = bool(acc.n) and any(r[_SHAPE_AT] for r in acc.rows)
    return TraceData(path=path, host=host, format="trace_json", ops=ops, module_runs=module_runs,
                     devices=devices, notes=notes, has_shapes=has_shapes, n_events=n_events)


def _field_faults(ev: _Events, path: str) -> str | None:
    """The note counting the complete (``X``) events whose ``ts``, ``dur``, ``pid`` or ``tid``
    is missing or of a type the exporter never writes, and what reading made of them; None
    when there are none. Costs a pass over the lines, not the events, unless a column has
    such values."""
    process, thread = ev.process, ev.thread
    missing_dur = bad_dur = missing_ts = bad_ts = text = bad_pid = bad_tid = 0
    for (pid, tid), line in ev.buckets.items():
        for col, is_dur in ((line.ts, False), (line.dur, True)):
            if col.faults is not None:
                m, b, t = col.faults
                text += t
                if is_dur:
                    missing_dur, bad_dur = missing_dur + m, bad_dur + b
                else:
                    missing_ts, bad_ts = missing_ts + m, bad_ts + b
        if type(pid) is not int and pid not in process:
            bad_pid += len(line)
        elif type(tid) is not int and (pid, tid) not in thread:
            bad_tid += len(line)
    bad_pid += ev.n_unhashable
    parts = []
    if missing_dur or bad_dur:
        parts.append(f"{missing_dur + bad_dur:,} with a dur that is {_missing_or_bad(missing_dur, bad_dur)} "
                     "(read as 0 ps unless args.device_duration_ps gives the time)")
    if missing_ts or bad_ts:
        parts.append(f"{missing_ts + bad_ts:,} with a ts that is {_missing_or_bad(missing_ts, bad_ts)} "
                     "(no start: kept off the timeline)")
    if text:
        parts.append(f"{text:,} ts or dur value(s) written as text (read as the numbers they spell)")
    if bad_pid:
        parts.append(f"{bad_pid:,} with a pid that is missing or not an integer (on no named process: left out)")
    if bad_tid:
        parts.append(f"{bad_tid:,} with a tid that is missing or not an integer (on a thread with no name: never "
                     "an XLA Ops line)")
    if not parts:
        return None
    return (f"{path}: {FIELD_FAULTS} (the file was altered or written by another tool): {'; '.join(parts)}")


def _missing_or_bad(missing: int, bad: int) -> str:
    if missing and bad:
        return f"missing or null ({missing:,}) or not a number ({bad:,})"
    return "missing or null" if missing else "not a number"


#: TPU op columns derived from an event's name and metadata args, in _tpu_row's order
_TPU_ROW_COLS = ("op_name", "op_kind", "category", "shape", "hlo_text", "source_file", "source_line",
                 "source_stack", "framework_op", "flops", "model_flops", "bytes_accessed")
#: the columns of an _OpRows row: the line's, then _TPU_ROW_COLS
_ROW_COLS = ("device", "line", "module", "program_id", "kernel") + _TPU_ROW_COLS
_SHAPE_AT = _ROW_COLS.index("shape")
_FLOPS_AT = _ROW_COLS.index("flops")
_BYTES_AT = _ROW_COLS.index("bytes_accessed")


class _OpRows:
    """The op table under construction, dictionary-encoded like :class:`OpTable`: ``rows``
    holds per-op descriptions (tuples of _ROW_COLS values; a TPU trace repeats a few thousand
    of them over hundreds of thousands of events), and per event the index of its row and
    its start/duration/self time, in chunks of one timeline line each. Building the table
    from these skips the per-event string columns (Python lists -> a wide frame -> hashed
    back into descriptions by ``OpTable.from_frame``)."""

    def __init__(self):
        self.rows: list[tuple] = []
        self.n = 0
        self._idx: list[np.ndarray] = []
        self._starts: list = []
        self._durs: list[np.ndarray] = []
        self._selfs: list[np.ndarray] = []

    def add(self, idx: np.ndarray, s_arr: np.ndarray, valid: np.ndarray | None, d_arr: np.ndarray,
            selfs: np.ndarray) -> None:
        """One line's events: row indices, starts (``valid``: where they are known, None:
        everywhere), durations and self times."""
        self._idx.append(idx)
        self._starts.append(s_arr if valid is None else [v if ok else None for v, ok in zip(s_arr.tolist(), valid.tolist())])
        self._durs.append(d_arr)
        self._selfs.append(selfs)
        self.n += len(idx)

    def table(self, host: str, run: str, path: str) -> OpTable:
        """The :class:`OpTable`, equal to ``OpTable.from_frame`` of the wide frame built per
        event: the distinct rows go through ``schema.frame`` (the same conversions), then are
        merged where their values are equal, numbered in order of first appearance."""
        if not self.n:
            return OpTable.empty()
        k = len(self.rows)
        cols: dict[str, list] = {c: list(v) for c, v in zip(_ROW_COLS, zip(*self.rows))}
        cols["host"] = [host] * k
        cols["run"] = [run] * k
        cols["file"] = [path] * k
        if "cost_source" in OPS_SCHEMA:
            cols["cost_source"] = ["trace" if r[_FLOPS_AT] is not None or r[_BYTES_AT] is not None else "unknown"
                                   for r in self.rows]
        desc = frame(cols, {c: OPS_SCHEMA[c] for c in ATTR_COLUMNS})
        groups = (desc.with_row_index("_row")
                  .group_by(ATTR_COLUMNS, maintain_order=True).agg(pl.col("_row")))
        attr_of = np.empty(k, dtype=np.uint32)
        attr_of[groups["_row"].explode().to_numpy()] = np.repeat(
            np.arange(groups.height, dtype=np.uint32), groups["_row"].list.len().to_numpy())
        return OpTable.from_parts(
            attr_of[np.concatenate(self._idx)],
            _i64_series("start_ps", self._starts), _i64_series("duration_ps", self._durs),
            _i64_series("self_ps", self._selfs), np.ones(self.n, dtype=np.int64), groups.drop("_row"))


def _i64_series(name: str, chunks: list) -> pl.Series:
    """An Int64 series from int64 arrays and lists of ints/None (out-of-range -> null, as
    ``schema.frame`` converts)."""
    if not chunks:
        return pl.Series(name, [], dtype=pl.Int64)
    parts = [pl.Series(name, c, dtype=pl.Int64, strict=False) for c in chunks]
    return parts[0] if len(parts) == 1 else pl.concat(parts, rechunk=True)


def _times(line: _Line, idx: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(starts, durations, valid) in ps of a line's events (those at ``idx``): ``ts``/``dur``
    µs times ``1e6``, rounded; ``valid`` says where the start is known (None: everywhere),
    starts are 0 and durations 0 where unknown (each value as :func:`_ps` reads it)."""
    ts, dur = line.ts, line.dur
    if idx is not None:
        ts, dur = ts.take(idx), dur.take(idx)
    return ts.val, dur.val, ts.valid


def _device_times(line: _Line) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Like :func:`_times`, on the device clock where the event has it: TPU events carry
    ``args.device_offset_ps`` / ``args.device_duration_ps`` (integer ps, as strings), the
    times XProf's op metrics and :mod:`traceview.model.from_xplane` use; ``ts``/``dur`` (host-aligned)
    elsewhere."""
    if line.dvalid is None:
        return line.doff, line.ddur, None
    s, d, valid = _times(line)
    dv = line.dvalid
    s = np.where(dv, line.doff, s)
    d = np.where(dv, line.ddur, d)
    if valid is not None:
        valid = valid | dv
        if valid.all():
            valid = None
    return s, d, valid


def _self(s_arr: np.ndarray, d_arr: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
    if valid is None:
        return self_times(s_arr, d_arr)
    ix = np.flatnonzero(valid)
    out = d_arr.copy()
    if len(ix):
        out[ix] = self_times(s_arr[ix], d_arr[ix])
    return out


def _starts_list(s_arr: np.ndarray, valid: np.ndarray | None) -> list:
    s = s_arr.tolist()
    return s if valid is None else [v if ok else None for v, ok in zip(s, valid.tolist())]


def _tpu_row(key: tuple, caches) -> tuple:
    """The derived TPU op fields (_TPU_ROW_COLS) for one distinct (name, metadata args) key."""
    hlo_c, src_c, stack_c, shape_c = caches[:4]
    name, text, cat, src, stack, fw, mf, ba, swl = key
    if name is UNSET:
        name = None
    name = name if type(name) is str else ("" if name is None else str(name))
    name_is_text = False
    if type(text) is not str:
        # no display name: the exporter wrote the HLO text itself as the event name
        name_is_text = " = " in name
        text = name if name_is_text else ""
    ins_name, kind, shape, hlo_text = hlo_c[text] if text else ("", "", "", "")
    if not hlo_text:
        shape = shape_c[swl] if type(swl) is str and swl else ""
    op_name = (ins_name or name) if (name_is_text or not name) else name
    if not kind:
        kind = guess_opcode(op_name)
    f, ln = src_c[src] if type(src) is str and src else ("", None)
    mflops = _num(mf)
    return (op_name, kind, cat if type(cat) is str and cat else kind, shape, hlo_text, f, ln,
            stack_c[stack] if type(stack) is str and stack else "",
            fw.rstrip(":") if type(fw) is str else "",
            mflops, mflops, _num(ba))


def _read_tpu_process(pname, lines, names, acc: _OpRows, runs_cols, caches, host) -> None:
    descs: list = caches[6]
    mod_lines = [ln for tid, ln in lines if names[tid] == "XLA Modules"]
    mod_line = _Line.join(mod_lines) if mod_lines else None
    mod_descs = [descs[i] for i in mod_line.didx.tolist()] if mod_line is not None else []
    mods = [split_module_name("" if e.name is UNSET else str(e.name)) for e in mod_descs]
    if mod_line is not None:
        m_s, m_d, m_valid = _device_times(mod_line)
    else:
        m_s = m_d = np.zeros(0, dtype=np.int64)
        m_valid = None
    runs_cols["host"].extend([host] * len(mod_descs))
    runs_cols["device"].extend([pname] * len(mod_descs))
    runs_cols["module"].extend([m for m, _ in mods])
    runs_cols["program_id"].extend([p for _, p in mods])
    runs_cols["start_ps"].extend(_starts_list(m_s, m_valid))
    runs_cols["duration_ps"].extend(m_d.tolist())
    vm = np.arange(len(m_s), dtype=np.int64) if m_valid is None else np.flatnonzero(m_valid)
    key_rows: dict = caches[4]  # (name, metadata args) -> index into tpu_rows
    tpu_rows: list = caches[5]
    row_of_desc: np.ndarray = caches[7]  # description index -> index into tpu_rows (-1: not yet)
    line_rows: dict = {}  # (index into tpu_rows, index into mod_names or -1) -> acc row, this process
    nones = (None,) * 8
    # the distinct (module, program id) pairs, and per module run the index of its pair
    mod_ids: dict = {}
    run_mod = np.array([mod_ids.setdefault(m, len(mod_ids)) for m in mods] + [-1], dtype=np.int64)
    mod_names = list(mod_ids)
    n_mods = len(mod_names) + 1

    for tid, ln in lines:
        if names[tid] != "XLA Ops":
            continue
        s_arr, d_arr, valid = _device_times(ln)
        selfs = _self(s_arr, d_arr, valid)
        if len(vm):
            enc = enclosing(s_arr, s_arr + d_arr, m_s[vm], (m_s + m_d)[vm])
            enc = np.where(enc >= 0, vm[np.maximum(enc, 0)], -1)
            if valid is not None:
                enc[~valid] = -1
        else:
            enc = np.full(len(ln), -1, dtype=np.int64)
        # one row per distinct description, in order of first appearance
        didx = ln.didx
        _, first_at = np.unique(didx, return_index=True)
        for i in didx[np.sort(first_at)].tolist():
            if row_of_desc[i] >= 0:
                continue
            e = descs[i]
            a = e.args
            # every metadata arg read below is part of the key: equal keys give equal rows
            key = ((e.name, a.long_name, a.hlo_category, a.source, a.source_stack, a.tf_op, a.model_flops,
                    a.bytes_accessed, a.shape_with_layout) if type(a) is Args else (e.name,) + nones)
            try:
                r = key_rows[key]
            except KeyError:
                r = key_rows[key] = len(tpu_rows)
                tpu_rows.append(_tpu_row(key, caches))
            except TypeError:  # an unhashable (non-string) arg value
                r = len(tpu_rows)
                tpu_rows.append(_tpu_row(tuple(
                    None if v is None or v is UNSET else v if type(v) in (str, int, float) else str(v) for v in key),
                    caches))
            row_of_desc[i] = r
        ids = row_of_desc[didx]
        # the row of an event: its description and its module, numbered in order of first appearance
        code = np.array(ids, dtype=np.int64) * n_mods + (run_mod[enc] + 1)  # enc -1 -> run_mod[-1] = -1
        uniq, first, inv = np.unique(code, return_index=True, return_inverse=True)
        rows_of = np.empty(len(uniq), dtype=np.int64)
        for j in np.argsort(first, kind="stable").tolist():
            r, k = divmod(int(uniq[j]), n_mods)
            k -= 1
            row = line_rows.get((r, k))
            if row is None:
                row = line_rows[(r, k)] = len(acc.rows)
                mod, prog = mod_names[k] if k >= 0 else ("", None)
                acc.rows.append((pname, "XLA Ops", mod, prog, "") + tpu_rows[r])
            rows_of[j] = row
        acc.add(rows_of[inv.reshape(-1)], s_arr, valid, d_arr, selfs)


def _read_annotated(pname, lines, names, acc: _OpRows, runs_cols, host, skip_derived: bool, descs: list,
                    split_devices: list | None = None) -> bool:
    """GPU stream lines / CPU threads: ops are events with ``args.hlo_op``. Returns True if
    any op was found. ``split_devices``: when given (a host process), events naming two or
    more ``args.device_ordinal`` values go to one device per ordinal
    (:mod:`traceview.model.cpu_devices`), whose names are appended to it."""
    found = False
    runs: dict = {}  # (device, module, program id, run_id) -> [first start, last end]
    ordinals: set = set()
    if split_devices is not None:
        for tid, line in lines:
            for i in np.unique(line.didx).tolist():
                a = descs[i].args
                if type(a) is Args and a.hlo_op and a.device_ordinal is not None:
                    o = _int(a.device_ordinal)
                    if o is not None:
                        ordinals.add(o)
    split = len(ordinals) >= 2
    if split:
        split_devices.extend(cpu_device_name(o) for o in sorted(ordinals))
    for tid, line in lines:
        lname = names[tid]
        if skip_derived and lname.startswith(_GPU_SKIP_LINES):
            continue
        is_op = {}
        for i in np.unique(line.didx).tolist():
            e = descs[i]
            args = e.args
            name = e.name
            is_op[i] = (type(args) is Args and bool(args.hlo_op)
                        and not (type(name) is str and name.startswith("end: ")))
        at = np.flatnonzero(np.array([is_op[i] for i in line.didx.tolist()], dtype=bool))
        if not len(at):
            continue
        found = True
        ops = [descs[i] for i in line.didx[at].tolist()]
        s_arr, d_arr, valid = _times(line, at)
        selfs = _self(s_arr, d_arr, valid)
        starts = _starts_list(s_arr, valid)
        durs = d_arr.tolist()
        first = len(acc.rows)
        for e, s, d in zip(ops, starts, durs):
            args = e.args
            op = str(args.hlo_op)
            name = e.name
            name = "" if name is None or name is UNSET else str(name)
            mod_raw = args.hlo_module
            module, pid_in_name = split_module_name(str(mod_raw)) if mod_raw else ("", None)
            pid = _int(args.program_id)
            if pid is None:
                pid = pid_in_name
            kind = guess_opcode(op)
            src = args.source
            f, ln = split_source(src) if type(src) is str and src else ("", None)
            st = args.source_stack
            fw = args.tf_op
            dev = pname
            if split:
                o = _int(args.device_ordinal) if args.device_ordinal is not None else None
                dev = cpu_device_name(o) if o is not None else pname
            acc.rows.append((dev, lname, module, pid, name if name != op else "",
                             op, kind, kind, "", "", f, ln, _stack(st) if type(st) is str else "",
                             fw.rstrip(":") if type(fw) is str else "", None, None, None))
            rid = args.run_id
            if rid is not None and s is not None and type(rid) in (int, str, float):
                k = (dev, module, pid, rid)
                r = runs.get(k)
                if r is None:
                    runs[k] = [s, s + d]
                else:
                    if s < r[0]:
                        r[0] = s
                    if s + d > r[1]:
                        r[1] = s + d
        acc.add(np.arange(first, len(acc.rows), dtype=np.int64), s_arr, valid, d_arr, selfs)
    for (dev, module, pid, _rid), (s, e) in sorted(runs.items(), key=lambda kv: kv[1][0]):
        runs_cols["host"].append(host)
        runs_cols["device"].append(dev)
        runs_cols["module"].append(module)
        runs_cols["program_id"].append(pid)
        runs_cols["start_ps"].append(s)
        # an end past int64 (a corrupt dur) saturates, for clamp_file to clamp with a warning
        runs_cols["duration_ps"].append(min(e - s, _I64 - 1))
    return found
