"""The ``traceview`` command: a thin layer over the library.

Exit codes are those of :mod:`traceview.errors` (0 ok, 1 check failed, 2 usage, 3 no trace
found, 4 trace unreadable, 5 no HLO ops, 6 limit exceeded). Library errors are printed as one
line, ``traceview: error: <file>: <fault>``, never as a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from . import __version__
from .errors import EXIT_LIMIT, EXIT_OK, EXIT_USAGE, TraceviewError, UsageError



def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def _days(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of days, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number of days, got {text!r}")
    return v


def _add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", default=".", help="trace file, run dir, log dir or any folder above (default: .)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--run", metavar="NAME", help="read this run (folder name YYYY_MM_DD_HH_MM_SS) instead of the newest")
    g.add_argument("--all-runs", action="store_true", help="read every run found, not only the newest")
    p.add_argument("--stale-days", type=_days, default=7.0, metavar="D",
                   help="warn when the chosen run is older than D days (default 7)")
    p.add_argument("--device", metavar="REGEX", help="keep only devices whose name matches REGEX (e.g. 'TPU:0$')")
    p.add_argument("--filter", metavar="REGEX", help="keep only ops whose name, HLO text or framework op path (named scopes) matches REGEX")
    from .parallel import add_cli_arguments  # --no-cache, --scheduler

    add_cli_arguments(p)
    p.add_argument("--max-bytes", type=_positive_int, metavar="N",
                   help="most bytes of trace data to hold per file: .xplane.pb size, decompressed .trace.json "
                        "text (default: $TRACEVIEW_MAX_BYTES, else 8 GiB / 4 GiB); over it: exit 6")


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {text!r}")
    return v


def _add_peaks(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chip", metavar="NAME", help="use this chip's peaks from the built-in table "
                   "(tpu-v4, tpu-v5e, tpu-v5p, tpu-v6e, a100, h100, h200, mi300x)")
    p.add_argument("--peak-flops", type=_positive_float, metavar="FLOP/S", help="peak FLOP/s (e.g. 1.97e14)")
    p.add_argument("--peak-bw", type=_positive_float, metavar="B/S", help="peak memory bandwidth in bytes/s (e.g. 8.19e11)")
    p.add_argument("--measure-cpu-peaks", action="store_true",
                   help="measure this host's FLOP/s and copy bandwidth (for CPU traces; opt-in, ~1 s)")


def _peaks_from_args(prof, args):
    if getattr(args, "measure_cpu_peaks", False) and not (args.peak_flops and args.peak_bw):
        from .roofline import measure_cpu_peaks

        m = measure_cpu_peaks()
        return prof.peaks(chip=args.chip, peak_flops=args.peak_flops or m.peak_flops, peak_bw=args.peak_bw or m.peak_bw)
    return prof.peaks(chip=args.chip, peak_flops=args.peak_flops, peak_bw=args.peak_bw)


def _add_steps(p: argparse.ArgumentParser) -> None:
    p.add_argument("--family", action="append", default=[], metavar="NAME=REGEX",
                   help="an op family rule, tried before the defaults (repeatable); REGEX is matched "
                        "against op name, HLO text, framework op and source file")
    p.add_argument("--families", metavar="FILE", help="family rules, one NAME=REGEX per line (# comments)")
    p.add_argument("--step-module", metavar="NAME",
                   help="the program whose executions are the steps (default: the one with most op time)")
    p.add_argument("--step-window", choices=["span", "period", "run"], default="span",
                   help="span: a run to the end of what it starts [default]; period: start to next start; "
                        "run: the program's own execution")


def _rules_from_args(args):
    """Family rules from --families FILE then --family NAME=REGEX (UsageError when malformed)."""
    from .steps import parse_rules, read_rules

    rules = read_rules(args.families) if getattr(args, "families", None) else []
    rules += parse_rules(getattr(args, "family", None) or [])
    return rules or None


#: the subcommands; :func:`build_parser` can build just one of them
COMMANDS = ("analyze", "report", "diff", "verify", "engine")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The CLI's argument parser. ``only``: build just that subcommand (``main`` does, for
    the command on its command line: argparse spends ~1 ms per option building the others)."""
    parser = argparse.ArgumentParser(
        prog="traceview",
        description="Shape-keyed analysis of JAX/XProf profiles (.xplane.pb, .trace.json.gz).",
        epilog="exit codes: 0 ok, 1 check failed, 2 usage, 3 no trace found, 4 trace unreadable, "
               "5 no HLO ops in trace, 6 resource limit exceeded")
    parser.add_argument("--version", action="version", version=f"traceview {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    if only is None or only == "analyze":
        _add_analyze(sub)
    if only is None or only == "report":
        _add_report(sub)
    if only is None or only in ("diff", "verify"):
        from .cli_diff import add_parsers as _add_diff_parsers  # diff, verify

        _add_diff_parsers(sub, _positive_int, _positive_float)
    if only is None or only == "engine":
        e = sub.add_parser("engine", help="the bundled Pallas decode engine (bench, profile)", add_help=False)
        e.add_argument("engine_args", nargs=argparse.REMAINDER)
    return parser


def _add_analyze(sub) -> None:
    a = sub.add_parser("analyze", help="find traces under PATH and print shape-keyed op tables",
                       description="Find traces under PATH, say what was read and why, and print "
                                   "the HLO ops keyed by (name, shape) with occurrences and times.")
    _add_selection(a)
    a.add_argument("--top", type=_positive_int, default=25, metavar="N", help="rows to show (default 25)")
    a.add_argument("--by", choices=["shape", "name", "program"], default="shape",
                   help="row key: (name, shape) [default], name only, or (program_id, name) as XProf hlo_stats")
    a.add_argument("--format", choices=["table", "json", "csv", "parquet"], default="table")
    a.add_argument("-o", "--output", metavar="FILE", help="write the output to FILE (required for parquet)")
    a.add_argument("--steps", type=_positive_int, metavar="N",
                   help="flag populations whose per-device occurrence count is not a multiple of N")
    a.add_argument("--expect-batch", type=_positive_int, metavar="B",
                   help="show which populations carry a dimension of size B")
    a.add_argument("--html", metavar="FILE", help="also write the offline HTML report to FILE")
    _add_peaks(a)
    _add_steps(a)
    a.add_argument("--source-frame", choices=["direct", "user"], default="direct",
                   help="attribute ops to the file that emitted them (direct) or to the innermost "
                        "project frame of their stack (user)")



def _add_report(sub) -> None:
    r = sub.add_parser("report", help="write the offline, self-contained HTML report of PATH",
                       description="Find traces under PATH and write one self-contained HTML file (no network, "
                                   "no script): provenance, peaks and ridge point, roofline chart, top ops "
                                   "with their shape populations, step anatomy and source attribution.")
    _add_selection(r)
    r.add_argument("-o", "--output", metavar="FILE", default="traceview_report.html",
                   help="HTML file to write (default: traceview_report.html)")
    r.add_argument("--top", type=_positive_int, default=30, metavar="N", help="populations to list (default 30)")
    r.add_argument("--title", metavar="TEXT", help="page title (default: 'traceview report — <path name>')")
    _add_peaks(r)
    _add_steps(r)


def _out_inside_inputs(out: Path, prof) -> bool:
    """True when ``out`` would land in a folder traceview read a trace from, or anywhere in a
    ``plugins/profile`` tree (where a stray output would later be taken for a trace)."""
    out = out.resolve()
    disc = prof.discovery
    dirs = set()
    if disc is not None:
        for f in disc.files:
            dirs.add(Path(f.path).resolve().parent)
            try:
                if out.exists() and os.path.samefile(out, f.path):  # a hard link to a trace elsewhere
                    return True
            except OSError:
                pass
    if any(out == d or d in out.parents for d in dirs):
        return True
    chain = [out, *out.parents]
    return any(p.name == "profile" and p.parent.name == "plugins" for p in chain)


def _table_for(prof, by: str) -> "pl.DataFrame":
    if by == "name":
        return prof.by_name()
    if by == "program":
        return prof.by_program_op()
    return prof.by_shape()


def _flat(df: "pl.DataFrame") -> "pl.DataFrame":
    """Lists to ';'-joined strings so CSV can hold them."""
    import polars as pl

    return df.with_columns([pl.col(c).list.join(";") for c, t in df.schema.items() if isinstance(t, pl.List)])


def _json_payload(prof, table: "pl.DataFrame", top: int | None, sections: dict) -> dict:
    from .render.provenance import provenance_lines

    disc = prof.discovery
    peaks, roof, checks, anat = sections["peaks"], sections["roof"], sections["checks"], sections["steps"]
    head = (lambda df: df.head(top)) if top else (lambda df: df)
    return {
        "traceview": __version__,
        "provenance": {
            "lines": provenance_lines(prof),
            "files": [{"path": str(t.path), "host": t.host, "format": t.format, "events": t.n_events,
                       "op_events": t.table.height} for t in prof.traces],
            "runs": [r.name for r in disc.selected] if disc is not None else [],
        },
        "warnings": list(prof.warnings),
        "has_shapes": prof.has_shapes,
        "devices": prof.device_summary().to_dicts(),
        "ops": head(table).to_dicts(),
        "peaks": {"peak_flops": peaks.peak_flops, "peak_bw": peaks.peak_bw, "ridge": peaks.ridge,
                  "flops_source": peaks.flops_source, "bw_source": peaks.bw_source},
        "roofline": head(roof).to_dicts(),
        "kernels": sections["kernels"].to_dicts(),
        "sources": head(sections["sources"]).to_dicts(),
        "steps": None if anat is None else {
            "method": anat.method, "module": anat.module, "window": anat.window,
            "coverage": anat.coverage.line(), "coverage_ratio": anat.coverage.ratio,
            "families": anat.families.to_dicts(), "notes": list(anat.notes)},
        "occurrence_checks": checks.to_dicts() if checks is not None else None,
    }


def _console():
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich exits 1 here; a closed pipe is a normal end
            raise BrokenPipeError

    if sys.stdout.isatty():
        return _Console(highlight=False)
    try:
        width = int(os.environ.get("COLUMNS", "") or 0)
    except ValueError:
        width = 0
    return _Console(width=width if width >= 60 else 160, color_system=None, soft_wrap=False, highlight=False)


def _render_all(console, prof, table, args, sections) -> None:
    from .render.terminal import (render_analysis, render_kernels, render_roofline, render_sources,
                                  render_steps)
    from .roofline import predicted_vs_measured

    render_analysis(console, prof, table, by=args.by, top=args.top, checks=sections["checks"])
    render_kernels(console, sections["kernels"], top=args.top)
    render_sources(console, sections["sources"], top=min(args.top, 12), frame=args.source_frame)
    render_steps(console, sections["steps"])
    roof = sections["roof"]
    render_roofline(console, sections["peaks"], roof, top=min(args.top, 10), summary=predicted_vs_measured(roof))


def _check_writable(path: Path, flag: str) -> None:
    """UsageError unless ``path`` names a file whose folder exists (checked before any work)."""
    if path.is_dir():
        raise UsageError(f"refusing to write {path}: it is a folder; {flag} needs a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"refusing to write {path}: folder {parent} does not exist")


def _size(path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _start_prefetch(disc, args) -> bool:
    """Start decoding the input's TPU planes on a thread while polars is imported
    (:mod:`traceview.prefetch`), for the common case only: one ``.xplane.pb`` under
    :data:`BIG_INPUT_BYTES` (larger files are read plane by plane to bound memory), read in
    this process (no ``--scheduler``), no byte limit in force (limits are checked first) and
    no fresh parsed-table cache entry for it. Returns whether it started."""
    from . import cache

    files = disc.files
    if (len(files) != 1 or files[0].kind != "xplane" or args.max_bytes is not None
            or os.environ.get("TRACEVIEW_MAX_BYTES", "").strip()  # profile.MAX_BYTES_ENV (no polars here)
            or getattr(args, "scheduler", None)):
        return False
    tf = files[0]
    size = _size(tf.path)
    if not 0 < size < BIG_INPUT_BYTES:
        return False
    if size >= cache.MIN_FILE_BYTES and cache.has_fresh_entry(str(tf.path), "xplane", tf.host, tf.run):
        return False
    from . import prefetch, tpu_plane  # noqa: F401 - numpy and the decoders first, here: the thread
    # then decodes (mostly without the GIL) while this thread imports polars, instead of both
    # threads importing at once and taking turns on the GIL

    return prefetch.start(tf.path)


def _remember(rkey: str | None, data: bytes) -> None:
    """Keep a finished output for :mod:`traceview.resultcache` (when a key was made)."""
    if rkey is not None:
        from . import resultcache

        resultcache.put(rkey, data)


def cmd_analyze(args) -> int:
    from .parallel import cli_read_options

    out = Path(args.output) if args.output else None
    if args.format == "parquet" and out is None:
        raise UsageError("--format parquet needs -o FILE")
    for path, flag in ((out, "-o"), (Path(args.html) if args.html else None, "--html")):
        if path is not None:
            _check_writable(path, flag)

    read_opts = cli_read_options(args)
    stale = None if args.stale_days <= 0 else args.stale_days * 86400
    # A finished output for the same options over the same unchanged files: write it again
    # (traceview.resultcache; no polars, no reading). Not for side outputs (--html), measured
    # peaks or a terminal whose width and colours vary.
    from .discover import discover

    disc = discover(args.path, run=args.run, all_runs=args.all_runs, stale_after_s=stale)
    _tune_allocator(sum(_size(tf.path) for tf in disc.files))
    rkey = None
    if (not args.html and not getattr(args, "measure_cpu_peaks", False) and args.max_bytes is None
            and (args.format != "table" or out is not None)):
        from . import resultcache
        from .cache import cache_root

        if cache_root() is not None:
            rkey = resultcache.key("analyze", vars(args), disc)
            hit = resultcache.get(rkey)
            from types import SimpleNamespace

            if hit is not None and (out is None or not _out_inside_inputs(out, SimpleNamespace(discovery=disc))):
                if out is not None:
                    out.write_bytes(hit)
                    if args.format != "table":  # as a computed run reports it
                        print(f"wrote {out}", file=sys.stderr)
                else:
                    sys.stdout.buffer.write(hit) if hasattr(sys.stdout, "buffer") else sys.stdout.write(hit.decode())
                return EXIT_OK
    _start_prefetch(disc, args)
    from .profile import load  # polars and numpy: only past the stored-result check

    prof = load(args.path, run=args.run, all_runs=args.all_runs, stale_after_s=stale, max_bytes=args.max_bytes,
                discovery=disc, **read_opts)
    prof = prof.filter(op_regex=args.filter, device_regex=args.device)
    if prof.table.height == 0:
        what = " and ".join(f"{k} {v!r}" for k, v in (("--filter", args.filter), ("--device", args.device)) if v)
        prof.warnings.append(f"no op left after {what}" if what else "no op to show")
    for path, flag in ((out, "-o"), (Path(args.html) if args.html else None, "--html")):
        if path is not None and _out_inside_inputs(path, prof):
            raise UsageError(f"refusing to write {path}: it is inside the profile folder it reads or is one of its "
                             f"trace files; choose another {flag}")

    # every section is computed whatever the format, so bad options fail the same way
    table = _table_for(prof, args.by)
    peaks = _peaks_from_args(prof, args)
    roof = prof.roofline(peaks)
    checks = None
    if args.steps or args.expect_batch:
        checks = prof.occurrence_checks(steps=args.steps, expect_batch=args.expect_batch)
    rules = _rules_from_args(args)
    anat = prof.steps(rules, module=args.step_module, window=args.step_window)
    kern = prof.kernels()
    files = prof.sources("file", frame=args.source_frame)
    sections = {"checks": checks, "peaks": peaks, "roof": roof, "steps": anat, "kernels": kern, "sources": files}

    try:
        if args.format == "table":
            if out is not None:
                from rich.console import Console

                with open(out, "w", encoding="utf-8") as fh:
                    _render_all(Console(file=fh, width=200, color_system=None), prof, table, args, sections)
            else:
                _render_all(_console(), prof, table, args, sections)
        elif args.format == "json":
            text = json.dumps(_json_payload(prof, table, args.top, sections), indent=2, default=str) + "\n"
            if out is not None:
                out.write_text(text, encoding="utf-8")
            else:
                sys.stdout.write(text)
                _remember(rkey, text.encode("utf-8"))
        elif args.format == "csv":
            flat = _flat(table)
            if out is not None:
                flat.write_csv(out)
            else:
                text = flat.write_csv()
                sys.stdout.write(text)
                _remember(rkey, text.encode("utf-8"))
        else:
            table.write_parquet(out)
        if out is not None:
            _remember(rkey, out.read_bytes())
        if out is not None and args.format != "table":
            print(f"wrote {out}", file=sys.stderr)
        if args.html:
            prof.report(args.html, top=max(args.top, 30), peaks=peaks, rules=rules,
                        step_module=args.step_module, step_window=args.step_window)
            print(f"wrote {args.html}", file=sys.stderr)
    except BrokenPipeError:
        raise
    except OSError as exc:
        target = out if out is not None else "standard output"
        raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None
    return EXIT_OK


def cmd_report(args) -> int:
    """``traceview report PATH -o FILE``: the HTML report (see :func:`traceview.render.html.write_report`)."""
    from .parallel import cli_read_options
    from .profile import load

    out = Path(args.output)
    if out.is_dir():
        raise UsageError(f"{out} is a folder; -o needs a file name (e.g. {out / 'report.html'})")
    prof = load(args.path, run=args.run, all_runs=args.all_runs,
                stale_after_s=None if args.stale_days <= 0 else args.stale_days * 86400, max_bytes=args.max_bytes,
                **cli_read_options(args))
    prof = prof.filter(op_regex=args.filter, device_regex=args.device)
    if _out_inside_inputs(out, prof):
        raise UsageError(f"refusing to write {out}: it is inside the profile folder it reads or is one of its "
                         f"trace files; choose another -o")
    peaks = _peaks_from_args(prof, args)
    try:
        prof.report(out, top=args.top, peaks=peaks, title=args.title, rules=_rules_from_args(args),
                    step_module=args.step_module, step_window=args.step_window)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    print(f"wrote {out}", file=sys.stderr)
    return EXIT_OK


#: total trace bytes from which the CLI trades allocation speed for memory (see _tune_allocator)
BIG_INPUT_BYTES = 256 << 20


def _tune_allocator(input_bytes: int) -> None:
    """Tune the allocators of this CLI process for the input size (the library itself never
    changes them). All of it happens before polars is imported.

    * **glibc, every size**: one malloc arena (``M_ARENA_MAX`` = 1). The plane and step
      threads otherwise each get an arena of their own whose freed arrays the next thread
      cannot reuse, so each new array is faulted in again: on the 3M-event file 99,000 page
      faults and 0.45 s of system time, 70,000 and 0.25 s with one arena.
    * **inputs under** :data:`BIG_INPUT_BYTES`: freed arrays stay in the heap for reuse
      (mmap threshold 32 MiB, trim threshold 4 GiB, 64 MiB top pad), which saves another
      ~10,000 faults; the heap is at most a few hundred MB there.
    * **inputs of** :data:`BIG_INPUT_BYTES` **and more**, trade allocation speed for memory:
      polars allocates through jemalloc, which keeps freed pages for 10 s: on a 20M-event
      trace that held ~250 MB of dead temporaries while the next stage allocated. Asked to
      purge at once (``_RJEM_MALLOC_CONF``, read when polars loads). On glibc, allocations of
      1 MiB and more are served from ``mmap``, so that freed arrays go back to the OS at once
      (glibc's dynamic threshold otherwise moves up to 32 MiB after the first large free and
      on a 20M-event trace the heap kept ~0.5 GB of freed arrays: peak 1.54 GB, 1.15 with).

    Options are ``mallopt`` parameters (glibc ``malloc.h``: M_TRIM_THRESHOLD -1, M_TOP_PAD
    -2, M_MMAP_THRESHOLD -3, M_ARENA_MAX -8). Not on other platforms or C libraries."""
    big = input_bytes >= BIG_INPUT_BYTES
    if big and "polars" not in sys.modules:
        os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-8, 1)  # M_ARENA_MAX
        if big:
            libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
        else:
            libc.mallopt(-3, 32 << 20)
            libc.mallopt(-1, 4 << 30)  # M_TRIM_THRESHOLD
            libc.mallopt(-2, 64 << 20)  # M_TOP_PAD
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``traceview`` console script. Returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "engine":
        try:
            from .engine_shim.cli import main as engine_main
        except ImportError as exc:
            print(f"traceview: error: the engine needs the 'engine' extra (pip install 'traceview[engine]'): {exc}",
                  file=sys.stderr)
            return EXIT_USAGE
        return engine_main(argv[1:])
    if "numpy" not in sys.modules:
        # numpy's OpenBLAS starts a thread per core that spins after start-up: traceview does
        # no linear algebra, and on 2 cores the spinning took 5% of a 3M-event analyze
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    parser = build_parser(only=argv[0] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    from . import cache

    saved = sys.stdout, sys.stderr
    if sys.stdout is None:  # started with stdout closed: writing there fails, -o still works
        sys.stdout = _ClosedStream("standard output")
    if sys.stderr is None:  # closed stderr: messages are dropped, not sent to stdout
        sys.stderr = _ClosedStream("standard error", silent=True)
    try:
        rc = _dispatch(args)
        sys.stdout.flush()
        return rc
    except TraceviewError as exc:
        print(f"traceview: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # the reader went away (| head): a normal end
        _silence_stdout()
        return EXIT_OK
    except OSError as exc:  # writing the output failed (disk full, closed descriptor...)
        _silence_stdout()
        print(f"traceview: error: cannot write {exc.filename or 'the output'}: {exc.strerror or exc}",
              file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("traceview: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("traceview: error: out of memory while reading or analysing the trace (try a smaller run, "
              "--max-bytes, or a machine with more memory)", file=sys.stderr)
        return EXIT_LIMIT
    finally:
        if isinstance(sys.stdout, _ClosedStream) or isinstance(sys.stderr, _ClosedStream):
            sys.stdout, sys.stderr = saved
        cache.disabled(False)  # --no-cache holds for this command only (main() may run again in-process)
        if "traceview.prefetch" in sys.modules:
            sys.modules["traceview.prefetch"].discard()  # one a failed run started and never took


class _ClosedStream:
    """Stands in for a standard stream the process was started without (``>&-``): writes
    raise ``OSError(EBADF)`` (reported as "cannot write standard output", exit 2), or are
    dropped when ``silent`` (stderr); flushing does nothing."""

    def __init__(self, name: str, silent: bool = False):
        self.name, self.silent = name, silent

    def write(self, text: str) -> int:
        if self.silent:
            return len(text)
        import errno

        raise OSError(errno.EBADF, f"{self.name} is closed")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _dispatch(args) -> int:
    if args.command == "analyze":
        return cmd_analyze(args)
    if args.command == "report":
        return cmd_report(args)
    from .cli_diff import cmd_diff, cmd_verify

    return (cmd_diff if args.command == "diff" else cmd_verify)(args)


def entry() -> None:
    """The ``traceview`` console script and ``python -m traceview.cli``: :func:`main`, then
    exit without the interpreter's teardown (freeing every frame and array one by one,
    joining polars' thread pool: ~0.08 s after a 3M-event analyze) once stdout and stderr
    are flushed. traceview registers no exit handler, and every output is written and closed
    before :func:`main` returns. The ``engine`` subcommand (JAX, which may) and a failed flush
    take the normal ``sys.exit``."""
    argv = sys.argv[1:]
    rc = main(argv)
    if argv and argv[0] == "engine":
        sys.exit(rc)
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except Exception:  # noqa: BLE001 - a stream that cannot flush: the normal exit reports nothing more
        sys.exit(rc)
    os._exit(rc)


if __name__ == "__main__":  # pragma: no cover
    entry()
