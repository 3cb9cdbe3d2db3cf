"""The HTML report's "communication" section: per-step stacked bars of compute / hidden /
exposed communication / host transfers / idle (averaged over the devices), the overlap table,
and the per-device skew strip of :attr:`Report.stragglers`; values from the report, never computed
from a trace here (sums and means of the report's own per-step rows only)."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

#: segments of the stacked bar, bottom to top, and their colors
SEGMENTS = (("compute (no communication in flight)", "#4e79a7"), ("hidden communication", "#59a14f"),
            ("exposed communication", "#e15759"), ("host transfers", "#edc948"), ("idle", "#d9d9d9"))
CHART_STEPS = 64
#: a chart with fewer points (bars, cells) is a sentence instead
MIN_POINTS = 3


@dataclass
class CommView:
    bars_svg: object = None
    skew_svg: object = None
    legend: list = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    populations: list = field(default_factory=list)
    stragglers: dict | None = None
    steps_shown: int = 0
    n_steps: int = 0
    notes: list = field(default_factory=list)


def comm_view(rep, charts, top: int = 20) -> CommView | None:
    """The section's values (charts submitted to ``charts`` and left pending as callables),
    or None when the report has no overlap section."""
    ov = getattr(rep, "overlap", None)
    if ov is None or ov.steps.height == 0:
        return None
    per = (ov.steps.group_by("step", maintain_order=True)
           .agg(pl.col("compute_ps").mean(), pl.col("hidden_ps").mean(), pl.col("exposed_ps").mean(),
                pl.col("host_ps").mean(), pl.col("idle_ps").mean()).sort("step"))
    shown = per.head(CHART_STEPS)
    series = [(shown["compute_ps"] - shown["hidden_ps"]).to_list(), shown["hidden_ps"].to_list(),
              shown["exposed_ps"].to_list(), shown["host_ps"].to_list(), shown["idle_ps"].to_list()]
    s = ov.summary
    n = max(s["n_steps"] * s["n_devices"], 1)
    tot = [s["compute_ps"] - s["hidden_ps"], s["hidden_ps"], s["exposed_ps"], s["host_ps"], s["idle_ps"]]
    legend = [{"name": nm, "color": c, "time_ps": t / n, "share": t / s["step_ps"] if s["step_ps"] else None}
              for (nm, c), t in zip(SEGMENTS, tot)]
    bars = (charts.submit("steps", series, [c for _, c in SEGMENTS], shown["step"].to_list())
            if shown.height >= MIN_POINTS else None)
    view = CommView(bars_svg=bars, legend=legend, summary=dict(s),
                    populations=ov.populations.head(top).to_dicts(), steps_shown=shown.height, n_steps=per.height,
                    notes=list(ov.notes))
    st = getattr(rep, "stragglers", None)
    if st is not None and st.devices.height:
        d = st.devices.with_columns(
            pl.when(pl.col("host").n_unique() > 1).then(pl.col("host") + ":" + pl.col("device"))
            .otherwise(pl.col("device")).alias("_name"))
        steps = sorted(d["step"].unique().to_list())[:CHART_STEPS]
        names = d["_name"].unique(maintain_order=True).sort().to_list()
        grid = {(r["_name"], r["step"]): r["busy_ps"]
                for r in d.filter(pl.col("step").is_in(steps)).iter_rows(named=True)}  # the charted steps only
        busy = [[float(grid.get((nm, k)) or 0) for k in steps] for nm in names]
        if len(names) * len(steps) >= MIN_POINTS:
            view.skew_svg = charts.submit("skew", names, busy, steps)
        view.stragglers = {"summary": dict(st.summary), "steps": st.steps.head(top).to_dicts(), "notes": list(st.notes)}
    return view


def finish(view: CommView | None) -> CommView | None:
    """Collect the pending charts of ``view``."""
    if view is not None:
        if callable(view.bars_svg):
            view.bars_svg = view.bars_svg()
        if callable(view.skew_svg):
            view.skew_svg = view.skew_svg()
    return view
