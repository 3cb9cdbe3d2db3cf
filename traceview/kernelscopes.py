"""Custom kernels by their configuration-carrying names (``RPAd-p_16-bq_1_1-bkv_256_256``).

Production Pallas kernels are named after their configuration (tpu-inference's ragged paged
attention: ``RPAd-p_<page>-bq_<bq>_<bq_c>-bkv_<bkv>_<bkv_c>``), and the name becomes a
scope in every HLO op the kernel emits (``op_name`` = ``jit(step)/RPAd-.../while/body/...``;
on TPU the kernel is one custom-call carrying it). Reading the configuration off the trace
is the study's independent check that a block-size flag took effect.

A *kernel scope* is a path component of ``framework_op`` shaped ``NAME(-key_int[_int...])+``.
Its *invocations* are the events at the top of the scope (ops whose path ends at the scope
or one component below it, e.g. the outer ``while`` of an interpreted kernel or the TPU
custom-call); its time is the self time of every op inside the scope.
"""

from __future__ import annotations

import re

import polars as pl

#: a configuration-carrying kernel name as one path component of an op_name
KERNEL_NAME = r"[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z]+(?:_\d+)+)+"
_SCOPE = rf"(?:^|/)({KERNEL_NAME})(?:/|$)"
_KV = re.compile(r"-([A-Za-z]+)((?:_\d+)+)")


def parse_config(name: str) -> dict[str, tuple[int, ...]]:
    """``"RPAd-p_16-bq_1_1-bkv_256_256"`` -> ``{"p": (16,), "bq": (1, 1), "bkv": (256, 256)}``.

    Generic over keys; returns {} when ``name`` carries no ``-key_int`` groups."""
    return {k: tuple(int(x) for x in v.strip("_").split("_")) for k, v in _KV.findall(name or "")}


def kernels(ops: pl.DataFrame) -> pl.DataFrame:
    """One row per (kernel name, module): the custom kernels of a profile.

    Columns: kernel, module, config (``key=v,v`` text), invocations (events at the top of the
    scope), ops (events inside the scope), self_ps (ps), share (of all ops' self time),
    shape (the most frequent shape signature among the top events: for an interpreted
    kernel the loop state, which carries the batch; for a TPU custom-call its operands),
    source (most frequent ``file:line`` inside the scope). Sorted by self time. Empty frame
    (same columns) when no op carries a kernel scope.
    """
    schema = {"kernel": pl.Utf8, "module": pl.Utf8, "config": pl.Utf8, "invocations": pl.Int64, "ops": pl.Int64,
              "self_ps": pl.Int64, "share": pl.Float64, "shape": pl.Utf8, "source": pl.Utf8}
    if ops.height == 0:
        return pl.DataFrame(schema=schema)
    total = int(ops["self_ps"].sum() or 0)
    k = ops.with_columns(pl.col("framework_op").str.extract(_SCOPE, 1).alias("kernel"))
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
    out = k.group_by(["kernel", "module"]).agg(
        pl.col("count").filter(pl.col("_depth") <= 1).sum().alias("invocations"),
        pl.col("count").sum().alias("ops"),
        pl.col("self_ps").sum().alias("self_ps"),
        pl.col("shape").filter(pl.col("_depth") == pl.col("_depth").min()).mode().first().alias("shape"),
        pl.col("_src").drop_nulls().mode().first().alias("source"),
    )
    out = out.with_columns(
        pl.col("kernel").map_elements(lambda n: ", ".join(f"{a}={'_'.join(map(str, b))}" for a, b in parse_config(n).items()),
                                      return_dtype=pl.Utf8).alias("config"),
        (pl.col("self_ps") / total if total else pl.lit(0.0)).alias("share"),
        pl.col("shape").fill_null(""), pl.col("source").fill_null(""),
    )
    return out.select(list(schema)).sort("self_ps", descending=True)
