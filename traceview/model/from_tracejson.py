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
from traceview.read.tracejson import (ARG_FIELDS, MAX_MEMORY_BYTES, UNSET, Args, check_reading_cost, gc_paused, has_fields,
                                      load_events, read_json_bytes, text_limit_for)

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
        max_bytes: the most memory reading the file may take, bytes (default 4 GiB): the JSON
            text is inflated up to ``max_bytes / TEXT_FACTOR`` bytes, and a file whose text and
            events would take more (:func:`traceview.read.tracejson.reading_cost`) is refused
            before its events are decoded.
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
            more than ``max_bytes``.

    Never writes anything.
    """
    p = str(path)
    text_limit = text_limit_for(max_bytes) if max_decompressed_bytes is None else max_decompressed_bytes
    text = read_json_bytes(p, max_decompressed_bytes=text_limit,
                           max_bytes=max_bytes if max_decompressed_bytes is None else None)
    check_reading_cost(text, max_bytes, p)
    host = printable(host if host is not None else host_from_filename(p))
    run, label = printable(run), printable(p)
    # millions of small objects trigger the cyclic GC again and again while nothing here can
    # form a cycle: pausing it saves much of the general path's parse time
    with gc_paused():
        events, n_other = load_events(text, p)
        long_text = len(text) > LONG_EVENT_BYTES * max(len(events), 1)
        del text
        cut = _cut_long_strings(events, label) if long_text else None
        td = _convert(events, n_other, label, host, run)
    if cut:
        td.notes.append(cut)
    return td


#: Events average at most this many bytes of JSON in real traces (about 1 KB with HLO texts);
#: above it, a few events hold strings of megabytes, which are cut before anything copies them.
LONG_EVENT_BYTES = 4096
_HLO_ARGS = ("long_name", "hlo_op")


def _cut_long_strings(events: list, path: str) -> str | None:
    """Cut every string of ``events`` (their names and read ``args``) longer than
    :data:`~traceview.model.bounds.MAX_TEXT_CHARS` (HLO texts:
    :data:`~traceview.model.bounds.MAX_HLO_CHARS`) in place; the note saying so, or None."""
    n, longest = 0, 0

    def cut(v, limit):
        nonlocal n, longest
        if type(v) is str and len(v) > limit:
            n += 1
            longest = max(longest, len(v))
            return cut_text(v, limit)
        return v

    for e in events:
        if type(e.name) is str and len(e.name) > MAX_TEXT_CHARS:
            e.name = cut(e.name, MAX_TEXT_CHARS)
        a = e.args
        if a is not None and a is not UNSET:
            for k in ARG_FIELDS:
                v = getattr(a, k)
                if type(v) is str and len(v) > MAX_TEXT_CHARS:
                    setattr(a, k, cut(v, MAX_HLO_CHARS if k in _HLO_ARGS else MAX_TEXT_CHARS))
    if not n:
        return None
    return (f"{path}: {n} string(s) of megabytes (up to {longest:,} characters) cut to {MAX_TEXT_CHARS:,} characters "
            f"({MAX_HLO_CHARS:,} for HLO texts) as they were read; the trace is corrupt or hostile")


def _convert(events: list, n_other: int, path: str, host: str, run: str) -> TraceData:
    process: dict = {}
    thread: dict = {}
    buckets: dict = {}
    n_events = n_other
    unset = UNSET
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
                continue
            if b is None:
                b = buckets[key] = []
            b.append(e)
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

    acc = _OpRows()
    runs_cols: dict[str, list] = {k: [] for k in MODULE_RUNS_SCHEMA}
    devices: list[DeviceInfo] = []
    notes: list[str] = []
    caches = (_Cache(_hlo_info), _Cache(split_source), _Cache(_stack), _Cache(canonical_shape_text), {}, [])

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
            if _read_annotated(pname, lines, names, acc, runs_cols, host, skip_derived=True):
                annotated_kinds.add(kind if kind != "other" else "device")
    if not acc.n:
        for pid, pname in sorted(process.items(), key=lambda t: _order(t[0])):
            if not pname.startswith("/host:"):
                continue
            lines = sorted(by_pid.get(pid, []), key=lambda t: _order(t[0]))
            names = {tid: thread.get((pid, tid), str(tid)) for tid, _ in lines}
            split: list = []
            if _read_annotated(pname, lines, names, acc, runs_cols, host, skip_derived=False, split_devices=split):
                devices.extend(DeviceInfo(name=nm, kind="CPU", device_type="CPU") for nm in (split or [pname]))
                annotated_kinds.add("CPU")
    if annotated_kinds:
        which = "/".join(sorted(annotated_kinds))
        notes.append(f"{path}: trace.json carries no shapes or program ids for {which} ops; "
                     "read the .xplane.pb for shape-keyed tables")
    if n_events in EVENT_CAPS:
        notes.append(f"{path}: holds exactly {n_events:,} events, the profiler's cap: the trace was probably "
                     "truncated, keeping only the earliest events (raise TF_PROFILER_TRACE_VIEWER_MAX_EVENTS "
                     "or read the .xplane.pb)")

    ops = acc.table(host, run, path)
    module_runs = frame(runs_cols, MODULE_RUNS_SCHEMA)
    has_shapes = bool(acc.n) and any(r[_SHAPE_AT] for r in acc.rows)
    return TraceData(path=path, host=host, format="trace_json", ops=ops, module_runs=module_runs,
                     devices=devices, notes=notes, has_shapes=has_shapes, n_events=n_events)


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

    def add(self, idx: np.ndarray, starts: list, s_arr: np.ndarray, d_arr: np.ndarray, selfs: np.ndarray) -> None:
        """One line's events: row indices, starts (list, None where unknown; ``s_arr`` holds
        the same with 0 there), durations and self times."""
        self._idx.append(idx)
        self._starts.append(starts if None in starts else s_arr)
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


def _times(evs: list) -> tuple[list, np.ndarray, np.ndarray]:
    """(starts in ps as a list with None where missing, starts as int64 array with 0 there,
    durations in ps as int64 array, 0 where missing) for a list of events."""
    try:
        # the exporter's form: numeric ts/dur on every event
        starts = [round(e.ts * 1e6) for e in evs]
        durs = [round(e.dur * 1e6) for e in evs]
        return starts, np.array(starts, dtype=np.int64), np.array(durs, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        pass
    starts = [_ps(e.ts) for e in evs]
    durs = [_ps(e.dur) or 0 for e in evs]
    s_arr = np.array([s if s is not None else 0 for s in starts], dtype=np.int64)
    d_arr = np.array(durs, dtype=np.int64)
    return starts, s_arr, d_arr


def _device_times(evs: list) -> tuple[list, np.ndarray, np.ndarray]:
    """Like :func:`_times`, on the device clock where the event has it: TPU events carry
    ``args.device_offset_ps`` / ``args.device_duration_ps`` (integer ps, as strings), the
    times XProf's op metrics and :mod:`traceview.model.from_xplane` use; ``ts``/``dur`` (host-aligned)
    elsewhere."""
    try:
        starts = [int(e.args.device_offset_ps) for e in evs]
        durs = [int(e.args.device_duration_ps) for e in evs]
        return starts, np.array(starts, dtype=np.int64), np.array(durs, dtype=np.int64)
    except (AttributeError, TypeError, ValueError, OverflowError):
        pass
    starts, s_arr, d_arr = _times(evs)
    starts = list(starts)
    durs = d_arr.tolist()
    for i, e in enumerate(evs):
        args = e.args
        if type(args) is Args:
            try:
                o, d = int(args.device_offset_ps), int(args.device_duration_ps)
            except (TypeError, ValueError, OverflowError):
                continue
            if not (-_I64 <= o < _I64 and -_I64 <= d < _I64):
                continue
            starts[i], durs[i] = o, d
    s_arr = np.array([s if s is not None else 0 for s in starts], dtype=np.int64)
    return starts, s_arr, np.array(durs, dtype=np.int64)


def _self(starts: list, s_arr: np.ndarray, d_arr: np.ndarray) -> np.ndarray:
    if None not in starts:
        return self_times(s_arr, d_arr)
    idx = [i for i, s in enumerate(starts) if s is not None]
    out = d_arr.copy()
    if idx:
        ix = np.array(idx, dtype=np.int64)
        out[ix] = self_times(s_arr[ix], d_arr[ix])
    return out


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
    mod_evs = [e for tid, evs in lines if names[tid] == "XLA Modules" for e in evs]
    mods = [split_module_name("" if e.name is UNSET else str(e.name)) for e in mod_evs]
    m_starts, m_s, m_d = _device_times(mod_evs)
    runs_cols["host"].extend([host] * len(mod_evs))
    runs_cols["device"].extend([pname] * len(mod_evs))
    runs_cols["module"].extend([m for m, _ in mods])
    runs_cols["program_id"].extend([p for _, p in mods])
    runs_cols["start_ps"].extend(m_starts)
    runs_cols["duration_ps"].extend(m_d.tolist())
    valid_mod = [i for i, s in enumerate(m_starts) if s is not None]
    vm = np.array(valid_mod, dtype=np.int64)
    key_rows: dict = caches[4]  # (name, metadata args) -> index into tpu_rows
    tpu_rows: list = caches[5]
    line_rows: dict = {}  # (index into tpu_rows, index into mod_names or -1) -> acc row, this process
    nones = (None,) * 8
    # the distinct (module, program id) pairs, and per module run the index of its pair
    mod_ids: dict = {}
    run_mod = np.array([mod_ids.setdefault(m, len(mod_ids)) for m in mods] + [-1], dtype=np.int64)
    mod_names = list(mod_ids)
    n_mods = len(mod_names) + 1

    for tid, evs in lines:
        if names[tid] != "XLA Ops":
            continue
        starts, s_arr, d_arr = _device_times(evs)
        selfs = _self(starts, s_arr, d_arr)
        if len(valid_mod):
            enc = enclosing(s_arr, s_arr + d_arr, m_s[vm], (m_s + m_d)[vm])
            enc = np.where(enc >= 0, vm[np.maximum(enc, 0)], -1)
            if None in starts:
                enc[[i for i, s in enumerate(starts) if s is None]] = -1
        else:
            enc = np.full(len(evs), -1, dtype=np.int64)
        ids = []
        append = ids.append
        for e in evs:
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
            append(r)
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
        acc.add(rows_of[inv.reshape(-1)], starts, s_arr, d_arr, selfs)


def _read_annotated(pname, lines, names, acc: _OpRows, runs_cols, host, skip_derived: bool,
                    split_devices: list | None = None) -> bool:
    """GPU stream lines / CPU threads: ops are events with ``args.hlo_op``. Returns True if
    any op was found. ``split_devices``: when given (a host process), events naming two or
    more ``args.device_ordinal`` values go to one device per ordinal
    (:mod:`traceview.model.cpu_devices`), whose names are appended to it."""
    found = False
    runs: dict = {}  # (device, module, program id, run_id) -> [first start, last end]
    ordinals: set = set()
    if split_devices is not None:
        for tid, evs in lines:
            for e in evs:
                a = e.args
                if type(a) is Args and a.hlo_op and a.device_ordinal is not None:
                    o = _int(a.device_ordinal)
                    if o is not None:
                        ordinals.add(o)
    split = len(ordinals) >= 2
    if split:
        split_devices.extend(cpu_device_name(o) for o in sorted(ordinals))
    for tid, evs in lines:
        lname = names[tid]
        if skip_derived and lname.startswith(_GPU_SKIP_LINES):
            continue
        ops = []
        for e in evs:
            args = e.args
            if type(args) is not Args:
                continue
            if not args.hlo_op:
                continue
            name = e.name
            if type(name) is str and name.startswith("end: "):
                continue
            ops.append(e)
        if not ops:
            continue
        found = True
        starts, s_arr, d_arr = _times(ops)
        selfs = _self(starts, s_arr, d_arr)
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
        acc.add(np.arange(first, len(acc.rows), dtype=np.int64), starts, s_arr, d_arr, selfs)
    for (dev, module, pid, _rid), (s, e) in sorted(runs.items(), key=lambda kv: kv[1][0]):
        runs_cols["host"].append(host)
        runs_cols["device"].append(dev)
        runs_cols["module"].append(module)
        runs_cols["program_id"].append(pid)
        runs_cols["start_ps"].append(s)
        runs_cols["duration_ps"].append(e - s)
    return found
