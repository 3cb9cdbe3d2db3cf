"""Custom kernels of a profile, by their configuration-carrying names (``RPAd-p_16-bq_1_1-bkv_256_256``).

A *kernel scope* is a name of the kernel-name grammar (:mod:`traceview.model.kernelname`)
in an op's ``framework_op`` (the JAX name stack: a Pallas kernel's ops carry
``jit(step)/RPAd-.../while/body/...``; on TPU the kernel is one custom-call carrying it). Its
*invocations* are the events at the top of the scope (the shallowest ops under it: the TPU
custom-call, an interpreted kernel's folded invocation, or, expanded, its outer ``while``
without the prologue pads and broadcasts beside it); its time is the self time of every op
inside the scope.
"""

from __future__ import annotations

import polars as pl

from traceview.analysis import eventstats
from traceview.model.kernelname import POLARS_KERNEL_NAME, config_text
from traceview.model.optable import as_table, weighted_mode


def kernels(ops) -> pl.DataFrame:
    """One row per (kernel name, module): the custom kernels of a profile.

    Columns: kernel, module, config (``key=v,v`` text), invocations (events at the top of the
    scope: the folded invocation, the TPU custom-call, or the interpreted grid loop without the
    prologue ops beside it), ops (events inside the scope), self_ps (ps), share (of all ops' self time),
    shape (the most frequent shape signature among the top events: for an interpreted
    kernel the loop state, which carries the batch; for a TPU custom-call its operands),
    source (most frequent ``file:line`` inside the scope). Sorted by self time. Empty frame
    (same columns) when no op carries a kernel scope.
    """
    schema = {"kernel": pl.Utf8, "module": pl.Utf8, "config": pl.Utf8, "invocations": pl.Int64, "ops": pl.Int64,
              "self_ps": pl.Int64, "share": pl.Float64, "shape": pl.Utf8, "source": pl.Utf8}
    table = as_table(ops)
    if table.height == 0:
        return pl.DataFrame(schema=schema)
    total = eventstats.total_self_ps(table)
    col = table.collapse()
    k = col.with_columns(pl.col("framework_op").str.extract(POLARS_KERNEL_NAME, 1).alias("kernel"))
    k = k.filter(pl.col("kernel").is_not_null())
    if k.height == 0:
        return pl.DataFrame(schema=schema)
    rest = pl.col("framework_op").str.split(pl.col("kernel")).list.last().str.strip_chars("/")
    k = k.with_columns(
        pl.when(rest == "").then(0).otherwise(rest.str.count_matches("/") + 1).alias("_depth"),
        pl.when(pl.col("source_file") != "")
        .then(pl.col("source_file") + ":" + pl.col("source_line").cast(pl.Utf8).fill_null("?"))
        .otherwise(None).alias("_src"),
    )
    keys = ["kernel", "module"]
    # invocations: the ops at the top of the scope, and of those the grid loops when there are
    # some (an interpreted kernel's prologue ops, pads and broadcasts, sit beside its loop)
    top = pl.col("_depth") == pl.col("_depth").min().over(keys)
    loop = pl.col("op_kind").fill_null("") == "while"
    k = k.with_columns((top & (loop | ~(top & loop).any().over(keys))).alias("_inv"))
    out = k.group_by(keys).agg(
        pl.col("count").filter(pl.col("_inv")).sum().alias("invocations"),
        pl.col("count").sum().alias("ops"),
        pl.col("self_ps").sum().alias("self_ps"),
    )
    top = k.filter(pl.col("_depth") == pl.col("_depth").min().over(keys))
    out = (out.join(weighted_mode(top, keys, "shape", skip_empty=False), on=keys, how="left", nulls_equal=True)
           .join(weighted_mode(k, keys, "_src").rename({"_src": "source"}), on=keys, how="left", nulls_equal=True))
    out = out.with_columns(
        pl.col("kernel").map_elements(config_text, return_dtype=pl.Utf8).alias("config"),
        (pl.col("self_ps") / total if total else pl.lit(0.0)).alias("share"),
        pl.col("shape").fill_null(""), pl.col("source").fill_null(""),
    )
    return out.select(list(schema)).sort(["self_ps", "kernel", "module"], descending=[True, False, False])
