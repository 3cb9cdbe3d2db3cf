"""Every command at scale, beside ``analyze``: report, verify, diff, the notebook's
``load().by_shape()``, the 20M-event file, and a 32-host run in parallel.

Measured as separate processes (``run.measure``: wall s, CPU s, peak RSS MiB through
``/usr/bin/time``), with the parsed-table and stored-result caches off:

* on the ~3M-event scaled v6e xplane, interleaved ``--runs`` times (median):
  ``analyze FILE --format json -o OUT``, ``report FILE -o OUT``, ``verify FILE`` with three
  checks (``--format json``), ``diff FILE FILE --format json -o OUT``, and
  ``python -c 'traceview.load(FILE).by_shape()'`` in a fresh interpreter;
* on the ~20M-event file, once each: analyze, report, verify, diff; peak RSS against the
  file's size;
* a run folder of 32 hosts, each a ~1M-event scaled v6e xplane (hard links of one file: 32
  names, one inode), and the same folder with one host, read with
  ``traceview.load(RUN, cache=False)`` then ``by_shape()``: in the client process alone
  (``workers=0``), with a local process pool (``workers=N``) and on a Dask ``LocalCluster`` of
  N worker processes (``executor=client``). Each worker returns its host's dictionary-encoded
  op table (36 bytes per event), never a wide table. The client's own peak RSS is reported
  (``ru_maxrss`` of the client process; the workers are other processes), with the time of
  ``load`` + ``by_shape`` (the client's imports done before the clock starts; a pool's or a
  cluster's start-up included, a cluster's own set-up apart) per host against the one-host run.

The traceview timed is chosen and checked as :mod:`run` does (``--tree``, ``--installed``,
``--allow-fallback``; :mod:`tvprobe`): the checkout's by default, refused without its C extensions.

Writes the section between ``<!-- scale.py -->`` markers in ``benchmarks/RESULTS.md``
(appended below the hand-written part when absent) and ``benchmarks/out/scale.json``.

Usage::

    .venv/bin/python benchmarks/scale.py            # everything (about 10 min on 2 cores)
    .venv/bin/python benchmarks/scale.py --quick    # the 3M-event commands once, no 20M, 8 hosts
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run  # noqa: E402
import tvprobe  # noqa: E402
import scale_trace  # noqa: E402

BEGIN, END = "<!-- scale.py: begin -->", "<!-- scale.py: end -->"
CHECKS = ["op matching fusion present", "family matmul share < 90%", "no op matching topp_binary_search"]
_LOAD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import traceview
prof = traceview.load(sys.argv[1], cache=False)
n = prof.by_shape().height
print(json.dumps({"populations": n, "events": prof.table.height, "s": time.perf_counter() - t0}))
"""
_HOSTS = r"""
import json, resource, sys, time
mode, path, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
import polars, traceview, traceview.api, traceview.model.files, traceview.model.from_xplane  # noqa: E401
# imports done: the time below is reading and aggregating (workers import in their own processes)
t0 = time.perf_counter()
if mode == "dask":
    import distributed
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        t1 = time.perf_counter()
        prof = traceview.load(path, cache=False, executor=client)
        pops = prof.by_shape().height
        t2 = time.perf_counter()
else:
    t1 = t0
    prof = traceview.load(path, cache=False, workers=workers if mode == "pool" else 0)
    pops = prof.by_shape().height
    t2 = time.perf_counter()
print(json.dumps({"hosts": len(prof.traces), "events": prof.table.height, "populations": pops,
                  "read_s": t2 - t1, "startup_s": t1 - t0,
                  "client_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def tv(*args: str) -> list[str]:
    return tvprobe.python_argv() + ["-m", "traceview.cli", *args]


#: the checkout timed (None: the installed traceview), set by :func:`main` (:mod:`tvprobe`)
TREE: Path | None = run.REPO


def env() -> dict:
    e = tvprobe.child_env(TREE, dict(os.environ, TRACEVIEW_NO_CACHE="1"))
    e.pop("TRACEVIEW_CACHE_DIR", None)
    return e


def commands(path: Path, out: Path) -> dict[str, list[str]]:
    return {
        "analyze": tv("analyze", str(path), "--format", "json", "-o", str(out / "a.json")),
        "report": tv("report", str(path), "-o", str(out / "r.html")),
        "verify (3 checks)": tv("verify", str(path), "--format", "json", *[a for c in CHECKS for a in ("-c", c)]),
        "diff FILE FILE": tv("diff", str(path), str(path), "--format", "json", "-o", str(out / "d.json")),
        "load().by_shape()": tvprobe.python_argv() + ["-c", _LOAD, str(path)],
    }


def bench_commands(path: Path, runs: int, which: list[str] | None = None) -> dict:
    out = Path(tempfile.mkdtemp(prefix="tv-scale-"))
    cmds = commands(path, out)
    names = which or list(cmds)
    got: dict[str, list] = {n: [] for n in names}
    for i in range(runs):
        for n in names:  # interleaved: a slow spell of the machine hits every command
            print(f"  {path.name} run {i + 1}/{runs}: {n}", flush=True)
            got[n].append(run.measure(cmds[n], env()))
    shutil.rmtree(out, ignore_errors=True)
    return {n: run.median_of(v) | {"rcs": [x["rc"] for x in v]} for n, v in got.items()}


def host_folder(root: Path, src: Path, hosts: int) -> Path:
    d = root / f"h{hosts}" / "plugins" / "profile" / "2026_01_01_00_00_00"
    d.mkdir(parents=True, exist_ok=True)
    for h in range(hosts):
        f = d / f"host{h:02d}.xplane.pb"
        if not f.exists():
            os.link(src, f)
    return root / f"h{hosts}"


def bench_hosts(src: Path, hosts: int, workers: int) -> list[dict]:
    root = Path(tempfile.mkdtemp(prefix="tv-hosts-"))
    rows = []
    try:
        for n in (1, hosts):
            folder = host_folder(root, src, n)
            modes = [("one process", "local", 0), (f"process pool ({workers})", "pool", workers),
                     (f"Dask LocalCluster ({workers} processes)", "dask", workers)]
            for label, mode, w in modes:
                if n == 1 and mode != "local":
                    continue
                print(f"  {n} host(s): {label}", flush=True)
                m = run.measure(tvprobe.python_argv() + ["-c", _HOSTS, mode, str(folder), str(w)], env(), timeout=3600)
                try:
                    info = json.loads(m["stdout"].strip().splitlines()[-1])
                except (ValueError, IndexError):
                    info = {"error": m["stderr"][-500:]}
                rows.append({"hosts": n, "mode": label, **{k: m[k] for k in ("wall_s", "cpu_s", "rss_mib", "rc")},
                             **info})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


def per_host_file(events: int) -> Path:
    per, other = scale_trace.count_device_events(run.TPU)
    repeat = max(1, round((events - other) / per))
    dst = run.OUT / f"tpu_v6e_x{repeat}.xplane.pb"
    if not dst.exists():
        print(f"making {dst.name} ({repeat} repetitions)...", flush=True)
        print("  ", scale_trace.scale_xplane(run.TPU, dst, repeat), flush=True)
    return dst


def section(res: dict, argv: list[str], timed: dict) -> str:
    m, v = run.machine(), run.versions()
    lines = [BEGIN, "", "## Every command at scale (benchmarks/scale.py)", "",
             "Made by `benchmarks/scale.py` (see its docstring); re-run with:", "", "```sh",
             f".venv/bin/python benchmarks/scale.py {' '.join(argv)}".rstrip(), "```", "",
             f"- machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory']} RAM; "
             + ", ".join(f"{k} {val}" for k, val in v.items() if k in ("python", "polars", "numpy")),
             f"- traceview timed (as the children import it): {tvprobe.describe(timed)}",
             f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; caches off (`TRACEVIEW_NO_CACHE=1`)",
             "- commands (`FILE` the scaled trace, each a separate process): "
             "`python -P -m traceview.cli analyze FILE --format json -o OUT`, `... report FILE -o OUT.html`, "
             f"`... verify FILE --format json` with the checks {', '.join(repr(c) for c in CHECKS)}, "
             "`... diff FILE FILE --format json -o OUT`, and "
             "`python -c 'import traceview; traceview.load(FILE, cache=False).by_shape()'`", ""]
    for key, title in (("3m", "~3M-event xplane"), ("20m", "~20M-event xplane")):
        r = res.get(key)
        if not r:
            continue
        f = r["file"]
        base = r["commands"].get("analyze")
        lines += [f"### {title}: {f['name']} ({f['bytes'] / 1e6:,.0f} MB, {f['events']:,} events), "
                  f"median of {r['runs']}", "",
                  "| command | wall s | CPU s | peak RSS MiB | wall / analyze | RSS / file size | exit |",
                  "|---|---|---|---|---|---|---|"]
        for n, x in r["commands"].items():
            ratio = x["wall_s"] / base["wall_s"] if base else float("nan")
            lines.append(f"| {n} | {x['wall_s']:.2f} | {x['cpu_s']:.2f} | {x['rss_mib']:,.0f} | {ratio:.2f} | "
                         f"{x['rss_mib'] * 2**20 / f['bytes']:.2f} | {'/'.join(map(str, x['rcs']))} |")
        lines.append("")
    h = res.get("hosts")
    if h:
        one = next((r for r in h["rows"] if r["hosts"] == 1), None)
        lines += [f"### {h['hosts']} hosts of {h['file']['events']:,} events each ({h['file']['name']}, "
                  f"{h['file']['bytes'] / 1e6:,.0f} MB per host)", "",
                  "| hosts | read by | process wall s | load + by_shape s | client peak RSS MiB | s per host | "
                  "against one host | exit |", "|---|---|---|---|---|---|---|---|"]
        for r in h["rows"]:
            per = r.get("read_s", float("nan")) / r["hosts"]
            vs = (r.get("read_s", float("nan")) / (one["read_s"] * r["hosts"])) if one and "read_s" in one else float("nan")
            lines.append(f"| {r['hosts']} | {r['mode']} | {r['wall_s']:.2f} | {r.get('read_s', float('nan')):.2f} | "
                         f"{r.get('client_rss_mib', float('nan')):,.0f} | {per:.2f} | {vs:.2f}x | {r['rc']} |")
        lines += ["", "`against one host` = (load + by_shape time) / (hosts x the one-host time): 1.00x is linear; "
                  "below 1 the workers overlap hosts. The client RSS is the process that calls `traceview.load` "
                  "(Dask's scheduler runs in it; its workers are separate processes).", ""]
    lines.append(END)
    return "\n".join(lines)


def write(res: dict, argv: list[str], path: Path, timed: dict) -> None:
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    sec = section(res, argv, timed)
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + sec + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + sec + "\n"
    path.write_text(text, encoding="utf-8")
    (run.OUT / "scale.json").write_text(json.dumps(res, indent=1, default=str), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per 3M-event figure (median; default 3)")
    ap.add_argument("--quick", action="store_true", help="one run, no 20M file, 8 hosts")
    ap.add_argument("--hosts", type=int, default=32)
    ap.add_argument("--host-events", type=int, default=1_000_000, help="events per host file (default 1M)")
    ap.add_argument("--workers", type=int, default=run.os.cpu_count() or 2, help="worker processes (default: cores)")
    ap.add_argument("--skip", action="append", default=[], choices=["3m", "20m", "hosts"])
    ap.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    tvprobe.add_options(ap, run.REPO)
    args = ap.parse_args(argv)
    global TREE
    chosen = tvprobe.choose(args, "benchmarks/scale.py")  # the package the children import, asked of one
    if chosen is None:
        return 2
    TREE, timed = chosen
    print(f"timing {tvprobe.describe(timed)}", flush=True)
    runs = 1 if args.quick else args.runs
    traces = run.ensure_traces(["3m"] if args.quick else ["3m", "20m"])
    res: dict = {}
    for key in ("3m", "20m"):
        if key not in traces or key in args.skip:
            continue
        p = traces[key]
        n = runs if key == "3m" else 1
        res[key] = {"file": {"name": p.name, "bytes": p.stat().st_size, "events": run.xplane_events(p)}, "runs": n,
                    "commands": bench_commands(p, n, None if key == "3m" else
                                               ["analyze", "report", "verify (3 checks)", "diff FILE FILE"])}
    if "hosts" not in args.skip:
        src = per_host_file(args.host_events)
        hosts = 8 if args.quick else args.hosts
        res["hosts"] = {"hosts": hosts, "file": {"name": src.name, "bytes": src.stat().st_size,
                                                 "events": run.xplane_events(src)},
                        "rows": bench_hosts(src, hosts, args.workers)}
    write(res, argv, args.out, timed)
    print(section(res, argv, timed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
