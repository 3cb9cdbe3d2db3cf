"""Families across layers, the roofline per family and the ladder (issue 15, points 3-5).

Records (unless already under ``--out``) the bundled engine's profiles and runs the commands
whose figures ``benchmarks/RESULTS.md`` quotes:

1. ``traceview analyze ../shared/traces/vllm_tpu_qwen --by kind``: the FFN matmul of every layer
   as one row with its layer count;
2. ``traceview engine profile --model study --max-num-seqs 8 --batch-mult 2 --max-tokens 8``
   then ``traceview analyze --families study --measure-cpu-peaks``: the study families, their
   sum against the step, and each family's roofline;
3. ``traceview engine profile --max-num-seqs B --batch-mult B/4 --max-tokens 8`` (tiny preset)
   for B = 8, 16, 32, 64, then ``traceview ladder`` over the four, with the default families
   (the attention kernel alone: ``attention/custom kernels``) and with ``--families study``;
   and the same with one KV pool for every batch (``--kv-cache-bytes 4194304``: 256 pages).
   The default pool has pages for every slot at ``--max-model-len``, so it grows with the
   batch, and the Pallas interpreter (CPU) copies the whole pool at each grid step: the
   kernel's CPU time then grows with batch x pool, not with the batch alone.

Usage: ``python benchmarks/family_ladder.py --out /tmp/fams [--shared ../shared/traces]``.
Writes ``OUT/*.json``, ``OUT/*.txt`` and ``OUT/ladder*.html``; prints the figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

TV = [sys.executable, "-m", "traceview.cli"]
BATCHES = (8, 16, 32, 64)
#: one KV pool for every batch: 256 pages of 16 tokens x 1 KiB (tiny preset, float32), room for 64
#: requests of 32 tokens (2 pages each)
KV_BYTES = 4 * 1024 * 1024


def sh(cmd: list[str], out: Path | None = None) -> str:
    print("$ " + " ".join(cmd[2:] if cmd[:2] == [sys.executable, "-m"] else cmd), file=sys.stderr)
    r = subprocess.run(cmd, check=True, capture_output=True, text=True, env={"COLUMNS": "200", **_env()})
    if out is not None:
        out.write_text(r.stdout)
    return r.stdout


def _env() -> dict:
    import os

    return dict(os.environ)


def record(log_dir: Path, *flags: str) -> Path:
    if not any(log_dir.glob("plugins/profile/*/*.xplane.pb")):
        sh([*TV, "engine", "profile", "--log-dir", str(log_dir), *flags])
    return log_dir


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "traces")
    a = ap.parse_args()
    out = a.out
    out.mkdir(parents=True, exist_ok=True)

    # 1. --by kind on the vLLM trace
    vllm = a.shared / "vllm_tpu_qwen"
    if vllm.exists():
        sh([*TV, "analyze", str(vllm), "--by", "kind", "--top", "5", "--no-cache"], out / "vllm_by_kind.txt")
        sh([*TV, "analyze", str(vllm), "--by", "kind", "--top", "5", "-o", str(out / "vllm_by_kind.json"), "--no-cache"])
        top = json.loads((out / "vllm_by_kind.json").read_text())["ops"][0]
        print(f"vLLM --by kind row 1: {top['op_name']} x{top['members']} op names, {top['occurrences']} occurrences, "
              f"{top['per_execution']:g} per program run, {100 * top['share']:.1f}% of op time")

    # 2. the study preset with the study families
    study = record(out / "study", "--model", "study", "--max-num-seqs", "8", "--batch-mult", "2", "--max-tokens", "8")
    sh([*TV, "analyze", str(study), "--families", "study", "--measure-cpu-peaks", "--top", "5", "--no-cache"],
       out / "study_families.txt")
    sh([*TV, "analyze", str(study), "--families", "study", "--measure-cpu-peaks", "-o", str(out / "study.json"),
        "--no-cache"])
    rep = json.loads((out / "study.json").read_text())
    s = rep["family_roofline_summary"]
    named = sum(r["time_ps"] for r in rep["family_roofline"] if r["family"] != "other")
    print(f"study: families {s['time_ps'] / 1e9:.2f} of {s['step_ps'] / 1e9:.2f} ms per step ({100 * s['ratio']:.1f}%), "
          f"the five named ones {named / 1e9:.2f} ms ({100 * named / s['step_ps']:.1f}%) over {s['n_steps']} steps; "
          f"ridge {rep['peaks']['ridge']:.2f} FLOP/byte")
    for r in rep["family_roofline"]:
        print(f"  {r['family']:<10} {r['time_ps'] / 1e9:9.3f} ms {100 * (r['share'] or 0):5.1f}%  "
              f"{(r['flops'] or 0) / 1e6:10.2f} MFLOP {(r['bytes'] or 0) / 1e6:9.2f} MB  "
              f"I={r['intensity'] if r['intensity'] is None else round(r['intensity'], 3)} {r['bound_by']:<8} "
              f"roofline {(r['predicted_ps'] or 0) / 1e9:.3f} ms")

    # 3. the ladder over the tiny preset at four batches
    grown = [str(record(out / f"b{b}", "--max-num-seqs", str(b), "--batch-mult", str(b // 4), "--max-tokens", "8"))
             for b in BATCHES]
    fixed = [str(record(out / f"kv{b}", "--max-num-seqs", str(b), "--batch-mult", str(b // 4), "--max-tokens", "8",
                        "--kv-cache-bytes", str(KV_BYTES))) for b in BATCHES]
    for tag, points, fam in (("default", grown, []), ("study", grown, ["--families", "study"]),
                             ("fixedkv_default", fixed, []), ("fixedkv_study", fixed, ["--families", "study"])):
        sh([*TV, "ladder", *points, *fam, "--measure-cpu-peaks", "--no-cache"], out / f"ladder_{tag}.txt")
        sh([*TV, "ladder", *points, *fam, "--measure-cpu-peaks", "-o", str(out / f"ladder_{tag}.json"), "--no-cache"])
        sh([*TV, "ladder", *points, *fam, "--measure-cpu-peaks", "-o", str(out / f"ladder_{tag}.html"), "--no-cache"])
        lad = json.loads((out / f"ladder_{tag}.json").read_text())
        print(f"ladder ({tag} families), batch {[p['x'] for p in lad['points']]}, ridge {lad['ridge']:.2f} FLOP/byte:")
        for r in lad["scaling"]:
            ts = [t["time_ps"] / 1e9 for t in sorted((t for t in lad["table"] if t["family"] == r["family"]),
                                                     key=lambda t: t["x"])]
            fpd = r["factor_per_doubling"]
            print(f"  {r['family']:<26} " + " ".join(f"{t:8.3f}" for t in ts) + " ms; per doubling "
                  + ("-" if fpd is None else f"{fpd:.2f}x") + "; between points "
                  + " ".join("-" if f is None else f"{f:.2f}x" for f in r["factors"])
                  + ("" if r.get("flops_per_doubling") is None else f"; FLOPs per doubling {r['flops_per_doubling']:.2f}x")
                  + (f"; crosses {r['crosses']} between {r['cross_between']}" if r["crosses"] else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
