"""An op table as CSV holds it: list columns (modules) joined with ``;``."""

from __future__ import annotations

import polars as pl


def flat(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with every list column joined into one ``;``-separated string."""
    return df.with_columns([pl.col(c).list.join(";") for c, t in df.schema.items() if isinstance(t, pl.List)])
