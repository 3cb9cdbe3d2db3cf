"""Aggregations of the op-event table: by shape (the study's key), by name, by (program, op).

Why shape: compiled programs reuse HLO op names across buckets (``fusion``, ``custom-call.1``),
so a table keyed by name mixes programs and shapes, and a bucket that ran 18 times at prefill
shape can look like padding in a decode table. Keying on (op name, shape signature) separates
each *population* (every occurrence of one op at one shape) and keeps its occurrence count
honest.

All times are integer ps in and out (``*_ps`` columns). ``share`` is the population's self
time over the total self time of all ops in the input (self time avoids double counting ops
nested in a ``while``/``call`` on the same line). Every function takes the op events as a
:class:`traceview.model.optable.OpTable` (or a wide frame following
:data:`traceview.model.schema.OPS_SCHEMA`, which is encoded first) and returns a new polars DataFrame;
none raises on an empty input (it returns an empty frame with the documented columns).

Method: sums, counts, min/max and row-weighted modes are taken over
:meth:`~traceview.model.optable.OpTable.collapse` (one row per op description, a few hundred rows
however many events); only the distributions (median, p90, cv:
:func:`traceview.analysis.ops.distributions.spread`) go back to the events, grouped on an integer
key, and the regime examination reads the events of the few populations whose spread is wide.
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl

from traceview.analysis import eventstats
from traceview.model.optable import OpTable, as_table, weighted_mode
from traceview.model.runtable import RunTable, as_runs

try:  # optional C accelerator
    from traceview.analysis import _passes as _fast
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _fast = None

_DIMS = re.compile(r"\[([0-9,]*)\]")


def _source_expr() -> pl.Expr:
    return (
        pl.when(pl.col("source_file") != "")
        .then(pl.col("source_file") + pl.lit(":") + pl.col("source_line").cast(pl.Utf8).fill_null("?"))
        .otherwise(pl.lit(""))
    )


def _sum_aggs() -> list[pl.Expr]:
    """Aggregations over collapsed rows (one per op description)."""
    return [
        pl.col("count").sum().alias("occurrences"),
        pl.col("duration_ps").sum().alias("total_ps"),
        pl.col("self_ps").sum().alias("self_ps"),
        pl.col("min_ps").min().alias("min_ps"),
        pl.col("max_ps").max().alias("max_ps"),
    ]


def _medians(table: OpTable, col: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Median duration per occurrence (``duration_ps / count`` per event, so a pre-aggregated
    row contributes its mean) per ``keys`` group of the collapsed frame ``col``: columns
    ``keys`` + ``median_ps`` (Float64)."""
    k = col.select(["attr"] + keys).with_columns(pl.struct(keys).rank("dense").cast(pl.Int64).alias("key") - 1)
    names = k.group_by("key").agg([pl.col(c).first() for c in keys])
    ev = table.events
    if _fast is not None and ev.height and int(ev["count"].max() or 1) <= 1 and k.height:
        # one occurrence per event: the medians of the durations in one C pass (values grouped
        # by key, then quickselect), equal to polars' median
        key_of_attr = np.full(table.attrs.height, -1, dtype=np.int32)
        key_of_attr[k["attr"].to_numpy().astype(np.int64)] = k["key"].to_numpy().astype(np.int32)
        nk = int(k["key"].max()) + 1
        out = np.empty(nk, dtype=np.float64)
        have = np.zeros(nk, dtype=np.uint8)
        attr = np.ascontiguousarray(ev["attr"].to_numpy())
        dur = np.ascontiguousarray(ev["duration_ps"].to_numpy(), dtype=np.int64)
        if _fast.median_by(attr, key_of_attr, dur, out, have):
            got = np.flatnonzero(have)
            med = pl.DataFrame({"key": pl.Series(got, dtype=pl.Int64), "median_ps": out[got]})
            return names.join(med, on="key", how="left").drop("key")
    ids = table.event_keys(k.select("attr", "key"))
    if len(ids) < (1 << 31):
        ids = ids.astype(np.int32)
    ev = table.events
    # one occurrence per row (the usual case): the duration itself, no float column
    one = not ev.height or int(ev["count"].max() or 1) <= 1
    per = pl.DataFrame({"key": ids, "per": ev["duration_ps"] if one else ev["duration_ps"] / ev["count"]})
    del ids
    med = per.filter(pl.col("key") >= 0).group_by("key").agg(pl.col("per").median().alias("median_ps"))
    return names.join(med, on="key", how="left").drop("key")


def executions(col: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Executions per ``keys`` group of the collapsed frame ``col``: columns ``keys`` +
    ``executions`` (Int64).

    On GPU one execution of an HLO op can launch several kernels (a convolution as Im2Col + a
    GEMM kernel), each its own event, so occurrences (XProf's count: one per kernel event) are
    not executions. Executions are counted per (host, device, program) as the largest count of
    any one kernel name of the op there, then summed; an op without kernel names (TPU, CPU)
    executes once per occurrence. An op that launches the same kernel twice per execution is
    counted as two executions.
    """
    where = ["host", "device", "program_id"]
    per = (col.group_by([*keys, *where, "kernel"]).agg(pl.col("count").sum())
           .group_by([*keys, *where]).agg(pl.col("count").max())
           .group_by(keys).agg(pl.col("count").sum().alias("executions")))
    return per


def _total_self(table: OpTable) -> int:
    return eventstats.total_self_ps(table)


def _finish(df: pl.DataFrame, total_self: int, sort: bool = True) -> pl.DataFrame:
    df = df.with_columns(
        (pl.col("total_ps") / pl.col("occurrences")).alias("mean_ps"),
        (pl.col("self_ps") / total_self if total_self else pl.lit(0.0)).alias("share"),
    )
    if not sort:
        return df
    # ties broken by the key columns, so the same input always gives the same row order
    keys = [c for c in ("op_name", "shape", "program_id") if c in df.columns]
    if "program_id" not in df.columns and "module" in df.columns:
        keys.append("module")  # by_shape's rows split by module
    return df.sort(["self_ps", "total_ps", *keys], descending=[True, True] + [False] * len(keys), nulls_last=True)


def by_shape(ops, module_runs: pl.DataFrame | RunTable | None = None, *, split_modules: bool = True) -> pl.DataFrame:
    """One row per (op_name, shape) population, split by module (hlo_module) when one
    (op_name, shape) runs in several: a prefill and a decode program whose token bucket
    equals the request bucket (T = B = 32) compile ops of equal name and shape, which are two
    populations (``split_modules=False``: one row per (op_name, shape), the modules merged).

    Columns: op_name, shape, op_kind, category, occurrences (events, as XProf counts them),
    executions and kernels_per_execution (:func:`executions`), total_ps, self_ps, mean_ps,
    min_ps, max_ps, median_ps (per occurrence), share (of all ops' self time), modules
    (sorted list of hlo_module names), n_programs, devices (number of devices), source (most
    frequent ``file:line`` over the events, ties to the smallest), framework_op (likewise),
    then the distribution (:mod:`traceview.analysis.ops.distributions`): p50_ps (= median_ps),
    p90_ps, cv, programs (the module names, as ``modules``), regimes (null, or why the
    population's spread mixes regimes: warm-up, several programs, bimodal, device split; found with
    ``module_runs`` for the execution index, else occurrence order; the
    :data:`~traceview.analysis.ops.distributions.MAX_EXAMINED` wide populations with the most
    self time are examined) and module (the key's
    module; null when merged and several). Sorted by self time, descending.
    """
    return by_shape_and_regimes(ops, module_runs, split_modules=split_modules)[0]


def by_shape_and_regimes(ops, module_runs: pl.DataFrame | RunTable | None = None, *,
                         split_modules: bool = True) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """(:func:`by_shape`, the :func:`~traceview.analysis.ops.distributions.regimes` figures of the
    populations it examined: keys + REGIME_SCHEMA, one row each; None for an empty table), so
    that a report reads the figures of its flagged populations without a second pass over the
    events."""
    from traceview.analysis.ops import distributions as dist

    table = as_table(ops)
    if table.height == 0:
        return _empty_by_shape(), None
    col = table.collapse()
    keys = by_shape_keys(split_modules)
    df = by_shape_rows(col, keys, dist.spread(table, col, keys))
    cand = df.filter(dist.wide()).sort("self_ps", descending=True).head(dist.MAX_EXAMINED)
    reg = dist.regimes(table, module_runs, col, keys, cand)
    df = df.join(reg.select(*keys, "regimes"), on=keys, how="left", nulls_equal=True)
    return finish_by_shape(df, _total_self(table)), reg


def by_shape_keys(split_modules: bool = True) -> list[str]:
    """The row key of :func:`by_shape`."""
    return ["op_name", "shape", "module"] if split_modules else ["op_name", "shape"]


def by_shape_rows(col: pl.DataFrame, keys: list[str], spread: pl.DataFrame) -> pl.DataFrame:
    """The :func:`by_shape` rows before ``regimes``, ``mean_ps``, ``share`` and the sort, from
    collapsed rows ``col`` (:meth:`~traceview.model.optable.OpTable.collapse`'s columns;
    ``hlo_text`` and ``source_stack`` unused) and ``spread`` (``keys`` + p50_ps, p90_ps, cv:
    :func:`traceview.analysis.ops.distributions.spread`, or a merge of sketches in fleet mode).
    Every figure here is a sum, count, min/max or weighted mode over ``col``, so collapsed
    rows of several hosts (attr ids kept distinct, in host order) give the figures of their
    concatenated events."""
    col = col.with_columns(_source_expr().alias("_src"))
    df = col.group_by(keys).agg(
        pl.col("op_kind").sort_by("first_ps", "attr", nulls_last=True).first(),
        pl.col("category").sort_by("first_ps", "attr", nulls_last=True).first(),
        *_sum_aggs(),
        pl.col("module").unique().sort().alias("modules"),
        pl.col("program_id").n_unique().alias("n_programs"),
        pl.struct("host", "device").n_unique().alias("devices"),
    )
    df = (df.join(spread, on=keys, how="left", nulls_equal=True)
          .join(weighted_mode(col, keys, "_src").rename({"_src": "source"}), on=keys, how="left", nulls_equal=True)
          .join(weighted_mode(col, keys, "framework_op"), on=keys, how="left", nulls_equal=True))
    df = (df.join(executions(col, keys), on=keys, how="left", nulls_equal=True)
          .with_columns(pl.col("source").fill_null(""), pl.col("framework_op").fill_null(""),
                        pl.col("p50_ps").alias("median_ps"), pl.col("modules").alias("programs"),
                        (pl.col("occurrences") / pl.col("executions")).alias("kernels_per_execution")))
    if "module" not in keys:
        df = df.with_columns(pl.when(pl.col("modules").list.len() == 1).then(pl.col("modules").list.first())
                             .otherwise(None).alias("module"))
    return df


def finish_by_shape(df: pl.DataFrame, total_self: int) -> pl.DataFrame:
    """:func:`by_shape_rows` output with a ``regimes`` column to the final :func:`by_shape`
    table: mean_ps, share (of ``total_self``, ps), the sort and the column order."""
    return _finish(df, total_self).select(_BY_SHAPE_COLUMNS)


_BY_SHAPE_COLUMNS = ["op_name", "shape", "op_kind", "category", "occurrences", "executions",
                     "kernels_per_execution", "total_ps", "self_ps",
                     "mean_ps", "min_ps", "max_ps", "median_ps", "share", "modules", "n_programs",
                     "devices", "source", "framework_op", "p50_ps", "p90_ps", "cv", "programs", "regimes", "module"]


def by_program_shape(ops, module_runs: pl.DataFrame | RunTable | None = None) -> pl.DataFrame:
    """One row per (module, op_name, shape) population, program by program: the
    :func:`by_shape` rows (split by module) with ``module`` first and ``module_share`` (the
    population's self time over its module's, ops without a module together under ""),
    ordered by the module's self time, then the population's. Columns: module, then those of
    :func:`by_shape` without ``module``, then module_share."""
    df = by_shape(ops, module_runs)
    if df.height == 0:
        return df.select("module", *[c for c in df.columns if c != "module"]).with_columns(
            pl.lit(None, dtype=pl.Float64).alias("module_share"))
    m = pl.col("module").fill_null("")
    tot = pl.col("self_ps").sum().over(m)
    df = df.with_columns(pl.when(tot > 0).then(pl.col("self_ps") / tot).otherwise(0.0).alias("module_share"),
                         tot.alias("_mt"), m.alias("_m"))
    return (df.sort(["_mt", "_m", "self_ps", "op_name", "shape"], descending=[True, False, True, False, False])
            .drop("_mt", "_m").select("module", *[c for c in df.columns if c not in ("module", "_mt", "_m")]))


def program_splits(by_shape_rows: pl.DataFrame) -> dict:
    """How a :func:`by_shape` table split (op_name, shape) keys by module: ``keys`` (keys run
    in several modules), ``rows`` (the rows they became), ``examples`` (up to 5: op_name,
    shape, modules). Rows without a module name (a trace that names none) are never split:
    ``unnamed`` counts them."""
    if by_shape_rows.height == 0 or "module" not in by_shape_rows.columns:
        return {"keys": 0, "rows": 0, "unnamed": 0, "examples": []}
    named = by_shape_rows.filter(pl.col("module").fill_null("") != "")
    g = (named.group_by("op_name", "shape").agg(pl.len().alias("n"), pl.col("module").sort().alias("modules"),
                                                pl.col("self_ps").sum().alias("t"))
         .filter(pl.col("n") > 1).sort(["t", "op_name", "shape"], descending=[True, False, False]))
    return {"keys": g.height, "rows": int(g["n"].sum() or 0) if g.height else 0,
            "unnamed": by_shape_rows.height - named.height,
            "examples": g.head(5).select("op_name", "shape", "modules").to_dicts()}


def _empty_by_shape() -> pl.DataFrame:
    schema = {"op_name": pl.Utf8, "shape": pl.Utf8, "op_kind": pl.Utf8, "category": pl.Utf8,
              "occurrences": pl.Int64, "executions": pl.Int64, "kernels_per_execution": pl.Float64,
              "total_ps": pl.Int64, "self_ps": pl.Int64, "mean_ps": pl.Float64,
              "min_ps": pl.Int64, "max_ps": pl.Int64, "median_ps": pl.Float64, "share": pl.Float64,
              "modules": pl.List(pl.Utf8), "n_programs": pl.UInt32, "devices": pl.UInt32,
              "source": pl.Utf8, "framework_op": pl.Utf8, "p50_ps": pl.Float64, "p90_ps": pl.Float64,
              "cv": pl.Float64, "programs": pl.List(pl.Utf8), "regimes": pl.Utf8, "module": pl.Utf8}
    return pl.DataFrame(schema=schema)


def by_name(ops) -> pl.DataFrame:
    """One row per op name, mixing shapes and programs — the view XProf's trace-based tools
    and naive scripts give. Columns: op_name, occurrences, total_ps, self_ps, mean_ps, min_ps,
    max_ps, median_ps, share, n_shapes, modules. Kept to show what shape keying separates."""
    table = as_table(ops)
    if table.height == 0:
        return pl.DataFrame(schema={"op_name": pl.Utf8, "occurrences": pl.Int64, "total_ps": pl.Int64,
                                    "self_ps": pl.Int64, "mean_ps": pl.Float64, "min_ps": pl.Int64,
                                    "max_ps": pl.Int64, "median_ps": pl.Float64, "share": pl.Float64,
                                    "n_shapes": pl.UInt32, "modules": pl.List(pl.Utf8)})
    col = table.collapse()
    df = col.group_by("op_name").agg(
        *_sum_aggs(),
        pl.col("shape").n_unique().alias("n_shapes"),
        pl.col("module").unique().sort().alias("modules"),
    ).join(_medians(table, col, ["op_name"]), on="op_name", how="left")
    return _finish(df, _total_self(table)).select(
        ["op_name", "occurrences", "total_ps", "self_ps", "mean_ps", "min_ps", "max_ps", "median_ps",
         "share", "n_shapes", "modules"])


def by_program_op(ops) -> pl.DataFrame:
    """One row per (program_id, op_name), XProf ``hlo_stats``'s row key. Columns: program_id,
    module, op_name, shape, occurrences, total_ps, self_ps, mean_ps, share, then the
    distribution of per-occurrence time (:func:`traceview.analysis.ops.distributions.spread`):
    p50_ps, p90_ps, max_ps, cv. Summed over devices (as XProf sums over TPU cores)."""
    from traceview.analysis.ops import distributions as dist

    table = as_table(ops)
    if table.height == 0:
        return pl.DataFrame(schema={"program_id": pl.UInt64, "module": pl.Utf8, "op_name": pl.Utf8,
                                    "shape": pl.Utf8, "occurrences": pl.Int64, "total_ps": pl.Int64,
                                    "self_ps": pl.Int64, "mean_ps": pl.Float64, "share": pl.Float64,
                                    "p50_ps": pl.Float64, "p90_ps": pl.Float64, "max_ps": pl.Int64, "cv": pl.Float64})
    col = table.collapse().sort("first_ps", "attr", nulls_last=True)
    keys = ["program_id", "op_name"]
    df = col.group_by(keys).agg(
        pl.col("module").first(),
        pl.col("shape").first(),
        pl.col("count").sum().alias("occurrences"),
        pl.col("duration_ps").sum().alias("total_ps"),
        pl.col("self_ps").sum().alias("self_ps"),
        pl.col("max_ps").max(),
    ).join(dist.spread(table, col, keys), on=keys, how="left", nulls_equal=True)
    return _finish(df, _total_self(table)).select(
        ["program_id", "module", "op_name", "shape", "occurrences", "total_ps", "self_ps", "mean_ps", "share",
         "p50_ps", "p90_ps", "max_ps", "cv"])


def populations(ops, op_name: str) -> pl.DataFrame:
    """The shape populations behind one op name: ``by_shape`` rows for ``op_name``. Columns
    as :func:`by_shape`, with ``share`` taken over the named op's self time. Empty frame if the
    name is absent."""
    return by_shape(as_table(ops).filter(pl.col("op_name") == op_name))


def module_executions(module_runs: pl.DataFrame) -> pl.DataFrame:
    """Executions per (module, program_id), summed over devices: columns module, program_id,
    executions, devices, total_ps (module wall time)."""
    if module_runs.height == 0:
        return pl.DataFrame(schema={"module": pl.Utf8, "program_id": pl.UInt64, "executions": pl.UInt32,
                                    "devices": pl.UInt32, "total_ps": pl.Int64})
    return (module_runs.group_by(["module", "program_id"]).agg(
        pl.len().alias("executions"),
        pl.struct("host", "device").n_unique().alias("devices"),
        pl.col("duration_ps").sum().alias("total_ps"),
    ).sort(["total_ps", "module", "program_id"], descending=[True, False, False], nulls_last=True))


def occurrence_checks(ops, module_runs: pl.DataFrame | RunTable, *, steps: int | dict | None = None,
                      expect_batch: int | None = None) -> pl.DataFrame:
    """Occurrence checks per (op_name, shape, module) population, the study's authentication
    step: per program, so a prefill and a decode population of equal (name, shape) (token
    bucket = request bucket) are never summed into one count.

    Columns: op_name, shape, modules (the population's module, a one-element list; empty
    when the trace names none), occurrences (events, XProf's count),
    executions (of the op: :func:`executions`, so an op that launches two kernels counts once
    per execution), program_runs (runs of the programs the population ran in, summed over
    devices), per_execution (executions / program_runs: how often the op runs per program
    run; null if unknown), per_device_min / per_device_max (executions on the least and most
    busy device), steps (the N it was checked against; null when unchecked), steps_ok (every
    device's executions in every checked program are a whole multiple of N; null when
    unchecked), has_batch (``expect_batch`` appears among the shape's dimensions; null when
    expect_batch is None).

    ``steps``: one N for every program, or ``{module name: N}`` to check each program against
    its own count (programs not named are not checked). Sorted failures first, then by
    occurrences descending. Raises :class:`~traceview.errors.UsageError` when a step count or
    ``expect_batch`` is not a positive integer.
    """
    from traceview.errors import UsageError

    per_module = dict(steps) if isinstance(steps, dict) else None
    for v, what in [(expect_batch, "expect_batch")] + (
            [(n, f"steps for {m}") for m, n in per_module.items()] if per_module is not None else [(steps, "steps")]):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise UsageError(f"{what} must be a positive integer, got {v!r}")
    table = as_table(ops)
    if table.height == 0:
        return pl.DataFrame(schema=_CHECK_SCHEMA)
    # devices are (host, device): every host of a pod names its planes /device:TPU:0..n
    where = ["host", "device", "program_id"]
    # per program: a prefill and a decode population of equal (name, shape) are checked apart
    keys = ["op_name", "shape", "module"]
    col = table.collapse()
    per_dev = (col.group_by([*keys, *where, "kernel"]).agg(pl.col("count").sum())
               .group_by([*keys, *where]).agg(pl.col("count").sum().alias("_occ"), pl.col("count").max().alias("_x")))
    rt = as_runs(module_runs)
    if rt.height:
        ex = rt.count_by(where)
        per_dev = per_dev.join(ex, on=where, how="left", nulls_equal=True)
    else:
        per_dev = per_dev.with_columns(pl.lit(None, dtype=pl.Int64).alias("_runs"))
    if per_module is not None:
        n_of = pl.DataFrame({"module": list(per_module), "_steps": list(per_module.values())},
                            schema={"module": pl.Utf8, "_steps": pl.Int64})
        per_dev = per_dev.join(n_of, on="module", how="left")
    else:
        per_dev = per_dev.with_columns(pl.lit(steps, dtype=pl.Int64).alias("_steps"))
    # a device's executions of the population per checked program
    dev_prog = per_dev.group_by([*keys, "host", "device"]).agg(pl.col("_x").sum(), pl.col("_steps").first())
    dev_tot = per_dev.group_by([*keys, "host", "device"]).agg(pl.col("_x").sum())
    checked = dev_prog.filter(pl.col("_steps").is_not_null()).group_by(keys).agg(
        ((pl.col("_x") % pl.col("_steps")) == 0).all().alias("steps_ok"),
        pl.col("_steps").unique().sort().alias("_ns"))
    out = per_dev.group_by(keys).agg(
        pl.col("module").drop_nulls().unique().sort().alias("modules"),
        pl.col("_occ").sum().alias("occurrences"),
        pl.col("_x").sum().alias("executions"),
        pl.col("_runs").sum().alias("program_runs"),
    ).join(dev_tot.group_by(keys).agg(pl.col("_x").min().alias("per_device_min"), pl.col("_x").max().alias("per_device_max")),
           on=keys, nulls_equal=True).join(checked, on=keys, how="left", nulls_equal=True)
    out = out.with_columns(
        pl.when(pl.col("program_runs") > 0).then(pl.col("executions") / pl.col("program_runs")).otherwise(None)
        .alias("per_execution"),
        pl.when(pl.col("_ns").list.len() == 1).then(pl.col("_ns").list.first()).otherwise(None).alias("steps"),
    )
    if expect_batch is not None:
        b = int(expect_batch)
        out = out.with_columns(pl.col("shape").map_elements(lambda s: b in shape_dims(s), return_dtype=pl.Boolean).alias("has_batch"))
    else:
        out = out.with_columns(pl.lit(None, dtype=pl.Boolean).alias("has_batch"))
    out = out.with_columns(pl.col("steps").cast(pl.Int64), pl.col("program_runs").cast(pl.Int64))
    return out.sort([pl.col("steps_ok").fill_null(True), "occurrences", "op_name", "shape", "module"],
                    descending=[False, True, False, False, False], nulls_last=True).select(list(_CHECK_SCHEMA))


_CHECK_SCHEMA = {"op_name": pl.Utf8, "shape": pl.Utf8, "modules": pl.List(pl.Utf8), "occurrences": pl.Int64,
                 "executions": pl.Int64, "program_runs": pl.Int64, "per_execution": pl.Float64,
                 "per_device_min": pl.Int64, "per_device_max": pl.Int64, "steps": pl.Int64, "steps_ok": pl.Boolean,
                 "has_batch": pl.Boolean}


def check_summary(checks: pl.DataFrame | None) -> dict | None:
    """``{"populations", "checked", "failing"}`` of :func:`occurrence_checks`' rows (failing:
    steps_ok false), or None without checks."""
    if checks is None:
        return None
    return {"populations": checks.height, "checked": int(checks["steps_ok"].is_not_null().sum()),
            "failing": int((checks["steps_ok"] == False).sum())}  # noqa: E712 - a polars comparison


def shape_dims(signature: str) -> set[int]:
    """All dimension sizes named anywhere in a shape signature (result and operands)."""
    out: set[int] = set()
    for body in _DIMS.findall(signature or ""):
        for d in body.split(","):
            if d:
                out.add(int(d))
    return out
