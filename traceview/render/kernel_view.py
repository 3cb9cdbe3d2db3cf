"""Terminal rendering of the inside of the Pallas kernels (:class:`~traceview.analysis.ops.kernel_inside.KernelInside`)."""

from __future__ import annotations

from rich.console import Console
from traceview.render.celltable import Table

from traceview.model.units import fmt_pct, fmt_time_ps


def render_kernel_inside(console: Console, ki, *, top: int, escape) -> None:
    """Print the stage table (top-level stages first, then nested scopes: count, time, share of
    the kernels' time, bundles), the counters (time-weighted mean, max) and the summary line; the
    note alone when the trace lacks the lines. Nothing when ``ki`` is None."""
    if ki is None:
        return
    console.print()
    if not ki.summary:
        for n in ki.notes:
            console.print(f"[bold]inside the kernels[/bold] — {escape(n)}")
        return
    s = ki.summary
    console.print(f"[bold]inside the kernels[/bold] — {s['invocations']:,} invocation(s), {fmt_time_ps(s['kernel_ps'])}: "
                  f"waiting on copies {fmt_pct(s['wait_share'])}, computing {fmt_pct(s['compute_share'])}, issuing "
                  f"copies {fmt_pct(s['copy_share'])}, setup {fmt_pct(s['setup_share'])}; stages cover "
                  f"{fmt_pct(s['stages_ps'] / s['kernel_ps'] if s['kernel_ps'] else None)}"
                  + (f"; MXU {s['mxu_util']:.2f}% util (time-weighted counter)" if s.get("mxu_util") is not None else ""))
    t = Table(title="pipeline stages (XLA TraceMe): top-level first, then the kernel's nested scopes")
    for c, j in (("stage", "left"), ("kind", "left"), ("nested", "left"), ("count", "right"), ("total", "right"),
                 ("mean", "right"), ("% kernel", "right"), ("bundles", "right")):
        t.add_column(c, justify=j)
    for r in ki.stages.head(top).iter_rows(named=True):
        t.add_row(escape(r["name"]), r["category"], "yes" if r["nested"] else "", f"{r['count']:,}",
                  fmt_time_ps(r["total_ps"]), fmt_time_ps(r["mean_ps"]), fmt_pct(r["share"]), f"{r['bundles']:,}")
    console.print(t)
    if ki.counters.height:
        c = Table(title="hardware counters (_counters_), weighted by their time inside the kernels")
        for col, j in (("counter", "left"), ("stat", "left"), ("mean", "right"), ("max", "right"), ("events", "right")):
            c.add_column(col, justify=j)
        for r in ki.counters.head(top).iter_rows(named=True):
            c.add_row(escape(r["name"]), escape(r["value_name"]), f"{r['mean']:.3g}", f"{r['max']:.3g}",
                      f"{r['events']:,}")
        console.print(c)
    for n in ki.notes:
        console.print(f"  [yellow]note:[/yellow] {escape(n)}")
