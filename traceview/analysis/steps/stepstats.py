"""Step distributions: per-step records, outlier steps and the analysed window.

:func:`annotate` takes the steps frame of :func:`traceview.analysis.steps.anatomy.find_steps` and adds,
per (host, device) step:

* ``gap_before_ps`` (Int64): the previous step's ``gap_after_ps`` (previous step end to this
  step's start, ps); null for a device's first step.
* ``outlier`` (Boolean): the step's ``duration_ps`` is an outlier among its device's steps by
  the median-absolute-deviation rule of Iglewicz & Hoaglin (1993, "How to Detect and Handle
  Outliers"): modified z = 0.6745·|x − median| / MAD, an outlier when z > ``threshold``
  (default 3.5, their recommendation), both ways (a long warm-up step and a cut-short last
  step). Edge cases, each chosen so the median of the remaining steps is the steady state:

  - steps that execute different compiled programs (``program_id``: a shape sweep's
    buckets) are judged against their own program's steps on the device, never against
    another program's;
  - a device with fewer than :data:`POOL_BELOW` (8) steps of a module that other devices run
    too is judged against the median and MAD of that module's steps on every device (SPMD
    programs run the same step everywhere): with 4 steps of which 2 are warm-up, a device's
    own median sits between the regimes and flags nothing (the MI300X conv trace's GPU:0:
    43 and 46 ms steps beside 1-4 ms, while its 7 other GPUs' steps are ~1 ms);
  - fewer than :data:`MIN_STEPS` (3) steps in the reference (the device's, or the pooled
    ones): nothing is flagged (two durations cannot say which one is usual);
  - MAD = 0 (more than half the steps have the same duration): a step off the median is an
    outlier (z is infinite), one on it is not (z = 0); all-identical steps flag nothing;
  - a step within ``min_rel`` (default 20%) of the median is never an outlier, however small
    the MAD: on a TPU the MAD can be 0.002% of the step (timer jitter), and a step 0.01%
    slower is not another regime; on a loaded CPU, decode steps 1.1-1.2x the median come and
    go between two recordings of one configuration (the engine profiles of the test suite),
    while compilation or a first execution makes a step several times the median.

* ``reason`` (Utf8, null when not an outlier): ``"4.9x the median"`` (or ``0.2x``; ``"4.9x its
  program's median"`` where the device ran several programs' steps, each judged among its own) followed
  by what the trace shows, ``; ``-separated: ``first execution of M`` (the first op event in
  the trace of module M on that device starts inside the step: compilation, autotuning or a
  cold cache before it), ``host gap before 3.2 ms`` (its ``gap_before_ps`` is itself an
  outlier among the device's gaps by the same rule, and over twice their median),
  ``op mix differs from the modal step (+k/-j populations, i other counts)`` (the multiset of
  op descriptions run in the step is not the device's most common one).
* ``in_window`` (Boolean): the step is in the analysed window. ``"steady"`` (default): the
  steps not flagged; ``"all"``: every step; ``"A:B"``: steps whose index (``step``, per
  device, from 0) is in Python's ``range(n)[A:B]`` — A inclusive, B exclusive, either may be
  omitted, negative counts from the device's last step (``-1:`` is the last step, ``1:`` drops
  the first).

:func:`distribution` summarises the window's step durations (all devices pooled): n (all
steps), n_window, median_ps, p10_ps, p90_ps (linear interpolation, numpy's default), max_ps,
mean_ps, n_outliers (flagged steps, whether or not in the window) and window.

Times in ps. Errors: an unknown window raises :class:`~traceview.errors.UsageError`.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from traceview.errors import UsageError
from traceview.analysis.steps.window import parse_window  # noqa: F401 - imported from here too

try:  # optional C accelerator
    from traceview.analysis import _passes as _fast
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _fast = None

#: Iglewicz & Hoaglin's recommended cut-off for the modified z-score
THRESHOLD = 3.5
#: a step within this fraction of its device's median step is never an outlier
MIN_REL = 0.2
#: devices with fewer steps than this have no outliers
MIN_STEPS = 3
#: a device with fewer steps than this is judged against its module's steps on all devices
POOL_BELOW = 8
#: at most this many outlier steps get their op mix compared (each comparison scans the events)
MIX_MAX = 64
#: 0.6745 = the 0.75 quantile of the standard normal: MAD / 0.6745 estimates sigma
_K = 0.6745

RECORD_SCHEMA = {"gap_before_ps": pl.Int64, "outlier": pl.Boolean, "reason": pl.Utf8, "in_window": pl.Boolean}


def window_holds_steps(steps: pl.DataFrame | None, window: str, option: str = "step_window", *,
                       prof=None) -> None:
    """UsageError when an A:B step window (``window``; steady and all pass) selects none of
    ``steps`` (step rows with ``in_window``, as :func:`annotate` marks them; None or empty
    pass): a report or diff of no steps would read as one without changes or findings.
    ``option``: how the message names the window (a library argument by default; the command
    line passes its option, ``--step-window``);
    ``prof``: the profile the steps are of, named by the error (:func:`profile_name`) where two
    profiles may have different step counts (diff's and verify's sides)."""
    if parse_window(window)[1] is None or steps is None or steps.height == 0:
        return
    if "in_window" in steps.columns and not steps["in_window"].fill_null(False).any():
        n = steps["step"].n_unique()
        raise UsageError(f"{option} {window} holds none of the trace's {n:,} step{'' if n == 1 else 's'} (0..{n - 1}; A:B counts "
                         "from 0, B excluded, negatives from the end)", None if prof is None else profile_name(prof))


def profile_name(prof) -> str | None:
    """The path a profile was read from, as its discovery names it (a remote one: its URL, not
    the local copy's folder; None when built in memory)."""
    disc = getattr(prof, "discovery", None)
    if getattr(disc, "url", ""):
        return str(disc.url)
    root = getattr(disc, "root", None)
    if root is not None:
        return str(root)
    traces = getattr(prof, "traces", None) or []
    return str(traces[0].path) if len(traces) == 1 and getattr(traces[0], "path", None) else None


def robust_z(values: np.ndarray) -> np.ndarray:
    """Modified z-scores 0.6745·|x − median| / MAD (float64); with MAD = 0, inf off the
    median and 0 on it. Empty in, empty out."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return x
    med = np.median(x)
    dev = np.abs(x - med)
    mad = np.median(dev)
    if mad > 0:
        return _K * dev / mad
    return np.where(dev > 0, np.inf, 0.0)


def outliers(values, *, threshold: float = THRESHOLD, min_rel: float = MIN_REL,
             min_steps: int = MIN_STEPS, reference=None, median: float | None = None) -> np.ndarray:
    """Per value, whether it is an outlier by the rule in the module doc (bool array), judged
    against the median and MAD of ``reference`` (default: the values themselves); ``median``:
    that median, when the caller has it."""
    x = np.asarray(values, dtype=np.float64)
    ref = x if reference is None else np.asarray(reference, dtype=np.float64)
    if ref.size < min_steps or x.size == 0:
        return np.zeros(x.size, dtype=bool)
    med = np.median(ref) if median is None else median
    dev = np.abs(x - med)
    mad = np.median(dev if ref is x else np.abs(ref - med))
    z = _K * dev / mad if mad > 0 else np.where(dev > 0, np.inf, 0.0)
    return (z > threshold) & (dev > min_rel * abs(med))


def _ms(ps: float) -> str:
    return f"{ps / 1e9:.3f} ms"


def _first_executions(table, steps: pl.DataFrame, dev_keys: list, groups: list) -> dict:
    """{step row: [modules whose first op event on that device starts in the step]}; a first
    op event just before the device's first step (by less than that step's duration: GPU/CPU
    module runs are derived from one anchor op, which need not be the program's first) counts
    for the first step. ``dev_keys`` / ``groups``: the (host, device) of each device id of
    ``steps`` (:func:`_device_ids`) and its rows (:func:`_device_groups`)."""
    out: dict = {}
    if table is None or table.height == 0 or steps.height == 0:
        return out
    first = (table.collapse().filter(pl.col("first_ps").is_not_null() & (pl.col("module") != ""))
             .group_by("host", "device", "module").agg(pl.col("first_ps").min()))
    by_dev: dict = {}
    for host, device, mod, t in first.iter_rows():
        by_dev.setdefault((host, device), []).append((mod, t))
    start = steps["start_ps"].to_numpy()
    end = start + steps["duration_ps"].to_numpy()
    for d, g in enumerate(groups):
        f = by_dev.get(dev_keys[d])
        if not f or len(g) == 0:
            continue
        r = g[np.argsort(start[g], kind="stable")]
        st, en = start[r], end[r]
        t = np.array([ti for _, ti in f], dtype=np.int64)
        k = np.searchsorted(st, t, side="right") - 1
        for (mod, ti), ki in zip(f, k.tolist()):
            if ki < 0 and st[0] - ti < en[0] - st[0]:
                ki = 0
            if ki >= 0 and ti < en[ki]:
                out.setdefault(int(r[ki]), []).append(mod)
    return {k: sorted(v) for k, v in out.items()}


def _population_ids(table) -> np.ndarray:
    """Per op description (attr id): a dense id of its population on its device, (host,
    device, module, op_name, shape): descriptions that differ only by thread line or file are
    one population (int64)."""
    ids = (table.attrs.select("attr", pl.struct("host", "device", "module", "op_name", "shape")
                              .rank("dense").alias("p")))
    out = np.zeros(table.attrs.height, dtype=np.int64)
    out[ids["attr"].to_numpy().astype(np.int64)] = ids["p"].to_numpy().astype(np.int64)
    return out


def row_hashes(step_rows: np.ndarray, attr: np.ndarray, pop: np.ndarray, words: np.ndarray, n_rows: int, *,
               keep: np.ndarray | None = None, count: np.ndarray | None = None) -> np.ndarray:
    """Per step row (``n_rows``), a hash of the op populations of its events (uint64): over
    the events i with ``step_rows[i]`` = r >= 0 (and ``keep[r]``), p = ``pop[attr[i]]``;
    with ``count`` the sum of ``words[p] * count[i]`` (a multiset: occurrences count), else
    the sum of ``words[p]`` over the row's distinct p (a set); sums mod 2**64, 0 for a row
    with no event. One C pass (``row_hashes``) when the accelerator is built and, for a
    set, each row's events are consecutive; else numpy, which computes the same."""
    out = np.zeros(n_rows, dtype=np.uint64)
    if len(step_rows) == 0 or n_rows == 0:
        return out
    k = np.ones(n_rows, dtype=np.uint8) if keep is None else np.ascontiguousarray(keep, dtype=np.uint8)
    if _fast is not None:
        rows_c = step_rows if step_rows.dtype in (np.int32, np.int64) else step_rows.astype(np.int64)
        cnt = np.zeros(0, dtype=np.int64) if count is None else np.ascontiguousarray(count, dtype=np.int64)
        if _fast.row_hashes(np.ascontiguousarray(rows_c), np.ascontiguousarray(attr, dtype=np.uint32),
                            np.ascontiguousarray(pop, dtype=np.int64), k,
                            np.ascontiguousarray(words, dtype=np.uint64), cnt, count is None, out):
            return out
        out[:] = 0
    inside = step_rows >= 0
    if keep is not None:
        inside &= np.append(k.astype(bool), False)[np.where(inside, step_rows, n_rows)]
    ev = np.flatnonzero(inside)
    r = step_rows[ev].astype(np.int64)
    p = pop[attr[ev]]
    if count is None:  # distinct (row, population) pairs: a bitmap when small, else a sort
        w = len(words)
        keys = r * w + p
        if n_rows * w <= 1 << 26:
            seen = np.zeros(n_rows * w, dtype=bool)
            seen[keys] = True
            pairs = np.flatnonzero(seen)
        else:
            pairs = np.unique(keys)
        r, p, vals = pairs // w, pairs % w, None
    else:
        if len(r) > 1 and not (r[1:] >= r[:-1]).all():
            o = np.argsort(r, kind="stable")  # the events of each row contiguous
            r, p, ev = r[o], p[o], ev[o]
        with np.errstate(over="ignore"):  # products mod 2**64
            vals = words[p] * count[ev].astype(np.uint64)
    if len(r):
        starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
        with np.errstate(over="ignore"):  # sums mod 2**64
            out[r[starts]] = np.add.reduceat(words[p] if vals is None else vals, starts)
    return out


def _op_mix(pop: np.ndarray, attr: np.ndarray, count: np.ndarray, step_rows: np.ndarray, steps: pl.DataFrame,
            flagged: np.ndarray, groups: list, with_events: np.ndarray | None = None) -> dict:
    """{flagged step row: "op mix differs ..." text} for flagged steps whose multiset of op
    populations (``pop[attr]``: per event a population id, :func:`_population_ids`; weighted
    by occurrences) differs from their device's modal step (at most :data:`MIX_MAX` steps are
    described). ``groups``: each device's step rows, devices in order of first appearance
    (:func:`_device_groups`); ``with_events``: the ids of the descriptions that have events
    (``attr``'s distinct values), when the caller has them.
    A multiset hash per step (:func:`row_hashes`: sum of a random 64-bit key per population
    × count, mod 2**64) finds the modal step; exact counts are compared only for the flagged
    steps described and their modal steps, read off one pass that picks their events."""
    out: dict = {}
    if not flagged.any() or attr is None or len(attr) == 0:
        return out
    m = steps.height
    if with_events is None:
        present = np.zeros(len(pop), dtype=bool)
        present[attr] = True  # the keys drawn cover the largest population id any event has
        with_events = np.flatnonzero(present)
    rng = np.random.default_rng(0)
    n_keys = int(pop[with_events].max()) + 1
    keys = rng.integers(1, np.iinfo(np.int64).max, size=n_keys, dtype=np.int64).astype(np.uint64)
    h = row_hashes(step_rows, attr, pop, keys, m, count=count)
    plan = []  # (flagged row, its device's modal row), in the order they are described
    for rows in groups:
        if len(rows) == 0 or len(plan) >= MIX_MAX:
            continue
        hs = h[rows]
        # the modal mix of the device's unflagged steps, when one repeats: with no mix shared
        # by two steady steps there is no mode to differ from
        vals, cnt = np.unique(hs[~flagged[rows]], return_counts=True)
        if not len(cnt) or cnt.max() < 2:
            continue
        modal_h = vals[np.argmax(cnt)]
        same = rows[hs == modal_h]
        modal = int(same[~flagged[same]][0])
        for i in rows[flagged[rows] & (hs != modal_h)].tolist()[:MIX_MAX - len(plan)]:
            plan.append((i, modal))
    if not plan:
        return out
    # the events of the steps compared, each step's contiguous and in event order
    wanted = np.zeros(m + 1, dtype=bool)  # index -1 (outside every step) -> the last, False
    wanted[[r for pair in plan for r in pair]] = True
    ev = np.flatnonzero(wanted[step_rows])
    r = step_rows[ev]
    if len(r) > 1 and not (r[1:] >= r[:-1]).all():
        o = np.argsort(r, kind="stable")
        ev, r = ev[o], r[o]
    got = sorted(set(r.tolist()) if len(r) < 4096 else np.unique(r).tolist())
    lo = np.searchsorted(r, got, side="left")
    hi = np.searchsorted(r, got, side="right")
    spans = {k: (a, b) for k, a, b in zip(got, lo.tolist(), hi.tolist())}
    mixes: dict = {}

    def mix(i):
        if i not in mixes:
            a, b = spans.get(i, (0, 0))
            s = ev[a:b]
            mixes[i] = np.bincount(pop[attr[s]], weights=count[s], minlength=n_keys)
        return mixes[i]

    for i, modal in plan:
        a_m, a_i = mix(modal), mix(i)
        added = int(((a_i > 0) & (a_m == 0)).sum())
        missing = int(((a_i == 0) & (a_m > 0)).sum())
        other = int(((a_i > 0) & (a_m > 0) & (a_i != a_m)).sum())
        out[i] = (f"op mix differs from the modal step {int(steps['step'][modal])} "
                  f"(+{added}/-{missing} populations, {other} with other counts)")
    return out


def _keyed_rows(frame: pl.DataFrame, keys: list[str]) -> np.ndarray:
    """Per row, a dense id of its ``keys`` numbered in order of first appearance (nulls equal)."""
    ids = frame.select(keys).unique(maintain_order=True).with_row_index("_id")
    return frame.select(keys).join(ids, on=keys, how="left", nulls_equal=True, maintain_order="left")["_id"] \
        .to_numpy().astype(np.int64)


def _device_ids(frame: pl.DataFrame) -> tuple[np.ndarray, list]:
    """(per row of ``frame``, a dense id of its (host, device) numbered in order of first
    appearance, nulls equal (int64); the (host, device) of each id). When each device's rows
    are one run of consecutive rows (the order :func:`traceview.analysis.steps.anatomy.find_steps`
    gives) the ids come from the runs' boundaries, else from a join."""
    n = frame.height
    if n == 0:
        return np.zeros(0, dtype=np.int64), []
    new = frame.select((pl.col("host").ne_missing(pl.col("host").shift(1))
                        | pl.col("device").ne_missing(pl.col("device").shift(1))).alias("f"))["f"].to_numpy().copy()
    new[0] = True
    firsts = np.flatnonzero(new)
    keys = frame.select("host", "device")[firsts]
    if keys.height > 1 and keys.is_duplicated().any():
        return _keyed_rows(frame, ["host", "device"]), list(keys.unique(maintain_order=True).iter_rows())
    return np.repeat(np.arange(len(firsts), dtype=np.int64), np.diff(np.append(firsts, n))), list(keys.iter_rows())


def _device_groups(dev: np.ndarray, n_dev: int) -> list:
    """Per device id, its rows in row order (int64 arrays)."""
    if len(dev) > 1 and not (dev[1:] >= dev[:-1]).all():
        order = np.argsort(dev, kind="stable")
    else:
        order = np.arange(len(dev), dtype=np.int64)
    cuts = np.cumsum(np.bincount(dev, minlength=n_dev))[:-1]
    return np.split(order, cuts)


def _several(col: pl.Series) -> bool:
    """``col.n_unique() > 1`` (a null counts as one value) from its null count, min and max."""
    nulls = col.null_count()
    if nulls:
        return nulls < len(col)
    return len(col) > 1 and col.min() != col.max()


def _codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct ``values`` ascending, per value the index of its own among them): by a
    lookup table when they are small non-negative integers, else a sort."""
    if values.dtype.kind in "iu" and len(values):
        lo, hi = int(values.min()), int(values.max())
        if lo >= 0 and hi < 4 * len(values) + 1024:
            seen = np.bincount(values.astype(np.int64, copy=False))
            vals = np.flatnonzero(seen)
            lut = np.zeros(len(seen), dtype=np.int64)
            lut[vals] = np.arange(len(vals))
            return vals.astype(values.dtype), lut[values]
    vals = np.sort(pl.Series(values).unique().to_numpy())
    return vals, np.searchsorted(vals, values)


def _gap_before(steps: pl.DataFrame, dev: np.ndarray) -> pl.Series:
    """Per step, the ``gap_after_ps`` of the step before it on its device (by start_ps, ties
    in row order); null for a device's first step."""
    n = steps.height
    ga = steps["gap_after_ps"]
    if steps["start_ps"].null_count():
        return steps.select(pl.col("gap_after_ps").shift(1).over(["host", "device"], order_by="start_ps"))[
            "gap_after_ps"]
    st = steps["start_ps"].to_numpy()
    same = dev[1:] == dev[:-1]
    if (dev[1:] >= dev[:-1]).all() and (~same | (st[1:] >= st[:-1])).all():
        # rows in (device, start) order: the row before, null on each device's first row
        return ga.shift(1).scatter(np.flatnonzero(~same) + 1, None).alias("gap_after_ps")
    o = np.lexsort((st, dev))
    same = dev[o][1:] == dev[o][:-1]
    prev = np.full(n, n, dtype=np.int64)  # n: the appended null
    prev[o[1:][same]] = o[:-1][same]
    return pl.concat([ga, pl.Series([None], dtype=ga.dtype)]).gather(prev).alias("gap_after_ps")


def _reason_texts(flagged: np.ndarray, ratio: np.ndarray, extra: dict, by_program: np.ndarray | None = None) -> pl.Series:
    """The ``reason`` column: per flagged step its ratio to the median (``"4.9x the median"``;
    ``"4.9x its program's median"`` where ``by_program`` says the step was judged among its own
    program's steps) then the parts in ``extra`` {row: [parts]}; null for the others. Each
    distinct ratio is formatted once."""
    n = len(flagged)
    fl = np.flatnonzero(flagged)
    if not len(fl):
        return pl.repeat(None, n, dtype=pl.Utf8, eager=True).alias("reason")
    texts: list = []
    code = np.full(n, -1, dtype=np.int64)
    if len(fl):
        own = np.zeros(len(fl), dtype=np.int64) if by_program is None else by_program[fl].astype(np.int64)
        keys = np.stack([ratio[fl].view(np.int64), own], axis=1)
        _, first, inv = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        texts = [(f"{x:.2g}x" if x < 10 else f"{x:.0f}x") + (" its program's median" if o else " the median")
                 for x, o in zip(ratio[fl][first].tolist(), own[first].tolist())]
        code[fl] = inv.reshape(-1)
        if extra:
            rows = sorted(extra)
            memo: dict = {}  # (ratio text, parts) -> its index in texts
            new = []
            for i, c in zip(rows, code[rows].tolist()):
                key = (c, tuple(extra[i]))
                if key not in memo:
                    memo[key] = len(texts)
                    texts.append("; ".join([texts[c], *extra[i]]))
                new.append(memo[key])
            code[rows] = new
    c = pl.Series("c", code)
    return pl.Series("reason", texts, dtype=pl.Utf8).gather(pl.select(pl.when(c >= 0).then(c))["c"])


def annotate(steps: pl.DataFrame, *, window: str = "steady", table=None, attr: np.ndarray | None = None,
             count: np.ndarray | None = None, step_rows: np.ndarray | None = None,
             threshold: float = THRESHOLD, min_rel: float = MIN_REL, devices: tuple | None = None) -> pl.DataFrame:
    """``steps`` (rows in any order; columns of
    :data:`~traceview.analysis.steps.anatomy.STEPS_SCHEMA`) plus the columns of
    :data:`RECORD_SCHEMA` (module doc). ``table`` (the op table), ``attr`` / ``count`` (per
    op event: description id, occurrences) and ``step_rows`` (per event, its row in
    ``steps``, -1 for none) give the reasons; without them the reason is the ratio alone.
    ``devices``: :func:`_device_ids` of ``steps`` when the caller has it.
    Raises UsageError on an unknown window."""
    kind, sl = parse_window(window)
    n = steps.height
    if n == 0:
        return steps.with_columns(*(pl.lit(None, dtype=t).alias(c) for c, t in RECORD_SCHEMA.items()))
    dev, dev_keys = devices if devices is not None else _device_ids(steps)
    groups = _device_groups(dev, len(dev_keys))
    gap_before = _gap_before(steps, dev)
    flagged = np.zeros(n, dtype=bool)
    gap_long = np.zeros(n, dtype=bool)
    ratio = np.ones(n, dtype=np.float64)
    by_program = np.zeros(n, dtype=bool)  # judged among its own program's steps (several programs on the device)
    in_window = np.ones(n, dtype=bool)
    dur = steps["duration_ps"].to_numpy().astype(np.float64)
    idx_col = steps["step"].to_numpy()
    module = None
    pooled: dict = {}  # (program or module set) -> its steps on every device and their median, or None (one device)
    # steps that are executions of different compiled programs (a shape sweep's buckets) are
    # judged against their own program's steps only
    prog = (steps["program_id"].fill_null(0).to_numpy() if "program_id" in steps.columns
            and _several(steps["program_id"]) else None)
    for rows in groups:
        if len(rows) == 0:
            continue
        parts = [rows]
        pv = prog[rows] if prog is not None else None
        if pv is not None and (pv != pv[0]).any():  # the programs in ascending order (distinct by hashing)
            vals, code = _codes(pv)  # each part's rows in row order: one stable sort of the codes
            o = np.argsort(code.astype(np.uint16) if len(vals) <= 1 << 16 else code, kind="stable")
            parts = np.split(rows[o], np.cumsum(np.bincount(code, minlength=len(vals)))[:-1])
        for part in parts:
            d = dur[part]
            ref, med = d, None
            if len(part) < POOL_BELOW:  # few steps: the module's (program's) steps on every device (module doc)
                if len(parts) > 1:
                    key = ("program", int(prog[part[0]]))
                else:
                    if module is None:
                        module = (_keyed_rows(steps.select(pl.col("module").fill_null("")), ["module"])
                                  if "module" in steps.columns else np.zeros(n, dtype=np.int64))
                    key = ("modules", tuple(np.unique(module[part]).tolist()))
                if key not in pooled:  # once per program or module set, not once per device
                    same = prog == key[1] if key[0] == "program" else np.isin(module, key[1])
                    pooled[key] = (dur[same], float(np.median(dur[same]))) if len(np.unique(dev[same])) > 1 else None
                if pooled[key] is not None:
                    ref, med = pooled[key]
            med = float(np.median(ref)) if med is None else med
            flagged[part] = outliers(d, threshold=threshold, min_rel=min_rel, reference=ref, median=med)
            ratio[part] = d / med if med else 1.0
            by_program[part] = len(parts) > 1
        if sl is not None:
            order = rows[np.argsort(idx_col[rows], kind="stable")]
            keep = np.zeros(len(rows), dtype=bool)
            keep[np.arange(len(rows))[sl]] = True
            in_window[order] = keep
    if kind == "steady":
        in_window = ~flagged
    gb = None
    if flagged.any():  # a long host gap is only a flagged step's reason: judged on the devices with one
        gb = gap_before.to_numpy(allow_copy=True).astype(np.float64)  # NaN for nulls
        for rows in groups:
            if len(rows) == 0 or not flagged[rows].any():
                continue
            gaps = gb[rows]
            have = np.isfinite(gaps)
            if have.sum() >= MIN_STEPS:
                g = gaps[have]
                gm = float(np.median(g))
                gap_long[rows[have]] = outliers(g, threshold=threshold, min_rel=1.0, median=gm) & (g > 2 * gm)
    first = _first_executions(table, steps, dev_keys, groups) if flagged.any() else {}
    mix = {}
    if step_rows is not None and attr is not None and table is not None and table.height and flagged.any():
        mix = _op_mix(_population_ids(table), attr, count, step_rows, steps, flagged, groups,
                      table.collapse()["attr"].to_numpy().astype(np.int64))
    extra: dict = {}
    gap_text: dict = {}
    for i in sorted(set(first) | set(np.flatnonzero(gap_long & flagged).tolist()) | set(mix)):
        if not flagged[i]:
            continue
        parts = [f"first execution of {m}" for m in first.get(i, [])]
        if gap_long[i]:
            g = float(gb[i])
            if g not in gap_text:
                gap_text[g] = f"host gap before {_ms(g)}"
            parts.append(gap_text[g])
        if i in mix:
            parts.append(mix[i])
        extra[i] = parts
    return steps.with_columns(
        gap_before.alias("gap_before_ps").cast(pl.Int64),
        pl.Series("outlier", flagged, dtype=pl.Boolean),
        _reason_texts(flagged, ratio, extra, by_program),
        pl.Series("in_window", in_window, dtype=pl.Boolean),
    )


def step_walls(steps: pl.DataFrame) -> np.ndarray:
    """One wall time per step index of a steps frame (``step``: 0-based per device;
    ``duration_ps``), in step order: the longest of the devices' durations of that step (ps).
    The devices of an SPMD program run each step together, so their copies of one step are one
    sample of the step time, not several (a noise interval over 3 steps on 8 devices has 3
    samples a side, not 24). Steps without a duration are left out."""
    if steps.height == 0:
        return np.zeros(0, dtype=np.int64)
    st = steps.filter(pl.col("duration_ps").is_not_null()) if steps["duration_ps"].null_count() else steps
    if st.height == 0:
        return np.zeros(0, dtype=np.int64)
    if st["step"].null_count():  # a step without an index: polars' group (nulls first)
        w = st.group_by("step").agg(pl.col("duration_ps").max()).sort("step")
        return w["duration_ps"].to_numpy().astype(np.int64)
    # arrays: a stable sort by step only when the rows are out of step order (several devices)
    s, d = st["step"].to_numpy(), st["duration_ps"].to_numpy().astype(np.int64, copy=False)
    if len(s) > 1 and not bool((s[1:] >= s[:-1]).all()):
        o = np.argsort(s, kind="stable")
        s, d = s[o], d[o]
    return np.maximum.reduceat(d, np.flatnonzero(np.r_[True, s[1:] != s[:-1]]))


def distribution(steps: pl.DataFrame, window: str = "steady") -> dict:
    """Summary of the ``in_window`` steps' durations of an :func:`annotate`-d frame: n,
    n_window, median_ps, p10_ps, p90_ps, max_ps, mean_ps (floats, None when the window is
    empty), n_outliers, window (module doc)."""
    kind, _ = parse_window(window)
    label = kind if kind in ("steady", "all") else kind
    n = steps.height
    n_out = int(steps["outlier"].sum()) if n and "outlier" in steps.columns else 0
    d = (steps.select(pl.col("duration_ps").filter(pl.col("in_window")))["duration_ps"].to_numpy()
         .astype(np.float64) if n else np.zeros(0))
    out = {"n": n, "n_window": int(d.size), "median_ps": None, "p10_ps": None, "p90_ps": None, "max_ps": None,
           "mean_ps": None, "n_outliers": n_out, "window": label}
    if d.size:
        p10, med, p90 = np.percentile(d, [10, 50, 90])
        out.update(median_ps=float(med), p10_ps=float(p10), p90_ps=float(p90), max_ps=float(d.max()),
                   mean_ps=float(d.mean()))
    return out


def step_order(steps: pl.DataFrame) -> np.ndarray:
    """Row indices (uint32) of an :func:`annotate`-d frame in the order a per-step table
    picks them: the outlier steps (longest first), then the other steps (longest first); ties
    in row order."""
    if steps.height == 0 or "outlier" not in steps.columns:
        return np.zeros(0, dtype=np.uint32)
    dur, out = steps["duration_ps"], steps["outlier"]
    if dur.null_count() or out.null_count() or not dur.dtype.is_signed_integer():
        return _step_order_frame(steps)
    # numpy's stable sorts of the negated durations: no copies of the frame (a 480k-step
    # anatomy's peak was here)
    d, o = dur.to_numpy(), out.to_numpy()
    parts = []
    for rows in (np.flatnonzero(o), np.flatnonzero(~o)):
        key = d[rows]
        np.negative(key, out=key)  # no step lasts -2**63 ps (times are clamped as read): no overflow
        parts.append(rows[np.argsort(key, kind="stable")].astype(np.uint32))
    return np.concatenate(parts)


def step_order_head(steps: pl.DataFrame, n: int) -> np.ndarray:
    """``step_order(steps)[:n]`` without ordering every step: the rows before the n-th are
    found by a partition (O(steps)), and only they are sorted (the same stable order)."""
    m = steps.height
    if n <= 0 or m == 0 or "outlier" not in steps.columns:
        return np.zeros(0, dtype=np.uint32)
    dur, out = steps["duration_ps"], steps["outlier"]
    if n >= m or dur.null_count() or out.null_count() or not dur.dtype.is_signed_integer():
        return step_order(steps)[:n]
    d, o = dur.to_numpy(), out.to_numpy()
    top = np.iinfo(np.int64).max
    if int(d.min()) <= -top:  # -d must stay below the mark given to the outliers' rows
        return step_order(steps)[:n]
    flagged = np.flatnonzero(o)
    if len(flagged) >= n:  # only outliers are shown
        return flagged[_head_positions(np.negative(d[flagged]), n)].astype(np.uint32)
    first = flagged[np.argsort(np.negative(d[flagged]), kind="stable")]
    key = np.negative(d)  # a copy; the outliers' rows get the largest key, after every other row
    key[flagged] = top
    return np.concatenate([first, _head_positions(key, n - len(flagged))]).astype(np.uint32)


def _head_positions(key: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` smallest of ``key`` (int64), in the order of a stable sort of
    ``key``: ``np.argsort(key, kind="stable")[:k]`` by a partition and a sort of those k."""
    if k >= len(key):
        return np.argsort(key, kind="stable")
    thr = np.partition(key, k - 1)[k - 1]
    below = np.flatnonzero(key < thr)
    at = np.flatnonzero(key == thr)[:k - len(below)]
    pos = np.sort(np.concatenate([below, at]))  # row order, then a stable sort by key
    return pos[np.argsort(key[pos], kind="stable")]


def _step_order_frame(steps: pl.DataFrame) -> np.ndarray:
    """:func:`step_order` by polars (its descending sort keeps ties in row order; nulls first)."""
    r = steps.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_r"), "duration_ps", "outlier")
    return pl.concat([r.filter(pl.col("outlier")).sort("duration_ps", descending=True),
                      r.filter(~pl.col("outlier")).sort("duration_ps", descending=True)])["_r"].to_numpy()


def top_steps(steps: pl.DataFrame, n: int, order: np.ndarray | None = None) -> pl.DataFrame:
    """At most ``n`` rows of an :func:`annotate`-d frame for a per-step table: the first
    ``n`` of :func:`step_order` (``order``: its result, when already worked out), shown in
    (device, step) order."""
    if steps.height == 0 or n <= 0:
        return steps.head(0)
    head = step_order_head(steps, n) if order is None else order[:n]
    return steps[pl.Series(head)].sort("host", "device", "step")


def summary_line(dist: dict, steps: pl.DataFrame | None = None, *, max_reasons: int = 3) -> str:
    """``"step time median 3.725 ms (p10 3.70, p90 4.01, max 4.31 ms), 7 steps, 1 outlier
    excluded: step 5 (1.2x the median)"``: the distribution's line, with the first
    ``max_reasons`` outliers outside the window and their reasons when ``steps`` is given."""
    if not dist or dist.get("median_ps") is None:
        return f"step time: no steps in window {dist.get('window') if dist else '?'}"
    ms = 1e-9
    line = (f"step time median {dist['median_ps'] * ms:.3f} ms (p10 {dist['p10_ps'] * ms:.3f}, "
            f"p90 {dist['p90_ps'] * ms:.3f}, max {dist['max_ps'] * ms:.3f} ms; mean {dist['mean_ps'] * ms:.3f} ms), "
            f"{dist['n_window']:,} of {dist['n']:,} steps in window {dist['window']}")
    k = dist.get("n_outliers", 0)
    excluded = None
    if steps is not None and steps.height and "outlier" in steps.columns:
        excluded = steps.select("device", "step", "reason", "outlier", "in_window").filter(
            pl.col("outlier") & ~pl.col("in_window"))
    if k:
        if excluded is not None and excluded.height:
            shown = [f"{r['device']} step {r['step']} ({r['reason']})"
                     for r in excluded.sort("device", "step").head(max_reasons).iter_rows(named=True)]
            more = f"; and {excluded.height - max_reasons} more" if excluded.height > max_reasons else ""
            line += f", {excluded.height} outlier(s) excluded: " + "; ".join(shown) + more
        else:
            line += f", {k} outlier(s) flagged (kept: window {dist['window']})"
    else:
        line += ", no outliers"
    return line
