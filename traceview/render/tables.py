"""An op table as CSV holds it: list columns (modules) joined with ``;``."""

from __future__ import annotations

import orjson
import polars as pl


def flat(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with every list column joined into one ``;``-separated string (elements of any
    type as their text; nested lists, structs and arrays as JSON text)."""
    out = []
    for c, t in df.schema.items():
        if isinstance(t, pl.List) and not isinstance(t.inner, (pl.List, pl.Struct, pl.Array)):
            out.append(pl.col(c).list.eval(pl.element().cast(pl.String)).list.join(";"))
        elif isinstance(t, (pl.List, pl.Struct, pl.Array)):
            out.append(pl.col(c).map_elements(lambda v: orjson.dumps(_plain(v)).decode(), return_dtype=pl.String,
                                              skip_nulls=True))
    return df.with_columns(out) if out else df


def _plain(v):
    """A polars cell (Series, dict, list) as plain Python for orjson."""
    if isinstance(v, pl.Series):
        return [_plain(x) for x in v.to_list()]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v if isinstance(v, (str, int, float, bool)) or v is None else str(v)


def terminal_safe(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with every string cell and column name made safe on a terminal
    (:func:`~traceview.model.naming.safe_line`: control characters as ``\x1b``), for CSV
    written to a terminal; files and pipes get the exact strings."""
    from traceview.model.naming import safe_line

    return safe_names(df.with_columns(pl.col(c).map_elements(safe_line, return_dtype=pl.String)
                                      for c, t in df.schema.items() if t == pl.String))


def safe_names(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with its column names (a query's aliases) made safe on a terminal
    (:func:`~traceview.model.naming.safe_line`); a name the escaping makes equal to another
    gets a ``_N`` suffix."""
    from traceview.model.naming import safe_line

    names, seen = [], set(df.columns)
    for c in df.columns:
        s = safe_line(c)
        if s != c:
            base, n = s, 2
            while s in seen:
                s, n = f"{base}_{n}", n + 1
            seen.add(s)
        names.append(s)
    return df.rename(dict(zip(df.columns, names))) if names != df.columns else df

