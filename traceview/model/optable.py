"""The op-event table in dictionary-encoded form: per-event numbers plus one row per op description.

A profile's HLO op events repeat a few hundred op descriptions millions of times. Storing
every string column per event costs hundreds of bytes per event and makes every group-by hash
strings; :class:`OpTable` stores

``events`` — one row per op event, :data:`EVENT_SCHEMA` (36 bytes per event):

==============  ========  ===================================================================
attr            UInt32    row of ``attrs`` describing the op (its id)
start_ps        Int64     start, ps since the profile session start (null if pre-aggregated)
duration_ps     Int64     wall duration, ps (total over ``count`` when pre-aggregated)
self_ps         Int64     duration minus nested child ops on the same line, ps
count           Int64     occurrences the row stands for (1 unless pre-aggregated)
==============  ========  ===================================================================

``attrs`` — one row per distinct op description: ``attr`` (UInt32, equal to the row index)
then every other column of :data:`~traceview.model.schema.OPS_SCHEMA` (:data:`ATTR_COLUMNS`:
host, run, file, device, line, module, program_id, op_name, op_kind, category, shape,
hlo_text, kernel, source_file, source_line, source_stack, framework_op, flops,
model_flops, bytes_accessed, cost_source).

``frame()`` joins the two back into the wide :data:`~traceview.model.schema.OPS_SCHEMA` frame (what
``Profile.ops`` shows a notebook); ``collapse()`` sums the events per description, which is
all most analyses need (sums, counts, row-weighted modes, min/max per occurrence); only
medians and timelines (steps) go back to the events.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from traceview.model.schema import OPS_SCHEMA

try:  # optional C accelerator (setup.py); the numpy below gives the same values
    from traceview.model import _passes as _fast
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _fast = None

EVENT_COLUMNS = ["start_ps", "duration_ps", "self_ps", "count"]
EVENT_SCHEMA: dict[str, pl.DataType] = {"attr": pl.UInt32, **{k: OPS_SCHEMA[k] for k in EVENT_COLUMNS}}
ATTR_COLUMNS = [k for k in OPS_SCHEMA if k not in EVENT_COLUMNS]
ATTR_SCHEMA: dict[str, pl.DataType] = {"attr": pl.UInt32, **{k: OPS_SCHEMA[k] for k in ATTR_COLUMNS}}

#: rows per slice when :meth:`OpTable.collapse` aggregates the events
_SLICE_ROWS = 1 << 22



class OpTable:
    """HLO op events as ``events`` (per event, :data:`EVENT_SCHEMA`) + ``attrs`` (per op
    description, :data:`ATTR_SCHEMA`); see the module docstring. Immutable by convention:
    methods return new tables that may share frames with this one.

    Every ``events.attr`` value indexes a row of ``attrs``; ``attrs`` may hold descriptions no
    event uses (after :meth:`filter`), which no analysis sees because they all start from the
    events.
    """

    __slots__ = ("events", "attrs", "_frame", "_collapsed")

    def __init__(self, events: pl.DataFrame, attrs: pl.DataFrame):
        self.events = events
        self.attrs = attrs
        self._frame: pl.DataFrame | None = None
        self._collapsed: pl.DataFrame | None = None

    # -- construction -------------------------------------------------------------------
    @classmethod
    def empty(cls) -> "OpTable":
        """A table with no events and no descriptions."""
        return cls(pl.DataFrame(schema=EVENT_SCHEMA), pl.DataFrame(schema=ATTR_SCHEMA))

    @classmethod
    def from_frame(cls, ops: pl.DataFrame) -> "OpTable":
        """Encode a wide :data:`~traceview.model.schema.OPS_SCHEMA` frame (missing columns are
        filled with nulls / defaults). Descriptions are numbered in order of first
        appearance; nulls compare equal. Raises ``polars`` errors on uncastable columns."""
        if ops.height == 0:
            return cls.empty()
        missing = [c for c in OPS_SCHEMA if c not in ops.columns]
        if missing:
            ops = ops.with_columns([pl.lit(None, dtype=OPS_SCHEMA[c]).alias(c) for c in missing])
        ops = ops.select([pl.col(c).cast(t) for c, t in OPS_SCHEMA.items()])
        groups = (ops.select(ATTR_COLUMNS).with_row_index("_row")
                  .group_by(ATTR_COLUMNS, maintain_order=True).agg(pl.col("_row")))
        attr = np.empty(ops.height, dtype=np.uint32)
        rows = groups["_row"]
        lens = rows.list.len().to_numpy()
        attr[rows.explode().to_numpy()] = np.repeat(np.arange(groups.height, dtype=np.uint32), lens)
        attrs = groups.drop("_row").with_row_index("attr").select(list(ATTR_SCHEMA)).cast(ATTR_SCHEMA)
        events = ops.select(EVENT_COLUMNS).with_columns(pl.Series("attr", attr, dtype=pl.UInt32)).select(list(EVENT_SCHEMA))
        return cls(events, attrs)

    @classmethod
    def from_parts(cls, attr: np.ndarray, start_ps, duration_ps, self_ps, count, attrs: pl.DataFrame,
                   collapsed: pl.DataFrame | None = None) -> "OpTable":
        """Build from per-event arrays (``attr`` indexes ``attrs`` rows; ``start_ps`` may hold
        nulls as a polars Series) and an attrs frame without the ``attr`` column (it is added).
        ``collapsed``: the per-description aggregates of :meth:`collapse` (columns ``attr``
        then ``count`` .. ``first_ps``, one row per description with events) when the caller
        computed them already; they are joined to the attrs as :meth:`collapse` joins its own.
        Raises ``ValueError`` when an ``attr`` value is outside ``attrs``."""
        attr = np.asarray(attr)
        if len(attr) and (int(attr.max()) >= attrs.height or int(attr.min()) < 0):
            raise ValueError("event attr id outside the attrs table")
        events = pl.DataFrame({
            "attr": pl.Series("attr", attr, dtype=pl.UInt32),
            "start_ps": pl.Series("start_ps", start_ps, dtype=pl.Int64),
            "duration_ps": pl.Series("duration_ps", duration_ps, dtype=pl.Int64),
            "self_ps": pl.Series("self_ps", self_ps, dtype=pl.Int64),
            "count": pl.Series("count", count, dtype=pl.Int64),
        })
        a = attrs.with_row_index("attr").select(list(ATTR_SCHEMA)).cast(ATTR_SCHEMA)
        out = cls(events, a)
        if collapsed is not None:
            out._collapsed = _with_sums(a, collapsed)
        return out

    @staticmethod
    def concat(tables: list["OpTable"]) -> "OpTable":
        """One table holding every table's events (in order); attr ids are renumbered."""
        tables = [t for t in tables if t is not None]
        if not tables:
            return OpTable.empty()
        if len(tables) == 1:
            return tables[0]
        evs, ats, off = [], [], 0
        for t in tables:
            evs.append(t.events.with_columns((pl.col("attr") + off).cast(pl.UInt32)))
            ats.append(t.attrs.with_columns((pl.col("attr") + off).cast(pl.UInt32)))
            off += t.attrs.height
        # rechunk=False: the events stay in their per-file chunks, not copied into one
        return OpTable(pl.concat(evs, how="vertical", rechunk=False), pl.concat(ats, how="vertical"))

    # -- views --------------------------------------------------------------------------
    @property
    def height(self) -> int:
        """Number of op events (rows of the wide frame)."""
        return self.events.height

    def frame(self, columns: list[str] | None = None) -> pl.DataFrame:
        """The wide op-event frame (:data:`~traceview.model.schema.OPS_SCHEMA`, or just ``columns``
        of it, in that order), one row per event in event order. The full frame is cached:
        on millions of events it costs ~16 bytes per string column per event."""
        if columns is None and self._frame is not None:
            return self._frame
        cols = list(OPS_SCHEMA) if columns is None else list(columns)
        want_attr = [c for c in cols if c in ATTR_SCHEMA and c != "attr"]
        ev = self.events
        if want_attr:
            ev = ev.join(self.attrs.select(["attr"] + want_attr), on="attr", how="left", maintain_order="left")
        out = ev.select(cols)
        if columns is None:
            self._frame = out
        return out

    def collapse(self) -> pl.DataFrame:
        """One row per description that has events: the :data:`ATTR_SCHEMA` columns, then
        ``count``, ``duration_ps``, ``self_ps`` (sums over its events), ``rows`` (number of
        events), ``min_ps`` / ``max_ps`` (shortest / longest duration per occurrence,
        ``duration_ps / count`` truncated; null past int64) and ``first_ps`` (earliest start,
        null if none). Ordered by attr id. Cached."""
        if self._collapsed is not None:
            return self._collapsed
        agg = _collapse_counted(self.events)
        if agg is None:
            agg = _collapse_grouped(self.events)
        self._collapsed = _with_sums(self.attrs, agg)
        return self._collapsed

    def event_keys(self, keys: pl.DataFrame) -> np.ndarray:
        """Per event, the ``key`` (UInt32) that the frame ``keys`` (columns ``attr``, ``key``)
        gives its description; -1 where its description is not in ``keys``. int64 array."""
        lut = np.full(self.attrs.height + 1, -1, dtype=np.int64)
        if keys.height:
            lut[keys["attr"].to_numpy().astype(np.int64)] = keys["key"].to_numpy().astype(np.int64)
        return lut[self.events["attr"].to_numpy()]

    def filter(self, attr_mask: pl.Expr) -> "OpTable":
        """The events whose description matches ``attr_mask`` (an expression over ``attrs``
        columns); attrs are kept whole so ids stay valid."""
        keep = self.attrs.filter(attr_mask)["attr"]
        return OpTable(self.events.filter(pl.col("attr").is_in(keep.to_list())), self.attrs)

    def total_self_ps(self) -> int:
        """Sum of self time over all events, ps."""
        return int(self.events["self_ps"].sum() or 0) if self.events.height else 0

    def __repr__(self) -> str:
        return f"<OpTable: {self.events.height:,} events, {self.attrs.height:,} descriptions>"


def _with_sums(attrs: pl.DataFrame, agg: pl.DataFrame) -> pl.DataFrame:
    """``attrs`` inner-joined with the per-description sums ``agg`` on ``attr``, ordered by
    attr: the columns side by side (no copy) when ``agg`` holds every description in order,
    else a join that keeps the order of ``attrs`` when it is sorted (no sort of the strings)."""
    if agg.height == attrs.height and agg["attr"].equals(attrs["attr"]):
        return attrs.hstack(agg.drop("attr").get_columns())
    if attrs["attr"].is_sorted():
        return attrs.join(agg, on="attr", how="inner", maintain_order="left")
    return attrs.join(agg, on="attr", how="inner").sort("attr")


def as_table(ops) -> OpTable:
    """``ops`` as an :class:`OpTable`: returned as is, or a wide frame encoded."""
    if isinstance(ops, OpTable):
        return ops
    return OpTable.from_frame(ops)


def weighted_mode(df: pl.DataFrame, keys: list[str], col: str, weight: str = "rows",
                  skip_empty: bool = True) -> pl.DataFrame:
    """Per ``keys`` group of ``df``, the value of ``col`` with the largest total ``weight``
    (ties: the smallest value), as column ``col``; empty strings and nulls are skipped when
    ``skip_empty``. Groups with no value are absent (join with ``how="left"``)."""
    d = df
    if skip_empty:
        d = d.filter(pl.col(col).is_not_null() & (pl.col(col).cast(pl.Utf8) != ""))
    if d.height == 0:
        return pl.DataFrame(schema={**{k: df.schema[k] for k in keys}, col: df.schema[col]})
    w = d.group_by(keys + [col]).agg(pl.col(weight).sum().alias("_w"))
    return (w.sort(["_w", col], descending=[True, False], nulls_last=True)
            .group_by(keys, maintain_order=True).first().select(keys + [col]))


def _collapse_grouped(events: pl.DataFrame) -> pl.DataFrame:
    """:meth:`OpTable.collapse`'s per-description figures (attr, count, duration_ps, self_ps,
    rows, min_ps, max_ps, first_ps; one row per attr id with events, any order) by polars
    group-bys, slice by slice: the temporaries stay bounded on tens of millions of events and
    every aggregate is decomposable (sums, counts, min, max)."""
    parts = []
    for ev in (events.iter_slices(_SLICE_ROWS) if events.height else [events]):
        if ev.height and int(ev["count"].max() or 1) <= 1:
            per = pl.col("duration_ps")  # one occurrence per row: the per-occurrence time is exact
        else:
            per = pl.col("duration_ps") / pl.col("count")
        parts.append(ev.group_by("attr").agg(
            pl.col("count").sum(),
            pl.col("duration_ps").sum(),
            pl.col("self_ps").sum(),
            pl.len().cast(pl.UInt32).alias("rows"),
            per.min().cast(pl.Int64, strict=False).alias("min_ps"),
            per.max().cast(pl.Int64, strict=False).alias("max_ps"),
            pl.col("start_ps").min().alias("first_ps"),
        ))
    agg = pl.concat(parts, how="vertical")
    if len(parts) > 1:
        agg = agg.group_by("attr").agg(
            pl.col("count").sum(), pl.col("duration_ps").sum(), pl.col("self_ps").sum(),
            pl.col("rows").sum(), pl.col("min_ps").min(), pl.col("max_ps").max(), pl.col("first_ps").min())
    return agg


def collapsed_sums(table: "OpTable") -> tuple[np.ndarray, np.ndarray]:
    """Per description (``table.attrs`` row id), self_ps and count of the collapsed rows as
    float64 arrays (0 where a description has no event): :func:`float_attr_sums` when its
    sums are exact."""
    col = table.collapse()
    ids = col["attr"].to_numpy().astype(np.int64)
    t, c = np.zeros(table.attrs.height), np.zeros(table.attrs.height)
    t[ids] = col["self_ps"].to_numpy()
    c[ids] = col["count"].to_numpy()
    return t, c


def float_attr_sums(table: "OpTable") -> tuple[np.ndarray, np.ndarray]:
    """Per description (``table.attrs`` row id), its events' self_ps and count summed as float64
    bincounts sum them (null self_ps as 0, null count as 1): read from the collapsed rows (cached)
    when no column has a null and no partial sum can reach 2**53 (:func:`_sums_exact`: the float
    sums are then the exact integer sums), else one bincount each (in one C pass without nulls,
    bit for bit the same)."""
    ev = table.events
    n = table.attrs.height
    if ev.height and not ev["self_ps"].null_count() and not ev["count"].null_count():
        lo_s, hi_s, lo_c, hi_c, sum_s, sum_c = ev.select(
            pl.col("self_ps").min().alias("a"), pl.col("self_ps").max().alias("b"), pl.col("count").min().alias("c"),
            pl.col("count").max().alias("d"), pl.col("self_ps").sum().alias("e"), pl.col("count").sum().alias("f")).row(0)
        if (_sums_exact(lo_s, hi_s, sum_s, ev.height) and _sums_exact(lo_c, hi_c, sum_c, ev.height)):
            return collapsed_sums(table)
    if _fast is not None and ev.height and not ev["self_ps"].null_count() and not ev["count"].null_count():
        t, c = np.zeros(n), np.zeros(n)
        if _fast.attr_float_sums(np.ascontiguousarray(ev["attr"].to_numpy(), dtype=np.uint32),
                                 np.ascontiguousarray(ev["self_ps"].to_numpy(), dtype=np.int64),
                                 np.ascontiguousarray(ev["count"].to_numpy(), dtype=np.int64), t, c):
            return t, c
    a = ev["attr"].to_numpy().astype(np.int64)
    return (np.bincount(a, weights=ev["self_ps"].fill_null(0).to_numpy().astype(np.float64), minlength=n),
            np.bincount(a, weights=ev["count"].fill_null(1).to_numpy().astype(np.float64), minlength=n))


def _sums_exact(lo: int, hi: int, total: int, n: int) -> bool:
    """Whether float64 accumulation of ``n`` integers in [``lo``, ``hi``] (``total``: their
    int64 sum) in any grouping and order is exact: every partial sum stays below 2**53. For
    values >= 0 that holds when the total does (the total being exact when ``hi * n`` fits
    int64); otherwise when ``max(|lo|, |hi|) * n`` is below 2**53."""
    if lo >= 0 and hi * n < (1 << 63):
        return total < (1 << 53)
    return max(abs(lo), abs(hi)) * n < (1 << 53)


def first_positions(keys: np.ndarray, n: int) -> np.ndarray:
    """Per key in [0, n): the position of its first occurrence in ``keys`` (int64), or
    ``len(keys)`` for a key that does not occur (one ``np.minimum.at``)."""
    first = np.full(n, len(keys), dtype=np.int64)
    np.minimum.at(first, keys, np.arange(len(keys), dtype=np.int64))
    return first


def int_bincount(keys: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Exact int64 sums of ``values`` per key in [0, n): ``np.bincount`` (float64) when no
    partial sum can reach 2**53 (:func:`_sums_exact`), else ``np.add.at``."""
    if len(values) == 0:
        return np.zeros(n, dtype=np.int64)
    lo, hi = int(values.min()), int(values.max())
    total = int(values.sum(dtype=np.int64)) if lo >= 0 and hi * len(values) < (1 << 63) else 0
    if _sums_exact(lo, hi, total, len(values)):
        return np.bincount(keys, weights=values, minlength=n).astype(np.int64)
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, keys, values)
    return out


def _c_collapse(a: np.ndarray, events: pl.DataFrame, size: int) -> pl.DataFrame | None:
    """:func:`_collapse_counted`'s frame of events that are each one occurrence (``count`` 1),
    from one C pass over the attr ids ``a`` (``_passes.attr_stats``, < ``size``); None when
    the pass refuses its input."""
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    rows = np.zeros(size, dtype=np.int64)
    dsum, ssum = np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int64)
    mn, mx, first = np.full(size, big, dtype=np.int64), np.full(size, small, dtype=np.int64), \
        np.full(size, big, dtype=np.int64)
    col = {c: np.ascontiguousarray(events[c].to_numpy(), dtype=np.int64) for c in ("start_ps", "duration_ps", "self_ps")}
    if not _fast.attr_stats(np.ascontiguousarray(a, dtype=np.uint32), col["start_ps"], col["duration_ps"],
                            col["self_ps"], rows, dsum, ssum, mn, mx, first):
        return None
    ids = np.flatnonzero(rows)
    return pl.DataFrame({"attr": pl.Series(ids, dtype=pl.UInt32), "count": pl.Series(rows[ids], dtype=pl.Int64),
                         "duration_ps": pl.Series(dsum[ids], dtype=pl.Int64),
                         "self_ps": pl.Series(ssum[ids], dtype=pl.Int64),
                         "rows": pl.Series(rows[ids], dtype=pl.UInt32),
                         "min_ps": pl.Series(mn[ids], dtype=pl.Int64), "max_ps": pl.Series(mx[ids], dtype=pl.Int64),
                         "first_ps": pl.Series(first[ids], dtype=pl.Int64)})


def _collapse_counted(events: pl.DataFrame) -> pl.DataFrame | None:
    """:func:`_collapse_grouped`'s frame (rows by attr id) by counting over the attr ids
    (one C pass when every count is 1, :func:`_c_collapse`; else :func:`int_bincount` sums,
    exact minima and maxima by ``ufunc.at``), when every event is
    at most one occurrence (``count`` <= 1: the per-occurrence time is the duration) and no
    column has a null; None otherwise (the group-by then)."""
    cols = ("count", "duration_ps", "self_ps", "start_ps")
    if (events.height == 0 or events["attr"].dtype != pl.UInt32 or events["attr"].null_count()
            or any(events[c].dtype != pl.Int64 or events[c].null_count() for c in cols)):
        return None
    count = events["count"].to_numpy()
    if int(count.max()) > 1:
        return None
    a = events["attr"].to_numpy()
    size = int(a.max()) + 1
    if _fast is not None and int(count.min()) == 1:  # one occurrence each: one C pass (count sums = rows)
        got = _c_collapse(a, events, size)
        if got is not None:
            return got
    rows = np.bincount(a, minlength=size)
    ids = np.flatnonzero(rows)
    out = {"attr": pl.Series(ids, dtype=pl.UInt32)}
    for c in ("count", "duration_ps", "self_ps"):
        out[c] = pl.Series(int_bincount(a, events[c].to_numpy(), size)[ids], dtype=pl.Int64)
    out["rows"] = pl.Series(rows[ids], dtype=pl.UInt32)
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    dur = events["duration_ps"].to_numpy()
    for c, ufunc, init, src in (("min_ps", np.minimum, big, dur), ("max_ps", np.maximum, small, dur),
                                ("first_ps", np.minimum, big, events["start_ps"].to_numpy())):
        v = np.full(size, init, dtype=np.int64)
        ufunc.at(v, a, src)
        out[c] = pl.Series(v[ids], dtype=pl.Int64)
    return pl.DataFrame(out)
