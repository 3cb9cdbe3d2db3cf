"""Is a change real or noise: two tests of one quantity sampled on two sides.

:func:`shift` (the diff's test) takes every sample of each side (e.g. a population's self
time per step) and returns a :class:`Change`: the Hodges-Lehmann ratio treatment / base with
an exact rank interval at ``level``, judged against the **run-to-run noise** (a
:class:`NoiseBand`): the change is significant only when its whole interval lies beyond the
band. Every band holds 1, so an interval holding 1 (no change) is not significant even where
the band is unknown; only an interval excluding 1 against an unknown band gets no verdict.

* Interval: the pairwise log ratios log t_j - log b_i, sorted (D_(1) .. D_(nm)); the estimate
  is their median, the interval [D_(k), D_(nm+1-k)] with k from the exact null distribution of
  the Mann-Whitney count (:func:`u_counts`, :func:`rank_k`; its normal limit past
  :data:`EXACT_MAX`): the Moses / Hodges-Lehmann interval for a shift (Lehmann,
  *Nonparametrics*, 2.6), distribution-free, with coverage >= ``level`` at any n for i.i.d.
  continuous samples, so 5 steps a side (4 at 0.95) suffice; fewer say how many more to record
  (:func:`more_samples`). Ranks need no outlier removal: a preempted step moves one rank.
* Band: one recording a side cannot show how far two recordings of one configuration drift
  apart (a shared machine's load, frequency, placement); that drift is the stated
  :data:`PRIOR`, the A/A spread measured on the machine class (quantiles of |log ratio| over
  A/A recording pairs, ``benchmarks/noise_ab.py``); several recordings a side measure it
  (:func:`measured_band`: the two-sample t half-width of the recordings' log medians). Never
  the treatment's own populations: a treatment that slows everything would hide in them.

The history (:mod:`traceview.analysis.compare.history`) judges step times with the same test and band.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

#: default confidence level
LEVEL = 0.95
#: default smallest |ratio - 1| called significant (kept on :class:`Change` for its readers)
MIN_EFFECT = 0.0


@dataclass(frozen=True)
class Change:
    """Result of :func:`shift`. ``ratio``: the Hodges-Lehmann ratio treatment / base (None when
    a side is empty); ``lo``, ``hi``: its rank interval at ``level`` (None with too few samples:
    ``more_samples`` says how many more each side needs); ``significant``: the interval lies
    beyond ``band`` (the run-to-run noise); an interval holding 1 (no change) is never
    significant, whatever the band; None when the band is unknown and the interval excludes 1
    (``verdict`` says which); ``noise_source``: the
    band in words; ``n_base``, ``n_treatment``: samples used; ``median_base`` /
    ``median_treatment``: the mean of each side's recording medians; ``method``:
    :data:`METHOD_RANK`, or why there is no interval."""

    ratio: float | None
    lo: float | None
    hi: float | None
    level: float
    significant: bool | None
    method: str
    n_base: int
    n_treatment: int
    median_base: float | None = None
    median_treatment: float | None = None
    min_effect: float = MIN_EFFECT
    band: "NoiseBand | None" = None
    noise_source: str = ""
    more_samples: int | None = None

    @property
    def verdict(self) -> str:
        """``"no interval"`` (too few samples, or a side without sample), ``"significant"``
        (the interval lies beyond the band), ``"within noise"`` (it reaches into a known
        band), ``"no change"`` (it holds 1 and the band is unknown: not significant, whatever
        the band) or ``"unknown"`` (it excludes 1 and the band is unknown)."""
        if self.lo is None or self.hi is None:
            return VERDICT_NO_INTERVAL
        if self.significant is None:
            return VERDICT_UNKNOWN
        if self.significant:
            return VERDICT_SIGNIFICANT
        return VERDICT_NO_CHANGE if self.band is not None and not self.band.known else VERDICT_WITHIN

    @property
    def reason(self) -> str:
        """The verdict in words: why the change is, is not, or may be significant."""
        return {VERDICT_NO_INTERVAL: self.method,
                VERDICT_SIGNIFICANT: "the interval lies beyond the run-to-run noise",
                VERDICT_WITHIN: "the interval reaches into the run-to-run noise",
                VERDICT_NO_CHANGE: "not significant: the interval contains no change",
                VERDICT_UNKNOWN: "significance unknown: the interval excludes no change, the run-to-run "
                                 "noise is unknown"}[self.verdict]

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
                "median_treatment": self.median_treatment,
                "min_effect": self.min_effect,
                "noise_band": None if self.band is None else self.band.to_dict(),
                "noise_source": self.noise_source, "more_samples": self.more_samples,
                "verdict": self.verdict, "reason": self.reason}


def _recordings(x) -> list[np.ndarray]:
    """One finite float64 array per recording: a list of arrays is several, anything else one."""
    parts = x if isinstance(x, (list, tuple)) and x and all(isinstance(p, np.ndarray) for p in x) else [x]
    out = []
    for p in parts:
        a = np.asarray(p, dtype=np.float64).ravel()
        out.append(a[np.isfinite(a)])
    return out


# -- the diff's test: a rank interval judged against the run-to-run noise ----------------------

#: :attr:`Change.verdict` values
VERDICT_NO_INTERVAL, VERDICT_SIGNIFICANT, VERDICT_WITHIN = "no interval", "significant", "within noise"
VERDICT_NO_CHANGE, VERDICT_UNKNOWN = "no change", "unknown"
#: method name of :func:`shift`
METHOD_RANK = "Hodges-Lehmann ratio (median of pairwise ratios), exact Mann-Whitney interval"
#: largest side :func:`shift` ranks as is (n x m pairwise ratios; a longer side is thinned)
MAX_RANK_SAMPLES = 1500
#: sides up to this size get the exact Mann-Whitney distribution (larger: its normal limit)
EXACT_MAX = 50
#: a side this short is ranked exactly whatever the other's length (the normal limit of U is
#: far off there: 1 vs 100 samples would get no interval)
EXACT_SMALL_SIDE = 4


@functools.lru_cache(maxsize=512)
def u_counts(n: int, m: int) -> tuple[int, ...]:
    """Number of orderings of ``n`` + ``m`` distinct values giving each Mann-Whitney count
    U = #{(i, j): x_i < y_j}, U = 0 .. n·m (they sum to C(n+m, n)): the coefficients of the
    Gaussian binomial [n+m choose n]_q = prod_{i=1..n} (1 - q^(m+i)) / (1 - q^i) (Mann &
    Whitney 1947; Andrews, *The Theory of Partitions*, 3.3). Exact integers."""
    c = [0] * (n * m + 1)
    c[0] = 1
    top = 0
    for i in range(1, n + 1):
        top += m
        s = m + i
        for k in range(top, s - 1, -1):  # times (1 - q^(m+i))
            c[k] -= c[k - s]
        for k in range(i, top + 1):  # divided by (1 - q^i): exact, the quotient is a polynomial
            c[k] += c[k - i]
    return tuple(c)


def rank_k(n: int, m: int, level: float) -> int:
    """The order k of the Hodges-Lehmann interval [D_(k), D_(nm+1-k)] (D the sorted n·m
    pairwise differences): the largest k with P(U <= k - 1) <= (1 - level) / 2 under the null,
    exact for sides up to :data:`EXACT_MAX` or a side up to :data:`EXACT_SMALL_SIDE`, else
    the normal limit of U (mean nm/2, variance nm(n+m+1)/12, continuity-corrected). 0 when no k qualifies (too few samples).
    Coverage >= ``level`` for a pure shift of continuous i.i.d. samples (Lehmann,
    *Nonparametrics*, 2.6)."""
    a = (1 - level) / 2
    if n < 1 or m < 1:
        return 0
    if max(n, m) <= EXACT_MAX or min(n, m) <= EXACT_SMALL_SIDE:
        c = u_counts(min(n, m), max(n, m))  # U's null distribution is the same with the sides swapped
        total = math.comb(n + m, n)
        lim = a * total
        k, run = 0, 0
        for u in range(n * m + 1):
            run += c[u]
            if run > lim:
                break
            k = u + 1
        return k
    N = n * m
    sd = math.sqrt(N * (n + m + 1) / 12)
    u = math.floor(N / 2 - 0.5 + NormalDist().inv_cdf(a) * sd)
    return max(0, u + 1)


def more_samples(n: int, m: int, level: float) -> int:
    """How many more samples each side needs for a rank interval at ``level``: the smallest
    j >= 0 with :func:`rank_k` (n + j, m + j) >= 1."""
    j = 0
    while rank_k(n + j, m + j, level) < 1:
        j += 1
    return j


@dataclass(frozen=True)
class Prior:
    """The run-to-run noise of one recording per side on a machine class, measured on A/A
    pairs (two recordings of one configuration; ``command`` names the measurement).
    ``bounds[level]`` (log scale): the ``level`` quantile, over the populations of the A/A
    pairs, of how far a population's rank interval at ``level`` lies from 1 (max(0, log lo,
    -log hi): 0 when it holds 1), so that at most 1 - ``level`` of A/A populations clear the
    band; ``step_bounds[level]``: the same for the step time. ``machine``: the machine class
    in words; ``pairs``, ``populations``: what it was fitted on; ``spread95``: the 0.95
    quantile of |log ratio| over those populations (the raw A/A spread, for reference)."""

    machine: str
    command: str
    bounds: dict
    step_bounds: dict
    pairs: int
    populations: int
    spread95: float = 0.0
    #: device kinds (``CPU``, ``TPU``, ``GPU``) whose recordings it was fitted on; a profile of
    #: another kind has no prior (its run-to-run noise is unknown)
    device_kinds: tuple = ("CPU",)

    def applies_to(self, kinds) -> bool:
        """Whether the prior was measured on every device kind of ``kinds`` (an empty set:
        unknown kinds, no)."""
        kinds = set(kinds)
        return bool(kinds) and kinds <= set(self.device_kinds)

    def bound(self, level: float, step: bool = False) -> tuple[float, float]:
        """(log half-width, the level it was measured at): the bound at the smallest measured
        level >= ``level`` (the largest measured level when ``level`` is above them all).
        ``step``: the step time's bound."""
        b = self.step_bounds if step else self.bounds
        lv = min((x for x in b if x >= level - 1e-9), default=max(b))
        return b[lv], lv

    def to_dict(self) -> dict:
        return {"machine": self.machine, "command": self.command,
                "bounds_log": {str(k): v for k, v in self.bounds.items()},
                "step_bounds_log": {str(k): v for k, v in self.step_bounds.items()}, "pairs": self.pairs,
                "populations": self.populations, "spread95_log": self.spread95,
                "device_kinds": list(self.device_kinds)}


#: the A/A run-to-run noise of single engine recordings (``traceview engine profile``, tiny
#: preset, 7 decode steps, KV block 128 or 512) on the project's 2-core CPU VM with nothing
#: else running: fitted by the command named on the odd-indexed half of 10 + 10 interleaved
#: recordings, the 0.95 quantile of every fit pair's populations pooled (``benchmarks/RESULTS.md``,
#: "Noise intervals", the issue 24 section)
PRIOR = Prior(
    machine="2-core CPU VM",
    command="python benchmarks/noise_ab.py --record --dir /tmp/nq --n 10 --settings d8 --cache /tmp/nq_cache "
            "--bound pooled",
    bounds={0.9: 0.26, 0.95: 0.2956, 0.99: 0.3113},
    step_bounds={0.9: 0.3201, 0.95: 0.3201, 0.99: 0.3201},
    pairs=20, populations=1280, spread95=0.603,
)


@dataclass(frozen=True)
class NoiseBand:
    """Run-to-run noise a change must clear: ratios within [exp(-bound), exp(bound)] are
    noise. ``source``: "prior" (:data:`PRIOR`, one recording a side), "recordings"
    (measured from the recordings of each side, :func:`measured_band`), "stated"
    (:func:`stated_band`) or "unknown" (:func:`unknown_band`); ``text`` says which
    in words; ``recordings``: (base, treatment)."""

    bound: float
    source: str
    text: str
    recordings: tuple[int, int] = (1, 1)

    @property
    def known(self) -> bool:
        """False for :func:`unknown_band` (no run-to-run noise to judge against)."""
        return math.isfinite(self.bound)

    def to_dict(self) -> dict:
        if not self.known:
            return {"bound_log": None, "band": None, "source": self.source, "text": self.text,
                    "recordings": list(self.recordings)}
        return {"bound_log": self.bound, "band": [math.exp(-self.bound), math.exp(self.bound)],
                "source": self.source, "text": self.text, "recordings": list(self.recordings)}


def unknown_band(kinds) -> NoiseBand:
    """The band of one recording a side on device kinds no prior was measured on: unknown
    (infinite bound): a change whose interval excludes 1 is neither significant nor within
    noise there; one whose interval holds 1 is no change (not significant)."""
    k = ", ".join(sorted(kinds)) or "unknown"
    return NoiseBand(math.inf, "unknown", f"run-to-run noise unknown: no A/A prior for {k} devices "
                                         f"(pool 2 or more recordings a side to measure it)")


def stated_band(fraction: float) -> NoiseBand:
    """The band of a run-to-run noise the user states (``fraction``: 0.1 for ±10%, measured on
    their own A/A runs). Raises ValueError for a negative or non-finite fraction."""
    if not (fraction >= 0 and math.isfinite(fraction)):
        raise ValueError(f"the run-to-run noise must be a finite fraction >= 0, got {fraction!r}")
    return NoiseBand(math.log1p(fraction), "stated", f"stated run-to-run noise ±{fraction:.0%}")


def prior_band(level: float = LEVEL, prior: Prior | None = None, step: bool = False) -> NoiseBand:
    """The :class:`NoiseBand` of ``prior`` (default :data:`PRIOR`) at ``level``; ``step``: the
    step time's."""
    prior = PRIOR if prior is None else prior
    b, lv = prior.bound(level, step)
    return NoiseBand(b, "prior", f"prior: A/A spread on {prior.machine}, ±{math.exp(b) - 1:.0%} "
                                 f"({lv:.0%} bound over {prior.pairs} A/A recording pairs)")


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile for ``p`` in (0.5, 1) and integer ``df`` >= 1: bisection on the
    closed-form CDF for integer degrees of freedom (Abramowitz & Stegun 26.7.3-4)."""
    def two_sided(t: float) -> float:  # P(|T| < t)
        th = math.atan(t / math.sqrt(df))
        c2, s = math.cos(th) ** 2, math.sin(th)
        if df % 2:
            term, acc = math.cos(th), 0.0
            for j in range(1, (df - 1) // 2 + 1):
                acc += term
                term *= c2 * (2 * j) / (2 * j + 1)
            return 2 / math.pi * (th + s * acc) if df > 1 else 2 / math.pi * th
        term, acc = 1.0, 0.0
        for j in range(1, df // 2 + 1):
            acc += term
            term *= c2 * (2 * j - 1) / (2 * j)
        return s * acc

    want = 2 * p - 1
    lo, hi = 0.0, 1.0
    while two_sided(hi) < want:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if two_sided(mid) < want else (lo, mid)
    return (lo + hi) / 2


def measured_band(base: list[np.ndarray], treatment: list[np.ndarray], level: float = LEVEL) -> NoiseBand | None:
    """Run-to-run noise measured from several recordings per side (lists of sample arrays,
    one per recording): the pooled standard deviation s of the recordings' log medians about
    their side's mean, df = k + l - 2, and the band t_df((1 + level) / 2) · s · sqrt(1/k + 1/l)
    (the two-sample t interval's half-width on recordings as units). None when df < 1 (one
    recording a side) or a median is not positive."""
    k, l = len(base), len(treatment)
    df = k + l - 2
    if df < 1:
        return None
    ss = 0.0
    for side in (base, treatment):
        meds = [float(np.median(r)) for r in side]
        if min(meds) <= 0:
            return None
        lg = np.log(meds)
        ss += float(((lg - lg.mean()) ** 2).sum())
    s = math.sqrt(ss / df)
    b = t_quantile((1 + level) / 2, df) * s * math.sqrt(1 / k + 1 / l)
    return NoiseBand(b, "recordings", f"measured from {k + l} recordings ({k} + {l}), ±{math.exp(b) - 1:.0%}",
                     recordings=(k, l))


def _positive_parts(x) -> list[np.ndarray]:
    return [r[r > 0] for r in _recordings(x)]


def _thin(x: np.ndarray, k: int) -> np.ndarray:
    """``k`` of the values of ``x``, drawn without replacement by a fixed-seed generator (the
    same draw every run). An even stride is not used: on periodic samples (steps cycling
    through programs, an op's occurrences within a step) it keeps one phase of the cycle, and
    a side repeating the other's samples 100 times came out 0.68x [0.58x-0.83x]."""
    return x[np.sort(np.random.default_rng(0).choice(len(x), size=k, replace=False))]


#: below this many pairwise differences they are all formed and partitioned
_DIRECT_PAIRS = 1 << 16
#: pairs drawn to bracket an order statistic, and the half-width of the bracket in standard
#: errors of the drawn quantile
_BRACKET_DRAW, _BRACKET_Z = 16384, 5.0


def _row_counts(a: np.ndarray, b: np.ndarray, v: float, strict: bool) -> np.ndarray:
    """Per row i, #{j: a_j - b_i < v} (``strict``) or <= v, the difference rounded as float64
    subtraction rounds it. ``a`` sorted ascending; rounding is monotone, so each row's
    differences are sorted too and the count is a prefix, found by a search on a_j vs v + b_i
    and corrected where that sum rounded across the boundary."""
    side = "left" if strict else "right"
    idx = np.searchsorted(a, v + b, side=side)
    m = len(a)
    past = (lambda d: d >= v) if strict else (lambda d: d > v)
    while True:  # step back over entries beyond v
        bad = (idx > 0) & past(a[np.maximum(idx - 1, 0)] - b)
        if not bad.any():
            break
        idx[bad] -= 1
    while True:  # step over entries still within v
        bad = (idx < m) & ~past(a[np.minimum(idx, m - 1)] - b)
        if not bad.any():
            break
        idx[bad] += 1
    return idx


def _every_pair(t: np.ndarray, b: np.ndarray, ks: list[int]) -> list[float]:
    part = np.partition(np.subtract.outer(t, b).ravel(), ks)
    return [part[k] for k in ks]


def difference_order_stats(t, b, ks) -> list[float]:
    """The order statistics ``ks`` (0-based, ascending) of the n·m differences t_j - b_i
    computed in float64: bit for bit ``np.partition(np.subtract.outer(t, b).ravel(), ks)[ks]``,
    without forming the n·m array. Each is bracketed between two quantiles of a fixed-seed
    draw of pairs, the differences inside the bracket gathered row by row (each row sorted,
    :func:`_row_counts`) and partitioned: O((n + m) log(n + m)) plus the bracket's size,
    about n·m·2·_BRACKET_Z/sqrt(_BRACKET_DRAW) (cf. Monahan, *ACM TOMS* 10 (1984), alg. 616,
    for the Hodges-Lehmann estimator). A bracket that misses falls back to the full partition.
    Sides with few distinct values (ties) are ranked as distinct pairs weighted by their counts."""
    t = np.sort(np.asarray(t, dtype=np.float64))
    b = np.sort(np.asarray(b, dtype=np.float64))
    n_pairs = len(t) * len(b)
    ks = [int(k) for k in ks]
    if n_pairs <= _DIRECT_PAIRS:
        return _every_pair(t, b, ks)
    tu, tc = np.unique(t, return_counts=True)
    bu, bc = np.unique(b, return_counts=True)
    if len(tu) * len(bu) <= _DIRECT_PAIRS:  # few distinct values: weigh each distinct pair
        d = np.subtract.outer(tu, bu).ravel()
        order = np.argsort(d, kind="stable")
        upto = np.cumsum(np.multiply.outer(tc, bc).ravel()[order])
        return [d[order[np.searchsorted(upto, k, side="right")]] for k in ks]
    rng = np.random.default_rng(0)
    drawn = np.sort(t[rng.integers(len(t), size=_BRACKET_DRAW)] - b[rng.integers(len(b), size=_BRACKET_DRAW)])
    out = []
    for k in ks:
        q = (k + 0.5) / n_pairs
        half = _BRACKET_Z * math.sqrt(q * (1 - q) * _BRACKET_DRAW) + 2
        lo_at, hi_at = math.floor(q * _BRACKET_DRAW - half), math.ceil(q * _BRACKET_DRAW + half)
        lo = _row_counts(t, b, drawn[lo_at], True) if lo_at >= 0 else np.zeros(len(b), np.int64)
        hi = (_row_counts(t, b, drawn[hi_at], False) if hi_at < _BRACKET_DRAW
              else np.full(len(b), len(t), np.int64))
        below = int(lo.sum())
        if not below <= k < int(hi.sum()):  # the draw missed the order statistic
            return _every_pair(t, b, ks)
        sizes = hi - lo
        rows = np.repeat(np.arange(len(b)), sizes)
        cols = np.arange(len(rows)) - np.repeat(np.cumsum(sizes) - sizes, sizes) + np.repeat(lo, sizes)
        inside = t[cols] - b[rows]
        out.append(np.partition(inside, k - below)[k - below])
    return out


def shift(base_samples, treatment_samples, *, level: float = LEVEL, band: NoiseBand | None = None,
          prior: Prior | None = None, step: bool = False, max_samples: int = MAX_RANK_SAMPLES) -> Change:
    """The change treatment / base of one quantity judged against the run-to-run noise.

    ``base_samples``, ``treatment_samples``: 1-D array-likes of positive values (e.g. ps per
    step), or lists of such arrays, one per recording; values <= 0 and non-finite ones are
    left out. Point estimate: the Hodges-Lehmann ratio exp(median of log t_j - log b_i over
    all pairs); interval: [D_(k), D_(nm+1-k)] of the sorted pairwise log ratios
    (:func:`rank_k`), every sample of every recording pooled per side (a side longer than
    ``max_samples`` is thinned to a fixed-seed random draw of that many, which widens the interval). ``band``: the
    noise to clear (:func:`unknown_band`: ``significant`` is None, no verdict, unless the
    interval holds 1); by default :func:`measured_band` when a side has several recordings,
    else :func:`prior_band` of ``prior`` (default :data:`PRIOR`; ``step``: its step-time bound).
    Significant when the
    interval lies wholly beyond the band (lo > exp(bound) or hi < exp(-bound)); an interval
    holding 1 is not significant under any band, an unknown one included. Without an
    interval (too few samples), ``more_samples`` says how many more each side needs.
    Raises ValueError for a level outside (0, 1) or ``max_samples`` < 10.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if max_samples < 10:
        raise ValueError(f"max_samples must be >= 10, got {max_samples!r}")
    rb = [r for r in _positive_parts(base_samples) if len(r)]
    rt = [r for r in _positive_parts(treatment_samples) if len(r)]
    xb = np.concatenate(rb) if rb else np.zeros(0)
    xt = np.concatenate(rt) if rt else np.zeros(0)
    n, m = len(xb), len(xt)
    mb = float(np.mean([np.median(r) for r in rb])) if rb else None
    mt = float(np.mean([np.median(r) for r in rt])) if rt else None
    if band is None:
        band = ((measured_band(rb, rt, level) if len(rb) > 1 or len(rt) > 1 else None)
                or prior_band(level, prior, step))
    common = dict(level=level, n_base=n, n_treatment=m, median_base=mb, median_treatment=mt,
                  band=band, noise_source=band.text)
    if n == 0 or m == 0:
        return Change(None, None, None, significant=False, method="no interval: a side has no positive sample",
                      **common)
    if n > max_samples:
        xb = _thin(xb, max_samples)
    if m > max_samples:
        xt = _thin(xt, max_samples)
    N = len(xb) * len(xt)
    mid = [(N - 1) // 2, N // 2]
    k = rank_k(len(xb), len(xt), level)
    kth = sorted(set(mid + ([k - 1, N - k] if k else [])))
    part = dict(zip(kth, difference_order_stats(np.log(xt), np.log(xb), kth)))
    ratio = float(math.exp((part[mid[0]] + part[mid[1]]) / 2))
    if k == 0:
        more = more_samples(len(xb), len(xt), level)
        return Change(ratio, None, None, significant=False, more_samples=more,
                      method=f"no interval: {n} vs {m} samples, record {more} more a side", **common)
    lo, hi = float(math.exp(part[k - 1])), float(math.exp(part[N - k]))
    if not band.known:  # no run-to-run noise to clear: every band holds 1, so an interval
        # holding 1 is no change whatever the band; one excluding 1 gets no verdict
        return Change(ratio, lo, hi, significant=False if lo <= 1 <= hi else None, method=METHOD_RANK, **common)
    sig = lo > math.exp(band.bound) or hi < math.exp(-band.bound)
    return Change(ratio, lo, hi, significant=bool(sig), method=METHOD_RANK, **common)
