"""Populations across layers: ``--by kind``, one row per (op kind, HLO text without instruction
names, shape), with the op names that fall into it counted.

A model with L identical layers compiles L copies of each layer op under L names
(``convolution_bitcast_fusion.3`` ... ``.63``); a (name, shape) table shows L rows of 1/L of
the time each. The key here is :data:`traceview.analysis.compare.populations.KEY`, the one ``diff``
matches on: opcode, the op name without XLA's uniquifying suffix, the shape signature and the
fingerprint of the HLO text with instruction names removed
(:func:`traceview.model.fingerprint.population_fingerprint`), so the L copies are one row with
``members`` = L. A named kernel is one row per (kernel identity, root shapes).

Times in ps; ``share`` is a fraction of all ops' self time.
"""

from __future__ import annotations

import polars as pl

from traceview.analysis.compare.populations import KEY, populations

KIND_SCHEMA = {
    "kind": pl.Utf8, "op_name": pl.Utf8, "shape": pl.Utf8, "members": pl.Int64, "op_names": pl.List(pl.Utf8),
    "occurrences": pl.Int64, "executions": pl.Int64, "per_execution": pl.Float64, "total_ps": pl.Int64,
    "self_ps": pl.Int64, "mean_ps": pl.Float64, "share": pl.Float64, "modules": pl.List(pl.Utf8),
    "family": pl.Utf8, "source": pl.Utf8, "fingerprint": pl.Utf8, "is_kernel": pl.Boolean,
}


def by_kind(prof, *, rules=None, tagged=None) -> pl.DataFrame:
    """One row per population of ``prof`` (anything with ``table`` and ``module_runs``) keyed
    as the module doc says, sorted by self time.

    Columns (:data:`KIND_SCHEMA`): kind (opcode, ``kernel`` for a named kernel), op_name (the
    name stem shared by the members, e.g. ``convolution_bitcast_fusion``; the kernel identity
    for a kernel), shape, members (distinct op names in the row: the layer count of a per-layer
    op), op_names (those names, sorted), occurrences, executions (of the programs it ran in,
    summed over devices; 0 when unknown), per_execution (occurrences / executions: members x
    runs per execution), total_ps, self_ps, mean_ps (total_ps / occurrences), share, modules,
    family, source (most frequent ``file:line``), fingerprint, is_kernel. ``rules``: family
    rules (:func:`traceview.analysis.ops.families.classify`); ``tagged``: a
    :func:`~traceview.analysis.ops.tagged.tag` result to reuse. Raises UsageError on bad rules.
    """
    pops = populations(prof, rules=rules, tagged=tagged)
    if pops.height == 0:
        return pl.DataFrame(schema=KIND_SCHEMA)
    out = pops.with_columns(
        pl.col("stem").alias("op_name"),
        pl.col("op_names").list.len().cast(pl.Int64).alias("members"),
    )
    return (out.select(list(KIND_SCHEMA)).cast(KIND_SCHEMA)
            .sort(["self_ps", "kind", "op_name", "shape", "fingerprint"], descending=[True, False, False, False, False]))


def layer_groups(prof, *, rules=None, tagged=None) -> pl.DataFrame:
    """:func:`by_kind`'s rows, each with its members: the report's top-ops table, where the L
    per-layer copies of one op are one row that expands to them. Columns: :data:`KIND_SCHEMA`
    plus ``hlo_text`` (of the first member's first event) and ``members_rows`` (per op name,
    by total time: op_name, occurrences, total_ps, modules;
    :func:`~traceview.analysis.compare.populations.populations`). Same order as :func:`by_kind`."""
    pops = populations(prof, rules=rules, tagged=tagged, members=True)
    if pops.height == 0:
        return pl.DataFrame(schema={**KIND_SCHEMA, "hlo_text": pl.Utf8, "members_rows": pl.List(pl.Struct({
            "op_name": pl.Utf8, "occurrences": pl.Int64, "total_ps": pl.Int64, "modules": pl.List(pl.Utf8)}))})
    out = pops.with_columns(pl.col("stem").alias("op_name"),
                            pl.col("op_names").list.len().cast(pl.Int64).alias("members"))
    return (out.select(list(KIND_SCHEMA) + ["hlo_text", "members_rows"]).cast(KIND_SCHEMA)
            .sort(["self_ps", "kind", "op_name", "shape", "fingerprint"], descending=[True, False, False, False, False]))


__all__ = ["KEY", "KIND_SCHEMA", "by_kind", "layer_groups"]
