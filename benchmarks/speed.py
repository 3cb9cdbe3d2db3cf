"""The speed yardstick of issue 23: traceview against XProf and xprof-rs on scaled traces.

One run builds (or reuses, ``--cache-dir``) the scaled traces made by
:mod:`scale_trace` from real ones, then times each command as its own process (wall time and
peak RSS, through ``/usr/bin/time`` as :func:`run.measure` does):

* ``v6e_x400``: ``tpu_v6e_4chip_psum.xplane.pb`` repeated 400 times (3M events);
* ``mi300x_x20000``: ``mi300x_jax_attention.xplane.pb`` repeated 20000 times (1.74M GPU op
  events);
* ``engine_cpu_2m``: the engine's CPU trace ``fixtures/greedy_b4`` with its ``/host:CPU``
  threads repeated to about 2M events (``--host-cpu``).

Each repetition is shifted in ``offset_ps``/``device_offset_ps`` and in ``run_id``/``step_num``
(:mod:`scale_trace`), so steps and module runs stay distinct. ``--prebuilt DIR`` takes the
first two from a folder of ready copies (``tpu_v6e_x400.xplane.pb``,
``mi300x_attention_x20000.xplane.pb``) instead.

Commands per trace: ``traceview analyze F --no-cache`` (table), the same with
``--format json -o X``, ``traceview report F -o X.html``, ``traceview diff F F``,
``traceview verify F -c 'op matching . present'``; XProf 2.24.2's ``hlo_stats``
(``xspace_to_tool_data([copy], 'hlo_stats', {'use_saved_result': False})`` on a fresh copy
in a temp dir; the process wall includes ``import xprof``), and xprof-rs's server started on
a fresh copy of a log dir (``xprof-rs --logdir D --port P``), timed from its start until
one ``hlo_stats`` answer (``/data/plugin/profile/data?run=run&tag=hlo_stats&host=host``)
has arrived; its peak is the server's ``VmHWM``. A trace xprof-rs cannot read is recorded
as "cannot read" with its message.

Each command runs ``--repeat`` times (default 3), in rounds over all the commands so that a
slow phase of the machine falls on all alike; the medians are reported with their ranges
(one run of a command on this 2-core VM varies by up to ~30%). It prints one table (trace,
command, wall s, peak MB, each wall over analyze's, over XProf's and over xprof-rs's) and
the targets of issue 23 with PASS/FAIL (``unknown`` where a figure is missing), on the medians.

The traceview timed is this checkout's, ``--tree PATH`` another checkout's (first on
``PYTHONPATH``; its C extensions built in place), ``--installed`` the one installed in this
interpreter's environment; the children run as ``python -P``, so the working directory never
decides (:mod:`tvprobe`). A checkout's bytecode is compiled first, as ``pip install`` compiles
an installed package's (XProf's is), so no child pays Python's compiler. A child started the same way first reports the package it imports and
whether its C extensions load: that line heads the output and the markdown, and a package
without them is refused with how to build it (``--allow-fallback`` times it anyway).
``--markdown FILE`` writes the results as a markdown
section (machine, commit, command, date), ``--only NAME`` runs a subset, ``--small`` uses 2
repetitions (a quick check of the yardstick itself).

Usage::

    python benchmarks/speed.py --prebuilt /work/scaled --cache-dir /tmp/speed
    python benchmarks/speed.py --tree ../main --markdown /tmp/speed.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = REPO.parent / "shared" / "traces"

sys.path.insert(0, str(HERE))
import scale_trace  # noqa: E402
import tvprobe  # noqa: E402
from run import _XPROF_CHILD, machine, measure  # noqa: E402


@dataclass(frozen=True)
class Trace:
    name: str
    src: Path
    repeat: int | None = None  # repetitions, or
    events: int | None = None  # a target number of events
    host_cpu: bool = False
    prebuilt: str | None = None  # file name in --prebuilt DIR


TRACES = (
    Trace("v6e_x400", SHARED / "tpu_v6e_4chip_psum.xplane.pb", repeat=400, prebuilt="tpu_v6e_x400.xplane.pb"),
    Trace("mi300x_x20000", SHARED / "mi300x_jax_attention.xplane.pb", repeat=20000,
          prebuilt="mi300x_attention_x20000.xplane.pb"),
    Trace("engine_cpu_2m", next((REPO / "fixtures" / "greedy_b4").rglob("*.xplane.pb"), REPO / "fixtures"),
          events=2_000_000, host_cpu=True),
)
COMMANDS = ("analyze", "json", "report", "diff", "verify", "xprof", "xprof-rs")
_TV = ("analyze", "json", "report", "diff", "verify")  # traceview's commands
_MB = 1e6


# -- traces ----------------------------------------------------------------------------------

def build(trace: Trace, cache: Path, prebuilt: Path | None, small: bool, log) -> Path:
    """The scaled file of ``trace``: from ``prebuilt`` when it holds it, else from ``cache``
    (built there by :mod:`scale_trace` when absent)."""
    if prebuilt is not None and trace.prebuilt and not small and (prebuilt / trace.prebuilt).is_file():
        return prebuilt / trace.prebuilt
    repeat = 2 if small else trace.repeat
    if repeat is None:
        per, other = scale_trace.count_device_events(trace.src, host_cpu=trace.host_cpu)
        repeat = max(1, round((trace.events - other) / max(per, 1)))
    dst = cache / f"{trace.name}{'_small' if small else ''}.xplane.pb"
    if not dst.is_file():
        log(f"building {dst} ({trace.src.name} x{repeat})")
        info = scale_trace.scale_xplane(trace.src, dst, repeat, host_cpu=trace.host_cpu)
        log("  " + " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in info.items()))
    return dst


# -- commands --------------------------------------------------------------------------------

def _tv_env(tree: Path | None) -> dict:
    env = tvprobe.child_env(tree)
    env["TRACEVIEW_NO_CACHE"] = "1"
    return env


def tv_argv(cmd: str, f: Path, out: Path) -> list[str]:
    base = tvprobe.python_argv() + ["-m", "traceview.cli"]  # -P: the working directory never shadows --tree
    if cmd == "analyze":
        return base + ["analyze", str(f), "--no-cache"]
    if cmd == "json":
        return base + ["analyze", str(f), "--no-cache", "--format", "json", "-o", str(out / "out.json")]
    if cmd == "report":
        return base + ["report", str(f), "--no-cache", "-o", str(out / "out.html")]
    if cmd == "diff":
        return base + ["diff", str(f), str(f), "--no-cache"]
    if cmd == "verify":
        return base + ["verify", str(f), "--no-cache", "-c", "op matching . present"]
    raise ValueError(cmd)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _vm_hwm_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def xprof_rs(f: Path, timeout: float) -> dict:
    """One cold ``hlo_stats`` request to an xprof-rs server started on a fresh copy of a log
    dir holding ``f``: wall_s from the server's start to the answer, rss_mib the server's
    peak, rc 0 on an HTTP 200 answer; else ``error`` holds its message."""
    exe = shutil.which("xprof-rs") or str(Path(sys.executable).parent / "xprof-rs")
    if not Path(exe).exists():
        return {"wall_s": float("nan"), "rss_mib": float("nan"), "rc": 127, "error": "xprof-rs not installed"}
    tmp = Path(tempfile.mkdtemp(prefix="xprof-rs-bench-"))
    run = tmp / "plugins" / "profile" / "run"
    run.mkdir(parents=True)
    shutil.copyfile(f, run / "host.xplane.pb")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/data/plugin/profile/data?run=run&tag=hlo_stats&host=host"
    t0 = time.perf_counter()
    p = subprocess.Popen([exe, "--logdir", str(tmp), "--port", str(port)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    out = {"rc": 1, "error": ""}
    try:
        while True:  # the server is up once it accepts a connection
            if p.poll() is not None:
                out["error"] = "server exited: " + p.stderr.read().decode(errors="replace").strip()[-300:]
                break
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.01)
        if p.poll() is None:
            t1 = time.perf_counter()
            try:
                with urllib.request.urlopen(url, timeout=timeout) as r:
                    body = r.read()
                out["rc"] = 0
                out["answer_bytes"] = len(body)
            except urllib.error.HTTPError as exc:
                out["error"] = exc.read().decode(errors="replace").strip().splitlines()[0][:300] or str(exc)
            except (OSError, ValueError) as exc:
                out["error"] = str(exc)[:300]
            out["request_s"] = time.perf_counter() - t1
        out["wall_s"] = time.perf_counter() - t0
        out["rss_mib"] = _vm_hwm_mib(p.pid)
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def run_trace(name: str, f: Path, commands: list[str], tree: Path | None, timeout: float, log, repeat: int = 1) -> dict:
    """Every command of ``commands`` on ``f``, ``repeat`` rounds of all of them (so that a slow
    phase of the machine falls on every command alike): {command: {wall_s, rss_mib, rc, ...,
    walls, peaks}}, wall_s and rss_mib the medians of the rounds (:func:`_median_run`)."""
    runs: dict = {cmd: [] for cmd in commands}
    out = Path(tempfile.mkdtemp(prefix="tv-speed-"))
    try:
        for k in range(repeat):
            for cmd in commands:
                r = _run_one(cmd, f, out, tree, timeout)
                runs[cmd].append(r)
                log(f"  {name} {cmd}{f' (round {k + 1}/{repeat})' if repeat > 1 else ''}: {r['wall_s']:.2f} s, "
                    f"{r['rss_mib'] * 1048576 / _MB:.0f} MB, rc {r['rc']}" + (f" ({r['error']})" if r.get("error") else ""))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {cmd: _median_run(rs) for cmd, rs in runs.items()}


def _run_one(cmd: str, f: Path, out: Path, tree: Path | None, timeout: float) -> dict:
    if cmd in _TV:
        r = measure(tv_argv(cmd, f, out), env=_tv_env(tree), timeout=timeout)
        if cmd == "json" and (out / "out.json").is_file():
            r["out_bytes"] = (out / "out.json").stat().st_size
        if r["rc"] not in (0, 1) or (cmd != "verify" and r["rc"] != 0):
            r["error"] = (r["stderr"].strip().splitlines() or ["?"])[-1][:300]
    elif cmd == "xprof":
        r = measure([sys.executable, "-c", _XPROF_CHILD, str(f)], timeout=timeout)
        try:
            r.update(json.loads(r["stdout"].strip().splitlines()[-1]))
        except (ValueError, IndexError):
            r["error"] = (r["stderr"].strip().splitlines() or ["?"])[-1][:300]
    elif cmd == "xprof-rs":
        r = xprof_rs(f, timeout)
    else:
        raise ValueError(cmd)
    r.pop("stdout", None)
    r.pop("stderr", None)
    return r


def _median_run(rs: list[dict]) -> dict:
    """One command's rounds as one record: the first failed round if any failed, else the
    median wall time and the median peak (each its own median), with every round's ``walls``
    and ``peaks`` (MiB) kept."""
    bad = [r for r in rs if r.get("error")]
    if bad:
        return bad[0]
    walls = sorted(r["wall_s"] for r in rs)
    peaks = sorted(r["rss_mib"] for r in rs)
    out = dict(rs[0])
    out.update(wall_s=statistics.median(walls), rss_mib=statistics.median(peaks), walls=walls, peaks=peaks)
    return out


# -- results ---------------------------------------------------------------------------------

def _ok(r: dict | None) -> bool:
    return bool(r) and not r.get("error") and r["wall_s"] == r["wall_s"]


def _ratio(a: dict | None, b: dict | None) -> float | None:
    return a["wall_s"] / b["wall_s"] if _ok(a) and _ok(b) and b["wall_s"] > 0 else None


def table_rows(results: dict, sizes: dict) -> list[list[str]]:
    rows = []
    for name, res in results.items():
        for cmd, r in res.items():
            if r.get("error") and cmd == "xprof-rs":
                wall = ("not installed" if r["rc"] == 127 else "failed" if "server exited" in r["error"]
                        else "cannot read")
                peak = "-"
            elif r.get("error"):
                wall, peak = "failed", "-"
            else:
                wall, peak = f"{r['wall_s']:.2f}", f"{r['rss_mib'] * 1048576 / _MB:.0f}"
                if len(r.get("walls", ())) > 1:
                    wall += f" ({r['walls'][0]:.2f}-{r['walls'][-1]:.2f})"
                    peak += f" ({r['peaks'][0] * 1048576 / _MB:.0f}-{r['peaks'][-1] * 1048576 / _MB:.0f})"

            def fr(x):
                return "-" if x is None else f"{x:.2f}"
            rows.append([name, cmd, wall, peak, fr(_ratio(r, res.get("analyze"))), fr(_ratio(r, res.get("xprof"))),
                         fr(_ratio(r, res.get("xprof-rs"))),
                         (f"{r['out_bytes'] / _MB:.1f} MB out" if "out_bytes" in r else "")
                         + (r.get("error") or "")])
    return rows


def targets(results: dict, sizes: dict) -> list[tuple[str, str, str, str]]:
    """(trace, target, figure, PASS|FAIL|unknown) for each target of issue 23."""
    out = []

    def add(name, what, val, ok):
        out.append((name, what, val, "unknown" if ok is None else ("PASS" if ok else "FAIL")))

    for name, res in results.items():
        a = res.get("analyze")
        if "xprof" in res:
            x = _ratio(res["xprof"], a)
            add(name, "analyze >= 10x faster than XProf hlo_stats", "-" if x is None else f"{x:.1f}x",
                None if x is None else x >= 10)
        if "xprof-rs" in res:
            rs = res["xprof-rs"]
            if rs.get("error"):
                add(name, "analyze no slower than xprof-rs cold",
                    "xprof-rs not installed" if rs["rc"] == 127 else f"xprof-rs cannot read it: {rs['error'][:80]}", None)
            else:
                x = _ratio(a, rs)
                add(name, "analyze no slower than xprof-rs cold", "-" if x is None else f"{x:.2f}x its time",
                    None if x is None else x <= 1)
        for cmd in ("analyze", "report", "diff", "verify"):
            if cmd in res:
                r = res[cmd]
                x = r["rss_mib"] * 1048576 / sizes[name] if _ok(r) else None
                add(name, f"{cmd} peak <= 3x file size", "-" if x is None else f"{x:.2f}x",
                    None if x is None else x <= 3)
        if "json" in res:
            x = _ratio(res["json"], a)
            add(name, "JSON <= 1.25x table time", "-" if x is None else f"{x:.2f}x", None if x is None else x <= 1.25)
            b = res["json"].get("out_bytes")
            add(name, "JSON <= 5 MB", "-" if b is None else f"{b / _MB:.1f} MB", None if b is None else b <= 5 * _MB)
        for cmd, lim in (("report", 1.5), ("verify", 1.5), ("diff", 2.0)):
            if cmd in res:
                x = _ratio(res[cmd], a)
                add(name, f"{cmd} <= {lim}x analyze", "-" if x is None else f"{x:.2f}x", None if x is None else x <= lim)
    return out


_HEAD = ["trace", "command", "wall s", "peak MB", "/ analyze", "/ XProf", "/ xprof-rs", "note"]


def text_table(rows: list[list[str]], head: list[str]) -> str:
    w = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    fmt = lambda r: "  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)).rstrip()  # noqa: E731
    return "\n".join([fmt(head), fmt(["-" * x for x in w])] + [fmt(r) for r in rows])


def md_table(rows: list[list[str]], head: list[str]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                     + ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows])


def tree_commit(tree: Path) -> str:
    try:
        head = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short=10", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return head + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def markdown(results, sizes, files, tree, commit, argv, load, repeat: int = 1, timed: dict | None = None) -> str:
    m = machine()
    lines = [f"### Speed yardstick ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
             f"- machine: {m['cpu']}, {m['nproc']} cores, {m['memory']}, {m['os']}; "
             f"load average before the run {load:.2f}",
             (f"- traceview tree: `{tree}` at commit `{commit}`, its bytecode compiled before timing (as `pip "
              "install` does)" if tree is not None
              else "- traceview: the installed package (`--installed`)"),
             *([f"- traceview timed (as the children import it): {tvprobe.describe(timed)}"] if timed else []),
             f"- command: `python benchmarks/speed.py {' '.join(argv)}`",
             "- traces: " + "; ".join(f"`{n}` {files[n].name} ({sizes[n] / _MB:.0f} MB)" for n in results),
             (f"- {repeat} rounds of every command, each run its own process; wall s and peak RSS (MB = 10^6 "
              "bytes) are the medians of the rounds (range in brackets), the ratios and verdicts are of the medians; "
              if repeat > 1 else "- one run of each command, its own process; wall s and peak RSS (MB = 10^6 bytes); ")
             + "`/ X` = this command's wall over X's", "",
             md_table(table_rows(results, sizes), _HEAD), "",
             md_table([list(t) for t in targets(results, sizes)], ["trace", "target", "figure", "verdict"]), ""]
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "traceview-speed",
                    help="where scaled traces are built and reused")
    ap.add_argument("--prebuilt", type=Path, help="a folder of ready scaled copies (e.g. /work/scaled)")
    ap.add_argument("--only", action="append", choices=[t.name for t in TRACES], help="a trace to run (repeatable)")
    ap.add_argument("--commands", default=",".join(COMMANDS), help=f"comma-separated subset of {','.join(COMMANDS)}")
    tvprobe.add_options(ap, REPO)
    ap.add_argument("--markdown", type=Path, help="write the results as a markdown section to FILE")
    ap.add_argument("--small", action="store_true",
                    help="each trace scaled x2 instead of x400/x20000 (checks the yardstick itself; its verdicts "
                         "mean nothing at that size)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per command")
    ap.add_argument("--repeat", type=int, default=3,
                    help="rounds of every command; the medians are reported (default 3; 1: one run each)")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error(f"--repeat must be 1 or more, got {args.repeat}")
    commands = [c.strip() for c in args.commands.split(",") if c.strip()]
    bad = [c for c in commands if c not in COMMANDS]
    if bad:
        ap.error(f"unknown command(s) {', '.join(bad)}; choose from {', '.join(COMMANDS)}")
    chosen = tvprobe.choose(args, "benchmarks/speed.py")  # the package the children import, asked of one
    if chosen is None:
        return 2
    tree, timed = chosen

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    log(f"timing {tvprobe.describe(timed)}")

    args.cache_dir.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    commit = tree_commit(tree) if tree is not None else "-"  # the code timed: taken before the run, which may outlast a commit
    chosen = [t for t in TRACES if not args.only or t.name in args.only]
    if args.small:  # the names say what was run
        chosen = [Trace(t.name.split("_x")[0].rsplit("_", 1)[0] + "_x2", t.src, 2, None, t.host_cpu, None) for t in chosen]
    files = {t.name: build(t, args.cache_dir, args.prebuilt, args.small, log) for t in chosen}
    sizes = {n: f.stat().st_size for n, f in files.items()}
    results = {}
    for t in chosen:
        log(f"{t.name}: {files[t.name]} ({sizes[t.name] / _MB:.0f} MB)")
        results[t.name] = run_trace(t.name, files[t.name], commands, tree, args.timeout, log, args.repeat)
    print((f"traceview tree {tree} at {commit}" if tree is not None else "traceview installed")
          + f"; load average before the run {load:.2f}")
    print(tvprobe.describe(timed))
    print(text_table(table_rows(results, sizes), _HEAD))
    print()
    print(text_table([list(x) for x in targets(results, sizes)], ["trace", "target", "figure", "verdict"]))
    if args.small:
        print("--small: traces scaled x2 (under 1 MB); the verdicts above check the yardstick, not traceview")
    if args.markdown:
        args.markdown.write_text(markdown(results, sizes, files, tree, commit, argv, load, args.repeat, timed))
        log(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
