"""The step analyses' shortcuts equal the general computations they skip.

* the module runs' alignment with its C check that every run starts its op chunk
  (``chunks_inside``) equals numpy's per-program check, on every trace and on random runs;
* the first rows of the per-step table by a partition equal the full stable sort's;
* the family roofline read off the anatomy's window sums equals its own pass over the events;
* the step programs' codes by a lookup table equal those of a sort, and ``_several`` equals
  ``n_unique() > 1``;
* the event-column figures kept per events frame (:mod:`traceview.analysis.eventstats`) equal
  the table's own: its total self time and :func:`~traceview.model.optable.float_attr_sums`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceview.analysis.steps import anatomy, stepstats

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _profiles(shared_traces):
    import traceview

    paths = sorted(p for p in shared_traces.glob("*.xplane.pb") if "corrupt" not in p.name and "bert" not in p.name)
    paths += [shared_traces / "vllm_tpu_qwen"] + sorted(d for d in FIXTURES.iterdir() if (d / "plugins").exists())
    return [(str(p), traceview.load(p, cache=False, stale_after_s=None)) for p in paths]


def test_alignment_and_anatomy_do_not_depend_on_the_c_passes(shared_traces, monkeypatch):
    """align_module_runs and the step anatomy with the C chunk passes equal them without (numpy
    per program), on every shared trace and fixture, runs rebuilt (the v6e trace) or not."""
    got = {}
    profs = _profiles(shared_traces)
    for name, prof in profs:
        runs, fixed = anatomy.align_module_runs(prof.table, prof.runs)
        a = anatomy.profile_anatomy(prof)
        got[name] = (runs, fixed, a.steps)
    assert any(g[1] for g in got.values())  # some trace has its runs rebuilt
    monkeypatch.setattr(anatomy, "_fast", None)
    for name, prof in profs:
        runs, fixed = anatomy.align_module_runs(prof.table, prof.runs)
        a = anatomy.profile_anatomy(prof)
        assert runs.equals(got[name][0], null_equal=True) and fixed == got[name][1], name
        assert a.steps.equals(got[name][2], null_equal=True), name


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50), st.integers(-3, 40)), max_size=40),
       st.lists(st.integers(-1, 2), min_size=4, max_size=4), st.integers(-5, 5))
def test_c_chunks_inside_equals_numpy(runs, plan_of_key, shift):
    """``chunks_inside`` says what numpy's per-program ``_inside`` says: the k-th run of a
    program (row order) against the k-th head of its chunks, offsets and durations compared
    unsigned; refused when a program has more runs than its heads hold."""
    from traceview.analysis import _passes

    keys = np.array([k for k, _, _ in runs], dtype=np.uint32)
    start = np.array([s * 10 for _, s, _ in runs], dtype=np.int64)
    dur = np.array([d for _, _, d in runs], dtype=np.int64)
    plan = np.array(plan_of_key, dtype=np.int32)
    prog = plan[keys] if len(keys) else np.zeros(0, dtype=np.int32)
    n_runs = np.array([int((prog == p).sum()) for p in range(3)], dtype=np.int64)
    offs = np.cumsum(np.r_[0, n_runs])[:-1].astype(np.int64)
    heads = np.empty(int(n_runs.sum()), dtype=np.int64)
    for p in range(3):
        rows = np.flatnonzero(prog == p)
        heads[offs[p]:offs[p] + len(rows)] = start[rows] + shift * (1 + rows % 3)
    want = all(anatomy._inside(heads[offs[p]:offs[p] + n_runs[p]] - start[prog == p], dur[prog == p])
               for p in range(3) if n_runs[p])
    assert _passes.chunks_inside(keys, start, dur, plan, n_runs, offs, heads) == want
    if n_runs.max() > 0:  # a program with more runs than its heads: refused
        short = n_runs.copy()
        short[int(np.argmax(n_runs))] -= 1
        assert not _passes.chunks_inside(keys, start, dur, plan, short, offs, heads)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.booleans()), min_size=1, max_size=50), st.integers(0, 60))
def test_step_order_head_is_the_full_orders_head(rows, n):
    """The first n rows of the per-step table by a partition are the first n of the stable
    sort of every row (outliers first, longest first, ties in row order)."""
    steps = pl.DataFrame({"duration_ps": pl.Series([d for d, _ in rows], dtype=pl.Int64),
                          "outlier": [o for _, o in rows]})
    head = stepstats.step_order_head(steps, n)
    assert head.dtype == np.uint32 and head.tolist() == stepstats.step_order(steps)[:n].tolist()


def test_family_roofline_from_the_anatomy_sums_equals_its_own_pass(shared_traces):
    """The family roofline read off the anatomy's exact window sums equals the one summing the
    window's events itself, on every shared trace and fixture."""
    from traceview.analysis.hardware.peaks import profile_peaks
    from traceview.analysis.steps import family_roofline as fr

    seen = 0
    for name, prof in _profiles(shared_traces):
        a = anatomy.profile_anatomy(prof)
        peaks = profile_peaks(prof)
        fast = fr.family_roofline(a, peaks)
        seen += fr._anatomy_sums(a, a.table.events) is not None if a.table is not None else 0
        a.window_sums = None
        assert fast.equals(fr.family_roofline(a, peaks), null_equal=True), name
    assert seen >= 8


def test_anatomy_step_sums_equal_the_event_pass(shared_traces):
    """The anatomy's per-description occurrences and events over every step (``step_sums``,
    read off its window sums) equal a bincount over the events inside a step, on every shared
    trace and fixture; the phases' figures taken from them are ``attr_sums``'s."""
    from traceview.analysis.steps import phases

    seen = 0
    for name, prof in _profiles(shared_traces):
        a = anatomy.profile_anatomy(prof)
        if a.step_sums is None:
            continue
        seen += 1
        ev = a.table.events
        inside = a.step_rows >= 0
        attr = ev["attr"].to_numpy()[inside].astype(np.int64)
        na = a.table.attrs.height
        assert a.step_sums[0].tolist() == np.bincount(attr, weights=ev["count"].to_numpy()[inside],
                                                       minlength=na).astype(np.int64).tolist(), name
        assert a.step_sums[1].tolist() == np.bincount(attr, minlength=na).tolist(), name
        for counts in (None, ev["count"].to_numpy()):
            got = phases._exact_step_sums(a.step_sums, counts, na)
            per, flags = np.zeros(na), np.zeros(na, dtype=np.uint8)
            from traceview.analysis import _passes

            assert _passes.attr_sums(np.ascontiguousarray(a.step_rows, dtype=np.int32), b"",
                                     np.ascontiguousarray(ev["attr"].to_numpy(), dtype=np.uint32),
                                     b"" if counts is None else np.ascontiguousarray(counts, dtype=np.int64),
                                     0 if counts is None else 1, per, flags)
            assert got is not None and got[0].tolist() == per.tolist() and got[1].tolist() == flags.tolist(), name
    assert seen >= 8


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=1, max_size=200), st.booleans())
def test_program_codes_equal_a_sort(values, huge):
    v = np.array(values, dtype=np.uint64) + (np.uint64(1 << 40) if huge else np.uint64(0))  # huge: the sort
    vals, code = stepstats._codes(v)
    want = np.sort(pl.Series(v).unique().to_numpy())
    assert vals.tolist() == want.tolist() and vals.dtype == v.dtype
    assert code.tolist() == np.searchsorted(want, v).tolist()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(0, 3)), max_size=12))
def test_several_equals_n_unique(values):
    col = pl.Series(values, dtype=pl.UInt64)
    assert stepstats._several(col) == (col.n_unique() > 1)


def test_event_figures_equal_the_tables_own(shared_traces):
    from traceview.analysis import eventstats
    from traceview.model.optable import OpTable, float_attr_sums

    for path, prof in _profiles(shared_traces):
        t = prof.table
        assert eventstats.total_self_ps(t) == t.total_self_ps(), path
        got, want = eventstats.float_attr_sums(t), float_attr_sums(t)
        assert all(np.array_equal(a, b) for a, b in zip(got, want)), path
        assert eventstats.float_attr_sums(t) is got  # kept: the same arrays the second time
        # a sum that could round in float64 takes the table's own path, bit for bit
        big = OpTable(t.events.with_columns(pl.col("self_ps") + (1 << 53)), t.attrs)
        got, want = eventstats.float_attr_sums(big), float_attr_sums(big)
        assert all(np.array_equal(a, b) for a, b in zip(got, want)), path
