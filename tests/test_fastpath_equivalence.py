"""The array fast paths of this session's analyses against the frame code they replaced, on
randomised inputs (fixed seeds) with the cases a trace can hold: nulls, ties, empty inputs,
several devices whose rows interleave, unsorted rows, events outside every step."""

from __future__ import annotations

import numpy as np
import polars as pl

import traceview
from traceview.analysis.compare import samples
from traceview.analysis.ops.tagged import _first_rows
from traceview.analysis.steps.stepstats import step_walls


def _walls_by_frame(steps: pl.DataFrame) -> np.ndarray:
    if steps.height == 0:
        return np.zeros(0, dtype=np.int64)
    w = (steps.filter(pl.col("duration_ps").is_not_null()).group_by("step")
         .agg(pl.col("duration_ps").max()).sort("step"))
    return w["duration_ps"].to_numpy().astype(np.int64)


def test_step_walls_equal_the_group_by():
    rng = np.random.default_rng(7)
    for _ in range(400):
        n = int(rng.integers(0, 14))
        step = rng.integers(0, 5, n)
        if rng.random() < 0.5:
            step = np.sort(step)  # one device's rows, in step order
        dur = [None if rng.random() < 0.2 else int(v) for v in rng.integers(0, 100, n)]
        steps = step.tolist()
        if n and rng.random() < 0.2:
            steps[0] = None
        df = pl.DataFrame({"step": pl.Series(steps, dtype=pl.Int64), "duration_ps": pl.Series(dur, dtype=pl.Int64)})
        got, want = step_walls(df), _walls_by_frame(df)
        assert got.dtype == want.dtype == np.int64
        assert np.array_equal(got, want), df


def _per_step_by_dict(pop, self_ps, step_rows):
    out = {}
    for p in range(int(pop.max()) + 1 if len(pop) else 0):
        m = (pop == p) & (step_rows >= 0)
        st, w = step_rows[m], self_ps[m]
        u = np.unique(st)
        if len(u) >= samples.MIN_STEPS:
            out[p] = np.array([w[st == x].sum() for x in u], dtype=np.float64)
    return out


def test_per_step_sort_paths_equal_the_sums():
    """Steps ascending in event order (the radix path) or not (the key sort), events outside
    every step or of no population, several devices' rows one after another."""
    rng = np.random.default_rng(11)
    for n, n_pop, n_steps, layout in [(3000, 6, 400, "one device"), (3000, 6, 400, "shuffled"),
                                       (4000, 30, 900, "devices in turn"), (500, 3, 50, "one device")]:
        pop = rng.integers(-1, n_pop, n).astype(np.int32)
        if layout == "one device":
            sr = np.sort(rng.integers(-1, n_steps, n))
        elif layout == "devices in turn":
            sr = np.concatenate([np.sort(rng.integers(-1, n_steps, n // 2)), np.sort(rng.integers(-1, n_steps, n // 2))])
        else:
            sr = rng.integers(-1, n_steps, n)
        w = rng.integers(0, 10**9, n).astype(np.int64)
        want = _per_step_by_dict(pop, w, sr)
        for runs, cells in [(False, 0), (True, 1 << 20), (True, 64), (True, 7)]:  # the sort; the grid in runs
            got = samples._per_step(pop, w, sr, dense=False, runs=runs, chunk_cells=cells)
            assert got.keys() == want.keys(), (layout, runs, cells)
            assert all(got[k].dtype == np.float64 and np.array_equal(got[k], want[k]) for k in want), (layout, cells)


def test_ascending_grid_goes_only_where_its_steps_ascend():
    """The grid in runs takes steps ascending over the events inside a step (events outside
    anywhere, steps with gaps, a step number past 2**31 refused) and leaves the rest to the sort."""
    pop = np.array([0, 1, 0, -1, 1, 0, 1, 0], dtype=np.int32)
    w = np.arange(1, 9, dtype=np.int64) * 10**6
    sr = np.array([-1, 3, 3, 5, -1, 900, 900, 901], dtype=np.int64)
    got = samples._ascending_grid(pop, w, sr, 2, 902, chunk_cells=4)
    assert got is not None and got.keys() == {0, 1}
    assert got[0].tolist() == [3e6, 6e6, 8e6] and got[1].tolist() == [2e6, 7e6]
    assert samples._ascending_grid(pop, w, sr[::-1].copy(), 2, 902) is None  # descending
    big = sr.copy()
    big[-1] = 1 << 31
    assert samples._ascending_grid(pop, w, big, 2, (1 << 31) + 1) is None
    assert samples._per_step(pop, w, big, dense=False).keys() == {0, 1}  # the sort takes it


def test_first_rows_equal_the_group_by(shared_traces):
    for name in ("mi300x_jax_attention.xplane.pb", "tpu_v6e_4chip_psum.xplane.pb"):
        table = traceview.load(shared_traces / name, stale_after_s=None, cache=False).table
        want = (table.events.select("attr").with_row_index("_i").group_by("attr")
                .agg(pl.col("_i").min().cast(pl.Int64).alias("first_row")).sort("attr"))
        assert _first_rows(table).sort("attr").equals(want)


def test_family_time_of_some_steps_equals_the_whole_filtered(shared_traces):
    """family_time_by_step(step_rows) (the step chart's first steps) against the whole
    result filtered to those rows, on a TPU trace of 4 devices and a GPU trace."""
    for name in ("tpu_v6e_4chip_psum.xplane.pb", "mi300x_jax_gemm_sweep.xplane.pb"):
        an = traceview.load(shared_traces / name, stale_after_s=None, cache=False).steps()
        whole = an.family_time_by_step()
        rows = np.arange(0, an.steps.height, 3)
        some = an.family_time_by_step(rows)
        assert some.height and some.equals(whole.filter(pl.col("step_row").is_in(rows.tolist())))


def test_step_order_equals_the_frame_sort(shared_traces):
    """stepstats.step_order by numpy's stable sorts against the polars sorts it replaced:
    random durations with many ties (scaled traces repeat steps exactly), outliers anywhere,
    nulls (the frame path), and the anatomies of stepped shared traces."""
    from traceview.analysis import derived
    from traceview.analysis.steps.stepstats import _step_order_frame, step_order

    rng = np.random.default_rng(5)
    for _ in range(300):
        n = int(rng.integers(1, 60))
        d = rng.integers(0, int(rng.choice([2, 5, 10**9])), n).astype(np.int64)
        o = rng.random(n) < rng.random()
        frame = pl.DataFrame({"duration_ps": d, "outlier": o})
        if rng.random() < 0.2:
            frame = frame.with_columns(pl.when(pl.int_range(pl.len()) % 3 == 0).then(None)
                                       .otherwise(pl.col("duration_ps")).alias("duration_ps"))
        got, want = step_order(frame), _step_order_frame(frame)
        assert got.dtype == want.dtype == np.uint32 and np.array_equal(got, want), frame
    for name in ("tpu_v6e_4chip_psum.xplane.pb", "mi300x_jax_attention.xplane.pb", "mi300x_jax_gemm_sweep.xplane.pb"):
        a = derived.step_anatomy(traceview.load(shared_traces / name, stale_after_s=None, cache=False), None)
        assert a.steps.height and np.array_equal(step_order(a.steps), _step_order_frame(a.steps))
