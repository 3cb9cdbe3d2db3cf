"""HTML rendering of a :class:`traceview.analysis.compare.diff.DiffReport`: a ``<section>`` the HTML report
can include (:func:`diff_section_html`) and a standalone page (:func:`render_diff_page`).

Every string from a trace (op names, shapes, kernel names, source paths, module names,
labels, notes) reaches the page only through jinja2 with autoescaping on. No script, no
external reference. Times are formatted from ps with :func:`traceview.model.units.fmt_time_ps`.
"""

from __future__ import annotations

from functools import lru_cache

from traceview.model.units import fmt_pct, fmt_time_ps, fmt_ratio
from traceview.render.html import _printable
from traceview.render.diff_summary import noise_cell, summary_lines

_SECTION = """\
<section class="tv-diff" id="{{ anchor }}">
<h2>{{ title }}</h2>
<ul class="tv-diff-summary">
{% for line in summary %}<li>{{ line }}</li>
{% endfor %}</ul>
{% if kernels %}
<h3>Kernels whose configuration changed (read off their names)</h3>
<table class="tv-diff-kernels">
<thead><tr><th>kernel</th><th>base</th><th>treatment</th><th>change</th><th>invocations</th><th>traced events</th><th>self time</th></tr></thead>
<tbody>
{% for k in kernels %}<tr><td>{{ k.kernel_id }}</td><td>{{ k.names_base|join(", ") }}</td><td>{{ k.names_treatment|join(", ") }}</td>
<td>{{ k.changes }}</td><td class="num">{{ k.invocations_base|num }} → {{ k.invocations_treatment|num }}</td>
<td class="num">{{ k.events_base|num }} → {{ k.events_treatment|num }}</td>
<td class="num">{{ k.self_ps_base|t }} → {{ k.self_ps_treatment|t }}</td></tr>
{% endfor %}</tbody></table>
{% endif %}
{% if families %}
<h3>Op families</h3>
<table class="tv-diff-families">
<thead><tr><th>family</th><th>base</th><th>treatment</th><th>Δ</th><th>share base</th><th>share treatment</th></tr></thead>
<tbody>
{% for f in families %}<tr><td>{{ f.family }}</td><td class="num">{{ f.self_ps_base|t }}</td><td class="num">{{ f.self_ps_treatment|t }}</td>
<td class="num">{{ f.delta_self_ps|dt }}</td><td class="num">{{ f.share_base|pct }}</td><td class="num">{{ f.share_treatment|pct }}</td></tr>
{% endfor %}</tbody></table>
{% endif %}
<h3>Populations — top {{ rows|length }} of {{ n_rows }} by |Δ self time|</h3>
<p class="tv-note">Matched by (op kind, shape signature, HLO fingerprint without instruction names), not by XLA's names.</p>
<table class="tv-diff-populations">
<thead><tr><th>#</th><th>status</th><th>op</th><th>shape</th><th>occurrences</th><th>self time</th><th>Δ</th><th>total ratio</th><th title="median ratio of the self time per step (per occurrence where marked) in its rank interval">change [noise interval]</th><th>notes</th></tr></thead>
<tbody>
{% for r in rows %}<tr class="tv-{{ r.status }}"><td class="num">{{ loop.index }}</td><td>{{ r.status }}</td><td>{{ r.label }}</td>
<td class="shape">{{ r.shape_text }}</td><td class="num">{{ r.occ }}</td><td class="num">{{ r.self_ps_base|t }} → {{ r.self_ps_treatment|t }}</td>
<td class="num">{{ r.delta_self_ps|dt }}</td><td class="num">{{ r.ratio }}</td><td class="num{% if r.within_noise %} tv-noise{% endif %}">{{ r.noise_text }}</td><td>{{ r.notes|join("; ") }}</td></tr>
{% endfor %}</tbody></table>
{% if source_changes %}
<h3>Source attribution changed</h3>
<ul>{% for s in source_changes %}<li>{{ s.label }} {{ s.shape }}: {{ s.source_base }} → {{ s.source_treatment }}</li>
{% endfor %}</ul>
{% endif %}
{% if notes %}
<h3>Notes</h3>
<ul class="tv-diff-notes">{% for n in notes %}<li>{{ n }}</li>
{% endfor %}</ul>
{% endif %}
</section>
"""

_PAGE = """\
<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em 0;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 6px;vertical-align:top;text-align:left}
td.num{text-align:right;white-space:nowrap} td.shape{font-family:monospace;font-size:12px;max-width:40em;word-break:break-all}
tr.tv-appeared td{background:#eef9ee} tr.tv-vanished td{background:#fbeeee}
.tv-note{color:#555;font-size:13px} td.tv-noise{color:#888} .tv-diff-notes li{color:#8a5a00}
</style></head>
<body>
{{ section }}
</body></html>
"""


@lru_cache(maxsize=1)
def _env():
    import jinja2

    env = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined, finalize=_printable)
    env.filters["t"] = fmt_time_ps
    env.filters["pct"] = fmt_pct
    env.filters["num"] = lambda v: "-" if v is None else f"{v:,}"
    env.filters["dt"] = lambda v: "-" if v is None else ("+" if v > 0 else "") + fmt_time_ps(v)
    return env


def _context(d, top: int, title: str, anchor: str) -> dict:
    from traceview.render.diff_terminal import match_notes, population_label, shape_change, short_shape

    rows = []
    for r in d.populations.head(top).iter_rows(named=True):
        notes = match_notes(r)
        if r["overhead_note"]:
            notes.append(r["overhead_note"])
        shape = shape_change(r, 200, 120)
        ob, ot = r["occurrences_base"], r["occurrences_treatment"]
        rows.append(dict(r, label=population_label(r), shape_text=shape, notes=notes,
                         occ=f"{'-' if ob is None else f'{ob:,}'} → {'-' if ot is None else f'{ot:,}'}",
                         ratio="-" if r["self_ratio"] is None else f"{fmt_ratio(r['self_ratio'])}x",
                         noise_text=noise_cell(r), within_noise=r.get("noise") in ("within noise", "no change")))
    sc = [dict(label=population_label(r), shape=short_shape(r["shape"], 120), source_base=r["source_base"] or "?",
               source_treatment=r["source_treatment"] or "?") for r in d.source_changes().head(top).iter_rows(named=True)]
    return {"title": title, "anchor": anchor, "summary": summary_lines(d), "kernels": d.kernel_changes().to_dicts(),
            "families": d.families.to_dicts(), "rows": rows, "n_rows": d.populations.height, "source_changes": sc,
            "notes": list(d.notes)}


def diff_section_html(d, *, top: int = 30, title: str = "Diff: base → treatment", anchor: str = "diff") -> str:
    """A self-contained ``<section class="tv-diff">`` fragment for a diff: summary lines,
    kernel configuration changes, families, the top ``top`` populations by |Δ self time|,
    source changes and notes. All text escaped (jinja2 autoescape). Uses only the CSS
    classes ``tv-diff*``, ``tv-appeared``, ``tv-vanished``, ``num``, ``shape``, ``tv-note``."""
    return _env().from_string(_SECTION).render(**_context(d, top, title, anchor))


def render_diff_page(d, *, top: int = 30, title: str = "traceview diff") -> str:
    """A standalone HTML page holding :func:`diff_section_html` (inline CSS, no script)."""
    from markupsafe import Markup

    section = Markup(diff_section_html(d, top=top, title=title))
    return _env().from_string(_PAGE).render(title=title, section=section)
