"""Terminal rendering of the device-memory section (:class:`~traceview.analysis.memory.allocators.MemoryReport`)."""

from __future__ import annotations

from rich.console import Console

from traceview.model.units import fmt_bytes, fmt_pct, fmt_time_ps


def render_memory(console: Console, mem, *, top: int, escape) -> None:
    """Print one table of allocators (capacity, peak in use with its heap and stack terms,
    share of capacity, lifetime peak, fragmentation, growth per step), the largest allocations
    alive at the top allocator's peak, and the notes. ``escape``: the terminal's escaper for
    strings from the trace. Nothing when ``mem`` is None."""
    if mem is None:
        return
    console.print()
    if not mem.known:
        console.print("[bold]memory[/bold] — unknown: " + escape("; ".join(mem.notes)))
        return
    from traceview.render.foldtable import Column, print_table
    from traceview.render.terminal import plain

    n = len(mem.allocators)
    fold = {"overflow": "fold"}
    cols = [Column("host", cut=1, rich=fold), Column("allocator", cut=2, rich=fold),
            Column("capacity", "right", rich=fold), Column("peak in use", "right", rich=fold),
            Column("heap", "right", keep=False, rich=fold), Column("stack", "right", keep=False, rich=fold),
            Column("% cap.", "right", rich=fold), Column("lifetime peak (heap)", "right", keep=False, rich=fold),
            Column("frag.", "right", keep=False, rich=fold), Column("growth/step", "right", rich=fold)]
    rows = []
    for a in mem.allocators[:top]:
        growth = ("unknown" if a.growth_per_step is None else
                  f"{fmt_bytes(a.growth_per_step)} ({a.growth_pct:{'+z.2f' if round(a.growth_per_step) == 0 else '+.2f'}}%)"
                  if a.growth_pct is not None
                  else fmt_bytes(a.growth_per_step))
        rows.append([plain(a.host), plain(a.allocator), fmt_bytes(a.capacity), fmt_bytes(a.peak_in_use),
                     fmt_bytes(a.peak_heap), fmt_bytes(a.peak_stack), fmt_pct(a.peak_share), fmt_bytes(a.lifetime_peak),
                     "-" if a.fragmentation is None else f"{a.fragmentation:.3f}", growth])
    print_table(console, f"memory — {n} allocator{'s' if n != 1 else ''} from the trace's allocation events "
                         f"(as XProf's memory_profile), top {min(top, n)} by peak in use", cols, rows)
    a = mem.allocators[0]
    if a.alive.height:
        cols = [Column("bytes", "right", rich=fold), Column("count", "right", rich=fold),
                Column("each", "right", keep=False, rich=fold), Column("requested", "right", keep=False, rich=fold),
                Column("op", cut=2, rich=fold), Column("shape", cut=1, rich=fold),
                Column("region", keep=False, rich=fold), Column("dtype", keep=False, rich=fold)]
        rows = [[fmt_bytes(r["bytes"]), f"{r['count']:,}", fmt_bytes(r["allocation_bytes"]),
                 fmt_bytes(r["requested_bytes"]), plain(r["op"] or "-"), plain(r["shape"] or "-"),
                 plain(r["region"] or "-"), plain(r["data_type"] or "-")] for r in a.alive.head(top).iter_rows(named=True)]
        print_table(console, f"alive at the peak of {escape(a.allocator)} ({fmt_time_ps(a.peak_time_ps)} on the host "
                             f"clock): {fmt_bytes(a.alive_bytes)} in allocations, {fmt_bytes(a.unattributed)} of the heap "
                             f"allocated before the profile", cols, rows, fold_from=0)
    notes = list(mem.notes) + [f"{x.allocator}: {nt}" for x in mem.allocators[:top] for nt in x.notes]
    for nt in dict.fromkeys(notes):
        console.print(f"  [yellow]note:[/yellow] {escape(nt)}")
