"""Per-population distributions of per-occurrence time, the nth-execution series, and the
regimes a population's spread reveals.

A population's mean hides how its occurrences spread: the first execution of a program pays
for warm-up, one (name, shape) can run in two compiled programs at different speeds, and a
noisy host gives two modes. This module gives, per population (any key over the op table):

* :func:`spread` — ``p50_ps``, ``p90_ps`` (per-occurrence duration, linear interpolation
  between the two nearest ranks, numpy's and polars' ``"linear"``: p50 is the median) and
  ``cv`` (coefficient of variation: standard deviation over the mean of the per-occurrence
  durations, ddof 0; null under two occurrences). Duration, not self time, so these sit beside
  ``mean_ps`` / ``min_ps`` / ``max_ps`` of :func:`traceview.analysis.ops.aggregate.by_shape`; the
  two are equal for every op without nested ops on its line (all but ``while`` / ``call`` /
  ``conditional``).
* :func:`series` — per occurrence: the execution index (which run of its program on its
  device, 0-based in time order) and the occurrence index within that execution.
* :func:`regimes` — for the populations whose spread is wide (:data:`WIDE_P90`,
  :data:`WIDE_MAX`; at least :data:`MIN_OCCURRENCES` occurrences, median from
  :data:`MIN_P50_PS`), a short reason when the spread says they mix regimes: ``warm-up`` (the
  first execution :data:`WARMUP_FACTOR` x or more the median of the later ones, pooled over
  devices, and also device-program by device-program: the median over them of each one's
  execution 0 against its own later median is :data:`WARMUP_FACTOR` x or more, so neither a
  device slow in every execution nor one device's spike is a warm-up; and no mode of the later
  executions comes within :data:`WARMUP_FACTOR` x of execution 0, so a recurring slow regime is
  not one either), ``programs`` (several program ids, medians
  :data:`PROGRAM_FACTOR` x apart), ``bimodal`` (below) or ``device split`` (bimodal, and the
  slow mode is every occurrence of some devices, over two or more executions).

Bimodal rule: the steady occurrences (warm-up ones left out) sorted by duration are split at
the widest ratio between neighbours among the splits that leave each side at least
:data:`MODE_MIN` occurrences and :data:`MODE_SHARE` of them; the population is bimodal when
that empty gap (the high mode's fastest over the low mode's slowest) is at least
:data:`MODE_GAP` and the modes' medians are at least :data:`MODE_FACTOR` apart. When no
device has occurrences in both modes and the slow one spans two or more executions,
the reason is ``device split`` (naming the slow devices) instead of ``bimodal``. One or two
slow samples are outliers, not a mode; a smooth spread has no empty gap.

Execution index: an occurrence belongs to the run of its (host, device, program_id) that holds
its start (``module_runs``); when some occurrence starts outside every run (TPU ops on the
device clock beside host-aligned runs, see :func:`traceview.analysis.steps.anatomy.align_module_runs`)
and the population's occurrences there are a whole multiple m of the runs, the k-th run holds
occurrences k·m .. k·m+m-1 in time order. Without runs the execution index is null and the
occurrence index counts the occurrences on the device.

Times in ps. Nothing here raises on an empty input.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from traceview.analysis import eventstats
from traceview.model.optable import OpTable
from traceview.model.runtable import RunTable, as_runs
from traceview.model.units import fmt_time_ps

try:  # optional C accelerator
    from traceview.analysis import _passes as _fast
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _fast = None

#: a population is examined for regimes when p90 >= WIDE_P90 x p50 or max >= WIDE_MAX x p50
WIDE_P90 = 1.5
WIDE_MAX = 3.0
#: at least this many occurrences before a population is examined
MIN_OCCURRENCES = 4
#: at most this many wide populations are examined, those with the most self time (the
#: examination is per population; the others keep a null ``regimes``)
MAX_EXAMINED = 500
#: populations with a median under this (ps) are not examined: their spread is the timer's
#: resolution and launch jitter (the v6e trace's copy-done ops at 2.5 and 3.75 ns)
MIN_P50_PS = 100_000
#: warm-up: mean occurrence time of execution 0 over the median of later executions' means
WARMUP_FACTOR = 2.0
#: two programs: largest over smallest per-program median
PROGRAM_FACTOR = 1.5
#: bimodal: each mode holds at least MODE_MIN occurrences and MODE_SHARE of them, nothing lies
#: between the modes over a ratio of MODE_GAP, and their medians are MODE_FACTOR apart
MODE_MIN = 3
MODE_SHARE = 0.1
MODE_GAP = 1.25
MODE_FACTOR = 1.5

SPREAD_SCHEMA = {"p50_ps": pl.Float64, "p90_ps": pl.Float64, "cv": pl.Float64}

SERIES_SCHEMA = {"host": pl.Utf8, "device": pl.Utf8, "module": pl.Utf8, "program_id": pl.UInt64,
                 "execution": pl.Int64, "occurrence": pl.Int64, "start_ps": pl.Int64,
                 "duration_ps": pl.Int64, "self_ps": pl.Int64}

REGIME_SCHEMA = {"regimes": pl.Utf8, "executions": pl.Int64, "first_execution_ps": pl.Float64,
                 "later_execution_ps": pl.Float64, "low_mode_ps": pl.Float64, "high_mode_ps": pl.Float64,
                 "high_mode_share": pl.Float64}


def _keyed(col: pl.DataFrame, keys: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(attr -> dense key id frame, key id -> key values frame) of the collapsed rows ``col``."""
    k = col.select(["attr"] + keys).with_columns(pl.struct(keys).rank("dense").cast(pl.Int64).alias("key") - 1)
    names = k.group_by("key").agg([pl.col(c).first() for c in keys])
    return k, names


def _key_of_attr(table: OpTable, k: pl.DataFrame) -> np.ndarray:
    lut = np.full(table.attrs.height, -1, dtype=np.int32)
    if k.height:
        lut[k["attr"].to_numpy().astype(np.int64)] = k["key"].to_numpy().astype(np.int32)
    return lut


def spread(table: OpTable, col: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """``keys`` + ``p50_ps``, ``p90_ps``, ``cv`` (Float64) per ``keys`` group of the collapsed
    frame ``col`` (:meth:`~traceview.model.optable.OpTable.collapse` rows of ``table``, with
    ``keys`` columns). Per occurrence: ``duration_ps / count`` (a pre-aggregated row counts its
    mean once). When every event is one occurrence, one C pass (``quantiles_by``) gives the
    quantiles and the values grouped by key, else numpy groups them and polars gives the
    quantiles; the mean and deviation of the grouped values by :func:`_moments` either way.
    """
    if col.height == 0:
        return pl.DataFrame(schema={**{c: col.schema[c] for c in keys}, **SPREAD_SCHEMA})
    k, names = _keyed(col, keys)
    ev = table.events
    one = not ev.height or int(eventstats.ranges(table)["count_max"] or 1) <= 1
    lut = _key_of_attr(table, k)
    nk = int(k["key"].max()) + 1
    attr = np.ascontiguousarray(ev["attr"].to_numpy())
    dur = ev["duration_ps"]
    if _fast is not None and one and ev.height and not dur.null_count():
        qs = np.array([0.5, 0.9], dtype=np.float64)
        out = np.empty(nk * 2, dtype=np.float64)
        counts = np.zeros(nk, dtype=np.int64)
        grouped = np.empty(ev.height, dtype=np.float64)
        if _fast.quantiles_by(attr, lut, np.ascontiguousarray(dur.to_numpy(), dtype=np.int64), qs, out, counts,
                              grouped):
            got = np.flatnonzero(counts)
            q = out.reshape(nk, 2)[got]
            mean, sd = _moments(grouped[:int(counts.sum())], counts)
            res = pl.DataFrame({"key": pl.Series(got, dtype=pl.Int64), "p50_ps": q[:, 0], "p90_ps": q[:, 1],
                                "_mean": mean[got], "_sd": sd[got]})
            return _finish_spread(names, res, k, col)
    key = lut.astype(np.int64)[attr]
    per = dur if one else dur / ev["count"]
    res = pl.DataFrame({"key": key, "per": per}).filter(pl.col("key") >= 0).group_by("key").agg(
        pl.col("per").median().cast(pl.Float64).alias("p50_ps"),
        pl.col("per").quantile(0.9, "linear").cast(pl.Float64).alias("p90_ps"))
    keep = key >= 0
    if per.null_count():
        keep &= per.is_not_null().to_numpy()
    key = key[keep]
    order = np.argsort(key.astype(np.uint16) if nk <= 1 << 16 else key, kind="stable")  # radix for few keys
    mean, sd = _moments(per.to_numpy()[keep][order], np.bincount(key, minlength=nk))
    got = res["key"].to_numpy()
    res = res.with_columns(pl.Series("_mean", mean[got]), pl.Series("_sd", sd[got]))
    return _finish_spread(names, res, k, col)


def _moments(grouped: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, standard deviation with ddof 0), float64 arrays as long as ``counts``, of the
    values ``grouped`` by key (int64 or float64, converted to float64 as C converts them:
    key 0's ``counts[0]`` values first, in event order within a key); NaN for a key without
    values. Sums in float64 by ``np.add.reduceat``, the variance by two passes (squared
    deviations from the key's mean). The one implementation of both of :func:`spread`'s
    paths, so their ``cv`` is the same."""
    mean = np.full(len(counts), np.nan)
    sd = np.full(len(counts), np.nan)
    some = np.flatnonzero(counts)
    if not len(some):
        return mean, sd
    c = counts[some]
    starts = np.cumsum(c) - c
    v = grouped.astype(np.float64, copy=False)
    m = np.add.reduceat(v, starts) / c
    dev = np.repeat(m, c)
    np.subtract(v, dev, out=dev)
    np.multiply(dev, dev, out=dev)
    mean[some] = m
    sd[some] = np.sqrt(np.add.reduceat(dev, starts) / c)
    return mean, sd


def _finish_spread(names: pl.DataFrame, res: pl.DataFrame, k: pl.DataFrame, col: pl.DataFrame) -> pl.DataFrame:
    n = (k.join(col.select("attr", "rows"), on="attr").group_by("key").agg(pl.col("rows").sum().alias("_n")))
    out = names.join(res, on="key", how="left").join(n, on="key", how="left").with_columns(
        pl.when((pl.col("_n") >= 2) & (pl.col("_mean") > 0)).then(pl.col("_sd") / pl.col("_mean"))
        .otherwise(None).alias("cv"))
    return out.drop("key", "_mean", "_sd", "_n")


def series(table: OpTable, module_runs: pl.DataFrame | RunTable | None, attr_key: np.ndarray, *,
           names: bool = True) -> pl.DataFrame:
    """The nth-execution series of the events whose description maps to a key:
    ``attr_key`` (int32 per ``table.attrs`` row: a population id, -1 for none). Columns:
    ``key`` (Int32) then :data:`SERIES_SCHEMA` (duration_ps per occurrence), sorted by key,
    host, device, program_id, start. Execution index per the module doc. ``names=False``:
    host, device and module are left out for ``_w`` (Int64, a dense code of (host, device,
    program_id)) beside program_id: no string per event."""
    ev = table.events.select("attr", "count", "start_ps", "duration_ps", "self_ps")
    idx = _where_in(ev["attr"].to_numpy(), attr_key >= 0) if ev.height else np.zeros(0, dtype=np.int64)
    if idx.size == 0:
        return pl.DataFrame(schema={"key": pl.Int32, **SERIES_SCHEMA})
    sel = ev[idx] if idx.size < ev.height else ev
    one = int(sel["count"].max() or 1) <= 1
    where = ["host", "device", "program_id"]
    # per description: its (host, device, program) as a dense code in sorted order (nulls last)
    at = table.attrs.select("attr", *where)
    wid = _where_index(table)
    wcode_of = at.join(wid, on=where, how="left", nulls_equal=True, maintain_order="left")["_w"].to_numpy()
    a = sel["attr"].to_numpy().astype(np.int64)
    key = attr_key[a].astype(np.int64)
    wc = wcode_of[a].astype(np.int64)
    st = sel["start_ps"]
    st_sort = st.fill_null(int(np.iinfo(np.int64).max)).to_numpy()  # nulls last
    o = np.lexsort((st_sort, wc, key))
    a, key, wc = a[o], key[o], wc[o]
    po = pl.Series(o)
    d = pl.DataFrame({"key": pl.Series(key, dtype=pl.Int32), "start_ps": st.gather(po),
                      "duration_ps": (sel["duration_ps"] if one else sel["duration_ps"] // sel["count"].clip(1)).gather(po),
                      "self_ps": (sel["self_ps"] if one else sel["self_ps"] // sel["count"].clip(1)).gather(po)})
    n = d.height
    execution = np.full(n, -1, dtype=np.int64)
    rt = as_runs(module_runs) if module_runs is not None else None
    if rt is not None and rt.height:
        runs = rt.runs.filter(pl.col("start_ps").is_not_null()) if rt.runs["start_ps"].null_count() else rt.runs
        # runs in (program code, start, duration) order: integer sort keys, each program coded once;
        # only the runs of the programs the series' events have (the rest are never searched)
        kwc = _row_codes(rt.keys.cast({c: wid.schema[c] for c in where}), wid, where)
        want = np.zeros(wid.height + 1, dtype=bool)
        want[wc] = True
        rkey = runs["key"].to_numpy()
        r_dur = runs["duration_ps"].fill_null(0).to_numpy()
        r_start = runs["start_ps"].to_numpy()
        if not want[kwc].all():  # code -1 reads want[-1]: False
            keep = _where_in(rkey, want[kwc])
            rkey, r_start, r_dur = rkey[keep], r_start[keep], r_dur[keep]
        rwc = kwc[rkey]
        ro = _lex_order(rwc, r_start, r_dur)
        if ro is not None:
            rwc, r_start, r_dur = rwc[ro], r_start[ro], r_dur[ro]
        r_end = r_start + r_dur
        st_all = d["start_ps"].fill_null(-1).to_numpy()
        by_w = _stable_groups(wc)
        for g, rows in by_w:
            lo, hi = np.searchsorted(rwc, g, "left"), np.searchsorted(rwc, g, "right")
            if hi == lo:
                continue
            rs, re_ = r_start[lo:hi], r_end[lo:hi]
            s = st_all[rows]
            pos = np.searchsorted(rs, s, side="right") - 1
            pc = np.clip(pos, 0, len(rs) - 1)
            inside = (pos >= 0) & ((s < re_[pc]) | (s == rs[pc]))
            ex = np.where(inside, pc, -1)
            if not inside.all():
                # per population: chunks of m occurrences when they are a whole multiple of the runs
                ks = key[rows]
                cuts = np.flatnonzero(np.diff(ks)) + 1
                for a_, b_ in zip(np.r_[0, cuts], np.r_[cuts, len(rows)]):
                    if inside[a_:b_].all():
                        continue
                    cnt = b_ - a_
                    if cnt % len(rs) == 0:
                        ex[a_:b_] = np.arange(cnt) // (cnt // len(rs))
                    else:
                        ex[a_:b_] = -1
            execution[rows] = ex
    if names:
        extra = table.attrs.select("host", "device", "module", "program_id")[pl.Series(a)]
    else:
        extra = pl.DataFrame({"_w": pl.Series(wc, dtype=pl.Int64),
                              "program_id": table.attrs["program_id"].gather(pl.Series(a))})
    # occurrence: rank in start order within (key, host/device/program, execution)
    o2 = np.lexsort((execution, wc, key))  # stable: start order kept within each group
    k_, w_, e_ = key[o2], wc[o2], execution[o2]
    pos = np.arange(n)
    new = np.r_[True, (k_[1:] != k_[:-1]) | (w_[1:] != w_[:-1]) | (e_[1:] != e_[:-1])] if n else np.zeros(0, bool)
    occurrence = np.empty(n, dtype=np.int64)
    occurrence[o2] = pos - np.maximum.accumulate(np.where(new, pos, 0)) if n else pos
    d = pl.concat([d, extra], how="horizontal").with_columns(
        pl.when(pl.lit(pl.Series(execution >= 0))).then(pl.lit(pl.Series(execution))).alias("execution"),
        pl.lit(pl.Series(occurrence)).alias("occurrence"))
    if not names:
        cols = {"key": pl.Int32, "_w": pl.Int64, **{c: t for c, t in SERIES_SCHEMA.items()
                                                      if c not in ("host", "device", "module")}}
        return d.select(list(cols)).cast(cols)
    return d.select(["key", *SERIES_SCHEMA]).cast({"key": pl.Int32, **SERIES_SCHEMA})


def _where_index(table: OpTable) -> pl.DataFrame:
    """The distinct (host, device, program_id) of ``table``'s descriptions, sorted (nulls
    last), with their row index ``_w``: the code :func:`series` gives them."""
    where = ["host", "device", "program_id"]
    return table.attrs.select(where).unique().sort(where, nulls_last=True).with_row_index("_w")


def _row_codes(frame: pl.DataFrame, ref: pl.DataFrame, keys: list[str]) -> np.ndarray:
    """Per row of ``frame``, the index of the row of ``ref`` (distinct rows of ``keys``, same
    dtypes) with equal ``keys`` (nulls equal), -1 where none: the inner join of ``frame`` with
    ``ref`` as int64 codes. Each column is coded against ``ref``'s few values, the codes
    combined in a lookup table; a join when that table would be large."""
    if frame.height == 0:
        return np.zeros(0, dtype=np.int64)
    size, parts = 1, []
    for c in keys:
        vals = ref[c].drop_nulls().unique()
        parts.append(vals)
        size *= len(vals) + 1
    if size > (1 << 22):
        j = frame.select(keys).join(ref.select(keys).with_row_index("_r"), on=keys, how="left", nulls_equal=True,
                                    maintain_order="left")["_r"]
        return j.cast(pl.Int64).fill_null(-1).to_numpy()

    def coded(df):  # mixed-radix code of each row's column codes (null: k); -1 when a value is unknown
        code = np.zeros(df.height, dtype=np.int64)
        bad = np.zeros(df.height, dtype=bool)
        for c, vals in zip(keys, parts):
            k = len(vals)
            col = df[c]
            v = vals.to_numpy() if col.dtype.is_integer() and k else None
            if v is not None and v.min() >= 0 and v.max() < (1 << 22):  # small integers: a lookup table
                small = np.full(int(v.max()) + 2, -1, dtype=np.int64)
                small[v] = np.arange(k)
                x = (col.fill_null(0) if col.null_count() else col).to_numpy()
                out = (x >= len(small)) if x.dtype.kind == "u" else (x < 0) | (x >= len(small))
                cc = small[np.where(out, 0, x)] if out.any() else small[x]
                cc[out] = -1
            else:
                cc = col.replace_strict(vals, pl.Series(np.arange(k, dtype=np.int64)), default=-1,
                                        return_dtype=pl.Int64)
                cc = (cc.fill_null(k) if cc.null_count() else cc).to_numpy().astype(np.int64)
            if col.null_count():
                cc[col.is_null().to_numpy()] = k
            bad |= cc < 0
            code = code * (k + 1) + cc
        code[bad] = -1
        return code

    lut = np.full(size, -1, dtype=np.int64)
    lut[coded(ref)] = np.arange(ref.height)
    code = coded(frame)
    return np.where(code >= 0, lut[np.maximum(code, 0)], -1)


def _ascending(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> bool:
    """Whether the rows (a, b, c) are in lexicographic order (ties allowed)."""
    da = a[1:] - a[:-1]
    if bool((da < 0).any()):
        return False
    eq = np.flatnonzero(da == 0)
    b0, b1 = b[eq], b[eq + 1]
    if bool((b1 < b0).any()):
        return False
    tie = eq[b1 == b0]
    return bool((c[tie + 1] >= c[tie]).all())


def _lex_order(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray | None:
    """``np.lexsort((c, b, a))`` (stable), or None when the rows are already in that order.
    A stable sort by ``a`` alone (radix for small codes) when that leaves (b, c) ascending
    within each ``a``: always when (b, c) ascend over all rows (runs in time order), checked
    otherwise (runs in time order per device)."""
    if len(a) < 2 or _ascending(a, b, c):
        return None
    small = a.min() >= 0 and a.max() < (1 << 16)
    db = b[1:] - b[:-1]
    if bool((db >= 0).all()) and bool((c[1:] >= c[:-1])[db == 0].all()):  # (b, c) ascend over all rows
        return np.argsort(a.astype(np.uint16), kind="stable") if small else np.argsort(a, kind="stable")
    if small:
        o = np.argsort(a.astype(np.uint16), kind="stable")
        if _ascending(a[o], b[o], c[o]):
            return o
    return np.lexsort((c, b, a))


def _stable_groups(codes: np.ndarray):
    """(code, row indices in order) per distinct code of ``codes``, codes ascending."""
    o = np.argsort(codes, kind="stable")
    sc = codes[o]
    cuts = np.flatnonzero(np.diff(sc)) + 1
    return [(int(sc[a]), o[a:b]) for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(sc)]) if b > a]


def wide(occurrences: str = "occurrences", max_col: str = "max_ps") -> pl.Expr:
    """Expression over a table with ``p50_ps``, ``p90_ps``, ``max_col`` and ``occurrences``:
    the population's spread is wide enough to examine for regimes."""
    return ((pl.col(occurrences) >= MIN_OCCURRENCES) & (pl.col("p50_ps") >= MIN_P50_PS)
            & ((pl.col("p90_ps") >= WIDE_P90 * pl.col("p50_ps")) | (pl.col(max_col) >= WIDE_MAX * pl.col("p50_ps"))))


def regimes(table: OpTable, module_runs: pl.DataFrame | RunTable | None, col: pl.DataFrame, keys: list[str],
            candidates: pl.DataFrame) -> pl.DataFrame:
    """Regimes of the ``candidates`` (rows with ``keys``; typically those :func:`wide` selects)
    over the collapsed frame ``col`` of ``table``: ``keys`` + :data:`REGIME_SCHEMA`, one row
    per candidate. ``regimes``: "; "-joined reasons, null when none holds; ``executions``
    (runs seen in the series), ``first_execution_ps`` (mean occurrence time in the first
    execution of each device and program) and ``later_execution_ps`` (median of the later
    executions' means), ``low_mode_ps`` / ``high_mode_ps`` / ``high_mode_share`` (the two
    clusters when bimodal, else null)."""
    schema = {**{c: col.schema[c] for c in keys}, **REGIME_SCHEMA}
    if candidates.height == 0 or col.height == 0:
        return pl.DataFrame(schema=schema)
    cand = candidates.select(keys).unique().with_row_index("key").with_columns(pl.col("key").cast(pl.Int64))
    k = col.select(["attr"] + keys).join(cand, on=keys, how="inner", nulls_equal=True)
    s = _execution_series(table, module_runs, k)
    wid = _where_index(table)
    dev = wid["device"].cast(pl.Utf8).fill_null("?")
    if wid["host"].n_unique() > 1:
        dev = wid["host"].cast(pl.Utf8).fill_null("?") + ":" + dev
    return cand.join(_regimes_of(s, dev.to_numpy()), on="key", how="left").drop("key").select(list(schema)).cast(schema)


def _execution_series(table: OpTable, module_runs, k: pl.DataFrame) -> pl.DataFrame:
    """:func:`series` (``names=False``) of the populations ``k`` (attr -> key), one row per
    execution of an op: on GPU one execution can launch several kernels (a cuBLAS call's memset
    and GEMM, one ``hlo_op``), and a population mixing their events reads as two modes of
    occurrence time. For a population with several kernel names, the n-th occurrence of each
    kernel in an execution of its program (in time order) makes one row: the earliest start,
    the durations and self times summed."""
    kern = table.attrs["kernel"].gather(pl.Series(k["attr"].cast(pl.Int64))) if k.height else None
    multi = (k.with_columns(kern.fill_null("").alias("_kernel")).group_by("key").agg(pl.col("_kernel").n_unique())
             .filter(pl.col("_kernel") > 1)["key"]) if k.height else pl.Series("key", [], dtype=pl.Int64)
    if multi.len() == 0:
        return series(table, module_runs, _key_of_attr(table, k), names=False)
    # (population, kernel) pairs as keys, so that series ranks each kernel's occurrences on its own
    kk = k.with_columns(kern.fill_null("").alias("_kernel"), pl.col("key").is_in(multi.implode()).alias("_multi"))
    kk = kk.with_columns(pl.when(pl.col("_multi")).then(pl.struct("key", "_kernel").rank("dense").cast(pl.Int64)
                                                        + pl.col("key").max())
                         .otherwise(pl.col("key")).alias("_sub"))
    sub_of = kk.select(pl.col("_sub").alias("key"), pl.col("key").alias("_pop")).unique()
    s = series(table, module_runs, _key_of_attr(table, kk.select("attr", pl.col("_sub").alias("key"))),
               names=False)
    s = s.with_columns(pl.col("key").cast(pl.Int64)).join(sub_of, on="key", how="left")
    one = s.filter(pl.col("_pop") == pl.col("key")).drop("_pop")
    many = (s.filter(pl.col("_pop") != pl.col("key"))
            .group_by("_pop", "_w", "execution", "occurrence")
            .agg(pl.col("program_id").first(), pl.col("start_ps").min(), pl.col("duration_ps").sum(),
                 pl.col("self_ps").sum())
            .rename({"_pop": "key"}))
    out = pl.concat([one, many.select(one.columns).cast(one.schema)])
    return out.sort(["key", "_w", "program_id", "start_ps"], nulls_last=True).with_columns(pl.col("key").cast(pl.Int32))


def _regimes_of(s: pl.DataFrame, where_names: np.ndarray | None = None) -> pl.DataFrame:
    """The regime figures (:data:`REGIME_SCHEMA`) of every population of the series ``s``
    (:func:`series` with ``names=False``), one row per ``key``: each group-by over every key at once, then per key
    only the mode split on its sorted durations (numpy). ``where_names``: the device (host:device
    with several hosts) of each ``_w`` code, for the device split (default: each code its own)."""
    out_schema = {"key": pl.Int64, **REGIME_SCHEMA}
    if s.height == 0:
        return pl.DataFrame(schema=out_schema)
    # the unit of warm-up: the execution index where every occurrence has one, else the occurrence
    s = s.with_columns(pl.col("key").cast(pl.Int64), pl.col("execution").null_count().over("key").eq(0).alias("_ok"))
    s = s.with_columns(pl.when(pl.col("_ok")).then(pl.col("execution")).otherwise(pl.col("occurrence")).alias("_x"))
    per_exec = s.group_by("key", "_w", "_x").agg(
        pl.col("duration_ps").mean().alias("m"), pl.col("_ok").first())
    warm = per_exec.group_by("key").agg(
        pl.col("m").filter(pl.col("_x") == 0).mean().alias("f"), (pl.col("_x") == 0).sum().alias("n_f"),
        pl.col("m").filter(pl.col("_x") > 0).median().alias("lt"), (pl.col("_x") > 0).sum().alias("n_lt"),
        pl.len().alias("n_exec"), pl.col("_ok").first())
    # the same comparison device-program by device-program: execution 0 of each against its own
    # later executions, over those with both (a device slow in every execution is no warm-up)
    # the median over devices of each one's ratio, so that one device's spike is not a warm-up
    own = (per_exec.group_by("key", "_w").agg(pl.col("m").filter(pl.col("_x") == 0).mean().alias("f_w"),
                                               pl.col("m").filter(pl.col("_x") > 0).median().alias("lt_w"))
           .filter(pl.col("f_w").is_not_null() & (pl.col("lt_w") > 0))
           .group_by("key").agg((pl.col("f_w") / pl.col("lt_w")).median().alias("own_ratio")))
    warm = warm.join(own, on="key", how="left")
    progs = (s.group_by("key", "program_id").agg(pl.col("duration_ps").median().alias("m"), pl.len().alias("n"))
             .sort(["key", "m", "program_id"], nulls_last=True)
             .group_by("key", maintain_order=True).agg(
                 pl.len().alias("n_prog"), pl.col("m").first().alias("lo_m"), pl.col("program_id").first().alias("lo_p"),
                 pl.col("m").last().alias("hi_m"), pl.col("program_id").last().alias("hi_p")))
    info = warm.join(progs, on="key", how="left").sort("key")
    rows, warm_keys = {}, set()
    for r in info.iter_rows(named=True):
        reasons = []
        out = {"regimes": None, "executions": r["n_exec"] if r["_ok"] else None, "first_execution_ps": None,
               "later_execution_ps": None, "low_mode_ps": None, "high_mode_ps": None, "high_mode_share": None}
        if r["n_f"] and r["n_lt"] >= 2:
            f, lt = float(r["f"]), float(r["lt"])
            out["first_execution_ps"], out["later_execution_ps"] = f, lt
            own_ratio = r["own_ratio"]
            if lt > 0 and f >= WARMUP_FACTOR * lt and own_ratio is not None and own_ratio >= WARMUP_FACTOR:
                what = "execution 0" if r["_ok"] else "the first occurrence"
                reasons.append(f"warm-up: {what} {f / lt:.1f}x the later ones ({fmt_time_ps(f)} vs {fmt_time_ps(lt)})")
                warm_keys.add(r["key"])
        if (r["n_prog"] or 0) >= 2 and r["lo_m"] and r["hi_m"] >= PROGRAM_FACTOR * r["lo_m"]:
            reasons.append(f"{r['n_prog']} programs: median {fmt_time_ps(r['lo_m'])} (program {r['lo_p']}) "
                           f"vs {fmt_time_ps(r['hi_m'])} (program {r['hi_p']})")
        rows[r["key"]] = (out, reasons)
    # two modes among the steady occurrences (module doc): the widest empty gap (in ratio)
    # that leaves each side MODE_MIN and MODE_SHARE of them
    steady = s.filter(~(pl.col("key").is_in(list(warm_keys)) & (pl.col("_x") == 0))).sort(["key", "duration_ps"])
    keys = steady["key"].to_numpy()
    durs = steady["duration_ps"].to_numpy().astype(np.float64)
    wcodes, xs = steady["_w"].to_numpy(), steady["_x"].to_numpy()
    bounds = np.flatnonzero(np.diff(keys)) + 1
    for lo_b, hi_b in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [len(keys)]])):
        if hi_b <= lo_b:
            continue
        key, v = int(keys[lo_b]), durs[lo_b:hi_b]
        out, reasons = rows[key]
        n = len(v)
        lo_i = max(MODE_MIN, int(np.ceil(MODE_SHARE * n)))
        hi_i = n - lo_i
        if n >= MIN_OCCURRENCES and hi_i >= lo_i and v[0] > 0:
            gaps = v[lo_i:hi_i + 1] / v[lo_i - 1:hi_i]
            j = int(np.argmax(gaps)) + lo_i  # split before index j
            low, high = _sorted_median(v[:j]), _sorted_median(v[j:])
            if high >= MODE_FACTOR * low and gaps[j - lo_i] >= MODE_GAP:
                share = (n - j) / n
                out["low_mode_ps"], out["high_mode_ps"], out["high_mode_share"] = low, high, share
                w = wcodes[lo_b:hi_b]

                def names_of(codes):  # the sorted distinct device names of these codes
                    u = _distinct(codes)
                    return np.unique(where_names[u] if where_names is not None else u.astype(str))

                d_lo, d_hi = names_of(w[:j]), names_of(w[j:])
                n_x = _distinct(xs[lo_b:hi_b][j:]).size
                if key in warm_keys and out["first_execution_ps"] is not None \
                        and high * WARMUP_FACTOR >= out["first_execution_ps"]:
                    # the later executions have a mode as slow as execution 0: a recurring
                    # regime, not a warm-up
                    reasons[:] = [x for x in reasons if not x.startswith("warm-up:")]
                if n_x >= 2 and not np.isin(d_hi, d_lo).any():
                    # the slow mode is every occurrence of some devices, in 2+ executions
                    unit = "executions" if out["executions"] is not None else "occurrences"
                    reasons.append(f"device split: {', '.join(d_hi.tolist())} near {fmt_time_ps(high)} in all "
                                   f"{n_x} {unit}, {d_lo.size} other device(s) near {fmt_time_ps(low)}")
                else:
                    reasons.append(f"bimodal: {100 * (1 - share):.0f}% near {fmt_time_ps(low)}, "
                                   f"{100 * share:.0f}% near {fmt_time_ps(high)}")
    for out, reasons in rows.values():
        out["regimes"] = "; ".join(reasons) if reasons else None
    return pl.DataFrame([{"key": k, **o} for k, (o, _) in rows.items()], schema=out_schema)


def _where_in(values: np.ndarray, member: np.ndarray) -> np.ndarray:
    """``np.flatnonzero(member[values])``: the indices of the ``values`` (non-negative integer
    codes) whose ``member`` entry (bool, per code) is set, ascending. A few members are
    compared for, not looked up (no gather over every value)."""
    hit = np.flatnonzero(member)
    if len(hit) > 8:
        return np.flatnonzero(member[values])
    if len(hit) == 0:
        return np.zeros(0, dtype=np.int64)
    m = values == values.dtype.type(hit[0])
    for h in hit[1:]:
        m |= values == values.dtype.type(h)
    return np.flatnonzero(m)


def _sorted_median(v: np.ndarray) -> float:
    """``float(np.median(v))`` of an ascending non-empty float array: the middle value, or the
    mean of the two middle ones, without numpy's partition."""
    n = len(v)
    k = n // 2
    return float(v[k]) if n % 2 else float((v[k - 1] + v[k]) / 2.0)


def _distinct(codes: np.ndarray) -> np.ndarray:
    """``np.unique(codes)`` of integer codes: by a bincount when they are small and
    non-negative, else a sort."""
    if len(codes) and codes.dtype.kind in "iu":
        lo, hi = int(codes.min()), int(codes.max())
        if lo >= 0 and hi < 4 * len(codes) + 1024:
            return np.flatnonzero(np.bincount(codes.astype(np.int64, copy=False))).astype(codes.dtype, copy=False)
    return np.unique(codes)


def population_series(table: OpTable, module_runs: pl.DataFrame | RunTable | None, op_name: str, shape: str,
                      module: str | None = None) -> pl.DataFrame:
    """The nth-execution series of one (op_name, shape) population, optionally of one module:
    :data:`SERIES_SCHEMA` rows (execution index, occurrence index within it, start_ps,
    duration_ps, self_ps per occurrence), in time order per (host, device, program). Empty
    frame when no event matches."""
    m = (pl.col("op_name") == op_name) & (pl.col("shape") == shape)
    if module is not None:
        m = m & (pl.col("module") == module)
    keep = table.attrs.filter(m)["attr"].to_numpy().astype(np.int64)
    lut = np.full(table.attrs.height, -1, dtype=np.int32)
    lut[keep] = 0
    return series(table, module_runs, lut).drop("key")
