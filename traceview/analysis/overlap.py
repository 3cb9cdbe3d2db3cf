"""Communication/computation overlap: per async op and per step, on each device's timeline.

**Per op** (``Overlap.ops``, one row per collective or async copy execution on a device):

- an async pair ``X-start`` .. ``X-done`` (``all-reduce-start``, ``all-gather-start``,
  ``collective-permute-start``, ``copy-start``, ``async-start`` (a collective only when XLA
  named it after one: ``all-gather-start``; ``slice-start`` is a device-side async op),
  ``send``/``recv`` ..
  ``send-done``/``recv-done``) is matched on a device by the done's operand (its HLO text
  names the start: ``copy-done(... %copy-start)``), oldest unmatched start first. **In flight**
  = the start's begin to the done's end (ps). **Hidden** = the part of that time during which
  the same device executed compute ops (the union of their events, any thread or stream);
  **exposed** = in flight - hidden (the device waited at the done, or ran nothing);
  ``wait_at_done_ps`` is the done event's own duration (part of the exposed time).
- a synchronous collective (``all-reduce``, ``all-gather``, ``reduce-scatter``, ``all-to-all``,
  ``collective-permute``, ...: one event) is in flight for its duration and wholly **exposed**:
  the device does nothing else of the program meanwhile. XLA:CPU runs every collective this
  way (a blocking rendezvous of the devices' threads), so on CPU traces all communication is
  exposed by construction.

**Per step** (``Overlap.steps``, per (host, device, step) of the step anatomy): the step's
wall time is partitioned, each instant counted once, in this priority order:
**exposed communication** (a synchronous collective runs, or an async collective is in flight
and no compute runs), **compute** (any other op runs: fusions, matmuls, the start/done events
of async copies between device buffers and of other async ops...), **host** (a transfer to or from host memory, a
copy whose HLO shape carries memory space ``S(5)``, is in flight and nothing above runs),
**idle** (nothing). So compute + exposed + host + idle = step time exactly. **Hidden
communication** is the part of compute during which an async collective was in flight (not a
fifth bucket: it lies inside compute). ``critical_share`` = exposed / step time: the share of
the step that communication holds on the critical path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import polars as pl

#: synchronous collective opcodes (HLO), each one event
SYNC_COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "ragged-all-to-all",
                    "collective-permute", "collective-broadcast")
#: opcodes that begin an async pair
ASYNC_STARTS = ("all-reduce-start", "all-gather-start", "collective-permute-start", "copy-start", "async-start",
                "send", "recv")
#: opcodes that end one
ASYNC_DONES = ("all-reduce-done", "all-gather-done", "collective-permute-done", "copy-done", "async-done",
               "send-done", "recv-done")
_OPERAND = re.compile(r"%([A-Za-z0-9_.\-]+)")
_HOST_SPACE = "S(5)"  # XLA's host memory space annotation in an HLO layout

OPS_SCHEMA = {"host": pl.Utf8, "device": pl.Utf8, "module": pl.Utf8, "op_name": pl.Utf8, "op_kind": pl.Utf8,
              "shape": pl.Utf8, "kind": pl.Utf8, "sync": pl.Boolean, "start_ps": pl.Int64, "end_ps": pl.Int64,
              "in_flight_ps": pl.Int64, "hidden_ps": pl.Int64, "exposed_ps": pl.Int64, "wait_at_done_ps": pl.Int64}
STEPS_SCHEMA = {"host": pl.Utf8, "device": pl.Utf8, "step": pl.Int64, "start_ps": pl.Int64, "step_ps": pl.Int64,
                "compute_ps": pl.Int64, "exposed_ps": pl.Int64, "hidden_ps": pl.Int64, "host_ps": pl.Int64,
                "idle_ps": pl.Int64, "critical_share": pl.Float64}


@dataclass
class Overlap:
    """Result of :func:`overlap`. ``ops``: :data:`OPS_SCHEMA` (``kind``: "collective",
    "host transfer", "copy" or "async op"; times in ps). ``populations``: ``ops`` summed per (kind, op_kind,
    op_name, shape): n, sync, in_flight_ps, hidden_ps, exposed_ps, wait_at_done_ps, hidden_share;
    collectives first, then host transfers, then device copies, each by in-flight time. ``steps``:
    :data:`STEPS_SCHEMA`. ``summary``: over all steps: step_ps, compute_ps, exposed_ps,
    hidden_ps, host_ps, idle_ps (sums), exposed_share (exposed / step time), n_steps, n_devices,
    collectives (collective executions), async_ops (async pairs of any kind), synchronous
    (True when every collective was synchronous). ``notes``: what the reader must
    know (synchronous collectives counted exposed)."""

    ops: pl.DataFrame
    populations: pl.DataFrame
    steps: pl.DataFrame
    summary: dict
    notes: list = field(default_factory=list)


def _class_expr() -> pl.Expr:
    """Per op description: "collective", "host transfer", "copy" (async copy between device
    buffers), "async op" (another wrapped async computation, e.g. ``slice-start``) or null
    (compute)."""
    kind, host = pl.col("op_kind"), pl.col("hlo_text").str.contains(_HOST_SPACE, literal=True)
    is_async = kind.is_in(list(ASYNC_STARTS) + list(ASYNC_DONES))
    # a generic async-start/-done wraps any computation: XLA names it after it (all-gather-start,
    # slice-start); only a collective's name makes it communication
    wraps_collective = pl.col("op_name").str.contains("^(" + "|".join(SYNC_COLLECTIVES) + ")-(start|done)")
    return (pl.when(kind.is_in(list(SYNC_COLLECTIVES))).then(pl.lit("collective"))
            .when(is_async & kind.str.starts_with("copy-") & host).then(pl.lit("host transfer"))
            .when(is_async & kind.str.starts_with("copy-")).then(pl.lit("copy"))
            .when(kind.is_in(["async-start", "async-done"]) & ~wraps_collective).then(pl.lit("async op"))
            .when(is_async).then(pl.lit("collective"))
            .when((kind == "copy") & host).then(pl.lit("host transfer"))
            .otherwise(pl.lit(None, dtype=pl.Utf8)).alias("_cls"))


def _events(table) -> tuple[pl.DataFrame, bool]:
    """Placed events in (host, device, start) order with ``_cls`` and, for communication
    events only, their op columns; and whether any event is communication or a transfer."""
    cols = ["host", "device", "module", "op_name", "op_kind", "shape", "hlo_text"]
    if hasattr(table, "attrs"):  # an OpTable: classify its descriptions, not its events
        attrs = table.attrs.select(["attr"] + cols).with_columns(_class_expr())
        used = attrs.filter(pl.col("_cls").is_not_null())
        ev = table.events.select("attr", "start_ps", "duration_ps").filter(pl.col("start_ps").is_not_null())
        if used.height == 0 or not ev["attr"].is_in(used["attr"].implode()).any():
            return ev.head(0), False
        ev = ev.join(attrs.select("attr", "host", "device", "_cls"), on="attr", how="left", maintain_order="left")
        ev = ev.join(used.select(["attr"] + cols[2:]), on="attr", how="left", maintain_order="left")
    else:
        ev = table.select(cols + ["start_ps", "duration_ps"]).filter(pl.col("start_ps").is_not_null()) \
            .with_columns(_class_expr())
        if not ev["_cls"].is_not_null().any():
            return ev.head(0), False
    return ev.sort(["host", "device", "start_ps"], maintain_order=True), True


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering the union of [starts, ends)."""
    if len(starts) == 0:
        return starts, ends
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    us = s[idx]
    ue = run_end[np.r_[idx[1:] - 1, len(s) - 1]]  # each group's end: the running max at its last member
    return us, ue


def _covered(us: np.ndarray, ue: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per window [a_i, b_i): the time inside it covered by the disjoint sorted intervals (us, ue)."""
    if len(us) == 0:
        return np.zeros(len(a), dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(ue - us)])

    def upto(t):  # covered time in (-inf, t)
        i = np.searchsorted(us, t, side="right")  # intervals starting before t
        inside = np.where(i > 0, np.minimum(ue[np.maximum(i - 1, 0)], t) - us[np.maximum(i - 1, 0)], 0)
        return cum[np.maximum(i - 1, 0)] * (i > 0) + np.maximum(inside, 0)

    return upto(b) - upto(a)


def _subtract(us, ue, vs, ve):
    """(us, ue) minus (vs, ve), both disjoint sorted: disjoint sorted intervals."""
    if len(us) == 0 or len(vs) == 0:
        return us, ue
    pts = np.unique(np.concatenate([us, ue, vs, ve]))
    mid_a, mid_b = pts[:-1], pts[1:]
    in_u = _covered(us, ue, mid_a, mid_b) == (mid_b - mid_a)
    in_v = _covered(vs, ve, mid_a, mid_b) > 0
    keep = in_u & ~in_v
    return _union(mid_a[keep], mid_b[keep])


def _comm_ops(ops: pl.DataFrame) -> pl.DataFrame:
    """One row per collective / transfer execution (:data:`OPS_SCHEMA` less the hidden and
    exposed columns, plus ``_async``): synchronous ones as they are; an async done paired with
    the start its HLO text names (``copy-done(... %copy-start)``), the k-th done naming a start
    on a device with that start's k-th execution there (oldest unmatched first)."""
    c = ops.filter(pl.col("_cls").is_not_null()).with_columns((pl.col("start_ps") + pl.col("duration_ps")).alias("_end"))
    key = ["host", "device", "module"]
    sync = c.filter(pl.col("op_kind").is_in(list(SYNC_COLLECTIVES)) | (pl.col("op_kind") == "copy")).select(
        key + ["op_name", "op_kind", "shape", pl.col("_cls").alias("kind"), pl.lit(True).alias("sync"), "start_ps",
               pl.col("_end").alias("end_ps"), pl.lit(0, dtype=pl.Int64).alias("wait_at_done_ps")])
    starts = (c.filter(pl.col("op_kind").is_in(list(ASYNC_STARTS)))
              .with_columns(pl.int_range(pl.len()).over(key + ["op_name"]).alias("_k")))
    dones = (c.filter(pl.col("op_kind").is_in(list(ASYNC_DONES)))
             .with_columns(pl.col("hlo_text").str.extract(r"-done\(.*?%([A-Za-z0-9_.\-]+)", 1).alias("_of"))
             .filter(pl.col("_of").is_not_null())
             .with_columns(pl.int_range(pl.len()).over(key + ["_of"]).alias("_k")))
    pairs = starts.join(dones.select(key + [pl.col("_of").alias("op_name"), "_k", pl.col("start_ps").alias("_ds"),
                                            pl.col("_end").alias("_de")]),
                        on=key + ["op_name", "_k"], how="inner", nulls_equal=True)
    pairs = pairs.filter(pl.col("_ds") >= pl.col("start_ps")).select(
        key + ["op_name", "op_kind", "shape", pl.col("_cls").alias("kind"), pl.lit(False).alias("sync"), "start_ps",
               pl.max_horizontal("_de", "_end").alias("end_ps"), (pl.col("_de") - pl.col("_ds")).alias("wait_at_done_ps")])
    return pl.concat([sync, pairs], how="vertical").sort(["host", "device", "start_ps"], maintain_order=True)


def overlap(table, steps: pl.DataFrame | None) -> Overlap:
    """Overlap of ``table`` (an OpTable or the wide op frame: host, device, module, op_name,
    op_kind, shape, hlo_text, start_ps, duration_ps) within the step windows ``steps`` (the
    step anatomy's frame: host, device, step, start_ps, duration_ps; ``in_window`` rows only
    when that column exists; None or empty: one window per device over its ops). Never raises
    on an empty table (empty frames)."""
    ops, any_comm = _events(table)
    if steps is not None and "in_window" in steps.columns:
        steps = steps.filter(pl.col("in_window"))
    comm = _comm_ops(ops) if any_comm else pl.DataFrame(schema={k: v for k, v in OPS_SCHEMA.items()})
    wins = (steps.select("host", "device", "step", "start_ps", "duration_ps").partition_by(
        ["host", "device"], as_dict=True, maintain_order=True) if steps is not None and steps.height else {})
    comm_by = comm.partition_by(["host", "device"], as_dict=True, maintain_order=True) if comm.height else {}
    op_parts, step_parts = [], []
    arr = lambda x: x.to_numpy().astype(np.int64)
    for (host, device), dev in (ops.group_by(["host", "device"], maintain_order=True) if any_comm else []):
        s = arr(dev["start_ps"])
        e = s + arr(dev["duration_ps"])
        is_comp = (dev["_cls"].is_null() | dev["_cls"].is_in(["copy", "async op"])).to_numpy()
        cu_s, cu_e = _union(s[is_comp], e[is_comp])
        cd = comm_by.get((host, device))
        if cd is not None and cd.height:
            t0, t1 = arr(cd["start_ps"]), arr(cd["end_ps"])
            sync = cd["sync"].to_numpy()
            hid = np.where(sync, 0, _covered(cu_s, cu_e, t0, t1))
            op_parts.append(cd.with_columns(pl.Series("in_flight_ps", t1 - t0), pl.Series("hidden_ps", hid),
                                            pl.Series("exposed_ps", t1 - t0 - hid)))
            kind = cd["kind"]
            is_coll, is_host = (kind == "collective").to_numpy(), (kind == "host transfer").to_numpy()
            sy_s, sy_e = _union(t0[is_coll & sync], t1[is_coll & sync])
            as_s, as_e = _union(t0[is_coll & ~sync], t1[is_coll & ~sync])
            ho_s, ho_e = _union(t0[is_host], t1[is_host])
        else:
            sy_s = sy_e = as_s = as_e = ho_s = ho_e = np.zeros(0, dtype=np.int64)
        w = wins.get((host, device))
        if w is None or w.height == 0:
            if len(s) == 0:
                continue
            wa, wb, wstep = np.array([s.min()]), np.array([e.max()]), np.array([0])
        else:
            wa = arr(w["start_ps"])
            wb, wstep = wa + arr(w["duration_ps"]), arr(w["step"])
        comp_s, comp_e = _subtract(cu_s, cu_e, sy_s, sy_e)           # compute not under a sync collective
        exposed = _covered(sy_s, sy_e, wa, wb) + _covered(*_subtract(*_subtract(as_s, as_e, cu_s, cu_e), sy_s, sy_e),
                                                           wa, wb)
        compute = _covered(comp_s, comp_e, wa, wb)
        hidden = _covered(*_subtract(*_intersect(as_s, as_e, comp_s, comp_e), sy_s, sy_e), wa, wb)
        busy_s, busy_e = _union(np.concatenate([cu_s, sy_s, as_s]), np.concatenate([cu_e, sy_e, as_e]))
        host_only = _covered(*_subtract(ho_s, ho_e, busy_s, busy_e), wa, wb)
        span = wb - wa
        step_parts.append(pl.DataFrame({
            "host": [host] * len(wa), "device": [device] * len(wa), "step": wstep, "start_ps": wa, "step_ps": span,
            "compute_ps": compute, "exposed_ps": exposed, "hidden_ps": hidden, "host_ps": host_only,
            "idle_ps": span - compute - exposed - host_only,
            "critical_share": np.where(span > 0, exposed / np.maximum(span, 1), np.nan)},
            schema=STEPS_SCHEMA).with_columns(pl.col("critical_share").fill_nan(None)))
    op_df = (pl.concat(op_parts, how="vertical").select(list(OPS_SCHEMA)).cast(OPS_SCHEMA) if op_parts
             else pl.DataFrame(schema=OPS_SCHEMA))
    st_df = pl.concat(step_parts, how="vertical") if step_parts else pl.DataFrame(schema=STEPS_SCHEMA)
    any_async = bool(op_df.height) and bool(op_df.filter((pl.col("kind") == "collective") & ~pl.col("sync")).height)
    pops = (op_df.group_by(["kind", "op_kind", "op_name", "shape"], maintain_order=True)
            .agg(pl.len().alias("n"), pl.col("sync").all(), pl.col("in_flight_ps").sum(), pl.col("hidden_ps").sum(),
                 pl.col("exposed_ps").sum(), pl.col("wait_at_done_ps").sum())
            .with_columns((pl.col("hidden_ps") / pl.col("in_flight_ps")).alias("hidden_share"),
                          pl.col("kind").replace_strict({"collective": 0, "host transfer": 1}, default=2,
                                                        return_dtype=pl.Int8).alias("_order"))
            .sort(["_order", "in_flight_ps"], descending=[False, True]).drop("_order"))
    tot = {k: int(st_df[k].sum()) if st_df.height else 0
           for k in ("step_ps", "compute_ps", "exposed_ps", "hidden_ps", "host_ps", "idle_ps")}
    n_coll = op_df.filter(pl.col("kind") == "collective")
    summary = dict(tot, exposed_share=tot["exposed_ps"] / tot["step_ps"] if tot["step_ps"] else None,
                   n_steps=st_df.select("host", "step").n_unique() if st_df.height else 0,
                   n_devices=st_df.select("host", "device").n_unique() if st_df.height else 0,
                   collectives=n_coll.height, async_ops=op_df.filter(~pl.col("sync")).height,
                   synchronous=bool(n_coll.height) and bool(n_coll["sync"].all()))
    notes = []
    if summary["synchronous"]:
        notes.append("every collective here is synchronous (one event, e.g. XLA:CPU's blocking rendezvous): "
                     "its whole time counts as exposed communication, none as hidden")
    if not any_async and not n_coll.height:
        notes.append("no collective in the trace")
    return Overlap(ops=op_df, populations=pops, steps=st_df, summary=summary, notes=notes)


def _intersect(us, ue, vs, ve):
    """(us, ue) ∩ (vs, ve), both disjoint sorted."""
    if len(us) == 0 or len(vs) == 0:
        return us[:0], ue[:0]
    pts = np.unique(np.concatenate([us, ue, vs, ve]))
    a, b = pts[:-1], pts[1:]
    full = b - a
    keep = (_covered(us, ue, a, b) == full) & (_covered(vs, ve, a, b) == full)
    return _union(a[keep], b[keep])


def profile_overlap(prof, steps=None) -> Overlap:
    """:func:`overlap` of a profile within its step anatomy's windows (``steps``: a
    :class:`~traceview.analysis.steps.StepAnatomy`, default the profile's)."""
    if steps is None:
        from traceview.analysis.steps import profile_anatomy

        steps = profile_anatomy(prof)
    return overlap(prof.table, steps.steps if steps is not None else None)
