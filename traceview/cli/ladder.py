"""``traceview ladder PROFILE...``: the family roofline of each profile of a sweep side by side
(:mod:`traceview.analysis.compare.ladder`), as a table, JSON or a standalone HTML page with its plot."""

from __future__ import annotations

import argparse

from traceview.cli import args as cargs
from traceview.errors import EXIT_OK, UsageError

FORMATS = ["table", "json", "html"]


def sweep_values(text: str) -> list[float]:
    """argparse type of ``--x``: comma-separated positive numbers (``8,16,32,64``)."""
    out = []
    for part in text.split(","):
        try:
            v = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
        if not (v > 0 and v < float("inf")):
            raise argparse.ArgumentTypeError(f"sweep values must be finite and positive, got {part!r}")
        out.append(v)
    return out


def add_parser(sub) -> None:
    p = sub.add_parser("ladder", help="families across a sweep of profiles: time per step, scaling per doubling, "
                                      "ridge crossings",
                       description="Read several profiles of one sweep (e.g. the engine at batch 8, 16, 32, 64) and "
                                   "show, per op family, the time per step at each point, the scaling factor per "
                                   "doubling of the sweep variable, the arithmetic intensity against the ridge point "
                                   "and where a family crosses it. The batch is read off the engine's decode program "
                                   "names (jit_decode_b<R>_...) unless --x gives the values.")
    p.add_argument("paths", nargs="+", type=cargs.path_arg, metavar="PROFILE", help="trace files or folders, one per sweep point")
    p.add_argument("--x", type=sweep_values, metavar="V1,V2,...",
                   help="the sweep variable of each profile, in the order given (default: the batch read off the "
                        "engine's decode program name)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="table [default], json or html; with -o and no --format, the file's suffix decides")
    p.add_argument("-o", "--output", metavar="FILE", help="write the output to FILE (- for standard output)")
    cargs.add_width(p)
    cargs.add_families(p)
    p.add_argument("--step-module", metavar="NAME",
                   help="the program whose executions are the steps (default: step markers, else the one with most "
                        "op time)")
    cargs.add_peaks(p)
    p.add_argument("--no-cache", action="store_true", help=cargs.NO_CACHE_HELP)
    cargs.add_max_bytes(p)
    cargs.add_expand_kernels(p)


def run(args) -> int:
    """Returns 0; raises TraceviewError subclasses on bad input."""
    from traceview.analysis.compare.ladder import ladder
    from traceview.cli.diff import load_sides
    from traceview.read.guard import check_writable, refuse_inside_inputs

    out = cargs.output_path(args.output, "-o")
    args.format = cargs.output_format(args.format, out, FORMATS, "table")
    check_writable(out, "-o")
    refuse_inside_inputs(out, "-o")
    if len(args.paths) < 2:
        raise UsageError("ladder compares profiles along a knob: give two or more PROFILE paths "
                         "(for one profile, traceview analyze PATH)")
    if args.x is not None and len(args.x) != len(args.paths):
        raise UsageError(f"--x gives {len(args.x)} value(s) for {len(args.paths)} profile(s)")
    rules = cargs.rules_from_args(args)
    args.device = None
    profs = []
    said: list = []  # the profiles' warning lines, for the JSON
    for prof in load_sides([(p, None) for p in args.paths], args, run_hint="give a run folder as PROFILE",
                           said=said):
        refuse_inside_inputs(out, "-o", prof.discovery)
        profs.append(prof)
    peaks = cargs.peaks_from_args(profs[0], args)
    lad = ladder(profs, xs=args.x, labels=args.paths, rules=rules, peaks=peaks, step_module=args.step_module)
    if args.format == "json":
        from traceview.render.ladder import ladder_json

        text = ladder_json(lad, said)
    elif args.format == "html":
        from traceview.render.ladder import render_ladder_page

        text = render_ladder_page(lad)
    else:
        from traceview.render.ladder import render_ladder, render_ladder_text

        if out is None:
            from traceview.cli.outputs import console

            render_ladder(console(args.width), lad)
            return EXIT_OK
        from traceview.cli.outputs import PLAIN_WIDTH

        text = render_ladder_text(lad, width=args.width or PLAIN_WIDTH)
    from traceview.cli.outputs import emit

    emit(text, out)
    return EXIT_OK
