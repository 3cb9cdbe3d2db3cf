"""Benchmark suite: ``traceview analyze`` end to end against XProf's ``hlo_stats`` conversion.

Makes the scaled traces (with :mod:`scale_trace`, from ``../shared/traces``) under
``benchmarks/out/`` (git-ignored) unless they exist, then times, as separate processes:

* ``traceview analyze FILE --format json -o OUT --no-cache`` (cold, no cache), on the ~3M-
  and ~20M-event TPU xplanes and a scaled TPU trace.json.gz;
* the same with a fresh cache folder, three times: the first run (which writes the
  parsed-table cache and the stored result), the same command again (served from the
  stored result, :mod:`traceview.cli.resultcache`) and the command with other options
  (``--top 30``: the stored result does not apply, the parsed table does);
* XProf 2.24.2's ``hlo_stats`` conversion (``xspace_to_tool_data(..., "hlo_stats",
  {"use_saved_result": False})``) on a fresh copy of the file in a temp dir, as
  ``tests/oracle.py`` runs it.

Each figure is the median of ``--runs`` runs: wall time (s), CPU time (user + system, s)
and peak RSS (MiB, ``ru_maxrss`` of that child from ``os.wait4``). Throughput is events/s
and MB/s of the file (decompressed JSON for trace.json.gz) over wall time. The machine is
often shared: the 1-minute load average before each run is recorded, and CPU time is the
figure least disturbed by other load. Writes ``benchmarks/RESULTS.md``.

The traceview timed is this checkout's (``--tree`` another's), first on ``PYTHONPATH``, or with
``--installed`` the one installed in this interpreter's environment; the children run as
``python -P`` so that the working directory never decides (:mod:`tvprobe`). Before timing, a
child started the same way reports which package it imports and whether its C extensions load;
that line heads the output and RESULTS.md. A package without them (a checkout never built, say,
beside a non-editable install) is refused with how to build it, unless ``--allow-fallback``.

Usage::

    .venv/bin/python benchmarks/run.py                 # everything (about 15 min on 2 cores)
    .venv/bin/python benchmarks/run.py --quick         # 3M xplane + JSON only, 1 run each
    .venv/bin/python benchmarks/run.py --installed     # the installed traceview, not the checkout
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = REPO.parent / "shared" / "traces"
OUT = HERE / "out"
TPU = SHARED / "tpu_v6e_4chip_psum.xplane.pb"
JSON_SRC = SHARED / "vllm_tpu_qwen" / "plugins" / "profile" / "2026_01_11_21_26_41" / "t1v-n-9eb622fc-w-0.trace.json.gz"

sys.path.insert(0, str(HERE))
import scale_trace  # noqa: E402
import tvprobe  # noqa: E402

_XPROF_CHILD = r"""
import json, shutil, sys, tempfile, time
from pathlib import Path
src = sys.argv[1]
tmp = Path(tempfile.mkdtemp(prefix="xprof-bench-"))
try:
    run = tmp / "plugins" / "profile" / "run"
    run.mkdir(parents=True)
    copy = run / "host.xplane.pb"
    shutil.copyfile(src, copy)
    t0 = time.perf_counter()
    from xprof.convert import raw_to_tool_data
    data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], "hlo_stats", {"use_saved_result": False})
    t1 = time.perf_counter()
    rows = len(json.loads(data).get("rows", [])) if data else -1
    print(json.dumps({"convert_s": t1 - t0, "rows": rows}))
finally:
    shutil.rmtree(tmp, ignore_errors=True)
"""


_BREAKDOWN_CHILD = r"""
import json, os, sys, time
os.environ["TRACEVIEW_NO_CACHE"] = "1"
marks = []
def mark(name, t0, c0):
    marks.append((name, time.perf_counter() - t0, time.process_time() - c0))
t0, c0 = time.perf_counter(), time.process_time()
import polars, numpy, traceview.cli, traceview.api, traceview.analysis.ops.aggregate, traceview.analysis.ops.roofline
from traceview.model import from_xplane, from_tracejson  # noqa: F401
mark("imports", t0, c0)
from traceview.api import Profile
from traceview.model.files import read_file
t0, c0 = time.perf_counter(), time.process_time()
td = read_file(sys.argv[1])
mark("read file -> op table", t0, c0)
prof = Profile.from_traces([td])
t0, c0 = time.perf_counter(), time.process_time()
prof.by_shape()
mark("by_shape", t0, c0)
t0, c0 = time.perf_counter(), time.process_time()
prof.roofline(prof.peaks())
mark("roofline", t0, c0)
t0, c0 = time.perf_counter(), time.process_time()
prof.device_summary()
mark("device_summary", t0, c0)
t0, c0 = time.perf_counter(), time.process_time()
prof.sources("file"); prof.kernels()
mark("sources + kernels", t0, c0)
t0, c0 = time.perf_counter(), time.process_time()
prof.steps()
mark("steps (anatomy)", t0, c0)
print(json.dumps({"rows": td.table.height, "marks": marks}))
"""


def _load1() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def measure(cmd: list[str], env: dict | None = None, timeout: float = 1800) -> dict:
    """Run ``cmd`` as a child process; returns wall_s, cpu_s (user+sys), rss_mib (peak),
    rc, load1 (1-minute load average before the run), stdout.

    The child is started through ``/usr/bin/time`` when it exists: Linux carries a
    process's peak RSS across ``exec``, so a child forked straight from this (large)
    process would report this process's peak; ``time`` is small and reports its own child.
    """
    load = _load1()
    timer = Path("/usr/bin/time").exists()
    full = (["/usr/bin/time", "-f", "TVBENCH %e %U %S %M"] + cmd) if timer else cmd
    t0 = time.perf_counter()
    try:
        p = subprocess.run(full, capture_output=True, env=env, timeout=timeout)
        rc, stdout, stderr = p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired as exc:
        rc, stdout, stderr = 124, (exc.stdout or b"").decode(errors="replace"), (exc.stderr or b"").decode(errors="replace")
    wall = time.perf_counter() - t0
    cpu = rss = float("nan")
    lines = stderr.splitlines()
    for line in reversed(lines):
        if line.startswith("TVBENCH "):
            w, u, sy, m = line.split()[1:5]
            wall, cpu, rss = float(w), float(u) + float(sy), int(m) / 1024
            lines.remove(line)
            break
    else:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = ru.ru_utime + ru.ru_stime  # cumulative: only meaningful without /usr/bin/time
    if rc != 0 and "Command exited with non-zero status" in stderr:
        lines = [x for x in lines if not x.startswith("Command exited with non-zero status")]
    return {"wall_s": wall, "cpu_s": cpu, "rss_mib": rss, "rc": rc, "load1": load, "stdout": stdout,
            "stderr": "\n".join(lines)[-2000:]}


def median_of(runs: list[dict]) -> dict:
    ok = [r for r in runs if r["rc"] == 0] or runs
    return {k: statistics.median(r[k] for r in ok) for k in ("wall_s", "cpu_s", "rss_mib", "load1")} | {
        "rc": max(r["rc"] for r in runs), "n": len(runs)}


def traceview_cmd(path: Path, out: Path, *extra: str) -> list[str]:
    return tvprobe.python_argv() + ["-m", "traceview.cli", "analyze", str(path), "--format", "json", "-o", str(out),
                                    *extra]


def ensure_traces(sizes: list[str]) -> dict[str, Path]:
    """The scaled traces (made once, kept in benchmarks/out/)."""
    OUT.mkdir(parents=True, exist_ok=True)
    made = {}
    per, other = scale_trace.count_device_events(TPU)
    for size in sizes:
        target = {"3m": 3_000_000, "20m": 20_000_000}[size]
        repeat = max(1, round((target - other) / per))
        dst = OUT / f"tpu_v6e_x{repeat}.xplane.pb"
        if not dst.exists():
            print(f"making {dst.name} ({repeat} repetitions)...", flush=True)
            print("  ", scale_trace.scale_xplane(TPU, dst, repeat), flush=True)
        made[size] = dst
    dst = OUT / "vllm_tpu_x40.trace.json.gz"
    if not dst.exists():
        print(f"making {dst.name}...", flush=True)
        print("  ", scale_trace.scale_trace_json(JSON_SRC, dst, 40), flush=True)
    made["json"] = dst
    return made


def xplane_events(path: Path) -> int:
    per, other = scale_trace.count_device_events(path)
    return per + other


def json_facts(path: Path) -> tuple[int, int]:
    """(decompressed bytes, events in traceEvents) of a trace.json.gz."""
    import orjson

    raw = gzip.decompress(path.read_bytes())
    return len(raw), len(orjson.loads(raw)["traceEvents"])


def bench_file(path: Path, runs: int, xprof: bool, cache: bool, events: int, data_bytes: int,
               breakdown: bool = True, tree: Path | None = REPO) -> dict:
    res: dict = {"file": path.name, "file_bytes": path.stat().st_size, "data_bytes": data_bytes, "events": events}
    env = tvprobe.child_env(tree)
    env.pop("TRACEVIEW_NO_CACHE", None)
    outp = Path(tempfile.mkdtemp(prefix="tv-bench-")) / "out.json"
    print(f"traceview cold x{runs}: {path.name}", flush=True)
    res["cold"] = median_of([measure(traceview_cmd(path, outp, "--no-cache"), env) for _ in range(runs)])
    if cache:
        firsts, seconds, others = [], [], []
        for _ in range(runs):
            cdir = Path(tempfile.mkdtemp(prefix="tv-cache-"))
            cenv = {**env, "TRACEVIEW_CACHE_DIR": str(cdir)}
            firsts.append(measure(traceview_cmd(path, outp), cenv))
            seconds.append(measure(traceview_cmd(path, outp), cenv))
            # other options (--top 30): the stored result does not apply, the parsed table does
            others.append(measure(traceview_cmd(path, outp, "--top", "30"), cenv))
            shutil.rmtree(cdir, ignore_errors=True)
        res["cache_first"] = median_of(firsts)
        res["cache_second"] = median_of(seconds)
        res["cache_table"] = median_of(others)
    if xprof:
        print(f"xprof hlo_stats x{runs}: {path.name}", flush=True)
        xs = []
        for _ in range(runs):
            m = measure([sys.executable, "-c", _XPROF_CHILD, str(path)], env, timeout=3600)
            try:
                info = json.loads(m["stdout"].strip().splitlines()[-1])
            except (ValueError, IndexError):
                info = {"convert_s": float("nan"), "rows": -1}
            m.update(info)
            xs.append(m)
        res["xprof"] = median_of(xs) | {"convert_s": statistics.median(x["convert_s"] for x in xs),
                                        "rows": xs[0]["rows"]}
    res["breakdown"] = None
    if breakdown:
        b = measure(tvprobe.python_argv() + ["-c", _BREAKDOWN_CHILD, str(path)], env)
        try:
            res["breakdown"] = json.loads(b["stdout"].strip().splitlines()[-1])
        except (ValueError, IndexError):
            pass
    shutil.rmtree(outp.parent, ignore_errors=True)
    return res


def machine() -> dict:
    mem = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "memory": mem, "cpu": cpu, "os": platform.platform()}


def versions() -> dict:
    """Versions of the dependencies installed here (traceview's own is the probe's, :mod:`tvprobe`)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("xprof", "polars", "protobuf", "numpy", "orjson", "msgspec", "isal"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "-"
    return out


def _f(x, fmt="{:.2f}"):
    return "-" if x is None or x != x else fmt.format(x)


#: RESULTS.md keeps everything from this line on when the tables above it are rewritten
HAND_WRITTEN = "<!-- hand-written: kept by benchmarks/run.py -->"


def write_results(results: list[dict], path: Path, argv: list[str], timed: dict) -> None:
    m, v = machine(), versions()
    lines = ["# traceview benchmarks", "",
             "Made by `benchmarks/run.py` (see its docstring); re-run with:", "",
             "```sh", f".venv/bin/python benchmarks/run.py {' '.join(argv)}".rstrip(), "```", "",
             "## Machine and versions", "",
             f"- machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory']} RAM, {m['os']}",
             f"- traceview timed (as the children import it): {tvprobe.describe(timed)}",
             "- versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
             f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             "- load: the machine was shared with other jobs during these runs; `load` is the median "
             "1-minute load average before each run (2 = both cores busy before we start). CPU time "
             "(user + system of the process and its threads) is the figure least disturbed by that.",
             "", "Commands timed (each a separate process, median of the runs):", "",
             "- traceview: `python -P -m traceview.cli analyze FILE --format json -o OUT [--no-cache]`",
             "- XProf: `raw_to_tool_data.xspace_to_tool_data([copy], 'hlo_stats', {'use_saved_result': False})` "
             "on a fresh copy in a temp dir (process wall includes `import xprof`; `convert` is the call alone)",
             "", "## Results", "",
             "| file | size | events | run | wall s | CPU s | peak RSS MiB | events/s | MB/s | load |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        size = f"{r['file_bytes'] / 1e6:,.0f} MB"
        if r["data_bytes"] != r["file_bytes"]:
            size += f" ({r['data_bytes'] / 1e6:,.0f} MB JSON)"
        for label, key in (("traceview, no cache", "cold"), ("traceview, 1st (writes cache)", "cache_first"),
                           ("traceview, 2nd, same command (stored result)", "cache_second"),
                           ("traceview, 2nd, other options (parsed-table cache)", "cache_table"),
                           ("XProf hlo_stats", "xprof")):
            x = r.get(key)
            if not x:
                continue
            wall = x["wall_s"]
            note = "" if x["rc"] == 0 else f" (exit {x['rc']})"
            lines.append(f"| {r['file']} | {size} | {r['events']:,} | {label}{note} | {_f(wall)} | {_f(x['cpu_s'])} | "
                         f"{x['rss_mib']:,.0f} | {r['events'] / wall:,.0f} | {r['data_bytes'] / 1e6 / wall:,.1f} | "
                         f"{_f(x['load1'], '{:.1f}')} |")
        if r.get("xprof"):
            lines.append(f"| | | | XProf convert call alone | {_f(r['xprof']['convert_s'])} | | | "
                         f"{r['events'] / r['xprof']['convert_s']:,.0f} | | |")
    lines += ["", "## Where traceview's time goes (one in-process run, no cache)", "",
              "| file | op rows | stage | wall s | CPU s |", "|---|---|---|---|---|"]
    for r in results:
        b = r.get("breakdown")
        if not b:
            continue
        for name, wall, cpu in b["marks"]:
            lines.append(f"| {r['file']} | {b['rows']:,} | {name} | {wall:.2f} | {cpu:.2f} |")
    lines += ["", "## Against the targets", ""]
    for r in results:
        c, x = r.get("cold"), r.get("xprof")
        if x and c:
            lines.append(f"- {r['file']}: XProf/traceview wall {x['wall_s'] / c['wall_s']:.1f}x, CPU "
                         f"{x['cpu_s'] / c['cpu_s']:.1f}x (target >= 8x); peak memory traceview/XProf "
                         f"{c['rss_mib'] / x['rss_mib']:.2f} (target <= 0.33); {r['events'] / c['wall_s'] / 1e6:.2f}M "
                         f"events/s end to end (target >= 3M)")
        elif c and r["data_bytes"] != r["file_bytes"]:
            lines.append(f"- {r['file']}: {r['data_bytes'] / 1e6 / c['wall_s']:.1f} MB/s of decompressed JSON end "
                         f"to end, {r['data_bytes'] / 1e6 / c['cpu_s']:.1f} MB per CPU-second (target >= 80 MB/s)")
        elif c:
            lines.append(f"- {r['file']}: peak RSS {c['rss_mib']:,.0f} MiB = {c['rss_mib'] * 2**20 / r['file_bytes']:.2f}x "
                         f"the file (target < 2x); {r['events'] / c['wall_s'] / 1e6:.2f}M events/s; exit {c['rc']}")
        if r.get("cache_second") and r.get("cache_first"):
            lines.append(f"  - cache: the same command again {r['cache_second']['wall_s'] / r['cache_first']['wall_s'] * 100:.0f}% "
                         f"of the first's wall time, {r['cache_second']['cpu_s'] / r['cache_first']['cpu_s'] * 100:.0f}% of "
                         f"its CPU time (target <= 10%)")
        if r.get("cache_table") and r.get("cache_first"):
            lines.append(f"  - cache: other options over the cached table {r['cache_table']['wall_s'] / r['cache_first']['wall_s'] * 100:.0f}% "
                         f"of the first's wall time, {r['cache_table']['cpu_s'] / r['cache_first']['cpu_s'] * 100:.0f}% of its CPU time")
    lines.append("")
    # a hand-written reading of the figures below the marker survives a re-run
    kept = ""
    if path.exists():
        old = path.read_text(encoding="utf-8")
        if HAND_WRITTEN in old:
            kept = old[old.index(HAND_WRITTEN):]
    path.write_text("\n".join(lines) + (("\n" + kept) if kept else ""), encoding="utf-8")
    (OUT / "results.json").write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per figure (median; default 3)")
    ap.add_argument("--quick", action="store_true", help="3M xplane and JSON only, one run, no 20M")
    ap.add_argument("--no-20m", action="store_true", help="skip the ~20M-event xplane")
    ap.add_argument("--no-xprof", action="store_true", help="do not time XProf")
    ap.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    tvprobe.add_options(ap, REPO)
    args = ap.parse_args(argv)
    chosen = tvprobe.choose(args, "benchmarks/run.py")  # the package the children import, asked of one
    if chosen is None:
        return 2
    tree, timed = chosen
    print(f"timing {tvprobe.describe(timed)}", flush=True)
    runs = 1 if args.quick else args.runs
    sizes = ["3m"] if (args.quick or args.no_20m) else ["3m", "20m"]
    traces = ensure_traces(sizes)
    # an installed package ships byte-compiled modules; an editable checkout may not
    subprocess.run([sys.executable, "-m", "compileall", "-q", timed["path"]], check=False)
    results = []
    results.append(bench_file(traces["3m"], runs, not args.no_xprof, True, xplane_events(traces["3m"]),
                              traces["3m"].stat().st_size, tree=tree))
    jbytes, jevents = json_facts(traces["json"])
    results.append(bench_file(traces["json"], runs, False, True, jevents, jbytes, tree=tree))
    if "20m" in traces:
        results.append(bench_file(traces["20m"], 1, False, False, xplane_events(traces["20m"]),
                                  traces["20m"].stat().st_size, breakdown=False, tree=tree))
    write_results(results, args.out, argv, timed)
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
