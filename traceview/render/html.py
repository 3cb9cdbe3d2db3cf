"""The offline HTML report of a :class:`~traceview.analysis.report.Report`, and the notebook summary.

:func:`render_report` produces ONE self-contained HTML file: no network reference, no
external CSS/JS/font, no script at all. Charts (:mod:`traceview.render.charts`) are inline
SVG. Every string that comes from a trace (op names, shapes, HLO text, source paths, host
and module names, warnings) reaches the page only through jinja2 with autoescaping on; the
SVG charts carry no trace string at all — their labels are rank numbers and fixed axis
texts, and the legends are HTML.

Units shown: times with adaptive units from :func:`traceview.model.units.fmt_time_ps`
(input ps), rates in FLOP/s and B/s with SI prefixes, intensity in FLOP/byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import polars as pl

from traceview.model.naming import safe_line
from traceview.model.units import fmt_bytes, fmt_pct, fmt_rate, fmt_time_ps
from traceview.render.charts import BOUND_COLORS, InlineCharts, roofline_args
from traceview.render.overlap_html import comm_view, finish as finish_comm
from traceview.render.provenance import provenance_lines, run_names

#: Family colors of the step-anatomy bars (cycled), shared by the SVG and the HTML legend.
_PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d37295"]
#: How much HLO text one population shows in the report (characters).
_HLO_CHARS = 1500


# -- jinja ----------------------------------------------------------------------------------

class _Text(str):
    """A string shown as lines in a ``<pre>`` (HLO text): :func:`_printable` keeps its newlines
    and tabs."""


def _printable(value):
    """jinja2 ``finalize``: every string written valid Unicode with its control, bidi and line
    separator characters as visible escapes (``\x1b``, ``\u202e``, ``\n``:
    :func:`~traceview.model.naming.safe_line`), markup kept as markup; newlines and tabs kept
    only in markup and in :class:`_Text` (HLO text); None (a figure or reason the report lacks)
    as ``-``, never Python's ``None``."""
    if value is None:
        return "-"
    if isinstance(value, str):
        markup = hasattr(value, "__html__")  # a markupsafe.Markup
        fixed = safe_line(value, keep_newlines=markup or isinstance(value, _Text))
        if fixed is not value:
            import markupsafe

            return markupsafe.Markup(fixed) if markup else fixed
    return value


@lru_cache(maxsize=1)
def _env():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("traceview.render", "templates"),
        autoescape=True,  # every template, including from_string ones
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
        finalize=_printable,  # undecodable bytes as \xff, controls as \x1b: never raw
    )
    env.filters["t"] = fmt_time_ps
    env.filters["pct"] = fmt_pct
    env.filters["pctcap"] = lambda v: "-" if v is None else (">1000%" if v > 10 else fmt_pct(v))
    env.filters["rate"] = fmt_rate
    env.filters["num"] = lambda v: "-" if v is None else f"{v:,}"
    env.filters["g3"] = lambda v: "-" if v is None else f"{v:.3g}"
    env.filters["bytes"] = fmt_bytes
    return env


# -- sections -------------------------------------------------------------------------------

def _split_shape(shape: str | None) -> tuple[str, str]:
    s = shape or ""
    if " <- " in s:
        res, ops = s.split(" <- ", 1)
        return res, ops
    return s, ""


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _provenance(rep) -> dict:
    return {"lines": provenance_lines(rep.discovery, rep.files), "files": rep.files,
            "runs": [n for n in run_names(rep.discovery) if n]}


def _devices(groups: pl.DataFrame) -> list[dict]:
    out = []
    for g in groups.iter_rows(named=True):
        names = g["device"]
        out.append({"kind": g["kind"], "device_type": g["device_type"] or "?", "n": g["n"],
                    "names": ", ".join(names[:4]) + (f" +{len(names) - 4}" if len(names) > 4 else ""),
                    "ops": g["ops"], "op_time_ps": g["op_time_ps"], "peak_flops": g["peak_flops"],
                    "peak_bw": g["peak_bw"]})
    return out


def _top_ops(by_shape: pl.DataFrame, npop: dict, hlo: dict, top: int) -> list[dict]:
    """The rows of the top ``top`` populations (by self time)."""
    rows = []
    for i, r in enumerate(by_shape.head(top).iter_rows(named=True), 1):
        res, operands = _split_shape(r["shape"])
        mods = r["modules"] or []
        text = hlo.get((r["op_name"], r["shape"]), "")
        rows.append({
            "rank": i, "op_name": r["op_name"], "category": r["category"] or r["op_kind"] or "",
            "result": res or "?", "operands": _short(operands, 240), "occurrences": r["occurrences"],
            "total_ps": r["total_ps"], "self_ps": r["self_ps"], "mean_ps": r["mean_ps"], "share": r["share"],
            "modules": ", ".join(m for m in mods[:3] if m) + (f" +{len(mods) - 3}" if len(mods) > 3 else ""),
            "source": r["source"] or "", "n_pops": npop.get(r["op_name"], 1),
            "hlo": _Text(_short(text, _HLO_CHARS)),
        })
    return rows


#: members listed under one grouped row (the rest counted)
_MEMBERS = 100


def _grouped_ops(groups: pl.DataFrame, top: int) -> list[dict]:
    """The rows of the top ``top`` groups of :attr:`Report.op_groups` (the per-layer copies of
    one op as one row), each with its members (the first :data:`_MEMBERS`)."""
    rows = []
    for i, r in enumerate(groups.head(top).iter_rows(named=True), 1):
        res, operands = _split_shape(r["shape"])
        mods = r["modules"] or []
        members = r["members_rows"] or []
        rows.append({
            "rank": i, "op_name": r["op_name"], "kind": r["kind"], "family": r["family"] or "",
            "shape": r["shape"] or "", "result": res or "?", "operands": operands, "members": r["members"],
            "occurrences": r["occurrences"], "total_ps": r["total_ps"], "self_ps": r["self_ps"],
            "mean_ps": r["mean_ps"], "share": r["share"], "per_execution": r["per_execution"],
            "modules": ", ".join(m for m in mods[:3] if m) + (f" +{len(mods) - 3}" if len(mods) > 3 else ""),
            "all_modules": ", ".join(m for m in mods if m), "source": r["source"] or "",
            "hlo": _Text(_short(r["hlo_text"] or "", _HLO_CHARS)),
            "member_rows": [{"op_name": m["op_name"], "occurrences": m["occurrences"], "total_ps": m["total_ps"],
                             "mean_ps": (m["total_ps"] / m["occurrences"]) if m["occurrences"] else None,
                             "modules": ", ".join(x for x in (m["modules"] or []) if x)}
                            for m in members[:_MEMBERS]],
            "more_members": max(0, len(members) - _MEMBERS),
        })
    return rows


def _split(split_df: pl.DataFrame) -> list[dict]:
    """The op names split into several shape populations (the first 12, 10 populations each)."""
    split = []
    for r in split_df.head(12).iter_rows(named=True):
        pops = sorted(zip(r["self_ps"], r["shape"], r["occurrences"], r["mean_ps"], r["share"], r["modules"]),
                      key=lambda p: -(p[0] or 0))
        split.append({"op_name": r["op_name"], "n": r["n"], "self_ps": r["t"],
                      "pops": [{"result": _split_shape(s)[0] or "?", "operands": _short(_split_shape(s)[1], 200),
                                "occurrences": o, "mean_ps": m, "self_ps": st, "share": sh,
                                "modules": ", ".join(x for x in (mo or [])[:3] if x)}
                               for st, s, o, m, sh, mo in pops[:10]],
                      "more": max(0, r["n"] - 10)})
    return split


def _roof_rows(rep) -> pl.DataFrame:
    """The roofline rows the report shows: per-layer copies as one row when the report has
    them (:attr:`~traceview.analysis.report.Report.roofline_layers`), else per (name, shape)."""
    layers = getattr(rep, "roofline_layers", None)
    return rep.roofline if layers is None else layers


def _roofline(rep, top: int, chart) -> dict:
    """The roofline section; ``chart`` the pending :func:`~traceview.render.charts.roofline_svg`."""
    roof, peaks = _roof_rows(rep), rep.peaks
    svg, note, hidden = chart()
    known = roof.with_row_index("rank", offset=1).filter(pl.col("flops").is_not_null() | pl.col("bytes").is_not_null())
    rows = []
    warned: dict[str, list[int]] = {}
    for r in known.head(top).iter_rows(named=True):
        res, operands = _split_shape(r["shape"])  # operands tell apart GEMMs of one result shape
        rows.append({**r, "result": res or "?", "operands": _short(operands, 240)})
        if r["warning"]:
            warned.setdefault(r["warning"], []).append(r["rank"])
    summ = rep.roofline_summary if roof.height else {}
    return {"svg": svg, "note": note, "hidden": hidden, "rows": rows, "off": (rep.roofline_summary or {}).get("off_roofline") or [],
            "warned": [{"text": w, "ranks": ", ".join(map(str, rk))} for w, rk in warned.items()], "n_costed": known.height,
            "n_total": roof.height, "summary": summ if summ.get("ratio") is not None and peaks.complete else None,
            "layers": "members" in roof.columns}


def _peaks(peaks) -> dict:
    return {"flops": fmt_rate(peaks.peak_flops, "FLOP/s") if peaks.peak_flops else None,
            "bw": fmt_rate(peaks.peak_bw, "B/s") if peaks.peak_bw else None,
            "flops_source": peaks.flops_source, "bw_source": peaks.bw_source,
            "ridge": peaks.ridge, "device_type": peaks.device_type, "complete": peaks.complete,
            "notes": list(peaks.notes), "chip": peaks.chip,
            **{f"{w}_{k}": fmt_rate(getattr(peaks, f"{w}_{k}"), u) if getattr(peaks, f"{w}_{k}") else None
               for w in ("trace", "table") for k, u in (("flops", "FLOP/s"), ("bw", "B/s"))}}


_SITE = re.compile(r"/(site|dist)-packages/")


def _source_kind(path: str) -> str:
    if not path:
        return "unknown"
    if _SITE.search(path):
        return "site-packages"
    if re.search(r"/lib/python3[.\d]*/", path):
        return "stdlib"
    return "project"


def _sources(rep, top: int = 15) -> dict:
    """Top source files by op self time (direct frame), project against site-packages."""
    df = rep.html_sources
    rows = []
    for r in df.head(top).iter_rows(named=True):
        rows.append({"file": r["file"] or "(no source recorded)", "time_ps": r["self_ps"], "share": r["share"],
                     "kind": r["origin"] or _source_kind(r["file"] or "")})
    return {"rows": rows, "kinds": [{"kind": k, "share": sh} for k, sh in rep.source_kinds.iter_rows()], "note": ""}


@dataclass
class _StepsView:
    svg: str | None
    note: str
    coverage: str
    method: str
    families: list[dict]
    n_steps: int
    shown: int
    strip: object = None
    summary: str = ""
    outliers: list | None = None
    strip_note: str = ""
    #: the steps as a sentence instead of a chart of fewer than :data:`MIN_POINTS` points
    strip_points: list | None = None
    bars_sentence: bool = False


_IDLE = "idle (no op running)"
#: a chart with fewer points is a sentence instead
MIN_POINTS = 3


def _steps(rep, charts) -> _StepsView:
    """The step anatomy: families per step as a stacked bar (per-step family self time,
    averaged over the devices that ran that step, plus the idle time) and the coverage line;
    a note instead when no step was found. The chart is submitted to ``charts`` and left
    pending in ``svg`` (a callable)."""
    an, chart = rep.steps, rep.step_chart
    cov = an.coverage
    line = cov.line()
    method = {"module": f"a step is one execution of {an.module} (extent: {an.extent})",
              "markers": "steps from the trace's step markers", "trace": "one step per device: the whole trace"
              }.get(an.method, an.method)
    if an.steps.height == 0:
        return _StepsView(None, "No steps found in this profile (no program execution to call a step).",
                          "", "", [], 0, 0)
    strip, summary, outl, strip_note, strip_points = None, "", [], "", None
    st = an.steps
    if "outlier" in st.columns:  # the step distribution: strip chart, its line, the outlier steps
        ss = rep.step_strip
        if ss is not None and ss.shown < MIN_POINTS:
            strip_points = st.select("device", "step", "duration_ps").sort("device", "step").to_dicts()
        elif ss is not None:
            strip = charts.submit("step_strip", ss.steps, ss.durations, ss.outliers, ss.median_ps)
            if ss.shown < ss.n_steps:
                strip_note = (f"{ss.n_steps:,} steps: every outlier and, per bin of step indices, the shortest "
                              f"and longest of the others are drawn ({ss.shown:,} points).")
        summary = an.summary()
        outl = st.filter(pl.col("outlier")).sort("device", "step").select(
            "device", "step", "duration_ps", "gap_before_ps", "reason").head(50).to_dicts()
    fam = an.families
    families = [{"family": r["family"], "time_ps": r["self_ps"], "share": r["share"], "color": "#ccc"}
                for r in fam.iter_rows(named=True)] if fam.height else []
    matrix = list(chart.series)
    colors = [_PALETTE[i % len(_PALETTE)] for i in range(len(matrix))]
    for f in families:
        f["color"] = next((c for (name, _), c in zip(matrix, colors) if name == f["family"]), "#ccc")
    if any(chart.idle):
        matrix.append((_IDLE, chart.idle))
        colors.append("#d9d9d9")
        families.append({"family": _IDLE, "time_ps": cov.idle_ps, "share": (cov.idle_ps / cov.step_ps) if cov.step_ps else None,
                         "color": "#d9d9d9"})
    if not matrix:
        return _StepsView(None, "Steps found, but no op time inside them to chart.", line, method, families,
                          chart.n_steps, 0, strip, summary, outl, strip_note, strip_points)
    if chart.shown < MIN_POINTS:  # one or two bars: the legend's figures say it
        return _StepsView(None, "", line, method, families, chart.n_steps, chart.shown, strip, summary, outl,
                          strip_note, strip_points, True)
    return _StepsView(charts.submit("steps", [v for _, v in matrix], colors), "", line, method, families,
                      chart.n_steps, chart.shown, strip, summary, outl, strip_note, strip_points)


#: allocators drawn in the memory chart (largest peaks first)
MEMORY_LINES = 8


def _memory(mem, top: int, charts, wait: bool = True) -> dict | None:
    """The memory section: the allocators' rows (the first ``top``), the chart of bytes in use
    of the :data:`MEMORY_LINES` largest (submitted to ``charts``, drawn here), the alive-at-peak
    rows of the largest, notes; None without a memory analysis. ``wait=False``: only submit
    the chart (:func:`submit_charts`) and return None."""
    if mem is None:
        return None
    from traceview.render.charts import _MEM_COLORS

    rows = [dict(a.to_dict(), color=_MEM_COLORS[i % len(_MEM_COLORS)] if i < MEMORY_LINES else None)
            for i, a in enumerate(mem.allocators[:top])]
    for r in rows:
        r.pop("steps", None)
        r.pop("alive_at_peak", None)
    svg = None
    if mem.allocators:
        drawn = mem.allocators[:MEMORY_LINES]
        svg = charts.submit("memory", [(list(a.series[0]), list(a.series[1])) for a in drawn], drawn[0].capacity)
        if not wait:
            return None
        svg = svg()
    first = mem.allocators[0] if mem.allocators else None
    notes = list(mem.notes) + [f"{a.allocator}: {n}" for a in mem.allocators[:top] for n in a.notes]
    return {"rows": rows, "n": len(mem.allocators), "svg": svg, "first": first.to_dict() if first else None,
            "alive": first.alive.head(top).to_dicts() if first is not None else [], "notes": list(dict.fromkeys(notes))}


def _communication(comm, top: int) -> dict | None:
    """The communication section: link peaks and source, collective and host-transfer rows
    (the first ``top`` of each), notes; None without a communication analysis."""
    if comm is None:
        return None
    ln = comm.link
    return {"link": None if ln is None else {"name": ln.interconnect, "bidi": ln.bidirectional, "one": ln.per_direction,
                                             "host": ln.host_link, "host_one": ln.host_per_direction, "source": ln.source},
            "collective_share": comm.collective_share, "host_share": comm.host_share,
            "collectives": comm.collectives.head(top).to_dicts(), "n_collectives": comm.collectives.height,
            "hosts": comm.host_transfers.head(top).to_dicts(), "notes": list(comm.notes)}


def _kinds(rep, top: int) -> list[dict] | None:
    """The ``--by kind`` rows (:func:`traceview.analysis.ops.kinds.by_kind`) when the report was
    built with ``by="kind"``, else None."""
    if getattr(rep, "by", "shape") != "kind" or rep.table.height == 0:
        return None
    rows = []
    for i, r in enumerate(rep.table.head(top).iter_rows(named=True), 1):
        res, operands = _split_shape(r["shape"])
        names = r["op_names"] or []
        rows.append({"rank": i, "op_name": r["op_name"], "kind": r["kind"], "result": res or "?",
                     "operands": _short(operands, 240), "members": r["members"],
                     "names": _short(", ".join(names[:6]) + (", …" if len(names) > 6 else ""), 300),
                     "per_execution": r["per_execution"], "occurrences": r["occurrences"], "total_ps": r["total_ps"],
                     "share": r["share"]})
    return rows


def _family_roofline(rep) -> dict | None:
    """The roofline-per-family table (:mod:`traceview.render.family_roofline`), None without one."""
    fr = getattr(rep, "family_roofline", None)
    if fr is None or fr.height == 0:
        return None
    from traceview.render import family_roofline as frv

    ridge = (f"ridge point {rep.peaks.ridge:.1f} FLOP/byte" if rep.peaks.ridge else
             "no peaks known, so bound by is unknown")
    return {"rows": frv.rows(fr), "summary": frv.summary_line(getattr(rep, "family_roofline_summary", None)),
            "ridge": ridge}


def _overview(rep, steps: _StepsView, findings: list[dict]) -> dict | None:
    """The overview's values (:attr:`Report.overview`), the family bar colored as the step
    anatomy's legend; None without one."""
    ov = getattr(rep, "overview", None)
    if ov is None:
        return None
    colors = {f["family"]: f["color"] for f in steps.families}
    fams = ov["families"]
    total = sum(f["share"] or 0 for f in fams)
    bar = [{**f, "color": colors.get(f["family"]) or _PALETTE[i % len(_PALETTE)],
            "width": 100.0 * (f["share"] or 0) / total if total else 0.0} for i, f in enumerate(fams)]
    return {"step": ov["step"], "util": ov["utilisation"], "mem": ov["memory"], "bar": bar,
            "bar_sum": total, "findings": findings[:8], "n_findings": len(findings),
            "step_numbers": ov.get("step_numbers")}


# -- public ---------------------------------------------------------------------------------

def submit_roofline(rows, peaks, charts) -> None:
    """Submit to ``charts`` the roofline chart of ``rows`` (the report's roofline rows, as
    :func:`_roof_rows` gives them) under ``peaks``, as :func:`render_report` will ask for it
    (:func:`~traceview.analysis.report.build_report`'s ``on_roofline``)."""
    charts.submit("roofline", *roofline_args(rows, peaks))


def submit_charts(rep, charts, *, top: int = 30) -> None:
    """Submit to ``charts`` the charts of ``rep`` whose sections are built already (the
    roofline and the steps once the step anatomy is; the memory chart once the memory is, and
    the communication charts once the overlap and stragglers are),
    exactly as :func:`render_report` will ask for them: a drawer that keeps what it was asked
    (:class:`traceview.cli.chartworker.ChartWorker`) then draws them while the rest of the
    report is built. Nothing is drawn or returned here."""
    if getattr(rep, "step_chart", None) is not None and rep.steps is not None:
        submit_roofline(_roof_rows(rep), rep.peaks, charts)
        _steps(rep, charts)
    if getattr(rep, "memory", None) is not None:
        _memory(rep.memory, top, charts, wait=False)
    if getattr(rep, "overlap", None) is not None:  # the communication section's charts, as _context asks
        from traceview.render.overlap_html import comm_view

        comm_view(rep, charts, min(top, 20))


def _context(rep, *, top: int, title: str | None, charts=None) -> dict:
    """The template's values. Both charts are submitted to ``charts`` first and collected
    last, so a drawer in another process draws them while the tables are built."""
    from traceview import __version__
    from traceview.render.findings import finding_rows, none_line, not_evaluated_line

    charts = charts or InlineCharts()
    roof_chart = charts.submit("roofline", *roofline_args(_roof_rows(rep), rep.peaks))
    steps = _steps(rep, charts)
    comm = comm_view(rep, charts, min(top, 20))

    default_title = "traceview report"
    disc_root = getattr(rep.discovery, "root", None) if rep.discovery is not None else None
    if disc_root is not None:
        default_title += f" — {Path(str(disc_root)).name}"
    notes = []
    if not rep.has_shapes:
        notes.append("no shapes in this trace: ops are keyed by name only")
    split_df = rep.split
    ctx = {
        "title": title or default_title,
        "version": __version__,
        "prov": _provenance(rep),
        "warnings": list(rep.warnings) + notes,
        "devices": _devices(rep.device_groups),
        "peaks": _peaks(rep.peaks),
        "roof": None,
        "ops": [],  # the (name, shape) rows: only for a report without op_groups (below)
        "n_pops": rep.by_shape.height,
        "split": _split(split_df) if rep.by_shape.height else [],
        "n_split": split_df.height if rep.by_shape.height else 0,
        "op_events": rep.op_events,
        "op_time_ps": rep.op_time_ps,
        "steps": steps,
        "sources": _sources(rep),
        "bound_colors": BOUND_COLORS,
        "top": top,
        "findings": finding_rows(getattr(rep, "findings", None)),
        "findings_off": getattr(rep, "findings", None) is None,
        "findings_skipped": not_evaluated_line(getattr(rep, "findings_not_evaluated", None)),
        "findings_none": none_line(getattr(rep, "findings_not_evaluated", None)),  # the one wording of no finding
        "family_roofline": _family_roofline(rep),
        "kinds": _kinds(rep, top),
        "export_command": getattr(rep, "export_command", None),
    }
    ctx["overview"] = _overview(rep, steps, ctx["findings"])
    stepno = (ctx["overview"] or {}).get("step_numbers") or {}
    ctx["stepno"] = stepno
    ctx["groups"] = _grouped_ops(rep.op_groups, top) if getattr(rep, "op_groups", None) is not None else None
    ctx["n_groups"] = rep.op_groups.height if ctx["groups"] is not None else 0
    if ctx["groups"] is None:
        ctx["ops"] = _top_ops(rep.by_shape, rep.populations_per_name, {}, top)
    ctx["roof"] = _roofline(rep, min(top, 20), roof_chart)
    ctx["comm"] = _communication(getattr(rep, "communication", None), top)
    ctx["mem"] = _memory(getattr(rep, "memory", None), top, charts)
    h = getattr(rep, "hlo", None)
    ctx["hlo"] = None if h is None or h.source == "none" else {
        "source": h.source, "patterns": h.patterns.head(top).to_dicts(), "n": h.detections.height,
        "notes": list(h.notes)}
    ki = getattr(rep, "kernel_inside", None)
    ctx["kin"] = None if ki is None else {"summary": ki.summary, "stages": ki.stages.head(top).to_dicts()
                                          if ki.stages.height else [],
                                          "counters": ki.counters.head(top).to_dicts() if ki.counters.height else [],
                                          "notes": list(ki.notes)}
    ph = getattr(rep, "phases", None)
    ctx["phases"] = None if ph is None or ph.steps.height == 0 else {
        "labels": ph.label_line(), "source": ph.flops_source, "summary": ph.summary.to_dicts(),
        "families": ph.families.to_dicts() if ph.families.height else [],
        "steps": ph.steps.head(top).to_dicts(), "n_steps": ph.steps.height,
        "notes": list(ph.notes)}
    if callable(steps.svg):
        steps.svg = steps.svg()
    if callable(steps.strip):
        steps.strip = steps.strip()
    ctx["ovl"] = finish_comm(comm)
    from traceview.render.overlap_view import straggler_label

    st = getattr(rep, "stragglers", None)
    label = straggler_label(getattr(rep, "findings", None), st.summary if st is not None else None)
    ctx["straggler_label"] = label[:1].upper() + label[1:]
    return ctx


def render_report(rep, *, top: int = 30, title: str | None = None, charts=None) -> str:
    """The offline, self-contained HTML report of ``rep`` (a
    :class:`~traceview.analysis.report.Report` built with ``html=True``) as one string.

    Sections, the answer first: the overview (step time median and p10-p90, MFU/MBU and the
    memory peak or why each is unknown, the step's families as one bar, the findings ranked by
    impact: :attr:`Report.overview`); the findings (evidence as tables, the export command);
    the ``top`` ops by self time with the per-layer copies of one op as one row that expands to
    its op names (:attr:`Report.op_groups`), op names split into several shapes; step anatomy
    (families per step, stacked, with the coverage line); a log-log roofline chart (intensity
    in FLOP/byte against achieved FLOP/s, point area ∝ total time) with its table; phases,
    HLO, kernels, memory, communication; source attribution; devices and peaks; what was read.
    A chart of fewer than :data:`MIN_POINTS` points is a sentence. Steps are numbered as the
    ``step`` column everywhere, the trace's own step number beside where its markers carry
    one. Long strings are cut in the middle on one line, whole in their ``title``; nothing is
    wider than a 1280 px window. No script and no network reference.
    ``charts``: what draws the charts (``submit(name, *args)`` returning a callable that gives
    the chart; :class:`~traceview.render.charts.InlineCharts`, drawing in this process, when None).
    """
    return report_template().render(**_context(rep, top=top, title=title, charts=charts))


def report_template():
    """The compiled report template (jinja2 compiles it on first use, then keeps it): a caller
    may call this early, e.g. in a thread while the trace is read, so the report does not wait
    for it."""
    return _env().get_template("report.html.j2")


_SUMMARY = """\
<div class="tv-summary">
<style>
.tv-summary{font:13px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;color:#222}
.tv-summary table{border-collapse:collapse;margin-top:4px}
.tv-summary th,.tv-summary td{padding:2px 8px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
.tv-summary td.r,.tv-summary th.r{text-align:right}
.tv-summary code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;word-break:break-all}
.tv-summary .warn{color:#a15c00}
.tv-summary .badge{background:#fde8c8;color:#7a4300;border-radius:3px;padding:0 4px;font-size:11px}
</style>
<b>traceview Profile</b>: {{ files|length }} file(s){% if hosts %} from {{ hosts|join(", ") }}{% endif %};
{{ op_events|num }} op events, op time {{ op_time_ps|t }}
{% for d in devices %}<br>{{ d.kind }}{% if d.device_type != d.kind %} {{ d.device_type }}{% endif %} ×{{ d.n }}: {{ d.ops|num }} op events, {{ d.op_time_ps|t }}
{% endfor %}
{% if peaks.flops or peaks.bw %}<br>peaks {{ peaks.flops or "unknown" }}, {{ peaks.bw or "unknown" }}{% if peaks.ridge %}; ridge point {{ "%.1f"|format(peaks.ridge) }} FLOP/byte{% endif %}
{% else %}<br>peaks unknown (pass <code>chip=</code> or <code>peak_flops=</code>/<code>peak_bw=</code> to <code>.peaks()</code>)
{% endif %}
{% for w in warnings %}<br><span class="warn">warning: {{ w }}</span>{% endfor %}
{% for f in findings %}<br><span class="warn">finding {{ f.severity }} <code>{{ f.id }}</code>: {{ f.statement }}</span>{% endfor %}
{% if rows %}
<table>
<tr><th class="r">#</th><th>op</th><th>result shape</th><th class="r">occ.</th><th class="r">total</th><th class="r">mean</th><th class="r">self %</th></tr>
{% for r in rows %}
<tr><td class="r">{{ r.rank }}</td><td><code>{{ r.op_name }}</code>{% if r.n_pops > 1 %} <span class="badge">{{ r.n_pops }} shapes</span>{% endif %}</td>
<td><code>{{ r.result }}</code></td><td class="r">{{ r.occurrences|num }}</td><td class="r">{{ r.total_ps|t }}</td>
<td class="r">{{ r.mean_ps|t }}</td><td class="r">{{ r.share|pct }}</td></tr>
{% endfor %}
</table>
<small>top {{ rows|length }} of {{ n_pops|num }} (op, shape) populations by self time; <code>.report(path)</code> writes the full HTML report</small>
{% else %}
<br>no HLO op events
{% endif %}
</div>
"""


def summary_html(summary) -> str:
    """A compact HTML summary for Jupyter (``Profile._repr_html_``) of a
    :class:`~traceview.analysis.report.Summary`: files and hosts, devices, the resolved peaks
    (FLOP/s, B/s) and ridge point (FLOP/byte), warnings, and the top 10 (op, shape)
    populations by self time. Every trace string is escaped; no script, no external reference."""
    from traceview.render.findings import finding_rows

    rows = _top_ops(summary.by_shape, summary.populations_per_name, {}, 10)
    hosts = summary.hosts
    return _env().from_string(_SUMMARY).render(
        files=summary.files, hosts=hosts[:4] + ([f"+{len(hosts) - 4}"] if len(hosts) > 4 else []),
        op_events=summary.op_events, op_time_ps=summary.op_time_ps, devices=_devices(summary.device_groups),
        peaks=_peaks(summary.peaks), warnings=list(summary.warnings), rows=rows, n_pops=summary.by_shape.height,
        findings=finding_rows(getattr(summary, "findings", None)))
