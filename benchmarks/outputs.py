"""Record every output the CLI and the library give on the shared traces, the fixtures and
the scaled traces, so that two versions of traceview can be compared byte for byte.

A refactor must not change what traceview says. This script runs, as separate processes of
the installed ``traceview`` command (the version under test):

* ``analyze`` in every ``--format`` (table to a file, json, csv) and with the options that
  select other code paths (``--by name|program``, ``--steps``/``--expect-batch``,
  ``--source-frame user``, ``--step-extent run|period``, ``--chip``, ``--filter``);
* ``report`` (the HTML file);
* ``diff`` (json, table to a file, html) on pairs of profiles;
* ``verify`` (json) with single-profile and two-profile checks;
* bad inputs (the exit code and the one-line message);

and, in one more process, the library's tables (``traceview.load(p).by_shape()``, ...) as
JSON lines. Every output goes to ``OUT/<case>.<ext>`` with the exit code in
``OUT/<case>.rc``. Text that depends on when the comparison runs (a run's age, "N days
old") is normalised to ``<age>``. Two folders are compared with ``--compare A B``, which
lists the cases that differ and exits 1 if any does.

Usage::

    .venv/bin/python benchmarks/outputs.py OUT [--big]   # --big: also the 3M/20M-event files
    .venv/bin/python benchmarks/outputs.py --compare OLD NEW
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = REPO.parent / "shared" / "traces"
FIX = REPO / "fixtures"
BIG = HERE / "out"

TRACES = {
    "v6e": SHARED / "tpu_v6e_4chip_psum.xplane.pb",
    "gemm": SHARED / "mi300x_jax_gemm_sweep.xplane.pb",
    "attn": SHARED / "mi300x_jax_attention.xplane.pb",
    "conv": SHARED / "mi300x_jax_conv3d.xplane.pb",
    "vllm": SHARED / "vllm_tpu_qwen",
    "greedy_b4": FIX / "greedy_b4",
    "greedy_b8": FIX / "greedy_b8",
    "topp_b4": FIX / "topp_b4",
}
BAD = {
    "tfgpu": SHARED / "gpu_v100x8_tf2_bert_no_xla.xplane.pb",
    "corrupt": SHARED / "corrupt_utf8_mangled.xplane.pb",
    "missing": SHARED / "no_such_trace",
}
ANALYZE_VARIANTS = {
    "json": ["--format", "json"],
    "csv": ["--format", "csv"],
    "name": ["--format", "json", "--by", "name"],
    "program": ["--format", "json", "--by", "program"],
    "checks": ["--format", "json", "--steps", "4", "--expect-batch", "4"],
    "user": ["--format", "json", "--source-frame", "user", "--top", "5"],
    "run": ["--format", "json", "--step-extent", "run"],
    "period": ["--format", "json", "--step-extent", "period", "--family", "mine=fusion"],
    "chip": ["--format", "json", "--chip", "tpu-v5e"],
    "filter": ["--format", "json", "--filter", "fusion|dot|RPA", "--top", "8"],
}
DIFF_PAIRS = {
    "b4_b8": ("greedy_b4", "greedy_b8"),
    "topp_greedy": ("topp_b4", "greedy_b4"),
    "b8_self": ("greedy_b8", "greedy_b8"),
    "vllm_self": ("vllm", "vllm"),
    "v6e_self": ("v6e", "v6e"),
    "gemm_attn": ("gemm", "attn"),
}
SINGLE_CHECKS = ["op matching fusion present", "no op matching topp_binary_search",
                 "op matching fusion count >= 1", "op matching fusion count >= 1 per execution",
                 "family attention share < 90%", "family matching dot share >= 0%", "kernel 'RPAd*' has bkv 128",
                 "source of kernel 'RPAd*' under kernels/", "source site-packages present",
                 "op from file matching sampling absent"]
PAIR_CHECKS = ["op matching topp_binary_search vanished", "all matched", "all matched except sample",
               "kernel 'RPAd*' changed bkv", "source of kernel 'RPAd*' changed", "op from file matching sampl vanished",
               "base: op matching topp_binary_search present"]

_AGE = re.compile(r"\b\d+ (s|min|h|days) old\b|\bin the future \(clock skew\?\)")


def _norm(data: bytes, tmp: Path | None = None) -> bytes:
    text = _AGE.sub("<age>", data.decode("utf-8", "replace"))
    return (text.replace(str(tmp), "<tmp>") if tmp is not None else text).encode("utf-8")


def _run(out: Path, case: str, args: list[str], produced: Path | None = None, env: dict | None = None) -> None:
    e = dict(os.environ, COLUMNS="160", TRACEVIEW_NO_CACHE="1", **(env or {}))
    p = subprocess.run([str(Path(sys.executable).with_name("traceview")), *args], capture_output=True, env=e)
    data = produced.read_bytes() if produced is not None and produced.exists() else p.stdout
    if produced is not None and produced.exists():
        produced.unlink()
    (out / f"{case}.out").write_bytes(_norm(data))
    (out / f"{case}.rc").write_text(f"{p.returncode}\n" + _norm(p.stderr, produced.parent if produced else None).decode())


_LIBRARY = r"""
import json, sys
import traceview
def dump(name, df):
    print(json.dumps({"table": name, "columns": list(df.columns), "rows": df.to_dicts()}, default=str))
for case, path in json.loads(sys.argv[1]).items():
    prof = traceview.load(path, stale_after_s=None)
    for name, df in (("by_shape", prof.by_shape()), ("by_name", prof.by_name()), ("by_program_op", prof.by_program_op()),
                     ("checks", prof.occurrence_checks(steps=2, expect_batch=4)), ("modules", prof.modules()),
                     ("roofline", prof.roofline()), ("kernels", prof.kernels()), ("devices", prof.device_summary()),
                     ("sources_file", prof.sources("file")), ("sources_line_user", prof.sources("line", "user")),
                     ("sources_pop", prof.sources("population")), ("ops", prof.ops.head(2000))):
        dump(f"{case}.{name}", df)
    an = prof.steps()
    dump(f"{case}.steps", an.steps)
    dump(f"{case}.families", an.families)
    dump(f"{case}.family_time_by_step", an.family_time_by_step().sort("step_row", "family"))
    print(json.dumps({"table": f"{case}.coverage", "line": an.coverage.line(), "method": an.method, "module": an.module,
                      "notes": an.notes}))
"""


def record(out: Path, big: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    traces = dict(TRACES)
    if big:
        for f in sorted(BIG.glob("tpu_v6e_x*.xplane.pb")):
            traces[f.name.split(".")[0]] = f
    tmp = Path(tempfile.mkdtemp(prefix="tv-outputs-"))
    for name, path in traces.items():
        huge = path.stat().st_size > 400 << 20 if path.is_file() else False
        variants = {"json": ANALYZE_VARIANTS["json"]} if huge else ANALYZE_VARIANTS
        for v, extra in variants.items():
            _run(out, f"analyze.{name}.{v}", ["analyze", str(path), *extra])
        if huge:
            continue
        _run(out, f"analyze.{name}.table", ["analyze", str(path), "-o", str(tmp / "t.txt")], tmp / "t.txt")
        _run(out, f"report.{name}", ["report", str(path), "-o", str(tmp / "r.html")], tmp / "r.html")
        _run(out, f"verify.{name}", ["verify", str(path), "--format", "json",
                                     *[a for c in SINGLE_CHECKS for a in ("--check", c)]])
        _run(out, f"verify.{name}.text", ["verify", str(path), *[a for c in SINGLE_CHECKS for a in ("--check", c)]])
    pairs = dict(DIFF_PAIRS)
    if big and "tpu_v6e_x400" in traces:
        pairs["x400_self"] = ("tpu_v6e_x400", "tpu_v6e_x400")
    for name, (a, b) in pairs.items():
        pa, pb = str(traces[a]), str(traces[b])
        _run(out, f"diff.{name}.json", ["diff", pa, pb, "--format", "json"])
        _run(out, f"diff.{name}.table", ["diff", pa, pb, "-o", str(tmp / "d.txt")], tmp / "d.txt")
        _run(out, f"diff.{name}.html", ["diff", pa, pb, "--format", "html", "-o", str(tmp / "d.html")], tmp / "d.html")
        _run(out, f"verify.{name}", ["verify", pa, pb, "--format", "json",
                                     *[a for c in PAIR_CHECKS + SINGLE_CHECKS[:3] for a in ("--check", c)]])
    for name, path in BAD.items():
        _run(out, f"bad.{name}", ["analyze", str(path), "--format", "json"])
    _run(out, "bad.check", ["verify", str(traces["v6e"]), "--check", "op matching x frobnicates"])
    # in a folder of its own: ``-c`` puts the working folder first on sys.path, and a checkout
    # there would shadow the installed traceview under test
    p = subprocess.run([sys.executable, "-c", _LIBRARY, json.dumps({k: str(v) for k, v in TRACES.items()})],
                       capture_output=True, env=dict(os.environ, TRACEVIEW_NO_CACHE="1"), cwd=tmp)
    (out / "library.out").write_bytes(_norm(p.stdout))
    (out / "library.rc").write_text(f"{p.returncode}\n" + p.stderr.decode())


_SVG = re.compile(rb"<svg\b.*?</svg>", re.S)


def compare(a: Path, b: Path) -> int:
    """Files that differ between two recordings; an HTML file that differs only inside its
    inline SVG charts is listed apart (the charts are drawings, not data)."""
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    bad = [n for n in names if not (a / n).exists() or not (b / n).exists() or not filecmp.cmp(a / n, b / n, shallow=False)]
    charts = [n for n in bad if _SVG.sub(b"<svg/>", (a / n).read_bytes()) == _SVG.sub(b"<svg/>", (b / n).read_bytes())
              and _SVG.search((a / n).read_bytes())]
    for n in bad:
        print(f"{'charts differ' if n in charts else 'differs'}: {n}")
    print(f"{len(names) - len(bad)} of {len(names)} files identical, {len(charts)} more identical outside their charts")
    return 1 if len(bad) > len(charts) else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", type=Path)
    ap.add_argument("--big", action="store_true", help="also the scaled traces in benchmarks/out/")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    a = ap.parse_args()
    if a.compare:
        return compare(*a.compare)
    if a.out is None:
        ap.error("OUT is required")
    record(a.out, a.big)
    return 0


if __name__ == "__main__":
    sys.exit(main())
