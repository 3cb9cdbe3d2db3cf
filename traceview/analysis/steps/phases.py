"""Prefill, decode and mixed steps, and utilisation (MFU, MBU, tokens) per step and per phase.

A serving engine runs different populations in one loop: prefill chunks, decode steps, warm-up
buckets. Each *program* (module, program_id: compiled with static shapes) gets a phase:

1. its name, where it says so (``prefill`` / ``decode`` in the module name, as the bundled
   engine's ``jit_prefill_t32_r2`` and ``jit_decode_b8_bkv512``);
2. else, for a program whose matmul populations carry a token dimension (a unified step
   function such as vLLM's ``jit_step_fun``, which pads prefill and decode into token buckets):
   T = the leading dimension of the result of its heaviest matmul/convolution population (the
   tokens the step processes, bucket padding included) against B = the sequences of the
   iteration, read off the LM head that follows it on the device (a 2-D result ``[B, V]`` whose
   V, at least :data:`MIN_VOCAB`, is a dimension of one of its operands, in this program or the
   next execution before the next step). T <= B rounded up to a power of two: one token per
   sequence, decode; T over that: prefill (several tokens per sequence; a batch that mixes
   prefill chunks and decode tokens in one padded bucket reads the same, so the reason says
   T and B);
3. else no phase (samplers, logits, copies: auxiliary to the step they follow).

A *step* (the step anatomy's) is labelled by the phased executions on its device from the end
of the previous step to its own end: decode only, prefill only, or both (``mixed``: an engine
iteration that ran a prefill chunk between two decode steps; prefill before a device's first
step precedes the loop, and that step is labelled by its own programs). Per phase: the steps, their time
distribution, the share of op time of the phase's programs, the families per step, and
utilisation: MFU = FLOPs in the step / (step time x peak FLOP/s), with the ops' ``model_flops``
where the trace has them, else their FLOPs (trace or HLO-derived; the source is stated); MBU =
bytes accessed in the step / (step time x peak bandwidth), the decode figure of merit (Pope et
al., "Efficiently Scaling Transformer Inference", 2022, define both); tokens per step from the
program names (``_b<N>`` decode rows, ``_t<N>`` prefill tokens) or ``tokens_per_step``. Peaks are
per device (:class:`~traceview.analysis.hardware.peaks.Peaks`); unknown peaks leave MFU/MBU None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from traceview.analysis import eventstats

try:  # optional C accelerator
    from traceview.analysis import _passes as _fast
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _fast = None

PHASES = ("prefill", "decode", "mixed")
#: the smallest vocabulary an LM head's ``[B, V]`` result is recognised by
MIN_VOCAB = 16384
_LEAD = re.compile(r"^\(?[a-z0-9]+\[(\d+)")
_DIMS = re.compile(r"\[([\d,]*)\]")


@dataclass
class Phases:
    """Result of :func:`phases`. ``programs``: per (host, module, program_id) phase, tokens (T),
    why. ``steps``: the anatomy's steps (host, device, step, start_ps, duration_ps, in_window)
    with phase, why, tokens, flops, model_flops, bytes, mfu, mbu, tokens_per_s. ``summary``:
    per phase (prefill, decode, mixed, unknown): steps, window_steps, median/p10/p90 step time
    (ps, window steps), op_share (op time of the phase's programs over all op time), mfu, mbu
    (window steps), tokens_per_s. ``families``: per phase and family, time per step (ps) and
    share. ``flops_source``: what MFU counts; ``notes``."""

    programs: pl.DataFrame
    steps: pl.DataFrame
    summary: pl.DataFrame
    families: pl.DataFrame
    flops_source: str = "unknown"
    notes: list = field(default_factory=list)
    #: per program execution on a device with steps: host, device, module, program_id,
    #: start_ps, duration_ps, phase ("" when auxiliary), step_row (-1: in no step's iteration)
    executions: pl.DataFrame | None = field(default=None, repr=False)

    def label_line(self) -> str:
        """One line: how many steps of each phase."""
        if self.steps.height == 0:
            return "no steps to label"
        c = self.steps.group_by("phase").agg(pl.len().alias("n")).sort("phase")
        return ", ".join(f"{n} {p}" for p, n in c.iter_rows())


def _lead_dim(shape: str) -> int | None:
    m = _LEAD.match(shape or "")
    return int(m.group(1)) if m else None


def _lm_head_rows(shape: str) -> int | None:
    """B of an LM head population ``[B, V] <- ..., [V, H] ...`` (V >= MIN_VOCAB), else None."""
    res, _, ops = (shape or "").partition(" <- ")
    m = _DIMS.search(res)
    if not m or res.startswith("("):
        return None
    dims = [int(x) for x in m.group(1).split(",") if x]
    if len(dims) != 2 or dims[1] < MIN_VOCAB:
        return None
    for d in _DIMS.findall(ops):
        if str(dims[1]) in d.split(","):
            return dims[0]
    return None


def _pow2(n: int) -> int:
    return 1 << max(0, int(n - 1).bit_length())


def program_phases(anat) -> pl.DataFrame:
    """Per program (host, module, program_id) of the anatomy's op table: name_phase, tokens
    (T), lm_rows (B of its LM head, if it has one), matmul_shape (the population T is read off)."""
    table = anat.table
    schema = {"host": pl.Utf8, "module": pl.Utf8, "program_id": pl.UInt64, "name_phase": pl.Utf8,
              "tokens": pl.Int64, "lm_rows": pl.Int64, "matmul_shape": pl.Utf8}
    if table is None or table.height == 0:
        return pl.DataFrame(schema=schema)
    self_ps = eventstats.float_attr_sums(table)[0]
    attrs = table.attrs.select("attr", "host", "module", "program_id", "shape").with_columns(
        pl.Series("self_ps", self_ps[table.attrs["attr"].to_numpy().astype(np.int64)]))
    fam = anat.attr_family if anat.attr_family is not None else pl.DataFrame(schema={"attr": pl.UInt32,
                                                                                      "family": pl.Utf8})
    attrs = attrs.join(fam, on="attr", how="left")
    keys = ["host", "module", "program_id"]
    mm = (attrs.filter(pl.col("family") == "matmul/convolution").group_by(keys + ["shape"])
          .agg(pl.col("self_ps").sum()).sort("self_ps", descending=True)
          .group_by(keys, maintain_order=True).agg(pl.col("shape").first().alias("matmul_shape")))
    shapes = attrs.select(keys + ["shape"]).unique()
    lm = shapes.with_columns(pl.col("shape").map_elements(_lm_head_rows, return_dtype=pl.Int64).alias("lm_rows")) \
        .filter(pl.col("lm_rows").is_not_null()).group_by(keys).agg(pl.col("lm_rows").min())
    progs = attrs.select(keys).unique(maintain_order=True)
    out = (progs.join(mm, on=keys, how="left", nulls_equal=True).join(lm, on=keys, how="left", nulls_equal=True)
           .with_columns(
               pl.col("module").str.extract(r"(?i)(prefill|decode)", 1).str.to_lowercase().alias("name_phase"),
               pl.col("matmul_shape").map_elements(_lead_dim, return_dtype=pl.Int64).alias("tokens")))
    return out.select(list(schema)).cast(schema)


def phases(prof, anat, peaks=None, *, tokens_per_step: int | None = None) -> Phases:
    """The :class:`Phases` of a profile's step anatomy ``anat`` (a
    :class:`~traceview.analysis.steps.anatomy.StepAnatomy`); ``peaks``: per device (None: MFU/MBU
    unknown); ``tokens_per_step``: tokens every step produces when the program names do not say."""
    progs = program_phases(anat)
    st = anat.steps
    empty_sum = pl.DataFrame(schema=SUMMARY_SCHEMA)
    rt = prof.runs
    if st.height == 0 or rt.height == 0:
        return Phases(progs, st.head(0), empty_sum, pl.DataFrame(), notes=["no steps: no phase to label"],
                      executions=None)
    steps = st.select("host", "device", "step", "start_ps", "duration_ps",
                      pl.col("in_window") if "in_window" in st.columns else pl.lit(True).alias("in_window"))
    steps = steps.with_row_index("_row")
    if (progs["name_phase"].null_count() == progs.height and progs["lm_rows"].null_count() == progs.height
            and not getattr(prof, "phase", None)):
        # no program says its phase and no LM head gives the sequences: nothing to label
        lab = steps.with_columns(pl.lit("unknown").alias("phase"), pl.lit(None, dtype=pl.Utf8).alias("why"),
                                 pl.lit(None, dtype=pl.Int64).alias("step_tokens"),
                                 pl.lit(None, dtype=pl.Int64).alias("sequences"),
                                 pl.lit(None, dtype=pl.Int64).alias("tokens"))
        util, source = _utilisation(anat, lab, peaks, tokens_per_step)
        lab = lab.drop("tokens").hstack(util.drop("_row"))  # util rows are lab's, in order
        return Phases(progs, lab.drop("_row"), _summary(lab, None, rt.runs), pl.DataFrame(schema={
            "phase": pl.Utf8, "family": pl.Utf8, "self_ps": pl.Float64, "share": pl.Float64}), source,
            ["phase unknown for every step: no program is named prefill/decode, and no program's token "
             "dimension can be read against an LM head"] + _peak_notes(peaks, _cpu(prof)), None)
    # the program executions with their program's phase figures (the program table joined per key)
    keyed = rt.keys.join(progs, on=["host", "module", "program_id"], how="left", nulls_equal=True)
    runs = (rt.runs.join(keyed, on="key", how="left")
            .select("host", "device", "module", "program_id", "start_ps", "duration_ps", "name_phase", "tokens",
                    "lm_rows").sort("host", "device", "start_ps"))
    labelled, execs = [], []
    by_dev = {k: g for k, g in runs.group_by(["host", "device"], maintain_order=True)}
    for (host, dev), s in steps.sort("host", "device", "start_ps").group_by(["host", "device"], maintain_order=True):
        r = by_dev.get((host, dev), runs.head(0))
        ex, got = _label_device(s, r)
        rows = s["_row"].to_numpy().astype(np.int64)  # (UInt32: np.where with -1 wrapped it to 2**32-1,
        # and numpy 2.5 raises OverflowError)
        execs.append(ex.with_columns(pl.Series("step_row", np.where(ex["step_row"].to_numpy() >= 0,
                                                                       rows[np.maximum(ex["step_row"].to_numpy(), 0)]
                                                                       if len(rows) else -1, -1))))
        labelled.append(got)
    lab = pl.concat(labelled, how="vertical_relaxed").sort("_row")
    executions = pl.concat(execs, how="vertical_relaxed") if execs else runs.head(0)
    kept = getattr(prof, "phase", None)
    if kept:  # a profile kept to one phase (--phase): its steps are that phase's, whatever else says
        # (the other phases' programs were left out, so a step's own label would be read off part of it)
        lab = lab.with_columns(
            pl.when(pl.col("phase") == kept).then(pl.col("why"))
            .otherwise(pl.lit(f"kept by --phase {kept}")).alias("why"),
            pl.lit(kept).alias("phase"))
    util, source = _utilisation(anat, lab, peaks, tokens_per_step)
    lab = lab.drop("tokens").hstack(util.drop("_row"))  # util rows are lab's, in order
    summary = _summary(lab, executions, runs)
    fams = _families(anat, lab)
    notes = _peak_notes(peaks, _cpu(prof))
    if not tokens_per_step and lab["tokens"].is_not_null().any():
        notes.append("tokens per step read off the programs' buckets (_b<N>: the decode program's rows, _t<N>: the "
                     "prefill program's tokens), padding included: an upper bound on the tokens made; "
                     "--tokens-per-step N gives the real count")
    return Phases(progs, lab.drop("_row"), summary, fams, source, notes, executions)


def _markers_in(markers: pl.DataFrame, win: pl.DataFrame) -> pl.DataFrame:
    """The step markers whose end falls in one of ``win``'s (lo, hi] windows (any device: a
    marker's device "" means every device of its host)."""
    if markers is None or markers.height == 0 or win.height == 0:
        return markers
    lo, hi = win["lo"].to_numpy(), win["hi"].to_numpy()
    ends = (markers["start_ps"] + markers["duration_ps"].fill_null(0)).to_numpy()
    keep = ((ends[:, None] > lo[None, :]) & (ends[:, None] <= hi[None, :])).any(axis=1)
    return markers.filter(pl.Series(keep))


def _cpu(prof) -> bool:
    return bool(prof.devices) and all(getattr(d, "kind", "") == "CPU" for d in prof.devices)


def _peak_notes(peaks, cpu: bool = False) -> list[str]:
    notes = []
    how = "--measure-cpu-peaks, --peak-flops / --peak-bw" if cpu else "--chip, or --peak-flops / --peak-bw"
    if peaks is None or peaks.peak_flops is None:
        notes.append(f"MFU unknown: no peak FLOP/s (pass {how})")
    if peaks is None or peaks.peak_bw is None:
        notes.append(f"MBU unknown: no peak bandwidth (pass {how})")
    return notes


def _label_device(s: pl.DataFrame, r: pl.DataFrame) -> pl.DataFrame:
    """Label one device's steps ``s`` (in time order) from its program executions ``r`` (in
    time order): sorts and searches, no loop over executions or steps."""
    starts = s["start_ps"].to_numpy()
    ends = starts + s["duration_ps"].fill_null(0).to_numpy()
    rs = r["start_ps"].to_numpy()
    m = len(rs)
    big = np.iinfo(np.int64)
    # executions from the previous step's end (exclusive) to this step's end (inclusive)
    lo = np.searchsorted(rs, np.concatenate([[big.min], ends[:-1]]), side="right")
    hi = np.searchsorted(rs, ends, side="right")
    # per execution: the step it belongs to (-1 none) and where that step's iteration ends
    # (the next step's start): its LM head must run before that
    owner = np.full(m, -1, dtype=np.int64)
    if m:
        k_of = np.searchsorted(hi, np.arange(m), side="right")  # first step whose hi > i
        ok = (k_of < len(hi)) & (np.arange(m) >= lo[np.minimum(k_of, len(lo) - 1)])
        owner[ok] = k_of[ok]
    nxt = np.searchsorted(rs, np.concatenate([starts[1:], [big.max]]), side="left")
    name_phase = r["name_phase"].fill_null("").to_numpy()
    tokens = r["tokens"].fill_null(-1).to_numpy()
    lm = r["lm_rows"].fill_null(-1).to_numpy()
    # the next execution at or after i with an LM head (its own first)
    idx = np.where(lm >= 0, np.arange(m), m)
    next_lm = np.minimum.accumulate(idx[::-1])[::-1] if m else idx
    limit = np.where(owner >= 0, nxt[np.maximum(owner, 0)], -1)
    has_b = (next_lm < m) & (next_lm < np.maximum(limit, 0)) & (owner >= 0)
    b = np.where(has_b, lm[np.minimum(next_lm, m - 1)] if m else 0, -1)
    unified = (name_phase == "") & (tokens > 0) & (b > 0) & ~((lm >= 0) & (tokens == lm))
    pow2 = np.where(b > 0, 1 << np.ceil(np.log2(np.maximum(b, 1))).astype(np.int64), 0)
    ex_phase = np.where(name_phase != "", name_phase,
                        np.where(unified, np.where(tokens <= pow2, "decode", "prefill"), ""))
    # per step: the first decode and the first prefill execution in its window
    rep = {}
    for p in ("decode", "prefill"):
        pos = np.flatnonzero((ex_phase == p) & (owner >= 0))
        j = np.searchsorted(pos, lo)
        hit = (j < len(pos)) & (pos[np.minimum(j, max(len(pos) - 1, 0))] < hi) if len(pos) else np.zeros(len(lo), bool)
        rep[p] = np.where(hit, pos[np.minimum(j, max(len(pos) - 1, 0))] if len(pos) else -1, -1)
    dec, pre = rep["decode"] >= 0, rep["prefill"] >= 0
    # prefill before a device's first step is not interleaved with decode: that step is decode
    first_after_prefill = np.zeros(len(dec), dtype=bool)
    if len(dec):
        first_after_prefill[0] = bool(dec[0] and pre[0])
    phase = np.where(dec & pre & ~first_after_prefill, "mixed",
                     np.where(dec, "decode", np.where(pre, "prefill", "unknown")))
    mods = r["module"].to_numpy()

    def reason(k_rep: np.ndarray, p: str) -> pl.Series:
        i = np.maximum(k_rep, 0)
        mod = pl.Series(mods[i] if m else np.array([], dtype=object), dtype=pl.Utf8)
        t = pl.Series(tokens[i] if m else [], dtype=pl.Int64)
        bb = pl.Series(b[i] if m else [], dtype=pl.Int64)
        named = pl.Series(name_phase[i] != "" if m else [], dtype=pl.Boolean)
        df = pl.DataFrame({"mod": mod, "t": t, "b": bb, "named": named})
        txt = df.select(pl.when(pl.col("named")).then(pl.format("program {} is named " + p, "mod"))
                        .otherwise(pl.format("{} runs {} tokens for {} sequences", "mod", "t", "b")))[:, 0]
        return txt.set(pl.Series(k_rep < 0), None)

    rd, rp = reason(rep["decode"], "decode"), reason(rep["prefill"], "prefill")
    why = pl.DataFrame({"d": rd, "p": rp}).select(
        pl.concat_str([pl.col("p"), pl.col("d")], separator="; ", ignore_nulls=True))[:, 0]
    if first_after_prefill.any():
        why = why.set(pl.Series(first_after_prefill), "the first step: " + (rd[0] or "") +
                      "; the prefill (" + (rp[0] or "") + ") ran before it, not between decode steps")
    why = why.set(pl.Series(phase == "unknown"),
                  "no program named prefill/decode, and no token dimension against an LM head")
    first = np.where(dec, rep["decode"], rep["prefill"])
    step_tok = np.where((first >= 0) & (name_phase[np.maximum(first, 0)] == "") if m else False,
                        tokens[np.maximum(first, 0)] if m else -1, -1)
    step_seq = np.where(step_tok > 0, b[np.maximum(first, 0)] if m else -1, -1)
    # tokens the phased executions inside the step's window process, from their names (decode: _b<N> rows,
    # prefill: _t<N> tokens); unknown when one of them does not say
    named_tok = pl.DataFrame({"m": r["module"].fill_null(""), "p": ex_phase}).select(
        pl.when(pl.col("p") == "decode").then(pl.col("m").str.extract(r"_b(\d+)(?:_|$)", 1))
        .when(pl.col("p") == "prefill").then(pl.col("m").str.extract(r"_t(\d+)(?:_|$)", 1))
        .cast(pl.Int64))[:, 0].to_numpy() if m else np.zeros(0)
    phased = (ex_phase != "") & (owner >= 0)
    known = phased & ~np.isnan(named_tok.astype(np.float64))
    cs_t = np.concatenate([[0], np.cumsum(np.where(known, np.nan_to_num(named_tok.astype(np.float64)), 0))])
    cs_u = np.concatenate([[0], np.cumsum(phased & ~known)])
    cs_p = np.concatenate([[0], np.cumsum(phased)])
    inn = np.searchsorted(rs, starts, side="left")  # executions inside the step's own window
    tok = cs_t[hi] - cs_t[inn]
    tok_ok = ((cs_u[hi] - cs_u[inn]) == 0) & ((cs_p[hi] - cs_p[inn]) > 0)
    ex = r.select("host", "device", "module", "program_id", "start_ps", "duration_ps").with_columns(
        pl.Series("phase", ex_phase.tolist(), dtype=pl.Utf8), pl.Series("step_row", owner))
    return ex, s.with_columns(pl.Series("phase", phase.tolist(), dtype=pl.Utf8), why.alias("why"),
                          pl.Series("tokens", np.where(tok_ok, tok, np.nan)).fill_nan(None).cast(pl.Int64),
                          pl.Series("step_tokens", step_tok).replace(-1, None).cast(pl.Int64),
                          pl.Series("sequences", step_seq).replace(-1, None).cast(pl.Int64))


def _utilisation(anat, lab: pl.DataFrame, peaks, tokens_per_step):
    """Per step row: flops, model_flops, bytes (sums over its ops x occurrences), mfu, mbu,
    tokens, tokens_per_s; and the FLOPs source line."""
    table, rows = anat.table, anat.step_rows
    n = anat.steps.height
    zero = np.zeros(n)
    flops = mflops = byts = zero
    has_flops = has_bytes = np.zeros(n, dtype=bool)
    source = "unknown"
    if table is not None and rows is not None and (rows >= 0).any():
        attrs = table.attrs
        n_attr = attrs.height
        idx = attrs["attr"].to_numpy().astype(np.int64)

        def per_attr(col):
            a = np.zeros(n_attr)
            a[idx] = attrs[col].fill_null(np.nan).to_numpy()
            return a

        f, mf, b = per_attr("flops"), per_attr("model_flops"), per_attr("bytes_accessed")
        fm = np.where(np.isnan(mf), f, mf)
        ev_attr = table.events["attr"].to_numpy()
        r = eventstats.ranges(table)
        c_all = None if r["count_nulls"] == 0 and r["count_min"] == 1 and r["count_max"] == 1 else \
            table.events["count"].fill_null(1).to_numpy()
        held = getattr(anat, "sums_hold", lambda: False)()  # sums of these steps, not of a copy's
        got = _c_sums(rows, ev_attr, c_all, n_attr, n, table, f, fm, b, anat.step_sums if held else None)
        if got is not None:
            flops, mflops, byts, has_flops, has_bytes, used = got
        else:
            inside = rows >= 0
            r_in = rows[inside]
            a_in = ev_attr[inside]
            c_in = None if c_all is None else c_all[inside].astype(np.float64)
            del inside

            # costs count as the family roofline counts them: none for collectives and async halves,
            # once per execution of an op that launches several kernels (its _exec over its events)
            counts = np.bincount(a_in, weights=c_in, minlength=n_attr) if c_in is not None else \
                np.bincount(a_in, minlength=n_attr).astype(np.float64)
            factor = _cost_factor(table, counts, n_attr)

            def step_sums(per_attr: np.ndarray) -> np.ndarray:
                # one per-event gather of a per-description figure at a time (NaN: unknown, as 0)
                w = (np.nan_to_num(per_attr) * factor)[a_in]
                if c_in is not None:
                    w *= c_in
                return np.bincount(r_in, weights=w, minlength=n)

            flops, mflops, byts = step_sums(f), step_sums(fm), step_sums(b)
            # a step none of whose ops carries FLOPs (bytes) has an unknown MFU (MBU), not 0
            has_flops = np.bincount(r_in, weights=((~np.isnan(fm)) & (factor > 0))[a_in].astype(np.float64),
                                    minlength=n) > 0
            has_bytes = np.bincount(r_in, weights=((~np.isnan(b)) & (factor > 0))[a_in].astype(np.float64),
                                    minlength=n) > 0
            used = np.bincount(a_in, minlength=n_attr) > 0
        has_m, has_f = ~np.isnan(mf[used]), ~np.isnan(f[used])
        src = np.zeros(n_attr, dtype=bool)
        src[idx] = (attrs["cost_source"] == "derived").fill_null(False).to_numpy()
        derived = bool(src[used].any())
        if has_m.any():
            source = ("model_flops from the trace" if has_m.all() else
                      "model_flops from the trace where an op has them, else the op's FLOPs")
        elif has_f.any():
            source = "the ops' FLOPs " + ("(derived from the HLO where the trace has none)" if derived else
                                          "(from the trace)")
    row = lab["_row"].to_numpy()
    if len(row) == n and (n == 0 or (row[0] == 0 and bool((np.diff(row) == 1).all()))):  # every row, in order
        flops, mflops, byts = (np.ascontiguousarray(x) for x in (flops, mflops, byts))
    else:
        flops, mflops, byts, has_flops, has_bytes = flops[row], mflops[row], byts[row], has_flops[row], has_bytes[row]
    dur = lab["duration_ps"].fill_null(0).to_numpy().astype(np.float64) * 1e-12
    pf = peaks.peak_flops if peaks is not None else None
    pb = peaks.peak_bw if peaks is not None else None
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mfu = np.where(has_flops, mflops / (dur * pf), np.nan) if pf else None
        mbu = np.where(has_bytes, byts / (dur * pb), np.nan) if pb else None
    tok = (pl.repeat(tokens_per_step, lab.height, dtype=pl.Int64, eager=True) if tokens_per_step
           else lab["tokens"]).alias("tokens")
    nul = pl.repeat(None, lab.height, dtype=pl.Float64, eager=True)

    def finite(name: str, x: np.ndarray | None) -> pl.Series:  # null where not finite (NaN, inf)
        if x is None:
            return nul.alias(name)
        return pl.Series(name, np.where(np.isfinite(x), x, np.nan), nan_to_null=True)

    if tok.null_count() == lab.height:  # no step's tokens: no rate (no frame built for it)
        rate = nul.alias("tokens_per_s")
    else:
        rate = pl.DataFrame([tok, pl.Series("_dur", dur)]).select(
            pl.when(pl.col("_dur") > 0).then(pl.col("tokens") / pl.col("_dur")).alias("tokens_per_s"))[:, 0]
    out = pl.DataFrame([lab["_row"], pl.Series("flops", flops), pl.Series("model_flops", mflops),
                        pl.Series("bytes", byts), finite("mfu", mfu), finite("mbu", mbu), tok, rate])
    return out, source


def _c_sums(rows, ev_attr, counts, n_attr: int, n: int, table, f, fm, b, step_sums=None) -> tuple | None:
    """:func:`_utilisation`'s per-step sums in two C passes (``attr_sums``, ``row_sums``):
    (flops, model_flops, bytes, has_flops, has_bytes, used per description), the same figures
    as its numpy path; None without the accelerator or when a pass refuses. ``step_sums``: the
    anatomy's exact (count, events) per description over the steps' events
    (:class:`~traceview.analysis.steps.anatomy.StepAnatomy`), which stand for ``attr_sums``
    when float64 sums give the same numbers (no negative count, every sum below 2**53)."""
    if _fast is None or len(rows) != len(ev_attr):
        return None
    r32 = np.ascontiguousarray(rows, dtype=np.int32)
    a32 = np.ascontiguousarray(ev_attr, dtype=np.uint32)
    c64 = b"" if counts is None else np.ascontiguousarray(counts, dtype=np.int64)
    got = _exact_step_sums(step_sums, counts, n_attr)
    if got is not None:
        per, seen = got
    else:
        per = np.zeros(n_attr)
        seen = np.zeros(n_attr, dtype=np.uint8)
        if not _fast.attr_sums(r32, b"", a32, c64, 0 if counts is None else 1, per, seen):
            return None
    factor = _cost_factor(table, per, n_attr)
    w = np.stack([np.nan_to_num(f) * factor, np.nan_to_num(fm) * factor, np.nan_to_num(b) * factor,
                  ((~np.isnan(fm)) & (factor > 0)).astype(np.float64),
                  ((~np.isnan(b)) & (factor > 0)).astype(np.float64)])
    out = np.zeros((5, n))
    if not _fast.row_sums(r32, a32, c64, np.ascontiguousarray(w), np.array([1, 1, 1, 0, 0], dtype=np.uint8), out):
        return None
    return out[0], out[1], out[2], out[3] > 0, out[4] > 0, seen.astype(bool)


def _exact_step_sums(step_sums, counts, n_attr: int) -> tuple | None:
    """(occurrences per description as float64, whether it has an event in a step) from the
    anatomy's int64 ``step_sums`` (count, events), as ``attr_sums`` adds them (``counts``:
    per event, None for one each); None when they could differ or are not there."""
    if step_sums is None or len(step_sums[0]) != n_attr:
        return None
    c_sum, r_sum = step_sums
    per = r_sum if counts is None else c_sum
    if n_attr and (int(per.max()) >= 1 << 53 or (counts is not None and len(counts) and int(counts.min()) < 0)):
        return None
    return per.astype(np.float64), (r_sum > 0).astype(np.uint8)


def _cost_factor(table, counts: np.ndarray, n_attr: int) -> np.ndarray:
    """Per op description, the multiplier of its FLOPs and bytes per occurrence that counts them
    as :func:`traceview.analysis.steps.family_roofline.family_roofline` does: 0 for collectives and the
    ``-start``/``-done`` halves of async ops (as :func:`traceview.analysis.ops.roofline.roofline`),
    executions over occurrences for an op launching several kernels, else 1. ``counts``: per
    description, its occurrences inside steps (float64)."""
    from traceview.analysis.steps.family_roofline import _executions
    from traceview.analysis.ops.roofline import _ASYNC, _COLLECTIVE

    ids = np.flatnonzero(counts)
    per = pl.DataFrame({"attr": pl.Series(ids, dtype=pl.UInt32), "_self": np.zeros(len(ids)), "_count": counts[ids]})
    per = per.join(table.attrs.select("attr", "op_name", "op_kind"), on="attr", how="left")
    no_cost = (pl.col("op_kind").fill_null("").str.contains(_ASYNC) | pl.col("op_name").fill_null("").str.contains(_ASYNC)
               | pl.col("op_kind").fill_null("").str.contains(_COLLECTIVE)
               | pl.col("op_name").fill_null("").str.contains(_COLLECTIVE))
    per = _executions(per.with_columns(no_cost.alias("_no")), table.attrs)
    per = per.with_columns(pl.when(pl.col("_no")).then(0.0).otherwise(pl.col("_exec") / pl.col("_count"))
                           .alias("_f"))
    factor = np.zeros(n_attr)
    factor[per["attr"].to_numpy().astype(np.int64)] = per["_f"].to_numpy()
    return factor


SUMMARY_SCHEMA = {"phase": pl.Utf8, "steps": pl.Int64, "window_steps": pl.Int64, "median_ps": pl.Float64,
                  "p10_ps": pl.Float64, "p90_ps": pl.Float64, "op_share": pl.Float64, "mfu": pl.Float64,
                  "mbu": pl.Float64, "tokens_per_s": pl.Float64, "executions": pl.Int64,
                  "exec_median_ps": pl.Float64}


def _summary(lab: pl.DataFrame, executions: pl.DataFrame | None, runs: pl.DataFrame) -> pl.DataFrame:
    """Per phase: the steps with that label (steps, window_steps, their time distribution, MFU and
    MBU weighted by step time, tokens/s) and, for prefill and decode, the executions of that
    phase's programs (executions, exec_median_ps; op_share = their time over the time of every
    program execution) — a prefill chunk run between decode steps is an execution of no step."""
    lab = lab.select("phase", "in_window", "duration_ps", "mfu", "mbu", "tokens")  # the columns read here
    win = _where(lab, lab["in_window"])
    total_ps = float(runs["duration_ps"].sum() or 0)
    # every step of one phase (the usual case): its frames are the whole ones, no filter per phase
    # (an expression: a column repeating one label is read as it is, not spelt out per step)
    nulls, distinct, first = lab.select(pl.col("phase").null_count(), pl.col("phase").n_unique().alias("u"),
                                        pl.col("phase").first().alias("f")).row(0)
    only = first if lab.height and not nulls and distinct == 1 else None

    def of(frame: pl.DataFrame, p: str) -> pl.DataFrame:
        if only is not None:
            return frame if p == only else frame.clear()
        return frame.filter(pl.col("phase") == p)

    rows = []
    for p in PHASES + ("unknown",):
        all_p = of(lab, p)
        ex = (executions.filter(pl.col("phase") == p)
              if executions is not None and p in ("prefill", "decode") else None)
        if all_p.height == 0 and (ex is None or ex.height == 0):
            continue
        w = of(win, p)
        d = w["duration_ps"].cast(pl.Float64)
        sec = float(w["duration_ps"].sum() or 0) * 1e-12
        prog = ex["duration_ps"].sum() if ex is not None else None
        mf = _where(w, w["mfu"].is_not_null())
        mb = _where(w, w["mbu"].is_not_null())
        rows.append({
            "phase": p, "steps": all_p.height, "window_steps": w.height,
            "median_ps": d.median() if w.height else None, "p10_ps": d.quantile(0.1, "linear") if w.height else None,
            "p90_ps": d.quantile(0.9, "linear") if w.height else None,
            "op_share": (float(prog) / total_ps) if prog and total_ps else None,
            "mfu": float((mf["mfu"] * mf["duration_ps"]).sum() / mf["duration_ps"].sum()) if mf.height else None,
            "mbu": float((mb["mbu"] * mb["duration_ps"]).sum() / mb["duration_ps"].sum()) if mb.height else None,
            "tokens_per_s": (float(w["tokens"].sum()) / sec) if sec > 0 and w["tokens"].null_count() == 0
            and w.height else None,
            "executions": ex.height if ex is not None else None,
            "exec_median_ps": float(ex["duration_ps"].median()) if ex is not None and ex.height else None,
        })
    return pl.DataFrame(rows, schema=SUMMARY_SCHEMA)


def _where(frame: pl.DataFrame, keep: pl.Series) -> pl.DataFrame:
    """``frame.filter(keep)``, the frame itself when ``keep`` holds every row."""
    return frame if not keep.null_count() and bool(keep.all()) else frame.filter(keep)


def _families(anat, lab: pl.DataFrame) -> pl.DataFrame:
    """Per (phase, family): time per window step of that phase (ps) and its share of those steps'
    time."""
    win = _where(lab, lab["in_window"])
    schema = {"phase": pl.Utf8, "family": pl.Utf8, "self_ps": pl.Float64, "share": pl.Float64}
    if win.height == 0:
        return pl.DataFrame(schema=schema)
    by = anat.family_time_by_step(win["_row"].to_numpy())
    if by.height == 0:
        return pl.DataFrame(schema=schema)
    ph = win.select(pl.col("_row").cast(pl.Int64).alias("step_row"), "phase", "duration_ps")
    per = ph.group_by("phase").agg(pl.len().alias("n"), pl.col("duration_ps").sum().alias("t"))
    return (by.join(ph.select("step_row", "phase"), on="step_row").group_by("phase", "family")
            .agg(pl.col("self_ps").sum()).join(per, on="phase")
            .select("phase", "family", (pl.col("self_ps") / pl.col("n")).alias("self_ps"),
                    (pl.col("self_ps") / pl.col("t")).alias("share"))
            .sort(["phase", "self_ps"], descending=[False, True]).cast(schema))


def in_windows(table, win: pl.DataFrame) -> np.ndarray:
    """Per event of the OpTable ``table``: whether it starts inside one of the windows ``win``
    (host, device, lo, hi: [lo, hi) ps, sorted by lo, not overlapping per device), as
    :func:`phase_profile` keeps a phase's events."""
    ev = table.events.select("attr", "start_ps").with_row_index("_i").join(
        table.attrs.select("attr", "host", "device"), on="attr", how="left")
    hit = (ev.filter(pl.col("start_ps").is_not_null()).sort("start_ps")
           .join_asof(win, left_on="start_ps", right_on="lo", by=["host", "device"], strategy="backward", check_sortedness=False)
           .filter(pl.col("hi").is_not_null() & (pl.col("start_ps") < pl.col("hi"))))
    keep = np.zeros(table.height, dtype=bool)
    keep[hit["_i"].to_numpy()] = True
    return keep


def phase_profile(prof, phase: str, ph: Phases):
    """A new profile of ``prof``'s class keeping the op events and program executions of one
    phase: for ``prefill`` / ``decode`` those inside the executions of programs of that phase,
    for ``mixed`` those inside the iterations (previous step's end to the step's end) of the
    steps labelled mixed. Raises :class:`~traceview.errors.UsageError` on an unknown phase or one
    no step or execution has (naming the phases found)."""
    from traceview.errors import UsageError

    if phase not in PHASES:
        raise UsageError(f"--phase {phase!r}: expected one of {', '.join(PHASES)}")
    ex = ph.executions
    found = sorted({p for p in (ex["phase"].unique().to_list() if ex is not None else []) if p}
                   | set(ph.steps["phase"].unique().to_list() if ph.steps.height else []) - {"unknown"})
    if phase == "mixed":
        st = ph.steps.filter(pl.col("phase") == "mixed")
        prev_end = (ph.steps.sort("host", "device", "start_ps").with_columns(
            (pl.col("start_ps") + pl.col("duration_ps")).shift(1).over("host", "device").alias("a")))
        win = prev_end.filter(pl.col("phase") == "mixed").select(
            "host", "device", pl.col("a").fill_null(pl.col("start_ps")).alias("lo"),
            (pl.col("start_ps") + pl.col("duration_ps")).alias("hi"))
        n = st.height
    else:
        sel = ex.filter(pl.col("phase") == phase) if ex is not None else None
        n = sel.height if sel is not None else 0
        win = sel.select("host", "device", pl.col("start_ps").alias("lo"),
                         (pl.col("start_ps") + pl.col("duration_ps")).alias("hi")) if n else None
    if not n:
        raise UsageError(f"--phase {phase}: no {'step' if phase == 'mixed' else 'program execution'} of that phase "
                         f"in this profile (phases found: {', '.join(found) or 'none'})")
    table = prof.table
    rt = prof.runs
    win = win.sort("lo")
    events = table.events.filter(pl.Series(in_windows(table, win)))
    # the program executions inside the windows, kept on the run table's codes
    rk = rt.runs.with_row_index("_i").join(rt.keys.select("key", "host", "device"), on="key", how="left")
    rhit = (rk.filter(pl.col("start_ps").is_not_null()).sort("start_ps")
            .join_asof(win.rename({"lo": "_lo", "hi": "_hi"}), left_on="start_ps", right_on="_lo",
                       by=["host", "device"], strategy="backward", check_sortedness=False)
            .filter(pl.col("_hi").is_not_null() & (pl.col("start_ps") < pl.col("_hi"))))
    rkeep = np.zeros(rt.height, dtype=bool)
    rkeep[rhit["_i"].to_numpy()] = True
    from dataclasses import replace

    # the steps of a kept phase are its own executions: the step markers (a decode engine marks
    # its decode steps) would time the other phases' steps
    out = replace(prof, table=type(table)(events, table.attrs), ops=None,
                  runs=rt.with_runs(rt.runs.filter(pl.Series(rkeep))),
                  step_markers=prof.step_markers.head(0) if phase != "mixed" else _markers_in(prof.step_markers, win))
    out.phase = phase  # read by Report.phase: idle between the phase's steps is the other phases' time
    out.phase_windows = win  # what diff keeps of the traced (unfolded) events too
    out.warnings = list(prof.warnings) + [f"--phase {phase}: {events.height:,} of {table.height:,} op events, in "
                                          f"{n:,} {'step' if phase == 'mixed' else 'program execution'}(s) of that phase"]
    return out
