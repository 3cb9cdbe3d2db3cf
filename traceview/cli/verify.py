"""``traceview verify PATH [TREATMENT] --check CHECK ...``: declarative checks on a profile or
a base/treatment pair (:mod:`traceview.analysis.compare.verify`). Each check is PASS, FAIL or
UNKNOWN (the trace lacks what it needs). Exit 0 when every check passes, 1
(:data:`traceview.errors.EXIT_CHECK_FAILED`) when one fails or is unknown, 2 on an invalid check."""

from __future__ import annotations

import argparse
import sys

from traceview.cli import args as cargs
from traceview.errors import EXIT_CHECK_FAILED, EXIT_OK, UsageError


_VERIFY_EPILOG = """\
checks (one per --check, or one per line in --checks FILE; '# comment' to the end of a line):
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
  collective KIND bytes|sent|group CMP N  e.g. collective all-reduce bytes == 5368709120
  exposed communication share CMP PCT     e.g. exposed communication share < 10% (over step time)
  straggler lead CMP PCT                  e.g. straggler lead < 20% (slowest device over the median)
  memory peak CMP BYTES                   e.g. memory peak < 12GiB (largest allocator peak in use)
  memory growth per step CMP PCT          e.g. memory growth per step < 1%
  no finding ID                           e.g. no finding host-bound-steps
  finding ID [present|absent]             ID: one of the ids in docs/findings.md
  finding ID impact CMP PCT               e.g. finding host-bound-steps impact < 5% (share of the step)
with two profiles (BASE TREATMENT); single-profile checks apply to TREATMENT, prefix 'base:' for BASE:
  op [matching] RX vanished|appeared      e.g. op matching binary_search vanished
  op from file [matching] RX vanished|appeared
  kernel GLOB changed KEY [A -> B]        e.g. kernel 'RPAd*' changed bkv 2048 -> 256
  source of kernel GLOB changed
  all matched [except RX]
CMP: < <= > >= == !=   PCT: 30% or 0.3 (a bare 30 is refused)   BYTES: 12GiB, 500MB, bytes (never negative)
quote tokens with spaces ("..." or '...')
each check is PASS, FAIL or UNKNOWN: unknown when the trace lacks what the check needs (no recorded
sources, no allocator events, no collective across devices, a finding whose rule could not run)
exit codes: 0 all checks passed, 1 a check failed or is unknown, 2 invalid check or usage, 3-7 trace and
remote-store errors, 8 broken installation"""


def add_parser(sub) -> None:
    v = sub.add_parser("verify", help="check a profile (or a base/treatment pair) against declarative checks",
                       description="Evaluate checks on one profile, or on a BASE and TREATMENT pair: each is PASS, "
                                   "FAIL or UNKNOWN (the trace lacks what it needs). Exit 0 when every check passes, "
                                   "1 when one fails or is unknown (with the reasons), 2 on an invalid check.",
                       epilog=_VERIFY_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("paths", nargs="+", type=cargs.path_arg, metavar="PATH",
                   help="the profile to check, or BASE TREATMENT for diff checks")
    v.add_argument("-c", "--check", action="append", default=[], metavar="CHECK", help="a check (repeatable)")
    v.add_argument("--checks", metavar="FILE", help="a file of checks, one per line")
    v.add_argument("--run", metavar="NAME", help="run folder to read under PATH (one profile)")
    v.add_argument("--run-base", metavar="NAME", help="run folder to read under BASE (two profiles)")
    v.add_argument("--run-treatment", metavar="NAME", help="run folder to read under TREATMENT (two profiles)")
    v.add_argument("--device", metavar="REGEX", help="keep only devices whose name matches REGEX")
    v.add_argument("--families", metavar="FILE", help="user op families, one NAME=REGEX per line (# comments)")
    v.add_argument("--family", action="append", metavar="NAME=REGEX", help="a user op family (repeatable)")
    v.add_argument("--format", choices=["text", "json"], default="text")
    cargs.add_step_window(v)
    cargs.add_phase(v, tokens=False)
    v.add_argument("--no-cache", action="store_true", help=cargs.NO_CACHE_HELP)
    cargs.add_max_bytes(v)
    cargs.add_expand_kernels(v)
    cargs.add_findings(v)
    cargs.add_peaks(v)


def run(args) -> int:
    """0 when every check passes, 1 when one fails or is unknown; UsageError (2) on an invalid check, a diff
    check with one profile, or more than two paths."""
    from traceview.analysis.compare.verify import verify
    from traceview.analysis.compare.verify_grammar import parse_checks, read_checks
    from traceview.cli.diff import load_sides

    if len(args.paths) > 2:
        raise UsageError(f"verify takes one profile or BASE TREATMENT, got {len(args.paths)} paths")
    checks = parse_checks(args.check)
    if args.checks:
        checks += read_checks(args.checks)
    if not checks:
        raise UsageError("no checks given: use --check CHECK or --checks FILE (see traceview verify --help)")
    rules = cargs.rules_from_args(args)
    fopts = cargs.findings_from_args(args)
    said: list = []  # the warning lines, for the JSON
    if len(args.paths) == 2:
        if args.run:
            raise UsageError("--run names the run of one profile; for BASE TREATMENT use --run-base and "
                             "--run-treatment")
        base, treat = load_sides([(args.paths[0], args.run_base), (args.paths[1], args.run_treatment)], args,
                                 run_hint="pass --run-base / --run-treatment", said=said)
    else:
        if args.run_base or args.run_treatment:
            raise UsageError("--run-base and --run-treatment name the runs of BASE TREATMENT; for one profile "
                             "use --run")
        base, (treat,) = None, list(load_sides([(args.paths[0], args.run)], args, run_hint="pass --run", said=said))
    # the peaks of each profile's report as analyze's (--chip, --peak-flops, --peak-bw, --measure-cpu-peaks)
    report = verify(treat, checks, base=base, rules=rules, step_window=args.step_window, window_option="--step-window",
                    finding_thresholds=fopts["finding_thresholds"], findings=fopts["findings"],
                    peaks=lambda prof: cargs.peaks_from_args(prof, args))
    from traceview.cli import process

    rc = process.verdict(EXIT_OK if report.ok else EXIT_CHECK_FAILED)  # kept if the reader stops early
    if args.format == "json":
        from traceview.render.json import verify_json

        sys.stdout.write(verify_json(report, said))
    else:
        from traceview.render.verify import verify_text

        sys.stdout.write(verify_text(report) + "\n")
    return rc
