"""Figures of an op table's event columns that several sections of one report read, each
computed once per events frame: the range, sum and null count of ``self_ps`` and ``count``
(:func:`ranges`) and the per-description float sums
(:func:`~traceview.model.optable.float_attr_sums`, :func:`float_attr_sums`).

A report's sections each scanned the millions of event rows again for the same minimum,
maximum or total; here the first reader computes them and the others read them back. Kept
while the events frame lives (keyed by the frame itself, dropped with it). Results are
shared: callers treat them as read-only.
"""

from __future__ import annotations

import weakref

import polars as pl

_KEPT: dict = {}  # id(events frame) -> (weak reference to it, {figure name: value})


def _memo(events: pl.DataFrame, name: str, make):
    key = id(events)
    got = _KEPT.get(key)
    if got is None or got[0]() is not events:
        got = _KEPT[key] = (weakref.ref(events, lambda _ref, key=key: _KEPT.pop(key, None)), {})
    figures = got[1]
    if name not in figures:
        figures[name] = make()
    return figures[name]


def ranges(table) -> dict:
    """Of ``table.events`` (an :class:`~traceview.model.optable.OpTable`'s): ``self_min``,
    ``self_max``, ``self_sum``, ``self_nulls``, ``count_min``, ``count_max``, ``count_sum``,
    ``count_nulls`` (polars' min, max, sum and null count of each column; min and max None
    for an empty or all-null column), in one pass."""
    ev = table.events

    def make():
        row = ev.select(
            pl.col("self_ps").min().alias("self_min"), pl.col("self_ps").max().alias("self_max"),
            pl.col("self_ps").sum().alias("self_sum"), pl.col("self_ps").null_count().alias("self_nulls"),
            pl.col("count").min().alias("count_min"), pl.col("count").max().alias("count_max"),
            pl.col("count").sum().alias("count_sum"), pl.col("count").null_count().alias("count_nulls"),
        ).row(0, named=True)
        return row

    return _memo(ev, "ranges", make)


def total_self_ps(table) -> int:
    """:meth:`~traceview.model.optable.OpTable.total_self_ps` of ``table``, from :func:`ranges`."""
    if not table.events.height:
        return 0
    return int(ranges(table)["self_sum"] or 0)


def float_attr_sums(table) -> tuple:
    """:func:`traceview.model.optable.float_attr_sums` of ``table``, once per events frame: read
    off the collapsed rows, as it does, when :func:`ranges` show the float sums exact, else
    that function."""
    from traceview.model.optable import _sums_exact, collapsed_sums, float_attr_sums as _sums

    def make():
        ev = table.events
        r = ranges(table) if ev.height else None
        if (r is not None and not r["self_nulls"] and not r["count_nulls"]
                and _sums_exact(r["self_min"], r["self_max"], r["self_sum"], ev.height)
                and _sums_exact(r["count_min"], r["count_max"], r["count_sum"], ev.height)):
            return collapsed_sums(table)
        return _sums(table)

    return _memo(table.events, ("float_attr_sums", table.attrs.height), make)
