"""The ``traceview`` command: one module per subcommand, each with ``add_parser(sub)`` and
``run(args) -> exit code``; :func:`main` builds the parser of the command it is given, runs it
and turns errors into one line and an exit code.

Exit codes are those of :mod:`traceview.errors` (0 ok, 1 check failed, 2 usage, 3 no trace
found, 4 trace unreadable, 5 no HLO ops, 6 limit exceeded, 7 remote store unreadable, 8 broken installation:
a module cannot be imported), 130 when interrupted (Ctrl-C) and 143 when terminated (SIGTERM):
one line, :func:`traceview.cli.process.handle_interrupts`). Library errors are printed as one
line, ``traceview: error: <file>: <fault>``, never as a traceback. Process tuning (allocator,
threads, streams, the exit path) is :mod:`traceview.cli.process`'s alone.
"""

from __future__ import annotations

import importlib
import re
import sys
from typing import TYPE_CHECKING

from traceview import __version__
from traceview.errors import EXIT_INSTALL, EXIT_LIMIT, EXIT_OK, EXIT_USAGE, TraceviewError

if TYPE_CHECKING:  # argparse (with gettext) is imported by build_parser, after entry() has
    import argparse  # installed the Ctrl-C handling: an interrupt during that import is one line

#: the subcommands and their modules (imported only for the command being run)
COMMANDS = {"analyze": "traceview.cli.analyze", "report": "traceview.cli.report", "diff": "traceview.cli.diff",
            "verify": "traceview.cli.verify", "engine": "traceview.cli.engine", "query": "traceview.cli.query",
            "mcp": "traceview.cli.mcp", "history": "traceview.cli.history", "ladder": "traceview.cli.ladder",
            "export": "traceview.cli.export"}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The CLI's argument parser. ``only``: build just that subcommand (:func:`main` does,
    for the command on its command line: building the others' options costs start-up time)."""
    from traceview.cli.args import Parser

    parser = Parser(
        prog="traceview",
        description="Shape-keyed analysis of JAX/XProf profiles (.xplane.pb, .trace.json.gz).",
        epilog="exit codes: 0 ok, 1 check failed, 2 usage, 3 no trace found, 4 trace unreadable, "
               "5 no HLO ops in trace, 6 resource limit exceeded, 7 remote store unreadable (denied, unreachable, "
               "cut short), 8 broken installation (a module cannot be imported), 130 interrupted (Ctrl-C), "
               "143 terminated (SIGTERM)")
    parser.add_argument("--version", action="version", version=f"traceview {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        if only is None or only == name:
            importlib.import_module(module).add_parser(sub)
    parser.commands = sub.choices  # the subcommands' parsers, by name (:func:`parse`)
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed by ``parser``; a subcommand's own arguments intermixed (argparse's
    ``parse_intermixed_args``), so positionals may follow options: ``query PATH --chip X SQL``,
    ``diff A --no-cache B``. After ``--`` every argument is a positional (``analyze -- -dash``):
    Python 3.11's intermixed parse drops the ``--`` and reads a later ``-dash`` as an option, so
    those starting with a minus go through it marked and come back as given. The engine's
    pass-through arguments are parsed as they are."""
    from traceview.cli.args import POSITIONAL_MARK as _MARK

    commands = getattr(parser, "commands", {})
    if argv and argv[0] in commands and argv[0] != "engine":
        rest = argv[1:]
        if "--" in rest:
            i = rest.index("--")
            rest = rest[:i + 1] + [_MARK + a if a.startswith("-") else a for a in rest[i + 1:]]
        args = commands[argv[0]].parse_intermixed_args(rest)
        for k, v in vars(args).items():
            if isinstance(v, str) and v.startswith(_MARK):
                setattr(args, k, v[len(_MARK):])
            elif isinstance(v, list) and any(isinstance(x, str) and x.startswith(_MARK) for x in v):
                setattr(args, k, [x[len(_MARK):] if isinstance(x, str) and x.startswith(_MARK) else x for x in v])
        args.command = argv[0]
        return args
    return parser.parse_args(argv)


#: options whose value is a step range that may start with a minus (negatives count from the end)
RANGE_OPTIONS = ("--step-window", "--steps", "--window-ps")
_NEGATIVE_RANGE = re.compile(r"-\d*:-?\d*|-\d+")


def _attach_negative_ranges(argv: list[str]) -> list[str]:
    """``--step-window -5:`` as ``--step-window=-5:`` (and so for :data:`RANGE_OPTIONS`):
    argparse takes a value starting with a minus for an option and refuses the command. Not
    after ``--``: positionals only."""
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return out + argv[i:]
        if a in RANGE_OPTIONS and i + 1 < len(argv) and _NEGATIVE_RANGE.fullmatch(argv[i + 1]):
            out.append(f"{a}={argv[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def broken_install(exc: ImportError) -> int:
    """Say in one line that a module of traceview or of a dependency is missing or cannot be
    loaded (an ImportError while a command runs); returns exit 8 (EXIT_INSTALL)."""
    from traceview.model.naming import safe_line

    what = exc.name or "a module"
    print("traceview: error: " + safe_line(
        f"cannot import {what} ({exc}): the installation is incomplete or broken; reinstall traceview "
        "(pip install --force-reinstall traceview, or pip install -e . in a checkout)"), file=sys.stderr)
    return EXIT_INSTALL


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``traceview`` console script. Returns the exit code."""
    from traceview.cli import process

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "engine":
        from traceview.cli.engine import main as engine_main

        return engine_main(argv[1:])
    if argv[:1] != ["mcp"]:  # a one-shot command: one malloc arena before any thread starts
        process.one_malloc_arena()
    process.limit_blas_threads()
    process.safe_child_path()
    process.matplotlib_home()
    if any("://" in a for a in argv):  # a URL (traceview.read.remote): the storage libraries stay quiet
        process.quiet_storage_logs()
    argv = _attach_negative_ranges(argv)
    parser = build_parser(only=argv[0] if argv and argv[0] in COMMANDS else None)
    try:
        args = parse(parser, argv)
        fault = None
    except SystemExit as exc:  # --help, --version (0) or a usage error (2, already said)
        code = int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE
        if code:
            return code
        try:  # the help or the version reaches standard output, or says why not (a closed
            # descriptor 1 is args.Parser._print_message's OSError, below)
            sys.stdout.flush()
            return code
        except OSError as exc2:
            fault = exc2
    except OSError as exc:  # a help longer than the buffer, written to a full disk
        fault = exc
    if fault is not None:
        process.silence_stdout()
        if isinstance(fault, BrokenPipeError):  # (| head): a normal end
            return EXIT_OK
        print(f"traceview: error: cannot write standard output: {fault.strerror or fault}", file=sys.stderr)
        return EXIT_USAGE
    if args.command is None:
        parser.print_help(sys.stderr)  # a usage error: on standard error, as argparse's own
        return EXIT_USAGE
    with process.standard_streams():
        if not getattr(args, "no_cache", False):
            from traceview.read.cache import unusable_reason

            why = unusable_reason()
            if why:  # once per run, whatever reads the cache afterwards
                print(f"traceview: note: {why}", file=sys.stderr)
        process.verdict(EXIT_OK)  # none yet (main may run several commands in one process)
        try:
            rc = importlib.import_module(COMMANDS[args.command]).run(args)
            sys.stdout.flush()
            return rc
        except TraceviewError as exc:
            from traceview.model.naming import safe_line

            if process.interrupted():
                return process.say_interrupted()
            print(f"traceview: error: {safe_line(exc)}", file=sys.stderr)
            return exc.exit_code
        except BrokenPipeError:  # the reader went away (| head): a normal end, a verdict kept
            process.silence_stdout()
            return process.cut_short()
        except OSError as exc:  # writing the output failed (disk full, closed descriptor...): exit 2
            process.silence_stdout()
            if process.interrupted():
                return process.say_interrupted()
            print(f"traceview: error: cannot write {exc.filename or 'the output'}: {exc.strerror or exc}",
                  file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt:
            return process.say_interrupted()
        except ImportError as exc:  # a module of traceview or a dependency missing or broken
            if process.interrupted():
                return process.say_interrupted()
            return broken_install(exc)
        except MemoryError:
            if process.interrupted():
                return process.say_interrupted()
            print("traceview: error: out of memory while reading or analysing the trace (try a smaller run, "
                  "--max-bytes, or a machine with more memory)", file=sys.stderr)
            return EXIT_LIMIT


def entry() -> None:
    """The ``traceview`` console script and ``python -m traceview.cli``: Ctrl-C handling first
    (:func:`traceview.cli.process.handle_interrupts`: one line, exit 130, in every command and
    the engine), the collector's thresholds for a one-shot command
    (:func:`traceview.cli.process.tune_gc`; not the engine, not the MCP server), then
    :func:`main`, then :func:`traceview.cli.process.exit_now`."""
    from traceview.cli import process

    argv = sys.argv[1:]
    engine = bool(argv and argv[0] == "engine")
    try:
        process.handle_interrupts("traceview engine" if engine else "traceview",
                                  one_arena=not engine and not (argv and argv[0] == "mcp"))
        if not engine and not (argv and argv[0] == "mcp"):  # one command, then the process ends
            process.tune_gc()
        rc = main(argv)
    except KeyboardInterrupt:  # outside main's own handler: imports, the parser, the engine
        rc = process.say_interrupted()
    except Exception as exc:
        if process.interrupted():  # an interrupt turned into another error on its way out (argparse's
            rc = process.say_interrupted()  # intermixed parse restores its actions in a finally block)
        elif isinstance(exc, ImportError):  # the parser imports the command's module
            rc = broken_install(exc)
        else:
            raise
    try:
        if process.interrupted():  # an interrupt swallowed or turned into another error on the way
            rc = process.say_interrupted()
    except KeyboardInterrupt:  # one landing after main returned, before the exit
        rc = process.say_interrupted()
    process.exit_now(rc, teardown=engine)
