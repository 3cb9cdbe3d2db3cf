"""``traceview history LOGDIR [PATH...]``: every run under the paths, oldest first, with its
steady step time, top families, kernel configurations and findings, and the regression rule of
:mod:`traceview.analysis.compare.history` (exit 1 under ``--fail-on-regression`` for a slowdown outside
the noise)."""

from __future__ import annotations

import math
import sys

from traceview.cli import args as cargs
from traceview.errors import EXIT_CHECK_FAILED, EXIT_OK, UsageError


def add_parser(sub) -> None:
    h = sub.add_parser("history", help="every run under a log dir, oldest first: step time trend and regressions",
                       description="Summarise every run under LOGDIR (and any further PATHs), oldest first by run "
                                   "folder timestamp: the steady step time (median, p10-p90), the top op families "
                                   "per step, the custom kernels' configurations and findings. Each run is read as "
                                   "itself: a run folder as that run, a trace file (given, or lying loose outside "
                                   "a run folder) as that file; runs that cannot be read are skipped and listed. "
                                   "Each run is compared with a baseline of the same step program (the previous "
                                   "such run, or --baseline RUN) by the ratio of median step times and its noise "
                                   "interval; the first run of a step program is its 'baseline', a run of an "
                                   "unknown program (or not the --baseline's) says 'no comparable run'.",
                       epilog="exit codes: 0 ok (or regressions without --fail-on-regression), 1 a regression under "
                              "--fail-on-regression (or a slowdown past the threshold that cannot be judged: too few "
                              "steps for an interval, no run-to-run noise to judge it against, or an interval that "
                              "reaches past the threshold), 2 usage, 3 no trace, 4 unreadable, 5 no ops, 6 limit exceeded, 7 remote store unreadable, 8 broken installation")
    h.add_argument("paths", nargs="+", type=cargs.path_arg, metavar="PATH", help="log dir(s), plugins/profile folders or run folders")
    h.add_argument("--baseline", metavar="RUN", help="compare every run with this run (its folder name or path) "
                                                     "instead of the previous run")
    h.add_argument("--regression-threshold", type=cargs.percent, default=5.0, metavar="PCT",
                   help="a regression is a slowdown of the median step whose whole noise interval is at least "
                        "PCT percent, 5 or 5%% (default 5)")
    h.add_argument("--noise-level", type=cargs.positive_float, default=0.95, metavar="P",
                   help="confidence level of the noise interval, in (0, 1) (default 0.95)")
    h.add_argument("--noise", type=cargs.percent, default=None, metavar="PCT",
                   help="the run-to-run noise of one run against another on your machine, in percent (10 or 10%% for "
                        "±10%%, from A/A runs of one configuration); default: the built-in prior where it was "
                        "measured (CPU), else unknown (no verdict)")
    h.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1 when a run is a regression against its baseline")
    h.add_argument("--format", choices=["table", "json", "html"], default=None,
                   help="table [default], json or html (trend chart); with -o and no --format the file's suffix "
                        "decides")
    h.add_argument("-o", "--output", metavar="FILE", help="write the output to FILE (- for standard output)")
    cargs.add_width(h)
    h.add_argument("--append", metavar="FILE", help="append one JSON line per run to FILE (JSONL); refused inside "
                                                    "a profile folder")
    h.add_argument("--families", metavar="FILE", help="user op families, one NAME=REGEX per line (# comments)")
    h.add_argument("--family", action="append", metavar="NAME=REGEX", help="a user op family (repeatable)")
    h.add_argument("--no-cache", action="store_true", help=cargs.NO_CACHE_HELP)


def _is_run_folder(d) -> bool:
    """A profiling session's folder: named ``YYYY_MM_DD_HH_MM_SS``, or any folder directly under
    ``plugins/profile`` (TensorBoard demos name theirs)."""
    from traceview.read.discover import parse_run_timestamp

    return parse_run_timestamp(d.name) is not None or (d.parent.name == "profile" and d.parent.parent.name == "plugins")


def _runs(paths: list[str]):
    """([(name, path, time, discovery or None, given)], [Discovery]) of every run under
    ``paths``, each once and each read as itself: a trace file given as a PATH is its own run;
    a run folder (:func:`_is_run_folder`) found under a folder is that run (its discovery
    holds that folder's files only, never a newer run beside it); trace files lying loose in
    any other folder are one run per host, read as that host's file. ``given``: the PATH was
    that file (its faults are the command's)."""
    import os

    from traceview.read.discover import discover

    from traceview.read.remote import is_remote

    seen, out, discs = set(), [], []
    for p in paths:
        d = discover(p, all_runs=True, stale_after_s=None)
        discs.append(d)
        shown = d.shown if is_remote(d) else str  # a URL's runs are named by their URL, read from the local copy
        if os.path.isfile(p) or (is_remote(d) and os.path.isfile(d.root)):
            key = os.path.realpath(p)
            if key not in seen and d.runs:
                seen.add(key)
                out.append((os.path.basename(p), p, d.runs[0].time, None, True))
            continue
        for r in d.runs:
            if _is_run_folder(r.directory):
                key = str(r.directory.resolve())
                if key not in seen:
                    seen.add(key)
                    out.append((r.name, shown(str(r.directory)), r.time, ("run", r.directory), False))
                continue
            for host in r.hosts:  # loose files: each host's preferred file is a run of its own
                tf = r.files_for(host)[0]
                key = os.path.realpath(tf.path)
                if key not in seen:
                    seen.add(key)
                    out.append((tf.path.name, shown(str(tf.path)), tf.mtime, ("file", tf.path), False))
    names = [o[0] for o in out]  # the same name twice (two log dirs, two loose copies): say where
    return [(n if names.count(n) == 1 else w, w, t, how, g) for n, w, t, how, g in out], discs


def _load_one(where: str, how, cache):
    """The profile of one run of :func:`_runs`: a file read as that file; a run folder read
    as exactly that folder's run (``discover(folder, run=its name)``)."""
    from traceview.model.load import load
    from traceview.read.discover import discover

    if how is not None and how[0] == "run":
        disc = discover(how[1], run=how[1].name, stale_after_s=None)
        return load(how[1], discovery=disc, stale_after_s=None, cache=cache)
    return load(how[1] if how is not None else where, stale_after_s=None, cache=cache)  # a URL's: its local copy


def run(args) -> int:
    """Returns 0, or 1 for a regression under --fail-on-regression; raises TraceviewError
    subclasses on bad input."""
    from traceview.analysis.compare.history import INCONCLUSIVE, compare_runs, summarise
    from traceview.errors import TraceviewError
    from traceview.model.naming import printable, safe_line
    from traceview.model.units import fmt_ratio
    from traceview.read.guard import check_writable, refuse_inside_inputs

    if not args.regression_threshold >= 0 or not math.isfinite(args.regression_threshold):  # NaN too
        raise UsageError(f"--regression-threshold must be a finite number >= 0, got {args.regression_threshold!r}")
    if not 0 < args.noise_level < 1:
        raise UsageError(f"--noise-level must be in (0, 1), got {args.noise_level!r}")
    if args.noise is not None and not (0 <= args.noise < 1e6):
        raise UsageError(f"--noise must be a percentage >= 0, got {args.noise!r}")
    out = cargs.output_path(args.output, "-o")
    args.format = cargs.output_format(args.format, out, ["table", "json", "html"], "table")
    check_writable(out, "-o")
    if args.append is not None and args.append.strip() in ("", "-"):
        raise UsageError(f"--append needs a file name, got {args.append!r}")
    append = cargs.output_path(args.append, "--append")
    check_writable(append, "--append")
    runs, discs = _runs(args.paths)
    refuse_inside_inputs(out, "-o", *discs)
    refuse_inside_inputs(append, "--append", *discs)
    rules = cargs.rules_from_args(args)
    cache = cargs.cache_from_args(args)
    summaries, skipped, first_error = [], [], None
    for name, where, when, how, given in sorted(runs, key=lambda x: (x[2], x[1])):
        try:
            prof = _load_one(where, how, cache)
        except TraceviewError as e:
            if given or isinstance(e, UsageError):  # a file the user named: its fault is the command's
                raise
            skipped.append((name, str(e)))
            first_error = first_error or e
            continue
        summaries.append(summarise(prof, name=name, directory=where, time=when, rules=rules))
        del prof
    if not summaries and first_error is not None:
        raise first_error
    try:
        h = compare_runs(summaries, baseline=args.baseline, threshold=args.regression_threshold / 100,
                         level=args.noise_level, noise_band=None if args.noise is None else args.noise / 100)
    except ValueError as e:
        raise UsageError(str(e)) from None
    h.skipped = skipped
    if args.format == "json":
        from traceview.render.history import history_json

        text = history_json(h)
    elif args.format == "html":
        from traceview.render.history import history_html

        text = history_html(h)
    else:
        from traceview.render.history import history_text

        width = args.width
        if width is None and out is None and sys.stdout.isatty():  # a terminal: its width, as analyze's tables
            from traceview.cli.outputs import console

            width = console().width
        text = history_text(h, width=width)
    from traceview.cli import process
    from traceview.cli.outputs import emit

    reg, unjudged = h.regressions(), h.unjudged()
    rc = process.verdict(EXIT_CHECK_FAILED if (reg or unjudged) and args.fail_on_regression else EXIT_OK)
    cut = None
    try:
        emit(text, out)
    except BrokenPipeError as e:  # the reader stopped early (| head): --append and the verdict all the same
        cut = e
    if append is not None:
        from traceview.read.guard import append_whole
        from traceview.render.history import history_jsonl

        append_whole(append, history_jsonl(h))
        print(f"appended {len(h.runs)} run(s) to {printable(str(append))}", file=sys.stderr)
    for name, why in skipped if (args.format != "table" or out is not None) else ():  # the table says it
        print(f"traceview: note: skipped run {safe_line(name)}: {safe_line(why)}", file=sys.stderr)
    for r in unjudged:
        c = r.change
        if r.verdict == INCONCLUSIVE:
            known = c.band is not None and c.band.known
            why = (f"its interval [{fmt_ratio(c.lo)}-{fmt_ratio(c.hi)}] holds no change and a slowdown past the "
                   f"{h.threshold:.0%} threshold{' and the noise' if known else ''} ({c.n_base} vs {c.n_treatment} "
                   f"steps, {c.noise_source}; record more steps a side"
                   + (")" if known else ", or state the noise: --noise PCT)"))
        else:
            why = (f"too few steps for an interval ({c.n_base} vs {c.n_treatment}; record {c.more_samples} more steps "
                   "a side, e.g. traceview engine profile --max-tokens N for the bundled engine)"
                   if c.lo is None else f"{c.noise_source} (state it: --noise PCT)")
        print(f"traceview: note: {safe_line(r.name)} {fmt_ratio(c.ratio)}x vs {safe_line(r.baseline)} cannot be judged: "
              f"{safe_line(why)}; a slowdown that cannot be ruled out", file=sys.stderr)
    if reg and args.fail_on_regression:
        print("traceview: regression: " + ", ".join(
            f"{safe_line(r.name)} {fmt_ratio(r.change.ratio)}x vs {safe_line(r.baseline)}" for r in reg), file=sys.stderr)
    if cut is not None:
        raise cut
    return rc
