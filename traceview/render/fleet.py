"""A fleet-mode result (:class:`traceview.analysis.fleet.Fleet`) as terminal text or JSON:
what was read, devices, the shape-keyed op table with its quantiles' error bound, steps,
stragglers, and the sections not computed in fleet mode."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from traceview.model.units import fmt_pct, fmt_time_ps
from traceview.render.foldtable import Column, print_table
from traceview.render.overlap_view import render_stragglers
from traceview.render.terminal import escape, plain, render_kernels, render_roofline, render_step_records


def render_fleet(console: Console, f, *, top: int, roofline=None, kernels=None) -> None:
    """Print ``f``'s sections (``top`` rows of each table); ``roofline``: (peaks, rows,
    summary) of :meth:`Fleet.roofline <traceview.analysis.fleet.Fleet.roofline>`, ``kernels``
    its kernels table, when computed."""
    console.print(f"[bold]traceview[/bold] — fleet mode: {len(f.files)} file(s), {len(f.hosts)} host(s), "
                  f"{f.op_events:,} op events, op time {fmt_time_ps(f.op_time_ps)} summed over "
                  f"{f.devices.height} device(s)")
    for w in f.warnings:
        console.print(f"  [yellow]warning:[/yellow] {escape(w)}")
    # narrower than the table: op, shape, occurrences, total and share stay; the quantiles fold
    fold = {"overflow": "fold"}
    cols = [Column("op", cut=2, rich=fold), Column("shape", cut=1, rich=fold), Column("occ.", "right"),
            Column("total", "right"), Column("mean", "right", keep=False), Column("min", "right", keep=False),
            Column("p50", "right", keep=False), Column("p90", "right", keep=False), Column("max", "right", keep=False),
            Column("self %", "right")]
    q = lambda v: "-" if v is None else fmt_time_ps(v)  # noqa: E731
    rows = [[plain(r["op_name"]), plain(r["shape"] or ""), f"{r['occurrences']:,}", fmt_time_ps(r["total_ps"]),
             fmt_time_ps(r["mean_ps"]), q(r["min_ps"]), q(r["p50_ps"]), q(r["p90_ps"]), q(r["max_ps"]),
             fmt_pct(r["share"])] for r in f.by_shape.head(top).iter_rows(named=True)]
    print_table(console, f"ops by (name, shape) — {min(top, f.by_shape.height)} of {f.by_shape.height}", cols, rows,
                whole="--format json")
    console.print("  " + escape(f.quantiles["bound"]))
    if f.steps is not None:
        a = f.steps
        console.print()
        console.print(f"[bold]step anatomy[/bold] — {a.steps.height:,} device-steps (window: {escape(a.window)})")
        render_step_records(console, a, top)
        ft = Table()
        for c in ("family", "time per step", "share of step", "occ. per step"):
            ft.add_column(c, justify="left" if c == "family" else "right")
        for r in a.families.iter_rows(named=True):
            ft.add_row(escape(r["family"]), fmt_time_ps(r["self_ps"]), fmt_pct(r["share"]),
                       f"{r['per_step']:,.1f}".removesuffix(".0"))
        console.print(ft)
        console.print("  " + escape(a.coverage.line()))
    render_stragglers(console, f.stragglers, top=top)
    if kernels is not None:
        render_kernels(console, kernels, top=top)
    if roofline is not None:
        peaks, roof, summary = roofline
        render_roofline(console, peaks, roof, top=top, summary=summary)
    for n in f.notes:
        console.print(f"  [yellow]note:[/yellow] {escape(n)}")
    console.print("  not computed in fleet mode: " + escape(", ".join(f.not_computed)))


def fleet_json(f, *, top: int | None = None, version: str = "", roofline=None, kernels=None) -> bytes:
    """``f`` as JSON bytes (orjson), with the keys of ``analyze --format json`` where they mean
    the same: traceview (the version), files, hosts, warnings, totals, devices, ops (the
    population table, ``top`` rows, all when None, with ``rows: {table: {shown, total}}``), quantiles, steps (coverage,
    families, distribution), stragglers' summary, notes and not_computed; peaks, roofline and
    its summary, kernels when given (as :func:`render_fleet`)."""
    import orjson

    bs = f.by_shape if top is None else f.by_shape.head(top)
    out = {"traceview": version, "mode": "fleet", "files": f.files, "hosts": f.hosts, "warnings": f.warnings,
           "op_events": f.op_events, "op_time_ps": f.op_time_ps, "devices": f.devices.to_dicts(),
           "ops": bs.to_dicts(), "rows": {"ops": {"shown": bs.height, "total": f.by_shape.height}},
           "quantiles": f.quantiles, "notes": f.notes,
           "not_computed": f.not_computed}
    if f.steps is not None:
        from dataclasses import asdict

        out["steps"] = {"method": f.steps.method, "module": f.steps.module, "window": f.steps.window,
                        "device_steps": f.steps.steps.height, "coverage": asdict(f.steps.coverage),
                        "families": f.steps.families.to_dicts(), "distribution": f.steps.distribution}
    if f.stragglers is not None:
        out["stragglers"] = {"summary": f.stragglers.summary, "clock_offsets": f.stragglers.clock_offsets,
                             "notes": f.stragglers.notes}
    if roofline is not None:
        from dataclasses import asdict

        peaks, roof, summary = roofline
        shown = roof if top is None else roof.head(top)
        out["peaks"] = asdict(peaks)
        out["roofline"] = shown.to_dicts()
        out["roofline_summary"] = summary
        out["rows"]["roofline"] = {"shown": shown.height, "total": roof.height}
    if kernels is not None:
        shown = kernels if top is None else kernels.head(top)
        out["kernels"] = shown.to_dicts()
        out["rows"]["kernels"] = {"shown": shown.height, "total": kernels.height}
    return orjson.dumps(out, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
