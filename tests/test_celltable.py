"""traceview.render.celltable.Table prints exactly what rich's default Table prints: any cell
text (markup, escapes, wide and odd characters, empty), any column options the renderers use,
any width (cells that fit on one line and cells that wrap or fold), with and without colour."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
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


#: words of a table's ASCII cells (as step reasons, times and device names are)
_WORDS = st.lists(st.sampled_from(["a", "bc", "def", "step", "1.43 µs", "/device:TPU:0", "outlier", "-", " ", "  ",
                                   "duration 3.1x the median", "abcdefghijklmnopqrstuvwxyz", ",", "."]),
                  max_size=12).map(" ".join)


@settings(max_examples=400, deadline=None)
@given(data=st.data(), n_cols=st.integers(1, 8), width=st.sampled_from([12, 30, 41, 80, 8192]))
def test_plain_layout_same_as_richs_table(data, n_cols, width):
    """Without colour, a table of printable one-line cells is laid out line by line
    (Table._plain_lines) to the bytes rich's Table prints, its columns narrowed and its cells
    wrapped as rich's are when they do not fit; it is used whenever the columns fit."""
    header = st.one_of(st.sampled_from(["#", "op", "self %", "[x] y", "漢字"]), _PLAIN.map(lambda s: "h" + s))
    columns = [(data.draw(header.map(escape)), data.draw(st.sampled_from(["left", "right"])),
                data.draw(st.sampled_from(["fold", "ellipsis", "crop"])), data.draw(st.one_of(st.none(), st.integers(0, 30))))
               for _ in range(n_cols)]
    cell = st.one_of(_PLAIN.map(escape), _PLAIN.map(escape).map(lambda s: f"[green]{s}[/]"), st.none(), _WORDS)
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


def _steps_like(n_rows: int) -> tuple[list, list]:
    """The per-step table's columns and ``n_rows`` rows (a long reason on every third)."""
    cols = [("device", "left", "fold", None), ("step", "right", "fold", None), ("start", "right", "fold", None),
            ("duration", "right", "fold", None), ("idle", "right", "fold", None), ("gap before", "right", "fold", None),
            ("window", "left", "fold", None), ("reason", "left", "fold", None)]
    rows = [[f"host{i % 3:02d}:/device:TPU:{i % 4}", str(i), f"{i * 0.784:.3f} s", "784.135 ms", "7.5 ns", "1.43 µs",
             "[red]outlier[/red]" if i % 3 == 0 else "",
             "duration 1.52x the median step (784.1 ms); the gap before it 12.3 ms" if i % 3 == 0 else ""]
            for i in range(n_rows)]
    return cols, rows


def test_a_narrow_table_of_many_rows_is_laid_out_line_by_line(monkeypatch):
    """At 41 columns the per-step table's cells wrap into tall rows: without colour the whole
    table is still laid out by Table._plain_lines (never rich's Table, whose time and memory
    per cell made ``--width 41 --all-rows`` take minutes), the rows as tall as rich makes them;
    with colour no cell of plain text goes through rich's Padding. Both print rich's bytes."""
    from rich.padding import Padding

    cols, rows = _steps_like(60)
    used = []
    plain_lines = Table._plain_lines

    def spy(self, console, options):
        got = plain_lines(self, console, options)
        used.append(got is not None)
        return got

    monkeypatch.setattr(Table, "_plain_lines", spy)
    ours = _print(Table, "steps", cols, rows, 41, False, False)
    assert used == [True]
    assert ours == _print(RichTable, "steps", cols, rows, 41, False, False)
    lines = ours.splitlines()
    assert max(cell_len(ln) for ln in lines) <= 41
    body = lines[lines.index(next(ln for ln in lines if ln.startswith("┡"))) + 1:-1]
    assert len(body) > 3 * len(rows)  # every row wraps over several lines
    assert sum(ln.startswith("│ h") for ln in body) == len(rows)  # each row's first line starts its device

    padded = []
    render = Padding.__rich_console__

    def count(self, console, options):
        padded.append(self.renderable)
        return render(self, console, options)

    monkeypatch.setattr(Padding, "__rich_console__", count)
    coloured = _print(Table, "steps", cols, rows, 41, True, False)
    assert padded and all("[" in str(r) for r in padded)  # only the marked-up cells ("[red]outlier[/red]")
    monkeypatch.setattr(Padding, "__rich_console__", render)
    assert coloured == _print(RichTable, "steps", cols, rows, 41, True, False)


def test_plain_console_ends_lines_at_their_last_character():
    """traceview's Console drops the spaces rich leaves at the end of a line without colour (a
    centred title, a wrapped line), and nothing else; with colour it prints rich's bytes."""
    from traceview.render.console import Console as PlainConsole

    def show(cls, colour):
        buf = io.StringIO()
        console = cls(file=buf, width=30, force_terminal=colour, color_system="256" if colour else None,
                      highlight=False, emoji=False)
        t = Table(title="a centred title")
        t.add_column("x")
        t.add_row("a  b")
        console.print(t)
        console.print("a line long enough to be wrapped by rich at thirty columns")
        console.print("keep  ", end="")
        console.print("two spaces inside")
        return buf.getvalue()

    plain, richs = show(PlainConsole, False), show(Console, False)
    assert richs != plain and any(ln.endswith(" ") for ln in richs.splitlines())
    assert plain == "\n".join(ln.rstrip(" ") for ln in richs.split("\n"))
    assert "keep  two spaces inside" in plain
    assert show(PlainConsole, True) == show(Console, True)
