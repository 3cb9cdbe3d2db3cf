"""The offline HTML report and the notebook summary.

:func:`write_report` / :func:`render_report` produce ONE self-contained HTML file: no network
reference, no external CSS/JS/font, no script at all. Charts are drawn with matplotlib's
object API (:class:`matplotlib.figure.Figure`, never pyplot, so a user's notebook backend and
figures are untouched) to SVG and inlined. Every string that comes from a trace (op names,
shapes, HLO text, source paths, host and module names, warnings) reaches the page only
through jinja2 with autoescaping on; the SVG charts carry no trace string at all — their
labels are rank numbers and fixed axis texts, and the legends are HTML.

Units shown: times with adaptive units from :func:`traceview.render.units.fmt_time_ps`
(input ps), rates in FLOP/s and B/s with SI prefixes, intensity in FLOP/byte.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import polars as pl

from ..errors import TraceviewError
from .units import fmt_pct, fmt_rate, fmt_time_ps

#: Colors of the roofline points by bound ("memory" / "compute" / "unknown").
_BOUND_COLORS = {"memory": "#1f77b4", "compute": "#d62728", "unknown": "#7f7f7f"}
#: Family colors of the step-anatomy bars (cycled), shared by the SVG and the HTML legend.
_PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d37295"]
#: How much HLO text one population shows in the report (characters).
_HLO_CHARS = 1500
#: How many points of the roofline chart get a rank label.
_LABELLED = 8


# -- jinja ----------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def _env():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("traceview", "templates"),
        autoescape=True,  # every template, including from_string ones
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["t"] = fmt_time_ps
    env.filters["pct"] = fmt_pct
    env.filters["pctcap"] = lambda v: "-" if v is None else (">1000%" if v > 10 else fmt_pct(v))
    env.filters["rate"] = fmt_rate
    env.filters["num"] = lambda v: "-" if v is None else f"{v:,}"
    env.filters["g3"] = lambda v: "-" if v is None else f"{v:.3g}"
    return env


# -- charts ---------------------------------------------------------------------------------

def _chart_style(fn):
    """Run a chart function under matplotlib's default style plus the report's SVG settings,
    so neither a notebook's rcParams/style leak into the report nor the report into the
    notebook (``matplotlib.style.context`` restores every rcParam on exit; the backend is
    never touched). Text is kept as ``<text>`` elements (system sans-serif font, nothing
    embedded) and ids are salted per chart so two inline SVGs do not collide."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import matplotlib
        import matplotlib.style

        with matplotlib.style.context("default"), matplotlib.rc_context(
                {"svg.fonttype": "none", "svg.hashsalt": f"traceview-{fn.__name__}",
                 "font.family": "sans-serif", "font.size": 9}):
            return fn(*args, **kwargs)

    return wrapper


def _svg(fig) -> str:
    """Serialize a Figure to an inline-ready ``<svg>`` string (call inside :func:`_chart_style`).

    The XML prolog, DOCTYPE, metadata block, comments and namespace URLs are dropped: the page
    holds no ``http://`` reference, and HTML5 parses inline SVG without them.
    """
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    s = buf.getvalue()
    s = s[s.index("<svg"):]
    s = re.sub(r"<metadata>.*?</metadata>", "", s, flags=re.S)
    s = re.sub(r"<!--.*?-->", "", s, flags=re.S)
    s = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", s)
    s = s.replace("<svg ", '<svg class="chart" role="img" ', 1)
    s = re.sub(r"\n\s*\n", "\n", s)
    if re.search(r"(?i)<script|https?:", s):  # cannot happen: no trace string reaches the SVG
        raise RuntimeError("refusing to inline an SVG with a script or a network reference")
    return s


def _new_figure(w: float, h: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=100)
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.14, top=0.96)
    return fig


@_chart_style
def roofline_svg(roof: pl.DataFrame, peaks, *, labelled: int = _LABELLED) -> tuple[str | None, str, int]:
    """Log-log roofline chart of the populations in ``roof`` (rows of
    :func:`traceview.roofline.roofline`, sorted by total time).

    Returns ``(svg or None, note, hidden)``: ``svg`` is None when there is nothing to draw
    (no peaks or no cost), with ``note`` saying why; ``hidden`` counts populations with a
    cost that a log-log chart cannot place (zero FLOPs or zero bytes). Points: x = intensity
    (FLOP/byte), y = achieved FLOP/s, area proportional to total time, colored by what bounds
    them; the first ``labelled`` rows carry their rank (1-based, the row number in
    ``roof``), matching the report's roofline table.
    """
    if not peaks.complete:
        gone = [w for w, v in (("peak FLOP/s", peaks.peak_flops), ("peak memory bandwidth", peaks.peak_bw)) if not v]
        verb = "are" if len(gone) > 1 else "is"
        return None, (f"No roofline chart: the {' and the '.join(gone)} of this device {verb} unknown (the trace does "
                      "not carry them and the device type is not in the chip table). "
                      "Pass --chip NAME, or --peak-flops and --peak-bw (report(..., peaks=Peaks(...)) in Python)."), 0
    costed = roof.with_row_index("rank", offset=1).filter(pl.col("flops").is_not_null() | pl.col("bytes").is_not_null())
    if costed.height == 0:
        return None, ("No roofline chart: this trace carries no FLOP or byte counts and none could be derived "
                      "from its HLO, so no op can be placed against the roofs."), 0
    pts = costed.filter((pl.col("intensity") > 0) & (pl.col("achieved_flops") > 0))
    hidden = costed.height - pts.height
    if pts.height == 0:
        return None, (f"No roofline chart: none of the {costed.height} populations with costs does FLOPs "
                      "(pure data movement), so none has a positive arithmetic intensity to place on a log axis."), hidden

    pf, pb, ridge = float(peaks.peak_flops), float(peaks.peak_bw), float(peaks.ridge)
    x = pts["intensity"].to_list()
    y = pts["achieved_flops"].to_list()
    t = [float(v or 0) for v in pts["total_ps"].to_list()]
    tmax = max(t) or 1.0
    lo = min(min(x), ridge) / 4
    hi = max(max(x), ridge) * 4
    fig = _new_figure(8.4, 4.6)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(pf, v * pb) for v in xs], color="#222", lw=1.6, zorder=2)
    ax.axvline(ridge, color="#999", lw=0.8, ls=":", zorder=1)
    ax.plot([ridge], [pf], marker="D", color="#222", ms=6, zorder=4)
    ymin = min(min(y), lo * pb) / 3
    ax.set_xlim(lo, hi)
    ax.set_ylim(ymin, pf * 3)
    ax.annotate(f"ridge point {ridge:,.1f} FLOP/byte", (ridge, pf), xytext=(0, 9), textcoords="offset points",
                fontsize=9, color="#222", ha="center", va="bottom")
    # the compute-roof label goes on the side of the ridge with more room (log scale)
    if math.log(ridge / lo) > math.log(hi / ridge):
        ax.plot([lo, ridge], [pf, pf], color="#222", lw=0.8, ls=(0, (2, 3)), zorder=1)
        ax.text(lo * 1.15, pf * 0.9, f"compute roof {fmt_rate(pf, 'FLOP/s')}", fontsize=8.5, color="#444",
                ha="left", va="top")
    else:
        ax.text(hi / 1.15, pf * 0.9, f"compute roof {fmt_rate(pf, 'FLOP/s')}", fontsize=8.5, color="#444",
                ha="right", va="top")
    # memory-roof label along the sloped line, a third of the way to the ridge; its on-screen
    # angle from two display points
    x0 = lo * (ridge / lo) ** 0.3
    x1 = x0 * 1.5
    (dx0, dy0), (dx1, dy1) = ax.transData.transform([(x0, x0 * pb), (x1, x1 * pb)])
    ax.text(x0, x0 * pb * 1.3, f"memory roof {fmt_rate(pb, 'B/s')}", rotation=math.degrees(math.atan2(dy1 - dy0, dx1 - dx0)),
            rotation_mode="anchor", fontsize=8.5, color="#444", va="bottom", ha="left")
    bounds = pts["bound_by"].to_list()
    colors = [_BOUND_COLORS.get(b, _BOUND_COLORS["unknown"]) for b in bounds]
    sizes = [18 + 900 * (v / tmax) for v in t]
    ax.scatter(x, y, s=sizes, c=colors, alpha=0.55, edgecolors="#333", linewidths=0.6, zorder=3)
    ranks = pts["rank"].to_list()
    order = sorted(range(pts.height), key=lambda i: -t[i])[:labelled]
    # points that sit on top of each other share one label ("5,6,7")
    disp = ax.transData.transform([(x[i], y[i]) for i in order]) if order else []
    groups: list[list[int]] = []
    for k, i in enumerate(order):
        for g in groups:
            j = order.index(g[0])
            if math.hypot(disp[k][0] - disp[j][0], disp[k][1] - disp[j][1]) < 14:
                g.append(i)
                break
        else:
            groups.append([i])
    for g in groups:
        ax.annotate(",".join(str(ranks[i]) for i in sorted(g, key=lambda i: ranks[i])), (x[g[0]], y[g[0]]),
                    xytext=(5, 4), textcoords="offset points", fontsize=9, fontweight="bold", color="#111", zorder=5)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.grid(True, which="major", color="#e6e6e6", lw=0.6)
    for b, c in _BOUND_COLORS.items():
        if b in bounds:
            ax.scatter([], [], s=40, c=c, alpha=0.55, edgecolors="#333", linewidths=0.6, label=f"{b}-bound")
    ax.legend(loc="lower right", fontsize=8.5, frameon=False, title="point area ∝ total time", title_fontsize=8.5)
    note = ""
    if hidden:
        note = (f"{hidden} population(s) with costs but zero FLOPs or zero bytes (e.g. copies) cannot sit on a "
                "log-log chart and are left out of it; they are in the table.")
    return _svg(fig), note, hidden


@_chart_style
def steps_svg(series: list[list[float]], colors: list[str]) -> str:
    """Stacked bars: one bar per step, one segment per series (``series[i][k]`` = time of
    series i in step k, ps; plotted in ms) colored ``colors[i]``. Names stay out of the SVG:
    the legend is HTML."""
    n = len(series[0]) if series else 0
    fig = _new_figure(min(8.4, max(5.0, 3.0 + 0.16 * n)), 3.2)
    ax = fig.add_subplot()
    bottom = [0.0] * n
    for vals, c in zip(series, colors):
        ms = [float(v or 0) / 1e9 for v in vals]
        ax.bar(range(1, n + 1), ms, bottom=bottom, color=c, width=0.82 if n > 3 else 0.5, linewidth=0)
        bottom = [b + v for b, v in zip(bottom, ms)]
    ax.set_xlabel("step")
    ax.set_ylabel("time per step (ms)")
    ax.set_xlim(0.4, n + 0.6)
    if n <= 24:
        ax.set_xticks(range(1, n + 1))
    else:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, axis="y", color="#e6e6e6", lw=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return _svg(fig)


# -- sections -------------------------------------------------------------------------------

def _split_shape(shape: str | None) -> tuple[str, str]:
    s = shape or ""
    if " <- " in s:
        res, ops = s.split(" <- ", 1)
        return res, ops
    return s, ""


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _provenance(prof) -> dict:
    from .provenance import provenance_lines

    disc = prof.discovery
    return {
        "lines": provenance_lines(prof),
        "files": [{"path": str(t.path), "host": t.host, "format": t.format, "events": t.n_events,
                   "op_events": t.table.height} for t in prof.traces],
        "runs": [r.name for r in disc.selected if r.name] if disc is not None and getattr(disc, "selected", None) else [],
    }


def _devices(prof) -> list[dict]:
    dev = prof.device_summary()
    if dev.height == 0:
        return []
    groups = dev.group_by(["kind", "device_type"], maintain_order=True).agg(
        pl.len().alias("n"), pl.col("device"), pl.col("op_time_ps").sum(), pl.col("ops").sum(),
        pl.col("peak_flops").first(), pl.col("peak_bw").first())
    out = []
    for g in groups.iter_rows(named=True):
        names = g["device"]
        out.append({"kind": g["kind"], "device_type": g["device_type"] or "?", "n": g["n"],
                    "names": ", ".join(names[:4]) + (f" +{len(names) - 4}" if len(names) > 4 else ""),
                    "ops": g["ops"], "op_time_ps": g["op_time_ps"], "peak_flops": g["peak_flops"],
                    "peak_bw": g["peak_bw"]})
    return out


def _top_ops(prof, top: int) -> tuple[list[dict], list[dict], int]:
    """Top ``top`` populations (by self time) and the op names split into several shapes."""
    table = prof.by_shape()
    if table.height == 0:
        return [], [], 0
    npop = dict(table.group_by("op_name").agg(pl.len().alias("n")).iter_rows())
    hlo = {}
    if prof.table.height:
        first = (prof.table.collapse().filter(pl.col("hlo_text") != "").group_by(["op_name", "shape"])
                 .agg(pl.col("hlo_text").first()))
        hlo = {(r[0], r[1]): r[2] for r in first.iter_rows()}
    rows = []
    for i, r in enumerate(table.head(top).iter_rows(named=True), 1):
        res, operands = _split_shape(r["shape"])
        mods = r["modules"] or []
        text = hlo.get((r["op_name"], r["shape"]), "")
        rows.append({
            "rank": i, "op_name": r["op_name"], "category": r["category"] or r["op_kind"] or "",
            "result": res or "?", "operands": _short(operands, 240), "occurrences": r["occurrences"],
            "total_ps": r["total_ps"], "self_ps": r["self_ps"], "mean_ps": r["mean_ps"], "share": r["share"],
            "modules": ", ".join(m for m in mods[:3] if m) + (f" +{len(mods) - 3}" if len(mods) > 3 else ""),
            "source": r["source"] or "", "n_pops": npop.get(r["op_name"], 1),
            "hlo": _short(text, _HLO_CHARS),
        })
    split_df = (table.group_by("op_name").agg(
        pl.len().alias("n"), pl.col("shape"), pl.col("occurrences"), pl.col("mean_ps"), pl.col("self_ps"),
        pl.col("share"), pl.col("modules"), pl.col("self_ps").sum().alias("t"))
        .filter(pl.col("n") > 1).sort("t", descending=True))
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
    return rows, split, split_df.height


def _roofline(prof, peaks, top: int) -> dict:
    from ..roofline import predicted_vs_measured

    roof = prof.roofline(peaks)
    svg, note, hidden = roofline_svg(roof, peaks)
    known = roof.with_row_index("rank", offset=1).filter(pl.col("flops").is_not_null() | pl.col("bytes").is_not_null())
    rows = []
    warned: dict[str, list[int]] = {}
    for r in known.head(top).iter_rows(named=True):
        rows.append({**r, "result": _split_shape(r["shape"])[0] or "?"})
        if r["warning"]:
            warned.setdefault(r["warning"], []).append(r["rank"])
    summ = predicted_vs_measured(roof) if roof.height else {}
    return {"svg": svg, "note": note, "hidden": hidden, "rows": rows,
            "warned": [{"text": w, "ranks": ", ".join(map(str, rk))} for w, rk in warned.items()], "n_costed": known.height,
            "n_total": roof.height, "summary": summ if summ.get("ratio") is not None and peaks.complete else None}


def _peaks(peaks) -> dict:
    return {"flops": fmt_rate(peaks.peak_flops, "FLOP/s") if peaks.peak_flops else None,
            "bw": fmt_rate(peaks.peak_bw, "B/s") if peaks.peak_bw else None,
            "flops_source": peaks.flops_source, "bw_source": peaks.bw_source,
            "ridge": peaks.ridge, "device_type": peaks.device_type, "complete": peaks.complete}


_SITE = re.compile(r"/(site|dist)-packages/")


def _source_kind(path: str) -> str:
    if not path:
        return "unknown"
    if _SITE.search(path):
        return "site-packages"
    if re.search(r"/lib/python3[.\d]*/", path):
        return "stdlib"
    return "project"


def _pick(df: pl.DataFrame, *names: str) -> str | None:
    for n in names:
        if n in df.columns:
            return n
    return None


def _sources(prof, top: int = 15) -> dict:
    """Top source files by op self time, from :mod:`traceview.sources` when available, else
    from the op table's ``source_file`` column directly (direct frame)."""
    note = ""
    df = None
    try:
        from .. import sources as _src  # noqa: F401

        df = prof.sources(by="file", frame="direct")
    except ImportError:
        note = "traceview.sources is not available: attribution computed from each op's own source file."
    except Exception as exc:  # a bug in the attribution must not cost the whole report
        note = f"source attribution failed ({type(exc).__name__}: {exc}); computed from each op's own source file."
    rows = []
    if df is not None and df.height:
        fcol = _pick(df, "file", "source_file", "path")
        tcol = _pick(df, "self_ps", "time_ps", "total_ps")
        scol = _pick(df, "share")
        kcol = _pick(df, "kind", "origin", "category", "where")
        if fcol and (tcol or scol):
            total = float(df[tcol].sum() or 0) if tcol else 0.0
            for r in df.head(top).iter_rows(named=True):
                share = r[scol] if scol else (float(r[tcol] or 0) / total if total else None)
                rows.append({"file": r[fcol] or "(no source recorded)", "time_ps": r[tcol] if tcol else None, "share": share,
                             "kind": (r[kcol] if kcol else None) or _source_kind(r[fcol] or "")})
            kind_expr = (pl.col(kcol).fill_null("").replace("", "unknown") if kcol
                         else pl.col(fcol).map_elements(_source_kind, return_dtype=pl.Utf8))
            kinds = (df.select(kind_expr.alias("k"), (pl.col(scol) if scol else pl.col(tcol) / (total or 1)).alias("s"))
                     .group_by("k").agg(pl.col("s").sum()).sort("s", descending=True))
            return {"rows": rows, "kinds": [{"kind": k, "share": s} for k, s in kinds.iter_rows()], "note": note}
        df = None
        note = "traceview.sources returned an unexpected table; computed from each op's own source file."
    ops = prof.table.collapse()
    if ops.height == 0:
        return {"rows": [], "kinds": [], "note": note}
    total = float(ops["self_ps"].sum() or 0)
    g = (ops.group_by("source_file").agg(pl.col("self_ps").sum().alias("t")).sort("t", descending=True))
    for f, t in g.head(top).iter_rows():
        rows.append({"file": f or "(no source in the trace)", "time_ps": t, "share": (t / total) if total else None,
                     "kind": _source_kind(f or "")})
    kinds = (g.with_columns(pl.col("source_file").map_elements(_source_kind, return_dtype=pl.Utf8).alias("k"))
             .group_by("k").agg(pl.col("t").sum()).sort("t", descending=True))
    return {"rows": rows, "kinds": [{"kind": k, "share": (t / total) if total else None} for k, t in kinds.iter_rows()],
            "note": note}


@dataclass
class _StepsView:
    svg: str | None
    note: str
    coverage: str
    method: str
    families: list[dict]
    n_steps: int
    shown: int


#: At most this many steps are drawn (the first ones, in time order).
_MAX_STEPS = 48
_IDLE = "idle (no op running)"


def _steps(prof, rules, module: str | None = None, window: str = "span") -> _StepsView:
    """Step anatomy via :mod:`traceview.steps`: families per step as a stacked bar (per-step
    family self time, averaged over the devices that ran that step, plus the idle time) and
    the coverage line; a note instead when the module is missing or finds no step."""
    try:
        from .. import steps as _st  # noqa: F401
    except ImportError:
        return _StepsView(None, "Step anatomy is not available in this version (traceview.steps is missing).",
                          "", "", [], 0, 0)
    try:
        an = prof.steps(rules=rules, module=module, window=window) if (module or window != "span") \
            else prof.steps(rules=rules)
    except TraceviewError:  # a bad rule, window or module: the caller's mistake, said as such
        raise
    except Exception as exc:  # a bug in the anatomy must not cost the whole report
        return _StepsView(None, f"Step anatomy failed: {type(exc).__name__}: {exc}", "", "", [], 0, 0)
    cov = an.coverage
    line = cov.line() if hasattr(cov, "line") else str(cov)
    method = {"module": f"a step is one execution of {an.module} (window: {an.window})",
              "markers": "steps from the trace's step markers", "trace": "one step per device: the whole trace"
              }.get(an.method, an.method)
    steps = an.steps
    if not isinstance(steps, pl.DataFrame) or steps.height == 0:
        return _StepsView(None, "No steps found in this profile (no program execution to call a step).",
                          "", "", [], 0, 0)
    fam = an.families
    families = [{"family": r["family"], "time_ps": r["self_ps"], "share": r["share"], "color": "#ccc"}
                for r in fam.iter_rows(named=True)] if fam.height else []
    order = [f["family"] for f in families]
    n_steps = int(steps["step"].n_unique())
    shown = min(n_steps, _MAX_STEPS)
    matrix: list[tuple[str, list[float]]] = []
    by_step = an.family_time_by_step()
    if by_step.height:
        step_of = steps.with_row_index("step_row").select(pl.col("step_row").cast(pl.Int64), "step")
        ndev = steps.group_by("step").agg(pl.len().alias("ndev"))
        per = (by_step.join(step_of, on="step_row").filter(pl.col("step") < shown)
               .group_by("step", "family").agg(pl.col("self_ps").sum())
               .join(ndev, on="step").with_columns(pl.col("self_ps") / pl.col("ndev")))
        acc = {f: [0.0] * shown for f in order}
        for st, f, t, _ in per.iter_rows():
            acc.setdefault(f, [0.0] * shown)[st] += float(t or 0)
        matrix = [(f, acc[f]) for f in order if sum(acc[f]) > 0] + \
                 [(f, v) for f, v in acc.items() if f not in order and sum(v) > 0]
    idle = (steps.filter(pl.col("step") < shown).group_by("step").agg(pl.col("idle_ps").mean()).sort("step"))
    idle_vals = [0.0] * shown
    for st, v in idle.iter_rows():
        idle_vals[st] = max(0.0, float(v or 0))
    colors = [_PALETTE[i % len(_PALETTE)] for i in range(len(matrix))]
    for f in families:
        f["color"] = next((c for (name, _), c in zip(matrix, colors) if name == f["family"]), "#ccc")
    if any(idle_vals):
        matrix.append((_IDLE, idle_vals))
        colors.append("#d9d9d9")
        families.append({"family": _IDLE, "time_ps": cov.idle_ps, "share": (cov.idle_ps / cov.step_ps) if cov.step_ps else None,
                         "color": "#d9d9d9"})
    if not matrix:
        return _StepsView(None, "Steps found, but no op time inside them to chart.", line, method, families, n_steps, 0)
    return _StepsView(steps_svg([v for _, v in matrix], colors), "", line, method, families, n_steps, shown)


# -- public ---------------------------------------------------------------------------------

def _context(prof, *, top: int, peaks, rules, title: str | None, step_module: str | None = None,
             step_window: str = "span") -> dict:
    from .. import __version__

    if peaks is None:
        peaks = prof.peaks()
    ops_rows, split, n_split = _top_ops(prof, top)
    disc_root = getattr(prof.discovery, "root", None) if prof.discovery is not None else None
    default_title = "traceview report"
    if disc_root is not None:
        default_title += f" — {Path(str(disc_root)).name}"
    notes = []
    if not prof.has_shapes:
        notes.append("no shapes in this trace: ops are keyed by name only")
    return {
        "title": title or default_title,
        "version": __version__,
        "prov": _provenance(prof),
        "warnings": list(prof.warnings) + notes,
        "devices": _devices(prof),
        "peaks": _peaks(peaks),
        "roof": _roofline(prof, peaks, min(top, 20)),
        "ops": ops_rows,
        "n_pops": prof.by_shape().height if prof.table.height else 0,
        "split": split,
        "n_split": n_split,
        "op_events": int(prof.table.events["count"].sum() or 0) if prof.table.height else 0,
        "op_time_ps": prof.op_time_ps,
        "steps": _steps(prof, rules, step_module, step_window),
        "sources": _sources(prof),
        "bound_colors": _BOUND_COLORS,
        "top": top,
    }


def render_report(prof, *, top: int = 30, peaks=None, rules=None, title: str | None = None,
                  step_module: str | None = None, step_window: str = "span") -> str:
    """The report as one HTML string (see :func:`write_report`)."""
    ctx = _context(prof, top=top, peaks=peaks, rules=rules, title=title, step_module=step_module,
                   step_window=step_window)
    return _env().get_template("report.html.j2").render(**ctx)


def write_report(prof, path, *, top: int = 30, peaks=None, rules=None, title: str | None = None,
                 step_module: str | None = None, step_window: str = "span") -> Path:
    """Write the offline, self-contained HTML report of ``prof`` to ``path``; returns the Path.

    Sections: what was read (files, hosts, runs, why) and warnings; devices, peaks with their
    sources and the ridge point (FLOP/byte); a log-log roofline chart (intensity in FLOP/byte
    against achieved FLOP/s, point area ∝ total time) with its table; the ``top`` populations
    by self time, op names split into several shapes flagged and grouped; step anatomy
    (families per step, stacked, with the coverage line) when :mod:`traceview.steps` finds
    steps; source attribution (top files by op self time, project against site-packages).
    ``peaks`` is a :class:`traceview.roofline.Peaks` (default: ``prof.peaks()``); ``rules``
    (family rules), ``step_module`` and ``step_window`` go to ``prof.steps`` (``module``,
    ``window``); a bad rule, module or window raises :class:`~traceview.errors.UsageError`.
    The file has no script and no network reference.
    """
    out = Path(path)
    html = render_report(prof, top=top, peaks=peaks, rules=rules, title=title, step_module=step_module,
                         step_window=step_window)
    out.write_text(html, encoding="utf-8")
    return out


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


def profile_summary_html(prof) -> str:
    """A compact HTML summary for Jupyter (``Profile._repr_html_``): files and hosts, devices,
    the resolved peaks (FLOP/s, B/s) and ridge point (FLOP/byte), warnings, and the top 10 (op, shape) populations by self time. Every
    trace string is escaped; no script, no external reference."""
    rows, _, _ = _top_ops(prof, 10)
    hosts = sorted({t.host for t in prof.traces})
    return _env().from_string(_SUMMARY).render(
        files=prof.traces, hosts=hosts[:4] + ([f"+{len(hosts) - 4}"] if len(hosts) > 4 else []),
        op_events=int(prof.table.events["count"].sum() or 0) if prof.table.height else 0, op_time_ps=prof.op_time_ps,
        devices=_devices(prof), peaks=_peaks(prof.peaks()), warnings=list(prof.warnings), rows=rows,
        n_pops=prof.by_shape().height if prof.table.height else 0)
