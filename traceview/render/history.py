"""Rendering of a :class:`traceview.analysis.compare.history.History`: the trend table as plain text,
JSON, and a standalone HTML page with a step-time trend chart (inline SVG, matplotlib).

Every string from a trace (run names, modules, kernel names, families, finding ids) goes
through :func:`traceview.model.naming.safe_line` in text and through jinja2's autoescape in
HTML; none reaches the SVG (its x labels are run numbers). Times from ps.
"""

from __future__ import annotations

from functools import lru_cache

from traceview.model.naming import safe_line
from traceview.model.units import fmt_pct, fmt_time_ps, fmt_ratio
from traceview.render.charts import _chart_style, _new_figure, _svg

#: colour of a run's point by verdict
VERDICT_COLORS = {"baseline": "#7f7f7f", "within noise": "#1f77b4", "no interval": "#bcbd22", "below threshold": "#9467bd",
                  "noise unknown": "#e377c2", "no change": "#17becf", "inconclusive": "#bcbd22",
                  "regression": "#d62728", "improvement": "#2ca02c", "no comparable run": "#ff7f0e"}


def _change(r) -> str:
    c = r.change
    if c is None or c.ratio is None:
        return "-"
    if c.lo is None:
        return f"{fmt_ratio(c.ratio)}x (no interval)"
    mark = "?" if c.significant is None else "" if c.significant else "~"
    return f"{mark}{fmt_ratio(c.ratio)}x [{fmt_ratio(c.lo)}-{fmt_ratio(c.hi)}]"


def _families(r) -> str:
    return ", ".join(f"{f['family']} {fmt_time_ps(f['self_ps'])} ({fmt_pct(f['share'])})" for f in r.families)


def _kernels(r) -> str:
    return ", ".join(sorted({k["config"] for k in r.kernels if k["config"]}))


def rows(h) -> list[dict]:
    """One display row per run: number, run, time, steps, work (program and batch and token
    buckets), median/p10/p90, change,
    verdict, families, kernel configurations, findings (strings escaped by the caller)."""
    out = []
    for i, r in enumerate(h.runs, 1):
        d = r.to_dict()
        out.append({"n": i, "run": r.name, "directory": r.directory, "steps": r.n_steps,
                    "work": d.get("work") or getattr(r, "program", None) or "-",
                    "median": fmt_time_ps(d["median_step_ps"]),
                    "spread": f"{fmt_time_ps(d['p10_step_ps'])}-{fmt_time_ps(d['p90_step_ps'])}",
                    "baseline": r.baseline or "-", "change": _change(r), "verdict": r.verdict,
                    "families": _families(r), "kernels": _kernels(r),
                    "findings": "-" if r.findings is None else (", ".join(r.findings) or "none")})
    return out


def history_text(h, width: int | None = None) -> str:
    """The trend table and the regression verdict lines as plain text: every cell whole, one
    line per row (``width`` None), or laid out for ``width`` columns (lines wrapped, the
    table's run, median, change and verdict on the row and its other cells folded below it,
    :func:`~traceview.render.foldtable.print_table`)."""
    rs = rows(h)
    head = ["#", "run", "steps", "median step", "p10-p90", "work", "vs", "change (interval)", "verdict", "kernels"]
    body = [[str(r["n"]), safe_line(r["run"]), str(r["steps"]), r["median"], r["spread"], safe_line(r["work"]),
             safe_line(r["baseline"]), r["change"], r["verdict"], safe_line(r["kernels"]) or "-"] for r in rs]
    if width is not None:
        return _history_at(h, rs, head, body, width)
    width = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    lines = _head_lines(h, rs)
    for x in [head] + body:
        lines.append("  ".join(v.rjust(w) if i in (0, 2, 3) else v.ljust(w) for i, (v, w) in enumerate(zip(x, width)))
                     .rstrip())
    return "\n".join(lines + _tail_lines(h, rs)) + "\n"


def _head_lines(h, rs) -> list[str]:
    lines = [f"traceview history — {len(rs)} run(s), oldest first; each against "
             f"{_AGAINST if h.baseline == 'previous' else safe_line(h.baseline)}; "
             f"regression: a slowdown "
             f"of the step time whose whole {h.level:.0%} interval ({safe_line(METHOD_NOTE)}) is at least "
             f"{h.threshold:.0%} and beyond the run-to-run noise",
             "step time: per step index, its slowest device's duration (a step ends when its last device does; "
             "analyze's step median counts every device's steps)"]
    bands = sorted({r.change.noise_source for r in h.runs if r.change is not None and r.change.noise_source})
    if bands:
        lines.append("run-to-run noise: " + "; ".join(safe_line(b) for b in bands))
    return lines


def _history_at(h, rs, head, body, width: int) -> str:
    """:func:`history_text` laid out for ``width`` columns."""
    import io

    from traceview.render.console import Console
    from traceview.render.foldtable import Column, print_table

    buf = io.StringIO()
    con = Console(file=buf, width=width, color_system=None, soft_wrap=False, highlight=False, emoji=False)
    for ln in _head_lines(h, rs):
        con.print(ln, markup=False)
    keep = {"#", "run", "median step", "change (interval)", "verdict"}
    print_table(con, None, [Column(c, "right" if c in ("#", "steps", "median step") else "left", keep=c in keep,
                                   cut=1 if c == "run" else 0) for c in head], body, whole="--format json")
    for ln in _tail_lines(h, rs):
        con.print(ln, markup=False)
    return buf.getvalue()


def _tail_lines(h, rs) -> list[str]:
    lines = ["top families per step:"]
    for r in rs:
        lines.append(f"  {r['n']} {safe_line(r['families']) or '-'}; findings: {safe_line(r['findings'])}")
    reg = h.regressions()
    lines.append(f"regressions: {len(reg)}" + (": " + ", ".join(safe_line(r.name) for r in reg) if reg else ""))
    unj = h.unjudged() if hasattr(h, "unjudged") else []
    if unj:  # what --fail-on-regression also fails on
        lines.append(f"slowdowns that cannot be ruled out: {len(unj)}: " + ", ".join(safe_line(r.name) for r in unj))
    inc = h.incomparable() if hasattr(h, "incomparable") else []
    if inc:
        lines.append("no comparable run (step program unknown, or not the named baseline's work or hardware; not judged): " + ", ".join(
            f"{safe_line(r.name)} ({safe_line(getattr(r, 'program', None) or 'unknown program')})" for r in inc))
    for r, b in (h.across_configs() if hasattr(h, "across_configs") else []):
        lines.append(f"other kernel configuration: {safe_line(r.name)} ({safe_line(r.module)}) against "
                     f"{safe_line(b.name)} ({safe_line(b.module)}): the same batch and token buckets, so the change "
                     "is the configuration's")
    named = hasattr(h, "named_baseline") and h.named_baseline() is not None
    for r, p in (h.hardware_changes() if hasattr(h, "hardware_changes") else []):
        lines.append(f"other hardware: {_hardware_change(r, p, named)}")
    for r in h.runs:  # what analyze would warn of, read (a host from its JSON, one trace under two names)
        for w in getattr(r, "warnings", None) or []:
            lines.append(f"warning: {safe_line(r.name)}: {safe_line(w)}")
    for name, why in getattr(h, "skipped", None) or []:
        lines.append(f"skipped: {safe_line(name)}: {safe_line(why)}")
    return lines


def _hardware_change(r, p, named: bool = False) -> str:
    """A :meth:`History.hardware_changes` pair in words (names escaped by the caller in HTML);
    ``named``: ``p`` is the named baseline."""
    from traceview.analysis.compare.diff import hardware_text

    if named:
        return (f"{safe_line(r.name)} ran on {hardware_text(r.hardware)}, the baseline ({safe_line(p.name)}) on "
                f"{hardware_text(p.hardware)}: not compared (a step time on other devices is no regression)")
    return (f"{safe_line(r.name)} ran on {hardware_text(r.hardware)}, the previous run of its work "
            f"({safe_line(p.name)}) on {hardware_text(p.hardware)}: not compared with it (a step time on "
            "other devices is no regression), only with runs on its own hardware")


#: the rule's baseline when none is named
_AGAINST = "the previous run of its work (step program, batch and token buckets)"

#: the method, as the table's header names it
METHOD_NOTE = "Hodges-Lehmann ratio of the per-step durations, exact rank interval"


@_chart_style
def trend_svg(medians: list[float | None], p10: list[float | None], p90: list[float | None],
              colors: list[str], programs: list | None = None) -> str:
    """Median step time per run (ms) with its p10-p90 bar, one point per run (x: run number),
    coloured by verdict; a line joins the runs of one work (``programs``: per run, its step
    program and work tokens);
    a log time axis when the medians span more than 10x. No names in the SVG."""
    n = len(medians)
    fig = _new_figure(min(8.4, max(5.0, 3.0 + 0.3 * n)), 3.2)
    ax = fig.add_subplot()
    for k, (m, lo, hi, c) in enumerate(zip(medians, p10, p90, colors), 1):
        if m is None:
            continue
        ax.plot([k, k], [(lo or m) / 1e9, (hi or m) / 1e9], color=c, lw=1.2)
        ax.plot([k], [m / 1e9], "o", color=c, ms=5)
    ys = [v / 1e9 for v in medians if v is not None]
    programs = programs if programs is not None else [""] * n
    for prog in dict.fromkeys(programs):  # one line per work, never across programs or buckets
        ks = [k for k, (v, p) in enumerate(zip(medians, programs), 1) if v is not None and p == prog]
        if prog is not None and len(ks) > 1:
            ax.plot(ks, [medians[k - 1] / 1e9 for k in ks], color="#bbbbbb", lw=0.8, zorder=0)
    top = max([v / 1e9 for v in p90 if v is not None] + ys + [0.0])
    low = min([v / 1e9 for v in p10 if v is not None and v > 0] + [y for y in ys if y > 0] + [top])
    if low > 0 and top / low > 10:
        ax.set_yscale("log")
        ax.set_ylim(low / 1.3, top * 1.3)
    else:
        ax.set_ylim(0, top * 1.1 or 1.0)
    ax.set_xlim(0.5, n + 0.5)
    ax.set_xticks(range(1, n + 1))
    ax.set_xlabel("run (oldest first)")
    ax.set_ylabel("step time (ms): median, p10-p90")
    ax.grid(True, axis="y", color="#e6e6e6", lw=0.6)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return _svg(fig)


_PAGE = """\
<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>traceview history</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em 0;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 6px;vertical-align:top;text-align:left}
td.num{text-align:right;white-space:nowrap} .tv-note{color:#555;font-size:13px}
tr.tv-regression td{background:#fbeeee} tr.tv-improvement td{background:#eef9ee}
.tv-wide{overflow-x:auto;max-width:100%} td.tv-long{overflow-wrap:anywhere;min-width:14em;max-width:28em}
td.tv-name{white-space:nowrap}
</style></head>
<body>
<h1>traceview history</h1>
<p class="tv-note">{{ runs|length }} run(s), oldest first; each against {{ against }}. A regression is a slowdown
of the step time whose whole {{ level }} interval ({{ method }}) is at least {{ threshold }} and beyond the run-to-run noise; runs are compared
only with runs of the same work (step program, batch and token buckets) on the same hardware.</p>
{{ chart }}
<p class="tv-note">Colours: {% for v, c in colors %}<span style="color:{{ c }}">&#9679; {{ v }}</span> {% endfor %}</p>
{% for a in across %}<p class="tv-note">other kernel configuration: {{ a }}</p>
{% endfor %}{% for a in warned %}<p class="tv-note">warning: {{ a }}</p>{% endfor %}{% for a in hardware %}<p class="tv-note">other hardware: {{ a }}</p>
{% endfor %}<div class="tv-wide"><table>
<thead><tr><th>#</th><th>run</th><th>steps</th><th>median step</th><th>p10-p90</th><th>work</th><th>vs</th><th>change (interval)</th>
<th>verdict</th><th>top families per step</th><th>kernel configurations</th><th>findings</th></tr></thead>
<tbody>
{% for r in runs %}<tr class="tv-{{ r.verdict|replace(' ', '-') }}"><td class="num">{{ r.n }}</td><td class="tv-name" title="{{ r.directory }}">{{ r.run }}</td>
<td class="num">{{ r.steps }}</td><td class="num">{{ r.median }}</td><td class="num">{{ r.spread }}</td><td>{{ r.work }}</td><td class="tv-name">{{ r.baseline }}</td>
<td class="num">{{ r.change }}</td><td>{{ r.verdict }}</td><td class="tv-long">{{ r.families }}</td><td>{{ r.kernels }}</td><td class="tv-long">{{ r.findings }}</td></tr>
{% endfor %}</tbody></table></div>
</body></html>
"""


@lru_cache(maxsize=1)
def _env():
    import jinja2

    from traceview.render.html import _printable

    return jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, finalize=_printable)


def history_html(h) -> str:
    """A standalone HTML page: the trend chart and the table (inline CSS and SVG, no script)."""
    from markupsafe import Markup

    ds = [r.to_dict() for r in h.runs]
    svg = trend_svg([d["median_step_ps"] for d in ds], [d["p10_step_ps"] for d in ds],
                    [d["p90_step_ps"] for d in ds], [VERDICT_COLORS.get(r.verdict, "#7f7f7f") for r in h.runs],
                    [d["work"] for d in ds])
    return _env().from_string(_PAGE).render(
        runs=rows(h), chart=Markup(svg), level=f"{h.level:.0%}", threshold=f"{h.threshold:.0%}", method=METHOD_NOTE,
        against=_AGAINST if h.baseline == "previous" else h.baseline, colors=list(VERDICT_COLORS.items()),
        across=[f"{r.name} ({r.module}) against {b.name} ({b.module}): the same batch and token buckets, so the "
                "change is the configuration's" for r, b in h.across_configs()],
        hardware=[_hardware_change(r, p, h.named_baseline() is not None) for r, p in h.hardware_changes()],
        warned=[f"{r.name}: {w}" for r in h.runs for w in getattr(r, "warnings", None) or []])


def history_json(h) -> str:
    """:meth:`History.to_dict` as indented JSON with a final newline."""
    from traceview.render.json import dumps

    return dumps(h.to_dict())


def history_jsonl(h) -> str:
    """One JSON line per run (:meth:`RunSummary.to_dict` plus the rule's settings), for
    ``--append``."""
    import json

    from traceview.render.json import _clean

    out = []
    for r in h.runs:
        d = dict(r.to_dict(), threshold=h.threshold, level=h.level, rule_baseline=h.baseline)
        out.append(json.dumps(_clean(d, "$", {}), allow_nan=False, default=str))
    return "\n".join(out) + "\n"
