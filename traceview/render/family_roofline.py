"""The roofline-per-family section (:mod:`traceview.analysis.steps.family_roofline`) for the
terminal and the HTML report: a report's frame in, rows and text out; computes nothing."""

from __future__ import annotations

from rich.console import Console

from traceview.model.units import fmt_pct, fmt_time_ps


def _num(v, fmt: str = "{:.3g}") -> str:
    return "-" if v is None else fmt.format(v)


def _si(v) -> str:
    """``1.05 G`` for a FLOP or byte count (SI prefixes)."""
    if v is None:
        return "-"
    for div, p in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g} {p}"
    return f"{v:.3g}"


def summary_line(summ: dict | None) -> str:
    """``"families sum to 250.7 of 258.1 ms per step (97.1%) over 7 steps (all steps);
    roofline-predicted 31.5 ms against 250.7 ms measured"``; "" for None."""
    if not summ:
        return ""
    parts = [f"families sum to {fmt_time_ps(summ['time_ps'])} of {fmt_time_ps(summ['step_ps'])} per step"
             + (f" ({summ['ratio']:.1%})" if summ.get("ratio") is not None else "")
             + f" over {summ['n_steps']:,} step(s) ({summ['window']})"]
    if summ.get("predicted_ps") is not None:
        parts.append(f"roofline-predicted {fmt_time_ps(summ['predicted_ps'])} against "
                     f"{fmt_time_ps(summ['measured_ps'])} measured over ops with costs")
    return "; ".join(parts)


def rows(fr) -> list[dict]:
    """One dict per family with display strings (for the HTML table): family, time, share,
    flops, bytes, intensity, bound_by, predicted, measured, efficiency, flag (why a figure is
    not to be trusted, or "")."""
    out = []
    for r in fr.iter_rows(named=True):
        flag = []
        if r["efficiency"] is not None and r["efficiency"] > 1.0:
            flag.append("faster than its roofline: a byte or FLOP count (or a peak) is off")
        if r["no_bytes_share"]:
            flag.append(f"{fmt_pct(r['no_bytes_share'])} of its time has FLOPs but no byte count: intensity is an upper bound")
        out.append({"family": r["family"], "time": fmt_time_ps(r["time_ps"]), "share": fmt_pct(r["share"]),
                    "flops": _si(r["flops"]), "bytes": _si(r["bytes"]), "intensity": _num(r["intensity"]),
                    "bound_by": r["bound_by"], "predicted": "-" if r["predicted_ps"] is None else fmt_time_ps(r["predicted_ps"]),
                    "measured": fmt_time_ps(r["measured_ps"]),
                    "efficiency": "-" if r["efficiency"] is None else f"{100 * r['efficiency']:.1f}%",
                    "flag": "; ".join(flag)})
    return out


def render_family_roofline(console: Console, fr, peaks, summ: dict | None, *, top: int | None = None) -> None:
    """Print the per-family roofline table (its first ``top`` rows when given) and its summary
    line; nothing when ``fr`` is None or empty."""
    if fr is None or fr.height == 0:
        return
    from traceview.render.foldtable import Column, print_table
    from traceview.render.terminal import escape, plain

    console.print()
    ridge = f"; ridge point {peaks.ridge:.1f} FLOP/byte" if peaks is not None and peaks.ridge else \
        "; no peaks known: bound by is unknown (--chip, --peak-flops/--peak-bw, --measure-cpu-peaks)"
    console.print(f"[bold]roofline per family[/bold] — per step{ridge}")
    # narrower than the table: family, time, share, intensity, bound by and efficiency stay
    cols = [Column("family", cut=1), Column("time per step", "right"), Column("share of step", "right"),
            Column("FLOPs", "right", keep=False), Column("bytes", "right", keep=False), Column("FLOP/B", "right"),
            Column("bound by"), Column("roofline", "right", keep=False), Column("measured", "right", keep=False),
            Column("roofline/measured", "right")]
    shown = rows(fr if top is None else fr.head(top))
    cells = []
    for r in shown:
        eff = (f"{r['efficiency']} !", "red") if r["flag"].startswith("faster") else r["efficiency"]
        cells.append([plain(r["family"]), r["time"], r["share"], r["flops"], r["bytes"], r["intensity"],
                      plain(r["bound_by"]), r["predicted"], r["measured"], eff])
    print_table(console, None, cols, cells)
    if fr.height > len(shown):
        console.print(f"  {fr.height - len(shown):,} more families (--top N, --all-rows or --format json)")
    line = summary_line(summ)
    if line:
        console.print("  " + escape(line))
    for r in shown:
        if r["flag"]:
            console.print(f"  [yellow]note:[/yellow] {escape(r['family'])}: {escape(r['flag'])}")
