"""The analysis layer: results computed from the op table.

Aggregation by shape / name / program, occurrence checks, peaks and roofline, source
attribution, custom kernels, op families, step anatomy, populations, diff and verify, and the
:class:`~traceview.analysis.report.Report` that gathers what one command shows. Functions
take model tables and return polars frames or small value objects; none prints or reads a file
other than a rules or checks file named by the caller.
"""
