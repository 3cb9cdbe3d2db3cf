"""JSON of a report: ``traceview analyze --format json``, ``diff --format json`` and
``verify --format json``. Times in ps; frames become lists of row objects.

Always valid JSON (RFC 8259): a figure that is not finite (a ridge point or efficiency over
an extreme peak) is written as null and listed, with its value, under ``"non_finite"``
({JSON path: "inf" / "-inf" / "nan"}); strings are valid Unicode (a path's undecodable
bytes written as ``\xff``).
"""

from __future__ import annotations

import json
import math

from traceview.model.naming import printable
from traceview.render.overlap_view import overlap_payload, stragglers_payload
from traceview.render.provenance import provenance_lines, run_names


def _clean(obj, where: str, bad: dict):
    """``obj`` with non-finite floats as None (recorded in ``bad`` under their path) and
    strings made printable; containers copied."""
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
    return obj


def dumps(payload: dict) -> str:
    """``payload`` as indented, valid JSON with a final newline (see the module docstring)."""
    bad: dict = {}
    clean = _clean(payload, "$", bad)
    if bad:
        clean["non_finite"] = bad
    return json.dumps(clean, indent=2, default=lambda v: printable(str(v)), allow_nan=False) + "\n"


def analysis_payload(rep, *, top: int | None, version: str) -> dict:
    """The JSON object of a :class:`~traceview.analysis.report.Report`: provenance (lines,
    files, runs), warnings, has_shapes, devices, ops (the op table), peaks, roofline,
    kernels, sources, steps, occurrence checks, communication, findings (None with --no-findings),
    family_roofline (per family and step) and its summary. ``top``: rows of the op, roofline and source
    tables (all when None); ``rows`` gives each cut table's rows shown and in all."""
    peaks, roof, checks, anat = rep.peaks, rep.roofline, rep.checks, rep.steps
    head = (lambda df: df.head(top)) if top else (lambda df: df)
    return {
        "traceview": version,
        "top": top,
        "rows": {name: {"shown": min(df.height, top) if top else df.height, "total": df.height}
                 for name, df in (("ops", rep.table), ("roofline", roof), ("sources", rep.sources))},
        "provenance": {"lines": provenance_lines(rep.discovery, rep.files), "files": rep.files,
                       "runs": run_names(rep.discovery)},
        "warnings": list(rep.warnings),
        "has_shapes": rep.has_shapes,
        "devices": rep.devices.to_dicts(),
        "ops": head(rep.table).to_dicts(),
        "peaks": {"peak_flops": peaks.peak_flops, "peak_bw": peaks.peak_bw, "ridge": peaks.ridge,
                  "flops_source": peaks.flops_source, "bw_source": peaks.bw_source,
                  "trace_flops": peaks.trace_flops, "trace_bw": peaks.trace_bw, "table_flops": peaks.table_flops,
                  "table_bw": peaks.table_bw, "chip": peaks.chip, "chip_identified_by": peaks.chip_how,
                  "notes": list(peaks.notes)},
        "roofline": head(roof).to_dicts(),
        "kernels": rep.kernels.to_dicts(),
        "sources": head(rep.sources).to_dicts(),
        "steps": None if anat is None else {
            "method": anat.method, "module": anat.module, "window": anat.window,
            "coverage": anat.coverage.line(), "coverage_ratio": anat.coverage.ratio,
            "families": anat.families.to_dicts(), "notes": list(anat.notes),
            "extent": anat.extent, "distribution": anat.distribution, "summary": anat.summary(),
            "coverage_all": None if anat.coverage_all is None else anat.coverage_all.line(),
            "records": head(anat.steps).to_dicts(),
            "records_rows": {"shown": min(anat.steps.height, top) if top else anat.steps.height,
                             "total": anat.steps.height}},
        "occurrence_checks": checks.to_dicts() if checks is not None else None,
        "occurrence_checks_summary": rep.checks_summary,
        "communication": None if getattr(rep, "communication", None) is None else rep.communication.to_dict(),
        "program_splits": getattr(rep, "program_splits", None),
        "population_regimes": (None if getattr(rep, "population_regimes", None) is None
                               else rep.population_regimes.to_dicts()),
        "findings": None if getattr(rep, "findings", None) is None else [f.to_dict() for f in rep.findings],
        "overlap": overlap_payload(getattr(rep, "overlap", None), top),
        "stragglers": stragglers_payload(getattr(rep, "stragglers", None), top),
        "family_roofline": None if getattr(rep, "family_roofline", None) is None else rep.family_roofline.to_dicts(),
        "family_roofline_summary": getattr(rep, "family_roofline_summary", None),
    }


def analysis_json(rep, *, top: int | None, version: str) -> str:
    """:func:`analysis_payload` as indented JSON text with a final newline."""
    return dumps(analysis_payload(rep, top=top, version=version))


def diff_payload(d, top: int | None = None) -> dict:
    """The JSON object of a :class:`~traceview.analysis.diff.DiffReport`: labels, summary
    lines, op time and traced events per side, steps, population counts by status, kernels,
    families, modules, populations (``top`` rows by |delta| when given; HLO texts left out),
    overhead factor, notes and findings."""
    from traceview.render.diff_summary import summary_lines

    pops = d.populations if top is None else d.populations.head(top)
    return {
        "top": top, "rows": {"populations": {"shown": pops.height, "total": d.populations.height}},
        "base": d.base_label, "treatment": d.treatment_label, "units": "ps",
        "summary": summary_lines(d),
        "op_time_ps": {"base": d.op_time_ps_base, "treatment": d.op_time_ps_treatment},
        "events": {"base": d.events_base, "treatment": d.events_treatment},
        "steps": d.steps.to_dict() if d.steps else None,
        "counts": d.counts(),
        "kernels": d.kernels.to_dicts(), "families": d.families.to_dicts(),
        "modules": d.modules.to_dicts(),
        "populations": pops.drop("hlo_text_base", "hlo_text_treatment", strict=False).to_dicts(),
        "overhead_factor": d.overhead_factor, "notes": list(d.notes),
        "collectives": None if getattr(d, "collectives", None) is None else d.collectives.to_dicts(),
        "findings": [f.to_dict() for f in getattr(d, "findings", None) or []],
        "noise": _diff_noise(d),
    }


def _diff_noise(d) -> dict | None:
    """The diff's noise summary: level, populations compared (matched with an interval) and
    flagged (outside the noise)."""
    level = getattr(d, "noise_level", None)
    if level is None or "ratio_lo" not in d.populations.columns:
        return None
    m = d.populations.filter(d.populations["ratio_lo"].is_not_null())
    rn = getattr(d, "run_noise", None)
    return {"level": level, "compared": m.height, "significant": int(m["significant"].sum() or 0),
            "run_to_run": None if rn is None else rn.to_dict()}


def diff_json(d, top: int | None = None) -> str:
    """:func:`diff_payload` as indented JSON text with a final newline."""
    return dumps(diff_payload(d, top))


def verify_json(report) -> str:
    """A :class:`~traceview.analysis.verify.VerifyReport` as indented JSON text (ok, and per
    check its text, ok and message) with a final newline."""
    return dumps(report.to_dict())


def query_payload(df, *, query: str | None, top: int | None, version: str) -> dict:
    """The JSON object of a SQL result (``traceview query --format json``): the query,
    columns ({name: polars dtype}), rows (shown and total: ``top`` cuts the result) and the
    result rows as objects."""
    shown = df.head(top) if top else df
    return {"traceview": version, "query": query, "top": top,
            "rows": {"result": {"shown": shown.height, "total": df.height}},
            "columns": {c: str(t) for c, t in df.schema.items()}, "result": shown.to_dicts()}


def tables_payload(described: list, *, version: str) -> dict:
    """The JSON object of ``traceview query --tables``: per table its name, doc, rows and
    columns (name, dtype, doc), from :func:`traceview.analysis.sql.describe`."""
    return {"traceview": version, "tables": described}
