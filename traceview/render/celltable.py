"""A rich Table that lays its string cells out faster, to the same bytes.

rich pads every cell of a default Table (``Padding(cell, (0, 1))``) and renders a string
cell as the Text of its markup, wrapped and justified to the column: a few hundred
microseconds a cell, most of a report's rendering. :class:`Table` is that Table with each
string header and cell a :class:`_Cell`, which measures and renders itself exactly as the
padded Text would (the same segments, so the same output with or without colour) and does
plain text directly, on one line or wrapped to its column (:func:`_wrapped`). On a console
without colour (a pipe, a file), a table whose cells are all such text is laid out here whole,
line by line, as rich's Table lays it out (:meth:`Table._plain_lines`): its columns narrowed
and its cells wrapped as rich's are when they do not fit the width.
"""

from __future__ import annotations

import re

from rich._ratio import ratio_reduce
from rich._wrap import divide_line
from rich.cells import cell_len, set_cell_size
from rich.console import Console
from rich.measure import Measurement
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.table import Table as _RichTable

#: the padding rich gives every cell of a default Table: one space left and right
_CELL_PAD = (0, 1, 0, 1)
#: whitespace ending a string (rich's ``text._re_whitespace``)
_TRAILING_SPACE = re.compile(r"\s+$")
#: a word and the whitespace around it (rich's ``_wrap.re_word``)
_WORD = re.compile(r"\s*\S+\s*")


class _Cell:
    """A :class:`Table` cell given as rich markup: laid out as rich lays out that string in a
    default Table (``Padding(str, (0, 1))``: measured and rendered as its markup's Text with
    a space each side), the same segments, so the same bytes with and without colour; text
    that fits its column on one line is padded and justified here, without building the
    Padding and wrapping the Text, and any other cell is rendered by rich's Padding."""

    __slots__ = ("markup", "_text")

    def __init__(self, markup: str):
        self.markup = markup
        self._text = None  # (console, markup option, plain text or None, text or None) once measured

    def _plain(self, console: Console, options) -> str | None:
        """The cell's text when its markup gives plain text (no style, no spans), else None."""
        return self._texts(console, options)[2]

    def _unstyled(self, console: Console, options) -> str | None:
        """The cell's text with its styles dropped (what a console without colour prints of
        it), or None when its Text sets how it is laid out (justify, overflow, no_wrap)."""
        return self._texts(console, options)[3]

    def _texts(self, console: Console, options) -> tuple:
        got = self._text
        if got is None or got[0] is not console or got[1] is not options.markup:
            text = console.render_str(self.markup, markup=options.markup, highlight=False)
            laid_out = text.justify or text.overflow or text.no_wrap is not None
            plain = text.plain if not (text.spans or text.style or laid_out) else None
            got = self._text = (console, options.markup, plain, None if laid_out else text.plain)
        return got

    def __rich_measure__(self, console: Console, options) -> Measurement:
        # Padding.__rich_measure__ over Measurement.get of the markup's Text (rich 13-15)
        max_width = options.max_width
        if max_width - 2 < 1:
            return Measurement(max_width, max_width)
        plain = self._plain(console, options)
        if plain is None:
            return Measurement.get(console, options, Padding(self.markup, _CELL_PAD))
        lines = plain.splitlines()
        widest = max(cell_len(line) for line in lines) if lines else 0
        words = plain.split()
        least = max(cell_len(word) for word in words) if words else widest
        m = Measurement(least, widest).normalize().with_maximum(max_width)
        m = Measurement(0, 0) if m.maximum < 1 else m.normalize()
        return Measurement(m.minimum + 2, m.maximum + 2).with_maximum(max_width)

    def __rich_console__(self, console: Console, options):
        inner = options.max_width - 2
        plain = self._plain(console, options) if inner >= 1 and not options.highlight else None
        if plain is not None and options.justify in ("left", "right") and plain.isprintable():
            n = cell_len(plain)
            if n > inner and not options.no_wrap and options.overflow in ("fold", "ellipsis", "crop"):
                lines = _wrapped(plain, inner, options.justify, options.overflow)
                if lines is not None:  # wrapped as Text.wrap wraps it, each line padded as rich's Padding pads it
                    pad, new_line = Segment(" "), Segment.line()
                    for line in lines:
                        yield pad
                        yield Segment(line)
                        yield pad
                        yield new_line
                    return
            elif n <= inner:  # one line, as Text.wrap and Lines.justify leave it
                if options.justify == "left":
                    body = plain + " " * (inner - n)
                else:
                    body = plain.rstrip()
                    body = " " * (inner - cell_len(body)) + body
                yield Segment(" ")
                yield Segment(body)
                yield Segment(" ")
                yield Segment.line()
                return
        yield from console.render(Padding(self.markup, _CELL_PAD), options)


class Table(_RichTable):
    """rich's default Table (padding one space each side of a cell) whose string headers and
    cells are :class:`_Cell`: the same output, laid out faster. Other renderables are padded
    as rich pads them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, padding=0, **kwargs)  # the cells pad themselves

    @staticmethod
    def _cell(value):
        if value is None:
            value = ""
        return _Cell(value) if isinstance(value, str) else Padding(value, _CELL_PAD)

    def add_column(self, header="", *args, min_width=None, **kwargs) -> None:
        super().add_column(self._cell(header), *args, min_width=None if min_width is None else min_width + 2,
                           **kwargs)

    def add_row(self, *cells, **kwargs) -> None:
        super().add_row(*(self._cell(c) for c in cells), **kwargs)

    def __rich_console__(self, console: Console, options):
        lines = self._plain_lines(console, options) if console.color_system is None else None
        if lines is None:
            yield from super().__rich_console__(console, options)
            return
        widths, lines = lines
        if self.title:  # as rich's Table renders its title (a Text centred over the table)
            title = self.title
            if isinstance(title, str):
                title = console.render_str(title, style=Style.pick_first(self.title_style, "table.title"),
                                           highlight=False)
            render_options = options.update(width=sum(widths) + self._extra_width, highlight=self.highlight,
                                            height=None)
            yield from console.render(title, options=render_options.update(justify=self.title_justify))
        new_line = Segment.line()
        for line in lines:
            yield Segment(line)
            yield new_line

    def _plain_lines(self, console: Console, options) -> tuple[list[int], list[str]] | None:
        """(column widths, the lines of the table below its title) as rich's Table renders
        them without colour, for the common case: default table options, every header and cell
        a :class:`_Cell` of printable text (its styles print nothing), in a left- or
        right-justified, top-aligned column of no fixed width that may wrap. None otherwise
        (rich's Table lays it out). Each column is as wide as its widest cell (or its
        ``min_width``) plus the padding; when the columns do not fit ``options.max_width``
        they are narrowed as rich narrows them (:meth:`_narrowed`) and a cell wider than its
        column is wrapped as rich wraps its Text (:func:`_wrapped`), a row as tall as its
        tallest cell."""
        columns = self.columns
        if (not columns or not self.box or self.width is not None or self.expand or self.min_width is not None
                or not self.show_header or self.show_footer or not self.show_edge or self.show_lines or self.leading
                or self.caption or self.row_styles or self.highlight
                or any(r.style is not None or r.end_section for r in self.rows)):
            return None
        texts, widths = [], []
        for column in columns:
            if (column.width is not None or column.max_width is not None or column.highlight or column.no_wrap
                    or column.justify not in ("left", "right") or column.vertical != "top"
                    or column.overflow not in ("fold", "ellipsis", "crop")):
                return None
            col = []
            widest = 0
            for cell in (column.header, *column._cells):
                if type(cell) is not _Cell:
                    return None
                plain = cell._unstyled(console, options)  # styles print nothing without colour
                if plain is None or not plain.isprintable():
                    return None
                n = len(plain) if plain.isascii() else cell_len(plain)
                if n > widest:
                    widest = n
                col.append((plain, n))
            width = widest + 2
            if column.min_width is not None and column.min_width > width:
                width = column.min_width
            texts.append(col)
            widths.append(width)
        if sum(widths) + self._extra_width > options.max_width:
            widths = self._narrowed(widths, options.max_width - self._extra_width)
            if widths is None:
                return None
        if min(widths) < 3:  # no room inside the padding: rich's Padding lays it out
            return None
        cells = []  # per column, its padded cells: a line, or a list of lines when it wraps
        tall = False
        for column, col, width in zip(columns, texts, widths):
            inner = width - 2
            left = column.justify == "left"
            out = []
            for plain, n in col:
                if n > inner:
                    lines = _wrapped(plain, inner, column.justify, column.overflow)
                    if lines is None:
                        return None
                    out.append([f" {line} " for line in lines])
                    tall = True
                elif left:
                    out.append(f" {plain}{' ' * (inner - n)} ")
                else:
                    body = plain.rstrip()
                    if len(body) != len(plain):
                        n = len(body) if body.isascii() else cell_len(body)
                    out.append(f" {' ' * (inner - n)}{body} ")
            cells.append(out)
        box = self.box.substitute(options, safe=console.safe_box if self.safe_box is None else self.safe_box)
        lines = [box.get_top(widths)]
        n_rows = len(self.rows)
        for i, row in enumerate(zip(*cells)):
            if i == 0:
                left, mid, right = box.head_left, box.head_vertical, box.head_right
            elif i == n_rows:
                left, mid, right = box.foot_left, box.foot_vertical, box.foot_right
            else:
                left, mid, right = box.mid_left, box.mid_vertical, box.mid_right
            if tall and any(type(c) is list for c in row):
                height = max(len(c) if type(c) is list else 1 for c in row)
                shaped = []
                for c, width in zip(row, widths):
                    c = c if type(c) is list else [c]
                    blank = [" " * width] * (height - len(c))
                    shaped.append(blank + c if i == 0 else c + blank)  # the header row aligns to its bottom
                lines.extend(left + mid.join(parts) + right for parts in zip(*shaped))
            else:
                lines.append(left + mid.join(row) + right)
            if i == 0:
                lines.append(box.get_row(widths, "head", edge=True))
        lines.append(box.get_bottom(widths))
        return widths, lines

    def _narrowed(self, widths: list[int], max_width: int) -> list[int] | None:
        """The column widths (padding included) rich's Table gives columns of natural
        ``widths`` (widest cell and padding, or ``min_width``) in ``max_width`` cells:
        each capped at ``max_width``, the widest narrowed first, then all evenly
        (``Table._calculate_column_widths``); None when they still do not fit."""
        if max_width < 3:
            return None
        floors = [c.min_width or 0 for c in self.columns]
        widths = [max(min(w, max_width), f) for w, f in zip(widths, floors)]
        if sum(widths) > max_width:
            narrowed = self._collapse_widths(widths, [True] * len(widths), max_width)
            if sum(narrowed) > max_width:
                narrowed = ratio_reduce(sum(narrowed) - max_width, [1] * len(narrowed), narrowed, narrowed)
            if min(narrowed) < 3:
                return None
            # measured again at their new widths: a column keeps its min_width
            widths = [max(min(w, n), f) for w, n, f in zip(widths, narrowed, floors)]
        return widths if sum(widths) <= max_width else None


def _wrapped(plain: str, inner: int, justify: str, overflow: str) -> list[str] | None:
    """The lines, each ``inner`` cells wide, of a one-line cell ``plain`` wider than
    ``inner`` cells, as rich lays out its Text in a column of ``inner`` cells inside the
    padding (``Text.wrap``: broken between words, a word longer than a line folded (overflow
    "fold") or cut with "…" ("ellipsis") or without ("crop"), each line justified); None when
    a line would not come out ``inner`` cells wide (wide characters at the edge)."""
    out = []
    fold = overflow == "fold"
    breaks = _ascii_breaks(plain, inner, fold) if plain.isascii() else divide_line(plain, inner, fold=fold)
    starts = [0, *breaks, len(plain)]
    for a, b in zip(starts, starts[1:]):
        line = plain[a:b]
        if len(line) > inner:  # Text.rstrip_end: whitespace beyond the line's width goes
            space = _TRAILING_SPACE.search(line)
            if space is not None:
                line = line[:len(line) - min(len(space.group(0)), len(line) - inner)]
        if justify == "right":
            line = line.rstrip()
        n = len(line) if line.isascii() else cell_len(line)
        if n > inner:  # Text.truncate
            line = set_cell_size(line, inner - 1) + "…" if overflow == "ellipsis" else set_cell_size(line, inner)
            n = cell_len(line)
        if n < inner:
            line = " " * (inner - n) + line if justify == "right" else line + " " * (inner - n)
        elif n > inner:
            return None
        if not line.isascii() and cell_len(line) != inner:
            return None
        out.append(line)
    return out


def _ascii_breaks(text: str, width: int, fold: bool) -> list[int]:
    """``rich._wrap.divide_line(text, width, fold)`` for a printable ASCII ``text`` (a
    character a cell): where its lines start after the first."""
    breaks = []
    offset = 0
    for m in _WORD.finditer(text):
        start, end = m.span()
        n = end - start
        length = len(m.group().rstrip())
        if width - offset >= length:  # the word fits on this line
            offset += n
        elif length > width:  # longer than a line: folded into pieces, or left to be cut
            if fold:
                last = start + (n - 1) // width * width
                if start:
                    breaks.append(start)
                breaks.extend(range(start + width, last + 1, width))
                offset = end - last
            else:
                if start:
                    breaks.append(start)
                offset = n
        elif offset and start:  # on the next line
            breaks.append(start)
            offset = n
    return breaks
