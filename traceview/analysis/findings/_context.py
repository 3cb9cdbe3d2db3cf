"""Tables the finding rules share, derived once per :class:`~traceview.analysis.findings.Inputs`
from its report: in-step populations, the vocabulary size, array shapes of a signature."""

from __future__ import annotations

import re
from collections import Counter

import polars as pl

_ARRAY = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[([0-9,]*)\]")


def arrays(sig: str | None) -> tuple[list, list]:
    """(result arrays, operand arrays) of a shape signature ``result <- operands``, each a
    list of (dtype, dims tuple)."""
    if not sig:
        return [], []
    res, _, ops = sig.partition(" <- ")

    def parse(s):
        return [(m.group(1), tuple(int(d) for d in m.group(2).split(",") if d)) for m in _ARRAY.finditer(s)]

    return parse(res), parse(ops)


def nbytes(dtype: str, dims: tuple) -> int:
    """Bytes of an array (element widths of :data:`traceview.model.shapes.ELEMENT_BITS`)."""
    from traceview.model.shapes import ELEMENT_BITS

    n = 1
    for d in dims:
        n *= d
    return n * ELEMENT_BITS.get(dtype, 32) // 8


#: the columns of the steps frame that :func:`step_info` keeps (those its readers use)
_STEP_COLUMNS = ("host", "device", "step", "module", "start_ps", "duration_ps", "gap_after_ps", "idle_ps",
                 "in_window")


def _n_distinct(col: pl.Series) -> int:
    """``col.n_unique()``: by a bincount when the values are small non-negative integers (step
    numbers), else polars'."""
    import numpy as np

    if col.dtype.is_integer() and col.len() and not col.null_count():
        v = col.to_numpy()
        lo, hi = int(v.min()), int(v.max())
        if lo >= 0 and hi < 4 * len(v) + 1024:
            return int(np.count_nonzero(np.bincount(v.astype(np.int64, copy=False))))
    return int(col.n_unique())


def step_info(ctx) -> dict:
    """n_steps, devices, step_ps (mean step wall time), gap_ps (mean gap between steps, 0
    when unknown), steps (the window's rows of the steps frame, the columns of
    :data:`_STEP_COLUMNS` it has: ``in_window`` where the steps branch supplies it)."""
    got = ctx.cache.get("step_info")
    if got is not None:
        return got
    anat = getattr(ctx.report, "steps", None)
    st = getattr(anat, "steps", None)
    info = {"n_steps": 0, "devices": 0, "step_ps": 0.0, "gap_ps": 0.0, "steps": None}
    if st is not None and st.height:
        # only the columns the rules read: the window filter copies none of the others
        st = st.select([c for c in _STEP_COLUMNS if c in st.columns])
        if "in_window" in st.columns and not bool(st["in_window"].fill_null(True).all()):
            st = st.filter(pl.col("in_window").fill_null(True))
        cov = anat.coverage
        info = {"n_steps": _n_distinct(st["step"]), "devices": int(cov.devices or 1),
                "step_ps": float(st["duration_ps"].mean() or 0), "gap_ps": float(st["gap_after_ps"].mean() or 0),
                "steps": st}
    ctx.cache["step_info"] = info
    return info


def _words(n: int):
    """``n`` pseudo-random non-zero 64-bit words (uint64): splitmix64 of 1..n, no generator to
    import."""
    import numpy as np

    with np.errstate(over="ignore"):
        z = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    z[z == 0] = 1
    return z


def step_loop(ctx, min_repeats: float = 3) -> dict:
    """Whether the analysed steps are a repeated step (a step loop), not a sweep of different
    programs: each window step's *op mix* is the set of (op_name, shape) populations of the
    ops it holds; the commonest mix must recur in at least ``min_repeats`` executions per
    device and hold at least half of the window's steps. Returns {repeated (bool), executions
    (of the commonest mix, per device), steps (window steps, all devices), mix_steps (steps
    with the commonest mix), mixes (distinct op mixes)}; repeated is False without steps."""
    key = ("step_loop", min_repeats)
    got = ctx.cache.get(key)
    if got is not None:
        return got
    import numpy as np

    from traceview.analysis.steps.stepstats import row_hashes

    out = {"repeated": False, "executions": 0, "steps": 0, "mix_steps": 0, "mixes": 0}
    anat = getattr(ctx.report, "steps", None)
    st = getattr(anat, "steps", None)
    rows = getattr(anat, "step_rows", None)
    table = getattr(anat, "table", None)
    if st is not None and st.height and rows is not None and table is not None:
        keep = st["in_window"].fill_null(True).to_numpy() if "in_window" in st.columns else np.ones(st.height, bool)
        # population of each attr (dense rank of op_name, shape); a step's mix is the set of its
        # populations, hashed as the sum (mod 2**64) of one pseudo-random 64-bit word per population
        attrs = table.attrs.select("attr", pl.struct("op_name", "shape").rank("dense").alias("pop"))
        pop_of = np.zeros(int(attrs["attr"].max()) + 1 if attrs.height else 1, dtype=np.int64)
        pop_of[attrs["attr"].to_numpy().astype(np.int64)] = attrs["pop"].to_numpy().astype(np.int64)
        words = _words(int(pop_of.max()) + 1)
        sig = row_hashes(rows, table.events["attr"].to_numpy(), pop_of, words, st.height, keep=keep)
        win = np.flatnonzero(keep)
        if len(win):
            # the distinct mixes by hashing (one pass), the commonest the smallest such signature
            sw = sig[win]
            vc = pl.Series("s", sw).value_counts(sort=False)
            counts, values = vc["count"].to_numpy(), vc["s"].to_numpy()
            n = int(counts.max())
            top = values[counts == n].min()
            mixes = values
            if "device" in st.columns:
                mine = np.zeros(st.height, dtype=bool)
                mine[win[sw == top]] = True
                # one device in the steps: no per-row pass over the names (an expression reads a
                # column repeating one value as it is)
                one = st.select(pl.col("device").n_unique()).item() == 1
                n_dev = 1 if one else st["device"].filter(pl.Series(mine)).n_unique()
            else:
                n_dev = 1
            execs = n / max(n_dev, 1)
            out = {"repeated": bool(execs >= min_repeats and 2 * n >= len(win)), "executions": execs,
                   "steps": int(len(win)), "mix_steps": n, "mixes": int(len(mixes))}
    ctx.cache[key] = out
    return out


def step_pops(ctx) -> pl.DataFrame:
    """Populations of the ops inside the analysed steps: op_name, shape, op_kind, family (the
    built-in one, whatever the user's rules: :meth:`StepAnatomy.builtin_family`), module,
    framework_op (the first), self_ps (summed over steps and devices), count; empty when the
    report has no steps."""
    got = ctx.cache.get("step_pops")
    if got is not None:
        return got
    anat = getattr(ctx.report, "steps", None)
    cols = {"op_name": pl.Utf8, "shape": pl.Utf8, "op_kind": pl.Utf8, "family": pl.Utf8, "module": pl.Utf8,
            "framework_op": pl.Utf8, "source_file": pl.Utf8, "self_ps": pl.Int64, "count": pl.Int64}
    out = pl.DataFrame(schema=cols)
    rows = getattr(anat, "step_rows", None)
    if anat is not None and getattr(anat, "table", None) is not None and rows is not None and anat.steps.height:
        import numpy as np

        st = anat.steps
        ev = anat.table.events
        a = (anat.table.attrs.select("attr", "op_name", "shape", "op_kind", "module", "framework_op", "source_file")
             .join(_builtin(anat), on="attr", how="left"))
        wa = getattr(anat, "window_sums", None)
        # the anatomy's exact sums per description are what float64 bincounts give whenever no
        # partial sum can reach 2**53: no negative value, and every description's total below it
        exact = False
        if wa is not None:
            from traceview.analysis.eventstats import ranges

            r = ranges(anat.table)
            lows = [v for v in (r["self_min"], r["count_min"]) if v is not None]
            low = min(lows) if lows else None
            col = anat.table.collapse()
            high = col.select(pl.max_horizontal(pl.col("self_ps").max(), pl.col("count").max())).item()
            exact = (low is None or low >= 0) and (high is None or high < 1 << 53)
        if exact:
            ids, t_sum, c_sum = wa
            have = c_sum > 0
            sums = pl.DataFrame({"attr": pl.Series(ids[have], dtype=a.schema["attr"]), "self_ps": t_sum[have],
                                 "count": c_sum[have]}, schema_overrides={"self_ps": pl.Int64, "count": pl.Int64})
        else:
            inside = rows >= 0
            if "in_window" in st.columns:
                keep = st["in_window"].fill_null(True).to_numpy()
                inside &= np.concatenate([keep, [False]])[np.where(rows >= 0, rows, len(keep))]
            attr = ev["attr"].to_numpy()[inside].astype(np.int64)
            n = anat.table.attrs.height
            self_ps = np.bincount(attr, weights=ev["self_ps"].to_numpy()[inside], minlength=n)
            count = np.bincount(attr, weights=ev["count"].to_numpy()[inside], minlength=n)
            have = np.flatnonzero(count > 0)
            sums = pl.DataFrame({"attr": pl.Series(have, dtype=a.schema["attr"]),
                                 "self_ps": self_ps[have].astype(np.int64), "count": count[have].astype(np.int64)})
        if sums.height:
            key = ["op_name", "shape", "op_kind", "family", "module"]
            # the same rows in the same order every run: descriptions in attr order, ties in
            # time broken by the key
            out = (a.join(sums, on="attr", maintain_order="left").group_by(key, maintain_order=True)
                   .agg(pl.col("framework_op").first(), pl.col("source_file").first(),
                        pl.col("self_ps").sum(), pl.col("count").sum())
                   .select(list(cols)).sort(["self_ps", *key], descending=[True] + [False] * len(key),
                                            nulls_last=True))
    ctx.cache["step_pops"] = out
    return out


def _builtin(anat) -> pl.DataFrame:
    """attr -> built-in family of ``anat`` (:meth:`StepAnatomy.builtin_family`; ``attr_family``
    for an anatomy without that method)."""
    get = getattr(anat, "builtin_family", None)
    return get() if get is not None else anat.attr_family


def pop_families(ctx) -> pl.DataFrame:
    """(op_name, shape) -> family (the user's rules applied, as the report shows it) and
    builtin (the built-in family, :meth:`StepAnatomy.builtin_family`) of every population of
    the report's table."""
    got = ctx.cache.get("pop_families")
    if got is not None:
        return got
    anat = getattr(ctx.report, "steps", None)
    out = pl.DataFrame(schema={"op_name": pl.Utf8, "shape": pl.Utf8, "family": pl.Utf8, "builtin": pl.Utf8})
    if anat is not None and getattr(anat, "attr_family", None) is not None and anat.table is not None:
        a = anat.table.attrs.select("attr", "op_name", "shape").join(anat.attr_family, on="attr", how="left")
        b = _builtin(anat)
        a = (a.with_columns(pl.col("family").alias("builtin")) if b is anat.attr_family else
             a.join(b.rename({"family": "builtin"}), on="attr", how="left"))
        out = a.group_by(["op_name", "shape"]).agg(pl.col("family").first(), pl.col("builtin").first())
    ctx.cache["pop_families"] = out
    return out


def vocab(ctx) -> int | None:
    """The vocabulary size: the most common last dimension (>= 256) of the 2-D arrays the
    sampler family's ops take or return; None without sampler ops."""
    if "vocab" in ctx.cache:
        return ctx.cache["vocab"]
    fam = pop_families(ctx).filter(pl.col("builtin") == "sampling")
    c: Counter = Counter()
    for sig in fam["shape"].to_list():
        res, ops = arrays(sig)
        for _dt, dims in res + ops:
            if len(dims) == 2 and dims[1] >= 256:
                c[dims[1]] += 1
    v = c.most_common(1)[0][0] if c else None
    ctx.cache["vocab"] = v
    return v


def fmt_ms(ps: float) -> str:
    from traceview.model.units import fmt_time_ps

    return fmt_time_ps(ps)


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def gap_busy(ctx) -> float:
    """Mean device busy time (ps) in the gap after each window step: the union of the op events
    that lie in no step (another program's execution between steps, e.g. a prefill chunk
    between decode steps), clipped to [the step's end, the next step's start) on its device.
    0 without steps or such events."""
    import numpy as np

    got = ctx.cache.get("gap_busy")
    if got is not None:
        return got
    anat = getattr(ctx.report, "steps", None)
    st, rows, table = getattr(anat, "steps", None), getattr(anat, "step_rows", None), getattr(anat, "table", None)
    out = 0.0
    if st is not None and st.height > 1 and rows is not None and table is not None and (rows < 0).any():
        ev = table.events
        outside = np.flatnonzero(rows < 0)
        attr = ev["attr"].to_numpy()[outside]

        def picked(c):  # the outside events' values, nulls as 0 (no copy of the whole column)
            c = ev[c]
            return (c.fill_null(0) if c.null_count() else c).to_numpy()[outside]

        st_col = ev["start_ps"]
        ok = (st_col.is_not_null().to_numpy()[outside] if st_col.null_count()
              else np.ones(len(outside), dtype=bool))
        s = picked("start_ps")
        d = picked("duration_ps")
        dev_of = table.attrs.select(pl.struct("host", "device").rank("dense").alias("d"))["d"].to_numpy()
        keyed = table.attrs.select("attr", "host", "device")
        dev_ev = np.zeros(int(keyed["attr"].max()) + 1 if keyed.height else 1, dtype=np.int64)
        dev_ev[keyed["attr"].to_numpy().astype(np.int64)] = dev_of
        dev = dev_ev[attr]
        dkey = keyed.with_columns(pl.Series("d", dev_of)).select("host", "device", "d").unique()
        # the window steps with a gap after them: every one counts in the mean; only those of a
        # device with outside events are read, with the columns read (no copy of the others)
        used = pl.col("gap_after_ps").is_not_null()
        if "in_window" in st.columns:
            used = used & pl.col("in_window").fill_null(True)
        n = int(st.select(used.sum()).item())
        # each device's code (a device with a null name matches none, as in a join)
        d_of = {(h, dv): c for h, dv, c in dkey.iter_rows() if h is not None and dv is not None}
        has = set(np.unique(dev[ok]).tolist())
        busy = 0.0
        for (h, dv), dcode in d_of.items():
            if dcode not in has:
                continue
            m = ok & (dev == dcode)
            g = (st.lazy().filter(used & (pl.col("host") == h) & (pl.col("device") == dv))
                 .select("start_ps", "duration_ps", "gap_after_ps").collect())
            if g.height == 0:
                continue
            a, b = s[m], s[m] + d[m]
            o = np.argsort(a, kind="stable")
            a, b = a[o], b[o]
            # union of the intervals: merge where a start lies past the running end
            run_end = np.maximum.accumulate(b)
            new = np.concatenate([[True], a[1:] > run_end[:-1]])
            ua, ub = a[new], np.maximum.reduceat(b, np.flatnonzero(new))
            cum = np.concatenate([[0], np.cumsum(ub - ua)])

            def covered(t):  # union length before t
                i = np.searchsorted(ua, t, side="right")
                part = np.where(i > 0, np.minimum(t, ub[np.maximum(i - 1, 0)]) - ua[np.maximum(i - 1, 0)], 0)
                return cum[np.maximum(i - 1, 0)] * (i > 0) + np.maximum(part, 0)

            lo = (g["start_ps"] + g["duration_ps"]).to_numpy()
            hi = lo + g["gap_after_ps"].to_numpy()
            busy += float(np.maximum(covered(hi) - covered(lo), 0).sum())
        out = busy / n if n else 0.0
    ctx.cache["gap_busy"] = out
    return out


def no_ops(ctx, otherwise: str) -> str:
    """Why a rule has no op, step or population to judge: the selection's reason when an op or
    device filter kept none of the trace's ops (the report's ``ops_note``), else ``otherwise``."""
    return getattr(ctx.report, "ops_note", None) or otherwise


def unevaluable(ctx, min_repeats: float = 3, *, shapes: bool = False, ops: bool = True) -> str | None:
    """Why a step rule cannot judge the report, None when it can: no steps (:func:`no_ops`), no
    op inside them (with ``ops``), no shapes (with ``shapes``: a trace.json of CPU/GPU ops
    carries none), or steps that are not one repeated step (:func:`step_loop`)."""
    if ops:
        info = step_info(ctx)
        if not info["n_steps"] or not info["step_ps"]:
            return no_ops(ctx, "no steps found")
    else:
        st = getattr(getattr(ctx.report, "steps", None), "steps", None)
        if st is None or st.height == 0:
            return no_ops(ctx, "no steps found")
    if shapes and not getattr(ctx.report, "has_shapes", True):
        return "the trace carries no op shapes: a trace.json, read the .xplane.pb"
    if ops and step_pops(ctx).height == 0:
        return no_ops(ctx, "no op inside the steps")
    loop = step_loop(ctx, min_repeats)
    if not loop["repeated"]:
        if not loop["steps"]:
            return "the steps' op mix is unknown (no op table in the steps): not one repeated step"
        if loop["mixes"] <= 1:
            return f"{loop['executions']:g} step(s) per device: the rule needs a step repeated {min_repeats:g} times"
        return (f"the steps are not one repeated step: the commonest op mix runs {loop['executions']:g} time(s) per "
                f"device, in {loop['mix_steps']} of {loop['steps']} step(s), and the rule needs {min_repeats:g} and "
                "half the steps")
    return None
