"""The rich consoles the CLI writes tables to (standard output, a file). Where it may write
at all is :mod:`traceview.read.guard`'s."""

from __future__ import annotations

import sys

from traceview.read.guard import check_writable, inside_inputs, refuse_inside_inputs  # noqa: F401 - re-exported


#: Width of a table written to a pipe or a file: wide enough that no cell is cut (a cell is
#: at most :data:`traceview.render.terminal.CELL_LIMIT` characters), so ``| grep`` and
#: ``| cat`` see every name and line number whole; lines are only as long as their content.
PLAIN_WIDTH = 8192


def to_stdout(data: bytes | str) -> None:
    """``data`` (UTF-8 when bytes) to standard output. A terminal gets JSON's raw C1 controls,
    bidi, invisible and separator characters as ``\\uXXXX`` (:func:`~traceview.model.naming.json_safe`:
    the same JSON; tables and CSV escaped theirs already); a pipe or a file gets the bytes."""
    sys.stdout.flush()
    if sys.stdout.isatty():
        from traceview.model.naming import json_safe

        text = data.decode("utf-8") if isinstance(data, bytes) else data
        safe = json_safe(text)
        if safe is not text or isinstance(data, str):
            sys.stdout.write(safe)
            return
    if isinstance(data, str):
        sys.stdout.write(data)
    elif hasattr(sys.stdout, "buffer"):
        sys.stdout.buffer.write(data)
    else:
        sys.stdout.write(data.decode("utf-8"))


def emit(text: str, out) -> None:
    """``text`` to the file ``out`` (written whole or not at all, then ``wrote OUT`` on stderr),
    or to standard output when ``out`` is None."""
    from traceview.model.naming import safe_line
    from traceview.read.guard import write_atomic

    if out is not None:
        write_atomic(out, text)
        print(f"wrote {safe_line(str(out))}", file=sys.stderr)
    else:
        to_stdout(text)


def console(width: int | None = None):
    """A rich console on standard output: the terminal's own when it is one, else plain text
    (no colours) :data:`PLAIN_WIDTH` wide, whatever ``$COLUMNS`` says (a shell exports it to
    pipes too; a pipe's reader wants whole cells). ``width`` (``--width``): that many columns
    either way. A closed pipe raises BrokenPipeError (rich would exit 1)."""
    from traceview.render.console import Console  # plain output: no trailing spaces

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich exits 1 here; a closed pipe is a normal end
            raise BrokenPipeError

    if sys.stdout.isatty():
        return _fixed_size(_Console(width=width, highlight=False, emoji=False))
    return _fixed_size(_Console(width=width or PLAIN_WIDTH, color_system=None, soft_wrap=False, highlight=False,
                                emoji=False))


def _fixed_size(con):
    """``con`` with its size as it is now, kept: rich otherwise asks the three standard streams for
    a terminal size (and the environment for ``COLUMNS`` and ``LINES``) at each print and each
    table, for the same answer while a command runs."""
    if not con.legacy_windows:  # its width is one less than it says; set as is, it would shrink
        con.size = con.size
    return con


def file_console(fh, width: int | None = None):
    """A plain rich console writing to an open text file, ``width`` (else :data:`PLAIN_WIDTH`)
    wide."""
    from traceview.render.console import Console  # plain output: no trailing spaces

    return Console(file=fh, width=width or PLAIN_WIDTH, color_system=None, highlight=False, emoji=False)
