"""A loaded profile: discovery result + merged op-event table + the analyses as methods.

This is the notebook-facing object (``traceview.load(path)``) and what the CLI renders.
It never prints and never exits; bad input raises :class:`traceview.errors.TraceviewError`.
"""

from __future__ import annotations

import os
from pathlib import Path

from dataclasses import dataclass

import polars as pl

from . import aggregate
from .errors import NoOpsFound, TraceviewError, UsageError
from .schema import MODULE_RUNS_SCHEMA, OPS_SCHEMA, STEP_MARKERS_SCHEMA, DeviceInfo, TraceData


#: Environment variable: the default of ``max_bytes`` (see :func:`read_file`).
MAX_BYTES_ENV = "TRACEVIEW_MAX_BYTES"


def _max_bytes(max_bytes: int | None) -> int | None:
    if max_bytes is not None:
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


def read_file(path: str | os.PathLike, *, kind: str | None = None, host: str | None = None, run: str = "",
              max_bytes: int | None = None) -> TraceData:
    """Read one trace file with the reader its name calls for, through the parsed-table cache.

    Same arguments, result and errors as :func:`_read_file_uncached`; a fresh entry of
    :mod:`traceview.cache` (outside the profile folder) is returned instead of reading the
    file again, and a read result is stored there. The cache is skipped when a byte limit
    is in force (``max_bytes`` / ``$TRACEVIEW_MAX_BYTES``), so limits are always checked.
    """
    from .cache import cached_read

    p = str(path)
    k = kind if kind is not None else ("xplane" if p.endswith(".pb") else "trace_json")
    if _max_bytes(max_bytes) is not None:
        return _read_file_uncached(p, kind=k, host=host, run=run, max_bytes=max_bytes)
    return cached_read(p, k, host, run, lambda: _read_file_uncached(p, kind=k, host=host, run=run))


def _read_file_uncached(path: str | os.PathLike, *, kind: str | None = None, host: str | None = None, run: str = "",
                        max_bytes: int | None = None) -> TraceData:
    """Read one trace file with the reader its name calls for.

    ``kind`` is "xplane" or "trace_json" (guessed from the name when None). ``max_bytes``
    caps the trace data held in memory: the size of an ``.xplane.pb``, the decompressed text
    of a ``.trace.json[.gz]`` (default: ``$TRACEVIEW_MAX_BYTES``, else the readers' own
    limits, 8 GiB and 4 GiB). Raises :class:`~traceview.errors.TraceUnreadable` (a truncated
    file modified in the last two minutes says the profiler may still be writing it) /
    :class:`~traceview.errors.LimitExceeded`. Op events with negative or overflowing times
    are kept and noted in ``notes``.
    """
    import stat as _stat

    from .diagnose import still_writing_hint, time_faults
    from .errors import TraceUnreadable

    p = str(path)
    limit = _max_bytes(max_bytes)
    if kind is None:
        kind = "xplane" if p.endswith(".pb") else "trace_json"
    try:
        if not _stat.S_ISREG(os.stat(p).st_mode):  # a FIFO or device would block or never end
            raise TraceUnreadable("not a regular file", p)
    except OSError:
        pass  # the reader reports a missing or unreadable file
    try:
        if kind == "xplane":
            from .xplane import read_xplane

            td = read_xplane(p, host=host, run=run, **({} if limit is None else {"max_bytes": limit}))
        else:
            from .tracejson import read_trace_json

            td = read_trace_json(p, host=host, run=run,
                                 **({} if limit is None else {"max_decompressed_bytes": limit}))
    except TraceUnreadable as exc:
        hint = still_writing_hint(p, exc.fault)
        if hint:
            raise TraceUnreadable(f"{exc.fault}; {hint}", exc.path) from None
        raise
    td.notes.extend(time_faults(td.table.events, p))
    return td


def check_regex(rx: str) -> str:
    """Raise :class:`UsageError` unless ``rx`` compiles in polars' regex engine (the one the
    filters run in: Rust ``regex``, which has no look-around or back-references)."""
    try:
        pl.Series([""], dtype=pl.Utf8).str.contains(rx)
    except Exception as exc:  # polars raises ComputeError / other engine errors
        first = str(exc).strip().splitlines()
        detail = next((ln.strip() for ln in first if ln.strip().startswith("error:")), first[-1] if first else "")
        raise UsageError(f"invalid regular expression {rx!r}: {detail}") from None
    return rx


@dataclass(init=False, eq=False)
class Profile:
    """One or more trace files read into one op-event table.

    Attributes: ``table`` (:class:`~traceview.optable.OpTable`: per-event numbers + one row
    per op description), ``ops`` (the wide polars DataFrame, :data:`~traceview.schema.OPS_SCHEMA`,
    one row per HLO op event, times in ps; built from ``table`` on first use),
    ``module_runs`` (program executions), ``devices`` (:class:`~traceview.schema.DeviceInfo`
    per device plane), ``traces`` (the per-file :class:`~traceview.schema.TraceData`),
    ``discovery`` (what was found and why it was chosen, or None when built from files
    directly), ``warnings`` (one line each), ``step_markers``.

    ``ops`` (or ``table``) may be given as a wide frame or as an OpTable;
    ``dataclasses.replace`` works on it.
    """

    table: object
    module_runs: pl.DataFrame
    devices: list[DeviceInfo]
    traces: list[TraceData]
    discovery: object
    warnings: list[str]
    step_markers: pl.DataFrame

    def __init__(self, ops=None, module_runs: pl.DataFrame | None = None, devices: list[DeviceInfo] | None = None,
                 traces: list[TraceData] | None = None, discovery=None, warnings: list[str] | None = None,
                 step_markers: pl.DataFrame | None = None, table=None):
        from .optable import OpTable, as_table

        src = ops if ops is not None else table  # replace(x, ops=...) passes the old table too
        self.table = OpTable.empty() if src is None else as_table(src)
        self.module_runs = module_runs if module_runs is not None else pl.DataFrame(schema=MODULE_RUNS_SCHEMA)
        self.devices = list(devices or [])
        self.traces = list(traces or [])
        self.discovery = discovery
        self.warnings = list(warnings or [])
        self.step_markers = step_markers if step_markers is not None else pl.DataFrame(schema=STEP_MARKERS_SCHEMA)

    @property
    def ops(self) -> pl.DataFrame:
        """The wide op-event frame (:data:`~traceview.schema.OPS_SCHEMA`), built from
        ``table`` on first use and cached (~16 bytes per string column per event)."""
        return self.table.frame()

    # -- construction ---------------------------------------------------------------
    @classmethod
    def from_traces(cls, traces: list[TraceData], discovery=None, warnings: list[str] | None = None) -> "Profile":
        from .optable import OpTable

        table = OpTable.concat([t.table for t in traces])
        runs = (pl.concat([t.module_runs for t in traces], how="vertical") if traces
                else pl.DataFrame(schema=MODULE_RUNS_SCHEMA))
        devices = []
        for t in traces:
            for d in t.devices:
                d.host = d.host or t.host
                devices.append(d)
        warns = list(warnings or [])
        for t in traces:
            warns.extend(t.notes)
        marks = [t.step_markers for t in traces if t.step_markers is not None and t.step_markers.height]
        markers = pl.concat(marks, how="vertical") if marks else pl.DataFrame(schema=STEP_MARKERS_SCHEMA)
        return cls(ops=table, module_runs=runs, devices=devices, traces=traces, discovery=discovery, warnings=warns,
                   step_markers=markers)

    # -- selection ------------------------------------------------------------------
    def filter(self, *, op_regex: str | None = None, device_regex: str | None = None) -> "Profile":
        """A new Profile keeping ops whose name, HLO text or framework op path (the named
        scopes, e.g. a Pallas kernel's name or ``topp_binary_search``) matches ``op_regex`` and
        whose device (plane name, or ``host:plane``) matches ``device_regex``. The syntax is
        polars' (Rust ``regex``: no look-around or back-references). Raises
        :class:`UsageError` on an invalid regex."""
        table, runs, devices = self.table, self.module_runs, self.devices
        for rx in (op_regex, device_regex):
            if rx is not None:
                check_regex(rx)
        if op_regex:
            table = table.filter(pl.col("op_name").str.contains(op_regex) | pl.col("hlo_text").str.contains(op_regex)
                                 | pl.col("framework_op").str.contains(op_regex))
        if device_regex:
            dev_match = (pl.col("device").str.contains(device_regex)
                         | (pl.col("host") + ":" + pl.col("device")).str.contains(device_regex))
            table = table.filter(dev_match)
            runs = runs.filter(dev_match)
            names = pl.Series([d.name for d in devices], dtype=pl.Utf8)
            mask = names.str.contains(device_regex).to_list() if len(names) else []
            devices = [d for d, m in zip(devices, mask) if m]
        return Profile(ops=table, module_runs=runs, devices=devices, traces=self.traces,
                       discovery=self.discovery, warnings=list(self.warnings), step_markers=self.step_markers)

    # -- analyses -------------------------------------------------------------------
    def by_shape(self) -> pl.DataFrame:
        """Shape-keyed populations; see :func:`traceview.aggregate.by_shape`."""
        return aggregate.by_shape(self.table)

    def by_name(self) -> pl.DataFrame:
        """Name-keyed view (mixes shapes); see :func:`traceview.aggregate.by_name`."""
        return aggregate.by_name(self.table)

    def by_program_op(self) -> pl.DataFrame:
        """XProf ``hlo_stats``-style (program_id, op) rows; see :func:`traceview.aggregate.by_program_op`."""
        return aggregate.by_program_op(self.table)

    def populations(self, op_name: str) -> pl.DataFrame:
        """Shape populations behind one op name; see :func:`traceview.aggregate.populations`."""
        return aggregate.populations(self.table, op_name)

    def occurrence_checks(self, *, steps: int | None = None, expect_batch: int | None = None) -> pl.DataFrame:
        """See :func:`traceview.aggregate.occurrence_checks`."""
        return aggregate.occurrence_checks(self.table, self.module_runs, steps=steps, expect_batch=expect_batch)

    def modules(self) -> pl.DataFrame:
        """Program executions per module; see :func:`traceview.aggregate.module_executions`."""
        return aggregate.module_executions(self.module_runs)

    def peaks(self, *, chip: str | None = None, peak_flops: float | None = None,
              peak_bw: float | None = None):
        """Peak FLOP/s and bytes/s for this profile's devices, each with its source; see
        :func:`traceview.roofline.resolve_peaks`."""
        from .roofline import resolve_peaks

        # the devices that ran the ops (a folder of loose traces can hold others)
        used = (set(self.table.collapse().select("host", "device").unique().iter_rows())
                if self.table.height else set())
        devices = [d for d in self.devices if (d.host, d.name) in used] or self.devices
        return resolve_peaks(devices, chip=chip, peak_flops=peak_flops, peak_bw=peak_bw)

    def roofline(self, peaks=None, **peak_overrides) -> pl.DataFrame:
        """Roofline figures per (op, shape) population; see :func:`traceview.roofline.roofline`.
        ``peaks`` defaults to :meth:`peaks` called with ``peak_overrides``."""
        from .roofline import roofline

        return roofline(self.table, peaks if peaks is not None else self.peaks(**peak_overrides))

    def sources(self, by: str = "file", frame: str = "direct") -> pl.DataFrame:
        """Source attribution roll-up ``by`` "file", "line" or "population" (file × shape
        population), on the ``frame`` "direct" or "user" (see :mod:`traceview.sources`)."""
        from . import sources

        if by == "line":
            return sources.by_line(self.table, frame=frame)
        if by == "file":
            return sources.by_file(self.table, frame=frame)
        if by == "population":
            return sources.by_file_and_population(self.table, frame=frame)
        raise UsageError(f"sources(by=...) must be 'file', 'line' or 'population', got {by!r}")

    def kernels(self) -> pl.DataFrame:
        """Custom kernels by their configuration-carrying names; see :func:`traceview.kernelscopes.kernels`."""
        from .kernelscopes import kernels

        return kernels(self.table)

    def steps(self, rules=None, *, module: str | None = None, window: str = "span", markers="auto"):
        """Step anatomy: steps, op families and the coverage line; see :func:`traceview.steps.anatomy`
        (``rules``: ``name=regex`` family rules; ``module``: the program whose executions are
        steps, default the one with most op time; ``window``: "span", "period" or "run").

        ``markers``: "auto" uses the trace's step annotations (``StepTraceAnnotation``) when
        the ops run on the host (CPU traces: markers and ops share the host clock) and no
        ``module`` is named; None ignores them; or pass a frame of your own
        (:data:`~traceview.schema.STEP_MARKERS_SCHEMA`)."""
        from .steps import anatomy

        if isinstance(markers, str):
            if markers != "auto":
                raise UsageError(f"markers must be 'auto', None or a frame, got {markers!r}")
            on_host = self.table.height > 0 and bool(self.table.collapse()["device"].str.starts_with("/host:").all())
            markers = self.step_markers if (module is None and on_host and self.step_markers.height) else None
        return anatomy(self.table, self.module_runs, rules=rules, module=module, window=window, markers=markers)

    def report(self, path: str | os.PathLike, **options) -> Path:
        """Write the offline, self-contained HTML report to ``path``; returns the path."""
        from .render.html import write_report

        return write_report(self, path, **options)

    # -- summary --------------------------------------------------------------------
    @property
    def op_time_ps(self) -> int:
        """Total self time of all HLO ops, ps (summed over devices)."""
        return self.table.total_self_ps()

    @property
    def has_shapes(self) -> bool:
        return any(t.has_shapes for t in self.traces if t.table.height)

    def device_summary(self) -> pl.DataFrame:
        """Per (host, device): host, device, kind, device_type, ops (events), op_time_ps (self),
        peak_flops (FLOP/s), peak_bw (bytes/s), from the trace's plane stats (None when
        absent). Devices are keyed by host because every host of a pod names its planes
        ``/device:TPU:0..n``."""
        rows = []
        per = {}
        if self.table.height:
            per_attr = self.table.collapse()
            for r in per_attr.group_by(["host", "device"]).agg(pl.col("count").sum().alias("n"),
                                                                pl.col("self_ps").sum().alias("t")).iter_rows(named=True):
                per[(r["host"], r["device"])] = (r["n"], r["t"])
        seen = set()
        for d in self.devices:
            key = (d.host, d.name)
            if key in seen:
                continue
            seen.add(key)
            n, t = per.get(key, (0, 0))
            if n == 0:
                continue
            rows.append({"host": d.host, "device": d.name, "kind": d.kind, "device_type": d.device_type, "ops": n,
                         "op_time_ps": t, "peak_flops": d.peak_flops, "peak_bw": d.peak_bw})
        return pl.DataFrame(rows, schema={"host": pl.Utf8, "device": pl.Utf8, "kind": pl.Utf8, "device_type": pl.Utf8,
                                          "ops": pl.Int64, "op_time_ps": pl.Int64, "peak_flops": pl.Float64,
                                          "peak_bw": pl.Float64})

    def __repr__(self) -> str:
        hosts = sorted({t.host for t in self.traces})
        # cheap on any size: no aggregation here (by_shape() on millions of events takes seconds)
        return (f"<traceview.Profile: {self.table.height:,} op events, "
                f"{len(self.devices)} device planes, hosts {', '.join(hosts) or '-'}; "
                f"{len(self.warnings)} warning(s)>")

    def _repr_html_(self) -> str:  # pragma: no cover - exercised by the notebook tests
        from .render.html import profile_summary_html

        return profile_summary_html(self)


def load(path: str | os.PathLike, *, run: str | None = None, all_runs: bool = False,
         require_ops: bool = True, stale_after_s: float | None = 7 * 24 * 3600,
         max_bytes: int | None = None, executor=None, scheduler: str | None = None,
         progress=None, discovery=None) -> Profile:
    """Find and read the traces under ``path`` (a file, run dir, log dir or any folder above).

    Picks the newest run unless ``run`` names one or ``all_runs`` is set, reads one file per
    host (xplane.pb preferred over trace.json.gz) and merges them into one
    :class:`Profile`. Raises :class:`~traceview.errors.NoTraceFound` when nothing is found,
    :class:`~traceview.errors.TraceUnreadable` when every selected file is unreadable (a
    single unreadable host among several becomes a warning), and
    :class:`~traceview.errors.NoOpsFound` when the traces hold no HLO op and
    ``require_ops`` is True. ``max_bytes``: see :func:`read_file` (over it:
    :class:`~traceview.errors.LimitExceeded`, or a warning when other hosts are readable).
    Several files are read in parallel (see :func:`traceview.parallel.read_many`: local
    processes, ``executor`` or the Dask cluster at ``scheduler``); ``progress`` receives a
    :class:`traceview.parallel.Progress` after each file. ``discovery``: a
    :func:`~traceview.discover.discover` result for ``path`` made by the caller (not
    repeated).
    """
    from .cache import cache_root
    from .discover import discover
    from .parallel import read_many, tasks_for

    max_bytes = _max_bytes(max_bytes)
    disc = discovery if discovery is not None else discover(path, run=run, all_runs=all_runs,
                                                             stale_after_s=stale_after_s)
    traces: list[TraceData] = []
    warnings = list(disc.warnings)
    errors: list[TraceviewError] = []
    tasks = tasks_for(disc.files, max_bytes, use_cache=cache_root() is not None)
    for res in read_many(tasks, executor=executor, scheduler=scheduler, progress=progress):
        if isinstance(res, TraceviewError):
            errors.append(res)
            warnings.append(f"skipped unreadable trace {res}")
        else:
            traces.append(res)
    if errors and not traces:
        raise errors[0]
    prof = Profile.from_traces(traces, discovery=disc, warnings=warnings)
    if require_ops and prof.table.height == 0:
        names = ", ".join(str(t.path) for t in traces)
        raise NoOpsFound("the trace has no HLO ops (no XLA Ops line, no hlo_op-annotated kernels); "
                         "was it recorded from a JAX/XLA program?", names)
    return prof
