"""traceview.model.bounds.clamp_profile: its shortcut (count times largest value at most half
of SUM_LIMIT: no float64 sum taken) clamps exactly where the float64 sums do."""

from __future__ import annotations

import polars as pl
import pytest

from traceview.model import bounds
from traceview.model.bounds import SUM_LIMIT, clamp_profile
from traceview.model.optable import OpTable
from traceview.model.runtable import RunTable


def _events(durs, counts=None):
    n = len(durs)
    return pl.DataFrame({"attr": pl.Series([0] * n, dtype=pl.UInt32),
                         "start_ps": pl.Series(range(n), dtype=pl.Int64),
                         "duration_ps": pl.Series(durs, dtype=pl.Int64),
                         "self_ps": pl.Series(durs, dtype=pl.Int64),
                         "count": pl.Series(counts or [1] * n, dtype=pl.Int64)})


@pytest.mark.parametrize("durs, counts, clamped", [
    ([SUM_LIMIT // 4, SUM_LIMIT // 4], None, False),  # the shortcut: at most half
    ([SUM_LIMIT // 2, SUM_LIMIT // 2, 1], None, False),  # past half, not past the limit: summed
    ([SUM_LIMIT // 2, SUM_LIMIT // 2, SUM_LIMIT // 2], None, True),
    ([1, 2], [SUM_LIMIT // 2, SUM_LIMIT], True),
    ([None, 5], None, False),
    ([-(1 << 62), 5], None, False),
])
def test_clamp_profile_clamps_where_the_sums_pass_the_limit(durs, counts, clamped):
    ev = _events(durs, counts)
    runs = RunTable(pl.DataFrame({"key": pl.Series([0] * len(durs), dtype=pl.UInt32),
                                  "start_ps": pl.Series(range(len(durs)), dtype=pl.Int64),
                                  "duration_ps": pl.Series(durs, dtype=pl.Int64)}), RunTable.empty().keys)
    table, got_runs, notes = clamp_profile(OpTable(ev, pl.DataFrame()), runs)
    d = float(ev["duration_ps"].cast(pl.Float64).sum() or 0.0)
    c = float(ev["count"].cast(pl.Float64).sum() or 0.0)
    assert (d > SUM_LIMIT or c > SUM_LIMIT) == clamped
    assert bool(notes) == (clamped or d > SUM_LIMIT)
    assert (table.events is ev) == (not clamped)
    assert (got_runs is runs) == (d <= SUM_LIMIT)


def test_below():
    assert bounds._below(pl.Series([SUM_LIMIT // 4] * 2, dtype=pl.Int64))
    assert not bounds._below(pl.Series([SUM_LIMIT // 4 + 1] * 2, dtype=pl.Int64))
    assert bounds._below(pl.Series([None, None], dtype=pl.Int64))
    assert bounds._below(pl.Series([], dtype=pl.Int64))
    assert bounds._below(pl.Series([-5, 0], dtype=pl.Int64))
