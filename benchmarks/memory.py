"""Peak memory of hostile inputs against ``--max-bytes`` (issue 13), each in a fresh process.

Usage (from the repository root, with the project installed)::

    python benchmarks/memory.py [--out benchmarks/out/memory] [--write-results]

Builds into ``--out`` (default ``benchmarks/out/memory``, never a shared trace):

* ``bomb``: a 6 MB gzip of 6 GiB of JSON whitespace (a gzip bomb);
* ``string``: a trace JSON whose one op name is a single 400 MiB string;
* ``tiny``: 2,000,000 tiny op events (117 MB of JSON), the cost-per-event case;
* ``mi300x`` (a real trace, for scale): the shared MI300X GEMM sweep;

and runs ``traceview analyze PATH --no-cache --format json -o /dev/null`` on each in a child
process at the default limit and at ``--max-bytes 1 GiB``, reporting wall time, peak RSS
(``ru_maxrss`` of the child) and the exit code. Peak RSS includes the interpreter and
imports (about 60 MB). ``--write-results`` appends the table to ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import subprocess
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"


def _gz_stream(path: Path, head: bytes, body_chunk: bytes, repeat: int, tail: bytes) -> None:
    co = zlib.compressobj(6, zlib.DEFLATED, 31)
    with open(path, "wb") as fh:
        fh.write(co.compress(head))
        for _ in range(repeat):
            fh.write(co.compress(body_chunk))
        fh.write(co.compress(tail))
        fh.write(co.flush())


def build(out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    made = {}
    bomb = out / "bomb" / "b.trace.json.gz"
    if not bomb.exists():
        bomb.parent.mkdir(exist_ok=True)
        _gz_stream(bomb, b'{"traceEvents": [', b" " * (1 << 24), 6 << 6, b"]}")
    made["bomb (6 GiB of whitespace)"] = bomb
    string = out / "string" / "h.trace.json.gz"
    if not string.exists():
        string.parent.mkdir(exist_ok=True)
        head = (b'{"traceEvents": [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:TPU:0"}},'
                b'{"ph": "M", "pid": 1, "tid": 2, "name": "thread_name", "args": {"name": "XLA Ops"}},'
                b'{"ph": "X", "pid": 1, "tid": 2, "ts": 1.0, "dur": 0.5, "name": "')
        _gz_stream(string, head, b"y" * (1 << 20), 400, b'", "args": {"long_name": "%add.1 = f32[8]{0} add(f32[8]{0} %a, '
                                                        b'f32[8]{0} %b)"}}]}')
    made["one 400 MiB string"] = string
    tiny = out / "tiny" / "h.trace.json"
    if not tiny.exists():
        tiny.parent.mkdir(exist_ok=True)
        with open(tiny, "w") as fh:
            fh.write('{"traceEvents":[{"ph":"M","pid":1,"name":"process_name","args":{"name":"/device:TPU:0"}},'
                     '{"ph":"M","pid":1,"tid":2,"name":"thread_name","args":{"name":"XLA Ops"}}')
            for i in range(2_000_000):
                fh.write(',{"ph":"X","pid":1,"tid":2,"ts":%d,"dur":1,"name":"a"}' % i)
            fh.write("]}")
    made["2M tiny events (117 MB JSON)"] = tiny
    made["MI300X GEMM sweep (real)"] = SHARED / "mi300x_jax_gemm_sweep.xplane.pb"
    return made


def measure(path: Path, extra: list[str]) -> tuple[float, float, int]:
    """(seconds, peak RSS in MiB, exit code) of one analyze in a child process."""
    cmd = [sys.executable, "-m", "traceview.cli", "analyze", str(path), "--no-cache", "--format", "json",
           "-o", os.devnull, *extra]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # the largest child so far
    return dt, rss, proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "memory"))
    ap.add_argument("--write-results", action="store_true")
    args = ap.parse_args(argv)
    cases = build(Path(args.out))
    rows = []
    # smallest first: ru_maxrss of RUSAGE_CHILDREN is the maximum over children so far, so each
    # case is measured in its own fresh interpreter below
    for label, path in cases.items():
        for limit, extra in (("default", []), ("1 GiB", ["--max-bytes", str(1 << 30)])):
            child = [sys.executable, __file__, "--one", str(path), *extra]
            proc = subprocess.run(child, capture_output=True, text=True)
            dt, rss, rc = (float(x) for x in proc.stdout.split())
            rows.append((label, limit, dt, rss, int(rc)))
            print(f"{label:32s} {limit:8s} {dt:6.2f} s {rss:8.0f} MiB exit {int(rc)}", flush=True)
    if args.write_results:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        lines = ["", f"## Memory of a trace JSON and other hostile inputs (benchmarks/memory.py, {stamp})", "",
                 f"`python benchmarks/memory.py --write-results` on {platform.machine()}, {os.cpu_count()} CPUs, "
                 f"Python {platform.python_version()}; peak RSS of the child process (imports included).", "",
                 "| input | --max-bytes | wall | peak RSS | exit |", "|---|---|---:|---:|---:|"]
        lines += [f"| {a} | {b} | {c:.2f} s | {d:,.0f} MiB | {e} |" for a, b, c, d, e in rows]
        with open(ROOT / "benchmarks" / "RESULTS.md", "a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        dt, rss, rc = measure(Path(sys.argv[2]), sys.argv[3:])
        print(dt, rss, rc)
        raise SystemExit(0)
    raise SystemExit(main())
