"""Where the CLI writes: refusing outputs inside a profile folder or onto a trace, checking
an output's folder before any work, and the rich console for standard output."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from traceview.errors import UsageError


def inside_inputs(out: Path, discovery) -> bool:
    """True when ``out`` would land in a folder traceview read a trace from, is a (hard link
    to a) trace file it read, or lies anywhere in a ``plugins/profile`` tree (where a stray
    output would later be taken for a trace)."""
    out = out.resolve()
    dirs = set()
    if discovery is not None:
        for f in discovery.files:
            dirs.add(Path(f.path).resolve().parent)
            try:
                if out.exists() and os.path.samefile(out, f.path):  # a hard link to a trace elsewhere
                    return True
            except OSError:
                pass
    if any(out == d or d in out.parents for d in dirs):
        return True
    chain = [out, *out.parents]
    return any(p.name == "profile" and p.parent.name == "plugins" for p in chain)


def refuse_inside_inputs(out: Path | None, flag: str, *discoveries) -> None:
    """UsageError when ``out`` is inside what any of ``discoveries`` read (:func:`inside_inputs`)."""
    if out is not None and any(inside_inputs(out, d) for d in discoveries):
        raise UsageError(f"refusing to write {out}: it is inside the profile folder it reads or is one of its "
                         f"trace files; choose another {flag}")


def check_writable(path: Path | None, flag: str) -> None:
    """UsageError unless ``path`` names a file whose folder exists (checked before any work)."""
    if path is None:
        return
    if path.is_dir():
        raise UsageError(f"refusing to write {path}: it is a folder; {flag} needs a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"refusing to write {path}: folder {parent} does not exist")


#: Width of a table written to a pipe or a file: wide enough that no cell is cut (a cell is
#: at most :data:`traceview.render.terminal.CELL_LIMIT` characters), so ``| grep`` and
#: ``| cat`` see every name and line number whole; lines are only as long as their content.
PLAIN_WIDTH = 8192


def console():
    """A rich console on standard output: the terminal's own when it is one, else plain text
    (no colours) ``$COLUMNS`` wide when set (60 or more), else :data:`PLAIN_WIDTH`. A closed
    pipe raises BrokenPipeError (rich would exit 1)."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich exits 1 here; a closed pipe is a normal end
            raise BrokenPipeError

    if sys.stdout.isatty():
        return _Console(highlight=False)
    try:
        width = int(os.environ.get("COLUMNS", "") or 0)
    except ValueError:
        width = 0
    return _Console(width=width if width >= 60 else PLAIN_WIDTH, color_system=None, soft_wrap=False, highlight=False)


def file_console(fh):
    """A plain rich console writing to an open text file, :data:`PLAIN_WIDTH` wide."""
    from rich.console import Console

    return Console(file=fh, width=PLAIN_WIDTH, color_system=None, highlight=False)
