"""False-positive rate of the diff's noise marker on repeated engine profiles, and the KV-block
change against it (``benchmarks/RESULTS.md``, "Noise intervals").

Records (``--record``) ``--repeats`` profiles of one configuration and one at ``--kv-block-treatment``
with ``traceview engine profile`` (tiny preset), then reports, per diff:

* consecutive pairs of the repeats (r1-r2, r2-r3, ...): populations with an interval, how many
  are outside the noise (the false-positive rate), the kernel's and the step's change;
* the repeats pooled in two halves (``diff --base r1 r2 r3 --treatment r4 r5 r6``) and
  interleaved halves;
* the KV-block treatment against one repeat and against the first half pooled.

    python benchmarks/noise_ab.py --record --dir /tmp/noise --repeats 6
    python benchmarks/noise_ab.py --dir /tmp/noise          # reuse the recordings

Recordings: ``DIR/r1 ... DIR/rN`` and ``DIR/k<block>``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import polars as pl


def record(dirs: list[tuple[Path, int]], common: list[str]) -> None:
    for d, bkv in dirs:
        cmd = [sys.executable, "-m", "traceview.cli", "engine", "profile", *common, "--kv-block", str(bkv),
               "--log-dir", str(d)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)


def summary(name: str, d) -> dict:
    m = d.populations.filter(pl.col("ratio_lo").is_not_null())
    k = d.populations.filter(pl.col("kind") == "kernel")
    kr = k.row(0, named=True) if k.height else None
    c = d.steps.change if d.steps is not None else None
    return {"diff": name, "compared": m.height, "flagged": int(m["significant"].sum() or 0),
            "rate": (int(m["significant"].sum() or 0) / m.height) if m.height else None,
            "kernel": None if kr is None else [kr["median_ratio"], kr["ratio_lo"], kr["ratio_hi"], kr["noise"]],
            "step": None if c is None else [c.ratio, c.lo, c.hi, c.significant]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/noise", help="where the recordings are (or go)")
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--kv-block", type=int, default=128, help="block of the repeated configuration")
    ap.add_argument("--kv-block-treatment", type=int, default=2048)
    ap.add_argument("--record", action="store_true", help="record the profiles first")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    root = Path(a.dir)
    reps = [root / f"r{i}" for i in range(1, a.repeats + 1)]
    treat = root / f"k{a.kv_block_treatment}"
    common = ["--max-model-len", "2048", "--max-tokens", "32"]
    if a.record:
        record([(r, a.kv_block) for r in reps] + [(treat, a.kv_block_treatment)], common)

    import traceview
    from traceview.analysis.diff import diff_sides, side
    from traceview.analysis.pooled import pool

    t0 = time.perf_counter()
    S = {p.name: side(traceview.load(p)) for p in reps + [treat]}
    load_s = time.perf_counter() - t0
    names = [p.name for p in reps]
    out = []
    for x, y in zip(names, names[1:]):
        t0 = time.perf_counter()
        s = summary(f"{x} vs {y}", diff_sides(S[x], S[y]))
        s["seconds"] = round(time.perf_counter() - t0, 2)
        out.append(s)
    h = len(names) // 2
    first, second = names[:h], names[h:2 * h]
    out.append(summary(f"pooled {'+'.join(first)} vs {'+'.join(second)}",
                       diff_sides(pool([S[n] for n in first]), pool([S[n] for n in second]))))
    odd, even = names[0::2][:h], names[1::2][:h]
    out.append(summary(f"pooled {'+'.join(odd)} vs {'+'.join(even)}",
                       diff_sides(pool([S[n] for n in odd]), pool([S[n] for n in even]))))
    out.append(summary(f"{names[-1]} vs {treat.name}", diff_sides(S[names[-1]], S[treat.name])))
    out.append(summary(f"pooled {'+'.join(first)} vs {treat.name}", diff_sides(pool([S[n] for n in first]),
                                                                                   S[treat.name])))
    pairs = out[:len(names) - 1]
    fp = sum(p["flagged"] for p in pairs), sum(p["compared"] for p in pairs)
    res = {"command": " ".join(["python", "benchmarks/noise_ab.py", *(argv or sys.argv[1:])]),
           "profile_args": common, "load_seconds": round(load_s, 1), "diffs": out,
           "pairs_false_positive_rate": fp[0] / fp[1] if fp[1] else None, "pairs_flagged": fp}
    for r in out:
        k, s = r["kernel"], r["step"]
        ks = "-" if k is None else f"{k[0]:.2f}x [{k[1]:.2f}-{k[2]:.2f}] {k[3]}"
        ss = "-" if s is None or s[1] is None else f"{s[0]:.2f}x [{s[1]:.2f}-{s[2]:.2f}] {'sig' if s[3] else '~'}"
        print(f"| {r['diff']} | {r['flagged']} / {r['compared']} | {ks} | {ss} |")
    print(f"pairs: {fp[0]} of {fp[1]} populations flagged ({res['pairs_false_positive_rate']:.1%})")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
