"""``traceview query PATH SQL``: SQL over a profile's named tables (:mod:`traceview.analysis.sql`)
as a table, JSON, CSV or Parquet; ``--tables`` lists the tables and their columns."""

from __future__ import annotations

import sys
from pathlib import Path

from traceview.cli import args as cargs
from traceview.errors import EXIT_OK, UsageError

FORMATS = ["table", "json", "csv", "parquet"]

#: rows of table output when ``--top`` is not given
TABLE_TOP = 25

_EPILOG = """\
tables: ops (one row per HLO op event), module_runs, programs, populations (analyze's op table),
roofline, kernels, sources, steps, families, devices, ... and every other table of the report
(communication, findings where the trace has them; occurrence_checks with --steps / --expect-batch):
traceview query PATH --tables lists them with their columns. polars SQL: list columns with
array_contains(modules, 'jit_f').
examples:
  traceview query T.xplane.pb "SELECT op_name, shape, self_ps FROM populations
      WHERE array_contains(modules, 'jit_f') ORDER BY self_ps DESC LIMIT 5"
  traceview query T.xplane.pb "SELECT op_name, mean_ps, median_ps FROM populations WHERE mean_ps > 2 * median_ps"
limits: the SQL runs in a child process under --query-memory (GiB above the tables) and --query-timeout (s);
a query past either (an aggregate or ORDER BY over a cross join) stops with one line, exit 6.
exit codes: 0 ok, 2 bad SQL, unknown table or column, or usage, 3-5 and 7 trace and remote-store errors,
6 a reading or query limit exceeded, 8 broken installation"""


def add_parser(sub) -> None:
    import argparse

    q = sub.add_parser("query", help="run SQL over a profile's tables (ops, populations, steps, ...)",
                       description="Run a SQL query (polars' SQL engine) over the named tables of a profile: the op "
                                   "events, the populations and every other table traceview analyze computes.",
                       epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    cargs.add_selection(q)
    q.add_argument("sql", nargs="?", metavar="SQL", help="the query (quote it); omit with --tables")
    q.add_argument("--tables", action="store_true", help="list the tables and their columns (dtype, meaning)")
    q.add_argument("--top", type=cargs.positive_int, default=None, metavar="N",
                   help="rows of the result to output (table output shows 25 when not given; JSON, CSV and "
                        "Parquet hold every row, and JSON says how many under \"rows\")")
    q.add_argument("--format", choices=FORMATS, default=None,
                   help="table [default], json, csv or parquet; with -o and no --format, the file's suffix decides")
    q.add_argument("-o", "--output", metavar="FILE", help="write the output to FILE (required for parquet)")
    cargs.add_query_limits(q)
    cargs.add_occurrence_checks(q)  # the occurrence_checks table
    cargs.add_peaks(q)
    cargs.add_steps(q)


def report_options(args) -> dict:
    """:func:`~traceview.analysis.report.build_report` keyword arguments from the step,
    occurrence-check and source options present on ``args`` (those build_report takes)."""
    import inspect

    from traceview.analysis.report import build_report

    known = inspect.signature(build_report).parameters
    out = {k: getattr(args, k) for k in ("step_module", "step_window", "step_extent", "source_frame", "expect_batch")
           if k in known and hasattr(args, k)}
    if "steps" in known and hasattr(args, "steps"):
        out["steps"] = cargs.steps_option(args.steps)
    return out


def load_tables(args, out: Path | None):
    """The :class:`~traceview.analysis.sql.Tables` of the profile at ``args.path`` (read as
    ``analyze`` reads it: run, filters, peaks, family rules, steps)."""
    from traceview.analysis.report import build_report
    from traceview.analysis.sql import tables
    from traceview.cli import process
    from traceview.model.load import load
    from traceview.model.profiledata import check_regex
    from traceview.read.discover import discover
    from traceview.read.guard import refuse_inside_inputs

    stale = cargs.stale_after(args)
    disc = discover(args.path, run=args.run, all_runs=args.all_runs, stale_after_s=stale,
                    group_hosts=cargs.group_hosts(args))
    process.tune_allocator(cargs.input_bytes(disc))
    cargs.note_workers(args, disc)
    with process.decoding_beside_imports():
        prof = load(args.path, run=args.run, all_runs=args.all_runs, stale_after_s=stale, max_bytes=args.max_bytes,
                    discovery=disc, **cargs.read_options(args))
    for option, rx in (("--filter", args.filter), ("--device", args.device)):
        if rx is not None:
            check_regex(rx, option)
    cargs.check_step_modules(cargs.steps_option(getattr(args, "steps", None)), prof)
    prof = prof.filter(op_regex=args.filter, device_regex=args.device)
    refuse_inside_inputs(out, "-o", prof.discovery)
    rep = build_report(prof, peaks=cargs.peaks_from_args(prof, args), rules=cargs.rules_from_args(args),
                       release=process.heap_releaser(cargs.input_bytes(disc)), window_option="--step-window",
                       **report_options(args))
    return tables(rep, prof)


def _sql_before_path(args) -> None:
    """UsageError when the SQL came first (``query "SELECT ..." PATH``): PATH then reads as the
    query, and the trace as the SQL; said so instead of "does not exist"."""
    import os
    import re

    path, q = str(args.path or ""), args.sql or ""
    if (re.match(r"\s*(select|with|show|describe|explain)\b", path, re.IGNORECASE) and not os.path.exists(path)
            and q and (os.path.exists(q) or "://" in q)):
        raise UsageError(f"the trace comes first, then the query: traceview query {q} \"{path}\"")


def output(args, out: Path | None, terminal: bool = False) -> bytes:
    """The bytes ``traceview query`` writes for ``args``: the profile read, the query run (its
    displayed rows only, when the output shows a part: :func:`~traceview.analysis.sql.execute_head`)
    and rendered under the limits of :func:`traceview.cli.sqlguard.limited`; ``terminal``: the
    bytes go to a terminal (CSV escapes control characters)."""
    from traceview import __version__
    from traceview.analysis import sql
    from traceview.cli import sqlguard

    t = load_tables(args, out)
    if args.tables:
        title = "tables of traceview query (table, column, dtype, meaning)"
        if args.format == "table":
            from traceview.render.query import query_text

            return query_text(sql.describe_frame(t), top=args.top or 10_000, title=title).encode("utf-8")
        if args.format == "json":
            from traceview.render.json import dumps, tables_payload

            return dumps(tables_payload(sql.describe(t), version=__version__)).encode("utf-8")
        df = sql.describe_frame(t)
        df = df.head(min(args.top, sql.MAX_ROWS)) if args.top else df
        return _frame_bytes(df, args.format, terminal)
    top = args.top or (TABLE_TOP if args.format == "table" else None)
    with sqlguard.limited(args.path):
        df, total = sql.execute_head(t, args.sql, top) if top else (sql.execute(t, args.sql), None)
        if args.format == "table":
            from traceview.render.query import query_text

            return query_text(df, top=top, title=args.sql, total=total).encode("utf-8")
        if args.format == "json":
            from traceview.render.json import dumps, query_payload

            return dumps(query_payload(df, query=args.sql, top=args.top, version=__version__,
                                       total=total)).encode("utf-8")
        return _frame_bytes(df, args.format, terminal)


def _frame_bytes(df, fmt: str, terminal: bool) -> bytes:
    """``df`` as CSV (control characters escaped for a ``terminal``, as analyze) or Parquet."""
    if fmt == "csv":
        from traceview.render.tables import flat, terminal_safe

        rows = flat(df)
        if terminal:
            rows = terminal_safe(rows)
        return rows.write_csv().encode("utf-8")
    import io

    buf = io.BytesIO()
    df.write_parquet(buf)
    return buf.getvalue()


def run(args) -> int:
    """Returns 0; raises UsageError (exit 2) for bad SQL, an unknown table or column,
    LimitExceeded (exit 6) for a query past ``--query-memory`` / ``--query-timeout`` (run in a
    child: :mod:`traceview.cli.sqlguard`), and TraceviewError subclasses on bad input."""
    from traceview.cli import sqlguard
    from traceview.read.guard import check_writable, refuse_inside_inputs, write_atomic

    _sql_before_path(args)
    out = cargs.output_path(args.output, "-o")
    args.format = cargs.output_format(args.format, out, FORMATS, "table")
    if args.format == "parquet" and out is None:
        raise UsageError("--format parquet needs -o FILE")
    if args.tables == bool(args.sql):
        raise UsageError("give a SQL query or --tables (not both)" if args.tables else
                         "no SQL query given: traceview query PATH \"SELECT ...\" (--tables lists the tables)")
    check_writable(out, "-o")
    refuse_inside_inputs(out, "-o")
    terminal = out is None and sys.stdout.isatty()
    data = sqlguard.run(output, args, out, terminal, path=args.path, **cargs.query_limits(args))
    if out is not None:
        write_atomic(out, data)
        from traceview.model.naming import safe_line

        print(f"wrote {safe_line(str(out))}", file=sys.stderr)
    else:
        from traceview.cli.outputs import to_stdout

        to_stdout(data)
    return EXIT_OK
