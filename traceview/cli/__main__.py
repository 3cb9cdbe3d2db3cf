"""``python -m traceview.cli``: the ``traceview`` command."""

from traceview.cli import entry

entry()
