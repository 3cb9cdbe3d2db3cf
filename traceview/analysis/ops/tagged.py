"""Op descriptions tagged with what diff and verify match on: the named kernel an op belongs
to, its family, its source and its HLO fingerprint.

A *named kernel* is one whose name carries its configuration (:mod:`traceview.model.kernelname`).
It is looked for in the op's GPU kernel name, op name, ``kernel_name`` attribute of the HLO
text and framework op (the JAX name stack: a Pallas kernel's ops carry ``.../RPAd-.../...``).
Per (module, program, kernel), the kernel's *root ops* are the tagged ops at the shallowest
name-stack depth (the TPU ``tpu_custom_call``; on CPU in interpret mode the kernel's outer
``while``), and its *root shapes* the sorted, ``" | "``-joined shapes of the roots.

An op event without a name stack (XLA:CPU emits such ops for a Pallas kernel's reductions and
loop state) belongs to kernel K when the nearest earlier and nearest later op event *with* a
name stack on the same device (events of all lines in start order, ties in table order:
XLA:CPU runs a loop body on any thread of its pool, and its ``while`` event does not enclose
the body) both belong to K in the same program. Such an event is *absorbed*: it is not a root.

The result, :class:`TaggedOps`, has one row per (op description, absorbing kernel) with events:
the description's columns, the tags, and its events' sums. Everything diff and verify compute
is a sum, a set or a most-frequent value over events, so these few hundred rows stand for the
millions of events; only the absorption looks at events one by one, and only when a profile
has both named kernels and ops without a name stack. Times in ps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from traceview.analysis import eventstats
from traceview.analysis.ops import families, sources
from traceview.model.fingerprint import population_fingerprint
from traceview.model.kernelname import find_kernel_name, kernel_in_hlo, kernel_in_scope
from traceview.model.optable import as_table, first_positions

#: kdepth of an absorbed event (deeper than any name stack)
ABSORBED_DEPTH = 1 << 30


@dataclass
class TaggedOps:
    """Tagged op descriptions of one profile (module doc).

    ``rows``: one row per (description, absorbing kernel) that has events, in the order of
    their first event: the op table's description columns (``module`` with "" for unknown),
    ``kname`` (Utf8, the named kernel, null outside every one), ``kdepth`` (Int64, name-stack
    depth below the kernel's own segment; 0 when the op itself carries the name), ``kroot``
    (Boolean, a root op of its kernel in its program; null outside kernels), ``kshape``
    (Utf8, the kernel's root shapes in that program), ``family``
    (:func:`traceview.analysis.ops.families.classify`; ops of a named kernel are always
    ``"attention/custom kernels"``), the source attribution of
    :func:`traceview.analysis.ops.sources.attribute` (src_file, src_line, src_origin, user_*),
    ``fingerprint`` (:func:`traceview.model.fingerprint.population_fingerprint`), and the
    sums over its events: ``count`` (occurrences), ``duration_ps``, ``self_ps``, ``rows``
    (events), ``first_row`` (index of its first event). ``events``: op events in all;
    ``self_ps``: their self time.
    """

    rows: pl.DataFrame
    events: int
    self_ps: int

    @property
    def height(self) -> int:
        return self.rows.height


def _map(s: pl.Series, fn, dtype) -> pl.Series:
    vals = s.fill_null("").unique().to_list()
    return s.fill_null("").replace_strict({v: fn(v) for v in vals}, return_dtype=dtype)


def _kernels(col: pl.DataFrame) -> pl.DataFrame:
    """``col`` with kname and kdepth (module doc), module filled with "" and ``_prog``
    (program id, 0 for unknown)."""
    k_kernel = _map(col["kernel"], find_kernel_name, pl.Utf8)
    k_name = _map(col["op_name"], find_kernel_name, pl.Utf8)
    k_hlo = _map(col["hlo_text"], kernel_in_hlo, pl.Utf8)
    k_fw = _map(col["framework_op"], lambda s: kernel_in_scope(s)[0], pl.Utf8)
    d_fw = _map(col["framework_op"], lambda s: kernel_in_scope(s)[1], pl.Int64)
    return col.with_columns(
        pl.coalesce(k_kernel, k_name, k_hlo, k_fw).alias("kname"),
        pl.when(k_kernel.is_not_null() | k_name.is_not_null() | k_hlo.is_not_null()).then(pl.lit(0, dtype=pl.Int64))
        .otherwise(d_fw).alias("kdepth"),
        pl.col("module").fill_null(""), pl.col("program_id").fill_null(0).alias("_prog"),
    )


def absorbed_kernels(table, kcode: np.ndarray, meta: np.ndarray, prog: np.ndarray) -> np.ndarray | None:
    """Per event of ``table``, the code of the kernel that absorbs it (module doc), -1 for
    none; None when no event is absorbed. Per description (attr id): ``kcode`` (int64 code of
    its kernel, -1 for none), ``meta`` (bool: it has a framework op), ``prog`` (uint64 program
    id, 0 for unknown)."""
    ev = table.events
    if ev.height == 0:
        return None
    attr = ev["attr"].to_numpy().astype(np.int64)
    start = ev["start_ps"]
    placed = np.flatnonzero(start.is_not_null().to_numpy())
    if len(placed) == 0:
        return None
    st = start.fill_null(0).to_numpy()
    devs = table.attrs.select(pl.struct("host", "device").rank("dense").cast(pl.Int64).alias("d"))["d"].to_numpy()
    dev = devs[attr[placed]]
    order = placed[np.lexsort((placed, st[placed], dev))]  # by device, start, table order
    a = attr[order]
    d = devs[a]
    n = len(order)
    pos = np.arange(n)
    seg = np.r_[0, np.flatnonzero(d[1:] != d[:-1]) + 1]
    seg_start = np.repeat(seg, np.diff(np.r_[seg, n]))
    is_meta = meta[a]
    prev = np.maximum.accumulate(np.where(is_meta, pos, -1))
    nxt = np.minimum.accumulate(np.where(is_meta, pos, n)[::-1])[::-1]
    seg_end = np.repeat(np.r_[seg[1:], n], np.diff(np.r_[seg, n]))
    cand = ~is_meta & (kcode[a] < 0) & (prev >= seg_start) & (nxt < seg_end)
    if not cand.any():
        return None
    i = np.flatnonzero(cand)
    kp, kn = kcode[a[prev[i]]], kcode[a[nxt[i]]]
    mine = prog[a[i]]
    hit = (kp >= 0) & (kp == kn) & (prog[a[prev[i]]] == mine) & (prog[a[nxt[i]]] == mine)
    if not hit.any():
        return None
    out = np.full(ev.height, -1, dtype=np.int64)
    out[order[i[hit]]] = kp[hit]
    return out


def tag(ops, rules=None) -> TaggedOps:
    """The tagged op descriptions of an op table (:class:`~traceview.model.optable.OpTable`
    or a wide op-event frame); ``rules``: user families
    (:func:`traceview.analysis.ops.families.classify`). Raises UsageError on bad rules."""
    rs = families.rules_of(rules)
    table = as_table(ops)
    if table.height == 0:
        return TaggedOps(_empty_rows(table), 0, 0)
    col = _kernels(table.collapse())
    col = col.join(_first_rows(table), on="attr", how="left")
    have_kernels = col["kname"].null_count() < col.height
    absorbed = None
    if have_kernels:
        names = sorted(set(col["kname"].drop_nulls().to_list()))
        code_of = {k: i for i, k in enumerate(names)}
        na = table.attrs.height
        kcode = np.full(na, -1, dtype=np.int64)
        meta = np.zeros(na, dtype=bool)
        prog = np.zeros(na, dtype=np.uint64)
        ids = col["attr"].to_numpy().astype(np.int64)
        kcode[ids] = np.array([code_of.get(k, -1) if k is not None else -1 for k in col["kname"].to_list()],
                              dtype=np.int64)
        meta[ids] = (col["framework_op"].fill_null("") != "").to_numpy()
        prog[ids] = col["_prog"].to_numpy().astype(np.uint64)
        absorbed = absorbed_kernels(table, kcode, meta, prog)
    if absorbed is not None:
        # split each description by the kernel that absorbed its events (-1: none)
        ev = table.events
        parts = (pl.DataFrame({"attr": ev["attr"], "_abs": absorbed, "count": ev["count"], "duration_ps": ev["duration_ps"],
                               "self_ps": ev["self_ps"]}).with_row_index("_i")
                 .group_by("attr", "_abs").agg(pl.col("count").sum(), pl.col("duration_ps").sum(),
                                               pl.col("self_ps").sum(), pl.len().cast(pl.UInt32).alias("rows"),
                                               pl.col("_i").min().cast(pl.Int64).alias("first_row")))
        col = (col.drop("count", "duration_ps", "self_ps", "rows", "first_row")
               .join(parts, on="attr", how="inner")
               .with_columns(pl.col("_abs").replace_strict(dict(enumerate(names)), default=None, return_dtype=pl.Utf8)
                             .alias("_kn")))
        hit = pl.col("_kn").is_not_null()
        col = col.with_columns(pl.coalesce("kname", "_kn").alias("kname"),
                               pl.when(hit).then(pl.lit(ABSORBED_DEPTH, dtype=pl.Int64)).otherwise(pl.col("kdepth"))
                               .alias("kdepth"), hit.alias("_absorbed")).drop("_abs", "_kn")
    else:
        col = col.with_columns(pl.lit(False).alias("_absorbed"))
    col = col.sort("first_row")
    grp = ["module", "_prog", "kname"]
    if have_kernels:
        plain = ~pl.col("_absorbed")
        # roots: the shallowest tagged ops of each (module, program, kernel), absorbed events aside
        col = col.with_columns(
            pl.when(pl.col("_absorbed")).then(pl.lit(False))
            .otherwise(pl.col("kdepth") == pl.col("kdepth").filter(plain).min().over(grp)).alias("kroot"))
        shapes = (col.filter(pl.col("kroot").fill_null(False)).group_by(grp)
                  .agg(pl.col("shape").fill_null("").unique().sort().str.join(" | ").alias("kshape")))
        col = col.join(shapes, on=grp, how="left", maintain_order="left")
    else:
        col = col.with_columns(pl.lit(None, dtype=pl.Boolean).alias("kroot"), pl.lit(None, dtype=pl.Utf8).alias("kshape"))
    col = families.classify(col, rs).with_columns(
        pl.when(pl.col("kname").is_not_null()).then(pl.lit(families.ATTENTION)).otherwise(pl.col("family"))
        .alias("family"))
    col = sources.attribute(col)
    col = col.with_columns(_map(col["hlo_text"], population_fingerprint, pl.Utf8).alias("fingerprint"))
    col = col.drop("_prog", "_absorbed", "min_ps", "max_ps", "first_ps")
    return TaggedOps(col, int(eventstats.ranges(table)["count_sum"] or 0) if table.events.height else 0,
                     eventstats.total_self_ps(table))


def _first_rows(table) -> pl.DataFrame:
    """attr, first_row (Int64): each description's first event row, for the descriptions with
    events (:func:`~traceview.model.optable.first_positions`; no per-event frame)."""
    a = table.events["attr"].to_numpy()
    first = first_positions(a, table.attrs.height)
    ids = np.flatnonzero(first < len(a))
    return pl.DataFrame({"attr": pl.Series(ids, dtype=table.events.schema["attr"]), "first_row": first[ids]})


def _empty_rows(table) -> pl.DataFrame:
    from traceview.model.optable import ATTR_SCHEMA

    schema = {**ATTR_SCHEMA, "kname": pl.Utf8, "kdepth": pl.Int64, "kroot": pl.Boolean, "kshape": pl.Utf8,
              "family": pl.Utf8, "src_file": pl.Utf8, "src_line": pl.Int32, "src_origin": pl.Utf8,
              "user_file": pl.Utf8, "user_line": pl.Int32, "user_origin": pl.Utf8, "fingerprint": pl.Utf8,
              "count": pl.Int64, "duration_ps": pl.Int64, "self_ps": pl.Int64, "rows": pl.UInt32, "first_row": pl.Int64}
    return pl.DataFrame(schema=schema)
