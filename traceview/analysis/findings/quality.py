"""Finding rules about what a trace can be trusted for: the reading warnings (stale,
several runs, capped, colliding, unreadable), kernels without costs, communication (from the
communication analyses, when a report carries them) and, in a diff, profiling overhead. Each
rule: ``(Inputs, Thresholds) -> Finding | list[Finding] | NotEvaluated | None``
(:mod:`traceview.analysis.findings`)."""

from __future__ import annotations

import re

import polars as pl

from traceview.analysis.findings import Finding, NotEvaluated
from traceview.analysis.findings._context import fmt_ms, no_ops, pct, step_info, unevaluable

#: the lesson behind every reading warning: a trace other than the one meant answers another question
_STALE = ("a log dir keeps every session's run folder, and a viewer that reads 'whatever is there' silently shows "
          "an older session: the Gemma 2B study (TPU v5e) staged each profile into a fresh log dir and searched for "
          "the files after the profiler wrote to /content/None/plugins/profile instead of the directory asked for")

#: (finding id, severity, warning pattern, why, next step) for the reading warnings
WARNING_KINDS = (
    ("truncated-trace", "high", r"holds exactly [\d,]+ events|profiler's cap",
     "a trace that stops at the profiler's event cap holds only the first part of the window; its step counts and "
     "shares describe that part, not the run",
     "profile a shorter window (fewer steps) so the profiler's event cap is not reached"),
    ("stale-trace", "info", r"\bis .* old \(captured", _STALE,
     "check the log dir the profiler wrote to; pass the new run's folder (or --run NAME)"),
    ("several-runs", "info", r"\d+ runs found", _STALE,
     "pass --run NAME for the session you mean, or a fresh log dir per profile"),
    ("colliding-files", "medium", r"were written [\d,]+ s apart",
     "two profiling sessions started in the same second share one run folder and overwrite each other's files, "
     "so one host's files can come from different sessions",
     "profile into a fresh log dir; sessions started in one second share a run folder"),
    ("unreadable-host", "medium", r"skipped unreadable trace",
     "an analysis over the readable hosts only says nothing about the skipped host, which may be the slow one",
     "re-copy or re-record the unreadable host's file; the analysis covers the other hosts only"),
    ("loose-trace-files", "info", r"outside any run folder|lie loose in",
     "trace files outside a plugins/profile/<run> folder have no session to date them by, so a copy or an old "
     "file can be read in place of the run meant",
     "keep one profile per plugins/profile/<run> folder, or pass the file you mean"),
)


def trace_warnings(ctx, th) -> list[Finding]:
    """Rule 12: each reading warning of the report (:attr:`Report.warnings`) that says the
    trace may not be the one meant, or not all of it, as a finding (one per kind)."""
    out = []
    warns = list(getattr(ctx.report, "warnings", None) or [])
    for fid, sev, rx, why, step in WARNING_KINDS:
        hit = [w for w in warns if re.search(rx, str(w))]
        if hit:
            out.append(Finding(
                fid, sev, str(hit[0]) + (f" (+{len(hit) - 1} more)" if len(hit) > 1 else ""),
                {"warnings": hit}, why, step, f"traceview verify PATH --check 'no finding {fid}'"))
    return out


def costs_unknown(ctx, th) -> Finding | None:
    """Rule 7: custom calls and kernels without FLOPs or without bytes (trace or derived)
    that hold at least ``costs_share`` of op time, so the roofline does not cover them. A
    profile whose devices are all CPUs is not judged on its named kernels: those are Pallas
    kernels run by the interpreter, which drops ``pl.CostEstimate`` (no evidence either way)."""
    rep = ctx.report
    bs, roof = getattr(rep, "by_shape", None), getattr(rep, "roofline", None)
    if bs is None or roof is None or bs.height == 0:
        return NotEvaluated("costs-unknown", no_ops(ctx, "no op populations"))
    kern = getattr(rep, "kernels", None)
    knames = set(kern["kernel"].to_list()) if kern is not None and kern.height else set()
    groups = getattr(rep, "device_groups", None)
    cpu_only = (groups is not None and groups.height > 0
                and set(groups["device_type"].to_list()) == {"CPU"})
    r = (bs.select("op_name", "shape", "op_kind", "share", "self_ps", "modules")
         .join(roof.select("op_name", "shape", "flops", "bytes", "cost_source"), on=["op_name", "shape"], how="left"))
    custom = r.filter((pl.col("op_kind") == "custom-call") | pl.col("op_name").is_in(list(knames)))
    if cpu_only:  # interpreted kernels: the CPU trace cannot carry their cost estimate
        custom = custom.filter(~pl.col("op_name").is_in(list(knames)))
    gaps = custom.filter((pl.col("flops").fill_null(0) <= 0) | (pl.col("bytes").fill_null(0) <= 0))
    if gaps.height == 0:
        return None
    share = float(gaps["share"].sum() or 0)
    if share < th.costs_share:
        return None
    gaps = gaps.with_columns((pl.col("flops").fill_null(0) <= 0).alias("_f"), (pl.col("bytes").fill_null(0) <= 0).alias("_b"))
    # per kernel name: whether some population of it has no FLOPs, no bytes (booleans, as the evidence says)
    by_name = (gaps.with_columns(pl.col("op_name").str.replace(r"\.\d+$", "").alias("name"))
               .group_by("name").agg(pl.col("share").sum(), pl.len().alias("populations"),
                                     pl.col("_f").any().alias("no_flops"), pl.col("_b").any().alias("no_bytes"))
               .sort("share", descending=True))
    named = [f"{r['name']} ({pct(r['share'])}, no "
             f"{' or '.join(w for w, missing in (('FLOPs', r['no_flops']), ('bytes', r['no_bytes'])) if missing)})"
             for r in by_name.head(3).iter_rows(named=True) if r["share"] >= 0.001]
    return Finding(
        "costs-unknown", "medium",
        f"{pct(share)} of op time is in custom calls/kernels the roofline cannot place (no FLOPs or bytes): "
        + "; ".join(named),
        {"share_of_op_time": share, "kernels": by_name.head(10).to_dicts()},
        "a kernel without FLOPs or bytes has no place on the roofline, so nothing says whether it moves data or "
        "pays overhead: on Gemma 2B decode (TPU v5e) the attention kernel's place (~25% of HBM bandwidth) is what "
        "showed per-request overhead, not data movement, set its time",
        "give the kernel a cost estimate (Pallas: pl.pallas_call(..., cost_estimate=pl.CostEstimate(flops=, "
        "bytes_accessed=, transcendentals=))); interpreted kernels on the CPU drop it, so read costs on the device",
        "traceview analyze AFTER  # roofline: the kernel's FLOP/B and bound by are no longer -")


def _frame(obj, *names):
    """The first DataFrame among ``obj`` itself and its attributes ``names``."""
    if isinstance(obj, pl.DataFrame):
        return obj
    for n in names:
        v = getattr(obj, n, None) if not isinstance(obj, dict) else obj.get(n)
        if isinstance(v, pl.DataFrame):
            return v
    return None


def exposed_communication(ctx, th) -> Finding | None:
    """Rule 9a: exposed communication per step (``Report.overlap``'s per-step frame:
    ``exposed_ps`` beside compute/hidden/host/idle, or ``step_ps``) at least
    ``exposed_share`` of the step."""
    ov = getattr(ctx.report, "overlap", None)
    if ov is None:  # no collective or async copy in the trace: nothing to expose
        return None
    st = _frame(ov, "steps", "per_step")
    if st is None or st.height == 0 or "exposed_ps" not in st.columns:
        return NotEvaluated("exposed-communication", "no steps to split communication by")
    why = _not_repeated(ctx, th, st)
    if why:
        return NotEvaluated("exposed-communication", why)
    parts = [c for c in ("compute_ps", "exposed_ps", "hidden_ps", "host_ps", "idle_ps") if c in st.columns]
    step = (st["step_ps"].cast(pl.Float64) if "step_ps" in st.columns
            else st.select(pl.sum_horizontal([pl.col(c) for c in parts if c != "hidden_ps"]))[:, 0].cast(pl.Float64))
    exp = float(st["exposed_ps"].mean() or 0)
    mean_step = float(step.mean() or 0) or step_info(ctx)["step_ps"]
    if not mean_step:
        return NotEvaluated("exposed-communication", "no step time")
    if exp / mean_step < th.exposed_share:
        return None
    hidden = float(st["hidden_ps"].mean() or 0) if "hidden_ps" in st.columns else None
    ops = _frame(ov, "ops", "async_ops")
    top = (ops.sort("exposed_ps", descending=True).head(5).to_dicts()
           if ops is not None and "exposed_ps" in ops.columns else [])
    # the exposed time may be waiting for a straggler rather than moving data: say so first
    sf = straggler(ctx, th)
    sf = sf if isinstance(sf, Finding) else None
    summ = getattr(getattr(ctx.report, "stragglers", None), "summary", None) or {}
    share = summ.get("attributed_share")
    waiting = sf is not None and share is not None and share >= 0.5
    return Finding(
        "exposed-communication", "medium" if waiting else "high",
        f"communication is exposed for {fmt_ms(exp)} of each {fmt_ms(mean_step)} step ({pct(exp / mean_step)})"
        + (f"; {fmt_ms(hidden)} is hidden behind compute" if hidden is not None else "")
        + (f"; {pct(share)} of the collective waits are waiting for the straggler {sf.evidence['device']}"
           if waiting else ""),
        {"exposed_ps": exp, "step_ps": mean_step, "hidden_ps": hidden, "ops": top,
         "waiting_for_straggler": sf.evidence["device"] if waiting else None, "attributed_share": share},
        "exposed communication adds to the step one for one (step = compute + exposed communication + host "
        "transfers + idle, each instant counted once); only communication hidden behind compute is free: on the "
        "8-device collectives fixture the synchronous collectives of XLA:CPU held 63% of each step",
        ("fix the straggler first (see straggler-device): the others wait for it at the collective, so "
         "overlapping or shrinking the collective would not remove that time" if waiting else
         "overlap the collective with independent compute (async collectives, collective matmul, a different "
         "sharding), or shrink what crosses the interconnect"),
        "traceview verify AFTER --check 'no finding exposed-communication'")


def _not_repeated(ctx, th, per_step: pl.DataFrame) -> str | None:
    """Why the steps are not a repeated step, None when they are: the report's step anatomy
    when it has one (:func:`~._context.unevaluable`), else at least ``step_repeats`` rows per
    device in the communication section's own per-step frame."""
    if getattr(getattr(ctx.report, "steps", None), "steps", None) is not None:
        return unevaluable(ctx, th.step_repeats)
    if "device" in per_step.columns:
        n = per_step.group_by("device").len()["len"].min()
    else:
        n = per_step.height
    return None if n >= th.step_repeats else (f"{n} step(s) per device: the rule needs a step repeated "
                                              f"{th.step_repeats:g} times")


def host_transfers(ctx, th) -> Finding | None:
    """Rule 9c: transfers between device and host memory (the overlap section's ``host_ps``:
    a copy whose HLO shape carries memory space ``S(5)`` in flight while nothing else runs)
    hold at least ``host_transfer_share`` of the mean step. Silent without the overlap
    section's per-step split or without a repeated step."""
    fid = "host-transfers-dominate"
    if not getattr(ctx.report, "has_shapes", True):  # a transfer is told by its shape's memory space
        return NotEvaluated(fid, "the trace carries no op shapes: a trace.json, read the .xplane.pb")
    ov = getattr(ctx.report, "overlap", None)
    if ov is None:  # no collective or async copy in the trace: no transfer
        return None
    st = _frame(ov, "steps", "per_step")
    if st is None or st.height == 0 or "host_ps" not in st.columns or "step_ps" not in st.columns:
        return NotEvaluated(fid, "no steps to split the device's time by")
    why = _not_repeated(ctx, th, st)
    if why:
        return NotEvaluated(fid, why)
    if st["host_ps"].null_count() == st.height:
        return NotEvaluated(fid, "no measure of host transfers in the steps")
    host, step = float(st["host_ps"].mean() or 0), float(st["step_ps"].mean() or 0)
    if not step:
        return NotEvaluated(fid, "no step time")
    if host / step < th.host_transfer_share:
        return None
    share = host / step
    pops = _frame(ov, "populations")
    top = []
    if pops is not None and "kind" in pops.columns:
        cols = [c for c in ("op_name", "shape", "n", "in_flight_ps", "exposed_ps") if c in pops.columns]
        top = pops.filter(pl.col("kind") == "host transfer").sort("in_flight_ps", descending=True).head(5) \
            .select(cols).to_dicts() if "in_flight_ps" in pops.columns else []
    what = f"; the largest: {top[0]['op_name']} {str(top[0].get('shape') or '').split(' <- ')[0]}" if top else ""
    return Finding(
        "host-transfers-dominate", "high" if share >= 0.5 else "medium",
        f"transfers between device and host memory hold {fmt_ms(host)} of each {fmt_ms(step)} step "
        f"({pct(share)}) with nothing else running on the device{what}",
        {"host_ps": host, "step_ps": step, "share": share, "n_steps": int(st.height), "populations": top,
         **({"populations_note": "per population, summed over every occurrence on every device, each op in its own "
             "window: concurrent transfers overlap, so the rows add up to more than the device time"} if top else {})},
        "a step that waits on copies to or from host memory runs at the host link's speed, not the chip's: PCIe "
        "Gen5 x16 carries about 63 GB/s one way (PCI-SIG: 32 GT/s a lane), 26x below the 1,640 GB/s of a TPU v6e's "
        "HBM (Google Cloud TPU v6e documentation)",
        "keep the data on the device across steps (no host offload of arrays the step reads back, no "
        "jax.device_get / numpy conversion inside the loop), or overlap the transfer with the previous step's compute",
        "traceview verify AFTER --check 'no finding host-transfers-dominate'; "
        "traceview analyze AFTER  # communication: host transfers per step")


def straggler(ctx, th) -> Finding | None:
    """Rule 9b: one device is the slowest in most steps (at least half of them, and at least 3
    unless its median lead is 100% or more) with a median lead over the median device of at
    least ``straggler_factor`` - 1 (``Report.stragglers``, :mod:`traceview.analysis.communication.stragglers`:
    its summary's straggler, steps_slowest, n_steps, lead_median, and the collective waits
    attributed to it). A different slowest device each step is scheduling noise, not a
    straggler; nor is a device none of the collective waits are attributed to (the others
    wait, but never for it)."""
    sg = getattr(ctx.report, "stragglers", None)
    summ = getattr(sg, "summary", None) or {}
    dev, n, k = summ.get("straggler"), int(summ.get("n_steps") or 0), int(summ.get("steps_slowest") or 0)
    lead = summ.get("lead_median")
    if not dev or not n or lead is None:
        devs = getattr(ctx.report, "devices", None)
        if isinstance(devs, pl.DataFrame) and devs.height <= 1:  # one device: no other to be slower than
            return None
        return NotEvaluated("straggler-device", "no collective execution matched across two or more devices")
    # most steps, and at least 3 of them: with 4 devices, the same one is slowest in 2 of 2
    # steps by chance 1 time in 4; fewer steps need a device twice the median's busy time
    if lead < th.straggler_factor - 1 or k < -(-n // 2) or (k < 3 and lead < 1.0):
        return None
    waits, mine = summ.get("wait_ps"), summ.get("attributed_wait_ps")
    if waits and not mine:  # the others wait at their collectives, never for it: it holds no step back
        return None
    per_dev = getattr(sg, "devices", None)
    rows = (per_dev.filter(pl.col("device") == dev).to_dicts()[:8]
            if isinstance(per_dev, pl.DataFrame) and "device" in per_dev.columns else [])
    return Finding(
        "straggler-device", "high",
        f"device {dev} is the slowest in {k} of {n} step(s), {lead + 1:.2f}x the median device's busy time "
        "(median lead)" + (f"; {pct(mine / waits)} of the other devices' collective waits are attributed to it"
                           if waits and mine is not None else ""),
        {"device": dev, "steps_slowest": k, "n_steps": n, "lead_median": lead, "attributed_wait_ps": mine,
         "wait_ps": waits, "steps": rows},
        "in synchronous steps the slowest device sets the step time and the others' wait shows as exposed "
        "communication: on the 8-device straggler fixture one device's 200 extra matmuls made it ~150x the median "
        "device's busy time and every other device waited for it at each psum",
        "compare the straggler's op table with a median device's (traceview analyze --device REGEX): "
        "uneven shards, host interference, a throttled chip",
        "traceview verify AFTER --check 'straggler lead < 20%' --check 'no finding straggler-device'")


def profiling_overhead(ctx, th) -> Finding | None:
    """Rule 6 (diff): populations whose traced event count differs by ``overhead_factor`` or
    more between base and treatment (:func:`traceview.analysis.compare.diff.diff`'s notes)."""
    d = ctx.diff
    pops = getattr(d, "populations", None)
    if pops is None or pops.height == 0:
        return NotEvaluated("profiling-overhead", "no population in the diff")
    f = th.overhead_factor
    eb, et = pl.col("events_base").cast(pl.Float64), pl.col("events_treatment").cast(pl.Float64)
    rows = pops.filter((pl.col("status") == "matched") & (eb > 0) & (et > 0) & ((et / eb >= f) | (eb / et >= f))
                       & (pl.max_horizontal(eb, et) >= 16))
    if rows.height == 0:
        return None
    ev = (getattr(d, "events_base", 0), getattr(d, "events_treatment", 0))
    top = rows.select("stem", "shape", "events_base", "events_treatment", "self_ps_base", "self_ps_treatment",
                      "kernel_changes").head(5).to_dicts() if "stem" in rows.columns else \
        rows.select("events_base", "events_treatment", "self_ps_base", "self_ps_treatment").head(5).to_dicts()
    r0 = rows.row(0, named=True)
    ratio = (r0["events_treatment"] or 1) / (r0["events_base"] or 1)
    return Finding(
        "profiling-overhead", "high",
        f"{rows.height} population(s) change their traced event count by x{f:g} or more (e.g. "
        f"{r0['events_base']:,} -> {r0['events_treatment']:,}, x{ratio:.2f}): per-event tracing overhead differs "
        "between the sides, so the profiled times can invert the conclusion",
        {"populations": top, "events_base": ev[0], "events_treatment": ev[1], "factor": f},
        "tracing costs time per traced event, so a change that multiplies events is slowed by the profiler itself: "
        "on Gemma 2B decode (TPU v5e) a KV block 8x smaller multiplied traced kernel invocations ~8x and the "
        "profiled runs showed near-baseline speed, while unprofiled it was 23.9% faster",
        "measure throughput unprofiled (traceview engine bench) and use the trace for what it proves: which "
        "kernel ran, with which configuration",
        "traceview verify BASE TREATMENT --check 'kernel GLOB changed KEY' (the trace proves the change; "
        "the bench measures it)")


RULES = (trace_warnings, costs_unknown, exposed_communication, host_transfers, straggler)
DIFF_RULES = (profiling_overhead,)
