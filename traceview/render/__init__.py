"""The render layer: a report in, text or bytes out (terminal, JSON, HTML, diff pages).

A renderer formats what a :class:`~traceview.analysis.report.Report` (or a diff or verify
result) holds; it never computes an analysis and never opens a trace. Every string that comes
from a trace is escaped for its medium (terminal control characters, rich markup, HTML).
"""
