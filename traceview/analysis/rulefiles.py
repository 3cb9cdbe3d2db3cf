"""Line-oriented option files (family rules, verify checks): one item per line."""

from __future__ import annotations

import os
from pathlib import Path

from traceview.errors import UsageError


def config_lines(path: str | os.PathLike, what: str) -> list[tuple[str, str]]:
    """``(where, text)`` for each line of ``path`` that is neither blank nor a ``#`` comment;
    ``where`` is ``path:line`` for error messages. Raises :class:`UsageError` naming ``what``
    (e.g. "family rules") when the file cannot be read as UTF-8 text."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {what} file ({getattr(exc, 'strerror', None) or exc})", str(p)) from None
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s and not s.startswith("#"):
            out.append((f"{p}:{i}", s))
    return out
