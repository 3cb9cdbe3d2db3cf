"""``traceview diff BASE TREATMENT``: the population-matched diff of two profiles
(:mod:`traceview.analysis.compare.diff`) as a table, JSON or a standalone HTML page."""

from __future__ import annotations

import sys

from traceview.model.naming import safe_line
from traceview.cli import args as cargs
from traceview.errors import EXIT_OK, TraceviewError, UsageError



def add_parser(sub) -> None:
    d = sub.add_parser("diff", help="match two profiles' op populations by shape and HLO fingerprint; show deltas",
                       description="Diff two profiles population by population: ops are matched by (op kind, program, shape "
                                   "signature, HLO text without instruction names), not by XLA's names. Shows time "
                                   "and occurrence deltas, populations that appeared or vanished, kernels whose "
                                   "configuration changed, source attribution changes and the step-time delta.",
                       epilog="throughput is never to be quoted from a profiled run: a treatment that multiplies "
                              "traced events (e.g. a smaller kernel block) pays more tracing overhead")
    d.add_argument("base", nargs="?", type=cargs.path_arg, help="trace file or folder of the base (before) profile")
    d.add_argument("treatment", nargs="?", type=cargs.path_arg, help="trace file or folder of the treatment (after) profile")
    d.add_argument("--base", dest="base_paths", action="extend", nargs="+", type=cargs.path_arg, metavar="PATH",
                   help="several base profiles (recordings of one configuration), pooled; with --treatment, "
                        "instead of the two positional paths; repeated, the paths add up")
    d.add_argument("--treatment", dest="treatment_paths", action="extend", nargs="+", type=cargs.path_arg,
                   metavar="PATH", help="several treatment profiles, pooled (see --base)")
    d.add_argument("--noise-level", type=cargs.positive_float, default=0.95, metavar="P",
                   help="confidence level of the noise intervals, in (0, 1) (default 0.95): a change whose "
                        "rank interval reaches into the run-to-run noise (measured from several recordings a "
                        "side, else the A/A prior of benchmarks/RESULTS.md) is marked ~ (within noise)")
    d.add_argument("--run-base", metavar="NAME", help="run folder to read under BASE (default: newest)")
    d.add_argument("--run-treatment", metavar="NAME", help="run folder to read under TREATMENT (default: newest)")
    d.add_argument("--device", metavar="REGEX", help="keep only devices whose name matches REGEX, on both sides")
    cargs.add_top(d, top_help="rows of each table (populations, kernels, families, modules, collectives): every "
                              "format obeys it (25 when it is not given; JSON says how many there are under \"rows\")")
    d.add_argument("--format", choices=["table", "json", "html"], default=None,
                   help="table [default], json or html; with -o and no --format, the file's suffix (.txt, .json, "
                        ".html) decides, another suffix is an error")
    d.add_argument("-o", "--output", metavar="FILE", help="write the output to FILE (- for standard output)")
    cargs.add_width(d)
    d.add_argument("--overhead-factor", type=cargs.positive_float, default=4.0, metavar="F",
                   help="note populations whose traced event count changed by F times or more (default 4)")
    d.add_argument("--no-name-stem", action="store_true",
                   help="leave the op-name stem (fusion name without .N) out of the matching key")
    d.add_argument("--families", metavar="FILE", help="user op families, one NAME=REGEX per line (# comments)")
    d.add_argument("--family", action="append", metavar="NAME=REGEX", help="a user op family (repeatable)")
    d.add_argument("--no-cache", action="store_true", help=cargs.NO_CACHE_HELP)
    cargs.add_max_bytes(d)
    cargs.add_step_window(d)
    cargs.add_expand_kernels(d)
    cargs.add_phase(d, tokens=False)


def load_sides(sides: list[tuple[str, str | None]], args, run_hint: str = "pass --run-base / --run-treatment",
               discoveries: list | None = None, said: list | None = None):
    """Load each (path, run) side in turn (a generator: the caller can release a profile
    before the next is read); each side's warnings (several runs, stray files, events
    dropped...) go to stderr, one line each naming the side's file (:func:`side_warning`), a
    line said already not again; ``said``: the lines said so far, each new one appended (for
    the JSON's ``warnings``). The sides' single xplane files
    are all decoded on threads from the start, while polars is imported and the first side
    is analysed (one prefetch per file, for files under the prefetch size). ``run_hint``: how
    the caller's user chooses a run, for the warnings; ``discoveries``: :func:`discover_sides`
    of ``sides``, when the caller has it."""
    from traceview.cli import process
    from traceview.model.load import load, start_prefetch

    cache = cargs.cache_from_args(args)
    max_bytes = getattr(args, "max_bytes", None)
    said = [] if said is None else said
    discs = discoveries if discoveries is not None else discover_sides(sides, run_hint)
    process.tune_allocator(cargs.input_bytes(*discs))
    seen: set = set()
    pres = []
    with process.decoding_beside_imports():
        for d in discs:  # one prefetch per distinct file, all started before polars is imported
            key = tuple(str(tf.path) for tf in d.files)
            # the first side's reader imports what the comparison needs while its planes are decoded
            idle = process.imports_while_decoding("diff") if not pres else None
            pres.append(None if key in seen else start_prefetch(d, max_bytes=max_bytes, cache=cache or None,
                                                                local=True, idle=idle))
            seen.add(key)
    # no context is held across the yield: a generator dropped by an interrupted caller is
    # closed with nothing to run (an interrupt landing in a context's exit printed a traceback)
    for (path, run), d, pre in zip(sides, discs, pres):
        with process.decoding_beside_imports():
            prof = load(path, run=run, stale_after_s=None, discovery=d, cache=cache, prefetch=pre or False,
                        max_bytes=max_bytes,
                        expand_kernels=bool(getattr(args, "expand_kernels", False)))
        process.trim_heap(cargs.input_bytes(d))
        out = prof.filter(device_regex=args.device) if args.device else prof
        try:
            out = cargs.apply_phase(out, args)
        except TraceviewError as e:  # --phase finds nothing in this side: say which
            raise naming_side(e, path) from None
        del prof
        for w in out.warnings:  # after the selection: --phase says what it kept
            line = side_warning(path, w)
            if line not in said:  # one file on both sides warns once
                said.append(line)
                print(f"traceview: warning: {line}", file=sys.stderr)
        if args.device and out.table.height == 0:  # a comparison or check of nothing
            raise UsageError(f"--device {args.device!r} leaves no op of {path}: nothing to compare or check "
                             "(traceview analyze PATH lists the devices)")
        yield out
        del out  # released before the next side is read
        process.trim_heap(cargs.input_bytes(d))  # what its analysis freed, before the next side is read


def discover_sides(sides: list[tuple[str, str | None]], run_hint: str = "pass --run-base / --run-treatment") -> list:
    """The discovery (:func:`traceview.read.discover.discover`) of each (path, run) side,
    every side's before any is read: a missing or empty path is said at once."""
    from traceview.read.discover import discover

    return [discover(path, run=run, stale_after_s=None, run_hint=run_hint) for path, run in sides]


def names_path(text: str, path) -> bool:
    """Whether ``text`` names ``path`` (or a file under it) as a path of its own: not inside a
    longer name."""
    import os
    import re

    forms = {str(path).rstrip("/") or "/", os.path.normpath(str(path))}
    return any(re.search(r"(?<![\w./-])" + re.escape(f) + r"(?![\w.-])", text) for f in forms)


def side_warning(path, w: str) -> str:
    """A side's warning as one line naming the side's path once: ``PATH: warning``, or the
    warning alone when it names the path (or a file under it) itself."""
    return safe_line(w) if names_path(w, path) else f"{safe_line(path)}: {safe_line(w)}"


def naming_side(err: TraceviewError, path) -> TraceviewError:
    """``err``, a fault of the side read from ``path``, as one naming it: the same class (the
    same exit code) with the path before its message; ``err`` itself when it names a file."""
    if err.path is not None or names_path(str(err), path):
        return err
    return type(err)(err.fault, path=str(path))


def _refuse_repeats(flag: str, paths: list[str]) -> None:
    """UsageError naming a path given twice to ``flag``: one recording pooled with itself
    would pass for a second recording and fake the sample size."""
    import os

    seen: set[str] = set()
    for p in paths:
        key = os.path.realpath(p)
        if key in seen:
            raise UsageError(f"{safe_line(p)} is given twice to {flag}: give each recording once (one recording "
                             "counted twice would pass for two and fake the sample size)")
        seen.add(key)


def side_paths(args) -> tuple[list[str], list[str]]:
    """The base and treatment paths: the two positional paths, or ``--base`` and
    ``--treatment`` (one or more each, repeated flags adding up). Raises UsageError for a mix,
    a missing side or a path given twice to one side (one recording counted twice)."""
    pos = [p for p in (args.base, args.treatment) if p is not None]
    many = args.base_paths is not None or args.treatment_paths is not None
    if many:
        if pos:
            raise UsageError("give BASE TREATMENT or --base PATH... --treatment PATH..., not both")
        if not args.base_paths or not args.treatment_paths:
            raise UsageError("--base and --treatment go together: give one or more paths to each")
        for flag, paths in (("--base", args.base_paths), ("--treatment", args.treatment_paths)):
            _refuse_repeats(flag, paths)
        return list(args.base_paths), list(args.treatment_paths)
    if len(pos) != 2:
        raise UsageError("diff needs two profiles: BASE TREATMENT (or --base PATH... --treatment PATH...)")
    return [args.base], [args.treatment]


def _summary(prof, path, args, rules, base):
    """:func:`~traceview.analysis.compare.diff.side` of ``prof`` (read from ``path``) with the
    command line's options, its profile read for it alone; a fault of the side names its file."""
    from traceview.analysis.compare.diff import side
    from traceview.cli import process

    try:
        return side(prof, rules=rules, name_stem=not args.no_name_stem, base=base, step_window=args.step_window,
                    window_option="--step-window", expand_kernels=args.expand_kernels,
                    release=process.heap_releaser(cargs.input_bytes(prof.discovery)), drop_derived=True,
                    beside=not process.imports_may_race())
    except TraceviewError as e:  # said with its file (side() names a step window's)
        raise naming_side(e, path) from None


def _side(i: int, todo, discs, args, rules, nb: int, bases, said: list):
    """The :class:`~traceview.analysis.compare.diff.DiffSide` of side ``i`` of ``todo``, read
    alone; ``bases``: the pickled base sides when it is a treatment's (its step module is the
    pooled base's, :func:`~traceview.analysis.compare.diff.side`); ``said``: the warning lines
    said so far (:func:`load_sides`), its own appended."""
    import dataclasses
    import pickle

    base = None
    if bases is not None:  # what side() reads of the base: its kernels and steps, not its noise samples
        from traceview.analysis.compare.pooled import pool

        base = dataclasses.replace(pool([pickle.loads(b) for b in bases]), samples=None)
    # (the first imports polars while it decodes)
    for prof in load_sides([todo[i]], args, discoveries=[discs[i]], said=said):
        return _summary(prof, todo[i][0], args, rules, base)
    raise AssertionError("load_sides yields one profile per side")


def _sides_here(todo, discs, args, rules, nb: int, said: list) -> list:
    """Every side's :class:`~traceview.analysis.compare.diff.DiffSide`, read in this process,
    one profile at a time (where a child process cannot be forked: :func:`traceview.cli.process.can_fork`);
    ``said``: as :func:`load_sides`'s."""
    from traceview.analysis.compare.pooled import pool

    sides: list = []
    pooled_base = None
    # no enumerate(): it keeps its last (i, prof) tuple for reuse, which would hold each profile
    # while the next one is read
    i = -1
    for prof in load_sides(todo, args, discoveries=discs, said=said):
        i += 1
        if i == nb:
            pooled_base = pool(sides)
        sides.append(_summary(prof, todo[i][0], args, rules, pooled_base if i >= nb else None))
        del prof
    return sides


def run(args) -> int:
    """Returns 0; raises TraceviewError subclasses on bad input."""
    from traceview.cli import process
    from traceview.read.guard import check_writable, refuse_inside_inputs

    out = cargs.output_path(args.output, "-o")
    args.format = cargs.output_format(args.format, out, ["table", "json", "html"], "table")
    check_writable(out, "-o")
    refuse_inside_inputs(out, "-o")
    if not args.overhead_factor > 1:
        raise UsageError(f"overhead factor must be > 1, got {args.overhead_factor!r}")
    if not 0 < args.noise_level < 1:
        raise UsageError(f"--noise-level must be in (0, 1), got {args.noise_level!r}")
    base_paths, treatment_paths = side_paths(args)
    nb = len(base_paths)
    todo = [(p, args.run_base) for p in base_paths] + [(p, args.run_treatment) for p in treatment_paths]
    discs = discover_sides(todo)
    refuse_inside_inputs(out, "-o", *discs)
    process.tune_allocator(cargs.input_bytes(*discs))  # before polars is imported
    rules = cargs.rules_from_args(args)
    from traceview.analysis.steps.window import parse_window

    parse_window(args.step_window)  # a malformed window is no side's fault: refused before any is read
    if process.can_fork(cargs.input_bytes(*discs)):
        # each profile read and summarised in a child process of its own: whatever one side's
        # read and analyses leave in the allocators goes with its process before the next is
        # read. The last child also compares and renders, so this process never imports numpy
        # or polars: while a child works it holds the answers so far (bytes) and little else.
        import pickle

        answers: list = []
        said: list = []  # each child's warning lines come back beside its side, for the next to skip
        last = len(todo) - 1

        def read(i):
            side = _side(i, todo, discs, args, rules, nb, answers[:nb] if i >= nb else None, said)
            return process.Headed(said, side)

        for i in range(last):
            got = process.pickled_in_child(lambda i=i: read(i), todo[i][0],
                                           meanwhile=_child_imports if i == 0 else None)
            said[:] = got.head
            answers.append(got.body)

        def compare_last():
            mine = _side(last, todo, discs, args, rules, nb, answers[:nb] if last >= nb else None, said)
            return _compared([pickle.loads(a) for a in answers] + [mine], nb, args, out, said)

        text = pickle.loads(process.pickled_in_child(compare_last, todo[last][0]))
    else:
        said = []
        text = _compared(_sides_here(todo, discs, args, rules, nb, said), nb, args, out, said)
    if text is None:  # printed to the terminal
        return EXIT_OK
    from traceview.cli.outputs import emit

    emit(text, out)
    return EXIT_OK


def _child_imports() -> None:
    """What every side's child imports (the reader, polars, numpy, the comparison), imported
    here while the first child reads: the later children are forked with it (polars' thread
    pool is not started by an import). The parent's own memory grows by the modules only.
    The reader's modules too, which :func:`~traceview.model.load.load` imports as it starts,
    and ``numpy.ma``, which polars imports when it first makes a series of an array."""
    import numpy.ma  # noqa: F401

    import traceview.model.files  # noqa: F401
    import traceview.model.from_xplane  # noqa: F401
    import traceview.model.load  # noqa: F401
    import traceview.read.batch  # noqa: F401
    import traceview.read.prefetch  # noqa: F401
    from traceview.cli import process

    process.imports_while_decoding("diff")()


def _compared(sides: list, nb: int, args, out, warnings: list) -> str | None:
    """The diff of the pooled first ``nb`` sides against the pooled others, as the text of
    ``args.format``; None when a table went to the terminal (``out`` None) already.
    ``warnings``: the sides' warning lines, for the JSON."""
    from traceview.analysis.compare.diff import diff_sides
    from traceview.analysis.compare.pooled import pool

    pooled_base = pool(sides[:nb])
    d = diff_sides(pooled_base, pool(sides[nb:]), overhead_factor=args.overhead_factor,
                   noise_level=args.noise_level)
    if args.format == "json":
        from traceview.render.json import diff_json

        return diff_json(d, args.top, args.all_rows, warnings=warnings)
    if args.format == "html":
        from traceview.render.diff_html import render_diff_page

        return render_diff_page(d, top=cargs.table_top(args, 25))
    from traceview.render.diff_terminal import render_diff

    if out is None:
        from traceview.cli.outputs import console

        render_diff(console(args.width), d, top=cargs.table_top(args, 25))
        return None
    from traceview.cli.outputs import PLAIN_WIDTH
    from traceview.render.diff_terminal import render_diff_text

    return render_diff_text(d, top=cargs.table_top(args, 25), width=args.width or PLAIN_WIDTH)
