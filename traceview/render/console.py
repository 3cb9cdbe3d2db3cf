"""The rich Console the commands print with: plain output ends every line at its last
visible character."""

from __future__ import annotations

import re

from rich.console import Console as _RichConsole

#: the spaces ending a line (each run tried once: it starts after a character that is no space)
_TRAILING = re.compile(r"(?<! ) +(?=\n)")


class Console(_RichConsole):
    """rich's Console whose output without colour (``color_system=None``: a pipe, a file, a
    string) has no spaces at the end of a line: none of those rich pads a centred table title
    with, nor the one it leaves where it wraps a long line. With colour, rich's output as it
    is."""

    def _render_buffer(self, buffer) -> str:
        text = super()._render_buffer(buffer)
        if self._color_system is None and " \n" in text:
            text = _TRAILING.sub("", text)
        return text
