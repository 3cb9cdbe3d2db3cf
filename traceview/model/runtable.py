"""The module runs in dictionary-encoded form: per-run numbers plus one row per program.

A derived GPU/CPU profile holds one module run per program execution, millions of them, while
its programs (host, device, module, program_id) are a few dozen. :class:`RunTable` stores

``runs`` — one row per execution, :data:`RUN_SCHEMA` (20 bytes per run):

==============  ========  ===================================================================
key             UInt32    row of ``keys`` (the program that ran)
start_ps        Int64     start, ps since the profile session start (null if unknown)
duration_ps     Int64     wall duration, ps
==============  ========  ===================================================================

``keys`` — one row per program, :data:`KEY_SCHEMA`: ``key`` (UInt32, equal to the row
index), host, device, module, program_id. Keys may repeat a program (tables concatenated);
no analysis relies on a program having one key.

``frame()`` joins the two back into the wide
:data:`~traceview.model.schema.MODULE_RUNS_SCHEMA` frame (``Profile.module_runs``), in the
order of ``runs``.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from traceview.model.schema import MODULE_RUNS_SCHEMA

KEY_COLUMNS = ["host", "device", "module", "program_id"]
RUN_SCHEMA: dict[str, pl.DataType] = {"key": pl.UInt32, "start_ps": pl.Int64, "duration_ps": pl.Int64}
KEY_SCHEMA: dict[str, pl.DataType] = {"key": pl.UInt32, **{k: MODULE_RUNS_SCHEMA[k] for k in KEY_COLUMNS}}


class RunTable:
    """Module runs as ``runs`` (per execution, :data:`RUN_SCHEMA`) + ``keys`` (per program,
    :data:`KEY_SCHEMA`); see the module docstring. Immutable by convention."""

    __slots__ = ("runs", "keys", "_frame")

    def __init__(self, runs: pl.DataFrame, keys: pl.DataFrame):
        self.runs = runs
        self.keys = keys
        self._frame: pl.DataFrame | None = None

    @classmethod
    def empty(cls) -> "RunTable":
        """A table with no runs and no programs."""
        return cls(pl.DataFrame(schema=RUN_SCHEMA), pl.DataFrame(schema=KEY_SCHEMA))

    @classmethod
    def from_frame(cls, frame: pl.DataFrame) -> "RunTable":
        """Encode a wide :data:`~traceview.model.schema.MODULE_RUNS_SCHEMA` frame (missing
        columns are nulls); programs numbered in order of first appearance, nulls equal.
        Raises ``polars`` errors on uncastable columns."""
        if frame.height == 0:
            return cls.empty()
        missing = [c for c in MODULE_RUNS_SCHEMA if c not in frame.columns]
        if missing:
            frame = frame.with_columns([pl.lit(None, dtype=MODULE_RUNS_SCHEMA[c]).alias(c) for c in missing])
        frame = frame.select([pl.col(c).cast(t) for c, t in MODULE_RUNS_SCHEMA.items()])
        keys = frame.select(KEY_COLUMNS).unique(maintain_order=True).with_row_index("key")
        code = frame.select(KEY_COLUMNS).join(keys, on=KEY_COLUMNS, how="left", nulls_equal=True,
                                              maintain_order="left")["key"]
        runs = pl.DataFrame({"key": code, "start_ps": frame["start_ps"], "duration_ps": frame["duration_ps"]})
        return cls(runs, keys.cast(KEY_SCHEMA))

    @staticmethod
    def concat(tables: list["RunTable"]) -> "RunTable":
        """One table of ``tables`` in order (runs appended, each table's keys renumbered)."""
        tables = [t for t in tables if t.height or t.keys.height]
        if not tables:
            return RunTable.empty()
        if len(tables) == 1:
            return tables[0]
        runs, keys, off = [], [], 0
        for t in tables:
            runs.append(t.runs.with_columns((pl.col("key") + off).cast(pl.UInt32)))
            keys.append(t.keys.with_columns((pl.col("key") + off).cast(pl.UInt32)))
            off += t.keys.height
        return RunTable(pl.concat(runs, how="vertical"), pl.concat(keys, how="vertical"))

    @property
    def height(self) -> int:
        """Runs (rows of ``runs``)."""
        return self.runs.height

    def frame(self) -> pl.DataFrame:
        """The wide :data:`~traceview.model.schema.MODULE_RUNS_SCHEMA` frame, built once."""
        if self._frame is None:
            k = self.keys.drop("key")[self.runs["key"]] if self.keys.height else pl.DataFrame(
                schema={c: MODULE_RUNS_SCHEMA[c] for c in KEY_COLUMNS})
            if k.height != self.runs.height:  # no keys, no runs
                k = pl.DataFrame(schema={c: MODULE_RUNS_SCHEMA[c] for c in KEY_COLUMNS})
            self._frame = pl.concat([k, self.runs.drop("key")], how="horizontal").select(
                [pl.col(c).cast(t) for c, t in MODULE_RUNS_SCHEMA.items()])
        return self._frame

    def with_runs(self, runs: pl.DataFrame) -> "RunTable":
        """The same programs with ``runs`` (:data:`RUN_SCHEMA`) instead."""
        return RunTable(runs, self.keys)

    def with_keys(self, keys: pl.DataFrame) -> "RunTable":
        """The same runs with ``keys`` (:data:`KEY_SCHEMA`, same key numbers) instead."""
        return RunTable(self.runs, keys)

    def filter_keys(self, expr: pl.Expr) -> "RunTable":
        """The runs whose program (a row of ``keys``) matches ``expr``."""
        keep = self.keys.select(expr.fill_null(False).alias("k"))["k"].to_numpy()
        if keep.all():
            return self
        lut = np.zeros(len(keep) + 1, dtype=bool)
        lut[:-1] = keep
        return RunTable(self.runs.filter(pl.Series(lut[self.runs["key"].to_numpy()])), self.keys)

    def count_by(self, cols: list[str], name: str = "_runs") -> pl.DataFrame:
        """``cols`` (columns of ``keys``) and ``name`` (Int64): the runs per distinct value of
        ``cols`` (nulls equal), for the values that have runs."""
        n = np.bincount(self.runs["key"].to_numpy(), minlength=self.keys.height)
        return (self.keys.with_columns(pl.Series(name, n, dtype=pl.Int64)).group_by(cols)
                .agg(pl.col(name).sum()).filter(pl.col(name) > 0))

    def __repr__(self) -> str:
        return f"<RunTable: {self.height:,} runs of {self.keys.height:,} programs>"


def as_runs(module_runs) -> RunTable:
    """``module_runs`` as a :class:`RunTable`: itself, or a wide frame encoded; None or an
    empty frame gives an empty table."""
    if isinstance(module_runs, RunTable):
        return module_runs
    if module_runs is None:
        return RunTable.empty()
    return RunTable.from_frame(module_runs)
