"""A table that fits the terminal: the columns that matter stay, the rest fold below each row.

:func:`print_table` prints rows of plain-text cells (trace strings already made one-line safe
by :func:`~traceview.model.naming.safe_line`): when every column fits the console on one
line per row, as rich's default Table (:class:`~traceview.render.celltable.Table`, cells as
rich markup that renders as the text itself); else as a :class:`FoldTable`: the ``keep``
columns stay, a ``cut`` column (a shape, a name) is cut in the middle (both ends kept, "…"
between) until the table fits, and every other column's cell folds into a dim, indented line
below its row. A note under the table says which columns folded and whether cells were cut.

Each row of a folded table is one line, so a table of N rows is at most N × (1 + fold lines)
lines and never wider than the console.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style

#: the fewest cells a ``cut`` column is cut down to (a shape cut to less tells nothing)
MIN_CUT = 12


@dataclass
class Column:
    """One column: its header, justification ("left" / "right"), whether it stays when the
    table folds (``keep``), ``cut``: 0, or the column's order among the columns cut in the
    middle to fit (1 first), and the keyword arguments of rich's ``add_column`` for the
    unfolded table (``overflow``, ``min_width``, ``ratio``); ``label``: what names the cell
    when it folds (default the header; "": the value alone)."""

    header: str
    justify: str = "left"
    keep: bool = True
    cut: int = 0
    rich: dict | None = None
    label: str | None = None  # what names a folded cell (default: the header; "": the value alone)


def cut_middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` terminal cells: whole when it fits, else its start and
    end with "…" between (the start gets the extra cell); cut between words (at spaces) when
    that keeps at least 60% as many characters."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return "…" if width == 1 else ""
    keep = width - 1
    left, right = (keep + 1) // 2, keep // 2
    if text.isascii():
        # between words when that keeps at least 60% of what a cut anywhere keeps
        # ("bf16[1024,1,27648] <- … bf16[5120]"): the start ends with a space, the end
        # begins after one, "… " between, the most characters kept
        n, budget = len(text), width - 2
        starts = [k + 1 for k in range(n) if text[k] == " "]  # where a word begins
        best, pick = 0, None
        for i in starts:
            if i > budget:
                break
            k = bisect.bisect_left(starts, n - (budget - i))  # the longest end that still fits
            if k < len(starts) and starts[k] > i and i + n - starts[k] >= best:
                best, pick = i + n - starts[k], (i, starts[k])
        if pick and best >= 0.6 * keep:
            return text[:pick[0]] + "… " + text[pick[1]:]
        return text[:left] + "…" + (text[len(text) - right:] if right else "")
    head, n = [], 0
    for ch in text:
        w = cell_len(ch)
        if n + w > left:
            break
        head.append(ch)
        n += w
    tail, n = [], 0
    for ch in reversed(text):
        w = cell_len(ch)
        if n + w > right:
            break
        tail.append(ch)
        n += w
    return "".join(head) + "…" + "".join(reversed(tail))


def cut_end(text: str, width: int) -> str:
    """``text`` in at most ``width`` terminal cells: whole when it fits, else its start and "…"."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return "…" if width == 1 else ""
    return (text[:width - 1] if text.isascii() else _take(text, width - 1, at_least_one=False)) + "…"


def _text(v) -> str:
    """A cell's text: the cell itself, or the first of a (text, style) cell."""
    return v if isinstance(v, str) else v[0]


def _markup(v, markup_literal) -> str:
    """A cell (text or (text, style)) as rich markup that renders as its text
    (``markup_literal``: :func:`traceview.render.terminal.markup_literal`)."""
    if isinstance(v, str):
        return markup_literal(v)
    return f"[{v[1]}]{markup_literal(v[0])}[/]" if v[1] else markup_literal(v[0])


def _widths(columns, rows) -> list[int]:
    """Each column's natural width in cells: its widest cell or header (no padding)."""
    out = [cell_len(c.header) for c in columns]
    for r in rows:
        for i, v in enumerate(r):
            v = _text(v)
            n = len(v) if v.isascii() else cell_len(v)
            if n > out[i]:
                out[i] = n
    return out


def table_width(widths) -> int:
    """Cells a boxed table of columns ``widths`` (content cells) takes: a space each side of
    every cell and a border between and around the columns."""
    return sum(widths) + 3 * len(widths) + 1


def print_table(console, title: str | None, columns: list[Column], rows: list[list[str]], *,
                fold_from: int | None = None, whole: str = "--format json") -> None:
    """Print ``rows`` (lists of cells, one per column: plain text, or (plain text, rich style))
    under ``title`` (rich markup)
    as rich's Table when every column fits ``console.width`` on one line per row, else as a
    :class:`FoldTable` with a note saying what folded and what was cut (``whole``: where the
    cut cells are whole). ``fold_from``: the column a folded line starts under (default: 1
    when the first column is "#", else 0)."""
    from traceview.render.terminal import markup_literal

    widths = _widths(columns, rows)
    if table_width(widths) <= console.width:
        from traceview.render.celltable import Table

        t = Table(title=title)
        for c in columns:
            t.add_column(_markup(c.header, markup_literal), justify=c.justify, **(c.rich or {}))
        for r in rows:
            t.add_row(*(_markup(v, markup_literal) for v in r))
        console.print(t)
        return
    if fold_from is None:
        fold_from = 1 if columns and columns[0].header == "#" else 0
    ft = FoldTable(title, columns, rows, widths, console.width, fold_from=fold_from)
    if not ft.fits:  # too narrow for the kept columns at their least: rich squeezes every column
        from traceview.render.celltable import Table

        t = Table(title=title)
        for c in columns:
            t.add_column(_markup(c.header, markup_literal), justify=c.justify, overflow="fold")
        for r in rows:
            t.add_row(*(_markup(v, markup_literal) for v in r))
        console.print(t)
        return
    console.print(ft)
    notes = []
    if ft.folded:
        notes.append("folded below each row: " + ", ".join(c.header for c in ft.folded))
    if ft.cut_columns:
        notes.append(", ".join(ft.cut_columns) + " cut in the middle (…)")
    if notes:
        console.print("  [dim]" + markup_literal("; ".join(notes)) + f" (at {console.width} columns; --width N for "
                      f"more, {whole} for every cell whole)[/dim]", highlight=False)


class FoldTable:
    """A boxed table (rich's HEAVY_HEAD box) of the ``keep`` columns, one line per row, the
    other columns' cells folded into dim lines below the row from column ``fold_from`` on.
    ``fits``: whether the kept columns fit ``width`` (after cutting the ``cut`` columns down
    to :data:`MIN_CUT`); ``folded``: the folded columns; ``cut_columns``: headers of the
    columns whose cells were cut."""

    def __init__(self, title, columns, rows, widths, width: int, *, fold_from: int = 0):
        self.title = title
        keep = [i for i, c in enumerate(columns) if c.keep]
        self.columns = [columns[i] for i in keep]
        self.folded = [c for c in columns if not c.keep]
        fold_idx = [i for i, c in enumerate(columns) if not c.keep]
        w = [widths[i] for i in keep]
        over = table_width(w) - width
        # the widest cut columns are cut first, down to the next widest, then together (ties: by
        # ``cut`` order), none below MIN_CUT (its header is cut too): an op name and a shape share
        # the cut instead of one being cut to nothing while the other stays whole
        cuts = sorted((j for j, c in enumerate(self.columns) if c.cut), key=lambda j: self.columns[j].cut)
        natural = list(w)
        while over > 0:
            live = [j for j in cuts if w[j] > MIN_CUT]
            if not live:
                break
            top = max(w[j] for j in live)
            at_top = [j for j in live if w[j] == top]
            floor = max([w[j] for j in live if w[j] < top] + [MIN_CUT])
            if (top - floor) * len(at_top) >= over:
                q, r = divmod(over, len(at_top))
                for k, j in enumerate(at_top):
                    w[j] -= q + (k < r)
                over = 0
            else:
                over -= (top - floor) * len(at_top)
                for j in at_top:
                    w[j] = floor
        self.cut_columns = [self.columns[j].header for j in cuts if w[j] < natural[j]]
        self.fits = over <= 0
        self.widths = w
        self.fold_from = min(fold_from, max(len(w) - 1, 0))
        # a folded cell without a value ("", "-") says nothing: left out of its line
        self.rows = [([r[i] for i in keep], [(columns[i].header if columns[i].label is None else columns[i].label, r[i])
                                            for i in fold_idx if _text(r[i]) not in ("", "-")]) for r in rows]
        # room left on the line goes to the folded lines (to a cut column, else the last), so they wrap less
        if self.fits and self.rows:
            longest = max((sum(cell_len(f"{h} {_text(v)}" if h else _text(v)) + 3 for h, v in f) - 1
                           for _, f in self.rows if f), default=0)
            span = sum(w[self.fold_from:]) + 3 * (len(w) - self.fold_from) - 1
            grow = min(width - table_width(w), longest + 2 - span)
            if grow > 0:
                cuts = [j for j, c in enumerate(self.columns) if c.cut]
                j = min(cuts, key=lambda j: self.columns[j].cut) if cuts else len(w) - 1
                w[j] += grow

    def _fold_lines(self, items, span: int) -> list[str]:
        """``items`` ((header, value)) as "header value" joined by " · ", wrapped into lines of
        at most ``span`` cells, each indented by two spaces."""
        room = span - 2
        lines, cur = [], ""
        for header, value in items:
            item = f"{header} {_text(value)}" if header else _text(value)
            joined = f"{cur} · {item}" if cur else item
            if cell_len(joined) <= room:
                cur = joined
                continue
            if cur:
                lines.append(cur)
            while cell_len(item) > room:  # an item longer than the line: cut into pieces
                piece = item[:room] if item.isascii() else _take(item, room)
                lines.append(piece)
                item = item[len(piece):]
            cur = item
        if cur:
            lines.append(cur)
        return ["  " + ln for ln in lines]

    def __rich_console__(self, console, options):
        w = self.widths
        total = table_width(w)
        if self.title:
            title = console.render_str(self.title, style="table.title", justify="center")
            yield from console.render(title, options.update(width=total))
        header_style = console.get_style("table.header")
        dim = Style(dim=True)
        line = Segment.line()

        def rule(left, mid, right, fill):
            return Segment(left + mid.join(fill * (n + 2) for n in w) + right)

        yield rule("┏", "┳", "┓", "━")
        yield line
        segs = [Segment("┃")]
        for c, n in zip(self.columns, w):
            head = cut_middle(c.header, n) if c.cut else c.header
            segs += [Segment(" "), Segment(_pad(head, n, c.justify), header_style), Segment(" ┃")]
        yield from segs
        yield line
        yield rule("┡", "╇", "┩", "━")
        yield line
        span = sum(w[self.fold_from:]) + 3 * (len(w) - self.fold_from) - 1  # inside the borders
        lead = "│" + "".join(" " * (n + 2) + "│" for n in w[:self.fold_from])
        for cells, folded in self.rows:
            out = "│"
            for c, n, v in zip(self.columns, w, cells):
                text = _text(v)
                text = _pad(cut_middle(text, n) if c.cut else text, n, c.justify)
                if isinstance(v, str) or not v[1]:
                    out += " " + text + " │"
                else:  # a styled cell: its own segment
                    yield Segment(out + " ")
                    yield Segment(text, console.get_style(v[1]))
                    out = " │"
            yield Segment(out)
            yield line
            if folded:
                for text in self._fold_lines(folded, span):
                    yield Segment(lead)
                    yield Segment(_pad(text, span, "left"), dim)
                    yield Segment("│")
                    yield line
        yield rule("└", "┴", "┘", "─")
        yield line


def _take(text: str, cells: int, at_least_one: bool = True) -> str:
    """The longest start of ``text`` in at most ``cells`` cells (``at_least_one``: one
    character even when it is wider)."""
    out, n = [], 0
    for ch in text:
        n += cell_len(ch)
        if n > cells and (out or not at_least_one):
            break
        out.append(ch)
    return "".join(out)


def _pad(text: str, width: int, justify: str) -> str:
    """``text`` (at most ``width`` cells) padded with spaces to ``width`` cells."""
    gap = width - cell_len(text)
    if gap <= 0:
        return text
    return " " * gap + text if justify == "right" else text + " " * gap
