"""``traceview export PATH --steps A:B -o OUT``: a window of the trace for timeline viewers,
``OUT.xplane.pb`` (XProf, TensorBoard, xprof-rs) and ``OUT.json`` (Chrome-trace JSON for
Perfetto's UI), each holding the window's events and traceview's lines on top
(:mod:`traceview.analysis.export`, :mod:`traceview.read.window`, :mod:`traceview.render.timeline`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from traceview.cli import args as cargs
from traceview.errors import EXIT_OK, UsageError
from traceview.model.naming import printable, safe_line


def window_range(text: str) -> tuple[int, int]:
    """argparse type of ``--steps`` / ``--window-ps``: ``A:B`` (or ``N``), whole numbers, A <= B."""
    from traceview.analysis.export import parse_range

    try:
        return parse_range(text, "")
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).strip()) from None


def time_window(text: str) -> tuple[int, int]:
    """argparse type of ``--window-ps``: ``START:END`` ps after the first op event, 0 <= START <= END."""
    a, b = window_range(text)
    if a < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: START is ps after the first op event, 0 or more")
    return a, b


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="write a step window as .xplane.pb (XProf, TensorBoard) and Chrome-trace JSON "
                                      "(Perfetto), with traceview's lines on top",
                       description="Write steps A..B of the trace (default: the median step and its neighbours) as "
                                   "OUT.xplane.pb, which XProf's and TensorBoard's trace viewer and xprof-rs open, and "
                                   "OUT.json, a Chrome trace for Perfetto's UI. Both hold every event of the window "
                                   "(all planes and lines, clipped to it, with their metadata and stats) and four "
                                   "lines on each device: traceview steps (with their phase), families, exposed "
                                   "communication and findings (markers on the ops they cite). A trace without steps "
                                   "is exported by time (--window-ps), or whole when small. traceview never writes "
                                   "into a profile folder: OUT goes elsewhere.")
    cargs.add_selection(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--steps", type=window_range, metavar="A:B",
                   help="the steps to export, A and B both included (--step-window's A:B leaves B out), as numbered in the steps table (default: the median "
                        "step and its neighbours)")
    g.add_argument("--window-ps", type=time_window, metavar="START:END",
                   help="for a trace without steps: the time window, ps after the first op event (default: the "
                        "whole trace when it has at most 200,000 op events)")
    p.add_argument("-o", "--output", metavar="OUT", required=True,
                   help="where to write: OUT.xplane.pb and OUT.json (a .xplane.pb or .json suffix given is dropped; "
                        "several hosts: OUT.<host>.xplane.pb each)")
    cargs.add_steps(p)
    cargs.add_peaks(p)
    cargs.add_findings(p)


def outputs(out: str, hosts: list[str]) -> tuple[dict, Path]:
    """(host -> .xplane.pb path, .json path) for ``-o OUT``. Raises UsageError for an empty
    OUT, a folder, or an OUT that names something other than a file (a device such as
    /dev/full or /dev/null, a pipe: the files would be made beside it)."""
    if not out or not out.strip() or out == "-" or out.endswith(("/", "\\")) or Path(out).is_dir():
        raise UsageError(f"-o needs a file name to write OUT.xplane.pb and OUT.json, got {out!r}")
    if os.path.exists(out) and not os.path.isfile(out):
        raise UsageError(f"refusing to write {out}.xplane.pb and {out}.json: {out} is not a file (a device or a "
                         "pipe); -o names the files export writes, OUT.xplane.pb and OUT.json")
    base = out
    for suf in (".xplane.pb", ".json"):
        if base.endswith(suf) and len(base) > len(suf):
            base = base[: -len(suf)]
    if len(hosts) <= 1:
        pbs = {h: Path(base + ".xplane.pb") for h in hosts or [""]}
    else:
        from traceview.model.naming import safe_line as _s

        pbs = {h: Path(f"{base}.{_s(h).replace('/', '_')}.xplane.pb") for h in hosts}
    js = Path(base + ".json")
    for path in (*pbs.values(), js):  # a link to a device or a pipe is refused as one
        if os.path.exists(path) and not os.path.isfile(path):
            raise UsageError(f"refusing to write {path}: it is not a file (a device or a pipe, or a link to one)")
    return pbs, js


def run(args) -> int:
    """Writes the window; returns 0. Raises TraceviewError subclasses on bad input."""
    from traceview.analysis.steps.window import parse_window
    from traceview.read.guard import check_writable, refuse_inside_inputs

    parse_window(args.step_window)  # a malformed window is refused before the trace is read

    pbs, js = outputs(args.output, [])
    for path in (*pbs.values(), js):
        check_writable(path, "-o")
        refuse_inside_inputs(path, "-o", trace_name=path.name.endswith(".xplane.pb"))
    from traceview.cli import process
    from traceview.model.load import load

    with process.decoding_beside_imports():
        prof = load(args.path, run=args.run, all_runs=args.all_runs, stale_after_s=cargs.stale_after(args),
                    max_bytes=args.max_bytes, **cargs.read_options(args))
    cargs.note_workers(args, prof.discovery)
    from traceview.model.profiledata import check_regex

    for option, rx in (("--filter", args.filter), ("--device", args.device)):
        if rx is not None:
            check_regex(rx, option)
    prof = prof.filter(op_regex=args.filter, device_regex=args.device)
    for w in prof.warnings:
        print(f"traceview: warning: {safe_line(w)}", file=sys.stderr)
    # one XSpace written per trace file read: the ranks merged into one file (hosts
    # "<host>/<rank>") share it, named after the first
    pairs = (prof.table.attrs.select("host", "file").unique().sort("host", "file").iter_rows()
             if prof.table.attrs.height else ())
    first_of: dict = {}
    for h, f in pairs:
        first_of.setdefault(f, h)
    hosts = sorted(set(first_of.values()))
    pbs, js = outputs(args.output, hosts)
    for path in (*pbs.values(), js):
        check_writable(path, "-o")
        refuse_inside_inputs(path, "-o", prof.discovery, trace_name=path.name.endswith(".xplane.pb"))
    from traceview.analysis.export import LINES, plan_export
    from traceview.analysis.report import build_report

    rep = build_report(prof, peaks=cargs.peaks_from_args(prof, args), rules=cargs.rules_from_args(args),
                       step_module=args.step_module, step_extent=args.step_extent, step_window=args.step_window, window_option="--step-window",
                       release=process.heap_releaser(cargs.input_bytes(prof.discovery)),
                       **cargs.findings_from_args(args))
    plan = plan_export(rep, steps=args.steps, window_ps=args.window_ps)
    del rep, prof  # the window is read from the files: the tables are no longer needed
    from traceview.read.guard import written_together
    from traceview.read.window import tracejson_window, xspace_window
    from traceview.render.timeline import chrome_trace, with_tracks, xspace_bytes

    spaces = []
    n_events = n_tracks = 0
    by_file: dict = {}  # trace file -> its hosts (several: ranks merged into one XSpace)
    for host in sorted(plan.files):
        by_file.setdefault(plan.files[host], []).append(host)
    # every file written or none: a failed .json (disk full) leaves no lone .xplane.pb
    with written_together() as put:
        for path, its_hosts in sorted(by_file.items(), key=lambda kv: kv[1][0]):
            host = its_hosts[0]
            win = plan.windows[host]
            tracks = [t for t in plan.tracks if t.host == host]
            if len(its_hosts) > 1:
                from traceview.read.window import Window

                wins = [plan.windows[h] for h in its_hosts]
                cuts: dict = {}  # device name -> the ranks' windows of it
                for w in wins:
                    for d, c in w.planes.items():
                        cuts.setdefault(d, set()).add(c)
                win = Window(min(w.lo_ps for w in wins), max(w.hi_ps for w in wins),
                             planes={d: next(iter(c)) for d, c in cuts.items() if len(c) == 1},
                             per_plane=_rank_windows(its_hosts, plan.windows))
                devs = {t.device for t in tracks}
                for h in its_hosts[1:]:  # each rank's tracks, where its planes' names are its own
                    more = [t for t in plan.tracks if t.host == h]
                    if {t.device for t in more} & devs:  # a plane name no longer tells the ranks apart
                        plan.notes.append(f"{len(its_hosts)} ranks share {Path(path).name} and their device planes' "
                                          "names: traceview's lines are left out of its export (the ops are all there; "
                                          "read back, its steps are found from its ops again, and on GPU the window's "
                                          "last step can end short of its trailing ops)")
                        tracks = []
                        break
                    tracks += more
                    devs |= {t.device for t in more}
            from traceview.read.discover import classify

            kind = (classify(Path(path).name) or ("xplane", ""))[0]
            if kind == "xplane":
                sw = xspace_window(path, win)
            elif kind == "trace_json":
                from traceview.read.tracejson import text_limit_for

                plan.notes.append(f"{Path(path).name} is a Chrome-trace JSON: its events' args are kept as XStats, but it "
                                  "holds no HLO protos, so the exported XSpace read again (by traceview or XProf) has no op "
                                  "shapes; the .json export and the original keep them")
                sw = tracejson_window(path, win,
                                      max_decompressed_bytes=text_limit_for(args.max_bytes) if args.max_bytes else None)
            else:
                raise UsageError(f"{path}: export reads .xplane.pb and .trace.json(.gz) files, not {kind}")
            if len(its_hosts) > 1 and tracks:
                # a device that names no plane of the file, or several (the ranks' planes named
                # alike, or each under its rank's prefix): its lines would land on another rank's
                # plane or a plane of their own, and be read back as that plane's steps
                seen: dict = {}
                for pl_ in sw.space.planes:
                    seen[pl_.name] = seen.get(pl_.name, 0) + 1
                if any(seen.get(d, 0) != 1 for d in {t.device for t in tracks}):
                    plan.notes.append(f"{len(its_hosts)} ranks share {Path(path).name} and their device planes' "
                                      "names: traceview's lines are left out of its export (the ops are all there; read "
                                      "back, its steps are found from its ops again, and on GPU the window's last step "
                                      "can end short of its trailing ops)")
                    tracks = []
            n_events += sw.events
            n_tracks += len(tracks)
            space = with_tracks(sw, tracks, LINES)
            put(pbs.get(host, next(iter(pbs.values()))), xspace_bytes(space))
            spaces.append((host if len(by_file) > 1 else "", space))
        title = (f"steps {plan.steps[0]}:{plan.steps[1]}" if plan.steps else "time window") + f" of {printable(args.path)}"
        put(js, chrome_trace(spaces, title=title))
    for n in plan.notes:
        print(f"traceview: note: {safe_line(n)}", file=sys.stderr)
    what = f"steps {plan.steps[0]}:{plan.steps[1]}" if plan.steps else "the time window"
    from traceview.model.units import fmt_time_ps

    for path in (*pbs.values(), js):
        print(f"wrote {safe_line(str(path))}", file=sys.stderr)
    print(f"traceview: {what} ({fmt_time_ps(plan.hi_ps - plan.lo_ps)}): {n_events:,} trace events and {n_tracks:,} on traceview's "
          f"lines", file=sys.stderr)
    return EXIT_OK


def _rank_windows(hosts: list, windows: dict):
    """For an XSpace holding the ranks ``hosts`` (``FILE/<rank>`` as the reader names them):
    a function of the file's planes and hostnames giving plane index ->
    :class:`~traceview.read.window.PlaneCut` for each plane of a rank (a device or host plane),
    the ranks told apart as the reader tells them (:func:`traceview.model.ranks.plane_ranks`):
    each rank cut as its own file would be, a device at its steps, the rank's other planes at
    the rank's window, even where ranks share plane names."""
    from traceview.model.ranks import HOST_PLANES, plane_ranks
    from traceview.read.window import PlaneCut

    def per_plane(planes, hostnames) -> dict:
        ranks = plane_ranks(planes, hostnames)
        out = {}
        for i in range(len(planes)):
            name = ranks.names[i]
            if not (name.startswith("/device:") or name in HOST_PLANES):
                continue  # a plane of no rank: the file's window
            label = ranks.labels[ranks.rank[i]]
            host = next((h for h in hosts if h == label or h.endswith("/" + label)), None)
            w = windows.get(host) if host is not None else None
            if w is not None:
                out[i] = PlaneCut(*w.of(name), name, ranks.rank[i])
        return out

    return per_plane
