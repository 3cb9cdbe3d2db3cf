"""Line-oriented option files (family rules, verify checks): one item per line."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from traceview.errors import UsageError

#: An option file larger than this is refused (a rule file is a few kilobytes; this bounds
#: what a mistaken ``--families /dev/zero`` or a huge file costs).
MAX_OPTION_FILE_BYTES = 1 << 20


def read_option_file(path: str | os.PathLike, what: str) -> bytes:
    """The bytes of an option file. Refuses, with :class:`UsageError` naming ``what`` and the
    file, anything but a regular file (a FIFO would block, a device never end) and a file over
    :data:`MAX_OPTION_FILE_BYTES`; reads at most that many bytes whatever the file claims."""
    p = str(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise UsageError(f"cannot read {what} file ({exc.strerror or exc})", p) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(f"cannot read {what} file: not a regular file", p)
        chunks, n = [], 0
        while n <= MAX_OPTION_FILE_BYTES:
            b = os.read(fd, min(1 << 16, MAX_OPTION_FILE_BYTES + 1 - n))
            if not b:
                break
            chunks.append(b)
            n += len(b)
        if n > MAX_OPTION_FILE_BYTES:
            raise UsageError(f"{what} file is over the {MAX_OPTION_FILE_BYTES:,}-byte limit for option files", p)
        return b"".join(chunks)
    except OSError as exc:
        raise UsageError(f"cannot read {what} file ({exc.strerror or exc})", p) from None
    finally:
        os.close(fd)


def config_lines(path: str | os.PathLike, what: str) -> list[tuple[str, str]]:
    """``(where, text)`` for each line of ``path`` that is neither blank nor a ``#`` comment;
    ``where`` is ``path:line`` for error messages. Raises :class:`UsageError` naming ``what``
    (e.g. "family rules") when the file cannot be read as UTF-8 text or is refused by
    :func:`read_option_file`. A leading byte order mark (an editor's "UTF-8 with BOM") is dropped."""
    p = Path(path)
    try:
        text = read_option_file(p, what).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read {what} file ({exc})", str(p)) from None
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s and not s.startswith("#"):
            out.append((f"{p}:{i}", s))
    return out
