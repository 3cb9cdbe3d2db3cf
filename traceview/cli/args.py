"""Command-line arguments shared by the subcommands, and what they turn into (read options,
family rules, peaks)."""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path


class Parser(argparse.ArgumentParser):
    """argparse with usage errors as one line, ``traceview: error: <what>`` and the --help to
    read, exit 2 (argparse prints its whole usage block first)."""

    def error(self, message: str):
        import sys

        from traceview.errors import EXIT_USAGE
        from traceview.model.naming import safe_line

        message = message.replace(POSITIONAL_MARK, "")  # an argument after -- as given
        print(f"traceview: error: {safe_line(message)} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)

    def _print_message(self, message, file=None):
        """argparse's writer of the help, the usage and ``--version``, with a failed write
        raised (argparse swallows the OSError: a help sent to a full disk was lost with exit 0)."""
        import errno

        if message:
            if file is None:  # argparse gives sys.stdout, None when descriptor 1 is closed (>&-)
                raise OSError(errno.EBADF, "standard output is closed")
            file.write(message)


#: put before an argument after ``--`` that starts with a minus while it is parsed
#: (:func:`traceview.cli.parse`; no command-line argument holds a NUL)
POSITIONAL_MARK = "\x00"

#: Counts on the command line are held to this (no table, step count or batch comes near;
#: larger values would overflow the int64 arithmetic of the tables): a larger one means "all".
MAX_COUNT = 1 << 62


def path_arg(text: str) -> str:
    """argparse type: a PATH, never empty (``""`` is a usage error, not the current folder:
    an unset shell variable should not analyse ``.``)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"PATH is empty ({text!r}); give a trace file or folder ('.' for this one)")
    return text


def positive_int(text: str) -> int:
    """argparse type: an integer > 0, held to :data:`MAX_COUNT`."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return min(v, MAX_COUNT)


def percent(text: str) -> float:
    """argparse type of a PCT option: percent, ``10`` or ``10%``, finite and >= 0. A bare value
    between 0 and 1 (``0.05``) is refused as ambiguous: ``verify`` writes fractions so, and
    here it would mean 0.05%; ``0.05%`` says it."""
    t = text.strip()
    marked = t.endswith("%")
    try:
        v = float(t[:-1] if marked else t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percent (10 or 10%), got {text!r}") from None
    if not (0 <= v < 1e6):
        raise argparse.ArgumentTypeError(f"expected a percent from 0 (10 or 10%), got {text!r}")
    if 0 < v < 1 and not marked:
        raise argparse.ArgumentTypeError(f"{text!r} reads as {v:g}%: write {v * 100:g} or {v * 100:g}% for "
                                         f"{v * 100:g} percent, or {v:g}% if you mean it")
    return v


#: the narrowest and widest ``--width``
MIN_COLUMNS, MAX_COLUMNS = 40, 8192


def columns(text: str) -> int:
    """argparse type of ``--width``: a terminal width in columns, from :data:`MIN_COLUMNS` to
    :data:`MAX_COLUMNS`."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of columns, got {text!r}") from None
    if not MIN_COLUMNS <= v <= MAX_COLUMNS:
        raise argparse.ArgumentTypeError(f"expected {MIN_COLUMNS} to {MAX_COLUMNS} columns, got {text!r}")
    return v


def add_width(p) -> None:
    """``--width N`` (:func:`columns`): the table output laid out for N columns."""
    p.add_argument("--width", type=columns, metavar="N",
                   help="lay the table output out for N columns (default: the terminal's width; on a pipe or in a "
                        "file, wide enough that no cell is cut): columns that do not fit fold below each row")


def tokens_per_step(text: str) -> int:
    """argparse type of ``--tokens-per-step``: an integer from 1 to 2**31 (a step of more tokens
    is not a step)."""
    v = positive_int(text)
    if v > 1 << 31:
        raise argparse.ArgumentTypeError(f"expected at most {1 << 31:,} tokens per step, got {text!r}")
    return v


TOP_HELP = ("rows of each table: every format obeys it (without it the table output and the JSON show 25 "
            "rows of each table, and JSON says how many there are under \"rows\"; CSV and Parquet hold every row)")

ALL_ROWS_HELP = "every row of every table, in every format (JSON included); not with --top"


def add_top(p: argparse.ArgumentParser, *, top_help: str = TOP_HELP) -> None:
    """``--top N`` and ``--all-rows`` (mutually exclusive)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--top", type=positive_int, default=None, metavar="N", help=top_help)
    g.add_argument("--all-rows", action="store_true", help=ALL_ROWS_HELP)


def table_top(args, default: int) -> int:
    """Rows of each table a text output shows: ``--top``, every row under ``--all-rows``
    (:data:`MAX_COUNT`), else ``default``."""
    return MAX_COUNT if getattr(args, "all_rows", False) else (args.top or default)


def exact_count(text: str) -> int:
    """argparse type: an integer > 0 that is a count to check against (``--steps``,
    ``--expect-batch``): no step count or batch comes near :data:`MAX_COUNT`, so a larger one
    is a usage error, not "all" (held to the cap it would make every check fail)."""
    v = positive_int(text)
    if v >= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"expected a count below 2**62, got {text!r}")
    return v


def step_count(text: str) -> tuple[str | None, int]:
    """argparse type of ``--steps``: ``N`` (every program) or ``MODULE=N`` (that program's
    count; repeat the option for several programs) -> (module or None, N)."""
    module, _, n = text.rpartition("=") if "=" in text else (None, "", text)
    if module is not None and not module:
        raise argparse.ArgumentTypeError(f"expected N or MODULE=N, got {text!r}")
    return module, exact_count(n)


def steps_option(values: list | None):
    """The ``steps`` argument of the occurrence checks from repeated ``--steps`` values: None,
    one N, or {module: N}. Raises :class:`~traceview.errors.UsageError` when a plain N is mixed
    with MODULE=N or given twice."""
    from traceview.errors import UsageError

    if not values:
        return None
    plain = [n for m, n in values if m is None]
    named = {m: n for m, n in values if m is not None}
    if plain and (named or len(plain) > 1):
        raise UsageError("--steps takes either one N for every program or MODULE=N per program, not both")
    return plain[0] if plain else named


def add_occurrence_checks(p: argparse.ArgumentParser) -> None:
    """``--steps [MODULE=]N`` (repeatable: :func:`steps_option`) and ``--expect-batch B``
    (analyze, query): the occurrence checks (query's ``occurrence_checks`` table)."""
    p.add_argument("--steps", type=step_count, metavar="[MODULE=]N", action="append",
                   help="flag populations whose executions on a device are not a multiple of N (the step count; "
                        "MODULE=N checks that program against its own count, repeat for several)")
    p.add_argument("--expect-batch", type=exact_count, metavar="B",
                   help="show which populations carry a dimension of size B")


def check_step_modules(steps, prof) -> None:
    """UsageError when ``--steps MODULE=N`` (``steps`` as :func:`steps_option` returns it)
    names a program none of ``prof``'s ops ran in, naming the programs there are (as
    ``--step-module`` refuses a program without executions)."""
    from traceview.errors import UsageError

    if not isinstance(steps, dict):
        return
    known = sorted({m for m in prof.table.attrs["module"].to_list() if m})
    for m in steps:
        if m not in known:
            shown = ", ".join(known[:12]) + (f" and {len(known) - 12} more" if len(known) > 12 else "")
            raise UsageError(f"--steps {m}={steps[m]}: module {m!r} has no ops in this trace; modules: {shown or 'none'}")


def output_path(value: str | None, flag: str) -> Path | None:
    """The path an output option names: None when not given or ``-`` (standard output).
    Raises :class:`~traceview.errors.UsageError` for an empty name."""
    from traceview.errors import UsageError

    if value is None or value == "-":
        return None
    if not value.strip():
        raise UsageError(f"{flag} needs a file name (or - for standard output), got {value!r}")
    return Path(value)


#: Output formats a file name's suffix implies when ``--format`` is not given.
SUFFIX_FORMATS = {".json": "json", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".html": "html",
                  ".htm": "html", ".txt": "table"}


def output_format(given: str | None, out: Path | None, choices, default: str, *, hint: dict | None = None) -> str:
    """``given``, else the format ``out``'s suffix implies (:data:`SUFFIX_FORMATS`), else
    ``default`` when ``out`` is None or has no suffix. Raises
    :class:`~traceview.errors.UsageError` for a suffix that implies no format of ``choices``
    (the message is ``hint[format]`` when given, e.g. where the HTML report is written), or
    another format than ``given`` (``--format parquet -o x.json``; ``.txt`` goes with any text format)."""
    from traceview.errors import UsageError

    if given:
        implied = SUFFIX_FORMATS.get(out.suffix.lower()) if out is not None else None
        if implied not in (None, given) and not (implied == "table" and given != "parquet"):  # .txt: any text
            raise UsageError(f"-o {out}: its suffix {out.suffix!r} says {implied}, --format says {given}: "
                             f"name the file for its format, or drop one of the two")
        return given
    if out is None or not out.suffix:
        return default
    implied = SUFFIX_FORMATS.get(out.suffix.lower())
    if implied in choices:
        return implied
    if implied is not None and hint and implied in hint:
        raise UsageError(hint[implied])
    known = sorted(s for s, f in SUFFIX_FORMATS.items() if f in choices)
    raise UsageError(f"-o {out}: the suffix {out.suffix!r} is not an output format here (suffixes: "
                     f"{', '.join(known)}; or give --format {{{','.join(choices)}}})")


def distinct_outputs(*pairs) -> None:
    """UsageError when two output options (``(flag, path)`` pairs) name the same file."""
    from traceview.errors import UsageError

    seen = {}
    for flag, path in pairs:
        if path is None:
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise UsageError(f"{seen[key]} and {flag} both name {path}: one would overwrite the other")
        seen[key] = flag


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {text!r}")
    return v


def days(text: str) -> float:
    """argparse type: a finite number of days."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of days, got {text!r}") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number of days, 0 or more, got {text!r}")
    return v


def workers(text: str) -> int:
    """argparse type: a whole number of processes, 1 or more."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of processes, 1 or more: {text!r}")
    return n


NO_CACHE_HELP = ("neither read nor write the parsed-table cache (~/.cache/traceview; $TRACEVIEW_CACHE_DIR, "
                 "$TRACEVIEW_NO_CACHE=1)")


def add_reading(p: argparse.ArgumentParser) -> None:
    """``--no-cache``, ``--workers``, ``--scheduler`` (analyze, report, query, export: :func:`add_selection`)."""
    p.add_argument("--no-cache", action="store_true", help=NO_CACHE_HELP)
    p.add_argument("--workers", type=workers, default=1, metavar="N",
                   help="read the hosts' files in up to N local processes (default 1: in this process; "
                        "a pool is started for 2 files or more and 8 MiB in all)")
    p.add_argument("--scheduler", metavar="ADDRESS", type=scheduler_address,
                   help="read the hosts' files on this Dask cluster (e.g. tcp://10.0.0.5:8786); "
                        "needs traceview[dist] and the files at the same paths on the workers; an analyze output "
                        "answered from the result cache reads nothing and contacts no scheduler (a warning names it)")


EXPAND_KERNELS_HELP = ("show the ops inside each interpreted Pallas kernel invocation (a CPU trace, interpret=True) "
                       "instead of one row per invocation named by the kernel, as a TPU trace shows it")


def add_expand_kernels(p: argparse.ArgumentParser) -> None:
    """``--expand-kernels`` (analyze, report, diff, verify)."""
    p.add_argument("--expand-kernels", action="store_true", help=EXPAND_KERNELS_HELP)


def add_selection(p: argparse.ArgumentParser) -> None:
    """PATH and what to read of it: run, staleness, device and op filters, reading, byte limit."""
    p.add_argument("path", nargs="?", default=".", type=path_arg, help="trace file, run dir, log dir or any folder above (default: .), or a URL: gs://bucket/logdir, "
                                                                   "s3://..., any fsspec URL (traceview[gcs], traceview[s3])")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--run", metavar="NAME", help="read this run (folder name YYYY_MM_DD_HH_MM_SS) instead of the newest")
    g.add_argument("--all-runs", action="store_true", help="read every run found, not only the newest")
    p.add_argument("--stale-days", type=days, default=7.0, metavar="D",
                   help="warn when the chosen run is older than D days (default 7; 0: never)")
    p.add_argument("--no-group-hosts", action="store_true",
                   help="read only the newest run folder, not the other hosts' folders of a capture written host by "
                        "host (one host each, dated within 60 s of it)")
    p.add_argument("--device", metavar="REGEX", help="keep only devices whose name matches REGEX (e.g. 'TPU:0$')")
    p.add_argument("--filter", metavar="REGEX", help="keep only ops whose name, HLO text or framework op path (named scopes) matches REGEX")
    add_reading(p)
    add_expand_kernels(p)
    add_max_bytes(p)


def add_max_bytes(p: argparse.ArgumentParser) -> None:
    """``--max-bytes N``: the read limit of one file (every command that reads traces)."""
    p.add_argument("--max-bytes", type=positive_int, metavar="N",
                   help="most bytes one file's reading may take: an .xplane.pb's size, the memory a .trace.json's "
                        "text and events take (about 2.25 B per byte of text + 400 B per event) (default: "
                        "$TRACEVIEW_MAX_BYTES, else 8 GiB / 4 GiB); over it: exit 6")


def add_phase(p: argparse.ArgumentParser, *, tokens: bool = True) -> None:
    """``--phase prefill|decode|mixed`` (analyze, report, diff, verify) and, with ``tokens``,
    ``--tokens-per-step N``."""
    p.add_argument("--phase", choices=["prefill", "decode", "mixed"], default=None,
                   help="keep only the ops of one phase: the executions of programs named or shaped as prefill or "
                        "decode, or the iterations of the steps that ran both (mixed); see the phases section")
    if tokens:
        p.add_argument("--tokens-per-step", type=tokens_per_step, default=None, metavar="N",
                       help="tokens each step produces, for tokens/s (default: read off the programs' names, "
                            "_b<N> decode rows and _t<N> prefill tokens; else unknown)")


def apply_phase(prof, args):
    """``prof`` kept to ``args.phase`` (:func:`traceview.analysis.steps.phases.phase_profile`, over the
    step anatomy of the command's step options); ``prof`` itself without ``--phase``. Raises
    UsageError when no step or execution has that phase."""
    phase = getattr(args, "phase", None)
    if not phase:
        return prof
    from traceview.analysis import derived
    from traceview.analysis.steps.phases import phase_profile, phases

    anat = derived.step_anatomy(prof, rules_from_args(args), module=getattr(args, "step_module", None),
                                extent=getattr(args, "step_extent", "span"))
    return phase_profile(prof, phase, phases(prof, anat))


def add_peaks(p: argparse.ArgumentParser) -> None:
    """``--chip``, ``--peak-flops``, ``--peak-bw``, ``--measure-cpu-peaks``."""
    from traceview.analysis.hardware.chips import CHIPS  # the help lists the table itself

    p.add_argument("--chip", metavar="NAME", help="use this chip's peaks from the built-in table "
                   f"({', '.join(CHIPS)})")
    p.add_argument("--peak-flops", type=positive_float, metavar="FLOP/S", help="peak FLOP/s (e.g. 1.97e14)")
    p.add_argument("--peak-bw", type=positive_float, metavar="B/S", help="peak memory bandwidth in bytes/s (e.g. 8.19e11)")
    p.add_argument("--measure-cpu-peaks", action="store_true",
                   help="measure this host's FLOP/s and copy bandwidth (for CPU traces; opt-in, ~1 s)")


def add_families(p: argparse.ArgumentParser, *, default_list: bool = True) -> None:
    """``--family NAME=REGEX`` (repeatable) and ``--families FILE``."""
    p.add_argument("--family", action="append", default=[] if default_list else None, metavar="NAME=REGEX",
                   help="an op family rule, tried before the defaults (repeatable); REGEX is matched "
                        "against op name, HLO text, framework op and source file; NAME=FIELD:REGEX matches one "
                        "field: op, kind, hlo, scope (framework op / named scopes), file, line (file:line and "
                        "the stack's frames), stack")
    p.add_argument("--families", metavar="FILE", help="family rules, one NAME=REGEX per line (# comments), or a "
                   "built-in set: study (the engine's named scopes: attention, gate-up, down, logits, sampler, other)")


def add_steps(p: argparse.ArgumentParser) -> None:
    """Family rules, ``--step-module``, ``--step-extent`` and ``--step-window``."""
    add_families(p)
    p.add_argument("--step-module", metavar="NAME",
                   help="the program whose executions are the steps (default: the one with most op time)")
    p.add_argument("--step-extent", choices=["span", "period", "run"], default="span",
                   help="span: a run to the end of what it starts [default]; period: start to next start; "
                        "run: the program's own execution")
    add_step_window(p)


def add_step_window(p: argparse.ArgumentParser) -> None:
    """``--step-window all|steady|A:B``."""
    p.add_argument("--step-window", default="steady", metavar="all|steady|A:B",
                   help="the steps the per-step figures, coverage and families use: steady (outlier steps, "
                        "by median absolute deviation, left out) [default], all, or A:B (step indices per "
                        "device, A inclusive, B exclusive, negatives from the end: 2:, 1:-1)")


def rules_from_args(args):
    """Family rules from ``--families FILE`` then ``--family NAME=REGEX`` (UsageError when
    malformed, an empty or ``#`` one included: a file's blank and comment lines are skipped, a
    ``--family`` is a rule), or None when there are none."""
    if not getattr(args, "families", None) and not getattr(args, "family", None):
        return None  # without importing the families (polars)
    from traceview.errors import UsageError

    for i, s in enumerate(getattr(args, "family", None) or [], 1):
        if not s.strip() or s.strip().startswith("#"):
            raise UsageError(f"rule {i}: bad family rule {s.strip()!r}: "
                             f"{'empty' if not s.strip() else 'a comment, not a rule'}: expected NAME=REGEX or "
                             "NAME=FIELD:REGEX")
    from traceview.analysis.ops.families import parse_rules, read_rules

    rules = read_rules(args.families) if getattr(args, "families", None) else []
    rules += parse_rules(getattr(args, "family", None) or [])
    return rules or None


def peaks_from_args(prof, args):
    """The profile's peaks with the command line's overrides (``--measure-cpu-peaks``
    measures this host for the figures neither given nor known, on a CPU profile only)."""
    from traceview.analysis.hardware.peaks import measure_cpu_peaks, profile_peaks

    peaks = profile_peaks(prof, chip=args.chip, peak_flops=args.peak_flops, peak_bw=args.peak_bw)
    if getattr(args, "measure_cpu_peaks", False):
        kinds = {d.kind for d in prof.used_devices()}
        if kinds - {"CPU"}:
            peaks.notes.append(f"--measure-cpu-peaks measures this host's CPU; the profile ran on "
                               f"{', '.join(sorted(kinds - {'CPU'}))}: not used")
        elif not (peaks.peak_flops and peaks.peak_bw):
            m = measure_cpu_peaks()
            if not peaks.peak_flops:
                peaks.peak_flops, peaks.flops_source = m.peak_flops, m.flops_source
            if not peaks.peak_bw:
                peaks.peak_bw, peaks.bw_source = m.peak_bw, m.bw_source
    return peaks


def cache_from_args(args):
    """The parsed-table cache to use: False under ``--no-cache``, else the environment's
    (:meth:`traceview.read.cache.TableCache.default`, None when it is off)."""
    if getattr(args, "no_cache", False):
        return False
    from traceview.read.cache import TableCache

    return TableCache.default() or False


def read_options(args) -> dict:
    """``traceview.model.load.load`` keyword arguments from the reading flags: the cache,
    ``--workers`` local processes (the CLI's main is import-safe, as ``spawn`` needs),
    ``--scheduler``, ``--expand-kernels``, ``--no-group-hosts``, and a progress bar on stderr when it is a terminal."""
    from traceview.render.progress import TerminalProgress

    return {"cache": cache_from_args(args), "workers": max(0, getattr(args, "workers", 1) or 0),
            "scheduler": getattr(args, "scheduler", None), "progress": TerminalProgress(),
            "expand_kernels": bool(getattr(args, "expand_kernels", False)), "group_hosts": group_hosts(args)}


def note_workers(args, disc) -> None:
    """Say on standard error when ``--workers N`` (N >= 2, no ``--scheduler``) starts no pool
    for the files of ``disc`` (:func:`traceview.read.batch.pool_size`): they are read in this
    process. A note, not part of the output (a stored result is the same whatever the flag)."""
    w = getattr(args, "workers", 1) or 0
    if w < 2 or getattr(args, "scheduler", None) or disc is None:
        return
    from traceview.model.units import fmt_bytes
    from traceview.read.batch import PARALLEL_MIN_BYTES, pool_size

    files = list(disc.files)
    if pool_size(w, files):
        return
    print(f"traceview: note: read in this process, not by {w} worker processes: {len(files)} file(s), "
          f"{fmt_bytes(sum(f.size for f in files))} (a pool is started for 2 files or more and "
          f"{fmt_bytes(PARALLEL_MIN_BYTES)} in all, where it pays for its start-up)", file=sys.stderr)


def group_hosts(args) -> bool:
    """Whether run folders of one host each, dated together, are read as one run (not ``--no-group-hosts``)."""
    return not getattr(args, "no_group_hosts", False)


def stale_after(args) -> float | None:
    """``--stale-days`` in seconds, None when 0 (no warning)."""
    return None if args.stale_days <= 0 else args.stale_days * 86400


def input_bytes(*discoveries) -> int:
    """Bytes on disk of every file the discoveries chose (0 for one that cannot be stat'ed)."""
    import os

    total = 0
    for d in discoveries:
        for tf in d.files:
            try:
                total += os.stat(tf.path).st_size
            except OSError:
                pass
    return total


def limit_value(text: str) -> float:
    """argparse type of a resource limit: a finite number, 0 or more (0: no limit)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, 0 or more (0: no limit), got {text!r}") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number, 0 or more (0: no limit), got {text!r}")
    return v


def memory_gib(text: str) -> float:
    """argparse type of ``--query-memory``: :func:`limit_value`, and 0 or at least
    :data:`MIN_MEMORY_GIB` (below it a query cannot even import its modules: it read as a
    broken installation)."""
    v = limit_value(text)
    if 0 < v < MIN_MEMORY_GIB:
        raise argparse.ArgumentTypeError(f"expected 0 (no limit) or at least {MIN_MEMORY_GIB:g} GiB, got {text!r}")
    return v


#: the smallest ``--query-memory`` taken, GiB (1 MiB)
MIN_MEMORY_GIB = 1 / 1024


def scheduler_address(text: str) -> str:
    """argparse type of ``--scheduler``: a Dask scheduler address
    (:func:`traceview.read.batch.address_fault`; an empty one, read as none, would run the
    hosts locally without a word)."""
    from traceview.read.batch import address_fault

    if not text.strip():
        raise argparse.ArgumentTypeError("empty address: give the Dask scheduler's, e.g. tcp://10.0.0.5:8786")
    fault = address_fault(text.strip())
    if fault:
        raise argparse.ArgumentTypeError(f"not an address ({text!r}): {fault}; give the Dask scheduler's, "
                                         "e.g. tcp://10.0.0.5:8786")
    return text.strip()


def add_query_limits(p: argparse.ArgumentParser) -> None:
    """``--query-memory GIB`` and ``--query-timeout S`` (query, mcp): :mod:`traceview.cli.sqlguard`."""
    from traceview.cli.sqlguard import MEMORY_GIB, TIMEOUT_S

    p.add_argument("--query-memory", type=memory_gib, default=MEMORY_GIB, metavar="GIB",
                   help=f"memory a query may take above the profile's tables, in GiB (default {MEMORY_GIB:g}; "
                        "0: no limit); over it: one line, exit 6")
    p.add_argument("--query-timeout", type=limit_value, default=TIMEOUT_S, metavar="S",
                   help=f"seconds a query may run (default {TIMEOUT_S:g}; 0: no limit); past it: one line, exit 6")


def query_limits(args) -> dict:
    """:func:`traceview.cli.sqlguard.run`'s ``memory`` (bytes) and ``seconds`` from
    ``--query-memory`` / ``--query-timeout`` (None: no limit)."""
    gib, seconds = args.query_memory, args.query_timeout
    # a limit too large to bind (past 2**62 bytes, or a timer past MAX_LIMIT_S) is none; a tiny
    # one is at least a byte (rounded to 0 it read as "no limit")
    memory = None if not gib or gib * (1 << 30) >= (1 << 62) else max(1, int(gib * (1 << 30)))
    return {"memory": memory, "seconds": seconds if seconds and seconds < MAX_LIMIT_S else None}


#: seconds past which ``--query-timeout`` sets no timer (a year: setitimer overflows far beyond)
MAX_LIMIT_S = 365 * 86400.0


def add_findings(p: argparse.ArgumentParser) -> None:
    """``--no-findings`` and ``--finding-threshold ID=VALUE`` (repeatable)."""
    p.add_argument("--no-findings", action="store_true", help="skip the findings (traceview.analysis.findings)")
    p.add_argument("--finding-threshold", action="append", default=[], metavar="ID=VALUE",
                   help="set finding ID's threshold (e.g. host-bound-steps=0.5, sampler-search-dominates=10%%; "
                        "defaults in traceview.analysis.findings.Thresholds; repeatable)")


def findings_from_args(args) -> dict:
    """``build_report`` keyword arguments (findings, finding_thresholds) from the findings
    flags. Raises UsageError for a bad ``--finding-threshold``."""
    from traceview.analysis.findings import thresholds_of

    return {"findings": not getattr(args, "no_findings", False),
            "finding_thresholds": thresholds_of(getattr(args, "finding_threshold", None) or [])}


def note_empty_selection(prof, args) -> None:
    """Add to ``prof.warnings`` the line saying that ``--filter`` / ``--device`` left no op
    (or that there is none to show), when the profile's table is empty."""
    if prof.table.height == 0:
        what = " and ".join(f"{k} {v!r}" for k, v in (("--filter", getattr(args, "filter", None)),
                                                      ("--device", getattr(args, "device", None))) if v)
        prof.warnings.append(f"no op left after {what}" if what else "no op to show")
