"""Inside a Pallas kernel on TPU: its pipeline stages, the hardware counters and the LLO bundles,
per kernel invocation, from the kernel-profiling lines (:mod:`traceview.model.kernel_lines`).

An *invocation* is one ``XLA Ops`` event on the device whose window holds stage events
(``XLA TraceMe``). Stages nested inside another stage (a kernel's own scopes, such as ``init``
and ``acc`` inside ``ep_run_kernel``) are kept apart from the top-level ones, so the top-level
stages of an invocation sum to no more than its time. Categories of the top-level stages, from
Pallas' ``emit_pipeline`` names: ``wait`` (``ep_wait_in`` / ``ep_wait_out``: the kernel blocked
on a copy), ``copy`` (``ep_copy_in`` / ``ep_copy_out``: issuing the copies), ``compute``
(``ep_run_kernel``), ``setup`` (``ep_initialize_*``, ``ep_finalize``), ``other``. Counters are
averaged over their time inside the invocations (each event's interval clipped to its
invocation), weighted by that time; bundles are counted per top-level stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

_CATEGORY = (("ep_wait", "wait"), ("ep_copy", "copy"), ("ep_run_kernel", "compute"), ("ep_initialize", "setup"),
             ("ep_finalize", "setup"))


def category(name: str) -> str:
    """The stage category of a stage name (module docstring)."""
    for prefix, cat in _CATEGORY:
        if name.startswith(prefix):
            return cat
    return "other"


@dataclass
class KernelInside:
    """``invocations``: device, op_name, start_ps, duration_ps, stages_ps (top-level stage time),
    wait_ps, copy_ps, compute_ps, setup_ps, other_ps, bundles, mxu_util (time-weighted ``MXU``
    counter, %). ``stages``: name, category, nested, count, total_ps, mean_ps, share (total over
    the invocations' time), bundles. ``counters``: name, value_name, mean (time-weighted), max,
    events. ``summary``: kernel time, the category shares, MXU busy. ``notes``."""

    invocations: pl.DataFrame
    stages: pl.DataFrame
    counters: pl.DataFrame
    summary: dict
    notes: list = field(default_factory=list)


def kernel_inside(prof, kernels: pl.DataFrame | None = None) -> KernelInside | None:
    """The :class:`KernelInside` of a profile; without kernel-profiling lines, None, or (when
    ``kernels``, the report's custom kernels, lists some on a TPU) an empty one whose note names
    the flags that capture the lines."""
    kl = getattr(prof, "kernel_lines", None)
    if kl is None or kl.height == 0:
        tpu = any(getattr(d, "kind", "") == "TPU" for d in getattr(prof, "devices", []) or [])
        if tpu and kernels is not None and kernels.height:
            from traceview.model.kernel_lines import CAPTURE_FLAGS

            return KernelInside(pl.DataFrame(), pl.DataFrame(), pl.DataFrame(), {}, [
                "no kernel-profiling lines (pipeline stages, counters, LLO bundles) in this trace: capture with "
                + CAPTURE_FLAGS])
        return None
    notes_in = []
    bad = kl.filter((pl.col("line") == "_counters_") & pl.col("value").is_not_null() & ~pl.col("value").is_finite())
    if bad.height:
        notes_in.append(f"{bad.height:,} counter value(s) not finite dropped")
        kl = kl.filter(~((pl.col("line") == "_counters_") & pl.col("value").is_not_null() & ~pl.col("value").is_finite()))
    stages = kl.filter(pl.col("line") == "XLA TraceMe")
    if stages.height == 0 or not stages["name"].str.starts_with("ep_").any():
        return KernelInside(pl.DataFrame(), pl.DataFrame(), pl.DataFrame(), {},
                            ["kernel-profiling lines without pipeline stages (XLA TraceMe): nothing to place"])
    # the ops a Pallas kernel runs as: custom calls (no other op holds pipeline stages)
    ops = prof.table.filter(pl.col("op_kind") == "custom-call").frame(
        ["host", "device", "op_name", "start_ps", "duration_ps"]).filter(pl.col("start_ps").is_not_null())
    inv_parts, stage_parts, ctr_parts = [], [], []
    for (host, dev), st in stages.sort("start_ps").group_by(["host", "device"], maintain_order=True):
        o = ops.filter((pl.col("host") == host) & (pl.col("device") == dev)).sort("start_ps")
        got = _device(o, st, kl.filter((pl.col("host") == host) & (pl.col("device") == dev)))
        if got is not None:
            inv_parts.append(got[0].with_columns(pl.lit(dev).alias("device")))
            stage_parts.append(got[1])
            ctr_parts.append(got[2])
    notes = []
    if not inv_parts:
        return KernelInside(pl.DataFrame(), pl.DataFrame(), pl.DataFrame(), {},
                            ["pipeline stages lie outside every op event of their device: no invocation to place "
                             "them in"])
    inv = pl.concat(inv_parts, how="vertical_relaxed")
    st = pl.concat(stage_parts, how="vertical_relaxed")
    notes = notes_in + notes
    over = inv.filter(pl.col("stages_ps") > pl.col("duration_ps"))
    if over.height:  # top-level stages cannot take longer than their invocation: a corrupt line
        notes.append(f"{over.height:,} invocation(s) whose top-level stages outlast them (corrupt stage "
                     "durations): no stage share is shown")
        return KernelInside(pl.DataFrame(), pl.DataFrame(), pl.DataFrame(), {}, notes)
    total = float(inv["duration_ps"].sum())
    stages_out = (st.group_by("name").agg(pl.col("category").first(), pl.col("nested").first(), pl.len().alias("count"),
                                          pl.col("duration_ps").sum().alias("total_ps"),
                                          pl.col("duration_ps").mean().alias("mean_ps"),
                                          pl.col("bundles").sum())
                  .with_columns((pl.col("total_ps") / total).alias("share"))
                  .sort(["nested", "total_ps"], descending=[False, True]))
    ctr = pl.concat(ctr_parts, how="vertical_relaxed") if ctr_parts else pl.DataFrame()
    counters = (ctr.filter(pl.col("w") > 0).group_by("name", "value_name")
                .agg(((pl.col("value") * pl.col("w")).sum() / pl.col("w").sum()).alias("mean"),
                     pl.col("value").max().alias("max"), pl.len().alias("events")).sort("name")
                if ctr.height else pl.DataFrame(schema={"name": pl.Utf8, "value_name": pl.Utf8, "mean": pl.Float64,
                                                        "max": pl.Float64, "events": pl.UInt32}))
    if not ctr.height:
        notes.append("no hardware counters (_counters_) inside the kernels' windows")
    summ = {"invocations": inv.height, "kernel_ps": total, "stages_ps": float(inv["stages_ps"].sum())}
    for c in ("wait", "copy", "compute", "setup", "other"):
        summ[f"{c}_share"] = float(inv[f"{c}_ps"].sum()) / total if total else None
    mxu = counters.filter(pl.col("name") == "MXU") if counters.height else counters
    summ["mxu_util"] = float(mxu["mean"][0]) if mxu.height else None
    summ["bundles"] = int(inv["bundles"].sum())
    return KernelInside(inv.select("device", *[c for c in inv.columns if c != "device"]), stages_out, counters, summ,
                        notes)


def _device(ops: pl.DataFrame, st: pl.DataFrame, lines: pl.DataFrame):
    """(invocations, stage rows, clipped counter rows) of one device; None without an op
    holding a stage."""
    o_s = ops["start_ps"].to_numpy()
    o_e = o_s + ops["duration_ps"].fill_null(0).to_numpy()
    s_s = st["start_ps"].to_numpy()
    s_e = s_s + st["duration_ps"].fill_null(0).to_numpy()
    # the op whose window holds a stage: the last op starting at or before it, if it ends after
    k = np.searchsorted(o_s, s_s, side="right") - 1
    inside = (k >= 0) & (s_s < o_e[np.maximum(k, 0)]) if len(o_s) else np.zeros(len(s_s), bool)
    if not inside.any():
        return None
    st = st.filter(pl.Series(inside))
    k, s_s, s_e = k[inside], s_s[inside], s_e[inside]
    # nested: contained in an earlier stage of the same invocation (stages in start order)
    nested = s_e <= _group_prev_max(s_e, k)
    cats = st["name"].map_elements(category, return_dtype=pl.Utf8)
    # bundles per top-level stage: each bundle to the top-level stage whose window holds it
    b = lines.filter(pl.col("line") == "Tensor Core")["start_ps"].sort().to_numpy()
    top = ~nested
    t_idx = np.flatnonzero(top)
    bundles = np.zeros(len(s_s), dtype=np.int64)
    if len(b) and len(t_idx):
        j = np.searchsorted(s_s[t_idx], b, side="right") - 1
        ok = (j >= 0) & (b <= s_e[t_idx][np.maximum(j, 0)])
        np.add.at(bundles, t_idx[j[ok]], 1)
    rows = st.with_columns(cats.alias("category"), pl.Series("nested", nested), pl.Series("bundles", bundles),
                           pl.Series("inv", k))
    inv_ids = np.unique(k)
    per = (rows.filter(~pl.col("nested")).group_by("inv", "category").agg(pl.col("duration_ps").sum())
           .pivot(on="category", index="inv", values="duration_ps"))
    for c in ("wait", "copy", "compute", "setup", "other"):
        if c not in per.columns:
            per = per.with_columns(pl.lit(0, dtype=pl.Int64).alias(c))
    per = per.with_columns([pl.col(c).fill_null(0).alias(f"{c}_ps") for c in ("wait", "copy", "compute", "setup",
                                                                             "other")])
    bsum = rows.group_by("inv").agg(pl.col("bundles").sum())
    inv = (pl.DataFrame({"inv": inv_ids, "op_name": ops["op_name"].gather(inv_ids),
                         "start_ps": o_s[inv_ids], "duration_ps": o_e[inv_ids] - o_s[inv_ids]})
           .join(per.select("inv", *[f"{c}_ps" for c in ("wait", "copy", "compute", "setup", "other")]), on="inv",
                 how="left")
           .join(bsum, on="inv", how="left")
           .with_columns(pl.sum_horizontal([pl.col(f"{c}_ps") for c in ("wait", "copy", "compute", "setup", "other")])
                         .alias("stages_ps")))
    # counters: each event clipped to the invocation whose window it starts in
    c = lines.filter(pl.col("line") == "_counters_").sort("start_ps")
    ctr = pl.DataFrame()
    if c.height:
        c_s = c["start_ps"].to_numpy()
        c_e = c_s + c["duration_ps"].fill_null(0).to_numpy()
        ids = inv_ids
        w_s, w_e = o_s[ids], o_e[ids]
        j = np.searchsorted(w_s, c_s, side="right") - 1
        ok = (j >= 0) & (c_s < w_e[np.maximum(j, 0)])
        w = np.where(ok, np.minimum(c_e, w_e[np.maximum(j, 0)]) - c_s, 0)
        ctr = c.select("name", "value_name", "value").with_columns(pl.Series("w", w.astype(np.float64))).filter(
            pl.col("value").is_not_null())
        inv = inv.join(_mxu_per_inv(c, j, ok, w, ids), on="inv", how="left")
    else:
        inv = inv.with_columns(pl.lit(None, dtype=pl.Float64).alias("mxu_util"))
    return inv.drop("inv"), rows.drop("inv"), ctr


def _group_prev_max(ends: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Per element the max of the earlier elements' ``ends`` within its run of equal ``group``
    (runs contiguous); a run's first element gets the int64 minimum. One accumulate per run
    (a run is one kernel invocation)."""
    lo = np.iinfo(np.int64).min
    out = np.full(len(ends), lo, dtype=np.int64)
    if len(ends) < 2:
        return out
    starts = np.concatenate([[0], np.flatnonzero(group[1:] != group[:-1]) + 1, [len(ends)]]).tolist()
    shifted = np.concatenate([[lo], ends[:-1]])
    for a, b in zip(starts[:-1], starts[1:]):
        shifted[a] = lo
        out[a:b] = np.maximum.accumulate(shifted[a:b])
    return out


def _mxu_per_inv(c: pl.DataFrame, j: np.ndarray, ok: np.ndarray, w: np.ndarray, ids: np.ndarray) -> pl.DataFrame:
    """Per invocation the time-weighted MXU counter (``inv``, ``mxu_util``)."""
    m = (c["name"] == "MXU").to_numpy() & ok & (w > 0) & c["value"].is_not_null().to_numpy()
    if not m.any():
        return pl.DataFrame({"inv": ids, "mxu_util": [None] * len(ids)}, schema={"inv": pl.Int64,
                                                                               "mxu_util": pl.Float64})
    v = c["value"].to_numpy()
    num = np.bincount(j[m], weights=v[m] * w[m], minlength=len(ids))
    den = np.bincount(j[m], weights=w[m], minlength=len(ids))
    with np.errstate(invalid="ignore", divide="ignore"):
        util = np.where(den > 0, num / den, np.nan)
    return pl.DataFrame({"inv": ids, "mxu_util": util}).with_columns(pl.col("mxu_util").fill_nan(None))
