"""Terminal rendering of a :class:`~traceview.analysis.compare.diff.DiffReport` with rich.

Times are shown with adaptive units (input ps); ``Δ`` is treatment − base. Every trace string
goes through :func:`traceview.render.terminal.escape` (control characters shown as ``?``,
rich markup escaped).
"""

from __future__ import annotations

import polars as pl
from rich.console import Console
from rich.table import Table

from traceview.model.units import fmt_pct, fmt_time_ps, fmt_ratio
from traceview.render.diff_summary import noise_cell, summary_lines
from traceview.render.foldtable import Column, print_table
from traceview.render.terminal import escape, plain


def _names(names: list | None, n: int = 2) -> str:
    names = list(names or [])
    if not names:
        return ""
    s = ", ".join(names[:n])
    return s + (f" +{len(names) - n}" if len(names) > n else "")


def population_label(r: dict) -> str:
    """A short label for one diff row: the kernel identity, or ``stem`` (else the kind) with
    the base → treatment XLA names when they differ; an op inside a kernel (``--expand-kernels``)
    under the kernel's identity (``RPAd-p_*-bq_*_*-bkv_*_*/fusion``), told from an op of that
    name outside it."""
    if r["kind"] == "kernel":
        kb, kt = r.get("kernels_base") or [], r.get("kernels_treatment") or []
        if kb and kt and kb != kt:
            return f"{_names(kb, 1)} → {_names(kt, 1)}"
        return _names(kb or kt, 1) or r["stem"]
    inside = ""
    if r.get("is_kernel") and r.get("stem"):  # an op of a kernel: its stem is "KERNEL_ID/op" (or KERNEL_ID)
        inside = r["stem"].split("/", 1)[0] + "/"
    nb, nt = r.get("op_names_base") or [], r.get("op_names_treatment") or []
    if nb and nt and nb != nt:
        return f"{inside}{_names(nb, 1)} → {_names(nt, 1)}"
    names = _names(nb or nt, 2)
    return f"{inside}{names}" if names else r["stem"] or r["kind"]


def short_shape(shape: str | None, n: int = 90) -> str:
    """A shape signature cut to ``n`` characters (kernel roots carry long loop tuples)."""
    s = shape or "?"
    return s if len(s) <= n else s[: n - 1] + "…"


def shape_change(r: dict, whole: int, each: int) -> str:
    """A diff row's shape, or ``base → treatment`` when a kernel's shape changed with its
    configuration (cut to ``whole`` characters, or ``each`` per side)."""
    if r["shape_treatment"] in (None, r["shape"]):
        return short_shape(r["shape"], whole)
    return f"{short_shape(r['shape'], each)} → {short_shape(r['shape_treatment'], each)}"


def match_notes(r: dict) -> list[str]:
    """Plain-text notes on how a diff row was matched and what changed (match kind, kernel
    configuration, source path); renderers add their own overhead note."""
    notes = []
    if r["match"] not in ("exact", ""):
        notes.append(f"matched by {r['match']}")
    if r["kernel_changes"]:
        notes.append(r["kernel_changes"])
    if r["source_changed"]:
        notes.append(f"source {r['source_base']} → {r['source_treatment']}")
    return notes


def _ratio(x) -> str:
    return "-" if x is None else f"{fmt_ratio(x)}x"


def _delta(ps) -> str:
    if ps is None:
        return "-"
    return ("+" if ps > 0 else "") + fmt_time_ps(ps)


def render_diff(console: Console, d, *, top: int = 25) -> None:
    """Print a diff: headline, step time, kernel configuration changes, families, the top
    ``top`` populations by |Δ self time|, appeared/vanished populations, source changes and
    notes (profiling overhead)."""
    console.print("[bold]traceview diff[/bold]")
    for line in summary_lines(d):
        console.print("  " + escape(line))

    kc = d.kernel_changes()
    if kc.height:
        console.print()
        t = Table(title="kernels whose configuration changed (read off their names)")
        for c, j in (("kernel", "left"), ("base", "left"), ("treatment", "left"), ("change", "left"),
                     ("invocations", "right"), ("traced events", "right"), ("self time", "right")):
            t.add_column(c, justify=j, overflow="fold")
        for r in kc.head(top).iter_rows(named=True):
            t.add_row(escape(r["kernel_id"]), escape(", ".join(r["names_base"])), escape(", ".join(r["names_treatment"])),
                      escape(r["changes"]), f"{r['invocations_base'] or 0:,} → {r['invocations_treatment'] or 0:,}",
                      f"{r['events_base'] or 0:,} → {r['events_treatment'] or 0:,}",
                      f"{fmt_time_ps(r['self_ps_base'])} → {fmt_time_ps(r['self_ps_treatment'])}")
        console.print(t)

    if d.families.height:
        console.print()
        t = Table(title="op families (self time, share of op time)")
        for c, j in (("family", "left"), ("base", "right"), ("treatment", "right"), ("Δ", "right"),
                     ("share base", "right"), ("share treatment", "right")):
            t.add_column(c, justify=j)
        for r in d.families.head(top).iter_rows(named=True):
            t.add_row(escape(r["family"]), fmt_time_ps(r["self_ps_base"]), fmt_time_ps(r["self_ps_treatment"]),
                      _delta(r["delta_self_ps"]), fmt_pct(r["share_base"]), fmt_pct(r["share_treatment"]))
        console.print(t)

    pops = d.populations
    console.print()
    # narrower than the table: the rows fold (#, op, shape, self time and Δ stay)
    fold = {"overflow": "fold"}
    cols = [Column("#", "right"), Column("status", keep=False), Column("op", cut=2, rich=fold),
            Column("shape", cut=1, rich=fold), Column("occ.", "right", keep=False, rich=fold),
            Column("self time", "right", rich=fold), Column("Δ", "right", rich=fold),
            Column("total ratio", "right", keep=False, rich=fold),
            Column("change [noise]", "right", keep=False, rich=fold), Column("notes", keep=False, rich=fold)]
    rows = []
    for i, r in enumerate(pops.head(top).iter_rows(named=True), 1):
        notes = match_notes(r)
        overhead = bool(r["overhead_note"])
        if overhead:
            notes.append(f"traced events {r['events_base']:,} → {r['events_treatment']:,}")
        status = {"matched": "matched", "appeared": ("appeared", "green"), "vanished": ("vanished", "red")}[r["status"]]
        occ = f"{'-' if r['occurrences_base'] is None else format(r['occurrences_base'], ',')} → " \
              f"{'-' if r['occurrences_treatment'] is None else format(r['occurrences_treatment'], ',')}"
        note = plain("; ".join(notes))
        rows.append([str(i), status, plain(population_label(r)), plain(shape_change(r, 90, 60)), occ,
                     f"{fmt_time_ps(r['self_ps_base'])} → {fmt_time_ps(r['self_ps_treatment'])}",
                     _delta(r["delta_self_ps"]), _ratio(r["self_ratio"]), noise_cell(r),
                     (note, "yellow") if overhead else note])
    print_table(console, f"populations matched by (kind, shape, HLO fingerprint) — top {min(top, pops.height)} of "
                         f"{pops.height} by |Δ self time|", cols, rows)

    for status, colour in (("appeared", "green"), ("vanished", "red")):
        rows = pops.filter(pl.col("status") == status)
        if rows.height:
            side = "treatment" if status == "appeared" else "base"
            console.print(f"[bold {colour}]{rows.height} population(s) {status}[/bold {colour}]"
                          f" ({'only in the treatment' if status == 'appeared' else 'only in the base'}):")
            for r in rows.head(top).iter_rows(named=True):
                console.print(f"  {escape(population_label(r))} {escape(short_shape(r['shape']))} ×{r[f'occurrences_{side}']:,} "
                              f"({fmt_time_ps(r[f'self_ps_{side}'])}) {escape(_names(r[f'modules_{side}'], 2))}")
            if rows.height > top:
                console.print(f"  ... {rows.height - top} more")

    sc = d.source_changes()
    if sc.height:
        console.print(f"[bold]source attribution changed[/bold] for {sc.height} population(s):")
        for r in sc.head(top).iter_rows(named=True):
            console.print(f"  {escape(population_label(r))} {escape(short_shape(r['shape']))}: "
                          f"{escape(r['source_base'] or '?')} → {escape(r['source_treatment'] or '?')}")
    if d.notes:
        console.print()
        for n in d.notes:
            console.print(f"[yellow]note:[/yellow] {escape(n)}")
    for f in getattr(d, "findings", None) or []:
        console.print(f"[yellow]finding {escape(f.severity)}[/yellow] [bold]{escape(f.id)}[/bold]: {escape(f.statement)}")
        console.print(f"  next: {escape(f.next_step)}")


def render_diff_text(d, *, top: int = 25, width: int = 8192) -> str:
    """The :func:`render_diff` output as plain text (no colour), e.g. for files and tests,
    ``width`` columns wide (default: as wide as its cells, so nothing folds or wraps)."""
    import io

    from traceview.render.console import Console as PlainConsole

    buf = io.StringIO()
    render_diff(PlainConsole(file=buf, width=width, color_system=None, soft_wrap=False, emoji=False), d, top=top)
    return buf.getvalue()
