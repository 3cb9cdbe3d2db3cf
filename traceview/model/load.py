"""The tables of a run: find its files, read them (in parallel, through the cache, decoding
while polars is imported) and merge them into one profile.

Imports neither polars nor the readers until :func:`load` has started decoding, so a fresh
interpreter overlaps its imports with the first file's decoding.
"""

from __future__ import annotations

import functools
import os

#: what :func:`traceview.model.from_tracejson.read_trace_json`'s note on malformed event fields says
FIELD_FAULTS = "complete ('X') events with fields the profiler's exporter never writes"
#: the xplane reader's notes of kernels that cannot be named (traceview.model.from_xplane)
UNNAMED_KERNELS = ("none of them named by an HLO op", "a dangling ref_value", "GPU plane(s) hold no event")

#: the largest single ``.xplane.pb`` decoded on a thread while the caller imports (bytes);
#: larger files are read plane by plane to bound memory
PREFETCH_MAX_BYTES = 256 << 20


def _size(path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def start_prefetch(disc, *, max_bytes: int | None, cache, local: bool, idle=None):
    """A :class:`traceview.read.prefetch.Prefetch` of the run's file, for the common case
    only: one ``.xplane.pb`` under :data:`PREFETCH_MAX_BYTES` read in this process
    (``local``), no byte limit in force (limits are checked first) and no fresh parsed-table
    cache entry for it; else None. ``cache``: a TableCache or None; ``idle``: see
    :func:`traceview.read.prefetch.start`. Never raises."""
    files = disc.files
    if (len(files) != 1 or files[0].kind != "xplane" or max_bytes is not None or not local
            or os.environ.get("TRACEVIEW_MAX_BYTES", "").strip()):  # traceview.model.files.MAX_BYTES_ENV
        return None
    tf = files[0]
    size = _size(tf.path)
    if not 0 < size < PREFETCH_MAX_BYTES:
        return None
    if cache is not None and size >= cache.min_file_bytes and cache.has_fresh(
            tf.path, [str(tf.path), "xplane", tf.host, tf.run]):  # traceview.model.files.cache_args
        return None
    from traceview.model.annotated_plane import prefetch_plan  # numpy and the decoders first: the thread then
    from traceview.read import prefetch  # decodes (mostly without the GIL) while this one imports polars

    return prefetch.start(tf.path, prefetch_plan, idle)


def load(path: str | os.PathLike, *, run: str | None = None, all_runs: bool = False, require_ops: bool = True,
         stale_after_s: float | None = 7 * 24 * 3600, max_bytes: int | None = None, cache=None, workers: int = 0,
         executor=None, scheduler: str | None = None, progress=None, discovery=None, prefetch=True,
         factory=None, expand_kernels: bool = False, group_hosts: bool = True, idle=None):
    """Find and read the traces under ``path`` (a file, run dir, log dir or any folder above, or a
    ``gs://``, ``s3://`` or other fsspec URL: :mod:`traceview.read.remote`).

    Picks the newest run unless ``run`` names one or ``all_runs`` is set
    (:func:`traceview.read.discover.discover`; ``discovery``: its result for ``path`` made by
    the caller, not repeated; ``group_hosts``: the run folders of a capture written host by
    host are read as one run, see ``discover``), reads one file per host (xplane.pb preferred over
    trace.json.gz, which is read instead when the xplane is unreadable: :func:`json_fallback`) and merges them into one profile, an instance of ``factory`` (default
    :class:`~traceview.model.profiledata.ProfileData`; called as its ``from_traces``).

    ``max_bytes``: see :func:`traceview.model.files.read_file`. ``cache``: a
    :class:`~traceview.read.cache.TableCache`, False for none, None for the environment's
    (:meth:`TableCache.default`). Several files are read by
    :func:`traceview.read.batch.read_many`: in this process, in up to ``workers`` local
    processes, on ``executor`` or on the Dask cluster at ``scheduler``; ``progress`` gets a
    :class:`traceview.read.batch.Progress` after each file. ``prefetch``: True to decode a
    single xplane's planes on a thread while polars is imported (:func:`start_prefetch`),
    False not to, or a :class:`traceview.read.prefetch.Prefetch` the caller started; ``idle``:
    called once, with no arguments, while this thread waits for that decoding to finish (a
    caller's imports, say; its exceptions are ignored, :meth:`~traceview.read.prefetch.Prefetch.take`).
    ``expand_kernels``: keep the ops inside each interpreted Pallas kernel invocation (CPU
    traces) as they are, instead of one row per invocation
    (:func:`traceview.model.interpreted.collapse_kernels`).

    Raises :class:`~traceview.errors.NoTraceFound` when nothing is found,
    :class:`~traceview.errors.TraceUnreadable` when every selected file is unreadable (a
    single unreadable host among several becomes a warning),
    :class:`~traceview.errors.LimitExceeded` over ``max_bytes`` (a warning when other hosts
    are readable), and :class:`~traceview.errors.NoOpsFound` when the traces hold no HLO op
    and ``require_ops`` is True, :class:`~traceview.errors.UsageError` for a ``max_bytes`` or
    ``workers`` that is not a positive whole number (0 workers: this process).
    """
    from traceview.errors import UsageError
    from traceview.read.cache import TableCache
    from traceview.read.discover import discover

    for v, what, least in ((max_bytes, "max_bytes", 1), (workers, "workers", 0)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < least):
            raise UsageError(f"{what} must be a whole number {'>= 0' if least == 0 else '> 0'}, got {v!r}")

    disc = discovery if discovery is not None else discover(path, run=run, all_runs=all_runs,
                                                             stale_after_s=stale_after_s, group_hosts=group_hosts,
                                                             run_hint="pass run= or all_runs=True to load()")
    store = TableCache.default() if cache is None else (cache or None)
    if prefetch is True:
        pre = start_prefetch(disc, max_bytes=max_bytes, cache=store, local=executor is None and not scheduler,
                             idle=idle)
    else:
        pre = prefetch or None

    from traceview.errors import NoOpsFound  # noqa: E402 - polars from here on
    from traceview.model.files import max_bytes_default, read_task
    from traceview.model.profiledata import ProfileData
    from traceview.read.batch import read_many, tasks_for

    limit = max_bytes_default(max_bytes)
    warnings = list(disc.warnings)
    tasks = tasks_for(disc.files, limit, cache=store)
    # a prefetch is only started for a single file read here (read_many reads one file in
    # this process), so the reader can take it over
    read = read_task if pre is None or len(tasks) != 1 else functools.partial(read_task, prefetch=pre)
    results = read_many(tasks, read, executor=executor, scheduler=scheduler, workers=workers, progress=progress)
    if type(disc).__module__ == "traceview.read.remote":  # a URL's local copies are named by their URL
        from traceview.read.remote import relabel

        results = relabel(results, disc)
    else:
        disc = json_fallback(disc, tasks, results, warnings, limit, store)
        warnings.extend(copy_warnings(disc.files))
    # several runs: each its own timeline (module doc of qualify_host); the run folders of one
    # capture written host by host (Discovery.fleet) are one
    timeline = getattr(disc, "timeline", lambda r: r)
    if len({timeline(t.run) for t in tasks}) > 1:
        results = [r if isinstance(r, Exception) else qualify_host(r, timeline(t.run)) for r, t in zip(results, tasks)]
    traces, errors = split_results(results, warnings)
    if errors and not traces:
        raise _all_faults(errors, disc)
    prof = (factory or ProfileData).from_traces(traces, discovery=disc, warnings=warnings,
                                                expand_kernels=expand_kernels)
    if require_ops and prof.table.height == 0:
        names = ", ".join(str(t.path) for t in traces)
        # events left out as malformed, or kernels that cannot be named, may be why: said in the one line
        malformed = [n.split(": ", 1)[1] if n.startswith(f"{t.path}: ") else n for t in traces for n in t.notes
                     if FIELD_FAULTS in n or any(u in n for u in UNNAMED_KERNELS)]
        hint = [] if any(FIELD_FAULTS in n for n in malformed) else ["was it recorded from a JAX/XLA program?"]
        no_ops = NoOpsFound(("the trace has no HLO ops: " if malformed else
                             "the trace has no HLO ops (no XLA Ops line, no hlo_op-annotated kernels); ")
                            + "; ".join(malformed + hint), names)
        raise _all_faults(errors + [no_ops], disc)
    return prof


#: what a Chrome-trace JSON lacks beside its host's .xplane.pb
JSON_LACKS = ("no program ids and no FLOPs or bytes, shapes only from TPU HLO text (none on CPU and GPU), capped "
              "at 1M-5M events")


def json_fallback(disc, tasks: list, results: list, warnings: list, limit, store, read=None):
    """``disc``, or a copy naming the files read instead: each ``.xplane.pb`` that is
    unreadable (:class:`~traceview.errors.TraceUnreadable`, not a limit) and has a Chrome-trace
    JSON of the same run and host beside it is replaced in ``results`` by that JSON, read in
    this process by ``read`` (a task's reader, as :func:`traceview.read.batch.read_many` takes;
    default :func:`~traceview.model.files.read_task`), with a warning naming both files, the
    fault and what the JSON lacks. When the JSON cannot be read either, the xplane's error
    names both faults."""
    import dataclasses

    from traceview.errors import TraceUnreadable
    from traceview.model.files import read_task
    from traceview.read.batch import Failed, tasks_for
    from traceview.read.discover import json_siblings

    files = list(disc.files)
    reasons = list(disc.reasons)
    for i, (task, res) in enumerate(zip(tasks, results)):
        err = res.rebuild() if isinstance(res, Failed) else res
        if task.kind != "xplane" or type(err) is not TraceUnreadable or i >= len(files):
            continue
        tf = files[i]
        sib = json_siblings(disc, tf)
        if not sib:
            continue
        alt = sib[0]
        got = (read or read_task)(tasks_for([alt], limit, cache=store)[0])
        got = got.rebuild() if isinstance(got, Failed) else got
        if isinstance(got, Exception):
            results[i] = type(err)(f"{err.fault}; the Chrome-trace JSON beside it cannot be read either: {got}",
                                   err.path)
            continue
        results[i] = got
        files[i] = alt
        said = f"host {tf.host}: {tf.path.name} is unreadable: reading {alt.path.name} instead"
        was = f"host {tf.host}: reading {tf.path.name} "  # the line that chose the xplane: replaced, not kept beside
        at = next((k for k, ln in enumerate(reasons) if ln.startswith(was)), None)
        if at is None:
            reasons.append(said)
        else:
            reasons[at] = said
        warnings.append(f"{err}: read {alt.path} instead, the Chrome-trace JSON of the same host, which has less "
                        f"({JSON_LACKS})")
    if files == list(disc.files):
        return disc
    return dataclasses.replace(disc, files=files, reasons=reasons)


def copy_warnings(files) -> list[str]:
    """A warning per group of ``files`` holding the same bytes under several host names."""
    from traceview.read.discover import same_bytes

    out = []
    for group in same_bytes(files):
        names = ", ".join(str(f.path) for f in group)
        out.append(f"{names}: the same {group[0].size:,} bytes under {len(group)} names (a copy, or one file linked "
                   f"twice?): read as {len(group)} hosts, so every op of that trace is counted {len(group)} times")
    return out


def qualify_host(td, run: str):
    """``td`` (a :class:`~traceview.model.schema.TraceData`) with its host named ``RUN/HOST``
    in every frame (op descriptions, module runs, step markers, devices). Runs read together
    (``all_runs``) are separate timelines: the same host and device names in two runs are not
    one device, and their clocks are not one clock, so steps, overlap and stragglers must never
    pool them."""
    import polars as pl

    if not run:
        return td
    host = f"{run}/{td.host}" if td.host else run
    q = pl.lit(run + "/") + pl.col("host").fill_null("")
    t = td.table
    td.table = type(t)(t.events, t.attrs.with_columns(q.alias("host")))
    td.runs = td.runs.with_keys(td.runs.keys.with_columns(q.alias("host")))
    if td.step_markers is not None and "host" in td.step_markers.columns:
        td.step_markers = td.step_markers.with_columns(q.alias("host"))
    if td.memory is not None and td.memory.height:
        td.memory = td.memory.with_columns(q.alias("host"))
    if td.kernel_lines is not None and td.kernel_lines.height:
        td.kernel_lines = td.kernel_lines.with_columns(q.alias("host"))
    if td.hlo_protos is not None and td.hlo_protos.height:
        td.hlo_protos = td.hlo_protos.with_columns(q.alias("host"))
    for d in td.devices:
        d.host = f"{run}/{d.host}" if d.host else host
    td.host = host
    return td


def split_results(results, warnings: list) -> tuple[list, list]:
    """(what was read, the TraceviewErrors) of :func:`~traceview.read.batch.read_many`'s
    results, in order; a line per error appended to ``warnings``."""
    from traceview.errors import TraceviewError

    ok, errors = [], []
    for res in results:
        if isinstance(res, TraceviewError):
            errors.append(res)
            warnings.append(f"skipped unreadable trace {res}")
        else:
            ok.append(res)
    return ok, errors


def _all_faults(errors: list, disc):
    """The one error to raise when no file can be analysed: the error itself when there is
    one, else one naming every file's fault, of the first one's class (its exit code)."""
    if len(errors) == 1:
        return errors[0]
    parts = "; ".join(str(e) for e in errors)
    return type(errors[0])(f"none of the {len(errors)} trace files can be analysed: {parts}", disc.root)
