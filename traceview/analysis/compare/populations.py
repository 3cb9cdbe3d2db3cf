"""Populations of one profile as a diff matches them, and its named kernels.

Population key
--------------
An op outside any named kernel belongs to the population ``(kind, program, stem, shape,
fingerprint)``:

* ``kind`` — the HLO opcode (``fusion``, ``custom-call``, ...);
* ``program`` — the bucket-free stem of its module (:func:`program_stem`:
  ``jit_decode_b32_bkv512`` -> ``jit_decode``, ``jit_prefill_t32_r1`` -> ``jit_prefill``), so a
  prefill population never matches a decode one of equal shape (token bucket = request
  bucket), while a batch or block-size change (``b8`` -> ``b16``) still matches;
  ``program_stem=False`` leaves it out;
* ``stem`` — the op name without XLA's uniquifying suffix (``copy_bitcast_fusion.6`` ->
  ``copy_bitcast_fusion``); XLA:CPU and TPU derive it from the fused opcodes, so it is stable
  across compilations. An op run in a command buffer (``command_buffer_1/custom-call.0``,
  ``command_buffer_1/fusion_76``) has the stem of its instruction (``custom-call``, ``fusion``),
  as when it runs outside the graph. ``name_stem=False`` leaves it out (for comparisons across compiler
  versions that name fusions differently);
* ``shape`` — the canonical shape signature (:mod:`traceview.model.shapes`);
* ``fingerprint`` — :func:`traceview.model.fingerprint.population_fingerprint`.

Identical computations at identical shapes (the same fusion in each of 18 layers) form one
population, with their occurrences summed: without names they cannot be told apart, and the
study's key is shape, not name.

The ops of one named kernel in one program (:mod:`traceview.analysis.ops.tagged`) are one *kernel
population*, key ``("kernel", program, kernel identity, root shapes, "")``, the identity being the name
with its numbers replaced by ``*`` (``RPAd-p_*-bq_*_*-bkv_*_*``). Its ``occurrences`` are its
root ops' occurrences (invocations); ``events`` all the traced op events it holds.

Times in ps; shares are fractions of all ops' self time.
"""

from __future__ import annotations

import json

import polars as pl

from traceview.analysis.ops.tagged import TaggedOps
from traceview.model.command_buffers import IN_GRAPH
from traceview.model.kernelname import kernel_config, kernel_id
from traceview.model.naming import program_stem
from traceview.model.optable import weighted_mode
from traceview.model.runtable import as_runs

KEY = ["kind", "program", "stem", "shape", "fingerprint"]


POPULATION_SCHEMA = {
    "kind": pl.Utf8, "program": pl.Utf8, "stem": pl.Utf8, "shape": pl.Utf8, "fingerprint": pl.Utf8,
    "is_kernel": pl.Boolean, "kernels": pl.List(pl.Utf8), "op_names": pl.List(pl.Utf8),
    "occurrences": pl.Int64, "events": pl.Int64, "total_ps": pl.Int64, "self_ps": pl.Int64,
    "mean_ps": pl.Float64, "share": pl.Float64, "executions": pl.Int64, "per_execution": pl.Float64,
    "modules": pl.List(pl.Utf8), "source": pl.Utf8, "source_files": pl.List(pl.Utf8), "family": pl.Utf8,
    "hlo_text": pl.Utf8,
}

KERNEL_SCHEMA = {"kernel": pl.Utf8, "kernel_id": pl.Utf8, "config": pl.Utf8, "invocations": pl.Int64,
                 "events": pl.Int64, "self_ps": pl.Int64, "modules": pl.List(pl.Utf8), "shapes": pl.List(pl.Utf8),
                 "source_files": pl.List(pl.Utf8)}


def _tagged(prof, rules, tagged: TaggedOps | None) -> TaggedOps:
    if tagged is not None:
        return tagged
    from traceview.analysis import derived

    return derived.tagged(prof, rules)


def keyed(rows: pl.DataFrame, *, name_stem: bool = True, program_stem_key: bool = True,
          expand_kernels: bool = False) -> pl.DataFrame:
    """Tagged rows (:class:`~traceview.analysis.ops.tagged.TaggedOps` ``rows``) with their
    population key (module doc): ``kind``, ``program`` ("" with ``program_stem_key=False``),
    ``stem``, ``shape`` (the kernel's root shapes for kernel rows) and ``fingerprint`` (""
    for kernel rows) replace the row's own. ``expand_kernels``: an op of a named kernel is
    its own population, keyed as an op outside kernels but with the stem
    ``KERNEL_ID/stem`` (``RPAd-p_*-bq_*_*-bkv_*_*/fusion``)."""
    name = pl.col("op_name").fill_null("")
    # a kernel run in a command buffer (command_buffer_1/custom-call.0, command_buffer_1/fusion_76):
    # the stem of the instruction after the thunk, a kernel's _N read as .N, so it pairs with the
    # same instruction run outside a CUDA graph (traceview.model.command_buffers)
    in_graph = name.str.contains(IN_GRAPH)
    stem_expr = (pl.when(in_graph).then(name.str.replace(IN_GRAPH, "").str.replace(r"[._]\d+$", ""))
                 .otherwise(name.str.replace(r"\.\d+$", "")) if name_stem else pl.lit(""))
    is_k = pl.col("kname").is_not_null()
    # each kernel name's identity, worked out once per distinct name
    kid = pl.col("kname").replace_strict({k: kernel_id(k) for k in rows["kname"].drop_nulls().unique().to_list()},
                                         default=None, return_dtype=pl.Utf8)
    if expand_kernels:  # a kernel's op keyed as any op, its stem under the kernel's identity
        stem_expr = pl.when(is_k).then(kid + pl.lit("/") + stem_expr if name_stem else kid).otherwise(stem_expr)
        is_k = pl.lit(False)
    if program_stem_key:
        mods = rows["module"].unique().to_list()
        prog_expr = pl.col("module").replace_strict({m: program_stem(m) for m in mods}, default="",
                                                   return_dtype=pl.Utf8)
    else:
        prog_expr = pl.lit("")
    return rows.with_columns(
        prog_expr.alias("program"),
        pl.when(is_k).then(pl.lit("kernel")).otherwise(pl.col("op_kind").fill_null("")).alias("kind"),
        pl.when(is_k).then(kid).otherwise(stem_expr).alias("stem"),
        pl.when(is_k).then(pl.col("kshape")).otherwise(pl.col("shape").fill_null("")).alias("_shape"),
        pl.when(is_k).then(pl.lit("")).otherwise(pl.col("fingerprint")).alias("fingerprint"),
    ).drop("shape").rename({"_shape": "shape"})


def populations(prof, *, rules=None, name_stem: bool = True, tagged: TaggedOps | None = None,
                program_stem_key: bool = True, members: bool = False, expand_kernels: bool = False) -> pl.DataFrame:
    """One row per population of one profile (key in the module doc).

    ``prof``: anything with ``table`` (an OpTable) and ``module_runs``; ``tagged``: its
    :func:`~traceview.analysis.ops.tagged.tag` result when the caller has it (made with
    ``rules`` otherwise); ``program_stem_key=False`` leaves the program out of the key (its
    column ""); ``expand_kernels``: each op of a named kernel is its own population
    (:func:`keyed`), as ``--expand-kernels`` shows them. Columns (:data:`POPULATION_SCHEMA`): the key, is_kernel, kernels
    (kernel names seen), op_names (XLA names seen, sorted), occurrences (invocations for
    kernels), events (traced op events), total_ps (wall time of the occurrences), self_ps,
    mean_ps (total_ps / occurrences), share (self_ps over all ops' self time), executions (of
    the programs it ran in, summed over devices; 0 when unknown), per_execution (occurrences
    / executions, null when unknown), modules, source (most frequent direct ``file:line`` over
    the events, ties to the smallest), source_files (sorted), family (most frequent over the
    events), hlo_text (of its first root event). Sorted by self time. Raises UsageError on
    bad family ``rules``.
    """
    t = _tagged(prof, rules, tagged)
    if t.height == 0:
        return pl.DataFrame(schema=POPULATION_SCHEMA)
    df = keyed(t.rows, name_stem=name_stem, program_stem_key=program_stem_key, expand_kernels=expand_kernels)
    is_k = pl.lit(False) if expand_kernels else pl.col("kname").is_not_null()
    not_root = is_k & ~pl.col("kroot").fill_null(False)
    df = df.with_columns(
        # an invocation: a root op of a kernel, or any op outside kernels
        pl.when(not_root).then(0).otherwise(pl.col("count")).alias("_inv"),
        pl.when(not_root).then(0).otherwise(pl.col("duration_ps")).alias("_wall"),
        pl.when(pl.col("src_file") != "").then(
            pl.col("src_file") + pl.lit(":") + pl.col("src_line").cast(pl.Utf8).fill_null("?")).otherwise(pl.lit(""))
        .alias("_src"),
    )
    total_self = int(df["self_ps"].sum() or 0)
    # executions of the programs each population ran in (per device), as aggregate.occurrence_checks
    runs = as_runs(prof.runs if hasattr(prof, "runs") else prof.module_runs)
    if runs.height:
        ex = runs.count_by(["device", "program_id"])
        pairs = (df.select(KEY + ["device", "program_id"]).unique()
                 .join(ex, on=["device", "program_id"], how="left")
                 .group_by(KEY).agg(pl.col("_runs").fill_null(0).sum().alias("executions")))
    else:
        pairs = df.select(KEY).unique().with_columns(pl.lit(0, dtype=pl.Int64).alias("executions"))
    out = df.group_by(KEY).agg(
        pl.col("kname").is_not_null().any().alias("is_kernel"),
        pl.col("kname").drop_nulls().unique().sort().alias("kernels"),
        pl.col("op_name").filter(~is_k | pl.col("kroot").fill_null(False)).unique().sort().alias("op_names"),
        pl.col("_inv").sum().cast(pl.Int64).alias("occurrences"),
        pl.col("count").sum().cast(pl.Int64).alias("events"),
        pl.col("_wall").sum().cast(pl.Int64).alias("total_ps"),
        pl.col("self_ps").sum().cast(pl.Int64).alias("self_ps"),
        pl.col("module").filter(pl.col("module") != "").unique().sort().alias("modules"),
        pl.col("src_file").filter(pl.col("src_file") != "").unique().sort().alias("source_files"),
        # rows are in the order of their first event: the first here is the first root event
        pl.col("hlo_text").filter(~is_k | pl.col("kroot").fill_null(True)).first().alias("hlo_text"),
    )
    out = (out.join(weighted_mode(df, KEY, "_src").rename({"_src": "source"}), on=KEY, how="left", nulls_equal=True)
           .join(weighted_mode(df, KEY, "family", skip_empty=False), on=KEY, how="left", nulls_equal=True))
    out = out.join(pairs, on=KEY, how="left").with_columns(
        pl.col("source").fill_null(""), pl.col("hlo_text").fill_null(""),
        pl.col("executions").fill_null(0).cast(pl.Int64),
        (pl.col("total_ps") / pl.col("occurrences")).alias("mean_ps"),
        (pl.col("self_ps") / total_self if total_self else pl.lit(0.0)).alias("share"),
    ).with_columns(
        pl.when(pl.col("executions") > 0).then(pl.col("occurrences") / pl.col("executions")).otherwise(None)
        .alias("per_execution"),
    )
    out = out.select(list(POPULATION_SCHEMA)).cast(POPULATION_SCHEMA)
    if members:
        roots = df.filter(~is_k | pl.col("kroot").fill_null(False))
        per = (roots.group_by(KEY + ["op_name"]).agg(
            pl.col("_inv").sum().cast(pl.Int64).alias("occurrences"), pl.col("_wall").sum().cast(pl.Int64).alias("total_ps"),
            pl.col("module").filter(pl.col("module") != "").unique().sort().alias("modules"))
            .sort(["total_ps", "op_name"], descending=[True, False])
            .group_by(KEY, maintain_order=True).agg(
                pl.struct("op_name", "occurrences", "total_ps", "modules").alias("members_rows")))
        out = out.join(per, on=KEY, how="left", nulls_equal=True, maintain_order="left")
    return out.sort(["self_ps"] + KEY, descending=[True] + [False] * len(KEY))


def kernel_table(prof, *, rules=None, tagged: TaggedOps | None = None) -> pl.DataFrame:
    """One row per named kernel of a profile.

    Columns (:data:`KERNEL_SCHEMA`): kernel (the full name), kernel_id, config (JSON object
    text of :func:`~traceview.model.kernelname.kernel_config`, tuples as lists), invocations
    (root-op occurrences), events (traced op events inside the kernel), self_ps (sum over its
    ops, ps), modules (sorted), shapes (root shapes, sorted), source_files (direct source
    files of its ops, sorted). Sorted by self time. Empty frame (same columns) when no op
    carries a kernel name.
    """
    t = _tagged(prof, rules, tagged)
    if t.height == 0:
        return pl.DataFrame(schema=KERNEL_SCHEMA)
    df = t.rows.filter(pl.col("kname").is_not_null())
    if df.height == 0:
        return pl.DataFrame(schema=KERNEL_SCHEMA)
    out = df.group_by("kname").agg(
        pl.col("count").filter(pl.col("kroot").fill_null(False)).sum().cast(pl.Int64).alias("invocations"),
        pl.col("count").sum().cast(pl.Int64).alias("events"),
        pl.col("self_ps").sum().cast(pl.Int64).alias("self_ps"),
        pl.col("module").filter(pl.col("module") != "").unique().sort().alias("modules"),
        pl.col("shape").filter(pl.col("kroot").fill_null(False)).fill_null("").unique().sort().alias("shapes"),
        pl.col("src_file").filter(pl.col("src_file") != "").unique().sort().alias("source_files"),
    ).rename({"kname": "kernel"})
    out = out.with_columns(
        pl.col("kernel").map_elements(kernel_id, return_dtype=pl.Utf8).alias("kernel_id"),
        pl.col("kernel").map_elements(lambda k: json.dumps({a: (list(v) if isinstance(v, tuple) else v)
                                                            for a, v in kernel_config(k).items()}),
                                      return_dtype=pl.Utf8).alias("config"),
    )
    return out.select(list(KERNEL_SCHEMA)).cast(KERNEL_SCHEMA).sort(["self_ps", "kernel"], descending=[True, False])


def family_shares(tagged: TaggedOps) -> pl.DataFrame:
    """Self time per family over a profile's ops: family, self_ps (Int64, ps), share (of all
    ops' self time); by family. Empty frame when there is no op."""
    if tagged.height == 0:
        return pl.DataFrame(schema={"family": pl.Utf8, "self_ps": pl.Int64, "share": pl.Float64})
    df = tagged.rows
    total = int(df["self_ps"].sum() or 0)
    return df.group_by("family").agg(pl.col("self_ps").sum().cast(pl.Int64)).with_columns(
        (pl.col("self_ps") / total if total else pl.lit(0.0)).alias("share")).sort("family")
