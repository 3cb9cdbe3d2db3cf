"""``traceview history LOGDIR [PATH...]``: every run under the paths, oldest first, with its
steady step time, top families, kernel configurations and findings, and the regression rule of
:mod:`traceview.analysis.history` (exit 1 under ``--fail-on-regression`` for a slowdown outside
the noise)."""

from __future__ import annotations

import sys

from traceview.cli import args as cargs
from traceview.errors import EXIT_CHECK_FAILED, EXIT_OK, UsageError


def add_parser(sub) -> None:
    h = sub.add_parser("history", help="every run under a log dir, oldest first: step time trend and regressions",
                       description="Summarise every run under LOGDIR (and any further PATHs), oldest first by run "
                                   "folder timestamp: the steady step time (median, p10-p90), the top op families "
                                   "per step, the custom kernels' configurations and findings. Each run is compared "
                                   "with a baseline (the previous run, or --baseline RUN) by the ratio of median "
                                   "step times and its noise interval.",
                       epilog="exit codes: 0 ok (or regressions without --fail-on-regression), 1 a regression under "
                              "--fail-on-regression (or a slowdown past the threshold with too few steps for an "
                              "interval), 2 usage, 3 no trace, 4 unreadable, 5 no ops")
    h.add_argument("paths", nargs="+", type=cargs.path_arg, metavar="PATH", help="log dir(s), plugins/profile folders or run folders")
    h.add_argument("--baseline", metavar="RUN", help="compare every run with this run (its folder name or path) "
                                                     "instead of the previous run")
    h.add_argument("--regression-threshold", type=float, default=5.0, metavar="PCT",
                   help="a regression is a slowdown of the median step whose whole noise interval is at least "
                        "PCT percent (default 5)")
    h.add_argument("--noise-level", type=cargs.positive_float, default=0.95, metavar="P",
                   help="confidence level of the noise interval, in (0, 1) (default 0.95)")
    h.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1 when a run is a regression against its baseline")
    h.add_argument("--format", choices=["table", "json", "html"], default=None,
                   help="table [default], json or html (trend chart); with -o and no --format the file's suffix "
                        "decides")
    h.add_argument("-o", "--output", metavar="FILE", help="write the output to FILE (- for standard output)")
    h.add_argument("--append", metavar="FILE", help="append one JSON line per run to FILE (JSONL); refused inside "
                                                    "a profile folder")
    h.add_argument("--families", metavar="FILE", help="user op families, one NAME=REGEX per line (# comments)")
    h.add_argument("--family", action="append", metavar="NAME=REGEX", help="a user op family (repeatable)")
    h.add_argument("--no-cache", action="store_true", help=cargs.NO_CACHE_HELP)


def _runs(paths: list[str]):
    """([(Run, path to load)], [Discovery]) of every run under ``paths``, each once: a trace
    file given as a PATH is its own run (loaded as that file, not its folder, which may hold
    other traces); a folder gives each run folder under it."""
    import os

    from traceview.read.discover import discover

    seen, out, discs = set(), [], []
    for p in paths:
        d = discover(p, all_runs=True, stale_after_s=None)
        discs.append(d)
        if os.path.isfile(p):
            key = os.path.realpath(p)
            if key not in seen and d.runs:
                seen.add(key)
                out.append((d.runs[0], p))
            continue
        for r in d.runs:
            key = str(r.directory.resolve())
            if key not in seen:
                seen.add(key)
                out.append((r, r.directory))
    return out, discs


def run(args) -> int:
    """Returns 0, or 1 for a regression under --fail-on-regression; raises TraceviewError
    subclasses on bad input."""
    import os

    from traceview.analysis.history import compare_runs, summarise
    from traceview.model.load import load
    from traceview.model.naming import printable, safe_line
    from traceview.read.guard import check_writable, refuse_inside_inputs, write_atomic

    if args.regression_threshold < 0:
        raise UsageError(f"--regression-threshold must be >= 0, got {args.regression_threshold!r}")
    if not 0 < args.noise_level < 1:
        raise UsageError(f"--noise-level must be in (0, 1), got {args.noise_level!r}")
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
    summaries = []
    for r, where in sorted(runs, key=lambda x: (x[0].time, str(x[1]))):
        prof = load(where, stale_after_s=None, cache=cache)
        name = r.name if where == r.directory else os.path.basename(str(where))
        summaries.append(summarise(prof, name=name, directory=str(where), time=r.time, rules=rules))
        del prof
    try:
        h = compare_runs(summaries, baseline=args.baseline, threshold=args.regression_threshold / 100,
                         level=args.noise_level)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.format == "json":
        from traceview.render.history import history_json

        text = history_json(h)
    elif args.format == "html":
        from traceview.render.history import history_html

        text = history_html(h)
    else:
        from traceview.render.history import history_text

        text = history_text(h)
    if out is not None:
        write_atomic(out, text)
        print(f"wrote {safe_line(str(out))}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    if append is not None:
        from traceview.render.history import history_jsonl

        with open(append, "a", encoding="utf-8") as f:
            f.write(history_jsonl(h))
        print(f"appended {len(h.runs)} run(s) to {printable(str(append))}", file=sys.stderr)
    reg, unjudged = h.regressions(), h.unjudged()
    if unjudged:
        print("traceview: note: no noise interval (fewer than 10 steps in a run's window) for "
              + ", ".join(f"{safe_line(r.name)} {r.change.ratio:.2f}x vs {safe_line(r.baseline)}" for r in unjudged)
              + ": a slowdown that cannot be ruled out; record more steps (--max-tokens)", file=sys.stderr)
    if (reg or unjudged) and args.fail_on_regression:
        if reg:
            print("traceview: regression: " + ", ".join(
                f"{safe_line(r.name)} {r.change.ratio:.2f}x vs {safe_line(r.baseline)}" for r in reg), file=sys.stderr)
        return EXIT_CHECK_FAILED
    return EXIT_OK
