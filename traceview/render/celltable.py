"""A rich Table that lays its string cells out faster, to the same bytes.

rich pads every cell of a default Table (``Padding(cell, (0, 1))``) and renders a string
cell as the Text of its markup, wrapped and justified to the column: a few hundred
microseconds a cell, most of a report's rendering. :class:`Table` is that Table with each
string header and cell a :class:`_Cell`, which measures and renders itself exactly as the
padded Text would (the same segments, so the same output with or without colour) and does the
common case, text that fits its column on one line, directly.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.padding import Padding
from rich.segment import Segment
from rich.table import Table as _RichTable

#: the padding rich gives every cell of a default Table: one space left and right
_CELL_PAD = (0, 1, 0, 1)


class _Cell:
    """A :class:`Table` cell given as rich markup: laid out as rich lays out that string in a
    default Table (``Padding(str, (0, 1))``: measured and rendered as its markup's Text with
    a space each side), the same segments, so the same bytes with and without colour; text
    that fits its column on one line is padded and justified here, without building the
    Padding and wrapping the Text, and any other cell is rendered by rich's Padding."""

    __slots__ = ("markup", "_text")

    def __init__(self, markup: str):
        self.markup = markup
        self._text = None  # (console, markup option, plain text or None) once measured

    def _plain(self, console: Console, options) -> str | None:
        """The cell's text when its markup gives plain text (no style, no spans), else None."""
        got = self._text
        if got is None or got[0] is not console or got[1] is not options.markup:
            text = console.render_str(self.markup, markup=options.markup, highlight=False)
            plain = text.plain if not (text.spans or text.style or text.justify or text.overflow
                                       or text.no_wrap is not None) else None
            got = self._text = (console, options.markup, plain)
        return got[2]

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
            if n <= inner:  # one line, as Text.wrap and Lines.justify leave it
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
