"""The dictionary-encoded module runs (:mod:`traceview.model.runtable`)."""

import polars as pl
from polars.testing import assert_frame_equal

from traceview.model.runtable import RunTable, as_runs
from traceview.model.schema import MODULE_RUNS_SCHEMA


def _wide(rows):
    return pl.DataFrame(rows, schema=MODULE_RUNS_SCHEMA, orient="row")


WIDE = _wide([("h", "/device:GPU:0", "jit_a", 1, 10, 5), ("h", "/device:GPU:1", "jit_b", 2, 12, 3),
              ("h", "/device:GPU:0", "jit_a", 1, 20, 4), ("h", "/device:GPU:0", None, None, None, 1)])


def test_round_trip_concat_and_filter():
    rt = RunTable.from_frame(WIDE)
    assert rt.height == 4 and rt.keys.height == 3  # nulls are one program
    assert_frame_equal(rt.frame(), WIDE)
    assert as_runs(rt) is rt and as_runs(None).height == 0 and as_runs(WIDE.clear()).frame().schema == WIDE.schema
    both = RunTable.concat([rt, RunTable.from_frame(WIDE.head(2))])
    assert_frame_equal(both.frame(), pl.concat([WIDE, WIDE.head(2)]))
    gpu0 = rt.filter_keys(pl.col("device") == "/device:GPU:0")
    assert_frame_equal(gpu0.frame(), WIDE.filter(pl.col("device") == "/device:GPU:0"))
    counts = rt.count_by(["device"]).sort("device")
    assert counts.rows() == [("/device:GPU:0", 3), ("/device:GPU:1", 1)]
    assert RunTable.empty().frame().schema == pl.Schema(MODULE_RUNS_SCHEMA)
