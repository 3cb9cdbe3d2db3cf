"""Terminal sections of :attr:`Report.overlap` and :attr:`Report.stragglers`
(:mod:`traceview.analysis.overlap`, :mod:`traceview.analysis.stragglers`); renders, never computes."""

from __future__ import annotations

from rich.console import Console

from traceview.model.units import fmt_pct, fmt_time_ps
from traceview.render.celltable import Table


def _escape(text) -> str:
    from traceview.render.terminal import escape

    return escape(text)


def render_overlap(console: Console, ov, *, top: int) -> None:
    """Communication overlap: per population of collectives / async copies (in flight, hidden,
    exposed) and the per-step partition summed over steps and devices."""
    if ov is None or ov.n_ops == 0:
        return
    console.print()
    s = ov.summary
    console.print(f"[bold]communication overlap[/bold] — {s['n_steps']:,} step(s) on {s['n_devices']} device(s)")
    t = Table()
    for c, j in (("kind", "left"), ("op", "left"), ("shape", "left"), ("n", "right"), ("in flight", "right"),
                 ("hidden", "right"), ("exposed", "right"), ("hidden %", "right"), ("sync", "left")):
        t.add_column(c, justify=j)
    for r in ov.populations.head(top).iter_rows(named=True):
        t.add_row(_escape(r["kind"]), _escape(r["op_name"]), _escape(r["shape"]), f"{r['n']:,}",
                  fmt_time_ps(r["in_flight_ps"]), fmt_time_ps(r["hidden_ps"]), fmt_time_ps(r["exposed_ps"]),
                  fmt_pct(r["hidden_share"]), "sync" if r["sync"] else "async")
    console.print(t)
    console.print("  per population, in flight / hidden / exposed count each op's own window, and windows of "
                  "concurrent ops overlap: the rows do not add up (the per-step line below does)")
    if s["step_ps"]:
        n = max(s["n_steps"] * s["n_devices"], 1)
        part = lambda k: f"{fmt_time_ps(s[k] / n)} ({fmt_pct(s[k] / s['step_ps'])})"
        console.print(f"  per step and device: step {fmt_time_ps(s['step_ps'] / n)} = compute {part('compute_ps')}"
                      f" + exposed communication {part('exposed_ps')} + host transfers {part('host_ps')}"
                      f" + idle {part('idle_ps')}; hidden communication {part('hidden_ps')} (inside compute)")
        console.print(f"  exposed communication share of step time: {fmt_pct(s['exposed_share'])}")
    for n_ in ov.notes:
        console.print(f"  [yellow]note:[/yellow] {_escape(n_)}")


def straggler_label(findings, summary: dict | None = None) -> str:
    """What the summary line calls the device slowest in most steps: "straggler" only when the
    ``straggler-device`` finding named it (its lead and step count passed the rule), else
    "slowest most often" (a 0.0% lead is no straggler; ``findings`` None: not judged); when
    ``summary`` says several devices were slowest in as many steps, that no device was, and
    that the one named has the most waits attributed."""
    tied = (summary or {}).get("tied_devices", 1) or 1
    if tied > 1:
        return f"no device slowest most often ({tied} tied); most waits attributed to"
    named = findings is not None and any(getattr(f, "id", None) == "straggler-device" for f in findings)
    return "straggler" if named else "slowest most often"


def render_stragglers(console: Console, st, *, top: int, findings=None) -> None:
    """Stragglers: per step the slowest device, its lead, the device last at the collectives
    and the waits attributed to it; the summary line (:func:`straggler_label` of ``findings``)."""
    if st is None or not st.summary.get("straggler"):
        return
    console.print()
    s = st.summary
    console.print(f"[bold]stragglers and skew[/bold] — {s['n_steps']:,} step(s), {s['n_devices']} devices")
    t = Table()
    for c, j in (("step", "right"), ("slowest", "left"), ("busy", "right"), ("median busy", "right"),
                 ("lead", "right"), ("last at collectives", "left"), ("waits attributed", "right"),
                 ("all waits", "right")):
        t.add_column(c, justify=j)
    for r in st.steps.head(top).iter_rows(named=True):
        t.add_row(str(r["step"]), _escape(r["slowest"]), fmt_time_ps(r["busy_max_ps"]),
                  fmt_time_ps(r["busy_median_ps"]), fmt_pct(r["lead"]), _escape(r["last_to_arrive"] or "-"),
                  fmt_time_ps(r["attributed_wait_ps"]), fmt_time_ps(r["wait_ps"]))
    console.print(t)
    console.print(f"  {straggler_label(findings, s)} {_escape(s['straggler'])}: slowest in {s['steps_slowest']} of {s['n_steps']} step(s), "
                  f"median lead {fmt_pct(s['lead_median'])} over the median device; the others' collective waits "
                  f"attributed to it {fmt_time_ps(s['attributed_wait_ps'])} of {fmt_time_ps(s['wait_ps'])} "
                  f"({fmt_pct(s['attributed_share'])})")
    for n_ in st.notes:
        console.print(f"  [yellow]note:[/yellow] {_escape(n_)}")
