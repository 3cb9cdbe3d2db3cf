"""Terminal rendering of the phases section (:class:`~traceview.analysis.steps.phases.Phases`)."""

from __future__ import annotations

from rich.console import Console
from traceview.render.celltable import Table

from traceview.model.units import fmt_pct, fmt_rate, fmt_time_ps


def render_phases(console: Console, ph, *, top: int, escape) -> None:
    """Print the phases: per phase the steps, step time, share of op time, MFU, MBU and
    tokens/s; the top families of each phase; the first ``top`` steps with their label and
    why; the notes. Nothing when ``ph`` is None or has no steps."""
    if ph is None or ph.steps.height == 0:
        return
    console.print()
    console.print(f"[bold]phases[/bold] — {escape(ph.label_line())}; MFU counts {escape(ph.flops_source)}")
    from traceview.render.foldtable import Column, print_table
    from traceview.render.terminal import plain

    cols = [Column("phase"), Column("steps", "right"), Column("median step", "right"), Column("p10-p90", "right"),
            Column("executions", "right", keep=False), Column("median exec.", "right", keep=False),
            Column("program time", "right", keep=False), Column("MFU", "right"), Column("MBU", "right"),
            Column("tokens/s", "right")]
    rows = []
    for r in ph.summary.iter_rows(named=True):
        rows.append([plain(r["phase"]), f"{r['window_steps']:,} of {r['steps']:,}", fmt_time_ps(r["median_ps"]),
                     f"{fmt_time_ps(r['p10_ps'])} - {fmt_time_ps(r['p90_ps'])}" if r["window_steps"] else "-",
                     "-" if r["executions"] is None else f"{r['executions']:,}", fmt_time_ps(r["exec_median_ps"]),
                     fmt_pct(r["op_share"]),
                     fmt_pct(r["mfu"]), fmt_pct(r["mbu"]), fmt_rate(r["tokens_per_s"], "tok/s").replace(" tok/s", " ")
                     if r["tokens_per_s"] is not None else "-"])
    print_table(console, "per phase: the steps so labelled (window) and the executions of its programs", cols, rows)
    if ph.families.height:
        parts = []
        for p in ph.summary["phase"].to_list():
            f = ph.families.filter(ph.families["phase"] == p).head(3)
            if f.height:
                parts.append(f"{p}: " + ", ".join(f"{escape(r['family'])} {fmt_pct(r['share'])}"
                                                  for r in f.iter_rows(named=True)))
        for line in parts:
            console.print(f"  families per step — {line}")
    st = ph.steps.head(top)  # the anatomy's order: per device, in time
    s = Table(title=f"steps and their phase — first {st.height} of {ph.steps.height:,}")
    for c, j in (("device", "left"), ("step", "right"), ("duration", "right"), ("phase", "left"), ("MFU", "right"),
                 ("MBU", "right"), ("tokens", "right"), ("why", "left")):
        s.add_column(c, justify=j, overflow="fold")
    for r in st.iter_rows(named=True):
        s.add_row(escape(r["device"]), str(r["step"]), fmt_time_ps(r["duration_ps"]), r["phase"], fmt_pct(r["mfu"]),
                  fmt_pct(r["mbu"]), "-" if r["tokens"] is None else f"{r['tokens']:,}", escape(r["why"] or ""))
    console.print(s)
    for n in ph.notes:
        console.print(f"  [yellow]note:[/yellow] {escape(n)}")
