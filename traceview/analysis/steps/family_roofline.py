"""Roofline per op family and step: the study's table of where a step's time goes by block,
with each block's FLOPs, bytes, arithmetic intensity, what bounds it, and the roofline time
against the measured time.

Over the steps of a :class:`~traceview.analysis.steps.anatomy.StepAnatomy` (only those whose
``in_window`` is true when its step table has that column, else every step), per family f
(the anatomy's classification, so ``--family`` rules and ``--families study`` apply), with
n the number of device-steps, and sums over the op events that start inside those steps:

* ``time_ps`` = Σ self_ps / n (ps per step); ``share`` = time_ps / mean step wall time;
* ``flops`` = Σ count × FLOPs per occurrence / n, ``bytes`` likewise with bytes accessed (per
  step; the op table's costs: the trace's, else derived from the HLO, :mod:`traceview.model.costs`;
  collectives and the ``-start``/``-done`` halves of async ops get none, as in
  :func:`traceview.analysis.ops.roofline.roofline`);
* ``intensity`` = flops / bytes (FLOP/byte); ``bound_by`` = "compute" when it is at or above
  the ridge point (peak FLOP/s / peak bytes/s), else "memory"; "unknown" without both peaks or
  without costs, and when ``no_bytes_share`` > 0 and the intensity is at or above the ridge
  (an upper bound there proves no compute bound; below the ridge it proves the memory bound);
* ``predicted_ps`` = Σ count × max(FLOPs / peak FLOP/s, bytes / peak bytes/s) / n over the ops
  with a cost (each op on its own roof: Williams, Waterman & Patterson, CACM 2009, the model of
  :mod:`traceview.analysis.ops.roofline`), against ``measured_ps`` = the self time per step of those
  same ops; ``efficiency`` = predicted / measured; ``costed_share`` = measured_ps / time_ps;
  ``no_bytes_share`` = the part of time_ps from ops with a FLOP count and no byte count (an
  interpreted Pallas kernel on CPU: its bytes are unknown, so its intensity is an upper bound).

Times in ps, FLOPs and bytes per step. Peaks: :class:`~traceview.analysis.hardware.peaks.Peaks`.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from traceview.analysis import eventstats

try:  # optional C accelerator
    from traceview.analysis import _passes as _fast
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _fast = None

from traceview.analysis.ops.roofline import _ASYNC, _COLLECTIVE, has_cost

SCHEMA = {
    "family": pl.Utf8, "time_ps": pl.Float64, "share": pl.Float64, "occurrences": pl.Float64,
    "flops": pl.Float64, "bytes": pl.Float64, "intensity": pl.Float64, "bound_by": pl.Utf8,
    "predicted_ps": pl.Float64, "measured_ps": pl.Float64, "efficiency": pl.Float64,
    "costed_share": pl.Float64, "no_bytes_share": pl.Float64,
    "n_steps": pl.Int64, "step_ps": pl.Float64, "window": pl.Utf8,
}


def window_rows(anat) -> tuple[np.ndarray, str]:
    """(indices of the rows of ``anat.steps`` the figures are over, what they are): the rows
    whose ``in_window`` is true when the column exists (``"window <rule>"``), else every row
    (``"all steps"``)."""
    st = anat.steps
    if "in_window" in st.columns:
        keep = st["in_window"].fill_null(False).to_numpy().astype(bool)
        dist = getattr(anat, "distribution", None)
        rule = dist.get("window") if isinstance(dist, dict) else None
        return np.flatnonzero(keep), f"window {rule}" if rule else "window"
    return np.arange(st.height), "all steps"


def _window_sums(rows, keep: np.ndarray, ev: pl.DataFrame, na: int) -> tuple | None:
    """Per op description, (self_ps, count) summed over the events of the window's step rows
    (``keep``: per step row, plus False for -1) as float64, and the descriptions with such an
    event: one C pass (``attr_sums``) per column, read in place, the numpy bincounts' figures;
    None without the accelerator, with nulls in the columns, or when the pass refuses."""
    if _fast is None or len(rows) != ev.height or ev["self_ps"].null_count() or ev["count"].null_count():
        return None
    seen = np.zeros(na, dtype=np.uint8)
    r = np.ascontiguousarray(rows, dtype=np.int32)
    k = keep[:-1].view(np.uint8)
    a = np.ascontiguousarray(ev["attr"].to_numpy(), dtype=np.uint32)
    sums = []
    for c in ("self_ps", "count"):
        out = np.zeros((1, na))
        if not _fast.attr_sums(r, k, a, np.ascontiguousarray(ev[c].to_numpy(), dtype=np.int64), 1, out, seen):
            return None
        sums.append(out[0])
    return sums[0], sums[1], np.flatnonzero(seen)


def _anatomy_sums(anat, ev: pl.DataFrame) -> tuple | None:
    """:func:`_window_sums`'s figures from the anatomy's exact int64 window sums
    (``anat.window_sums``, over the same ``in_window`` rows) when float64 accumulation gives
    the same numbers (no negative self time or count, every sum below 2**53: each partial sum
    then exact); None otherwise (no sums kept, or they could differ)."""
    got = getattr(anat, "window_sums", None)
    if (got is None or not getattr(anat, "sums_hold", lambda: False)() or "in_window" not in anat.steps.columns
            or ev["self_ps"].null_count() or ev["count"].null_count()):
        return None
    ids, t_sum, c_sum = got
    if len(ids) == 0 or ev.height == 0:
        return None
    r = eventstats.ranges(anat.table) if ev is anat.table.events else None
    lo_s, lo_c = (r["self_min"], r["count_min"]) if r is not None else (ev["self_ps"].min(), ev["count"].min())
    if min(int(lo_s), int(lo_c)) < 0 or max(int(t_sum.max()), int(c_sum.max())) >= 1 << 53:
        return None
    na = anat.table.attrs.height
    self_in = np.zeros(na)
    count_in = np.zeros(na)
    self_in[ids] = t_sum
    count_in[ids] = c_sum
    return self_in, count_in, np.asarray(ids, dtype=np.int64)


def family_roofline(anat, peaks) -> pl.DataFrame:
    """Per family of ``anat`` (a :class:`~traceview.analysis.steps.anatomy.StepAnatomy`), the figures of
    the module doc under ``peaks``: columns :data:`SCHEMA` (``n_steps``, ``step_ps`` and
    ``window`` repeat on every row), sorted by time per step. Empty frame (same columns) when
    there is no step or no op inside one. Never raises."""
    table, rows = anat.table, anat.step_rows
    if table is None or rows is None or anat.steps.height == 0 or table.height == 0:
        return pl.DataFrame(schema=SCHEMA)
    win, what = window_rows(anat)
    n = len(win)
    if n == 0:
        return pl.DataFrame(schema=SCHEMA)
    step_ps = float(anat.steps["duration_ps"].to_numpy()[win].sum()) / n
    keep = np.zeros(anat.steps.height + 1, dtype=bool)  # index -1 (outside every step) -> last, False
    keep[win] = True
    ev = table.events
    na = table.attrs.height
    got = _anatomy_sums(anat, ev)
    if got is None:
        got = _window_sums(rows, keep, ev, na)
    if got is not None:
        self_in, count_in, ids = got
    else:
        inside = np.flatnonzero(keep[rows])
        attr = ev["attr"].to_numpy()[inside].astype(np.int64)
        self_in = np.bincount(attr, weights=ev["self_ps"].to_numpy()[inside].astype(np.float64), minlength=na)
        count_in = np.bincount(attr, weights=ev["count"].to_numpy()[inside].astype(np.float64), minlength=na)
        ids = np.flatnonzero(np.bincount(attr, minlength=na))
    if len(ids) == 0:
        return pl.DataFrame(schema=SCHEMA)
    per = pl.DataFrame({"attr": pl.Series(ids, dtype=pl.UInt32), "_self": self_in[ids], "_count": count_in[ids]})
    desc = table.attrs.select("attr", "op_name", "op_kind", "flops", "bytes_accessed")
    per = (per.join(desc, on="attr", how="left").join(anat.attr_family, on="attr", how="left")
           .with_columns(pl.col("family").fill_null("other")))
    no_cost = (pl.col("op_kind").fill_null("").str.contains(_ASYNC) | pl.col("op_name").fill_null("").str.contains(_ASYNC)
               | pl.col("op_kind").fill_null("").str.contains(_COLLECTIVE)
               | pl.col("op_name").fill_null("").str.contains(_COLLECTIVE))
    per = per.with_columns(pl.when(no_cost).then(None).otherwise(pl.col("flops")).alias("flops"),
                           pl.when(no_cost).then(None).otherwise(pl.col("bytes_accessed")).alias("bytes"))
    per = _executions(per, table.attrs)
    pf, pb, ridge = peaks.peak_flops or None, peaks.peak_bw or None, peaks.ridge
    terms = ([pl.col("flops").fill_null(0) / pf * 1e12] if pf else []) + (
        [pl.col("bytes").fill_null(0) / pb * 1e12] if pb else [])
    costed = has_cost()
    roof = pl.max_horizontal(terms) if terms else pl.lit(None, dtype=pl.Float64)
    per = per.with_columns(costed.alias("_costed"),
                           pl.when(costed).then(roof * pl.col("_exec")).otherwise(None).alias("_pred"))
    g = per.group_by("family").agg(
        (pl.col("_self").sum() / n).alias("time_ps"),
        (pl.col("_count").sum() / n).alias("occurrences"),
        ((pl.col("flops") * pl.col("_exec")).sum() / n).alias("flops"),
        ((pl.col("bytes") * pl.col("_exec")).sum() / n).alias("bytes"),
        pl.col("flops").is_not_null().any().alias("_has_f"), pl.col("bytes").is_not_null().any().alias("_has_b"),
        (pl.col("_pred").sum() / n if terms else pl.lit(None, dtype=pl.Float64)).alias("predicted_ps"),
        (pl.col("_self").filter(pl.col("_costed")).sum() / n).alias("measured_ps"),
        (pl.col("_self").filter(pl.col("flops").is_not_null() & pl.col("bytes").is_null()).sum() / n).alias("_nob"),
        pl.col("_costed").any().alias("_any_cost"),
    )
    g = g.with_columns(
        # a family none of whose ops has a cost (kernels the trace states 0 and 0 for): unknown, not 0
        pl.when(pl.col("_has_f") & pl.col("_any_cost")).then(pl.col("flops")).otherwise(None).alias("flops"),
        pl.when(pl.col("_has_b") & pl.col("_any_cost")).then(pl.col("bytes")).otherwise(None).alias("bytes"),
        pl.when(pl.col("_any_cost")).then(pl.col("predicted_ps")).otherwise(None).alias("predicted_ps"),
        # no op of the family has a cost: nothing was measured against the roofline (not 0 ps)
        pl.when(pl.col("_any_cost")).then(pl.col("measured_ps")).otherwise(None).alias("measured_ps"),
    ).with_columns(
        pl.when(pl.col("bytes") > 0).then(pl.col("flops").fill_null(0) / pl.col("bytes")).otherwise(None).alias("intensity"),
        (pl.col("time_ps") / step_ps if step_ps else pl.lit(None, dtype=pl.Float64)).alias("share"),
        pl.when(pl.col("measured_ps") > 0).then(pl.col("predicted_ps") / pl.col("measured_ps")).otherwise(None)
        .alias("efficiency"),
        pl.when(pl.col("time_ps") > 0).then(pl.col("measured_ps").fill_null(0) / pl.col("time_ps")).otherwise(None).alias("costed_share"),
        pl.when(pl.col("time_ps") > 0).then(pl.col("_nob") / pl.col("time_ps")).otherwise(None).alias("no_bytes_share"),
    )
    bound = (pl.when(pl.col("intensity").is_null()).then(pl.lit("unknown"))
             .when(pl.col("intensity") < ridge).then(pl.lit("memory"))
             .when(pl.col("no_bytes_share").fill_null(0) > 0).then(pl.lit("unknown"))  # an upper bound
             .otherwise(pl.lit("compute"))
             if ridge else pl.lit("unknown"))
    g = g.with_columns(bound.alias("bound_by"), pl.lit(n, dtype=pl.Int64).alias("n_steps"),
                       pl.lit(step_ps).alias("step_ps"), pl.lit(what).alias("window"))
    return g.select(list(SCHEMA)).cast(SCHEMA).sort(["time_ps", "family"], descending=[True, False])


def _executions(per: pl.DataFrame, attrs: pl.DataFrame) -> pl.DataFrame:
    """``per`` (one row per op description inside the steps: _self, _count, flops, bytes,
    family) with ``_exec``, the executions its costs count once each: on GPU one execution of an
    HLO op launches several kernels (a convolution as Im2Col + GEMM), each its own description
    and event, so per (op_name, shape, host, device, program_id) the executions are the largest
    count of any one kernel name (as :func:`traceview.analysis.ops.aggregate.executions` counts
    them), carried by one row of the op (the others get 0). An op without kernel names: one
    execution per occurrence."""
    ident = [c for c in ("op_name", "shape", "host", "device", "program_id") if c in attrs.columns]
    if "kernel" not in attrs.columns or not ident:
        return per.with_columns(pl.col("_count").alias("_exec"))
    cols = [c for c in (*ident, "kernel") if c not in per.columns]
    per = per.join(attrs.select("attr", *cols), on="attr", how="left").sort("attr")
    per = per.with_columns(pl.col("_count").sum().over([*ident, "kernel"]).alias("_kc"))
    per = per.with_columns(pl.col("_kc").max().over(ident).alias("_ex"),
                           pl.int_range(pl.len()).over(ident).alias("_i"))
    return (per.with_columns(pl.when(pl.col("_i") == 0).then(pl.col("_ex")).otherwise(0.0).alias("_exec"))
            .drop("_kc", "_ex", "_i", *cols))


def summary(fr: pl.DataFrame) -> dict | None:
    """Totals of a :func:`family_roofline` frame: families' time per step against the step
    (``time_ps``, ``step_ps``, ``ratio``), roofline-predicted against measured over the costed
    ops (``predicted_ps``, ``measured_ps``), ``n_steps``, ``window``; None when empty."""
    if fr.height == 0:
        return None
    t = float(fr["time_ps"].sum())
    step = float(fr["step_ps"][0])
    pred = fr["predicted_ps"].drop_nulls()
    return {"time_ps": t, "step_ps": step, "ratio": t / step if step else None,
            "predicted_ps": float(pred.sum()) if pred.len() else None,
            "measured_ps": float(fr["measured_ps"].fill_null(0).sum()), "n_steps": int(fr["n_steps"][0]),
            "window": fr["window"][0]}
