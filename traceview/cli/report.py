"""``traceview report PATH -o FILE``: the offline, self-contained HTML report."""

from __future__ import annotations

import sys

from traceview.model.naming import safe_line
from traceview.cli import args as cargs
from traceview.read.guard import check_writable, refuse_inside_inputs, write_atomic
from traceview.errors import EXIT_OK, UsageError



def add_parser(sub) -> None:
    r = sub.add_parser("report", help="write the offline, self-contained HTML report of PATH",
                       description="Find traces under PATH and write one self-contained HTML file (no network, "
                                   "no script): provenance, peaks and ridge point, roofline chart, top ops "
                                   "with their shape populations, step anatomy and source attribution.")
    cargs.add_selection(r)
    r.add_argument("-o", "--output", metavar="FILE", default="traceview_report.html",
                   help="HTML file to write (default: traceview_report.html)")
    r.add_argument("--top", type=cargs.positive_int, default=30, metavar="N", help="populations to list (default 30)")
    r.add_argument("--title", metavar="TEXT", help="page title (default: 'traceview report — <path name>')")
    cargs.add_peaks(r)
    cargs.add_phase(r)
    cargs.add_steps(r)
    cargs.add_findings(r)
    r.add_argument("--by", choices=["shape", "kind"], default="shape",
                   help="kind: add a table of the ops across layers, one row per (op kind, HLO text without "
                        "instruction names, shape) with its op names counted")


def run(args) -> int:
    """Writes the report (see :func:`traceview.render.html.render_report`); returns 0."""
    from traceview.analysis.steps.window import parse_window

    parse_window(args.step_window)  # a malformed window is refused before the trace is read
    out = cargs.output_path(args.output, "-o")
    if out is None:
        raise UsageError("report writes an HTML file: -o needs a file name")
    cargs.output_format(None, out, ["html"], "html", hint={
        f: f"-o {out}: report writes HTML (.html, .htm or no suffix); for {f} use traceview analyze PATH -o {out}"
        for f in ("json", "csv", "parquet", "table")})
    check_writable(out, "-o")
    refuse_inside_inputs(out, "-o")
    from traceview.cli import process
    from traceview.cli.chartworker import ChartWorker
    from traceview.read.discover import discover

    disc = discover(args.path, run=args.run, all_runs=args.all_runs, stale_after_s=cargs.stale_after(args),
                    group_hosts=cargs.group_hosts(args))
    process.tune_allocator(cargs.input_bytes(disc))  # before the template's thread imports polars
    cargs.note_workers(args, disc)
    _compile_template_meanwhile()
    with ChartWorker() as charts:  # matplotlib imported in a second process while the trace is read
        return _write(args, out, charts, disc)


def _compile_template_meanwhile() -> None:
    """Compile the report's jinja2 template in a thread while the trace is read (the reader's C
    and polars passes release the GIL), not after the tables are built. A failure there is raised again, where it belongs, when
    the report renders."""
    import threading

    def compile_it():
        try:
            from traceview.render.html import report_template

            report_template()
        except BaseException:  # noqa: BLE001 - rendering raises it again in the main thread
            pass

    threading.Thread(target=compile_it, name="traceview-template", daemon=True).start()


def _write(args, out, charts, disc) -> int:
    from traceview.cli import process
    from traceview.model.load import load

    with process.decoding_beside_imports():
        prof = load(args.path, run=args.run, all_runs=args.all_runs, stale_after_s=cargs.stale_after(args),
                    max_bytes=args.max_bytes, discovery=disc, idle=process.imports_while_decoding("analysis", "html"),
                    **cargs.read_options(args))
    process.trim_heap(cargs.input_bytes(disc))
    from traceview.model.profiledata import check_regex

    for option, rx in (("--filter", args.filter), ("--device", args.device)):
        if rx is not None:
            check_regex(rx, option)
    prof = prof.filter(op_regex=args.filter, device_regex=args.device)
    prof = cargs.apply_phase(prof, args)
    cargs.note_empty_selection(prof, args)
    for w in prof.warnings[-1:] if prof.table.height == 0 else ():
        print(f"traceview: warning: {safe_line(w)}", file=sys.stderr)
    refuse_inside_inputs(out, "-o", prof.discovery)
    from traceview.analysis.report import build_report
    from traceview.render.html import render_report, submit_charts, submit_roofline

    rep = build_report(prof, peaks=cargs.peaks_from_args(prof, args), rules=cargs.rules_from_args(args),
                       step_module=args.step_module, step_extent=args.step_extent,
                       step_window=args.step_window, window_option="--step-window", html=True, by=getattr(args, "by", "shape"),
                       tokens_per_step=args.tokens_per_step,
                       on_section=lambda r: submit_charts(r, charts),  # drawn while the rest is built
                       on_roofline=lambda rows, peaks: submit_roofline(rows, peaks, charts),
                       release=process.heap_releaser(cargs.input_bytes(disc)),
                       beside=not process.imports_may_race(), **cargs.findings_from_args(args))
    text = render_report(rep, top=args.top, title=args.title, charts=charts)
    write_atomic(out, text)
    print(f"wrote {safe_line(str(out))}", file=sys.stderr)
    return EXIT_OK
