"""A SQL result (``traceview query``) as a plain-text table: one frame in, text out."""

from __future__ import annotations

import polars as pl

from traceview.model.naming import safe_line
from traceview.render.tables import flat, safe_names

#: cells longer than this are cut for display (the JSON, CSV and Parquet keep them whole)
CELL_CHARS = 120


def query_text(df: pl.DataFrame, *, top: int, title: str, total: int | None = None) -> str:
    """``df``'s first ``top`` rows as a Markdown-style table under ``title``, with a line
    saying how many rows are shown of how many (``total``: the whole result's rows when ``df``
    holds only its first ones, else ``df.height``); list columns joined with ``;``, strings from
    the trace and column names escaped (:func:`traceview.model.naming.safe_line`) and cut at :data:`CELL_CHARS`."""
    shown = safe_names(flat(df.head(top)))
    shown = shown.with_columns(
        pl.col(c).map_elements(lambda s: safe_line(s)[:CELL_CHARS], return_dtype=pl.String)
        for c, t in shown.schema.items() if t == pl.String)
    with pl.Config(tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=CELL_CHARS, tbl_width_chars=60_000,
                   tbl_formatting="ASCII_MARKDOWN", tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=False,
                   fmt_float="full", thousands_separator=False):
        body = str(shown)
    return f"{safe_line(title)}\n{body}\n{shown.height} of {df.height if total is None else total} rows\n"
