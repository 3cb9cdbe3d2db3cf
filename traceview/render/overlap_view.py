"""Terminal sections of :attr:`Report.overlap` and :attr:`Report.stragglers`
(:mod:`traceview.analysis.communication.overlap`, :mod:`traceview.analysis.communication.stragglers`); renders, never computes."""

from __future__ import annotations

from rich.console import Console

from traceview.model.units import fmt_pct, fmt_time_ps
from traceview.render.foldtable import Column, print_table


def _escape(text) -> str:
    from traceview.render.terminal import escape

    return escape(text)


def plain(text) -> str:
    from traceview.render.terminal import plain as _plain

    return _plain(text)


def render_overlap(console: Console, ov, *, top: int) -> None:
    """Communication overlap: per population of collectives / async copies (in flight, hidden,
    exposed) and the per-step partition summed over steps and devices."""
    if ov is None or ov.n_ops == 0:
        return
    console.print()
    s = ov.summary
    console.print(f"[bold]communication overlap[/bold] — {s['n_steps']:,} step(s) on {s['n_devices']} device(s)")
    cols = [Column("kind"), Column("op", cut=2), Column("shape", cut=1), Column("n", "right"),
            Column("in flight", "right", keep=False), Column("hidden", "right", keep=False), Column("exposed", "right"),
            Column("hidden %", "right"), Column("sync", keep=False, label="")]
    rows = [[plain(r["kind"]), plain(r["op_name"]), plain(r["shape"]), f"{r['n']:,}", fmt_time_ps(r["in_flight_ps"]),
             fmt_time_ps(r["hidden_ps"]), fmt_time_ps(r["exposed_ps"]), fmt_pct(r["hidden_share"]),
             "sync" if r["sync"] else "async"] for r in ov.populations.head(top).iter_rows(named=True)]
    print_table(console, None, cols, rows)
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
    cols = [Column("step", "right"), Column("slowest", cut=1), Column("busy", "right"),
            Column("median busy", "right", keep=False), Column("lead", "right"),
            Column("last at collectives", cut=2), Column("waits attributed", "right"),
            Column("all waits", "right", keep=False)]
    rows = [[str(r["step"]), plain(r["slowest"]), fmt_time_ps(r["busy_max_ps"]), fmt_time_ps(r["busy_median_ps"]),
             fmt_pct(r["lead"]), plain(r["last_to_arrive"] or "-"), fmt_time_ps(r["attributed_wait_ps"]),
             fmt_time_ps(r["wait_ps"])] for r in st.steps.head(top).iter_rows(named=True)]
    print_table(console, None, cols, rows, fold_from=0)
    console.print(f"  {straggler_label(findings, s)} {_escape(s['straggler'])}: slowest in {s['steps_slowest']} of {s['n_steps']} step(s), "
                  f"median lead {fmt_pct(s['lead_median'])} over the median device; the others' collective waits "
                  f"attributed to it {fmt_time_ps(s['attributed_wait_ps'])} of {fmt_time_ps(s['wait_ps'])} "
                  f"({fmt_pct(s['attributed_share'])})")
    for n_ in st.notes:
        console.print(f"  [yellow]note:[/yellow] {_escape(n_)}")
