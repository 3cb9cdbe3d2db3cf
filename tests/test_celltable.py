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
