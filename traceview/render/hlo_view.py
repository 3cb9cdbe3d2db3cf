"""Terminal rendering of what the HLO says (:class:`~traceview.analysis.ops.hlo_detect.HloReport`)."""

from __future__ import annotations

from rich.console import Console

from traceview.model.units import fmt_pct, fmt_time_ps
from traceview.render.celltable import Table


def render_hlo(console: Console, h, *, top: int, escape) -> None:
    """Print the detected patterns (one row per detector, module and shapes: instructions, measured
    time, an example and why) and the FLOP provenance per program when not all from the trace."""
    if h is None or h.source == "none":
        return
    console.print()
    n = h.detections.height
    src = "the HLO protos" if h.source == "protos" else "each op's HLO text"
    if n == 0:
        console.print(f"[bold]what the HLO says[/bold] — from {src}: no widening convert written out (of 1 MiB or "
                      "more), layout copy, unfused convert/reshape or non-donated in-place update")
    else:
        t = Table(title=f"what the HLO says — from {src}: {n:,} instruction(s) in {h.patterns.height:,} pattern(s), "
                        f"by measured time (a fused instruction timed by its fusion)")
        for c, j in (("detector", "left"), ("module", "left"), ("shape (<- operand)", "left"), ("instr.", "right"),
                     ("time", "right"), ("example", "left"), ("why", "left")):
            t.add_column(c, justify=j, overflow="fold")
        for r in h.patterns.head(top).iter_rows(named=True):
            shape = r["shape"] + (f" <- {r['operand_shape']}" if r["operand_shape"] else "")
            t.add_row(r["detector"], escape(r["module"] or ""), escape(shape), f"{r['instructions']:,}",
                      fmt_time_ps(r["time_ps"]), escape(r["example"] or ""), escape(r["why"] or ""))
        console.print(t)
    fp = h.flop_provenance
    tot = fp["time_ps"].sum() if fp.height else 0
    if tot and (fp["source"] != "trace").any():  # no op time (a selection that kept no op): no shares to give
        by = {s: fp.filter(fp["source"] == s)["time_ps"].sum() / tot if tot else None
              for s in fp["source"].unique().sort().to_list()}
        console.print("  FLOPs from " + ", ".join(f"{s} {fmt_pct(v)}" for s, v in by.items())
                      + " of op time (derived: from the HLO shapes; unknown: opaque custom calls)")
    for nt in h.notes:
        console.print(f"  [yellow]note:[/yellow] {escape(nt)}")
