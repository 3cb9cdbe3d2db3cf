"""The ``traceview diff`` and ``traceview verify`` subcommands (wired into :mod:`traceview.cli`).

``traceview diff BASE TREATMENT`` prints the population-matched diff of two profiles
(:mod:`traceview.diff`) as a table, JSON or a standalone HTML page. ``traceview verify PATH
[TREATMENT] --check CHECK ...`` evaluates declarative checks (:mod:`traceview.verify`) and
exits 0 when all pass, 1 (:data:`traceview.errors.EXIT_CHECK_FAILED`) when one fails, 2 on an
invalid check. Library errors become ``traceview: error: <message>`` in :func:`traceview.cli.main`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import EXIT_CHECK_FAILED, EXIT_OK, UsageError

_VERIFY_EPILOG = """\
checks (one per --check, or one per line in --checks FILE; '#' comments):
  no op [matching] RX                     op name, JAX name stack, kernel name or HLO text (names removed)
  op [matching] RX present|absent
  no op from file [matching] RX           source file or any stack frame
  op from file [matching] RX present|absent
  op [matching] RX count CMP N [per execution]
  family NAME share CMP PCT               e.g. family attention share < 30%
  family matching RX share CMP PCT
  kernel GLOB present|absent
  kernel GLOB has KEY VALUE               e.g. kernel 'RPAd*' has bkv 256
  source of kernel GLOB under PATH        e.g. source of kernel 'RPAd*' under my_kernels/
  source of op [matching] RX under PATH
  source PATH present|absent
with two profiles (BASE TREATMENT); single-profile checks apply to TREATMENT, prefix 'base:' for BASE:
  op [matching] RX vanished|appeared      e.g. op matching binary_search vanished
  op from file [matching] RX vanished|appeared
  kernel GLOB changed KEY [A -> B]        e.g. kernel 'RPAd*' changed bkv 2048 -> 256
  source of kernel GLOB changed
  all matched [except RX]
CMP: < <= > >= == !=   PCT: 30% or 0.3   quote tokens with spaces ("..." or '...')
exit codes: 0 all checks passed, 1 a check failed, 2 invalid check or usage, 3-6 trace errors"""


def _rules(args):
    """Family rules from --families / --family, parsed once, as ``analyze`` does."""
    from .cli import _rules_from_args

    return _rules_from_args(args)


def _load(path: str, run: str | None, device: str | None):
    """Load one side; its discovery warnings (several runs, stray files...) go to stderr,
    one line each, as ``analyze`` shows them."""
    import sys

    from .profile import load

    prof = load(path, run=run, stale_after_s=None)
    for w in prof.warnings:
        print(f"traceview: warning: {path}: {w}", file=sys.stderr)
    return prof.filter(device_regex=device) if device else prof


def add_parsers(sub, positive_int, positive_float) -> None:
    """Add the ``diff`` and ``verify`` subparsers to ``sub`` (argparse subparsers)."""
    d = sub.add_parser("diff", help="match two profiles' op populations by shape and HLO fingerprint; show deltas",
                       description="Diff two profiles population by population: ops are matched by (op kind, shape "
                                   "signature, HLO text without instruction names), not by XLA's names. Shows time "
                                   "and occurrence deltas, populations that appeared or vanished, kernels whose "
                                   "configuration changed, source attribution changes and the step-time delta.",
                       epilog="throughput is never to be quoted from a profiled run: a treatment that multiplies "
                              "traced events (e.g. a smaller kernel block) pays more tracing overhead")
    d.add_argument("base", help="trace file or folder of the base (before) profile")
    d.add_argument("treatment", help="trace file or folder of the treatment (after) profile")
    d.add_argument("--run-base", metavar="NAME", help="run folder to read under BASE (default: newest)")
    d.add_argument("--run-treatment", metavar="NAME", help="run folder to read under TREATMENT (default: newest)")
    d.add_argument("--device", metavar="REGEX", help="keep only devices whose name matches REGEX, on both sides")
    d.add_argument("--top", type=positive_int, default=25, metavar="N", help="populations to show (default 25)")
    d.add_argument("--format", choices=["table", "json", "html"], default="table")
    d.add_argument("-o", "--output", metavar="FILE", help="write the output to FILE")
    d.add_argument("--overhead-factor", type=positive_float, default=4.0, metavar="F",
                   help="note populations whose traced event count changed by F times or more (default 4)")
    d.add_argument("--no-name-stem", action="store_true",
                   help="leave the op-name stem (fusion name without .N) out of the matching key")
    d.add_argument("--families", metavar="FILE", help="user op families, one NAME=REGEX per line (# comments)")
    d.add_argument("--family", action="append", metavar="NAME=REGEX", help="a user op family (repeatable)")
    d.add_argument("--no-cache", action="store_true", help=_NO_CACHE_HELP)

    v = sub.add_parser("verify", help="check a profile (or a base/treatment pair) against declarative checks",
                       description="Evaluate checks on one profile, or on a BASE and TREATMENT pair. Exit 0 when "
                                   "every check passes, 1 when one fails (with the reasons), 2 on an invalid check.",
                       epilog=_VERIFY_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("paths", nargs="+", metavar="PATH",
                   help="the profile to check, or BASE TREATMENT for diff checks")
    v.add_argument("-c", "--check", action="append", default=[], metavar="CHECK", help="a check (repeatable)")
    v.add_argument("--checks", metavar="FILE", help="a file of checks, one per line")
    v.add_argument("--run", metavar="NAME", help="run folder to read under PATH (single profile)")
    v.add_argument("--device", metavar="REGEX", help="keep only devices whose name matches REGEX")
    v.add_argument("--families", metavar="FILE", help="user op families, one NAME=REGEX per line (# comments)")
    v.add_argument("--family", action="append", metavar="NAME=REGEX", help="a user op family (repeatable)")
    v.add_argument("--format", choices=["text", "json"], default="text")
    v.add_argument("--no-cache", action="store_true", help=_NO_CACHE_HELP)


_NO_CACHE_HELP = "neither read nor write the parsed-table cache (~/.cache/traceview; $TRACEVIEW_NO_CACHE=1)"


def _no_cache(args) -> None:
    if getattr(args, "no_cache", False):
        from . import cache

        cache.disabled(True)  # main() turns it back on when the command ends


def cmd_diff(args) -> int:
    """``traceview diff``: returns 0; raises TraceviewError subclasses on bad input."""
    from .diff import diff

    _no_cache(args)
    out = Path(args.output) if args.output else None
    if out is not None and out.is_dir():
        raise UsageError(f"{out} is a folder; -o needs a file name")
    base = _load(args.base, args.run_base, args.device)
    treat = _load(args.treatment, args.run_treatment, args.device)
    if out is not None:
        from .cli import _out_inside_inputs

        if _out_inside_inputs(out, base) or _out_inside_inputs(out, treat):
            raise UsageError(f"refusing to write {out} inside a profile folder it reads; choose another -o")
    d = diff(base, treat, rules=_rules(args), name_stem=not args.no_name_stem, overhead_factor=args.overhead_factor)
    if args.format == "json":
        text = d.to_json(top=None, indent=2) + "\n"
    elif args.format == "html":
        from .render.diff_html import render_diff_page

        text = render_diff_page(d, top=args.top)
    else:
        from .render.diff_terminal import render_diff

        if out is None:
            from .cli import _console

            render_diff(_console(), d, top=args.top)
            return EXIT_OK
        from .render.diff_terminal import render_diff_text

        text = render_diff_text(d, top=args.top, width=200)
    if out is not None:
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_verify(args) -> int:
    """``traceview verify``: 0 when every check passes, 1 otherwise; UsageError (2) on an
    invalid check, a diff check with one profile, or more than two paths."""
    from .verify import parse_checks, read_checks, verify

    _no_cache(args)
    if len(args.paths) > 2:
        raise UsageError(f"verify takes one profile or BASE TREATMENT, got {len(args.paths)} paths")
    checks = parse_checks(args.check)
    if args.checks:
        checks += read_checks(args.checks)
    if not checks:
        raise UsageError("no checks given: use --check CHECK or --checks FILE (see traceview verify --help)")
    rules = _rules(args)
    if len(args.paths) == 2:
        base = _load(args.paths[0], None, args.device)
        treat = _load(args.paths[1], None, args.device)
    else:
        base, treat = None, _load(args.paths[0], args.run, args.device)
    report = verify(treat, checks, base=base, rules=rules)
    if args.format == "json":
        from .verify import report_json

        sys.stdout.write(report_json(report) + "\n")
    else:
        sys.stdout.write(report.text() + "\n")
    return EXIT_OK if report.ok else EXIT_CHECK_FAILED
