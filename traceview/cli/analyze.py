"""``traceview analyze PATH``: what was read and why, then the shape-keyed op tables and every
analysis, as a table, JSON, CSV or Parquet."""

from __future__ import annotations

import sys
from pathlib import Path

from traceview.model.naming import safe_line
from traceview.cli import args as cargs
from traceview.read.guard import check_writable, inside_inputs, refuse_inside_inputs, write_atomic
from traceview.errors import EXIT_OK, UsageError



FORMATS = ["table", "json", "csv", "parquet"]


def add_parser(sub) -> None:
    a = sub.add_parser("analyze", help="find traces under PATH and print shape-keyed op tables",
                       description="Find traces under PATH, say what was read and why, and print "
                                   "the HLO ops keyed by (name, shape) with occurrences and times.")
    cargs.add_selection(a)
    cargs.add_top(a)
    a.add_argument("--by", choices=["shape", "name", "program", "program-shape", "kind"], default="shape",
                   help="row key: (name, shape) [default; split by module when one key runs in several], name "
                        "only, (program_id, name) as XProf hlo_stats, (module, name, shape) program by program, "
                        "or kind: (op kind, HLO text without instruction names, shape), the copies of one op "
                        "across layers in one row with their count")
    a.add_argument("--format", choices=FORMATS, default=None,
                   help="table [default], json, csv or parquet; with -o and no --format, the file's suffix "
                        "(.txt, .json, .csv, .parquet) decides, another suffix is an error (.html: use --html)")
    a.add_argument("--brief", action="store_true",
                   help="a one-screen summary: what was read, the step time, the top op families and the top three "
                        "findings by impact (with --format json: the same as a small JSON object; not with csv, "
                        "parquet or --fleet)")
    cargs.add_width(a)
    a.add_argument("-o", "--output", metavar="FILE", help="write the output to FILE (required for parquet; - for "
                                                          "standard output)")
    cargs.add_occurrence_checks(a)
    a.add_argument("--html", metavar="FILE", help="also write the offline HTML report to FILE (- for standard output, the output then going to -o FILE)")
    cargs.add_peaks(a)
    cargs.add_phase(a)
    cargs.add_steps(a)
    a.add_argument("--source-frame", choices=["direct", "user"], default="direct",
                   help="attribute ops to the file that emitted them (direct) or to the innermost "
                        "project frame of their stack (user)")
    cargs.add_findings(a)
    a.add_argument("--fleet", action="store_const", const="all", default=None,
                   help="aggregate each host where it is read (--workers, --scheduler) and merge partial "
                        "aggregates: op table (p50/p90 within 1%%), devices, steps, stragglers")
    a.add_argument("--fleet-ops", dest="fleet", action="store_const", const="ops",
                   help="--fleet with the op table and devices only (partials per op description, whatever a "
                        "host's size)")


def _stored(args, disc, out: Path | None):
    """(result cache key or None, whether a stored output was written). A finished output for
    the same options over the same unchanged files is written again (no polars, no
    reading, no ``--scheduler`` contacted: a warning names it; csv and parquet, the op table
    alone, say their stored warnings on standard error again); not for side outputs (--html),
    measured peaks, a byte limit or a terminal whose width and colours vary."""
    if (args.html or getattr(args, "measure_cpu_peaks", False) or args.max_bytes is not None
            or (out is None and (args.format == "table" or (args.format == "csv" and sys.stdout.isatty())))
            or args.no_cache):
        return None, False
    from traceview.cli import resultcache
    from traceview.read.cache import default_root

    root = default_root()
    if root is None:
        return None, False
    rkey = resultcache.key("analyze", vars(args), disc, root)
    hit = resultcache.get(rkey, root)
    warned: list = []  # csv and parquet: the warning lines stored with the output
    if hit is not None and args.format in ("csv", "parquet"):
        warned, hit = resultcache.split_warnings(hit) or ([], None)
    if hit is None or (out is not None and inside_inputs(out, disc)):
        return (rkey, root), False
    for w in warned:
        print(f"traceview: warning: {safe_line(w)}", file=sys.stderr)
    if args.scheduler:  # nothing is read, so no cluster is asked: say so, lest a wrong address pass unseen
        print(f"traceview: warning: the Dask scheduler at {safe_line(args.scheduler)} was not contacted: this "
              f"output was stored by an earlier run over the same files (--no-cache reads them on the cluster)",
              file=sys.stderr)
    if out is not None:
        write_atomic(out, hit)
        print(f"wrote {safe_line(str(out))}", file=sys.stderr)  # as a computed run reports it
    else:
        from traceview.cli.outputs import to_stdout

        to_stdout(hit)
    return (rkey, root), True


def run(args) -> int:
    """Returns 0; raises TraceviewError subclasses on bad input."""
    from traceview.cli import process
    from traceview.read.discover import discover

    from traceview.analysis.steps.window import parse_window

    parse_window(args.step_window)  # a malformed window is refused before the trace is read
    out = cargs.output_path(args.output, "-o")
    args.format = cargs.output_format(args.format, out, FORMATS, "table", hint={
        "html": f"-o {out}: analyze writes table, json, csv or parquet; the HTML report is --html {out} "
                f"(or traceview report PATH -o {out})"})
    if args.brief and args.format in ("csv", "parquet"):
        raise UsageError(f"--brief prints a summary as a table or JSON, not {args.format} (the op table in "
                         f"{args.format}: drop --brief)")
    if args.brief and getattr(args, "fleet", None):
        raise UsageError("--brief summarises one report: not with --fleet / --fleet-ops")
    if args.format == "parquet" and out is None:
        raise UsageError("parquet is binary: give -o FILE, not -" if args.output == "-" else
                         "--format parquet needs -o FILE")
    html = cargs.output_path(args.html, "--html")
    html_out = args.html == "-"  # the report on standard output: the table or JSON then goes to -o FILE
    if html_out and out is None:
        raise UsageError("--html - writes the HTML report to standard output, where the output goes too: give "
                         "-o FILE for it, or --html FILE")
    cargs.distinct_outputs(("-o", out), ("--html", html))
    check_writable(out, "-o")
    check_writable(html, "--html")
    refuse_inside_inputs(out, "-o")
    refuse_inside_inputs(html, "--html")
    cargs.findings_from_args(args)  # a bad --finding-threshold fails before any reading
    stale = cargs.stale_after(args)
    disc = discover(args.path, run=args.run, all_runs=args.all_runs, stale_after_s=stale,
                    group_hosts=cargs.group_hosts(args))
    size = cargs.input_bytes(disc)
    process.tune_allocator(process.fleet_client_bytes(size) if getattr(args, "fleet", None) else size)
    if getattr(args, "fleet", False):
        from traceview.cli.analyze_fleet import run as run_fleet

        return run_fleet(args, disc, out)
    stored, done = _stored(args, disc, out)
    if done:
        return EXIT_OK
    cargs.note_workers(args, disc)
    from traceview.model.load import load, start_prefetch

    opts = cargs.read_options(args)
    idle = process.imports_while_decoding("analysis", "table" if args.format == "table" and not args.brief
                                          else args.format)
    with process.decoding_beside_imports(), process.read_uncollected():
        # started here, not by load: the file is decoded while load imports the cache and the readers
        pre = start_prefetch(disc, max_bytes=args.max_bytes, cache=opts["cache"] or None,
                             local=not opts["scheduler"], idle=idle)
        prof = load(args.path, run=args.run, all_runs=args.all_runs, stale_after_s=stale, max_bytes=args.max_bytes,
                    discovery=disc, prefetch=pre or False, **opts)
    process.trim_heap(cargs.input_bytes(disc))
    from traceview.model.profiledata import check_regex

    for option, rx in (("--filter", args.filter), ("--device", args.device)):
        if rx is not None:
            check_regex(rx, option)
    cargs.check_step_modules(cargs.steps_option(args.steps), prof)
    prof = prof.filter(op_regex=args.filter, device_regex=args.device)
    prof = cargs.apply_phase(prof, args)
    cargs.note_empty_selection(prof, args)
    refuse_inside_inputs(out, "-o", prof.discovery)
    refuse_inside_inputs(html, "--html", prof.discovery)

    from traceview.analysis.report import add_html_sections, build_report

    # every section is computed whatever the format, so bad options fail the same way
    options = dict(by=args.by, peaks=cargs.peaks_from_args(prof, args), steps=cargs.steps_option(args.steps),
                   expect_batch=args.expect_batch, rules=cargs.rules_from_args(args),
                   step_module=args.step_module, step_extent=args.step_extent,
                   step_window=args.step_window, window_option="--step-window", source_frame=args.source_frame,
                   tokens_per_step=args.tokens_per_step, release=process.heap_releaser(cargs.input_bytes(disc)),
                   **cargs.findings_from_args(args))
    # what the output needs is imported meanwhile when a prefetch read the trace (its wait may have
    # done it already); without one (several files, trace JSON, --max-bytes) the report's own
    # peak is the run's, and the imports stay after it
    with process.imports_beside(idle if pre is not None and not process.imports_may_race() else None):
        rep = build_report(prof, beside=not process.imports_may_race(), **options)
    cut = None
    try:
        try:
            data = _write(rep, args, out)
        except BrokenPipeError as e:  # the reader stopped early (| head): --html is written all the same
            cut, data, stored = e, None, None
        # a host read from its JSON because its xplane is unreadable: the key names only the xplane
        if stored is not None and data is not None and list(prof.discovery.files) == list(disc.files):
            from traceview.cli import resultcache

            resultcache.put(stored[0], resultcache.with_warnings(rep.warnings, data)
                            if args.format in ("csv", "parquet") else data, stored[1])
        if out is not None:
            print(f"wrote {safe_line(str(out))}", file=sys.stderr)
        if html is not None or html_out:
            from traceview.render.html import render_report

            add_html_sections(rep, prof)
            page = render_report(rep, top=max(args.top or 0, 30))
            if html_out:
                from traceview.cli.outputs import to_stdout

                to_stdout(page.encode("utf-8"))
            else:
                write_atomic(html, page)
                print(f"wrote {safe_line(str(html))}", file=sys.stderr)
    except BrokenPipeError:
        raise
    except OSError as exc:
        target = out if out is not None else "standard output"
        raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None
    if cut is not None:
        raise cut
    return EXIT_OK


#: Rows of each table in table output when ``--top`` is not given.
TABLE_TOP = 25


def _write(rep, args, out: Path | None) -> bytes | None:
    """Write the output in ``args.format``; returns the bytes written (for the result cache)
    when they were kept, else None. Files are written whole, then renamed into place."""
    if args.format == "table":
        if args.brief:  # its own few rows; --top N: families shown
            from traceview.render.brief import render_brief as render

            top = None if args.top is None or args.top >= cargs.MAX_COUNT else args.top
        else:
            from traceview.render.terminal import render_report as render

            top = cargs.table_top(args, TABLE_TOP)
        if out is None:
            from traceview.cli.outputs import console

            render(console(args.width), rep, top=top)
            return None
        import io

        from traceview.cli.outputs import file_console

        buf = io.StringIO()
        render(file_console(buf, args.width), rep, top=top)
        data = buf.getvalue().encode("utf-8")
    elif args.format == "json" and args.brief:
        from traceview import __version__
        from traceview.render.brief import brief_json

        data = brief_json(rep, version=__version__)
    elif args.format == "json":
        from traceview import __version__
        from traceview.render.json import analysis_json

        data = analysis_json(rep, top=args.top, version=__version__, all_rows=args.all_rows)
    elif args.format in ("csv", "parquet"):  # the op table alone: its warnings said on standard error
        for w in rep.warnings:
            print(f"traceview: warning: {safe_line(w)}", file=sys.stderr)
    if args.format == "csv":
        from traceview.render.tables import flat, terminal_safe

        rows = flat(rep.table.head(args.top) if args.top else rep.table)
        if out is None and sys.stdout.isatty():  # a terminal gets control characters as \x1b, not raw
            rows = terminal_safe(rows)
        data = rows.write_csv().encode("utf-8")
    elif args.format == "parquet":
        import io

        buf = io.BytesIO()
        (rep.table.head(args.top) if args.top else rep.table).write_parquet(buf)
        data = buf.getvalue()
    if out is not None:
        write_atomic(out, data)
        return data
    from traceview.cli.outputs import to_stdout

    to_stdout(data)
    return data
