"""Finding rules for decode engines: the sampler's search, the KV block, the state copy,
logits conversions, padding-bucket regimes, host-bound steps, far below the roofline and
warm-up inside the window. Each rule: ``(Inputs, Thresholds) -> Finding | NotEvaluated | None``
(:mod:`traceview.analysis.findings`); shares are of the mean step's wall time
(:func:`~._context.step_info`)."""

from __future__ import annotations

import re

import polars as pl

from traceview.analysis.findings import Finding, NotEvaluated
from traceview.analysis.findings._context import (arrays, fmt_ms, gap_busy, nbytes, no_ops, pct, pop_families, step_info,
                                                  step_loop, step_pops, unevaluable, vocab)

#: the sampler's search: ops in a scope or of a kind that sorts, bisects or accumulates the vocabulary
SEARCH_RX = r"binary_search|sort|cumsum|cumulative|cumlogsumexp|top_?k"
_IN_PLACE = r"scatter|dynamic-update-slice|dynamic_update_slice"
_CONVERSIONS = ("convert", "copy", "bitcast-convert", "transpose")


def _cannot(ctx, th, fid: str, *, shapes: bool = False, ops: bool = True) -> NotEvaluated | None:
    """Why the step rule ``fid`` cannot run (:func:`~._context.unevaluable` with ``th.step_repeats``),
    None when it can."""
    why = unevaluable(ctx, th.step_repeats, shapes=shapes, ops=ops)
    return NotEvaluated(fid, why) if why else None


def _per_step(ps: float, info: dict) -> float:
    n = info["n_steps"] * max(info["devices"], 1)
    return ps / n if n else 0.0


def _rows(df: pl.DataFrame, info: dict, n: int = 5) -> list[dict]:
    return [{"op": r["op_name"], "shape": r["shape"], "module": r["module"],
             "per_step_ps": round(_per_step(r["self_ps"], info)), "occurrences": r["count"]}
            for r in df.head(n).iter_rows(named=True)]


def sampler_search(ctx, th) -> Finding | None:
    """Rule 1: the sampler's sort / binary-search / cumulative-sum ops over the vocabulary
    take at least ``sampler_share`` of the step."""
    no = _cannot(ctx, th, "sampler-search-dominates", shapes=True)
    if no:
        return no
    info = step_info(ctx)
    pops = step_pops(ctx)
    v = vocab(ctx)
    if v is None:  # no sampler op over a vocabulary
        return None
    hit = pops.filter((pl.col("family") == "sampling") & (
        pl.col("framework_op").fill_null("").str.contains(SEARCH_RX) | pl.col("op_name").str.contains(SEARCH_RX)
        | (pl.col("op_kind") == "sort")))
    if hit.height == 0:
        return None
    per = _per_step(float(hit["self_ps"].sum()), info)
    share = per / info["step_ps"]
    if share < th.sampler_share:
        return None
    scopes = sorted({m.group(0) for fo in hit["framework_op"].drop_nulls().to_list()
                     for m in [re.search(r"[\w]*(" + SEARCH_RX + r")[\w]*", fo)] if m})
    rx = scopes[0] if scopes else "sort"
    return Finding(
        "sampler-search-dominates", "high" if share >= 0.2 else "medium",
        f"the sampler's search ({', '.join(scopes) or 'sort'}) over the {v:,}-entry vocabulary takes "
        f"{fmt_ms(per)} of each {fmt_ms(info['step_ps'])} step ({pct(share)})",
        {"share_of_step": share, "per_step_ps": per, "step_ps": info["step_ps"], "vocab": v, "scopes": scopes,
         "populations": _rows(hit, info)},
        "a permissive sampling parameter still pays the sampler's full cost: on Gemma 2B decode (TPU v5e) top-p's "
        "32-iteration binary search over the 256,000-entry vocabulary held ~55% of the device at top_p=1.0, a "
        "no-op, and greedy selection raised throughput 2.3x (1,540 -> 3,577 tok/s)",
        "profile with the production SamplingParams; if the product allows, skip the search when top_p >= 1 "
        "or decode greedily (traceview engine profile --sampling greedy), then measure unprofiled",
        f"traceview verify BEFORE AFTER --check 'op matching {rx} vanished'")


def _max_context(shape: str, page: int) -> tuple[int, int, int] | None:
    """(batch, pages per sequence, max context tokens) from a paged-attention kernel's
    operands: the page table is the largest s32 array (``[B, P]``, or flattened ``[B*P]``
    beside a ``[B]`` array of lengths)."""
    res, ops = arrays(shape)
    ints = [d for dt, d in res + ops if dt == "s32" and d]
    two = [d for d in ints if len(d) == 2]
    if two:
        b, p = max(two, key=lambda d: d[0] * d[1])
        return b, p, p * page
    ones = sorted({d[0] for d in ints if len(d) == 1})
    if len(ones) < 2:
        return None
    pt = ones[-1]
    bs = [b for b in ones[:-1] if b > 1 and pt % b == 0]
    if not bs:
        return None
    b = bs[-1]
    return b, pt // b, pt // b * page


def kv_block_covers(ctx, th) -> Finding | None:
    """Rule 2: a paged-attention kernel's KV block (from its name) is at least ``kv_cover``
    of the longest context its operands allow (page-table width x page size)."""
    from traceview.model.kernelname import kernel_config

    k = getattr(ctx.report, "kernels", None)
    if k is None or k.height == 0:
        return None
    hits, unread = [], 0
    for r in k.iter_rows(named=True):
        cfg = kernel_config(r["kernel"])
        bkv, page = cfg.get("bkv"), cfg.get("page") or cfg.get("p")
        if not bkv or not page or not isinstance(bkv, tuple):
            continue
        got = _max_context(r["shape"], page[0])
        if got is None:
            unread += 1
            continue
        b, pps, ctx_max = got
        if bkv[0] >= th.kv_cover * ctx_max:
            hits.append({"kernel": r["kernel"], "module": r["module"], "bkv": bkv[0], "page": page[0],
                         "batch": b, "pages_per_seq": pps, "max_context": ctx_max, "share_of_op_time": r["share"],
                         "shape": r["shape"]})
    if not hits:
        if unread:
            return NotEvaluated("kv-block-covers-context", f"{unread} paged-attention kernel(s) without the operand "
                                "shapes that give the context (page table)")
        return None
    h = max(hits, key=lambda x: x["share_of_op_time"])
    return Finding(
        "kv-block-covers-context", "medium",
        f"{h['kernel']} reads KV blocks of {h['bkv']:,} tokens, the whole {h['max_context']:,}-token context its "
        f"page table allows ({h['pages_per_seq']} pages of {h['page']}): every sequence shorter than that is mostly "
        f"masked padding ({pct(h['share_of_op_time'])} of op time in this kernel)",
        {"kernels": hits},
        "a KV block sized for the longest context makes short sequences read mostly padding: on Gemma 2B decode "
        "(TPU v5e) 2,048-token blocks for ~140-token sequences were 93% masked padding, and 128-256-token blocks "
        "gave +23.9% tokens/s (13,479 -> 16,700)",
        f"lower the KV block toward the typical sequence length, e.g. {_smaller_block(h)} tokens (traceview "
        f"engine: --kv-block {_smaller_block(h)} or TRACEVIEW_KV_BLOCK_SIZE), and compare tokens/s unprofiled "
        "(traceview engine bench) at the production context lengths",
        f"traceview verify AFTER --check 'kernel {h['kernel'].split('-')[0]}* has bkv {_smaller_block(h)}'")


def _smaller_block(h: dict) -> int:
    """A KV block to try: a quarter of the current one (the study went from 2,048 to 128-256
    tokens, 8-16x smaller), a multiple of the page, at least one page."""
    page = max(int(h.get("page") or 1), 1)
    return max(page, (int(h["bkv"]) // 4) // page * page)


def state_copied(ctx, th) -> Finding | None:
    """Rule 3: a copy of a buffer the same program updates in place (scatter /
    dynamic-update-slice result = operand), at least ``state_copy_bytes``, once per step or
    more: the state is not donated."""
    no = _cannot(ctx, th, "state-copied-every-step", shapes=True)
    if no:
        return no
    info = step_info(ctx)
    pops = step_pops(ctx)
    upd = pops.filter(pl.col("op_kind").str.contains(_IN_PLACE) | pl.col("op_name").str.contains(_IN_PLACE)
                      | pl.col("framework_op").fill_null("").str.contains(_IN_PLACE))
    state = {}
    for r in upd.iter_rows(named=True):
        res, ops = arrays(r["shape"])
        if len(res) == 1 and ops and ops[0] == res[0]:
            state.setdefault(r["module"], set()).add(res[0])
    hits = []
    for r in pops.filter(pl.col("op_kind") == "copy").iter_rows(named=True):
        res, ops = arrays(r["shape"])
        if len(res) != 1 or ops[:1] != res or res[0] not in state.get(r["module"], ()):
            continue
        b = nbytes(*res[0])
        per = r["count"] / (info["n_steps"] * max(info["devices"], 1))
        if b >= th.state_copy_bytes and per >= 1:
            hits.append({"op": r["op_name"], "shape": r["shape"], "module": r["module"], "bytes": b,
                         "per_step": per, "per_step_ps": _per_step(r["self_ps"], info)})
    if not hits:
        return None
    tot_b = sum(h["bytes"] * h["per_step"] for h in hits)
    tot_t = sum(h["per_step_ps"] for h in hits)
    sh = hits[0]["shape"].split(" <- ")[0]
    return Finding(
        "state-copied-every-step", "high",
        f"{len(hits)} copies of state buffers ({sh}, updated in place by the same program) run every step: "
        f"{tot_b / 1e6:.2f} MB copied per step, {fmt_ms(tot_t)} per step"
        + (f" ({pct(tot_t / info['step_ps'])})" if info["step_ps"] else ""),
        {"copies": hits, "bytes_per_step": tot_b, "per_step_ps": tot_t},
        "a jitted step that updates a buffer it was not given to keep copies the whole buffer first, every "
        "step: in a raw-JAX Gemma 4 E2B engine (TPU v6e) donating the KV cache took the decode step from 21.3 ms "
        "to 13.1 ms (1.62x)",
        "donate the state (jax.jit(..., donate_argnums=...); the bundled engine donates unless --no-donate) and "
        "check the compiled program aliases it",
        f"traceview verify AFTER --check 'no finding state-copied-every-step' "
        f"--check 'no op matching \"^copy {re.escape(sh)}\"'")


def logits_cost(ctx) -> dict | None:
    """The converts / copies / transposes of [batch, vocabulary] logits inside the steps:
    {vocab, batch (the largest such batch), per_step_ps, step_ps, rows (a frame)}; None
    without a vocabulary, steps or such ops."""
    info = step_info(ctx)
    pops = step_pops(ctx)
    v = vocab(ctx)
    if v is None or pops.height == 0 or not info["step_ps"] or not step_loop(ctx)["repeated"]:
        return None

    def batch_of(sig):
        res, _ = arrays(sig)
        bs = [d[0] for dt, d in res if len(d) == 2 and d[1] == v and dt.startswith(("f", "bf"))]  # logits, not RNG bits
        return max(bs) if bs else None

    hit = pops.filter(pl.col("op_kind").is_in(_CONVERSIONS) | (pl.col("family") == "copies and conversions"))
    hit = hit.with_columns(pl.col("shape").map_elements(batch_of, return_dtype=pl.Int64).alias("_batch"))
    hit = hit.filter(pl.col("_batch").is_not_null())
    if hit.height == 0:
        return None
    return {"vocab": v, "batch": int(hit["_batch"].max()), "per_step_ps": _per_step(float(hit["self_ps"].sum()), info),
            "step_ps": info["step_ps"], "rows": hit.drop("_batch")}


def logits_conversions(ctx, th) -> Finding | None:
    """Rule 4: converts / copies / transposes of [batch, vocabulary] logits take at least
    ``logits_share`` of the step (one profile: what they cost now; whether they grow with
    the batch needs a second batch size, :func:`logits_growth`)."""
    no = _cannot(ctx, th, "logits-conversions", shapes=True)
    if no:
        return no
    c = logits_cost(ctx)
    if c is None:
        return None
    share = c["per_step_ps"] / c["step_ps"]
    if share < th.logits_share:
        return None
    info = step_info(ctx)
    return Finding(
        "logits-conversions", "medium",
        f"{c['rows'].height} conversions/copies of [batch, {c['vocab']:,}] logits take {fmt_ms(c['per_step_ps'])} of "
        f"each {fmt_ms(c['step_ps'])} step ({pct(share)}); one profile cannot show whether they grow with the batch",
        {"per_step_ps": c["per_step_ps"], "share_of_step": share, "vocab": c["vocab"], "batch": c["batch"],
         "populations": _rows(c["rows"], info)},
        "converting [batch, vocabulary] logits costs time in proportion to the batch: on Gemma 2B decode (TPU v5e) "
        "an f32 conversion and copy of the logits took 2.8 ms of a 31.2 ms step at batch 512, and removing them at "
        "a compiled-program boundary cut throughput 14-35% (13,470 -> 11,641 and 8,839 tok/s)",
        "profile a second batch size and diff the two (the time should grow with the batch if this matters); "
        "fuse the conversion into the logits matmul or the sampler rather than splitting programs",
        "traceview diff BATCH_A BATCH_B (the conversions' time per step against the batch ratio)")


def grows_with_batch(b0: int, t0: float, b1: int, t1: float) -> bool:
    """Whether a time per step going ``t0`` -> ``t1`` as the batch goes ``b0`` -> ``b1`` grows
    with the batch: same direction, and at least half the batch's relative change."""
    if b0 == b1 or not t0 or not t1:
        return False
    rb, rt = b1 / b0, t1 / t0
    return (rt - 1) * (rb - 1) > 0 and abs(rt - 1) >= 0.5 * abs(rb - 1)


def logits_growth(base_rep, treat_rep, th=None) -> Finding | None:
    """Rule 4 over two profiles at two batch sizes (:func:`logits_cost` of each): the
    [batch, vocabulary] conversions' time per step grows with the batch
    (:func:`grows_with_batch`)."""
    from traceview.analysis.findings import Inputs

    c0, c1 = logits_cost(Inputs(base_rep)), logits_cost(Inputs(treat_rep))
    if c0 is None or c1 is None:
        return None
    (b0, t0), (b1, t1) = (c0["batch"], c0["per_step_ps"]), (c1["batch"], c1["per_step_ps"])
    if not grows_with_batch(b0, t0, b1, t1):
        return None
    return Finding(
        "logits-conversions", "medium",
        f"[batch, vocabulary] logits conversions grow with the batch: {fmt_ms(t0)} per step at batch {b0} -> "
        f"{fmt_ms(t1)} at batch {b1} (x{t1 / t0:.2f} for a x{b1 / b0:.2f} batch)",
        {"batch": [b0, b1], "per_step_ps": [t0, t1], "step_ps": [c0["step_ps"], c1["step_ps"]]},
        "converting [batch, vocabulary] logits costs time in proportion to the batch: on Gemma 2B decode (TPU v5e) "
        "it took 2.8 ms of a 31.2 ms step at batch 512, and removing it at a compiled-program boundary cut "
        "throughput 14-35% (13,470 -> 11,641 and 8,839 tok/s)",
        "fuse the conversion into the logits matmul or the sampler (keep one program); measure unprofiled",
        "traceview diff BATCH_A BATCH_B")


def _bucket_of(a: list, b: list) -> bool:
    """Whether array lists ``a`` and ``b`` (result and operands) differ only by a padding
    bucket: same dtypes and ranks, and the differing dimensions map one to one (every ``x``
    of ``a`` becomes the same ``y`` in ``b``, and no other size becomes ``y``)."""
    if len(a) != len(b):
        return False
    fwd, back = {}, {}
    for (da, xa), (db, xb) in zip(a, b):
        if da != db or len(xa) != len(xb):
            return False
        for x, y in zip(xa, xb):
            if fwd.setdefault(x, y) != y or back.setdefault(y, x) != x:
                return False
    return any(x != y for x, y in fwd.items())


def several_regimes(ctx, th) -> Finding | None:
    """Rule 5: an op name whose shape populations differ by a padding bucket (same rank and
    dtypes, some dimensions different, the same source line where the trace has one) and
    whose occurrences are not all a multiple of the step count; says which population is the
    steady decode (the step module's)."""
    no = _cannot(ctx, th, "one-name-several-regimes", shapes=True)
    if no:
        return no
    rep = ctx.report
    bs = getattr(rep, "by_shape", None)
    info = step_info(ctx)
    if bs is None or bs.height == 0:
        return NotEvaluated("one-name-several-regimes", no_ops(ctx, "no op populations"))
    n = info["n_steps"]
    step_mods = set()
    if info["steps"] is not None and "module" in info["steps"].columns:
        step_mods = {m for m in info["steps"]["module"].unique().to_list() if m}
    if not step_mods:
        sp = step_pops(ctx)
        step_mods = set(sp.group_by("module").agg(pl.col("self_ps").sum()).sort("self_ps", descending=True)
                        ["module"].head(1).to_list()) if sp.height else set()
    total = float(rep.op_time_ps or 0) or float(bs["self_ps"].sum() or 0)
    best = None
    # per op name, its populations' rows (in table order); the tests below read plain lists and
    # only a candidate's rows become a frame
    groups: dict = {}
    for i, nm in enumerate(bs["op_name"].to_list()):
        groups.setdefault(nm, []).append(i)
    src = bs["source"].fill_null("").to_list() if "source" in bs.columns else None
    shape_of, self_of = bs["shape"].to_list(), bs["self_ps"].to_list()
    for name, idx in groups.items():
        if len(idx) < 2:
            continue
        if src is not None:  # one op in several buckets comes from one source line; a name
            # shared by different ops of different programs (decode model.py:95, prefill :152) does not
            srcs = [src[i] for i in idx if src[i]]
            if srcs:
                top = max(set(srcs), key=srcs.count)
                idx = [i for i in idx if src[i] == top]
                if len(idx) < 2:
                    continue
        shapes = [arrays(shape_of[i])[0] + arrays(shape_of[i])[1] for i in idx]
        if not shapes[0] or not all(_bucket_of(shapes[0], s) for s in shapes[1:]):
            continue
        share = float(sum(self_of[i] for i in idx if self_of[i] is not None)) / total if total else 0
        if share < th.regime_share:
            continue
        g = bs[idx]
        devs = g["devices"].cast(pl.Int64).fill_null(1)
        per_dev = (g["occurrences"] / devs.clip(1)).to_list()
        steady = [i for i, m in enumerate(g["modules"].to_list()) if set(m or []) & step_mods]
        off = [i for i, o in enumerate(per_dev) if o % n]
        if not off or not steady:
            continue
        if best is None or share > best[0]:
            best = (share, name[0] if isinstance(name, tuple) else name, g, steady, off)
    if best is None:
        return None
    share, name, g, steady, off = best
    rows = [{"shape": r["shape"], "occurrences": r["occurrences"], "modules": r["modules"], "mean_ps": r["mean_ps"],
             "steady_decode": i in steady, "multiple_of_steps": i not in off} for i, r in enumerate(g.iter_rows(named=True))]
    st = g.row(steady[0], named=True)
    coincide = [i for i in range(g.height) if i not in steady and i not in off]
    return Finding(
        "one-name-several-regimes", "info",
        f"{name} runs in {g.height} shape populations (padding buckets; {pct(share)} of op time); the steady decode "
        f"is {st['shape'].split(' <- ')[0]} in {', '.join(st['modules'])} (x{st['occurrences']}, {n} steps); "
        f"{len(off)} population(s) do not run a multiple of {n} times: another regime (prefill, another bucket)"
        + (f"; {len(coincide)} other(s) run a multiple of {n} times by coincidence (their module, not the count, "
           "says they are not the decode)" if coincide else ""),
        {"op": name, "steps": n, "populations": rows},
        "a table keyed by op name mixes the steady decode with prefill and warm-up buckets of the same name: on "
        "Gemma 2B decode (TPU v5e) the name-keyed table showed 1024-token shapes, suggesting half of each step was "
        "padding, yet the decode population (258 occurrences) had its own shape and the 1024-token one ran 18 "
        "times, in one prefill",
        "read the steady decode's population alone (traceview analyze --by shape --filter NAME, or --steps N "
        "for the occurrence checks)",
        f"traceview analyze PATH --steps {n}")


def host_bound(ctx, th) -> Finding | None:
    """Rule 8: device idle inside steps plus the gap between them is at least ``host_share``
    of a step's wall time plus its gap (the step as the step anatomy measures it, the gap
    after it: one step's start to the next)."""
    fid = "host-bound-steps"
    if getattr(ctx.report, "phase", None):  # the other phases' ops were left out: their time reads as idle
        return NotEvaluated(fid, "--phase leaves the other phases' ops out, so their time would read as idle")
    no = _cannot(ctx, th, fid)
    if no:
        return no
    info = step_info(ctx)
    st = info["steps"]
    if st.height < 2:
        return NotEvaluated(fid, "one step: the idle time between steps needs two or more")
    if st["idle_ps"].null_count() == st.height:  # no measure of the idle time
        return NotEvaluated(fid, "no measure of the device's idle time in the steps")
    idle = float(st["idle_ps"].mean() or 0)
    # the gap after a step less the ops that ran in it (another program: a prefill chunk between
    # decode steps keeps the device busy, it is not the host's time)
    busy_gap = gap_busy(ctx)
    gap = max(info["gap_ps"] - busy_gap, 0.0)
    share = (idle + gap) / (info["step_ps"] + info["gap_ps"])
    if share < th.host_share:
        return None
    return Finding(
        "host-bound-steps", "medium",
        f"the device idles {fmt_ms(idle + gap)} of each {fmt_ms(info['step_ps'] + info['gap_ps'])} from one step's "
        f"start to the next ({pct(share)}: {fmt_ms(idle)} inside the {fmt_ms(info['step_ps'])} step, {fmt_ms(gap)} "
        f"between steps" + (f", besides {fmt_ms(busy_gap)} of other programs' ops there" if busy_gap else "")
        + "): the host is on the critical path",
        {"idle_ps": idle, "gap_ps": gap, "gap_busy_ps": busy_gap, "step_ps": info["step_ps"],
         "period_ps": info["step_ps"] + info["gap_ps"], "share": share, "n_steps": info["n_steps"]},
        "while the device waits for the host, every step is longer by that wait: on Gemma 2B decode (TPU v5e) the "
        "gap between steps was 85 µs of an 11.9 ms step (0.7%), not worth optimising; a device idle for a "
        "third of the step gets that third back only from the host side (dispatch, scheduling, host sampling)",
        "move per-step host work off the critical path (sample on the device, overlap scheduling with the "
        "running step, fewer dispatches per step) and profile again",
        "traceview verify AFTER --check 'no finding host-bound-steps'; "
        "traceview analyze AFTER  # step anatomy: idle and gap between steps")


def far_below_roofline(ctx, th) -> Finding | None:
    """Rule 10: an op family whose FLOPs per byte sit below the ridge point (memory-bound)
    reaches under ``roofline_fraction`` of peak bandwidth while holding at least
    ``roofline_share`` of op time."""
    rep = ctx.report
    roof, peaks = getattr(rep, "roofline", None), getattr(rep, "peaks", None)
    if roof is None or roof.height == 0:
        return NotEvaluated("far-below-roofline", no_ops(ctx, "no op populations"))
    if peaks is None or not peaks.peak_bw or not peaks.peak_flops:
        missing = [w for w, v in (("FLOP/s", None if peaks is None else peaks.peak_flops),
                                  ("bandwidth", None if peaks is None else peaks.peak_bw)) if not v]
        if len(missing) == 2:
            return NotEvaluated("far-below-roofline", "no peak FLOP/s and bandwidth known for the device: give "
                                "--chip, or --peak-flops and --peak-bw")
        return NotEvaluated("far-below-roofline", f"no peak {missing[0]} known for the device: give "
                            + ("--peak-flops" if missing[0] == "FLOP/s" else "--peak-bw") + " (or --chip)")
    fam = pop_families(ctx)
    r = (roof.filter(pl.col("bytes").fill_null(0) > 0).join(fam, on=["op_name", "shape"], how="left")
         .filter(pl.col("builtin") != "collectives")
         .with_columns((pl.col("bytes") * pl.col("executions")).alias("_b"),
                       (pl.col("flops").fill_null(0) * pl.col("executions")).alias("_f")))
    if r.height == 0:
        return NotEvaluated("far-below-roofline", "no op with a byte count to place on the roofline")
    total = float(rep.op_time_ps or 0)
    ridge = peaks.peak_flops / peaks.peak_bw
    g = r.group_by("family").agg(pl.col("_b").sum(), pl.col("_f").sum(), pl.col("total_ps").sum(), pl.len().alias("n"))
    hits = []
    for f in g.iter_rows(named=True):
        if not f["total_ps"] or not total:
            continue
        bw = f["_b"] / (f["total_ps"] * 1e-12)
        frac, share, inten = bw / peaks.peak_bw, f["total_ps"] / total, f["_f"] / f["_b"]
        if inten < ridge and frac < th.roofline_fraction and share >= th.roofline_share:
            top = (r.filter(pl.col("family") == f["family"]).sort("total_ps", descending=True).head(3)
                   .select("op_name", "shape", "total_ps", "frac_peak_bw").to_dicts())
            hits.append({"family": f["family"], "fraction_of_peak_bw": frac, "share_of_op_time": share,
                         "intensity": inten, "ridge_point": ridge, "achieved_bw": bw, "peak_bw": peaks.peak_bw,
                         "peak_bw_source": peaks.bw_source, "populations": top})
    if not hits:
        return None
    h = max(hits, key=lambda x: x["share_of_op_time"])
    return Finding(
        "far-below-roofline", "medium",
        f"{h['family']} is memory-bound ({h['intensity']:.1f} FLOP/byte, ridge point {ridge:.0f}) yet reaches "
        f"{pct(h['fraction_of_peak_bw'])} of peak bandwidth while holding {pct(h['share_of_op_time'])} of op time",
        {"families": hits},
        "a memory-bound op far below peak bandwidth is paying fixed costs, not moving bytes: on Gemma 2B decode "
        "(TPU v5e) the attention kernel ran at ~25% of HBM bandwidth, set by per-request and per-block overhead, "
        "while the weight-streaming matmuls reached 84-91%",
        "look for fixed costs per invocation (launches, small blocks, padding, per-request loops) before "
        "optimising bytes; compare roofline time with measured time per population",
        "traceview analyze AFTER  # roofline: % peak BW of the family's populations")


def warmup_in_window(ctx, th) -> Finding | None:
    """Rule 11: warm-up steps inside the analysed window (``--step-window all`` or ``A:B``):
    outlier steps whose reason names a first execution (the step distributions'
    ``outlier``/``reason``/``in_window`` columns, :mod:`traceview.analysis.steps.stepstats`), else a
    first step at least ``warmup_factor`` times the median of the later ones (at least
    ``warmup_min_steps`` steps on the device). Silent when the window already leaves every
    warm-up step out (the default steady window): there is nothing to act on."""
    no = _cannot(ctx, th, "warmup-in-window", ops=False)
    if no:
        return no
    st = ctx.report.steps.steps
    hits = []
    if "outlier" in st.columns and "reason" in st.columns:
        # the outliers first (few), then their reasons searched: no string search over every step
        o = st.filter(pl.col("outlier").fill_null(False))
        o = o.filter(pl.col("reason").fill_null("").str.contains("first execution"))
        if "in_window" in o.columns:
            o = o.filter(pl.col("in_window").fill_null(True))
        for r in o.sort("start_ps").iter_rows(named=True):
            hits.append({"host": r["host"], "device": r["device"], "step": r["step"], "duration_ps": r["duration_ps"],
                         "reason": r["reason"], "in_window": True})
        med = float(st.select(pl.col("duration_ps").filter(~pl.col("outlier").fill_null(False)).median()).item()
                    or 0)
    else:
        med = 0.0
        for (h, d), g in st.sort("start_ps").group_by(["host", "device"], maintain_order=True):
            if g.height < th.warmup_min_steps:
                continue
            first = g.row(0, named=True)
            m = float(g["duration_ps"][1:].median() or 0)
            if m and first["duration_ps"] >= th.warmup_factor * m:
                hits.append({"host": h, "device": d, "step": first["step"], "duration_ps": first["duration_ps"],
                             "median_rest_ps": m, "ratio": first["duration_ps"] / m, "in_window": True})
                med = max(med, m)
    if not hits or not med:
        return None
    h0 = hits[0]
    mean_all = float(st["duration_ps"].mean() or 0)
    return Finding(
        "warmup-in-window", "medium",
        f"{len(hits)} warm-up step(s) (first executions) inside the analysed window: {h0['device']} step "
        f"{h0['step']} took {fmt_ms(h0['duration_ps'])} against a steady median of {fmt_ms(med)}; the mean over "
        f"the window's steps is {fmt_ms(mean_all)}",
        {"steps": hits, "steady_median_ps": med, "mean_all_ps": mean_all, "inside_window": len(hits)},
        "a first execution (compilation, caches filling) is not the steady step and drags every mean: on the MI300X "
        "conv3d trace one GPU's first step took 43.1 ms against a ~1 ms steady median and raised the mean "
        "step to 3.4 ms",
        "analyse the steady window only (the default), or profile after a warm-up run (start the profiler after "
        "the first generate)",
        "traceview analyze PATH --step-window steady; or re-profile after warm-up and check "
        "'no finding warmup-in-window'")


RULES = (sampler_search, kv_block_covers, state_copied, logits_conversions, several_regimes, host_bound,
         far_below_roofline, warmup_in_window)
