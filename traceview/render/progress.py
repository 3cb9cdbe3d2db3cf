"""A progress bar on stderr for reading many trace files (rich)."""

from __future__ import annotations


class TerminalProgress:
    """A ``progress`` callback of :func:`traceview.read.batch.read_many` drawing a rich
    progress bar (files, MB, events) on stderr.

    Draws only when the stream is a terminal (``enabled``); otherwise every call is a no-op.
    Use as a context manager so the bar is removed at the end.
    """

    def __init__(self, stream=None, force: bool = False):
        import sys

        self.stream = stream or sys.stderr
        self.enabled = force or (hasattr(self.stream, "isatty") and self.stream.isatty())
        self._bar = None
        self._task = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        return False

    def __call__(self, p) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, Progress as Bar, TextColumn, TimeElapsedColumn

            self._bar = Bar(TextColumn("reading traces"), BarColumn(), TextColumn("{task.fields[what]}"),
                            TimeElapsedColumn(), console=Console(file=self.stream), transient=True)
            self._bar.start()
            self._task = self._bar.add_task("read", total=max(p.bytes_total, 1), what="")
        what = (f"{p.files_done}/{p.files_total} files, {p.bytes_done / 1e6:,.0f}/{p.bytes_total / 1e6:,.0f} MB, "
                f"{p.events:,} events")
        self._bar.update(self._task, completed=p.bytes_done, what=what)
        if p.files_done >= p.files_total:
            self._bar.stop()
            self._bar = None
