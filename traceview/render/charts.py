"""The report's charts as inline SVG, drawn with matplotlib's object API.

Charts use :class:`matplotlib.figure.Figure`, never pyplot, so a user's notebook backend and
figures are untouched, under matplotlib's default style (a notebook's rcParams do not leak in).
No string from a trace reaches an SVG: labels are rank numbers and fixed axis texts; legends
are HTML. Units: intensity in FLOP/byte, rates in FLOP/s and B/s, step times in ms.
"""

from __future__ import annotations

import io
import math
import re
from typing import TYPE_CHECKING, NamedTuple

from traceview.model.units import fmt_rate

if TYPE_CHECKING:
    import polars as pl

#: Colors of the roofline points by bound ("memory" / "compute" / "unknown").
BOUND_COLORS = {"memory": "#1f77b4", "compute": "#d62728", "unknown": "#7f7f7f"}
#: How many points of the roofline chart get a rank label.
LABELLED = 8
#: Values a log axis is given, exclusive bounds (beyond them matplotlib's limits overflow).
_DRAWABLE = (1e-300, 1e300)


def _chart_style(fn):
    """Run a chart function under matplotlib's default style plus the report's SVG settings,
    with its warnings silenced, so neither a notebook's rcParams/style leak into the report nor the report into the
    notebook (``matplotlib.style.context`` restores every rcParam on exit; the backend is
    never touched). Text is kept as ``<text>`` elements (system sans-serif font, nothing
    embedded) and ids are salted per chart so two inline SVGs do not collide."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import warnings

        import matplotlib
        import matplotlib.style

        with matplotlib.style.context("default"), matplotlib.rc_context(
                {"svg.fonttype": "none", "svg.hashsalt": f"traceview-{fn.__name__}",
                 "font.family": "sans-serif", "font.size": 9}), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a library writes nothing to stderr
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


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _power_of_ten(x: float, _pos=None) -> str:
    """``10³`` for a power of ten (unicode superscripts: plain text, where matplotlib's own log
    labels go through its mathtext parser, whose first use costs more than the whole chart)."""
    if x <= 0:
        return ""
    k = math.log10(x)
    return f"10{str(round(k)).translate(_SUPERSCRIPT)}" if abs(k - round(k)) < 1e-9 else ""


def _plain_log_labels(ax) -> None:
    """Label a log-log axes' decades as ``10ᵏ`` in plain text, minor ticks unlabelled."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(FuncFormatter(_power_of_ten))
        axis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
        axis.set_minor_formatter(NullFormatter())


def _new_figure(w: float, h: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=100)
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.14, top=0.96)
    return fig


#: the columns of a roofline frame :func:`roofline_svg` reads
ROOF_COLUMNS = ("flops", "bytes", "intensity", "achieved_flops", "total_ps", "bound_by")


class RoofPeaks(NamedTuple):
    """What :func:`roofline_svg` reads of a :class:`~traceview.analysis.hardware.peaks.Peaks`
    (FLOP/s, B/s, FLOP/byte)."""

    peak_flops: float | None
    peak_bw: float | None
    ridge: float | None
    complete: bool


def roofline_args(roof: pl.DataFrame, peaks) -> tuple[dict, RoofPeaks]:
    """:func:`roofline_svg`'s arguments as plain Python values (columns as lists), so the
    report's chart process draws it without importing polars or the analysis modules."""
    return _roof_columns(roof), RoofPeaks(peaks.peak_flops, peaks.peak_bw, peaks.ridge, bool(peaks.complete))


def _roof_columns(roof: pl.DataFrame | dict) -> dict:
    """:data:`ROOF_COLUMNS` of ``roof`` as lists (a dict of them is taken as it is)."""
    return roof if isinstance(roof, dict) else roof.select(ROOF_COLUMNS).to_dict(as_series=False)


def _finite_positive(v) -> bool:
    return v is not None and v > 0 and math.isfinite(v)


@_chart_style
def roofline_svg(roof: pl.DataFrame | dict, peaks, *, labelled: int = LABELLED) -> tuple[str | None, str, int]:
    """Log-log roofline chart of the populations in ``roof`` (rows of
    :func:`traceview.analysis.ops.roofline.roofline`, sorted by total time).

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
    cols = _roof_columns(roof)
    costed = [i for i, (f, b) in enumerate(zip(cols["flops"], cols["bytes"])) if f is not None or b is not None]
    if not costed:
        return None, ("No roofline chart: this trace carries no FLOP or byte counts and none could be derived "
                      "from its HLO, so no op can be placed against the roofs."), 0
    pts = [i for i in costed if _finite_positive(cols["intensity"][i]) and _finite_positive(cols["achieved_flops"][i])]
    hidden = len(costed) - len(pts)
    if not pts:
        return None, (f"No roofline chart: none of the {len(costed)} populations with costs does FLOPs "
                      "(pure data movement), so none has a positive arithmetic intensity to place on a log axis."), hidden

    pf, pb, ridge = float(peaks.peak_flops), float(peaks.peak_bw), peaks.ridge
    x = [cols["intensity"][i] for i in pts]
    y = [cols["achieved_flops"][i] for i in pts]
    t = [float(cols["total_ps"][i] or 0) for i in pts]
    tmax = max(t) or 1.0
    lo = min(min(x), ridge or 1.0) / 4
    hi = max(max(x), ridge or 1.0) * 4
    ends = [pf, pb, lo, hi, pf * 3, min(min(y), lo * pb) / 3, lo * pb, hi * pb]
    if ridge is None or not all(math.isfinite(v) and _DRAWABLE[0] < v < _DRAWABLE[1] for v in ends):
        return None, (f"No roofline chart: the peaks ({fmt_rate(pf, 'FLOP/s')}, {fmt_rate(pb, 'B/s')}) or the ops' "
                      "rates lie beyond what a chart can draw (figures over 1e300 or under 1e-300); the table below "
                      "has the figures."), hidden
    fig = _new_figure(8.4, 4.6)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log_labels(ax)
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
    bounds = [cols["bound_by"][i] for i in pts]
    colors = [BOUND_COLORS.get(b, BOUND_COLORS["unknown"]) for b in bounds]
    sizes = [18 + 900 * (v / tmax) for v in t]
    ax.scatter(x, y, s=sizes, c=colors, alpha=0.55, edgecolors="#333", linewidths=0.6, zorder=3)
    ranks = [i + 1 for i in pts]  # the row's number in roof, as the report's roofline table
    order = sorted(range(len(pts)), key=lambda i: -t[i])[:labelled]
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
    for b, c in BOUND_COLORS.items():
        if b in bounds:
            ax.scatter([], [], s=40, c=c, alpha=0.55, edgecolors="#333", linewidths=0.6, label=f"{b}-bound")
    ax.legend(loc="lower right", fontsize=8.5, frameon=False, title="point area ∝ total time", title_fontsize=8.5)
    note = ""
    if hidden:
        note = (f"{hidden} population(s) with costs but zero FLOPs or zero bytes (e.g. copies) cannot sit on a "
                "log-log chart and are left out of it; they are in the table.")
    return _svg(fig), note, hidden


@_chart_style
def steps_svg(series: list[list[float]], colors: list[str], steps: list[int] | None = None) -> str:
    """Stacked bars: one bar per step, one segment per series (``series[i][k]`` = time of
    series i in the k-th step shown, ps; plotted in ms) colored ``colors[i]``, at x = the
    step's number (``steps[k]``; default k): 0-based, as the ``step`` column of every table,
    the JSON and the strip chart. Names stay out of the SVG: the legend is HTML."""
    n = len(series[0]) if series else 0
    xs = [int(x) for x in steps][:n] if steps is not None and len(steps) >= n else list(range(n))
    fig = _new_figure(min(8.4, max(5.0, 3.0 + 0.16 * n)), 3.2)
    ax = fig.add_subplot()
    from matplotlib.collections import PolyCollection

    bottom = [0.0] * n
    half = (0.82 if n > 3 else 0.5) / 2
    for vals, c in zip(series, colors):
        ms = [float(v) / 1e9 if v and math.isfinite(float(v)) and v > 0 else 0.0 for v in vals]
        # one collection of rectangles per series (ax.bar makes an artist per bar: 10x slower)
        boxes = [((k - half, b), (k + half, b), (k + half, b + v), (k - half, b + v))
                 for k, b, v in zip(xs, bottom, ms) if v > 0]
        if boxes:
            ax.add_collection(PolyCollection(boxes, facecolors=c, linewidths=0))
        bottom = [b + v for b, v in zip(bottom, ms)]
    ax.set_ylim(0, max(bottom, default=0.0) * 1.05 or 1.0)
    ax.set_xlabel("step")
    ax.set_ylabel("time per step (ms)")
    ax.set_xlim(min(xs, default=0) - 0.6, max(xs, default=0) + 0.6)
    if n <= 24:
        ax.set_xticks(xs)
    else:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, axis="y", color="#e6e6e6", lw=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return _svg(fig)




@_chart_style
def step_strip_svg(steps: list[int], durations: list[float], outliers: list[bool],
                   median: float | None = None) -> str:
    """Strip chart of step times: one point per step (x: step index per device, y: duration,
    ps, plotted in ms; a log axis when the longest step is over 20x the shortest), outlier
    steps as red crosses, the window's median as a dashed line. Devices share the x positions (no device name reaches the SVG)."""
    fig = _new_figure(8.0, 2.6)
    fig.subplots_adjust(bottom=0.18)
    ax = fig.add_subplot()
    pts = [(int(s), float(d) / 1e9, bool(o)) for s, d, o in zip(steps, durations, outliers)
           if d is not None and math.isfinite(float(d))]
    top = max((d for _, d, _ in pts), default=1.0)
    low = min((d for _, d, _ in pts if d > 0), default=top)
    log = low > 0 and top / low > 20  # a warm-up step 100x the rest: log scale keeps the steady ones apart
    # one point of a kind per half pixel (the plot is about 700 x 200 px; a point is 4 px
    # wide): points that coincide on the chart, a step's copies on several devices and
    # neighbouring steps of one time, are drawn once (each point is an SVG element)
    span_y = (math.log10(top * 1.5) - math.log10(low / 1.5)) if log else (top * 1.08 or 1.0)
    qy = span_y / 400 or 1.0
    qx = max((max(s for s, _, _ in pts) - min(s for s, _, _ in pts)) / 1400, 1e-9) if pts else 1.0
    seen: set = set()

    def first(s, d, o) -> bool:
        key = (round(s / qx), round((math.log10(d) if log and d > 0 else d) / qy), o)
        return not (key in seen or seen.add(key))
    inl = [(s, d) for s, d, o in pts if not o and first(s, d, o)]
    out = [(s, d) for s, d, o in pts if o and first(s, d, o)]
    if inl:
        ax.scatter([s for s, _ in inl], [d for _, d in inl], s=10, c="#1f77b4", linewidths=0, label="step")
    if out:
        ax.scatter([s for s, _ in out], [d for _, d in out], s=28, c="#d62728", marker="x", linewidths=1.2,
                   label="outlier")
    if median is not None and math.isfinite(median):
        ax.axhline(median / 1e9, color="#555", lw=0.8, ls="--")
    if log:
        ax.set_yscale("log")
        ax.set_ylim(low / 1.5, top * 1.5)
        from matplotlib.ticker import FuncFormatter, NullFormatter

        ax.yaxis.set_major_formatter(FuncFormatter(_power_of_ten))
        ax.yaxis.set_minor_formatter(NullFormatter())
    else:
        ax.set_ylim(0, top * 1.08 or 1.0)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # step numbers: whole, 0-based as the tables
    ax.set_xlabel("step")
    ax.set_ylabel("step time (ms)")
    ax.grid(True, axis="y", color="#e6e6e6", lw=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return _svg(fig)


@_chart_style
def skew_svg(devices: list[str], busy: list[list[float]], steps: list[int] | None = None) -> str:
    """A per-device strip: one row per device, one cell per step, colored by the device's busy
    time over the step's median busy time (``busy[d][k]``, ps; 1 = the median, darker =
    busier, the straggler's row stands out). Device names are the y labels (escaped by the
    SVG writer); the x labels the steps' numbers (``steps[k]``; default k: 0-based, as every
    table and chart)."""
    import numpy as np

    a = np.array(busy, dtype=float) if busy else np.zeros((0, 0))
    med = np.median(a, axis=0) if a.size else a
    ratio = np.divide(a, med, out=np.ones_like(a), where=med > 0) if a.size else a
    nd, ns = a.shape if a.size else (0, 0)
    fig = _new_figure(min(8.4, max(5.0, 3.0 + 0.2 * ns)), max(1.8, 0.9 + 0.22 * nd))
    width = max((len(str(d)) for d in devices), default=4)
    fig.subplots_adjust(left=min(0.45, 0.04 + 0.013 * width), right=0.86, bottom=0.22 + 0.4 / max(nd, 1), top=0.96)
    ax = fig.add_subplot()
    if a.size:
        # vector cells (pcolormesh), not imshow: an image would be an embedded PNG in the SVG
        im = ax.pcolormesh(np.arange(ns + 1) - 0.5, np.arange(nd + 1) - 0.5, np.log2(np.clip(ratio, 1 / 16, 16)),
                           cmap="RdBu_r", vmin=-4, vmax=4, linewidth=0)
        ax.set_ylim(nd - 0.5, -0.5)
        cb = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
        cb.solids.set_rasterized(False)  # matplotlib rasterizes a long colorbar: no image in the SVG
        cb.set_ticks([-4, -2, 0, 2, 4])
        cb.set_ticklabels(["1/16", "1/4", "median", "4x", "16x"])
    ax.set_yticks(range(nd))
    ax.set_yticklabels([str(d) for d in devices])
    ax.set_xticks(range(ns) if ns <= 24 else [])
    labels = [str(int(x)) for x in steps] if steps is not None and len(steps) == ns else [str(k) for k in range(ns)]
    ax.set_xticklabels(labels if ns <= 24 else [])
    ax.set_xlabel("step")
    return _svg(fig)


#: The charts by the name a drawer is asked for.
@_chart_style
def memory_svg(series: list[tuple[list[int], list[int]]], capacity: float | None = None) -> str:
    """Bytes in use over time, one line per allocator (``series[i]`` = (times ps, bytes); x in
    ms from the first event shown, y in GiB), the first allocator's capacity as a dashed line
    when known and within 4x of the peak. Names stay out of the SVG: the legend is HTML."""
    fig = _new_figure(8.0, 2.8)
    fig.subplots_adjust(bottom=0.18)
    ax = fig.add_subplot()
    t0 = min((t[0] for t, _ in series if t), default=0)
    top = 0.0
    for i, (t, v) in enumerate(series):
        if not t:
            continue
        xs = [(x - t0) / 1e9 for x in t]
        ys = [y / (1 << 30) for y in v]
        top = max(top, max(ys))
        ax.step(xs, ys, where="post", lw=1.0, color=_MEM_COLORS[i % len(_MEM_COLORS)])
    if capacity and top and capacity / (1 << 30) <= 4 * top:
        ax.axhline(capacity / (1 << 30), color="#d62728", lw=0.8, ls="--")
        top = max(top, capacity / (1 << 30))
    ax.set_ylim(0, top * 1.08 or 1.0)
    ax.set_xlabel("time (ms, host clock, from the first allocator event)")
    ax.set_ylabel("in use (GiB)")
    ax.grid(True, axis="y", color="#e6e6e6", lw=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return _svg(fig)


#: line colors of :func:`memory_svg`, in allocator order (the HTML legend uses the same)
_MEM_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")

CHARTS = {"memory": memory_svg, "roofline": roofline_svg, "steps": steps_svg, "step_strip": step_strip_svg, "skew": skew_svg}


class InlineCharts:
    """Draws a chart in this process when it is submitted (the library's drawer).

    ``submit(name, *args)`` calls ``CHARTS[name](*args)`` and returns a callable giving its
    result; the errors of the chart function are raised by ``submit``."""

    def submit(self, name: str, *args):
        result = CHARTS[name](*args)
        return lambda: result
