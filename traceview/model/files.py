"""One trace file to a :class:`~traceview.model.schema.TraceData`: the reader its name calls
for, the byte limit, the parsed-table cache, and corrupt op times clamped (with notes)."""

from __future__ import annotations

import os
import stat as _stat

import polars as pl

from traceview.errors import TraceUnreadable, TraceviewError, UsageError
from traceview.model.optable import ATTR_SCHEMA, EVENT_SCHEMA, OpTable
from traceview.model.runtable import KEY_SCHEMA, RUN_SCHEMA, RunTable
from traceview.model.schema import DeviceInfo, TraceData
from traceview.read.batch import Failed, ReadTask
from traceview.read.cache import TableCache
from traceview.model.bounds import clamp_file, cut_strings, drop_bad_costs
from traceview.read.diagnose import still_writing_hint

#: Environment variable: the default of ``max_bytes`` (see :func:`read_file`).
MAX_BYTES_ENV = "TRACEVIEW_MAX_BYTES"


def max_bytes_default(max_bytes: int | None) -> int | None:
    """``max_bytes``, else ``$TRACEVIEW_MAX_BYTES``, else None (the readers' own limits).
    Raises :class:`UsageError` when either is not a positive whole number of bytes."""
    if max_bytes is not None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise UsageError(f"max_bytes must be a positive whole number of bytes, got {max_bytes!r}")
        return max_bytes
    text = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise UsageError(f"{MAX_BYTES_ENV} must be a positive number of bytes, got {text!r}")
    return value


def kind_of(path: str) -> str:
    """The reader a file's name calls for: ``"xplane"`` (``*.pb``, ``*.pb.gz``) or ``"trace_json"``."""
    return "xplane" if str(path).endswith((".pb", ".pb.gz")) else "trace_json"


def cache_args(path: str, kind: str, host: str | None, run: str) -> list:
    """The read arguments that key a file's parsed-table cache entry (they end up in the frames)."""
    return [str(path), kind, host, run]


def read_file(path: str | os.PathLike, *, kind: str | None = None, host: str | None = None, run: str = "",
              max_bytes: int | None = None, cache: "TableCache | bool | None" = None, prefetch=None) -> TraceData:
    """Read one trace file with the reader its name calls for, through the parsed-table cache.

    ``kind``: "xplane" or "trace_json" (:func:`kind_of` when None). ``max_bytes`` caps the
    trace data held in memory: the size of an ``.xplane.pb``, the decompressed text of a
    ``.trace.json[.gz]`` (default: ``$TRACEVIEW_MAX_BYTES``, else the readers' own limits,
    8 GiB and 4 GiB); the cache is skipped when a limit is in force, so limits are always
    checked. ``cache``: a :class:`~traceview.read.cache.TableCache`, False for none, None for
    :meth:`TableCache.default`. ``prefetch``: a :class:`traceview.read.prefetch.Prefetch` of
    this file, or None. Raises :class:`~traceview.errors.TraceUnreadable` (a truncated file
    modified in the last two minutes says the profiler may still be writing it) /
    :class:`~traceview.errors.LimitExceeded` / :class:`~traceview.errors.NoTraceFound`. Op
    events with negative or overflowing times are clamped and noted in ``notes``
    (:mod:`traceview.model.bounds`).
    """
    p = str(path)
    k = kind if kind is not None else kind_of(p)
    limit = max_bytes_default(max_bytes)
    store = TableCache.default() if cache is None else (cache or None)

    def read() -> TraceData:
        return read_uncached(p, kind=k, host=host, run=run, max_bytes=limit, prefetch=prefetch)

    if limit is not None or store is None:
        return read()
    return store.cached(p, cache_args(p, k, host, run), read, encode, decode)


def read_uncached(path: str | os.PathLike, *, kind: str | None = None, host: str | None = None, run: str = "",
                  max_bytes: int | None = None, prefetch=None, memory: bool = True) -> TraceData:
    """:func:`read_file` without the cache (same arguments, result and errors); ``memory``:
    False leaves an ``.xplane.pb``'s allocator events unread (``memory`` None)."""
    p = str(path)
    limit = max_bytes_default(max_bytes)
    if kind is None:
        kind = kind_of(p)
    try:
        if not _stat.S_ISREG(os.stat(p).st_mode):  # a FIFO or device would block or never end
            raise TraceUnreadable("not a regular file", p)
    except OSError:
        pass  # the reader reports a missing or unreadable file
    try:
        if kind == "xplane":
            from traceview.model.from_xplane import read_xplane

            td = read_xplane(p, host=host, run=run, prefetch=prefetch, memory=memory,
                             **({} if limit is None else {"max_bytes": limit}))
        else:
            from traceview.model.from_tracejson import read_trace_json

            td = read_trace_json(p, host=host, run=run, **({} if limit is None else {"max_bytes": limit}))
    except TraceUnreadable as exc:
        hint = still_writing_hint(p, exc.fault)
        if hint:
            raise TraceUnreadable(f"{exc.fault}; {hint}", exc.path) from None
        raise
    td.table, td.runs, notes = clamp_file(td.table, td.runs, p)
    td.table, cut = cut_strings(td.table, p)
    td.table, costs = drop_bad_costs(td.table, p)
    td.notes.extend(notes + cut + costs)
    return td


def read_task(task: ReadTask, prefetch=None, memory: bool = True):
    """Read one file of :func:`traceview.read.batch.read_many` (runs in a worker): its
    TraceData, or a :class:`~traceview.read.batch.Failed` carrying the TraceviewError.
    ``prefetch``: see :func:`read_file` (in the calling process only). ``memory``: False
    leaves the allocator events unread when the task has no cache (a cache entry is whole)."""
    try:
        if not memory and task.cache_root is None:
            return read_uncached(task.path, kind=task.kind, host=task.host, run=task.run, max_bytes=task.max_bytes,
                                 prefetch=prefetch, memory=False)
        cache = (TableCache(task.cache_root, min_file_bytes=task.min_cache_bytes) if task.cache_root is not None
                 else False)
        return read_file(task.path, kind=task.kind, host=task.host, run=task.run, max_bytes=task.max_bytes, cache=cache,
                         prefetch=prefetch)
    except TraceviewError as exc:
        return Failed(exc)


# -- the cache entry of a TraceData ----------------------------------------------------------

def encode(td: TraceData) -> tuple[dict, dict, dict]:
    """(data, frames, compression) of a TraceData for :meth:`TableCache.put`: the small fields
    as JSON-able data (devices with their stats, notes, has_shapes, n_events, profile
    start/stop), and the op table, module runs and step markers as frames (events lz4: it
    decodes at GB/s, the hit must be cheap; the rest zstd)."""
    from dataclasses import asdict

    data = {"path": td.path, "host": td.host, "format": td.format, "devices": [asdict(d) for d in td.devices],
            "notes": list(td.notes), "has_shapes": td.has_shapes, "n_events": td.n_events,
            "profile_start_ns": td.profile_start_ns, "profile_stop_ns": td.profile_stop_ns}
    frames = {"events": td.table.events, "attrs": td.table.attrs, "runs": td.runs.runs, "run_keys": td.runs.keys}
    if td.step_markers is not None:
        frames["step_markers"] = td.step_markers
    if td.memory is not None:
        frames["memory"] = td.memory
    if td.kernel_lines is not None:
        frames["kernel_lines"] = td.kernel_lines
    if td.hlo_protos is not None:
        frames["hlo_protos"] = td.hlo_protos
    return data, frames, {"events": "lz4"}


def decode(data: dict, frames: dict) -> TraceData | None:
    """The TraceData of a cache entry made by :func:`encode`; None when its tables are not
    those of this traceview (another schema)."""
    if "runs" not in frames or "run_keys" not in frames:  # an entry of an older traceview
        return None
    events, attrs, runs, keys = frames["events"], frames["attrs"], frames["runs"], frames["run_keys"]
    if (events.schema != pl.Schema(EVENT_SCHEMA) or attrs.schema != pl.Schema(ATTR_SCHEMA)
            or runs.schema != pl.Schema(RUN_SCHEMA) or keys.schema != pl.Schema(KEY_SCHEMA)):
        return None
    return TraceData(path=data["path"], host=data["host"], format=data["format"], ops=OpTable(events, attrs),
                     runs=RunTable(runs, keys), devices=[DeviceInfo(**d) for d in data["devices"]],
                     notes=list(data["notes"]),
                     has_shapes=data["has_shapes"], n_events=data["n_events"],
                     profile_start_ns=data["profile_start_ns"], profile_stop_ns=data["profile_stop_ns"],
                     step_markers=frames.get("step_markers"), memory=frames.get("memory"),
                     kernel_lines=frames.get("kernel_lines"), hlo_protos=frames.get("hlo_protos"))
