"""JSON of a report: ``traceview analyze --format json``, ``diff --format json``,
``verify --format json`` and ``query --format json``. Times in ps; frames become lists of row
objects, one row per line.

Bounded: each table keeps ``top`` rows when given, else :data:`DEFAULT_ROWS` (the terminal's
default) unless ``all_rows``; ``"rows"`` gives, for every table, the rows shown and in all
(``{JSON path: {"shown", "total"}}``). Frames are encoded by polars (Rust) and the rest by
orjson: no Python step per value.

Ids are decimal strings: every UInt64 column (XLA's 64-bit program ids) and every integer
column named ``id`` or ``*_id`` (``program_id``, ``channel_id``, ``step_id``) is written as
``"12190760917235803885"`` in every row, whatever its size, so a reader that holds numbers as
doubles (JavaScript, jq) keeps it exact and a column never changes type between traces; null
stays null. Every other integer (ps, bytes, counts) is a JSON number.

Always valid JSON (RFC 8259): a figure that is not finite (a ridge point or efficiency over
an extreme peak) is written as null and listed, with its value, under ``"non_finite"``
({JSON path: "inf" / "-inf" / "nan"}); strings are valid Unicode (a path's undecodable
bytes written as ``\xff``).
"""

from __future__ import annotations

import math

import orjson
import polars as pl

from traceview.model.naming import printable
from traceview.render.provenance import provenance_lines, run_names

#: Rows of each table the JSON keeps when neither ``top`` nor ``all_rows`` is given: the
#: terminal's (``traceview.cli.analyze.TABLE_TOP``).
DEFAULT_ROWS = 25

#: dtypes polars writes as JSON the way the row objects hold them; others are cast to text
_NATIVE = (pl.Boolean, pl.String, pl.Categorical, pl.Enum, pl.Null, pl.Date, pl.Datetime, pl.List, pl.Array,
           pl.Struct)

_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


class Rows:
    """The row limit of one JSON document: ``top`` rows of each table when given, every row
    with ``all_rows`` (or a top of 2**62 and more), else :data:`DEFAULT_ROWS`; ``limit`` is
    that cap (None: every row), ``top`` the ``top`` given below that; ``counts`` collects each table's
    {"shown", "total"} under its JSON path."""

    def __init__(self, top: int | None = None, all_rows: bool = False):
        # a top at the command line's cap (1 << 62, ``cli.args.MAX_COUNT``) means every row
        self.top = None if top is None or top >= 1 << 62 else top
        self.limit = None if all_rows or (top or 0) >= 1 << 62 else (top or DEFAULT_ROWS)
        self.counts: dict = {}

    def __call__(self, path: str, df: pl.DataFrame | None) -> pl.DataFrame | None:
        """``df``'s first rows (None stays None), counted under ``path``."""
        if df is None:
            return None
        shown = df if self.limit is None or df.height <= self.limit else df.head(self.limit)
        self.counts[path] = {"shown": shown.height, "total": df.height}
        return shown


def _clean(obj, where: str, bad: dict):
    """``obj`` with non-finite floats as None (recorded in ``bad`` under their path), strings
    made printable, containers copied and frames as :class:`orjson.Fragment` (see
    :func:`frame_json`). For the small Python parts of a document: frames never pass here
    value by value."""
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        bad[where] = "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
        return None
    if isinstance(obj, str):
        return printable(obj)
    if isinstance(obj, dict):
        return {printable(str(k)): _clean(v, f"{where}.{k}", bad) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v, f"{where}[{i}]", bad) for i, v in enumerate(obj)]
    if isinstance(obj, pl.DataFrame):
        return orjson.Fragment(frame_json(obj, where, bad))
    return obj


def _non_finite(df: pl.DataFrame, where: str, bad: dict) -> None:
    """Record in ``bad`` the path of every NaN / ±inf of ``df``'s float columns and of its
    list-of-float columns (found by polars, column by column)."""
    for c, t in df.schema.items():
        if t.is_float():
            v = pl.col("v")
            odd = df.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("i"), pl.col(c).alias("v"))
            for i, v in odd.filter(v.is_nan() | v.is_infinite()).iter_rows():
                bad[f"{where}[{i}].{c}"] = "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        elif isinstance(t, (pl.List, pl.Array)) and t.inner is not None and t.inner.is_float():
            lists = df.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("i"), pl.col(c).alias("v"))
            flat = lists.explode("v").with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over("i").alias("j"))
            v = pl.col("v")
            for i, v_, j in flat.filter(v.is_nan() | v.is_infinite()).select("i", "v", "j").iter_rows():
                bad[f"{where}[{i}].{c}[{j}]"] = "nan" if math.isnan(v_) else ("inf" if v_ > 0 else "-inf")


def is_id(name: str, dtype: pl.DataType) -> bool:
    """Whether a column (or a list column's items) of ``dtype`` holds ids the JSON writes as
    decimal strings: UInt64, or an integer column named ``id`` / ``*_id``."""
    if isinstance(dtype, (pl.List, pl.Array)) and dtype.inner is not None:
        dtype = dtype.inner
    return dtype == pl.UInt64 or (dtype.is_integer() and (name == "id" or name.endswith("_id")))


def frame_json(df: pl.DataFrame, where: str = "$", bad: dict | None = None) -> bytes:
    """``df`` as a JSON array of row objects, one row per line, written by polars: non-finite
    floats as null (recorded in ``bad`` under ``where[i].column``), id columns (:func:`is_id`)
    as decimal strings, dates and times as text (``2026-01-01 00:00:00``), columns of other
    types (objects, durations, decimals) cast to text. Casts are per column, in polars."""
    if bad is not None:
        _non_finite(df, where, bad)
    ids = [pl.col(c).cast(pl.List(pl.String) if isinstance(t, (pl.List, pl.Array)) else pl.String)
           for c, t in df.schema.items() if is_id(c, t)]
    if ids:
        df = df.with_columns(ids)
    odd = [c for c, t in df.schema.items() if not (t.is_numeric() or isinstance(t, _NATIVE) or t in _NATIVE)]
    if odd:
        df = df.with_columns(pl.col(c).map_elements(lambda v: printable(str(v)), return_dtype=pl.String)
                             if df.schema[c] == pl.Object else pl.col(c).cast(pl.String) for c in odd)
    if df.height == 0:
        return b"[]"
    lines = df.write_ndjson().encode("utf-8").rstrip(b"\n")
    return b"[\n" + lines.replace(b"\n", b",\n") + b"\n]"


def dumps_bytes(payload: dict) -> bytes:
    """``payload`` (plain data and polars frames) as indented, valid JSON with a final newline
    (see the module docstring)."""
    bad: dict = {}
    clean = _clean(payload, "$", bad)
    if bad:
        clean["non_finite"] = bad
    return orjson.dumps(clean, default=lambda v: printable(str(v)), option=_OPTIONS) + b"\n"


def dumps(payload: dict) -> str:
    """:func:`dumps_bytes` as text."""
    return dumps_bytes(payload).decode("utf-8")


def _communication(comm, cut: Rows) -> dict | None:
    """The ``communication`` object (the keys of ``Communication.to_dict``) with its two
    tables cut."""
    if comm is None:
        return None
    return {"collectives": cut("communication.collectives", comm.collectives),
            "host_transfers": cut("communication.host_transfers", comm.host_transfers), **comm.summary()}


def _overlap(ov, cut: Rows) -> dict | None:
    """JSON object of an Overlap: summary, populations, steps, notes. Times in ps."""
    if ov is None:
        return None
    return {"summary": dict(ov.summary), "populations": cut("overlap.populations", ov.populations),
            "steps": cut("overlap.steps", ov.steps), "notes": list(ov.notes)}


def _stragglers(st, cut: Rows) -> dict | None:
    """JSON object of a Stragglers: summary, steps, devices, collectives, clock_offsets (ps per
    host), notes."""
    if st is None:
        return None
    return {"summary": dict(st.summary), "steps": cut("stragglers.steps", st.steps),
            "devices": cut("stragglers.devices", st.devices),
            "collectives": cut("stragglers.collectives", st.collectives),
            "clock_offsets": dict(st.clock_offsets), "notes": list(st.notes)}


def _phases(ph, cut: Rows) -> dict | None:
    """JSON object of a Phases: labels (one line), flops_source, summary, families, steps,
    programs, notes."""
    if ph is None:
        return None
    return {"labels": ph.label_line(), "flops_source": ph.flops_source, "summary": cut("phases.summary", ph.summary),
            "families": cut("phases.families", ph.families), "steps": cut("phases.steps", ph.steps),
            "programs": cut("phases.programs", ph.programs), "notes": list(ph.notes)}


def _memory(mem, cut: Rows) -> dict | None:
    """JSON object of a MemoryReport: allocators (one row each), alive_at_peak, steps, notes
    (the allocators' own notes prefixed with their name)."""
    if mem is None:
        return None
    notes = list(mem.notes) + [f"{a.host} {a.allocator}: {n}" for a in mem.allocators for n in a.notes]
    return {"allocators": cut("memory.allocators", mem.summary), "alive_at_peak": cut("memory.alive_at_peak", mem.alive),
            "steps": cut("memory.steps", mem.steps), "notes": notes}


def _steps(anat, cut: Rows, export_command: str | None = None) -> dict | None:
    if anat is None:
        return None
    records = cut("steps.records", anat.steps)
    return {
        "method": anat.method, "module": anat.module, "window": anat.window,
        "coverage": anat.coverage.line(), "coverage_ratio": anat.coverage.ratio,
        "families": cut("steps.families", anat.families), "notes": list(anat.notes),
        "extent": anat.extent, "distribution": anat.distribution, "summary": anat.summary(),
        "coverage_all": None if anat.coverage_all is None else anat.coverage_all.line(),
        "records": records, "records_rows": dict(cut.counts["steps.records"]),
        "export_command": export_command}


def analysis_payload(rep, *, top: int | None, version: str, all_rows: bool = False) -> dict:
    """The JSON object of a :class:`~traceview.analysis.report.Report` (tables as polars
    frames, cut by :class:`Rows`; :func:`dumps` encodes it): provenance (lines, files, runs),
    warnings, has_shapes, devices, ops (the op table), peaks, roofline, kernels, sources, steps,
    occurrence checks, communication, findings and findings_not_evaluated ({id: reason}; both
    None with --no-findings), overlap, stragglers, family_roofline (per family and step) and
    its summary. ``rows``: every table's rows shown
    and in all, by JSON path."""
    peaks, anat = rep.peaks, rep.steps
    cut = Rows(top, all_rows)
    out = {
        "traceview": version,
        "top": cut.top,  # the --top given (None: not given, or one that means every row)
        "rows": cut.counts,  # filled as the tables are cut below
        "provenance": {"lines": provenance_lines(rep.discovery, rep.files), "files": rep.files,
                       "runs": run_names(rep.discovery)},
        "warnings": list(rep.warnings),
        "has_shapes": rep.has_shapes,
        "events_note": getattr(rep, "events_note", None),  # why fewer op events than read, as the table says
    }
    out["devices"] = cut("devices", rep.devices)
    out["ops"] = cut("ops", rep.table)
    out["peaks"] = {"peak_flops": peaks.peak_flops, "peak_bw": peaks.peak_bw, "ridge": peaks.ridge,
                    "flops_source": peaks.flops_source, "bw_source": peaks.bw_source,
                    "trace_flops": peaks.trace_flops, "trace_bw": peaks.trace_bw, "table_flops": peaks.table_flops,
                    "table_bw": peaks.table_bw, "chip": peaks.chip, "chip_identified_by": peaks.chip_how,
                    "notes": list(peaks.notes)}
    out["roofline"] = cut("roofline", rep.roofline)
    out["roofline_layers"] = cut("roofline_layers", getattr(rep, "roofline_layers", None))
    out["kernels"] = cut("kernels", rep.kernels)
    out["sources"] = cut("sources", rep.sources)
    out["steps"] = _steps(anat, cut, getattr(rep, "export_command", None))
    out["occurrence_checks"] = cut("occurrence_checks", rep.checks)
    out["occurrence_checks_summary"] = rep.checks_summary
    out["communication"] = _communication(getattr(rep, "communication", None), cut)
    out["split_names"] = cut("split_names", rep.split)
    out["program_splits"] = getattr(rep, "program_splits", None)
    out["population_regimes"] = cut("population_regimes", getattr(rep, "population_regimes", None))
    findings = getattr(rep, "findings", None)
    out["findings"] = None if findings is None else [f.to_dict() for f in findings]
    out["findings_not_evaluated"] = None if findings is None else dict(getattr(rep, "findings_not_evaluated", None) or {})
    out["overlap"] = _overlap(getattr(rep, "overlap", None), cut)
    out["stragglers"] = _stragglers(getattr(rep, "stragglers", None), cut)
    out["family_roofline"] = cut("family_roofline", getattr(rep, "family_roofline", None))
    out["family_roofline_summary"] = getattr(rep, "family_roofline_summary", None)
    out["memory"] = _memory(getattr(rep, "memory", None), cut)
    out["phases"] = _phases(getattr(rep, "phases", None), cut)
    h = getattr(rep, "hlo", None)
    out["hlo"] = None if h is None else {
        "source": h.source, "patterns": cut("hlo.patterns", h.patterns), "detections": cut("hlo.detections", h.detections),
        "flop_provenance": cut("hlo.flop_provenance", h.flop_provenance), "notes": list(h.notes)}
    ki = getattr(rep, "kernel_inside", None)
    out["kernel_inside"] = None if ki is None else {
        "summary": ki.summary, "invocations": cut("kernel_inside.invocations", ki.invocations),
        "stages": cut("kernel_inside.stages", ki.stages), "counters": cut("kernel_inside.counters", ki.counters),
        "notes": list(ki.notes)}
    return out


def analysis_json(rep, *, top: int | None, version: str, all_rows: bool = False) -> bytes:
    """:func:`analysis_payload` as indented JSON (UTF-8) with a final newline."""
    return dumps_bytes(analysis_payload(rep, top=top, version=version, all_rows=all_rows))


def diff_payload(d, top: int | None = None, all_rows: bool = False, warnings=()) -> dict:
    """The JSON object of a :class:`~traceview.analysis.compare.diff.DiffReport`: labels, each
    side's hardware, summary lines, op time and traced events per side, steps, population counts by status, kernels,
    families, modules, populations (by |delta|; HLO texts left out), overhead factor, notes,
    ``warnings`` (the sides' reading warnings, each naming its file), collectives, findings and
    noise; every table cut by :class:`Rows` (``top``: the rows each
    was cut to, ``top`` or :data:`DEFAULT_ROWS`, None with ``all_rows``; ``rows``: shown and
    total of each)."""
    from traceview.render.diff_summary import summary_lines

    cut = Rows(top, all_rows)
    pops = cut("populations", d.populations.drop("hlo_text_base", "hlo_text_treatment", strict=False))
    return {
        "top": cut.limit,  # the rows each table was cut to: --top, else the default (None: every row)
        "rows": cut.counts,
        "base": d.base_label, "treatment": d.treatment_label, "units": "ps",
        "hardware": {"base": d.hardware[0], "treatment": d.hardware[1]},
        "summary": summary_lines(d),
        "op_time_ps": {"base": d.op_time_ps_base, "treatment": d.op_time_ps_treatment},
        "events": {"base": d.events_base, "treatment": d.events_treatment},
        "steps": d.steps.to_dict() if d.steps else None,
        "counts": d.counts(),
        "kernels": cut("kernels", d.kernels), "families": cut("families", d.families),
        "modules": cut("modules", d.modules),
        "populations": pops,
        "overhead_factor": d.overhead_factor, "notes": list(d.notes), "warnings": list(warnings),
        "collectives": cut("collectives", getattr(d, "collectives", None)),
        "findings": [f.to_dict() for f in getattr(d, "findings", None) or []],
        "noise": _diff_noise(d),
    }


def _diff_noise(d) -> dict | None:
    """The diff's noise summary: level, the counts of :meth:`DiffReport.noise_counts` (matched
    populations compared and flagged, unknown, significant vanished and appeared ones, every
    significant one) and the run-to-run band."""
    level = getattr(d, "noise_level", None)
    c = d.noise_counts() if level is not None else None
    if c is None:
        return None
    rn = getattr(d, "run_noise", None)
    return {"level": level, **c, "run_to_run": None if rn is None else rn.to_dict()}


def diff_json(d, top: int | None = None, all_rows: bool = False, warnings=()) -> str:
    """:func:`diff_payload` as indented JSON text with a final newline."""
    return dumps(diff_payload(d, top, all_rows, warnings))


def verify_json(report, warnings=()) -> str:
    """A :class:`~traceview.analysis.compare.verify.VerifyReport` as indented JSON text (ok, the
    passed / failed / unknown counts, per check its text, status, ok and message, and
    ``warnings``: the profiles' reading warnings, each naming its file) with a final newline."""
    return dumps({**report.to_dict(), "warnings": list(warnings)})


def query_payload(df, *, query: str | None, top: int | None, version: str, total: int | None = None) -> dict:
    """The JSON object of a SQL result (``traceview query --format json``): the query,
    columns ({name: polars dtype}), rows (shown and total: ``top`` cuts the result, else every
    row; ``total`` when ``df`` holds only the result's first rows) and the result rows as objects."""
    shown = df.head(top) if top else df
    return {"traceview": version, "query": query, "top": top,
            "rows": {"result": {"shown": shown.height, "total": df.height if total is None else total}},
            "columns": {c: str(t) for c, t in df.schema.items()}, "result": shown}


def tables_payload(described: list, *, version: str) -> dict:
    """The JSON object of ``traceview query --tables``: per table its name, doc, rows and
    columns (name, dtype, doc), from :func:`traceview.analysis.sql.describe`."""
    return {"traceview": version, "tables": described}
