"""Is a change real or noise: an interval for the ratio of two medians.

:func:`compare` takes two samples of one quantity (base, treatment) and returns a
:class:`Change`: the ratio of medians treatment / base with a confidence interval at
``level``, and whether the interval excludes 1.

Method: **moving-block bootstrap of the ratio of medians, percentile interval.** Each side is
resampled on its own: ``ceil(n / L)`` blocks of ``L = max(1, round(n ** (1/3)))`` consecutive
samples, block starts drawn uniformly (Künsch's moving-block bootstrap, with the block length
of order n^(1/3) it recommends); the interval is the ``(1 - level) / 2`` and ``(1 + level) / 2``
percentiles of the resampled log ratios. Why:

* the median, not the mean: op and step times on a shared CPU are skewed and heavy-tailed
  (a preempted step takes 10x the others); one outlier moves a mean, not a median;
* blocks, not single samples: times recorded in sequence are serially correlated (a burst of
  load slows several steps in a row), so an i.i.d. bootstrap treats correlated samples as
  independent evidence and its interval is too narrow; blocks of consecutive samples keep
  the correlation inside each resampled block;
* samples are execution-level aggregates where the caller has them (the diff passes each
  population's self time per step, :mod:`traceview.analysis.samples`): the occurrences of one
  op within one execution are not independent (they share that execution's cache and load);
* percentile rather than BCa: BCa's acceleration needs a jackknife of the median, which
  is not a vectorised pass; the ratio of medians' bootstrap distribution is near symmetric
  on the log scale, where the percentile interval is taken.

**Several recordings per side** (a list of arrays, one per profile: ``diff --base A1 A2``):
a two-stage bootstrap. Each recording's median is resampled as above; a replicate draws the
side's recordings with replacement and takes the mean of their resampled medians; the point
estimate is the mean of the recordings' medians, and the replicates' spread about it (log
scale) is scaled by ``sqrt(k / (k - 1))`` (resampling k recordings gives (k - 1) / k of the variance of their
mean). Recordings are then the units, so a shift
between recordings of the same configuration (a shared machine's load changed between them)
widens the interval. With one recording per side the interval covers the noise *within* that
recording only, and such a shift is not in it (the diff says so). ``min_effect`` is the
smallest relative change reported as significant (``|ratio - 1| >= min_effect`` as well as an
interval excluding 1); the default is the false-positive rate measured on repeated engine
profiles (``benchmarks/noise_ab.py``, results in ``benchmarks/RESULTS.md``).

Bounded time: a side longer than ``max_samples`` is thinned to every k-th sample for the
bootstrap (the point estimate uses every sample); thinning widens the interval, so a thinned
comparison errs toward "within noise". Resampling runs in chunks of at most
:data:`CHUNK_ELEMENTS` values. Deterministic for a given ``seed``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

#: method name carried by every :class:`Change` (:func:`compare`)
METHOD = "moving-block bootstrap, ratio of medians, percentile interval"
#: method name with several recordings on a side
METHOD_POOLED = "two-stage bootstrap (recordings, then moving blocks), ratio of mean recording medians, percentile interval"
#: default confidence level
LEVEL = 0.95
#: default bootstrap resamples
N_BOOT = 1000
#: default largest sample per side resampled as is (longer ones are thinned)
MAX_SAMPLES = 2000
#: default smallest |ratio - 1| called significant (see the module doc)
MIN_EFFECT = 0.0
#: most values one resampling chunk holds (memory bound: 8 bytes each)
CHUNK_ELEMENTS = 1 << 22
#: fewest samples in a recording for an interval (a percentile bootstrap of a median from a
#: handful of samples is far too narrow)
MIN_SAMPLES = 10


@dataclass(frozen=True)
class Change:
    """Result of :func:`compare`. ``ratio``: median(treatment) / median(base) (None when the
    base median is 0 or a side is empty); ``lo``, ``hi``: its interval at ``level`` (None with
    fewer than :data:`MIN_SAMPLES` samples on a side); ``significant``: the interval excludes
    1 and ``|ratio - 1| >= min_effect``; ``n_base``, ``n_treatment``: samples used;
    ``block``: block lengths (base, treatment); ``method``: :data:`METHOD`, or why there is no
    interval."""

    ratio: float | None
    lo: float | None
    hi: float | None
    level: float
    significant: bool
    method: str
    n_base: int
    n_treatment: int
    median_base: float | None = None
    median_treatment: float | None = None
    block: tuple[int, int] = (0, 0)
    min_effect: float = MIN_EFFECT

    @property
    def within_noise(self) -> bool:
        """True when the change is not significant (including when no interval exists)."""
        return not self.significant

    def marker(self) -> str:
        """``"~"`` for a change within the noise (or without interval), ``""`` otherwise."""
        return "" if self.significant else "~"

    def to_dict(self) -> dict:
        return {"ratio": self.ratio, "lo": self.lo, "hi": self.hi, "level": self.level,
                "significant": self.significant, "method": self.method, "n_base": self.n_base,
                "n_treatment": self.n_treatment, "median_base": self.median_base,
                "median_treatment": self.median_treatment, "block": list(self.block),
                "min_effect": self.min_effect}


def _recordings(x) -> list[np.ndarray]:
    """One finite float64 array per recording: a list of arrays is several, anything else one."""
    parts = x if isinstance(x, (list, tuple)) and x and all(isinstance(p, np.ndarray) for p in x) else [x]
    out = []
    for p in parts:
        a = np.asarray(p, dtype=np.float64).ravel()
        out.append(a[np.isfinite(a)])
    return out


def block_length(n: int) -> int:
    """Moving-block length for ``n`` samples: ``max(1, round(n ** (1/3)))``."""
    return max(1, int(round(n ** (1.0 / 3.0)))) if n > 0 else 0


def _boot_medians(x: np.ndarray, n_boot: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """``n_boot`` medians of moving-block resamples of ``x`` (length n each), and L."""
    n = len(x)
    L = block_length(n)
    nb = -(-n // L)
    offs = np.arange(L)
    out = np.empty(n_boot, dtype=np.float64)
    per = max(1, CHUNK_ELEMENTS // max(nb * L, 1))
    for a in range(0, n_boot, per):
        k = min(per, n_boot - a)
        starts = rng.integers(0, n - L + 1, size=(k, nb))
        idx = (starts[:, :, None] + offs).reshape(k, nb * L)[:, :n]
        out[a:a + k] = np.median(x[idx], axis=1)
    return out, L


def compare(base_samples, treatment_samples, *, level: float = LEVEL, seed: int = 0, n_boot: int = N_BOOT,
            max_samples: int = MAX_SAMPLES, min_effect: float = MIN_EFFECT) -> Change:
    """Ratio of medians treatment / base with its moving-block bootstrap interval (module doc).

    ``base_samples``, ``treatment_samples``: 1-D array-likes of one quantity in sample order
    (e.g. ps per step), or lists of such arrays, one per recording (two-stage bootstrap, module
    doc); non-finite values are dropped. ``level`` in (0, 1); ``n_boot`` >= 100; ``max_samples`` >=
    10. Raises ValueError for a level, ``n_boot``, ``max_samples`` or ``min_effect`` out of
    range.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if n_boot < 100:
        raise ValueError(f"n_boot must be >= 100, got {n_boot!r}")
    if max_samples < 10:
        raise ValueError(f"max_samples must be >= 10, got {max_samples!r}")
    if not min_effect >= 0:
        raise ValueError(f"min_effect must be >= 0, got {min_effect!r}")
    rb = [r for r in _recordings(base_samples) if len(r)]
    rt = [r for r in _recordings(treatment_samples) if len(r)]
    mb = float(np.mean([np.median(r) for r in rb])) if rb else None
    mt = float(np.mean([np.median(r) for r in rt])) if rt else None
    ratio = mt / mb if mb and mt is not None else None
    nb, nt = sum(len(r) for r in rb), sum(len(r) for r in rt)
    common = dict(level=level, n_base=nb, n_treatment=nt, median_base=mb, median_treatment=mt,
                  min_effect=min_effect)
    if any(len(r) < MIN_SAMPLES for r in rb + rt) or not rb or not rt:
        return Change(ratio, None, None, significant=False,
                      method=f"no interval: fewer than {MIN_SAMPLES} samples in a recording", **common)
    if ratio is None or mb <= 0 or mt <= 0:
        return Change(ratio, None, None, significant=False, method="no interval: a median is not positive",
                      **common)
    rng = np.random.default_rng(seed)
    bb, lb = _side_boot(rb, n_boot, max_samples, rng)
    bt, lt = _side_boot(rt, n_boot, max_samples, rng)
    method = METHOD_POOLED if len(rb) > 1 or len(rt) > 1 else METHOD
    with np.errstate(divide="ignore", invalid="ignore"):
        logr = np.log(bt) - np.log(bb)
    logr = logr[np.isfinite(logr)]
    if len(logr) < n_boot // 2:
        return Change(ratio, None, None, significant=False,
                      method="no interval: most resampled medians are 0", **common)
    q = (1 - level) / 2
    lo, hi = (float(math.exp(min(max(v, -700.0), 700.0))) for v in np.quantile(logr, [q, 1 - q]))
    sig = (lo > 1 or hi < 1) and abs(ratio - 1) >= min_effect
    return Change(ratio, lo, hi, significant=bool(sig), method=method, block=(lb, lt), **common)


def _side_boot(recs: list[np.ndarray], n_boot: int, max_samples: int, rng: np.random.Generator):
    """``n_boot`` replicates of one side's statistic (module doc) and its largest block length."""
    meds, ls = [], []
    for r in recs:
        if len(r) > max_samples:
            r = r[:: -(-len(r) // max_samples)]
        m, L = _boot_medians(r, n_boot, rng)
        meds.append(m)
        ls.append(L)
    if len(meds) == 1:
        return meds[0], ls[0]
    m = np.stack(meds)  # (recordings, n_boot)
    k = len(meds)
    pick = rng.integers(0, k, size=(k, n_boot))
    rep = m[pick, np.arange(n_boot)].mean(axis=0)
    # resampling k recordings gives (k - 1) / k of the variance of their mean: rescale the
    # replicates' spread about the point estimate by sqrt(k / (k - 1)), on the log scale
    # (where the interval is taken; it keeps them positive)
    centre = float(np.mean([np.median(r) for r in recs]))
    if centre <= 0:
        return rep, max(ls)
    with np.errstate(divide="ignore", invalid="ignore"):
        rep = centre * np.exp((np.log(rep) - math.log(centre)) * math.sqrt(k / (k - 1)))
    return rep, max(ls)


#: fewest populations with an interval for a run-to-run estimate (:func:`run_to_run`)
MIN_POPULATIONS = 8


@dataclass(frozen=True)
class RunNoise:
    """The run-to-run part of a one-recording-per-side diff (:func:`run_to_run`): ``common``
    (the median ratio over the populations compared: the whole run's shift), ``dispersion``
    (robust standard deviation of the populations' log ratios about it, 1.4826 x MAD),
    ``populations`` (how many were compared)."""

    common: float
    dispersion: float
    populations: int

    def to_dict(self) -> dict:
        return {"common_ratio": self.common, "dispersion_log": self.dispersion, "populations": self.populations}


def run_to_run(changes) -> RunNoise | None:
    """The run-to-run noise estimated from the populations of one diff (``changes``: their
    :class:`Change`\\ s; those without an interval are skipped), or None with fewer than
    :data:`MIN_POPULATIONS`.

    With one recording per side, the bootstrap intervals hold the noise within each
    recording, not the shift between two recordings of one configuration (a shared machine's
    load, frequency, memory placement): ``benchmarks/noise_ab.py`` measured 46% of the
    populations of identical configurations outside their intervals. Most populations of a
    diff are untouched by its treatment, so their changes are a sample of that run-to-run
    noise: a common shift (their median log ratio) and a spread about it. This is the
    normalisation of differential-expression analysis (each sample scaled by its median
    ratio to the others; Anders & Huber 2010, DESeq) with a robust dispersion (1.4826 x the
    median absolute deviation estimates a normal standard deviation)."""
    logs = [math.log(c.ratio) for c in changes if c is not None and c.lo is not None and c.ratio and c.ratio > 0]
    if len(logs) < MIN_POPULATIONS:
        return None
    a = np.asarray(logs)
    common = float(np.median(a))
    return RunNoise(common=math.exp(common), dispersion=float(1.4826 * np.median(np.abs(a - common))),
                    populations=len(logs))


def beyond_run_noise(c: Change, rn: RunNoise, level: float = LEVEL) -> bool:
    """Whether ``c`` (significant on its own interval) also stands out of the run-to-run
    noise ``rn``: its log ratio differs from the common shift by more than z x sqrt(se² +
    dispersion²), se the half-width of its log interval over z, z the normal quantile of
    ``(1 + level) / 2``."""
    if not c.significant or c.lo is None or c.hi is None or not c.ratio or c.ratio <= 0:
        return False
    z = NormalDist().inv_cdf((1 + level) / 2)
    se = (math.log(c.hi) - math.log(c.lo)) / (2 * z)
    return abs(math.log(c.ratio) - math.log(rn.common)) > z * math.sqrt(se * se + rn.dispersion ** 2)
