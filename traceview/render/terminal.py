"""Terminal rendering of a :class:`~traceview.analysis.report.Report` with rich: provenance,
devices, shape-keyed ops, kernels, sources, steps and roofline."""

from __future__ import annotations

import polars as pl
from rich.console import Console
from rich.markup import escape as _markup_escape
from rich.table import Table

from traceview.model.naming import safe_line
from traceview.model.units import fmt_pct, fmt_rate, fmt_time_ps
from traceview.render.provenance import provenance_lines

#: A string longer than this (characters) is cut for display: a table cell of megabytes
#: costs seconds to lay out and tells nothing more (JSON, CSV and Parquet keep it whole).
CELL_LIMIT = 2000


def escape(text, limit: int = CELL_LIMIT) -> str:
    """A trace string made safe for one terminal line
    (:func:`~traceview.model.naming.safe_line`: undecodable bytes as ``\xff``, control and bidi
    characters as visible escapes such as ``\x1b``, ``\n``, ``\u202e``), rich markup escaped,
    and cut after ``limit`` characters with the count of the rest."""
    text = str(text)
    if len(text) > limit:
        text = f"{text[:limit]}… [{len(text) - limit:,} more characters]"
    return _markup_escape(safe_line(text))


def render_report(console: Console, rep, *, top: int) -> None:
    """Print every section of ``rep`` (a :class:`~traceview.analysis.report.Report`): what
    was read, devices, the top ``top`` ops, kernels, sources, steps and the roofline."""
    render_analysis(console, rep, top=top)
    render_kernels(console, rep.kernels, top=top)
    render_sources(console, rep.sources, top=top, frame=rep.source_frame)
    render_steps(console, rep.steps)
    render_roofline(console, rep.peaks, rep.roofline, top=top, summary=rep.roofline_summary)
    from traceview.render.family_roofline import render_family_roofline

    render_family_roofline(console, getattr(rep, "family_roofline", None), rep.peaks,
                           getattr(rep, "family_roofline_summary", None))


def render_analysis(console: Console, rep, *, top: int) -> None:
    """Print the provenance block, warnings, device summary, the top rows of the report's op
    table, the op names split into several shape populations and the occurrence checks."""
    table, by, checks = rep.table, rep.by, rep.checks
    console.print("[bold]traceview[/bold] — what was read")
    for line in provenance_lines(rep.discovery, rep.files):
        console.print("  " + escape(line))
    for w in rep.warnings:
        console.print(f"  [yellow]warning:[/yellow] {escape(w)}")
    if not rep.has_shapes:
        console.print("  [yellow]note:[/yellow] no shapes in this trace: ops are keyed by name only")

    if rep.devices.height:
        console.print()
        used = rep.peaks
        for g in rep.device_groups.iter_rows(named=True):
            peaks, differ = [], []
            for key, label, unit, roof in (("peak_flops", "peak", "FLOP/s", used.peak_flops),
                                           ("peak_bw", "memory", "B/s", used.peak_bw)):
                if g[key]:
                    peaks.append(f"{label} {fmt_rate(g[key], unit)}")
                    if roof and g["device_type"] == used.device_type and abs(roof / g[key] - 1) > 1e-6:
                        differ.append(fmt_rate(roof, unit))
            if g["peak_flops"] and g["peak_bw"] and not differ:
                peaks.append(f"ridge point {g['peak_flops'] / g['peak_bw']:.1f} FLOP/byte")
            said = ""
            if peaks:
                said = " (" + ", ".join(peaks) + ", from the trace's plane stats"
                said += (f"; the roofline uses {' and '.join(differ)}: see 'roofline peaks')" if differ else ")")
            console.print(
                f"[bold]devices[/bold] {escape(g['device_type'])} ×{g['n']}: {g['ops']:,} op events, "
                f"op time {fmt_time_ps(g['op_time_ps'])}" + (f" summed over the {g['n']} devices" if g["n"] > 1 else "")
                + escape(said))

    console.print()
    title = {"shape": "HLO ops keyed by (name, shape)", "name": "HLO ops keyed by name (shapes mixed)",
             "program": "HLO ops keyed by (program_id, name), as XProf hlo_stats",
             "kind": "HLO ops keyed by (kind, HLO text without instruction names, shape): copies across layers in one row"}[by]
    t = Table(title=f"{title} — top {min(top, table.height)} of {table.height} by self time", show_lines=False)
    # below ~130 columns the module and source columns go (they are in --format json/csv),
    # so op names and shapes stay readable at a standard 80-column terminal
    wide = console.width >= 130
    t.add_column("#", justify="right")
    t.add_column("op", min_width=min(24, max(10, console.width // 7)))
    if by in ("shape", "program", "kind"):
        t.add_column("shape", overflow="fold", min_width=min(40, console.width // 4), ratio=1)
    if by == "kind":
        t.add_column("op names", overflow="fold")
        t.add_column("per run", justify="right")
    if by == "program":
        t.add_column("program")
    t.add_column("occ.", justify="right")
    roomy = console.width >= 100  # at 80 columns "total" goes: mean × occurrences gives it
    if roomy:
        t.add_column("total", justify="right")
    t.add_column("mean", justify="right")
    t.add_column("self %", justify="right")
    if by == "shape" and wide:
        t.add_column("module(s)", overflow="fold")
        t.add_column("source", overflow="fold")
    if by == "name":
        t.add_column("shapes", justify="right")
    for i, r in enumerate(table.head(top).iter_rows(named=True), 1):
        cells = [str(i), escape(r["op_name"])]
        if by in ("shape", "program", "kind"):
            cells.append(escape(r["shape"] or "?"))
        if by == "kind":
            cells.append(escape(_members(r["op_names"] or [])))
            cells.append("-" if r["per_execution"] is None else f"{r['per_execution']:.3g}")
        if by == "program":
            cells.append(f"{r['module']}({r['program_id']})")
        cells += [f"{r['occurrences']:,}"] + ([fmt_time_ps(r["total_ps"])] if roomy else []) + [
            fmt_time_ps(r["mean_ps"]), fmt_pct(r["share"])]
        if by == "shape" and wide:
            mods = r["modules"] or []
            cells.append(escape(", ".join(mods[:3]) + (f" +{len(mods) - 3}" if len(mods) > 3 else "")))
            cells.append(escape(_short_path(r["source"])))
        if by == "name":
            cells.append(str(r["n_shapes"]))
        t.add_row(*cells)
    console.print(t)

    if by == "shape" and table.height:
        split = rep.split.head(5)
        if split.height:
            console.print("[bold]op names split into several shape populations[/bold] (a name-keyed table would mix these):")
            for r in split.iter_rows(named=True):
                pops = sorted(zip(r["occurrences"], r["shape"], r["mean_ps"]), reverse=True)[:4]
                desc = "; ".join(f"{escape(s or '?')} ×{o:,} (mean {fmt_time_ps(m)})" for o, s, m in pops)
                more = f"; +{r['n'] - 4} more" if r["n"] > 4 else ""
                console.print(f"  {escape(r['op_name'])}: {r['n']} populations — {desc}{more}")

    if checks is not None and checks.height:
        console.print()
        summ = rep.checks_summary or {}
        title = "occurrence checks (per population)"
        if summ.get("checked"):
            title += f": {summ['failing']:,} of {summ['checked']:,} checked populations fail"
        ct = Table(title=title)
        for c in ("op", "shape", "occ.", "exec.", "per program run", "per device", "steps", "steps ok", "has batch"):
            ct.add_column(c, overflow="fold")
        ok = {True: "yes", False: "[red]NO[/red]", None: "-"}
        for r in checks.head(top).iter_rows(named=True):
            pe = "-" if r["per_execution"] is None else f"{r['per_execution']:.3g}"
            pd_ = f"{r['per_device_min']:,}" if r["per_device_min"] == r["per_device_max"] else f"{r['per_device_min']:,}–{r['per_device_max']:,}"
            ct.add_row(escape(r["op_name"]), escape(r["shape"] or "?"), f"{r['occurrences']:,}", f"{r['executions']:,}",
                       pe, pd_, "-" if r["steps"] is None else f"{r['steps']:,}", ok[r["steps_ok"]], ok[r["has_batch"]])
        console.print(ct)
        if checks.height > top:
            console.print(f"  {checks.height - top:,} more populations (failures are listed first; --top shows more)")


def _members(names: list, show: int = 2) -> str:
    """``"×63 (convolution_bitcast_fusion.3, .5, …)"``: how many op names a ``--by kind`` row
    holds, and the first of them."""
    if not names:
        return ""
    first = names[0]
    stem = first.rsplit(".", 1)[0] if "." in first else first
    rest = [("." + n.rsplit(".", 1)[1]) if n.startswith(stem + ".") else n for n in names[1:show]]
    return f"×{len(names)} (" + ", ".join([first, *rest]) + (", …" if len(names) > show else "") + ")"


def _short_path(src: str, keep: int = 2) -> str:
    if not src:
        return ""
    parts = src.split("/")
    return "/".join(parts[-keep:]) if len(parts) > keep else src


#: characters of a shape signature in the roofline table (a kernel's operand tuple can be long)
ROOF_SHAPE_LIMIT = 160


def render_roofline(console: Console, peaks, roof: pl.DataFrame, *, top: int, summary: dict | None = None) -> None:
    """Print the peaks used (with sources), the ridge point, and the top populations'
    roofline figures: intensity, achieved FLOP/s and bytes/s, % of peak, bound by, efficiency."""
    console.print()
    if peaks.peak_flops or peaks.peak_bw:
        console.print(f"[bold]roofline[/bold] peaks: {fmt_rate(peaks.peak_flops, 'FLOP/s')} "
                      f"({escape(peaks.flops_source)}); {fmt_rate(peaks.peak_bw, 'B/s')} ({escape(peaks.bw_source)})")
    else:
        console.print("[bold]roofline[/bold]: no peaks known for this device; pass --chip, or --peak-flops and --peak-bw")
    if peaks.ridge:
        console.print(f"  ridge point {peaks.ridge:.1f} FLOP/byte: ops below it are bound by memory, above it by compute")
    for n in getattr(peaks, "notes", []):
        console.print(f"  [yellow]warning:[/yellow] {escape(n)}")
    known = roof.filter(pl.col("flops").is_not_null() | pl.col("bytes").is_not_null())
    if known.height == 0:
        console.print("  no op to place on the roofline (none left after --filter / --device)" if roof.height == 0 else
                      "  no FLOP or byte counts in this trace (and none derivable): nothing to place on the roofline")
        _render_roofline_summary(console, {**(summary or {}), "ratio": None})
        return
    t = Table(title=f"roofline of the top {min(top, known.height)} populations by total time")
    for c, j in (("op", "left"), ("shape (result <- operands)", "left"), ("FLOP/B", "right"), ("achieved", "right"), ("bandwidth", "right"),
                 ("% peak FLOP/s", "right"), ("% peak BW", "right"), ("bound by", "left"), ("roofline/measured", "right"),
                 ("costs", "left")):
        t.add_column(c, justify=j, overflow="fold")
    for r in known.head(top).iter_rows(named=True):
        eff = "-" if r["efficiency"] is None else f"{100 * r['efficiency']:.1f}%"
        if r["warning"]:
            eff = f"[red]{eff} ![/red]"
        # the whole signature: two GEMMs of one result shape differ in their operands
        t.add_row(escape(r["op_name"]), escape(r["shape"] or "?", ROOF_SHAPE_LIMIT),
                  "-" if r["intensity"] is None else f"{r['intensity']:.3g}",
                  fmt_rate(r["achieved_flops"], "FLOP/s"), fmt_rate(r["achieved_bw"], "B/s"),
                  fmt_pct(r["frac_peak_flops"]), fmt_pct(r["frac_peak_bw"]), r["bound_by"], eff, r["cost_source"])
    console.print(t)
    warned = known.head(top).filter(pl.col("warning") != "")
    for r in warned.iter_rows(named=True):
        console.print(f"  [yellow]warning:[/yellow] {escape(r['op_name'])} {escape(r['shape'])}: {escape(r['warning'])}")
    multi = known.head(top).filter(pl.col("kernels_per_execution") > 1)
    for r in multi.iter_rows(named=True):
        console.print(f"  {escape(r['op_name'])} {escape((r['shape'] or '?').split(' <- ')[0])}: {r['occurrences']:,} kernel "
                      f"events are {r['executions']:,} executions ({r['kernels_per_execution']:.2f} kernels each); "
                      f"costs and rates are per execution")
    _render_roofline_summary(console, summary)


def _render_roofline_summary(console: Console, summary: dict | None) -> None:
    if not summary:
        return
    if summary.get("ratio") is not None:
        console.print(f"  roofline-predicted {fmt_time_ps(summary['predicted_ps'])} against {fmt_time_ps(summary['measured_ps'])} "
                      f"measured ({100 * summary['ratio']:.0f}%) over ops with known costs "
                      f"({fmt_pct(summary['covered_share'])} of op time)")
    for o in summary.get("off_roofline") or []:
        ops = ", ".join(escape(n) for n in o["ops"]) + (", ..." if o["populations"] > len(o["ops"]) else "")
        console.print(f"  off the HBM roofline: {o['populations']:,} {o['bound_by']} population(s) ({ops}; "
                      f"{fmt_pct(o['share'])} of op time): {o['why']}")


def render_kernels(console: Console, kern: pl.DataFrame, *, top: int) -> None:
    """Print custom kernels found by name (configuration read off the name), one per module."""
    if kern.height == 0:
        return
    console.print()
    t = Table(title="custom kernels (configuration read off the kernel name in the trace)")
    for c, j in (("kernel", "left"), ("config", "left"), ("module", "left"), ("invocations", "right"),
                 ("ops", "right"), ("self time", "right"), ("self %", "right"), ("top-level shape", "left"),
                 ("source", "left")):
        t.add_column(c, justify=j, overflow="fold")
    for r in kern.head(top).iter_rows(named=True):
        shape = r["shape"] if len(r["shape"]) <= 90 else r["shape"][:87] + "..."
        t.add_row(escape(r["kernel"]), escape(r["config"]), escape(r["module"]), f"{r['invocations']:,}",
                  f"{r['ops']:,}", fmt_time_ps(r["self_ps"]), fmt_pct(r["share"]), escape(shape),
                  escape(_short_path(r["source"], 3)))
    console.print(t)


def render_sources(console: Console, files: pl.DataFrame, *, top: int, frame: str) -> None:
    """Print source attribution by file: share of op self time, project vs site-packages."""
    if files.height == 0:
        return
    console.print()
    t = Table(title=f"source attribution by file ({frame} frame) — top {min(top, files.height)} of {files.height}")
    for c, j in (("file", "left"), ("origin", "left"), ("occ.", "right"), ("self time", "right"),
                 ("self %", "right"), ("ops", "right")):
        t.add_column(c, justify=j, overflow="fold")
    for r in files.head(top).iter_rows(named=True):
        origin = r["origin"] or "-"
        if origin == "project":
            origin = "[green]project[/green]"
        t.add_row(escape(r["file"] or "(no source recorded)"), origin, f"{r['occurrences']:,}",
                  fmt_time_ps(r["self_ps"]), fmt_pct(r["share"]), str(r["n_ops"]))
    console.print(t)


def render_steps(console: Console, anat) -> None:
    """Print the step anatomy: how steps were found, op families per step, the coverage line."""
    if anat is None or anat.steps.height == 0:
        return
    console.print()
    how = {"module": f"executions of {anat.module}", "markers": "step markers", "trace": "the whole trace"}
    console.print(f"[bold]step anatomy[/bold] — steps are {escape(how.get(anat.method, anat.method))} "
                  f"(window: {anat.window})")
    t = Table()
    for c, j in (("family", "left"), ("time per step", "right"), ("share of step", "right"),
                 ("occ. per step", "right"), ("populations", "right")):
        t.add_column(c, justify=j)
    for r in anat.families.iter_rows(named=True):
        t.add_row(escape(r["family"]), fmt_time_ps(r["self_ps"]), fmt_pct(r["share"]),
                  f"{r['per_step']:,.1f}".removesuffix(".0"), str(r["n_populations"]))
    console.print(t)
    console.print("  " + escape(anat.coverage.line()))
    for n in anat.notes:
        console.print(f"  [yellow]note:[/yellow] {escape(n)}")
