"""A :class:`~traceview.analysis.compare.ladder.Ladder` as terminal text, JSON and a standalone,
offline HTML page with its plot (inline SVG drawn by matplotlib; no trace string in the SVG:
the legend is HTML). Computes nothing."""

from __future__ import annotations

import polars as pl
from rich.console import Console

from traceview.model.units import fmt_pct, fmt_time_ps, fmt_ratio

#: family colors of the plot and its HTML legend (cycled)
PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d37295"]


def _xs(lad) -> list[float]:
    return lad.points["x"].to_list()


def _x(v: float) -> str:
    return f"{v:g}"


def _cell(lad, fam: str, x: float, col: str):
    hit = lad.table.filter((pl.col("family") == fam) & (pl.col("x") == x))
    return hit[col][0] if hit.height else None


def _intensity(lad, fam: str, x: float) -> str:
    """``"42.1 memory"``, ``"<=150 unknown"`` (an upper bound: some of the family's time has
    FLOPs but no byte count) or "-" for one family at one point."""
    v = _cell(lad, fam, x, "intensity")
    if v is None:
        return "-"
    up = "<=" if _cell(lad, fam, x, "no_bytes_share") else ""
    return f"{up}{v:.3g} {_cell(lad, fam, x, 'bound_by')}"


def _factor(v) -> str:
    return "-" if v is None else f"{fmt_ratio(v)}x"


def crossing_text(r: dict) -> str:
    """``"memory -> compute between 256 and 512 (at ~362)"`` or "" for a scaling row."""
    if not r.get("crosses"):
        return ""
    a, b = r["cross_between"]
    return f"{r['crosses']} between {_x(a)} and {_x(b)} (at ~{r['cross_x']:.3g})"


def render_ladder(console: Console, lad) -> None:
    """Print the points, the time per step of each family at each point with its factor per
    doubling, the intensities against the ridge point and the crossings."""
    from traceview.render.terminal import escape

    xs = _xs(lad)
    console.print(f"[bold]traceview ladder[/bold] — {len(xs)} profile(s), {lad.x_name} "
                  + ", ".join(_x(x) for x in xs))
    for p in lad.points.iter_rows(named=True):
        cov = (f"families {fmt_time_ps(p['families_ps'])} of {fmt_time_ps(p['step_ps'])} per step"
               if p["step_ps"] else "no steps")
        console.print(f"  {lad.x_name} {_x(p['x'])}: {escape(p['label'])} ({escape(p['x_source'])}); "
                      f"{p['n_steps']} steps ({escape(p['window'] or '-')}); {cov}")
    from traceview.model.naming import safe_line
    from traceview.render.foldtable import Column, print_table

    xcols = [Column(f"{lad.x_name} {_x(x)}", "right") for x in xs]
    rows = []
    for r in lad.scaling.iter_rows(named=True):
        cells = [safe_line(r["family"])]
        for x in xs:
            v = _cell(lad, r["family"], x, "time_ps")
            sh = _cell(lad, r["family"], x, "share")
            cells.append("-" if v is None else f"{fmt_time_ps(v)} ({fmt_pct(sh)})")
        cells += [_factor(r["factor_per_doubling"]), " ".join(_factor(f) for f in (r["factors"] or [])),
                  _factor(r["flops_per_doubling"])]
        rows.append(cells)
    print_table(console, f"time per step by family at each {lad.x_name}",
                [Column("family"), *xcols, Column("per doubling", "right", keep=False),
                 Column("between points", "right", keep=False), Column("FLOPs per doubling", "right", keep=False)],
                rows)
    ridge = f"ridge point {lad.ridge:.3g} FLOP/byte" if lad.ridge else "no ridge point (no peaks)"
    rows = []
    for r in lad.scaling.iter_rows(named=True):
        cells = [safe_line(r["family"])]
        for x in xs:
            cells.append(_intensity(lad, r["family"], x))
        cells.append(crossing_text(r) or "-")
        rows.append(cells)
    print_table(console, f"arithmetic intensity (FLOP/byte) and bound by; {ridge}",
                [Column("family"), *xcols, Column("crosses the ridge", keep=False)], rows)
    console.print("  per doubling: 2^slope of log2(time per step) against log2(" + lad.x_name
                  + "): 2.00x is linear, 1.00x flat")
    for n in lad.notes:
        console.print(f"  [yellow]note:[/yellow] {escape(n)}")


def render_ladder_text(lad, *, width: int) -> str:
    """:func:`render_ladder` as plain text ``width`` columns wide (for a file)."""
    import io

    from traceview.render.console import Console as PlainConsole

    buf = io.StringIO()
    render_ladder(PlainConsole(file=buf, width=width, force_terminal=False, color_system=None, soft_wrap=False, emoji=False), lad)
    return buf.getvalue()


def ladder_payload(lad, warnings=()) -> dict:
    """The JSON object: x_name, ridge, points, table (per family and point), scaling (per
    family), notes, warnings (the profiles' reading warnings, each naming its file). Times in ps."""
    return {"x_name": lad.x_name, "ridge": lad.ridge, "units": "ps", "points": lad.points.to_dicts(),
            "table": lad.table.to_dicts(), "scaling": lad.scaling.to_dicts(), "notes": list(lad.notes),
            "warnings": list(warnings)}


def ladder_json(lad, warnings=()) -> str:
    """:func:`ladder_payload` as indented JSON text with a final newline."""
    from traceview.render.json import dumps

    return dumps(ladder_payload(lad, warnings))


def _plot(series: list, ridge, x_name: str) -> str | None:
    """Two log-log panels: time per step (ms) and intensity (FLOP/byte, ridge dashed) against
    x, one line per family in ``series`` [(color, xs, times_ps, intensities)]."""
    from traceview.render.charts import _chart_style, _new_figure, _svg

    @_chart_style
    def draw():
        fig = _new_figure(9.0, 3.4)
        fig.subplots_adjust(left=0.08, right=0.98, bottom=0.16, top=0.93, wspace=0.28)
        a1, a2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
        drawn = False
        for color, xs, ts, ins in series:
            pts = [(x, t * 1e-9) for x, t in zip(xs, ts) if t and t > 0]
            if pts:
                a1.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=color)
                drawn = True
            pi = [(x, i) for x, i in zip(xs, ins) if i and i > 0]
            if pi:
                a2.plot([p[0] for p in pi], [p[1] for p in pi], marker="o", color=color)
        if not drawn:
            return None
        if ridge:
            a2.axhline(ridge, color="#222", linestyle="--", linewidth=1)
        for ax, label in ((a1, "time per step (ms)"), (a2, "FLOP/byte (dashed: ridge point)")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel(x_name)
            ax.set_title(label, fontsize=9)
            ax.grid(True, which="major", alpha=0.3)
        xs_all = sorted({x for _, xs, _, _ in series for x in xs})
        for ax in (a1, a2):
            ax.set_xticks(xs_all)
            ax.set_xticklabels([f"{x:g}" for x in xs_all])
        return _svg(fig)

    return draw()


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>traceview ladder</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#222;margin:24px auto;max-width:1200px;padding:0 16px}
table{border-collapse:collapse;margin:8px 0}th,td{padding:3px 9px;border-bottom:1px solid #e5e5e5;text-align:left}
td.r,th.r{text-align:right}code{font:12px ui-monospace,Menlo,monospace}.muted{color:#666}.sw{display:inline-block;width:10px;height:10px;margin-right:4px}
.legend span{margin-right:14px}svg.chart{max-width:100%;height:auto}
</style></head><body>
<h1>traceview ladder</h1>
<p class="muted">{{ points|length }} profile(s); {{ x_name }} {{ xs|join(", ") }}; per step figures over each profile's steps; {{ ridge_text }}.</p>
<table><tr><th>{{ x_name }}</th><th>profile</th><th>{{ x_name }} from</th><th class="r">steps</th><th class="r">step</th><th class="r">families</th></tr>
{% for p in points %}<tr><td class="r">{{ p.x }}</td><td><code>{{ p.label }}</code></td><td>{{ p.src }}</td><td class="r">{{ p.n_steps }}</td><td class="r">{{ p.step }}</td><td class="r">{{ p.fam }}</td></tr>
{% endfor %}</table>
{% if svg %}{{ svg|safe }}
<div class="legend">{% for f in fams %}<span><span class="sw" style="background:{{ f.color }}"></span>{{ f.family }}</span>{% endfor %}</div>{% endif %}
<h2>Time per step by family</h2>
<table><tr><th>family</th>{% for x in xs %}<th class="r">{{ x_name }} {{ x }}</th>{% endfor %}<th class="r">per doubling</th><th class="r">between points</th><th class="r">FLOPs per doubling</th></tr>
{% for f in fams %}<tr><td><span class="sw" style="background:{{ f.color }}"></span><code>{{ f.family }}</code></td>{% for c in f.times %}<td class="r">{{ c }}</td>{% endfor %}<td class="r">{{ f.factor }}</td><td class="r">{{ f.factors }}</td><td class="r">{{ f.ffactor }}</td></tr>
{% endfor %}</table>
<h2>Arithmetic intensity and bound by</h2>
<table><tr><th>family</th>{% for x in xs %}<th class="r">{{ x_name }} {{ x }}</th>{% endfor %}<th>crosses the ridge</th></tr>
{% for f in fams %}<tr><td><code>{{ f.family }}</code></td>{% for c in f.ints %}<td class="r">{{ c }}</td>{% endfor %}<td>{{ f.crossing }}</td></tr>
{% endfor %}</table>
<p class="muted">per doubling: 2<sup>slope</sup> of log2(time per step) against log2({{ x_name }}): 2.00x is linear, 1.00x flat.</p>
{% for n in notes %}<p class="muted">note: {{ n }}</p>{% endfor %}
</body></html>
"""


def render_ladder_page(lad) -> str:
    """The standalone HTML page: points, the plot, the time and intensity tables. Every string
    from a trace goes through jinja2's autoescape; no script, no network reference."""
    from traceview.render.html import _env

    xs = _xs(lad)
    fams, series = [], []
    for i, r in enumerate(lad.scaling.iter_rows(named=True)):
        color = PALETTE[i % len(PALETTE)]
        ts = [_cell(lad, r["family"], x, "time_ps") for x in xs]
        ins = [_cell(lad, r["family"], x, "intensity") for x in xs]
        series.append((color, xs, ts, ins))
        fams.append({"family": r["family"], "color": color,
                     "times": ["-" if t is None else fmt_time_ps(t) for t in ts],
                     "ints": [_intensity(lad, r["family"], x) for x in xs],
                     "factor": _factor(r["factor_per_doubling"]),
                     "factors": " ".join(_factor(f) for f in (r["factors"] or [])),
                     "ffactor": _factor(r["flops_per_doubling"]),
                     "crossing": crossing_text(r) or "-"})
    points = [{"x": _x(p["x"]), "label": p["label"], "src": p["x_source"], "n_steps": p["n_steps"],
               "step": "-" if p["step_ps"] is None else fmt_time_ps(p["step_ps"]),
               "fam": "-" if p["families_ps"] is None else fmt_time_ps(p["families_ps"])}
              for p in lad.points.iter_rows(named=True)]
    ridge_text = f"ridge point {lad.ridge:.3g} FLOP/byte" if lad.ridge else "no ridge point (no peaks known)"
    return _env().from_string(_PAGE).render(points=points, xs=[_x(x) for x in xs], x_name=lad.x_name, fams=fams,
                                            svg=_plot(series, lad.ridge, lad.x_name), ridge_text=ridge_text,
                                            notes=list(lad.notes))
