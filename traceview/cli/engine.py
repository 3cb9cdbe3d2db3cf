"""``traceview engine ...``: the bundled Pallas decode engine (bench, profile, transplant, patch), which needs
the ``engine`` extra (JAX). Its own parser lives in :mod:`traceview.engine_shim.cli`."""

from __future__ import annotations

import argparse
import sys

from traceview.errors import EXIT_USAGE



def add_parser(sub) -> None:
    e = sub.add_parser("engine", help="the bundled Pallas decode engine (bench, profile, transplant, patch)", add_help=False)
    e.add_argument("engine_args", nargs=argparse.REMAINDER)


def main(argv: list[str]) -> int:
    """Run ``traceview engine`` with ``argv`` (what follows ``engine``); exit code."""
    try:
        from traceview.engine_shim.cli import main as engine_main
    except ImportError as exc:
        print(f"traceview: error: the engine needs the 'engine' extra (pip install 'traceview[engine]'): {exc}",
              file=sys.stderr)
        return EXIT_USAGE
    return engine_main(argv)


def run(args) -> int:
    return main(list(args.engine_args))
