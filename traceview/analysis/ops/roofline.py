"""Roofline of every shape-keyed op: intensity, achieved rates, bound-by, roofline time.

Model (Williams, Waterman & Patterson, "Roofline: an insightful visual performance model",
CACM 2009): an op doing F FLOPs and moving B bytes cannot finish faster than
``max(F / peak_flops, B / peak_bw)``. Its arithmetic intensity is ``I = F / B`` (FLOP/byte);
the ridge point is ``peak_flops / peak_bw``; an op with ``I`` below the ridge is bound by
memory, above it by compute. *Efficiency* is roofline time / measured time (1.0 = at the
roof); a value above 1.0 means the peak or the byte/FLOP count is wrong (e.g. data served
from on-chip memory, not HBM) and is flagged, never shown silently.

Times in ps, FLOPs and bytes per occurrence, rates in FLOP/s and bytes/s. Peaks:
:mod:`traceview.analysis.hardware.peaks`.
"""

from __future__ import annotations

import math

import polars as pl

from traceview.analysis.ops.aggregate import executions
from traceview.analysis.hardware.peaks import Peaks
from traceview.model.collective_hlo import COLLECTIVE_KINDS
from traceview.model.naming import SUFFIX
from traceview.model.optable import as_table, weighted_mode


def roofline(ops, peaks: Peaks) -> pl.DataFrame:
    """Roofline figures per (op_name, shape) population.

    Columns: op_name, shape, category, occurrences (events, XProf's count), executions and
    kernels_per_execution (:func:`traceview.analysis.ops.aggregate.executions`: on GPU one execution
    of an op can run several kernels, each an event carrying the op's full costs), mean_ps
    (inclusive time per occurrence), exec_ps (inclusive time per execution: the kernels'
    durations summed), total_ps, flops and bytes (per execution), cost_source (trace / derived /
    unknown), intensity (FLOP/byte), achieved_flops (FLOP/s), achieved_bw (bytes/s; both null
    for an op with neither FLOPs nor bytes, :func:`has_cost`),
    frac_peak_flops, frac_peak_bw, bound_by ("compute" / "memory": intensity vs ridge point;
    "async" for the issue/await halves of asynchronous ops, which get no costs; "collective" for
    collectives, whose bytes cross links, not HBM, so they get no HBM roofline; "unknown" without
    costs), roofline_ps (per execution: max(flops/peak_flops, bytes/peak_bw) in ps; null for an
    op with neither FLOPs nor bytes, 0 or missing: nothing to place), efficiency
    (roofline_ps / exec_ps), warning ("" or why a figure above 100% is not to be trusted).
    Sorted by total time. Rates use inclusive time because an op's FLOPs include its
    children's (as XProf's FLOP rate). ``ops``: an :class:`~traceview.model.optable.OpTable` or a
    wide op-event frame.
    """
    table = as_table(ops)
    if table.height == 0:
        return pl.DataFrame(schema=_ROOF_SCHEMA)
    # Async halves (copy-start/-done, all-gather-start/-done, send/recv...) mark when a transfer
    # is issued or awaited: their bytes move while other ops run, so bytes over their own
    # duration is no bandwidth. They stay in the table without costs (bound_by "async").
    is_async = pl.col("op_kind").fill_null("").str.contains(_ASYNC) | pl.col("op_name").str.contains(_ASYNC)
    # Collectives move their bytes over the interconnect: bytes over time is link (algorithm)
    # bandwidth, not HBM bandwidth, so the HBM roofline says nothing about them.
    is_coll = (~is_async & (pl.col("op_kind").fill_null("").str.contains(_COLLECTIVE)
                            | pl.col("op_name").str.contains(_COLLECTIVE)))
    col = table.collapse().with_columns(
        pl.when(is_async | is_coll).then(None).otherwise(pl.col("flops")).alias("flops"),
        pl.when(is_async | is_coll).then(None).otherwise(pl.col("bytes_accessed")).alias("bytes_accessed"),
        pl.when(is_async).then(pl.lit("async")).when(is_coll).then(pl.lit("collective"))
        .otherwise(pl.col("cost_source")).fill_null("unknown").alias("cost_source"),
    )
    keys = ["op_name", "shape"]
    # per-occurrence costs: the mean over the population's events (each event row weighs 1)
    w = pl.col("rows").cast(pl.Float64)
    g = col.sort("first_ps", "attr", nulls_last=True).group_by(keys).agg(
        pl.col("category").first(),
        pl.col("count").sum().alias("occurrences"),
        pl.col("duration_ps").sum().alias("total_ps"),
        _weighted_mean("flops", w).alias("flops"),
        _weighted_mean("bytes_accessed", w).alias("bytes"),
    ).join(executions(col, keys), on=keys, how="left", nulls_equal=True).with_columns(
        (pl.col("total_ps") / pl.col("occurrences")).alias("mean_ps"),
        (pl.col("total_ps") / pl.col("executions")).alias("exec_ps"),
        (pl.col("occurrences") / pl.col("executions")).alias("kernels_per_execution"))
    g = g.join(weighted_mode(col, keys, "cost_source", skip_empty=False), on=keys, how="left", nulls_equal=True)
    pf = peaks.peak_flops or None
    pb = peaks.peak_bw or None
    ridge = peaks.ridge
    secs = pl.col("exec_ps") * 1e-12
    g = g.with_columns(
        pl.when(pl.col("bytes") > 0).then(pl.col("flops") / pl.col("bytes")).otherwise(None).alias("intensity"),
        # an op with neither FLOPs nor bytes (a kernel the trace cannot cost) achieved an unknown rate, not 0
        pl.when((secs > 0) & has_cost()).then(pl.col("flops") / secs).otherwise(None).alias("achieved_flops"),
        pl.when((secs > 0) & has_cost()).then(pl.col("bytes") / secs).otherwise(None).alias("achieved_bw"),
    )
    g = g.with_columns(
        (pl.col("achieved_flops") / pf if pf else pl.lit(None, dtype=pl.Float64)).alias("frac_peak_flops"),
        (pl.col("achieved_bw") / pb if pb else pl.lit(None, dtype=pl.Float64)).alias("frac_peak_bw"),
        (pl.when(pl.col("cost_source").is_in(["async", "collective"])).then(pl.col("cost_source"))
         .when(pl.col("intensity").is_null()).then(pl.lit("unknown"))
         .when(pl.col("intensity") >= ridge).then(pl.lit("compute")).otherwise(pl.lit("memory"))
         if ridge else pl.lit("unknown")).alias("bound_by"),
    )
    terms = []
    if pf:
        terms.append(pl.col("flops").fill_null(0) / pf * 1e12)
    if pb:
        terms.append(pl.col("bytes").fill_null(0) / pb * 1e12)
    roof = pl.max_horizontal(terms) if terms else pl.lit(None, dtype=pl.Float64)
    g = g.with_columns(
        pl.when(has_cost()).then(roof).otherwise(None).alias("roofline_ps"))
    g = g.with_columns(
        pl.when(pl.col("exec_ps") > 0).then(pl.col("roofline_ps") / pl.col("exec_ps")).otherwise(None).alias("efficiency"))
    g = g.with_columns(
        pl.when(pl.col("frac_peak_flops") > 1.0)
        .then(pl.lit("achieved FLOP/s above peak: the FLOP count or the peak is off"))
        .when(pl.col("frac_peak_bw") > 1.0)
        .then(pl.lit("achieved bandwidth above peak: bytes likely served from on-chip memory, or the peak is off"))
        .when(pl.col("efficiency") > 1.0)
        .then(pl.lit("faster than the roofline: the peak or the byte count is off"))
        .otherwise(pl.lit("")).alias("warning"))
    return g.select(list(_ROOF_SCHEMA)).sort(["total_ps", "op_name", "shape"], descending=[True, False, False])


#: the columns :func:`layer_copies` adds to the roofline's
LAYER_SCHEMA = {"members": pl.Int64, "op_names": pl.List(pl.Utf8), "efficiency_min": pl.Float64,
                "efficiency_max": pl.Float64}


def layer_copies(roof: pl.DataFrame, peaks: Peaks) -> pl.DataFrame:
    """The rows of ``roof`` (:func:`roofline`) with the per-layer copies of one op as one row.

    A model with L identical layers compiles L copies of each layer op under L names
    (``convolution_bitcast_fusion.3`` ... ``.63``); rows whose op names share a stem
    (:data:`traceview.model.naming.SUFFIX` removed) and whose shape, category, cost source and
    FLOPs and bytes per execution are equal are one row, ``op_name`` the stem when it holds
    several names. Occurrences, executions and total time are summed; mean_ps, exec_ps,
    kernels_per_execution, achieved FLOP/s and bytes/s, their fractions of the peaks and the
    efficiency are the :func:`roofline` formulas over those sums (time-weighted over the
    members); intensity, bound_by and roofline_ps are the members' own (equal by the key);
    warning the first member's that has one. Columns: :data:`_ROOF_SCHEMA`, then members (op
    names in the row), op_names (sorted), efficiency_min / efficiency_max over the members.
    Sorted by total time, as :func:`roofline`."""
    schema = {**_ROOF_SCHEMA, **LAYER_SCHEMA}
    if roof.height == 0:
        return pl.DataFrame(schema=schema)
    key = ["_stem", "shape", "category", "cost_source", "flops", "bytes"]
    g = (roof.with_columns(pl.col("op_name").str.replace(SUFFIX.pattern, "").alias("_stem"))
         .group_by(key, maintain_order=True)
         .agg(pl.col("op_name").unique().sort().alias("op_names"), pl.col("op_name").first().alias("_first"),
              pl.col("occurrences").sum(), pl.col("executions").sum(), pl.col("total_ps").sum(),
              pl.col("intensity").first(), pl.col("bound_by").first(), pl.col("roofline_ps").first(),
              pl.col("efficiency").min().alias("efficiency_min"), pl.col("efficiency").max().alias("efficiency_max"),
              pl.col("warning").filter(pl.col("warning") != "").first().fill_null("").alias("warning")))
    g = g.with_columns(pl.col("op_names").list.len().cast(pl.Int64).alias("members"))
    g = g.with_columns(pl.when(pl.col("members") > 1).then(pl.col("_stem")).otherwise(pl.col("_first")).alias("op_name"),
                       (pl.col("total_ps") / pl.col("occurrences")).alias("mean_ps"),
                       (pl.col("total_ps") / pl.col("executions")).alias("exec_ps"),
                       (pl.col("occurrences") / pl.col("executions")).alias("kernels_per_execution"))
    pf = peaks.peak_flops or None
    pb = peaks.peak_bw or None
    secs = pl.col("exec_ps") * 1e-12
    g = g.with_columns(
        pl.when((secs > 0) & has_cost()).then(pl.col("flops") / secs).otherwise(None).alias("achieved_flops"),
        pl.when((secs > 0) & has_cost()).then(pl.col("bytes") / secs).otherwise(None).alias("achieved_bw"),
        pl.when(pl.col("exec_ps") > 0).then(pl.col("roofline_ps") / pl.col("exec_ps")).otherwise(None).alias("efficiency"))
    g = g.with_columns(
        (pl.col("achieved_flops") / pf if pf else pl.lit(None, dtype=pl.Float64)).alias("frac_peak_flops"),
        (pl.col("achieved_bw") / pb if pb else pl.lit(None, dtype=pl.Float64)).alias("frac_peak_bw"))
    return (g.select(list(schema)).cast(schema)
            .sort(["total_ps", "op_name", "shape"], descending=[True, False, False], maintain_order=True))


def has_cost(flops: str = "flops", bytes_: str = "bytes") -> pl.Expr:
    """Whether an op has a cost to place on the roofline: a FLOP or byte count that is neither
    missing nor 0 (a trace states 0 and 0 for a custom kernel it cannot cost, e.g. a Pallas
    kernel on TPU: such an op has no roofline time and stays out of predicted-vs-measured)."""
    return (pl.col(flops).fill_null(0) != 0) | (pl.col(bytes_).fill_null(0) != 0)


def _weighted_mean(name: str, w: pl.Expr) -> pl.Expr:
    """Mean of ``name`` weighted by ``w`` over its non-null values; null when there is none."""
    have = pl.col(name).is_not_null()
    return pl.when(have.any()).then((pl.col(name) * w).filter(have).sum() / w.filter(have).sum())


_ASYNC = r"(?:-start|-done|-update)(?:\.\d+)?$|^(?:send|recv)(?:-done)?(?:\.\d+)?$"
# the synchronous collectives of traceview.analysis.communication.collectives' family (send/recv are async above)
_COLLECTIVE = (r"^(?:" + "|".join(k for k in COLLECTIVE_KINDS if k not in ("send", "recv")) + r")(?:\.\d+)?$")

_ROOF_SCHEMA = {
    "op_name": pl.Utf8, "shape": pl.Utf8, "category": pl.Utf8, "occurrences": pl.Int64, "executions": pl.Int64,
    "kernels_per_execution": pl.Float64, "mean_ps": pl.Float64, "exec_ps": pl.Float64, "total_ps": pl.Int64, "flops": pl.Float64, "bytes": pl.Float64, "cost_source": pl.Utf8,
    "intensity": pl.Float64, "achieved_flops": pl.Float64, "achieved_bw": pl.Float64,
    "frac_peak_flops": pl.Float64, "frac_peak_bw": pl.Float64, "bound_by": pl.Utf8,
    "roofline_ps": pl.Float64, "efficiency": pl.Float64, "warning": pl.Utf8,
}


def predicted_vs_measured(roof: pl.DataFrame) -> dict:
    """Sum over populations with known costs of roofline time × executions against their
    measured total time (the study's "roofline-predicted 349 µs against 375 µs measured").
    Returns {"predicted_ps", "measured_ps", "ratio", "covered_share", "off_roofline"} (predicted_ps
    and ratio None when the roofline time is not finite, under extreme peaks) where
    covered_share is the fraction of measured time whose ops have a cost and off_roofline lists,
    per reason ("collective", "async"), the populations kept off the HBM roofline: dicts with
    bound_by, populations, ops (op names, largest first, at most 5), total_ps, share, why."""
    known = roof.filter(pl.col("roofline_ps").is_not_null())
    predicted = float((known["roofline_ps"] * known["executions"]).sum() or 0.0)
    measured = float(known["total_ps"].sum() or 0.0)
    total = float(roof["total_ps"].sum() or 0.0)
    off = []
    for kind, why in _OFF_ROOFLINE.items():
        rows = roof.filter(pl.col("bound_by") == kind)
        if rows.height:
            t = float(rows["total_ps"].sum() or 0.0)
            off.append({"bound_by": kind, "populations": rows.height, "ops": rows["op_name"].unique(maintain_order=True).head(5).to_list(),
                        "total_ps": t, "share": t / total if total else None, "why": why})
    if not math.isfinite(predicted):  # peaks so extreme that the roofline time overflows
        predicted = None
    return {"predicted_ps": predicted, "measured_ps": measured,
            "ratio": predicted / measured if measured and predicted is not None else None,
            "covered_share": measured / total if total else None, "off_roofline": off}


_OFF_ROOFLINE = {
    "collective": ("collectives move their bytes over the chip interconnect, not HBM; they are judged "
                   "by algorithm and bus bandwidth against the link peak (the communication section), not by the HBM roofline"),
    "async": ("the -start/-done halves of asynchronous ops only issue and await a transfer that runs "
              "while other ops do; their own duration carries no cost"),
}
