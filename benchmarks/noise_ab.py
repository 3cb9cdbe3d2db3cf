"""Calibration of the diff's noise call on repeated engine profiles (``benchmarks/RESULTS.md``,
"Noise intervals"): the A/A spread that :data:`traceview.analysis.compare.noise.PRIOR` holds, the
false-positive rate of single-recording A/A pairs against it, and the KV-block change found.

Recordings (``--record``): per setting ``d8`` (``traceview engine profile``'s default: tiny
preset, 8 tokens, 7 decode steps) and ``t32`` (``--max-tokens 32``), ``--n`` recordings of KV
block 128 (``a01`` ...) and of 512 (``b01`` ...), interleaved in time (a, b, a, b ... across both
settings) so that the machine's load falls on every kind alike:

    python benchmarks/noise_ab.py --record --dir /tmp/noise --n 10
    python benchmarks/noise_ab.py --dir /tmp/noise --json /tmp/noise/calibration.json

Analysis (no double dipping): the recordings of each configuration are split by index, odd
ones to the **fit half**, even ones to the **test half**. The prior is fitted on every A/A
pair within the fit half (both configurations, both settings): per population with an
interval at level L (0.90, 0.95, 0.99), how far that interval lies from 1 on the log scale
(0 when it holds 1); the prior's bound at L is the largest over the fit pairs of a pair's L
quantile of those distances: a band that half-wide is cleared by at most 1 - L of the
populations of every fit pair (the load of a shared machine moves whole recordings, so the
pairs differ far more than the populations within one; a quantile pooled over populations
would hold on average, not pair by pair). The step time: the L quantile over the pairs of
its distance. The pooled quantile and the 0.95 quantile of |log ratio| are printed beside it. The false-positive rate (populations flagged /
populations with an interval) is measured with that prior on the A/A pairs of the test half:
every pair, and the disjoint consecutive pairs (02-04, 06-08, ...) whose flags are
independent. KV detection: the pairs (a_i, b_i) recorded one after the other, disjoint; the
decode kernel's population must be significant and slower. ``--fit-only`` prints the fitted
constant for ``traceview/analysis/compare/noise.py``; ``--shipped-prior`` judges the test half with the
prior as shipped instead (the ``t32`` recordings against the prior fitted on ``d8``):

    python benchmarks/noise_ab.py --record --dir /tmp/nq --n 10 --settings t32 --cache /tmp/nq_cache \
        --shipped-prior
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

SETTINGS = {"d8": [], "t32": ["--max-tokens", "32"]}
CONFIGS = {"a": 128, "b": 512}
LEVELS = (0.9, 0.95, 0.99)


def record(root: Path, n: int, settings=tuple(SETTINGS)) -> None:
    """``n`` recordings per configuration and setting, interleaved; existing ones are kept.
    ``--no-precompile``: the engine compiles the profiled run's programs in its warm-up run
    anyway (its logs say "compiles during the main generation: 0"), and recording takes half
    as long."""
    for i in range(1, n + 1):
        for st, extra in ((k, v) for k, v in SETTINGS.items() if k in settings):
            for c, bkv in CONFIGS.items():
                out = root / st / f"{c}{i:02d}"
                if out.exists():
                    continue
                tmp = out.with_name(out.name + ".tmp")
                cmd = [sys.executable, "-m", "traceview.cli", "engine", "profile", "--kv-block", str(bkv), *extra,
                       "--no-precompile", "--log-dir", str(tmp)]
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=1200)
                tmp.rename(out)


def load_sides(root: Path, cache: Path | None = None, upto: int | None = None) -> dict:
    """{setting: {name: DiffSide}} of every finished recording (indices <= ``upto``), each
    pickled under ``cache`` once made."""
    import pickle

    import traceview
    from traceview.analysis.compare.diff import side

    out = {}
    for st in SETTINGS:
        d = root / st
        names = sorted(p.name for p in d.iterdir() if p.is_dir() and not p.name.endswith(".tmp")) if d.exists() else []
        names = [n for n in names if upto is None or _idx(n) <= upto]
        out[st] = {}
        for n in names:
            f = None if cache is None else cache / f"{st}_{n}.pkl"
            if f is not None and f.exists():
                out[st][n] = pickle.loads(f.read_bytes())
                continue
            out[st][n] = side(traceview.load(d / n))
            if f is not None:
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_bytes(pickle.dumps(out[st][n]))
    return out


def _idx(name: str) -> int:
    return int(name[1:])


def halves(names: list[str]) -> tuple[list[str], list[str]]:
    """(fit, test) of one configuration's recordings: odd indices, even indices."""
    return [n for n in names if _idx(n) % 2], [n for n in names if not _idx(n) % 2]


def _excess(c) -> float:
    """How far a change's interval lies from 1 on the log scale (0 when it holds 1)."""
    return max(0.0, math.log(c.lo), -math.log(c.hi))


def aa_values(sa, sb, level: float) -> tuple[list[tuple[float, float]], float | None]:
    """Per population both sides share with samples of one kind and enough of them for an
    interval: (|log Hodges-Lehmann ratio|, how far its interval at ``level`` lies from 1);
    and the step time's distance (None without an interval)."""
    from traceview.analysis.compare import noise

    zero = noise.NoiseBand(0.0, "none", "")
    out = []
    for key, (kind, xa) in sa.samples.by_key.items():
        got = sb.samples.get(key)
        if got is None or got[0] != kind:
            continue
        c = noise.shift(xa, got[1], level=level, band=zero)
        if c.lo is not None and c.ratio:
            out.append((abs(math.log(c.ratio)), _excess(c)))
    c = noise.shift(sa.samples.steps, sb.samples.steps, level=level, band=zero)
    return out, (None if c.lo is None else _excess(c))


def fit(sides: dict, level: float = 0.95, how: str = "max", command: str = ""):
    """The :class:`~traceview.analysis.compare.noise.Prior` of every A/A pair within the fit halves
    (module doc): per level L, the largest over those pairs of the L quantile of a pair's
    populations' interval distances from 1 (the smallest band that kept every fit pair at or
    under 1 - L of its populations flagged); the step time's: the L quantile over the pairs.
    Also returns the pooled L quantile over every population (the bound without the pair
    structure), for the record. ``how="pooled"``: the prior's bound is that pooled quantile
    instead (at most 1 - L of all A/A populations clear it, on average over pairs rather than
    in every pair)."""
    from traceview.analysis.compare import noise

    pairs = []
    for st, S in sides.items():
        for c in CONFIGS:
            fit_names, _ = halves(sorted(n for n in S if n[0] == c))
            pairs += [(S[x], S[y]) for x, y in itertools.combinations(fit_names, 2)]
    if not pairs:
        raise SystemExit("no A/A pair in the fit half: record at least 3 recordings per configuration")
    bounds, step_bounds, pooled, spread, n_pops = {}, {}, {}, 0.0, 0
    for lv in LEVELS:
        per_pair, steps, every = [], [], []
        for a, b in pairs:
            v, st_ex = aa_values(a, b, lv)
            ex = [e for _, e in v]
            if ex:
                per_pair.append(float(np.quantile(ex, lv, method="higher")))
                every += ex
            if st_ex is not None:
                steps.append(st_ex)
            if lv == 0.95:
                n_pops += len(v)
                spread = max(spread, 0.0)
        pooled[lv] = round(float(np.quantile(every, lv, method="higher")), 4)
        bounds[lv] = round(max(per_pair), 4) if how == "max" else pooled[lv]
        step_bounds[lv] = round(float(np.quantile(steps, lv, method="higher")), 4) if steps else bounds[lv]
        if lv == 0.95:
            spread = round(float(np.quantile([r for a, b in pairs for r, _ in aa_values(a, b, lv)[0]], 0.95)), 4)
    for b in (bounds, step_bounds):  # a wider level never gets a narrower band
        for lo, hi in zip(LEVELS, LEVELS[1:]):
            b[hi] = max(b[hi], b[lo])
    prior = noise.Prior(machine="2-core CPU VM",
                        command=command or "python benchmarks/noise_ab.py --fit-only",
                        bounds=bounds, step_bounds=step_bounds, pairs=len(pairs), populations=n_pops, spread95=spread)
    return prior, pooled


def flags(d) -> tuple[int, int]:
    m = d.populations.filter(pl.col("ratio_lo").is_not_null())
    return int(m["significant"].sum() or 0), m.height


def kernel(d) -> dict | None:
    k = d.populations.filter((pl.col("kind") == "kernel") & (pl.col("status") == "matched"))
    if not k.height:
        return None
    r = k.sort("self_ps_base", descending=True).row(0, named=True)
    return {k: r[k] for k in ("median_ratio", "ratio_lo", "ratio_hi", "noise", "noise_band", "n_samples_base",
                              "n_samples_treatment", "significant")}


def calibrate(sides: dict, prior, level: float = 0.95) -> dict:
    from traceview.analysis.compare.diff import diff_sides

    res = {}
    for st, S in sides.items():
        aa, aa_disjoint, kv = [], [], []
        for c in CONFIGS:
            _, test = halves(sorted(n for n in S if n[0] == c))
            disjoint = set(zip(test[0::2], test[1::2]))
            for x, y in itertools.combinations(test, 2):
                f, n = flags(diff_sides(S[x], S[y], noise_level=level, noise_prior=prior))
                row = {"pair": f"{x} vs {y}", "flagged": f, "compared": n}
                aa.append(row)
                if (x, y) in disjoint:
                    aa_disjoint.append(row)
        a_names = sorted(n for n in S if n[0] == "a")
        for x in a_names:
            y = "b" + x[1:]
            if y not in S:
                continue
            d = diff_sides(S[x], S[y], noise_level=level, noise_prior=prior)
            k = kernel(d)
            sc = d.steps.change if d.steps is not None else None
            kv.append({"pair": f"{x} vs {y}", "kernel": k, "found": bool(k and k["significant"] and k["median_ratio"] > 1),
                       "flagged": flags(d), "step": None if sc is None else [sc.ratio, sc.lo, sc.hi, sc.significant]})
        # several recordings a side (the measured band): odd against even indices (A/A), and
        # the KV change on disjoint triples recorded together (a01-a03 against b01-b03, ...)
        from traceview.analysis.compare.pooled import pool

        pooled = []
        for c in CONFIGS:
            names = sorted(n for n in S if n[0] == c)
            odd, even = [n for n in names if _idx(n) % 2], [n for n in names if not _idx(n) % 2]
            if len(odd) > 1 and len(even) > 1:
                d = diff_sides(pool([S[n] for n in odd]), pool([S[n] for n in even]), noise_level=level)
                pooled.append({"pair": f"{'+'.join(odd)} vs {'+'.join(even)}", "flagged": flags(d)})
        for i in range(0, len(a_names) - 2, 3):
            xs = a_names[i:i + 3]
            ys = ["b" + x[1:] for x in xs]
            if all(y in S for y in ys):
                d = diff_sides(pool([S[n] for n in xs]), pool([S[n] for n in ys]), noise_level=level)
                k = kernel(d)
                pooled.append({"pair": f"{'+'.join(xs)} vs {'+'.join(ys)}", "flagged": flags(d), "kernel": k,
                               "band": d.run_noise.text if d.run_noise else None})
        res_pooled = pooled
        tot = lambda rows: (sum(r["flagged"] for r in rows), sum(r["compared"] for r in rows))  # noqa: E731
        res[st] = {"aa_pairs": aa, "aa_rate": tot(aa), "aa_disjoint": aa_disjoint, "aa_disjoint_rate": tot(aa_disjoint),
                   "aa_pairs_with_a_flag": sum(1 for r in aa if r["flagged"]), "kv": kv,
                   "kv_found": sum(r["found"] for r in kv), "kv_pairs": len(kv), "pooled": res_pooled}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/noise", help="where the recordings are (or go)")
    ap.add_argument("--n", type=int, default=10, help="recordings per configuration and setting")
    ap.add_argument("--record", action="store_true", help="record the profiles first")
    ap.add_argument("--fit-only", action="store_true", help="print the fitted prior and stop")
    ap.add_argument("--level", type=float, default=0.95)
    ap.add_argument("--upto", type=int, help="use recordings with index <= N only")
    ap.add_argument("--cache", help="pickle each recording's diff side here (reused by later runs)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--bound", choices=("max", "pooled"), default="max",
                    help="the prior's bound: the largest fit pair's quantile, or the quantile pooled over every pair")
    ap.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated subset of {','.join(SETTINGS)}")
    ap.add_argument("--shipped-prior", action="store_true",
                    help="judge the test half with traceview.analysis.compare.noise.PRIOR as shipped instead of the prior "
                         "fitted here (e.g. the t32 recordings against the prior fitted on d8)")
    a = ap.parse_args(argv)
    root = Path(a.dir)
    settings = tuple(x for x in a.settings.split(",") if x)
    if a.record:
        record(root, a.n, settings)
    t0 = time.perf_counter()
    sides = {k: v for k, v in load_sides(root, Path(a.cache) if a.cache else None, a.upto).items()
             if k in settings and v}
    load_s = time.perf_counter() - t0
    prior, pooled = fit(sides, how=a.bound, command=" ".join(["python", "benchmarks/noise_ab.py",
                                                              *(argv if argv is not None else sys.argv[1:])]))
    print(f"prior fitted on {prior.pairs} A/A pairs of the fit half, {prior.populations} populations:")
    print(f"  pooled quantiles (log, no pair structure) {pooled}")
    print(f"  populations (log) {prior.bounds}; step (log) {prior.step_bounds}; 0.95 quantile of |log ratio| "
          f"{prior.spread95} (±{math.exp(prior.spread95) - 1:.0%})")
    print("  as ratios " + ", ".join(f"{lv}: ±{math.exp(b) - 1:.0%}" for lv, b in prior.bounds.items()))
    print(f"  {prior!r}")
    if a.fit_only:
        return 0
    if a.shipped_prior:
        from traceview.analysis.compare import noise

        prior = noise.PRIOR
        print(f"judged with the shipped prior instead: {prior.bounds} (step {prior.step_bounds}), "
              f"fitted by: {prior.command}")
    res = calibrate(sides, prior, a.level)
    for st, r in res.items():
        (f, n), (fd, nd) = r["aa_rate"], r["aa_disjoint_rate"]
        print(f"[{st}] A/A test half: {f} of {n} populations flagged ({f / max(n, 1):.1%}) over {len(r['aa_pairs'])} "
              f"pairs ({r['aa_pairs_with_a_flag']} pairs with any flag); disjoint pairs {fd} of {nd} "
              f"({fd / max(nd, 1):.1%}) over {len(r['aa_disjoint'])} pairs")
        print(f"[{st}] KV 128 vs 512: kernel significant and slower in {r['kv_found']} of {r['kv_pairs']} pairs")
        for row in r["kv"]:
            k, s = row["kernel"], row["step"]
            ks = "-" if k is None or k["ratio_lo"] is None else (
                f"{k['median_ratio']:.2f}x [{k['ratio_lo']:.2f}-{k['ratio_hi']:.2f}] band ±{k['noise_band'] - 1:.0%} "
                f"{k['noise']} (n {k['n_samples_base']}/{k['n_samples_treatment']})")
            ss = "-" if s is None or s[1] is None else f"{s[0]:.2f}x [{s[1]:.2f}-{s[2]:.2f}] {'sig' if s[3] else '~'}"
            print(f"  | {row['pair']} | {ks} | step {ss} | flagged {row['flagged'][0]} / {row['flagged'][1]} |")
        for row in r["pooled"]:
            k = row.get("kernel")
            ks = "" if k is None or k["ratio_lo"] is None else (
                f" kernel {k['median_ratio']:.2f}x [{k['ratio_lo']:.2f}-{k['ratio_hi']:.2f}] band ±{k['noise_band'] - 1:.0%} "
                f"{k['noise']}")
            print(f"  pooled | {row['pair']} | flagged {row['flagged'][0]} / {row['flagged'][1]} |{ks}")
    out = {"command": " ".join(["python", "benchmarks/noise_ab.py", *(argv if argv is not None else sys.argv[1:])]),
           "load_seconds": round(load_s, 1), "prior": prior.to_dict(), "pooled_quantiles": pooled,
           "halves": "fit: odd recording indices, test: even", "results": res}
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
