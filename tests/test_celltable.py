"""traceview.render.celltable.Table prints exactly what rich's default Table prints: any cell
text (markup, escapes, wide and odd characters, empty), any column options the renderers use,
any width (cells that fit on one line and cells that wrap or fold), with and without colour."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.errors import MarkupError
from rich.table import Table as RichTable

from traceview.render.celltable import Table
from traceview.render.terminal import escape

_TEXT = st.lists(st.sampled_from(list("ab c  xy[]/\\:×—漢字é\u0301\t\n,.0") + ["[red]", "[/red]", "[bold]", ":smile:"]),
                 max_size=30).map("".join)
_CELL = st.one_of(_TEXT, _TEXT.map(escape), st.none())


def _print(cls, title, columns, rows, width, colour, emoji):
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=colour, color_system="256" if colour else None,
                      highlight=False, emoji=emoji)
    t = cls(title=title)
    for header, justify, overflow, min_width in columns:
        t.add_column(header, justify=justify, overflow=overflow, min_width=min_width)
    for r in rows:
        t.add_row(*r)
    try:
        console.print(t)
    except MarkupError as exc:  # a raw cell that is broken markup: the same error either way
        return f"MarkupError: {exc}"
    return buf.getvalue()


@settings(max_examples=300, deadline=None)
@given(data=st.data(), n_cols=st.integers(1, 5), width=st.sampled_from([8, 20, 40, 80, 200, 8192]),
       colour=st.booleans(), emoji=st.booleans())
def test_same_output_as_richs_table(data, n_cols, width, colour, emoji):
    columns = [(data.draw(_TEXT.map(escape)), data.draw(st.sampled_from(["left", "right"])),
                data.draw(st.sampled_from(["fold", "ellipsis"])), data.draw(st.one_of(st.none(), st.integers(0, 30))))
               for _ in range(n_cols)]
    rows = data.draw(st.lists(st.lists(_CELL, min_size=n_cols, max_size=n_cols), max_size=6))
    title = data.draw(st.one_of(st.none(), _TEXT.map(escape)))
    assert _print(Table, title, columns, rows, width, colour, emoji) == \
        _print(RichTable, title, columns, rows, width, colour, emoji)


def test_same_output_for_renderables_and_markup():
    from rich.text import Text

    rows = [["[red]NO[/red]", Text("plain text object"), "x" * 30], [None, "[green]project[/green] tail", ""]]
    cols = [("a", "left", "fold", None), ("[bold]b[/bold]", "right", "fold", 12), ("c", "left", "ellipsis", None)]
    for width in (10, 30, 120):
        for colour in (False, True):
            assert _print(Table, "t", cols, rows, width, colour, False) == _print(RichTable, "t", cols, rows, width,
                                                                                  colour, False)


_PLAIN = st.lists(st.sampled_from(list("ab c  xy[]/\\:×—漢字é\u0301,.0-") + ["  ", "ﬁ", "😀", "[red]NO[/red]", "[dim]"]),
                  max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), n_cols=st.integers(1, 5), width=st.sampled_from([30, 80, 8192]))
def test_plain_layout_same_as_richs_table(data, n_cols, width):
    """Without colour, a table of printable one-line cells is laid out line by line
    (Table._plain_lines) to the bytes rich's Table prints; it is used whenever the columns fit."""
    header = st.one_of(st.sampled_from(["#", "op", "self %", "[x] y", "漢字"]), _PLAIN.map(lambda s: "h" + s))
    columns = [(data.draw(header.map(escape)), data.draw(st.sampled_from(["left", "right"])),
                data.draw(st.sampled_from(["fold", "ellipsis"])), data.draw(st.one_of(st.none(), st.integers(0, 30))))
               for _ in range(n_cols)]
    cell = st.one_of(_PLAIN.map(escape), _PLAIN.map(escape).map(lambda s: f"[green]{s}[/]"), st.none())
    rows = data.draw(st.lists(st.lists(cell, min_size=n_cols, max_size=n_cols), max_size=6))
    title = data.draw(st.one_of(st.none(), _PLAIN.map(escape)))
    used = []
    plain_lines = Table._plain_lines

    def spy(self, console, options):
        got = plain_lines(self, console, options)
        used.append(got is not None)
        return got

    Table._plain_lines = spy
    try:
        ours = _print(Table, title, columns, rows, width, False, False)
    finally:
        Table._plain_lines = plain_lines
    assert ours == _print(RichTable, title, columns, rows, width, False, False)
    if width == 8192:
        assert used == [True]


def test_plain_layout_only_without_colour():
    """With colour the cells' styles are printed: rich's layout (and _Cell's) does it."""
    rows = [["[red]NO[/red]", "x"], ["ok", "[green]project[/]"]]
    cols = [("a", "left", "fold", None), ("b", "right", "fold", 4)]
    coloured = _print(Table, "t", cols, rows, 8192, True, False)
    assert "\x1b[" in coloured and coloured == _print(RichTable, "t", cols, rows, 8192, True, False)
