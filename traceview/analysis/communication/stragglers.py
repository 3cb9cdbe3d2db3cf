"""Stragglers and skew: which device holds a step back, and the collective waits it causes.

Per step and device, **busy** = the compute time of :mod:`traceview.analysis.communication.overlap` (ops
other than collectives and host transfers running, ps): the work a device must do before it
can take part in the step's collectives. The **slowest device** of a step is the one with the
largest busy time; its **lead** = (its busy - the median busy of the step's devices) / that
median.

**Collective waits.** One collective execution is matched across its participants by
(module, op name, execution index: the k-th execution of that op on each device). A device
*arrives* when its event starts; the collective cannot complete before the last participant
arrives, so each participant's **wait** = last arrival - its arrival (ps), and the waits of an
execution are **attributed** to the device that arrived last. (On XLA:CPU, where the
collective is a blocking rendezvous, a participant's event duration is that wait plus the
exchange itself.)

**Clock offsets across hosts.** Each host has its own clock. A collective completes on all
participants at (nearly) the same instant, so the offset of host h against the first host is
the median, over the executions both took part in, of (mean end on the first host - mean end
on h). The offsets are added to h's times before arrivals are compared, and stated
(``Stragglers.clock_offsets``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from traceview.analysis.communication.overlap import ASYNC_STARTS, SYNC_COLLECTIVES

DEVICES_SCHEMA = {"host": pl.Utf8, "device": pl.Utf8, "step": pl.Int64, "busy_ps": pl.Int64, "wait_ps": pl.Int64,
                  "caused_wait_ps": pl.Int64, "last_arrivals": pl.Int64}
STEPS_SCHEMA = {"step": pl.Int64, "n_devices": pl.Int64, "slowest": pl.Utf8, "busy_max_ps": pl.Int64,
                "busy_median_ps": pl.Float64, "lead": pl.Float64, "last_to_arrive": pl.Utf8,
                "attributed_wait_ps": pl.Int64, "wait_ps": pl.Int64}
COLLECTIVES_SCHEMA = {"module": pl.Utf8, "op_name": pl.Utf8, "op_kind": pl.Utf8, "execution": pl.Int64,
                      "participants": pl.Int64, "last_host": pl.Utf8, "last_device": pl.Utf8,
                      "first_arrival_ps": pl.Int64, "last_arrival_ps": pl.Int64, "skew_ps": pl.Int64,
                      "wait_ps": pl.Int64}


@dataclass
class Stragglers:
    """Result of :func:`stragglers`. ``devices``: :data:`DEVICES_SCHEMA` per (host, device,
    step). ``steps``: :data:`STEPS_SCHEMA` per step (``lead`` a fraction; ``last_to_arrive``
    the device whose last arrivals at the step's collectives had the others wait longest (ties:
    the most last arrivals), null when none of the step's collectives was matched across devices;
    ``attributed_wait_ps`` that device's own attributed wait, its ``caused_wait_ps`` in
    ``devices``). ``collectives``: :data:`COLLECTIVES_SCHEMA`, one row
    per matched collective execution (``skew_ps`` = last - first arrival, ``wait_ps`` the sum
    of the participants' waits). ``summary``: straggler (the device slowest in most steps;
    ties: the most attributed wait), its steps_slowest, tied_devices (how many devices were
    slowest in as many steps, itself included), lead_median (over the steps it was
    slowest in), attributed_wait_ps (all others' waits attributed to it), wait_ps (all waits),
    attributed_share (attributed / all), lead_max, n_steps, n_devices; the straggler keys only
    when collective executions were matched across devices (a busy-time ranking alone would
    count a device's waits inside an unrecognised collective as work). ``clock_offsets``: {host: ps added
    to that host's times} (empty with one host). ``notes``: lines to state."""

    devices: pl.DataFrame
    steps: pl.DataFrame
    collectives: pl.DataFrame
    summary: dict
    clock_offsets: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)


#: what arrives at a collective: a synchronous one, or the start of an async pair
_KINDS = list(SYNC_COLLECTIVES) + [k for k in ASYNC_STARTS if not k.startswith("copy")]


def _executions(ops: pl.DataFrame) -> pl.DataFrame:
    """Collective events (sync ones and the starts of async pairs) with their execution index
    per (host, device, module, op_name)."""
    generic = (pl.col("op_kind") == "async-start") & ~pl.col("op_name").str.contains(
        "^(" + "|".join(SYNC_COLLECTIVES) + ")-start")  # slice-start and the like: not communication
    c = ops.filter(pl.col("op_kind").is_in(_KINDS) & pl.col("start_ps").is_not_null() & ~generic)
    return (c.sort(["host", "device", "start_ps"])
            .with_columns(pl.int_range(pl.len()).over(["host", "device", "module", "op_name"]).alias("execution"),
                          (pl.col("start_ps") + pl.col("duration_ps")).alias("end_ps")))


def clock_offsets(execs: pl.DataFrame) -> dict:
    """{host: offset ps} for every host but the first (sorted by name) that shares at least one
    collective execution with it (see the module doc); the first host's offset is 0."""
    hosts = sorted(execs["host"].unique().to_list())
    if len(hosts) < 2:
        return {}
    key = ["module", "op_name", "execution"]
    ends = execs.group_by(key + ["host"]).agg(pl.col("end_ps").mean().alias("end"))
    ref = ends.filter(pl.col("host") == hosts[0]).select(key + [pl.col("end").alias("ref")])
    out = {hosts[0]: 0}
    for h in hosts[1:]:
        m = ends.filter(pl.col("host") == h).join(ref, on=key, how="inner")
        if m.height:
            out[h] = int(round(float((m["ref"] - m["end"]).median())))
    return out


#: the order naming a step's last device: most attributed wait, then most last arrivals, then name
#: (``_r``: the name's rank)
_BY_CAUSED = ["caused_wait_ps", "last_arrivals", "_r"]


def stragglers(table, overlap_steps: pl.DataFrame) -> Stragglers:
    """Stragglers of ``table`` (an OpTable or the wide op frame) over the step windows of
    ``overlap_steps`` (:attr:`traceview.analysis.communication.overlap.Overlap.steps`: host, device, step,
    start_ps, step_ps, compute_ps). Never raises on empty input (empty frames)."""
    cols = ["host", "device", "module", "op_name", "op_kind", "start_ps", "duration_ps"]
    if hasattr(table, "attrs"):  # an OpTable: only the collectives' events become a frame
        ops = table.filter(pl.col("op_kind").is_in(_KINDS)).frame(cols)
    else:
        ops = table.select(cols)
    execs = _executions(ops)
    offsets = clock_offsets(execs)
    notes = []
    if offsets:
        execs = execs.with_columns(
            (pl.col("start_ps") + pl.col("host").replace_strict(offsets, default=0, return_dtype=pl.Int64))
            .alias("start_ps"))
        notes.append("clock offsets applied before comparing (from matching collective ends): "
                     + ", ".join(f"{h} {v / 1e6:+.3f} µs" for h, v in offsets.items()))
        unmatched = sorted(set(execs["host"].unique().to_list()) - set(offsets))
        if unmatched:
            notes.append("no collective shared with the first host, clock not aligned: " + ", ".join(unmatched))
    key = ["module", "op_name", "execution"]
    execs = execs.with_columns(
        pl.col("start_ps").max().over(key).alias("_last"), pl.len().over(key).alias("_n"))
    execs = execs.filter(pl.col("_n") > 1).with_columns((pl.col("_last") - pl.col("start_ps")).alias("wait_ps"))
    last = (execs.sort("start_ps", descending=True, maintain_order=True).group_by(key, maintain_order=True)
            .agg(pl.col("host").first().alias("last_host"), pl.col("device").first().alias("last_device"),
                 pl.col("op_kind").first(), pl.len().alias("participants"),
                 pl.col("start_ps").min().alias("first_arrival_ps"), pl.col("start_ps").max().alias("last_arrival_ps"),
                 pl.col("wait_ps").sum()))
    coll = (last.with_columns((pl.col("last_arrival_ps") - pl.col("first_arrival_ps")).alias("skew_ps"))
            .select(list(COLLECTIVES_SCHEMA)).cast(COLLECTIVES_SCHEMA).sort("first_arrival_ps"))
    # each execution to the step window holding its last arrival (on the last device); the
    # device-step frames carry (host, device) as one code, numbered in the pair's sort order
    pairs = ["host", "device"]
    if overlap_steps.height == 0:
        notes.append("no collective matched and no step windows with communication: no straggler figures")
        return Stragglers(devices=pl.DataFrame(schema=DEVICES_SCHEMA), steps=pl.DataFrame(schema=STEPS_SCHEMA),
                          collectives=coll, summary={}, clock_offsets=offsets, notes=notes)
    # the code of each row from its run of rows of one device (no join over every row's strings)
    new = overlap_steps.select((pl.col("host").ne_missing(pl.col("host").shift(1))
                                | pl.col("device").ne_missing(pl.col("device").shift(1))).alias("f"))["f"].to_numpy()
    new[0] = True
    firsts = np.flatnonzero(new)
    runs = overlap_steps.select(pairs)[firsts]
    codes = runs.unique().sort(pairs).with_row_index("_d")
    run_code = runs.join(codes, on=pairs, how="left", nulls_equal=True, maintain_order="left")["_d"].to_numpy()
    w = overlap_steps.select(
        pl.Series("_d", np.repeat(run_code, np.diff(np.append(firsts, overlap_steps.height))), dtype=pl.UInt32),
        "step", "start_ps", (pl.col("start_ps") + pl.col("step_ps")).alias("_e"), pl.col("compute_ps").alias("busy_ps"))
    del new, firsts, runs, run_code
    # the window holding each arrival (as-of on the start: no device-by-window product)
    ex = execs.join(codes, on=pairs, how="left", nulls_equal=True, maintain_order="left").sort("start_ps")
    held = _window_steps(ex, w)
    if held is not None:
        ex = ex.with_columns(held)
    else:
        ex = ex.join_asof(w.select("_d", "step", pl.col("start_ps").alias("_ws"), "_e").sort("_ws"),
                          left_on="start_ps", right_on="_ws", by="_d", strategy="backward", check_sortedness=False)
        ex = ex.with_columns(pl.when(pl.col("start_ps") < pl.col("_e")).then(pl.col("step")).alias("step"))
    ex = ex.join(last.select(key + ["last_host", "last_device"]), on=key, how="left")
    waited = ex.group_by(["_d", "step"]).agg(pl.col("wait_ps").sum().alias("wait_ps"))
    is_last = (pl.col("host") == pl.col("last_host")) & (pl.col("device") == pl.col("last_device"))
    # others' waits of an execution, attributed to its last device, in that device's step
    caused = (ex.group_by(key).agg(pl.col("wait_ps").sum().alias("caused_wait_ps"),
                                   pl.col("step").filter(is_last).first().alias("step"),
                                   pl.col("last_host").first().alias("host"), pl.col("last_device").first().alias("device"))
              .join(codes, on=pairs, how="left", nulls_equal=True)
              .group_by(["_d", "step"]).agg(pl.col("caused_wait_ps").sum(), pl.len().alias("last_arrivals")))
    # a device's name: host:device with several hosts; "_r" its rank among the names
    several = codes["host"].n_unique() > 1
    names = (codes["host"] + ":" + codes["device"]) if several else codes["device"]
    rank = names.rank("ordinal").cast(pl.Int64) if len(names) else pl.Series(dtype=pl.Int64)
    # the few (device, step) sums of the waits put onto the window rows they match (0 elsewhere)
    got = _onto_rows(w, ((waited, ["wait_ps"]), (caused, ["caused_wait_ps", "last_arrivals"])))
    dev = pl.DataFrame({"_d": w["_d"], "step": w["step"], "busy_ps": w["busy_ps"], "wait_ps": got["wait_ps"],
                        "caused_wait_ps": got["caused_wait_ps"],
                        "last_arrivals": pl.Series(got["last_arrivals"], dtype=pl.UInt32)})
    o = _step_order(dev["step"], dev["_d"])
    dev = dev.sort(["step", "_d"]) if o is None else dev[pl.Series(o)]
    del w, waited, caused, ex, got, o
    # per step (rows by step, then device): the slowest device (most busy; ties: the first) and
    # the device whose late arrivals cost the others the most wait, with that device's own
    # attributed wait (one order, so name and figure are the same device's; none when no
    # collective of the step was matched), picked off one stable sort of the row numbers
    step = dev["step"]
    if dev.height and step.null_count() == 0 and dev["busy_ps"].null_count() == 0 and rank.null_count() == 0:
        sv = step.to_numpy()
        firsts = np.flatnonzero(np.r_[True, sv[1:] != sv[:-1]])
        d = dev["_d"].to_numpy().astype(np.int64)
        busy = dev["busy_ps"].to_numpy().astype(np.int64, copy=False)
        la = dev["last_arrivals"].to_numpy().astype(np.int64)
        caused_v = dev["caused_wait_ps"].to_numpy()
        slow = _first_best(firsts, (busy,))
        by = _first_best(firsts, (caused_v, la, -rank.to_numpy()[d]))
        steps = pl.DataFrame({
            "step": sv[firsts], "n_devices": pl.Series(np.diff(np.append(firsts, len(sv))), dtype=pl.UInt32),
            "busy_max_ps": busy[slow], "busy_median_ps": _medians(busy, firsts),
            "_la": pl.Series(np.maximum.reduceat(la, firsts), dtype=pl.UInt32),
            "wait_ps": np.add.reduceat(dev["wait_ps"].to_numpy(), firsts)})
        steps = steps.with_columns(pl.Series("_slowest", d[slow], dtype=pl.UInt32),
                                   pl.when(pl.col("_la") > 0).then(pl.Series(d[by], dtype=pl.UInt32)).alias("_last"),
                                   pl.Series("attributed_wait_ps", caused_v[by]))
        del d, slow, by
    else:
        dev_d = dev.with_columns(pl.lit(rank).gather(pl.col("_d")).alias("_r"))
        steps = dev_d.group_by("step", maintain_order=True).agg(
            pl.len().alias("n_devices"),
            pl.col("_d").sort_by("busy_ps", descending=True).first().alias("_slowest"),
            pl.col("busy_ps").max().alias("busy_max_ps"), pl.col("busy_ps").median().alias("busy_median_ps"),
            pl.when(pl.col("last_arrivals").max() > 0)
            .then(pl.col("_d").sort_by(_BY_CAUSED, descending=[True, True, False]).first())
            .otherwise(None).alias("_last"),
            pl.col("caused_wait_ps").sort_by(_BY_CAUSED, descending=[True, True, False]).first()
            .alias("attributed_wait_ps"), pl.col("wait_ps").sum())
        del dev_d
    steps = (steps.with_columns(((pl.col("busy_max_ps") - pl.col("busy_median_ps")) / pl.col("busy_median_ps")).alias("lead"),
                                pl.lit(names).gather(pl.col("_slowest")).alias("slowest"),
                                pl.lit(names).gather(pl.col("_last")).alias("last_to_arrive"))
             .select(list(STEPS_SCHEMA)).cast(STEPS_SCHEMA).sort("step"))
    dev_caused = dev.group_by("_d").agg(pl.col("caused_wait_ps").sum())
    n_devices = dev["_d"].n_unique()
    dev = (dev.with_columns(codes["host"].gather(dev["_d"]), codes["device"].gather(dev["_d"]))
           .select(list(DEVICES_SCHEMA)).cast(DEVICES_SCHEMA))
    summary: dict = {"n_steps": steps.height, "n_devices": n_devices}
    if steps.height and steps["n_devices"].max() > 1 and coll.height == 0:
        notes.append("no collective execution matched across devices (no collective opcodes in the trace: a "
                     "trace.json without HLO, or a program without communication): busy times only, no straggler "
                     "named")
    elif steps.height and steps["n_devices"].max() > 1:
        counts = steps.group_by("slowest").agg(pl.len().alias("n"), pl.col("lead").median())
        tot_caused = dev_caused.select(names.gather(dev_caused["_d"]).alias("_name"), "caused_wait_ps")
        counts = counts.join(tot_caused, left_on="slowest", right_on="_name", how="left")
        best = counts.sort(["n", "caused_wait_ps"], descending=True).row(0, named=True)
        all_wait = int(dev["wait_ps"].sum())
        summary.update(straggler=best["slowest"], steps_slowest=int(best["n"]), lead_median=best["lead"],
                       tied_devices=int((counts["n"] == best["n"]).sum()),
                       attributed_wait_ps=int(best["caused_wait_ps"] or 0), wait_ps=all_wait,
                       attributed_share=(best["caused_wait_ps"] or 0) / all_wait if all_wait else None,
                       lead_max=float(steps["lead"].max()) if steps["lead"].max() is not None else None)
    return Stragglers(devices=dev, steps=steps, collectives=coll, summary=summary, clock_offsets=offsets, notes=notes)


def _window_steps(ex: pl.DataFrame, w: pl.DataFrame) -> pl.Series | None:
    """Per arrival of ``ex`` (columns ``_d``, ``start_ps``), the ``step`` of the window of ``w``
    (``_d``, ``step``, ``start_ps``, ``_e``) on its device that began last at or before it,
    null when none or when the arrival is at or past that window's end ``_e``: the backward
    as-of join by device, by one sort of the windows and a search per device. None (the
    caller joins) when a value is null or two windows of a device begin together (which the
    join would pick between by its sort)."""
    cols = (ex["_d"], ex["start_ps"], w["_d"], w["start_ps"], w["_e"], w["step"])
    if any(c.null_count() for c in cols) or w.height == 0:
        return None
    xd, xt, wd, ws, we, wstep = (c.to_numpy() for c in cols)
    o = np.lexsort((ws, wd))
    sd, ss = wd[o], ws[o]
    if bool(((sd[1:] == sd[:-1]) & (ss[1:] == ss[:-1])).any()):
        return None
    step = np.zeros(len(xd), dtype=np.int64)
    ok = np.zeros(len(xd), dtype=bool)
    for c in np.unique(xd):
        lo, hi = np.searchsorted(sd, c, "left"), np.searchsorted(sd, c, "right")
        rows = np.flatnonzero(xd == c)
        k = np.searchsorted(ss[lo:hi], xt[rows], side="right") - 1
        hit = k >= 0
        at = o[lo + k[hit]]
        rows = rows[hit]
        inside = xt[rows] < we[at]
        step[rows[inside]] = wstep[at[inside]]
        ok[rows[inside]] = True
    return pl.select(pl.when(pl.lit(pl.Series(ok))).then(pl.lit(pl.Series(step, dtype=w.schema["step"])))
                     .alias("step")).to_series()


def _pair_codes(d: np.ndarray, step: np.ndarray, lo: int, span: int) -> np.ndarray | None:
    """One int64 per (device code, step) that orders as the pair does: d * span + (step - lo)
    (steps in [lo, lo + span)); None when that could overflow."""
    if len(d) and (int(d.max()) + 1) * span >= (1 << 62):
        return None
    return d.astype(np.int64) * span + (step.astype(np.int64) - lo)


def _step_order(step: pl.Series, d: pl.Series) -> np.ndarray | None:
    """The row order of ``sort(["step", "_d"])`` (``_d``: small non-negative codes) as an int64
    array, by one stable numpy sort; None (the caller sorts the frame) when a step is null or
    two rows share (step, _d), whose order that sort leaves open."""
    if step.null_count() or d.null_count() or not len(step):
        return None if len(step) else np.zeros(0, dtype=np.int64)
    sv, dv = step.to_numpy(), d.to_numpy()
    lo, nd = int(sv.min()), int(dv.max()) + 1
    key = _pair_codes(sv - lo, dv, 0, nd) if (int(sv.max()) - lo + 1) * nd < (1 << 62) else None
    o = np.argsort(key, kind="stable") if key is not None else np.lexsort((dv, sv))
    ss, ds = sv[o], dv[o]
    if bool(((ss[1:] == ss[:-1]) & (ds[1:] == ds[:-1])).any()):
        return None
    return o


def _onto_rows(w: pl.DataFrame, parts) -> dict:
    """Per column of ``parts`` ((frame keyed by ``_d``, ``step``; its columns), ...): an int64
    array over the rows of ``w`` (columns ``_d``, ``step``) holding the value of the part's row
    with the same (``_d``, ``step``) (nulls equal), 0 where none: an inner join on the keys,
    done by one search when the rows' keys are distinct and not null."""
    out = {}
    sv, dv = w["step"], w["_d"]
    key = None
    if w.height and not sv.null_count() and not dv.null_count():
        s_np, d_np = sv.to_numpy(), dv.to_numpy()
        lo = int(s_np.min())
        key = _pair_codes(d_np, s_np, lo, int(s_np.max()) - lo + 1)
    if key is not None:
        o = np.argsort(key, kind="stable")
        sk = key[o]
        if bool((sk[1:] == sk[:-1]).any()):
            key = None
    if key is None:  # the join itself
        rows = w.select("_d", "step").with_row_index("_i")
        for small, cols in parts:
            m = small.join(rows, on=["_d", "step"], how="inner", nulls_equal=True)
            for c in cols:
                a = np.zeros(w.height, dtype=np.int64)
                a[m["_i"].to_numpy()] = m[c].to_numpy()
                out[c] = a
        return out
    span = int(s_np.max()) - lo + 1
    for small, cols in parts:
        ok = (small["step"].is_not_null() & small["_d"].is_not_null()).to_numpy()
        ps = small["step"].fill_null(lo).to_numpy().astype(np.int64)
        pd_ = small["_d"].fill_null(0).to_numpy().astype(np.int64)
        ok &= (ps >= lo) & (ps < lo + span)
        q = pd_ * span + (ps - lo)
        at = np.minimum(np.searchsorted(sk, q), max(len(sk) - 1, 0))
        ok &= sk[at] == q
        row = o[at[ok]]
        for c in cols:
            a = np.zeros(w.height, dtype=np.int64)
            a[row] = small[c].to_numpy()[ok]
            out[c] = a
    return out


def _first_best(firsts: np.ndarray, keys: tuple) -> np.ndarray:
    """Per group of rows (groups start at ``firsts``, ascending, contiguous), the first row
    whose ``keys`` (int64 arrays, compared in turn, larger wins) are the largest: what a
    stable sort by (group, -keys...) puts first in each group."""
    n = len(keys[0])
    sizes = np.diff(np.append(firsts, n))
    cand = np.ones(n, dtype=bool)
    for k in keys:
        low = np.iinfo(np.int64).min
        best = np.maximum.reduceat(np.where(cand, k, low), firsts)
        cand &= k == np.repeat(best, sizes)
    idx = np.flatnonzero(cand)
    g = np.repeat(np.arange(len(firsts)), sizes)[idx]
    return idx[np.r_[True, g[1:] != g[:-1]]]


def _medians(v: np.ndarray, firsts: np.ndarray) -> np.ndarray:
    """Per group (rows from ``firsts``, contiguous), the median of the int64 ``v`` as polars
    computes it: the middle value, or of the two middle ones lo + (hi - lo) * 0.5 in float64."""
    n = len(v)
    sizes = np.diff(np.append(firsts, n))
    gid = np.repeat(np.arange(len(firsts)), sizes)
    vlo = int(v.min())
    span = int(v.max()) - vlo + 1
    if len(firsts) * span < (1 << 62):
        sv = np.sort(gid * span + (v - vlo)) - gid * span + vlo
    else:
        sv = v[np.lexsort((v, gid))]
    lo = sv[firsts + (sizes - 1) // 2].astype(np.float64)
    hi = sv[firsts + sizes // 2].astype(np.float64)
    return lo + (hi - lo) * 0.5


#: host clock offsets past this (ps, one second) are called out: the hosts' clocks disagree
#: beyond what a synchronised fleet shows
CLOCK_DISAGREE_PS = 10**12


def host_clock_line(table, what: str) -> str:
    """One line stating the clock offsets between the hosts of ``table`` (an OpTable or the
    wide op frame) as :func:`clock_offsets` estimates them from its collectives; ``what``
    names how the hosts came together (e.g. "3 run folders read as one capture"). Says when
    no collective was shared (clocks not aligned) and, loudly, when an offset is over
    :data:`CLOCK_DISAGREE_PS`."""
    from traceview.model.units import fmt_time_ps

    cols = ["host", "device", "module", "op_name", "op_kind", "start_ps", "duration_ps"]
    ops = (table.filter(pl.col("op_kind").is_in(_KINDS)).frame(cols) if hasattr(table, "attrs")
           else table.select(cols))
    offsets = clock_offsets(_executions(ops))
    hosts = sorted(ops["host"].unique().to_list()) if ops.height else []
    if not offsets:
        return (f"{what}: no collective execution shared between the hosts, so their clock offsets cannot be "
                "estimated: each host's step times hold, instants compared across hosts do not")
    ref = hosts[0]
    said = ", ".join(f"{h} {'+' if v >= 0 else '-'}{fmt_time_ps(abs(v))}" for h, v in offsets.items() if h != ref)
    line = (f"{what}: clock offsets against {ref} estimated from matching collective ends (added to each host's "
            f"times before the straggler comparison): {said}")
    missing = [h for h in hosts if h not in offsets]
    if missing:
        line += f"; no collective shared with {ref}, clock not aligned: {', '.join(missing)}"
    far = max((abs(v) for v in offsets.values()), default=0)
    if far > CLOCK_DISAGREE_PS:
        line += (f"; the hosts' clocks disagree by up to {fmt_time_ps(far)}: check their time sync (instants in "
                 "this report are each host's own clock)")
    return line


def profile_stragglers(prof, overlap=None) -> Stragglers:
    """:func:`stragglers` of a profile (``overlap``: its :class:`~traceview.analysis.communication.overlap.Overlap`,
    default computed)."""
    if overlap is None:  # the profile's shared result
        from traceview.analysis import derived

        return derived.stragglers(prof)
    return stragglers(prof.table, overlap.steps)

