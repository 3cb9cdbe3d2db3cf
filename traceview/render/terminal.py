"""Terminal rendering of a :class:`~traceview.analysis.report.Report` with rich: provenance,
devices, shape-keyed ops, kernels, sources, steps and roofline."""

from __future__ import annotations

import re

import polars as pl
from rich.console import Console

from traceview.model.naming import safe_line
from traceview.model.units import fmt_pct, fmt_rate, fmt_time_ps
from traceview.render.celltable import Table
from traceview.render.foldtable import Column, print_table
from traceview.render.overlap_view import render_overlap, render_stragglers
from traceview.render.provenance import provenance_lines

#: A string longer than this (characters) is cut for display: a table cell of megabytes
#: costs seconds to lay out and tells nothing more (JSON, CSV and Parquet keep it whole).
CELL_LIMIT = 2000


def escape(text, limit: int = CELL_LIMIT) -> str:
    """A trace string made safe for one terminal line
    (:func:`~traceview.model.naming.safe_line`: undecodable bytes as ``\xff``, control and bidi
    characters as visible escapes such as ``\x1b``, ``\n``, ``\u202e``), rich markup escaped,
    and cut after ``limit`` characters with the count of the rest."""
    return markup_literal(plain(text, limit))


def plain(text, limit: int = CELL_LIMIT) -> str:
    """:func:`escape` without the markup escaping: a trace string safe for one terminal line
    as plain text (a :mod:`~traceview.render.foldtable` cell, a Segment)."""
    text = str(text)
    if len(text) > limit:
        text = f"{text[:limit]}… [{len(text) - limit:,} more characters]"
    return safe_line(text)


_BRACKET = re.compile(r"(\\*)\[")
_TAG_AT = re.compile(r"\[[a-z#/@][^\[]*?]")


def markup_literal(text: str) -> str:
    """``text`` as rich markup that renders as ``text`` itself (rich 13/14 ``markup.render``
    rules): a tag-like ``[...]`` after k backslashes becomes 2k + 1 backslashes and the bracket
    (backslashes before a tag pair up), any other ``[`` after k >= 1 backslashes gets one
    more (rich drops one backslash before a bracket that opens no tag), and a text ending in an
    odd number of backslashes gets one more, so that it cannot escape a tag after it."""
    def one(m: re.Match) -> str:
        k = m.group(1)
        if _TAG_AT.match(text, m.end() - 1):
            return k * 2 + "\\["
        return k + "\\[" if k else "["

    out = _BRACKET.sub(one, text)
    if (len(out) - len(out.rstrip("\\"))) % 2:
        out += "\\"
    return out


def render_report(console: Console, rep, *, top: int) -> None:
    """Print every section of ``rep`` (a :class:`~traceview.analysis.report.Report`): what
    was read, devices, the top ``top`` ops, kernels, sources, steps and the roofline."""
    render_analysis(console, rep, top=top)
    render_kernels(console, rep.kernels, top=top)
    render_sources(console, rep.sources, top=top, frame=rep.source_frame)
    render_steps(console, rep.steps, top=top, export_command=getattr(rep, "export_command", None))
    layers = getattr(rep, "roofline_layers", None)
    render_roofline(console, rep.peaks, rep.roofline if layers is None else layers, top=top,
                    summary=rep.roofline_summary)
    render_communication(console, getattr(rep, "communication", None), top=top)
    render_overlap(console, getattr(rep, "overlap", None), top=top)
    render_stragglers(console, getattr(rep, "stragglers", None), top=top, findings=getattr(rep, "findings", None))
    from traceview.render.family_roofline import render_family_roofline

    render_family_roofline(console, getattr(rep, "family_roofline", None), rep.peaks,
                           getattr(rep, "family_roofline_summary", None), top=top)
    from traceview.render.hlo_view import render_hlo
    from traceview.render.kernel_view import render_kernel_inside

    render_hlo(console, getattr(rep, "hlo", None), top=top, escape=escape)
    from traceview.render.memory_view import render_memory

    render_kernel_inside(console, getattr(rep, "kernel_inside", None), top=top, escape=escape)
    from traceview.render.phases_view import render_phases

    render_phases(console, getattr(rep, "phases", None), top=top, escape=escape)

    render_memory(console, getattr(rep, "memory", None), top=top, escape=escape)


def render_analysis(console: Console, rep, *, top: int) -> None:
    """Print the provenance block, warnings, device summary, the top rows of the report's op
    table, the op names split into several shape populations and the occurrence checks."""
    table, by, checks = rep.table, rep.by, rep.checks
    console.print("[bold]traceview[/bold] — what was read")
    for line in provenance_lines(rep.discovery, rep.files):
        console.print("  " + escape(line))
    if getattr(rep, "events_note", None):
        console.print("  " + escape(rep.events_note))
    for w in rep.warnings:
        console.print(f"  [yellow]warning:[/yellow] {escape(w)}")
    if not rep.has_shapes:
        console.print("  [yellow]note:[/yellow] no shapes in this trace: ops are keyed by name only")
    from traceview.render.findings import render_findings

    render_findings(console, getattr(rep, "findings", None), getattr(rep, "findings_not_evaluated", None))

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
             "program-shape": "HLO ops keyed by (module, name, shape), program by program",
             "kind": "HLO ops keyed by (kind, HLO text without instruction names, shape): copies across layers in one row"}[by]
    # at any width the key columns, occurrences, total and share stay; the rest fold below
    # each row when the table is wider than the terminal (render.foldtable), shapes cut in the middle
    w = console.width
    cols = [Column("#", "right")]
    if by == "program-shape":
        cols.append(Column("module", cut=3, rich={"overflow": "fold"}))
    cols.append(Column("op", cut=2, rich={"min_width": min(24, max(10, w // 7))}))
    if by in ("shape", "program", "program-shape", "kind"):
        cols.append(Column("shape", cut=1, rich={"overflow": "fold", "min_width": min(40, w // 4), "ratio": 1}))
    if by == "kind":
        cols += [Column("op names", keep=False, rich={"overflow": "fold"}), Column("per run", "right", keep=False)]
    if by == "program":
        cols.append(Column("program", cut=3))
    cols += [Column("occ.", "right"), Column("total", "right"), Column("mean", "right", keep=False),
             Column("self %", "right")]
    if by == "program-shape":
        cols.append(Column("of module", "right", keep=False))
    if by == "shape":
        cols += [Column("module(s)", keep=False, rich={"overflow": "fold"}),
                 Column("source", keep=False, rich={"overflow": "fold"})]
    if by == "name":
        cols.append(Column("shapes", "right", keep=False))
    rows = []
    for i, r in enumerate(table.head(top).iter_rows(named=True), 1):
        cells = [str(i)] + ([plain(r["module"] or "?")] if by == "program-shape" else []) + [plain(r["op_name"])]
        if by in ("shape", "program", "program-shape", "kind"):
            cells.append(plain(r["shape"] or "?"))
        if by == "kind":
            cells.append(plain(_members(r["op_names"] or [])))
            cells.append("-" if r["per_execution"] is None else f"{r['per_execution']:.3g}")
        if by == "program":
            cells.append(plain(f"{r['module']}({r['program_id']})"))
        cells += [f"{r['occurrences']:,}", fmt_time_ps(r["total_ps"]), fmt_time_ps(r["mean_ps"]), fmt_pct(r["share"])]
        if by == "program-shape":
            cells.append(fmt_pct(r["module_share"]))
        if by == "shape":
            mods = r["modules"] or []
            cells.append(plain(", ".join(mods[:3]) + (f" +{len(mods) - 3}" if len(mods) > 3 else "")))
            cells.append(plain(_short_path(r["source"])))
        if by == "name":
            cells.append(str(r["n_shapes"]))
        rows.append(cells)
    print_table(console, f"{title} — top {min(top, table.height)} of {table.height} by self time", cols, rows)

    if by == "shape" and table.height:
        split = rep.split.head(min(top, 5))
        if split.height:
            console.print("[bold]op names split into several shape populations[/bold] (a name-keyed table would mix these):"
                          if rep.has_shapes else "[bold]op names split into several populations[/bold] (by program "
                          "and module: this trace has no shapes):")
            for r in split.iter_rows(named=True):
                pops = sorted(zip(r["occurrences"], r["shape"], r["mean_ps"]), reverse=True)[:4]
                desc = "; ".join(f"{escape(s or '?')} ×{o:,} (mean {fmt_time_ps(m)})" for o, s, m in pops)
                more = f"; +{r['n'] - 4} more" if r["n"] > 4 else ""
                console.print(f"  {escape(r['op_name'])}: {r['n']} populations — {desc}{more}")
            if rep.split.height > split.height:
                console.print(f"  {rep.split.height - split.height:,} more op names split "
                              f"({rep.split.height:,} in all: --format json, split_names)")

    if by in ("shape", "program-shape") and table.height:
        render_populations(console, rep, top=top)

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


def render_populations(console: Console, rep, *, top: int) -> None:
    """Print how (name, shape) keys were split by program (``rep.program_splits``) and the
    populations whose spread mixes regimes (``rep.population_regimes``)."""
    sp = getattr(rep, "program_splits", None) or {}
    if sp.get("keys"):
        console.print(f"[bold](name, shape) keys run in several programs[/bold]: {sp['keys']:,} keys split by module "
                      f"into {sp['rows']:,} populations (each program's occurrences apart; --by program-shape "
                      f"groups them by program):")
        for e in sp["examples"]:
            console.print(f"  {escape(e['op_name'])} {escape(e['shape'] or '?', ROOF_SHAPE_LIMIT)}: "
                          + escape(", ".join(e["modules"])))
    if sp.get("unnamed"):
        console.print(f"  {sp['unnamed']:,} populations have no module name in the trace: not split by program")
    reg = getattr(rep, "population_regimes", None)
    if reg is not None and reg.height:
        console.print(f"[bold]populations whose spread mixes regimes[/bold] ({reg.height:,}; p50 / p90 / max per "
                      f"occurrence):")
        for r in reg.head(min(top, 10)).iter_rows(named=True):
            console.print(f"  {escape(r['op_name'])} {escape(r['shape'] or '?', ROOF_SHAPE_LIMIT)} "
                          f"({escape(r['module'] or '?')}) ×{r['occurrences']:,}: {fmt_time_ps(r['p50_ps'])} / "
                          f"{fmt_time_ps(r['p90_ps'])} / {fmt_time_ps(r['max_ps'])}: {escape(r['regimes'])}")
        if reg.height > min(top, 10):
            console.print(f"  {reg.height - min(top, 10):,} more (--format json: population_regimes)")
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
    # narrower than the table: op, shape, intensity, bound by and efficiency stay
    fold = {"overflow": "fold"}
    cols = [Column("op", cut=2, rich=fold), Column("shape (result <- operands)", cut=1, rich=fold),
            Column("FLOP/B", "right", rich=fold), Column("achieved", "right", keep=False, rich=fold),
            Column("bandwidth", "right", keep=False, rich=fold),
            Column("% peak FLOP/s", "right", keep=False, rich=fold), Column("% peak BW", "right", keep=False, rich=fold),
            Column("bound by", rich=fold),
            Column("roofline/measured", "right", rich=fold), Column("costs", keep=False, rich=fold)]
    rows = []
    layers = "members" in known.columns  # per-layer copies as one row (layer_copies)
    for r in known.head(top).iter_rows(named=True):
        eff = "-" if r["efficiency"] is None else f"{100 * r['efficiency']:.1f}%"
        many = layers and r["members"] > 1
        lo, hi = (r["efficiency_min"], r["efficiency_max"]) if many else (None, None)
        if lo is not None and hi is not None and f"{100 * lo:.1f}" != f"{100 * hi:.1f}":
            eff += f" ({100 * lo:.1f}-{100 * hi:.1f}%)"
        if r["warning"]:
            eff = (f"{eff} !", "red")
        op = f"{r['op_name']} ×{r['members']}" if many else r["op_name"]
        # the whole signature: two GEMMs of one result shape differ in their operands
        rows.append([plain(op), plain(r["shape"] or "?", ROOF_SHAPE_LIMIT),
                     "-" if r["intensity"] is None else f"{r['intensity']:.3g}",
                     fmt_rate(r["achieved_flops"], "FLOP/s"), fmt_rate(r["achieved_bw"], "B/s"),
                     fmt_pct(r["frac_peak_flops"]), fmt_pct(r["frac_peak_bw"]), plain(r["bound_by"]), eff,
                     plain(r["cost_source"])])
    what = "ops (×N: an op's N per-layer copies as one row)" if layers and (known["members"] > 1).any() else "populations"
    print_table(console, f"roofline of the top {min(top, known.height)} {what} by total time", cols, rows)
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
    fold = {"overflow": "fold"}
    cols = [Column("kernel", cut=2, rich=fold), Column("config", keep=False, rich=fold),
            Column("module", keep=False, rich=fold), Column("invocations", "right", rich=fold),
            Column("ops", "right", keep=False, rich=fold), Column("self time", "right", rich=fold),
            Column("self %", "right", rich=fold), Column("top-level shape", cut=1, rich=fold),
            Column("source", keep=False, rich=fold)]
    rows = []
    for r in kern.head(top).iter_rows(named=True):
        shape = r["shape"] if len(r["shape"]) <= 90 else r["shape"][:87] + "..."
        rows.append([plain(r["kernel"]), plain(r["config"]), plain(r["module"]), f"{r['invocations']:,}",
                     f"{r['ops']:,}", fmt_time_ps(r["self_ps"]), fmt_pct(r["share"]), plain(shape),
                     plain(_short_path(r["source"], 3))])
    print_table(console, "custom kernels (configuration read off the kernel name in the trace)", cols, rows)


def render_sources(console: Console, files: pl.DataFrame, *, top: int, frame: str) -> None:
    """Print source attribution by file: share of op self time, project vs site-packages."""
    if files.height == 0:
        return
    console.print()
    fold = {"overflow": "fold"}
    cols = [Column("file", cut=1, rich=fold), Column("origin", rich=fold), Column("occ.", "right", rich=fold),
            Column("self time", "right", rich=fold), Column("self %", "right", rich=fold),
            Column("ops", "right", rich=fold)]
    rows = []
    for r in files.head(top).iter_rows(named=True):
        origin = plain(r["origin"] or "-")
        rows.append([plain(r["file"] or "(no source recorded)"), (origin, "green") if origin == "project" else origin,
                     f"{r['occurrences']:,}", fmt_time_ps(r["self_ps"]), fmt_pct(r["share"]), str(r["n_ops"])])
    print_table(console, f"source attribution by file ({escape(frame)} frame) — top {min(top, files.height)} of "
                         f"{files.height}", cols, rows)


#: rows of the per-step table when --top is not given
STEP_ROWS = 10


def render_steps(console: Console, anat, top: int | None = None, export_command: str | None = None) -> None:
    """Print the step anatomy: how steps were found, the per-step table (``top`` rows, else
    :data:`STEP_ROWS`: outliers first, then the longest steps) and the distribution's line, op
    families per step, the coverage line, and ``export_command`` (the median step to a
    timeline) when given."""
    if anat is None or anat.steps.height == 0:
        return
    console.print()
    how = {"module": f"executions of {anat.module}", "markers": "step markers", "trace": "the whole trace"}
    console.print(f"[bold]step anatomy[/bold] — steps are {escape(how.get(anat.method, anat.method))} "
                  f"(extent: {anat.extent}; window: {escape(anat.window)})")
    render_step_records(console, anat, top)
    t = Table()
    for c, j in (("family", "left"), ("time per step", "right"), ("share of step", "right"),
                 ("occ. per step", "right"), ("populations", "right")):
        t.add_column(c, justify=j)
    fams = anat.families if top is None else anat.families.head(top)
    for r in fams.iter_rows(named=True):
        t.add_row(escape(r["family"]), fmt_time_ps(r["self_ps"]), fmt_pct(r["share"]),
                  f"{r['per_step']:,.1f}".removesuffix(".0"), str(r["n_populations"]))
    console.print(t)
    if anat.families.height > fams.height:
        console.print(f"  {anat.families.height - fams.height:,} more families (--top N, --all-rows or --format json)")
    console.print("  " + escape(anat.coverage.line()))
    for n in anat.notes:
        console.print(f"  [yellow]note:[/yellow] {escape(n)}")
    if export_command:
        console.print(f"  timeline (the median step and its neighbours): {escape(export_command)}")


def _bytes(n) -> str:
    return "-" if n is None else fmt_rate(float(n), "B")


def render_communication(console: Console, comm, *, top: int) -> None:
    """Print the communication section: the interconnect and host-link peaks with their
    source, the top collectives (kind, shape, groups, bytes per participant, time, algorithm and
    bus bandwidth, % of the link peak one way), the host transfers, and the notes."""
    if comm is None:
        return
    console.print()
    ln = comm.link
    peak = ("interconnect peak unknown (chip not identified)" if ln is None else
            f"{escape(ln.interconnect)} {fmt_rate(ln.bidirectional, 'B/s')} bidirectional, "
            f"{fmt_rate(ln.per_direction, 'B/s')} one way ({escape(ln.source)})")
    shares = ("no op time to share out" if comm.collective_share is None and comm.host_share is None else
              f"collectives {fmt_pct(comm.collective_share)} and host transfers {fmt_pct(comm.host_share)} of op time")
    console.print(f"[bold]communication[/bold] — {shares}; {peak}")
    cols = comm.collectives
    if cols.height:
        fold = {"overflow": "fold"}
        tc = [Column("kind", cut=3, rich=fold), Column("shape", cut=2, rich=fold), Column("groups (n)", cut=1, rich=fold),
              Column("chan.", "right", keep=False, rich=fold), Column("exec.", "right", keep=False, rich=fold),
              Column("data", "right", keep=False, rich=fold), Column("sent/participant", "right", keep=False, rich=fold),
              Column("time", "right", rich=fold), Column("algbw", "right", keep=False, rich=fold),
              Column("busbw", "right", rich=fold), Column("% link", "right", rich=fold)]
        rows = []
        for r in cols.head(top).iter_rows(named=True):
            groups = r["groups"] if len(r["groups"] or "") <= 40 else r["groups"][:37] + "..."
            n = "?" if r["group_size"] is None else str(r["group_size"])
            kind = r["kind"] + (" (async)" if r["async"] else "")
            rows.append([plain(kind), plain(r["shape"][:ROOF_SHAPE_LIMIT]), plain(f"{groups} ({n})"),
                         "-" if r["channel_id"] is None else str(r["channel_id"]), f"{r['executions']:,}",
                         _bytes(r["data_bytes"]), _bytes(r["bytes_sent"]), fmt_time_ps(r["time_ps"]),
                         fmt_rate(r["algbw"], "B/s"), fmt_rate(r["busbw"], "B/s"), fmt_pct(r["frac_link_peak"])])
        print_table(console, f"collectives keyed by (kind, shape, replica groups, channel) — top {min(top, cols.height)} "
                             f"of {cols.height} by time; busbw per nccl-tests", tc, rows)
    hosts = comm.host_transfers
    if hosts.height:
        hl = "host link peak unknown" if ln is None or ln.host_per_direction is None else \
            f"{escape(ln.host_link)} {fmt_rate(ln.host_per_direction, 'B/s')} one way"
        fold = {"overflow": "fold"}
        tc = [Column("direction", rich=fold), Column("mechanism", keep=False, rich=fold),
              Column("shape", cut=1, rich=fold), Column("ops", keep=False, rich=fold),
              Column("exec.", "right", keep=False, rich=fold), Column("bytes", "right", rich=fold),
              Column("median in flight", "right", keep=False, rich=fold), Column("bandwidth", "right", rich=fold),
              Column("direction total", "right", keep=False, rich=fold), Column("op time", "right", rich=fold),
              Column("% link", "right", rich=fold)]
        rows = []
        for r in hosts.head(top).iter_rows(named=True):
            rows.append([plain(r["direction"]), plain(r["mechanism"]), plain(r["shape"][:ROOF_SHAPE_LIMIT]),
                         plain(", ".join(r["ops"][:4]) + (" ..." if len(r["ops"]) > 4 else "")),
                         f"{r['executions']:,}", _bytes(r["bytes"]), fmt_time_ps(r["time_ps"]),
                         fmt_rate(r["bandwidth"], "B/s"), fmt_rate(r["direction_bandwidth"], "B/s"),
                         fmt_time_ps(r["op_time_ps"]), fmt_pct(r["frac_link_peak"])])
        print_table(console, f"host transfers (device <-> host memory; bandwidth = bytes / median in flight) — {hl}",
                    tc, rows)
    for n in comm.notes:
        console.print(f"  [yellow]note:[/yellow] {escape(n)}")


def _several(s: pl.Series) -> bool:
    """``s.n_unique() > 1`` (a null counts as a value) without hashing every value: a column
    of a step per row is long."""
    nulls = s.null_count()
    if nulls:
        return nulls < s.len()
    return s.len() > 1 and not (s == s[0]).all()


def render_step_records(console: Console, anat, top: int | None = None) -> None:
    """The per-step table (device, step, start, duration, idle, gap before, outlier and its
    reason) of the steps :meth:`~traceview.analysis.steps.anatomy.StepAnatomy.top_steps` picks, and
    the step-time distribution's line."""
    st = anat.steps
    if st.height == 0 or "outlier" not in st.columns:
        return
    rows = anat.top_steps(top or STEP_ROWS)
    picked = (f"all {st.height:,} shown" if rows.height == st.height else
              f"{rows.height:,} of {st.height:,} shown: the outliers, then the longest")
    t = Table(title=f"steps — {picked}, in device and step order (start: from the first step)")
    t0 = int(st["start_ps"].min())
    hosts = "host" in st.columns and _several(st["host"])  # ranks or hosts name the same devices
    body = []
    for r in rows.iter_rows(named=True):
        mark = "[red]outlier[/red]" if r["outlier"] else ("" if r["in_window"] else "[dim]excluded[/dim]")
        body.append([escape(f"{r['host']}:{r['device']}" if hosts else r["device"]), str(r["step"]),
                     fmt_time_ps(r["start_ps"] - t0), fmt_time_ps(r["duration_ps"]), fmt_time_ps(r["idle_ps"]),
                     "-" if r["gap_before_ps"] is None else fmt_time_ps(r["gap_before_ps"]), mark,
                     escape(r["reason"] or "")])
    # the window and reason columns only when a shown step has something in them
    cols = [("device", "left"), ("step", "right"), ("start", "right"), ("duration", "right"), ("idle", "right"),
            ("gap before", "right"), ("window", "left"), ("reason", "left")]
    keep = [i for i in range(len(cols)) if i < 6 or any(b[i] for b in body)]
    for i in keep:
        t.add_column(cols[i][0], justify=cols[i][1], overflow="fold")
    for b in body:
        t.add_row(*(b[i] for i in keep))
    console.print(t)
    console.print("  " + escape(anat.summary()))
