"""The fast paths equal the plain ones they replace, on real traces.

* reading an xplane in place (mmap, ``scan_message``, ``decode_tpu`` in pieces,
  ``decode_annotated``) equals the classic read (whole file parsed by protobuf) and the
  pure-Python decoder, on every shared xplane and fixture;
* a merged profile of hundreds of device planes and a plane of thousands of descriptions read
  whole (the synthetic XSpaces of ``benchmarks/big_xplane.py``);
* the C step pass (``step_pass``) equals the numpy/polars step computation;
* the C per-step population hashes (``row_hashes``, sets and multisets) equal numpy's;
* the C self-time pass equals the sort-and-stack reference on random nested intervals;
* the vectorized range maximum equals a brute-force one;
* the C interpreted-kernel passes (``kernel_owners``, ``kernel_rows``) equal numpy's, on random
  device timelines and on the CPU fixtures' collapsed tables;
* the C rank matching of async pairs (``rank_match``), the collectives' pairing in event
  order (``pair_by_key``) and the host transfers' busy time per direction (``direction_busy``)
  equal numpy's, the pairs' spans (``pair_spans``) equal numpy's gathers, the overlap's
  per-description record sums (``record_sums``) equal the bincounts and its unions of some
  codes' intervals (``union_where``) the masks and ``_union``, and the overlap's and
  communication's results on the shared traces do not depend on the C passes;
* ``OpTable.collapse`` by counting per attr id (numpy) equals the polars group-by, on every
  shared xplane and fixture and on random event tables.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceview.analysis.steps import anatomy as steps, stepstats
from traceview.model import from_xplane as xplane
from traceview.model import timeline
from traceview.read.xplane import wire as xline
from traceview.model.optable import OpTable

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

pytestmark = pytest.mark.skipif(not xline.has_decoder(), reason="the C accelerator is not built")


@contextlib.contextmanager
def _numpy_only(module):
    """``module``'s C passes off (its ``_fast`` None) inside the block: its numpy fallback runs."""
    saved = module._fast
    module._fast = None
    try:
        yield
    finally:
        module._fast = saved


def _xplanes(shared_traces: Path) -> list[Path]:
    """Every shared xplane (the corrupt one aside) and every fixture's."""
    shared = sorted(p for p in shared_traces.glob("*.xplane.pb") if "corrupt" not in p.name)
    return sorted(shared, key=lambda p: "tpu_v6e_4chip_psum" not in p.name) + sorted(FIXTURES.rglob("*.xplane.pb"))


def _same_trace(a, b) -> None:
    assert a.ops.equals(b.ops, null_equal=True)
    assert a.step_markers.equals(b.step_markers, null_equal=True)
    assert a.module_runs.equals(b.module_runs, null_equal=True)
    assert a.n_events == b.n_events and a.notes == b.notes and a.has_shapes == b.has_shapes
    assert [d.name for d in a.devices] == [d.name for d in b.devices]


def test_mapped_read_equals_classic_and_python_reads(shared_traces, monkeypatch):
    files = _xplanes(shared_traces)
    mapped = [xplane.read_xplane(p) for p in files]
    assert all(xline.map_xspace(p) is not None for p in files)  # the in-place path was taken
    monkeypatch.setattr(xline, "map_xspace", lambda p: None)
    classic = [xplane.read_xplane(p) for p in files]
    monkeypatch.setattr(xplane, "_fast", None)  # the op-table passes: numpy
    monkeypatch.setattr(xline, "_fast", None)  # the wire decoders: protobuf
    python = [xplane.read_xplane(p) for p in files]
    for a, b, c in zip(mapped, classic, python):
        _same_trace(a, b)
        _same_trace(a, c)
    v6e = mapped[0]
    # 6,013 op events of 65 descriptions: 17 populations on TPU:0, 16 on each other chip
    assert v6e.table.height == 6013 and v6e.table.attrs.height == 65


def test_the_readers_collapse_equals_the_group_by(shared_traces):
    """TPU planes hand OpTable their per-description aggregates (C attr_stats on each
    plane's thread); they must be what OpTable.collapse's group-by computes from the events."""
    seeded = 0
    for p in _xplanes(shared_traces):
        t = xplane.read_xplane(p).table
        seeded += t._collapsed is not None
        again = OpTable(t.events, t.attrs)  # nothing seeded: the polars group-by
        assert t.collapse().equals(again.collapse(), null_equal=True), p
    assert seeded >= 1  # the v6e trace at least


def test_pieces_and_page_release_do_not_change_the_events(shared_traces, monkeypatch):
    path = shared_traces / "tpu_v6e_4chip_psum.xplane.pb"
    whole = xplane.read_xplane(path)
    monkeypatch.setattr(xline, "PIECE_BYTES", 4096)  # hundreds of pieces per XLine
    released = []
    orig = xline.MappedLine.release

    def spy(self, lo=0, hi=None):
        released.append((lo, hi))
        return orig(self, lo, hi)

    monkeypatch.setattr(xline.MappedLine, "release", spy)
    pieces = xplane.read_xplane(path)
    _same_trace(whole, pieces)
    assert sum(1 for lo, hi in released if hi is not None) > 50  # 84 pieces of about 4 KiB


def test_truncated_file_falls_back_to_the_classic_fault_message(tmp_path, shared_traces):
    data = (shared_traces / "tpu_v6e_4chip_psum.xplane.pb").read_bytes()
    cut = tmp_path / "cut.xplane.pb"
    cut.write_bytes(data[: len(data) // 2])
    assert xline.map_xspace(cut) is None
    from traceview.errors import TraceUnreadable

    with pytest.raises(TraceUnreadable, match="truncated"):
        xplane.read_xplane(cut)


@pytest.mark.parametrize("window", steps.EXTENTS)
def test_c_step_pass_equals_the_numpy_steps(shared_traces, window, monkeypatch):
    import traceview

    profs = [traceview.load(shared_traces / "tpu_v6e_4chip_psum.xplane.pb"),
             traceview.load(shared_traces / "vllm_tpu_qwen"),
             traceview.load(FIXTURES / "greedy_b4")]
    fast = [steps.anatomy(p.table, p.module_runs, extent=window, markers=p.step_markers if p.step_markers.height
                          else None) for p in profs]
    monkeypatch.setattr(steps, "_fast", None)
    monkeypatch.setattr(stepstats, "_fast", None)
    slow = [steps.anatomy(p.table, p.module_runs, extent=window, markers=p.step_markers if p.step_markers.height
                          else None) for p in profs]
    for a, b in zip(fast, slow):
        assert a.steps.equals(b.steps, null_equal=True)
        assert a.families.equals(b.families, null_equal=True)
        assert vars(a.coverage) == vars(b.coverage)
        assert (np.asarray(a.step_rows) == np.asarray(b.step_rows)).all()
    assert fast[0].steps.height == 400 and fast[0].steps["busy_ps"].sum() > 0  # 100 executions x 4 chips


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 6), st.integers(0, 5), st.integers(0, 1 << 40)), max_size=80),
       st.lists(st.integers(0, 3), min_size=6, max_size=6), st.lists(st.booleans(), min_size=7, max_size=7),
       st.booleans(), st.booleans())
def test_c_row_hashes_equal_numpy(events, pop_of_attr, keep, in_order, as_set):
    """row_hashes in C (one pass) and in numpy agree, sets and multisets, rows kept or not,
    rows whose events are consecutive (the C set pass) or interleaved (it refuses: numpy)."""
    ev = sorted(events, key=lambda e: e[0]) if in_order else events
    rows = np.array([r for r, _, _ in ev], dtype=np.int32)
    attr = np.array([a for _, a, _ in ev], dtype=np.uint32)
    count = np.array([c for _, _, c in ev], dtype=np.int64)
    pop = np.array(pop_of_attr, dtype=np.int64)
    words = np.random.default_rng(0).integers(1, 2 ** 63, size=4, dtype=np.uint64)
    kw = dict(keep=np.array(keep)) if as_set else dict(count=count)
    fast = stepstats.row_hashes(rows, attr, pop, words, 7, **kw)
    assert fast.tolist() == stepstats.row_hashes(rows.astype(np.int64), attr, pop, words, 7, **kw).tolist()
    with _numpy_only(stepstats):
        ref = stepstats.row_hashes(rows, attr, pop, words, 7, **kw)
    assert fast.tolist() == ref.tolist()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(-3, 120)), max_size=60))
def test_c_self_times_equal_the_reference(pairs):
    starts = np.array([p[0] for p in pairs], dtype=np.int64)
    durs = np.array([p[1] for p in pairs], dtype=np.int64)
    fast = timeline.self_times(starts, durs)
    with _numpy_only(timeline):
        ref = timeline.self_times(starts, durs)
    assert (fast == ref).all()


@st.composite
def _device_events(draw):
    """One device's events in time order as :func:`interpreted._owners` takes them: starts
    ascending (ties included), nested or overlapping ends, a few threads and kernel scopes,
    grid loops among the scoped events and bare events among the unscoped."""
    n = draw(st.integers(0, 60))
    s = np.cumsum(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))).astype(np.int64)
    e = s + np.array(draw(st.lists(st.integers(0, 20), min_size=n, max_size=n)), dtype=np.int64)
    n_lines = draw(st.integers(1, 4))
    n_scopes = draw(st.integers(1, 3))
    ln = np.array(draw(st.lists(st.integers(0, n_lines - 1), min_size=n, max_size=n)), dtype=np.int64)
    sc = np.array(draw(st.lists(st.integers(-1, n_scopes - 1), min_size=n, max_size=n)), dtype=np.int64)
    anc = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool) & (sc >= 0)
    bare = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool) & (sc < 0)
    return s, e, ln, sc, anc, bare, n_lines, n_scopes, draw(st.integers(0, 5))


@settings(max_examples=400, deadline=None)
@given(_device_events())
def test_c_kernel_owners_equal_numpy(args):
    from traceview.model import interpreted

    fast = interpreted._owners(*args)
    with _numpy_only(interpreted):
        ref = interpreted._owners(*args)
    assert fast[1] == ref[1] and (fast[0] == ref[0]).all()


def test_c_collapse_kernels_equals_numpy(monkeypatch):
    """Interpreted-kernel folding, C and numpy, on the CPU fixtures, also split over two devices
    and with some events untimed (pre-aggregated)."""
    from traceview.model import interpreted
    from traceview.model.load import load

    rng = np.random.default_rng(0)
    for fx in ("greedy_b4", "topp_b4", "tp_decode"):
        t = load(FIXTURES / fx, cache=False, expand_kernels=True).table
        a2 = t.attrs.with_columns(pl.col("attr") + t.attrs.height, pl.lit("/device:CPU:9").alias("device"))
        e2 = t.events.with_columns(pl.col("attr") + t.attrs.height, pl.col("start_ps") + 7)
        two = OpTable(pl.concat([t.events, e2]), pl.concat([t.attrs, a2]))
        untimed = pl.Series(rng.random(two.height) < 0.05)
        partial = OpTable(two.events.with_columns(pl.when(untimed).then(None).otherwise(pl.col("start_ps"))
                                                  .alias("start_ps")), two.attrs)
        for table in (t, two, partial):
            fast = interpreted.collapse_kernels(table)
            with monkeypatch.context() as m:
                m.setattr(interpreted, "_fast", None)
                ref = interpreted.collapse_kernels(table)
            assert fast.height < table.height
            assert fast.events.equals(ref.events, null_equal=True) and fast.attrs.equals(ref.attrs, null_equal=True)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 100), max_size=50), st.lists(st.tuples(st.integers(0, 100), st.integers(0, 30)),
                                                            max_size=12), st.booleans())
def test_c_enclosing_equals_the_binary_search(inner, outer, in_order):
    """The merge pass (both sides in time order) and the binary search (any order) agree,
    duplicates and zero-length outer intervals included."""
    s = np.array(sorted(inner) if in_order else inner, dtype=np.int64)
    o = sorted(outer) if in_order else outer
    os_ = np.array([a for a, _ in o], dtype=np.int64)
    oe = np.array([a + d for a, d in o], dtype=np.int64)
    fast = timeline.enclosing(s, s, os_, oe)
    with _numpy_only(timeline):
        ref = timeline.enclosing(s, s, os_, oe)
    assert fast.tolist() == ref.tolist()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-1, 6), max_size=60), st.lists(st.integers(-1, 6), max_size=60))
def test_c_rank_match_equals_numpy(ks, kd):
    from traceview.analysis.communication import overlap

    s, d = np.array(ks, dtype=np.int64), np.array(kd, dtype=np.int64)
    fast = overlap._match(s, d)
    with _numpy_only(overlap):
        ref = overlap._match(s, d)
    assert fast.tolist() == ref.tolist()


def _comm_results(path):
    import traceview

    prof = traceview.load(path, cache=False)
    ov, st, com = prof.overlap(), prof.stragglers(), prof.communication()
    return ([ov.ops, ov.populations, ov.steps, st.devices, st.steps, st.collectives, com.collectives,
             com.host_transfers], [ov.summary, st.summary, com.summary()])


def test_overlap_and_communication_do_not_depend_on_the_c_passes(shared_traces, monkeypatch):
    from traceview.analysis.communication import collectives, overlap

    paths = [p for p in _xplanes(shared_traces) if "v6e_4chip" in p.name or "mdev" in p.name]
    assert paths
    fast = [_comm_results(p) for p in paths]
    monkeypatch.setattr(overlap, "_fast", None)
    monkeypatch.setattr(collectives, "_fast", None)
    for p, (frames, dicts) in zip(paths, fast):
        got_frames, got_dicts = _comm_results(p)
        assert all(a.equals(b, null_equal=True) for a, b in zip(frames, got_frames)), p
        assert dicts == got_dicts, p


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(-(1 << 62), 1 << 62) | st.integers(0, 50)), max_size=80),
       st.lists(st.integers(-1, 3), min_size=6, max_size=6))
def test_c_medians_equal_polars(events, key_of_attr):
    """median_by (group, then quickselect) gives polars' median per key, to the bit: even
    counts, duplicates, negative and 62-bit values, keys with no event, attrs not counted."""
    from traceview.analysis import _passes as f

    attr = np.array([a for a, _ in events], dtype=np.uint32)
    vals = np.array([v for _, v in events], dtype=np.int64)
    lut = np.array(key_of_attr, dtype=np.int32)
    out, have = np.empty(4), np.zeros(4, dtype=np.uint8)
    assert f.median_by(attr, lut, vals, out, have)
    keys = lut[attr.astype(np.int64)] if len(attr) else np.zeros(0, dtype=np.int32)
    df = pl.DataFrame({"k": keys, "v": vals}, schema={"k": pl.Int32, "v": pl.Int64}).filter(pl.col("k") >= 0)
    want = dict(df.group_by("k").agg(pl.col("v").median()).iter_rows())
    assert {k: out[k] for k in range(4) if have[k]} == want


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-50, 50), min_size=1, max_size=40), st.lists(st.integers(0, 40), max_size=12),
       st.booleans())
def test_range_max_equals_brute_force(values, cuts, disjoint):
    v = np.array(values, dtype=np.int64)
    c = np.clip(np.array(sorted(cuts), dtype=np.int64), 0, len(v))
    if disjoint:
        lo, hi = c[0::2][: len(c) // 2], c[1::2]
    else:  # overlapping ranges take the sparse-table path
        lo = np.array(cuts[: len(cuts) // 2], dtype=np.int64).clip(0, len(v))
        hi = np.minimum(lo + 7, len(v))
    got = steps._range_max(v, lo, hi)
    want = [v[a:b].max() if b > a else np.iinfo(np.int64).min for a, b in zip(lo, hi)]
    assert got.tolist() == want


def _module_runs_reference(events: list, descs: list) -> list:
    """The rule of ``_derive_module_runs`` event by event: ``events`` (attr, start or None,
    duration, count), ``descs`` (host, device, module, program_id, op_name) per attr."""
    by_key: dict = {}
    for a, s, d, c in events:
        if s is not None:
            by_key.setdefault(descs[a][:4], []).append((descs[a][4], s, d, c))
    rows = []
    for key, evs in by_key.items():
        if any(k is None for k in key):
            continue
        ops: dict = {}
        for op, s, d, c in evs:
            n, first = ops.get(op, (0, s))
            ops[op] = (n + c, min(first, s))
        anchor = min(ops, key=lambda op: (ops[op][0], ops[op][1], op))
        starts = sorted({s for op, s, _, _ in evs if op == anchor})
        for j, a in enumerate(starts):
            nxt = starts[j + 1] if j + 1 < len(starts) else None
            end = max(s + d for _, s, d, _ in evs if s >= a and (nxt is None or s < nxt))
            rows.append((key[0], key[1], a, key[2], key[3], end - a))
    return sorted(rows)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["h1", "h2"]), st.sampled_from(["/device:GPU:0", "/device:GPU:1", None]),
                          st.sampled_from(["jit_a", "jit_b"]), st.sampled_from([1, 2, None]),
                          st.sampled_from(["x", "y", "z"])), min_size=1, max_size=8),
       st.lists(st.tuples(st.integers(0, 7), st.integers(0, 40) | st.none(), st.integers(0, 15), st.integers(1, 3)),
                max_size=60))
def test_derived_module_runs_equal_the_rule_event_by_event(descs, events):
    """GPU/CPU program executions (one sort and a segment max over the events) are those of
    the rule applied event by event: anchor op, as-of spans, null keys, ties, unplaced events."""
    events = [(a % len(descs), s, d, c) for a, s, d, c in events]
    cols = {c: [None] * len(descs) for c in xplane.ATTR_COLUMNS}
    for j, c in enumerate(("host", "device", "module", "program_id", "op_name")):
        cols[c] = [d[j] for d in descs]
    attrs = pl.DataFrame(cols, schema={c: xplane.OPS_SCHEMA[c] for c in xplane.ATTR_COLUMNS})
    table = OpTable.from_parts(np.array([e[0] for e in events], dtype=np.uint32),
                               pl.Series([e[1] for e in events], dtype=pl.Int64),
                               np.array([e[2] for e in events], dtype=np.int64),
                               np.array([e[2] for e in events], dtype=np.int64),
                               np.array([e[3] for e in events], dtype=np.int64), attrs)
    runs = xplane._derive_module_runs(table).frame()
    assert runs.schema == pl.Schema(xplane.MODULE_RUNS_SCHEMA)
    got = list(zip(*(runs[c].to_list() for c in ("host", "device", "start_ps", "module", "program_id", "duration_ps"))))
    assert got == _module_runs_reference(events, descs)  # rows in (host, device, start, module, id) order


def test_optable_round_trip_and_concat(shared_traces):
    td = xplane.read_xplane(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")
    wide = td.ops
    again = OpTable.from_frame(wide)
    assert again.frame().equals(wide, null_equal=True)
    both = OpTable.concat([again, td.table])
    assert both.height == 2 * wide.height and both.attrs.height == again.attrs.height + td.table.attrs.height
    assert both.frame().equals(pl.concat([wide, wide]), null_equal=True)
    col = both.collapse()
    assert int(col["count"].sum()) == int(wide["count"].sum()) * 2
    assert int(col["rows"].sum()) == 2 * wide.height


def test_a_file_truncated_under_the_reader_is_an_error_not_a_crash(tmp_path, shared_traces):
    """The readers walk a memory-mapped file; if another program shrinks it meanwhile, the
    pages past the new end raise SIGBUS. The C walks run under a guard that turns that into
    ValueError. Run in a child process: a regression would kill it, not the test session."""
    import subprocess
    import sys

    src = shared_traces / "tpu_v6e_4chip_psum.xplane.pb"
    copy = tmp_path / "t.xplane.pb"
    copy.write_bytes(src.read_bytes() * 40)  # big enough to span many pages
    child = r"""
import mmap, os, sys
from traceview.read.xplane import _decode as f
p = sys.argv[1]
fh = open(p, "rb")
mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
view = memoryview(mm)
os.truncate(p, 0)
for call in (lambda: f.count_events(view), lambda: f.line_header(view), lambda: f.scan_message(mm, 0, len(mm)),
             lambda: f.copy_bytes(mm, 0, len(mm)), lambda: f.line_layout(view, 1 << 20), lambda: f.decode_line(view)):
    try:
        call()
        print("no error")
    except ValueError as exc:
        print("ValueError:", exc)
"""
    r = subprocess.run([sys.executable, "-c", child, str(copy)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 6 and all("changed while it was read" in ln for ln in lines), lines

    # end to end: the file shrinks after it was mapped, while a line is decoded
    copy.write_bytes(src.read_bytes())
    child2 = r"""
import os, sys
from traceview.model import from_xplane as xplane
from traceview.model import tpu_plane
from traceview.errors import TraceviewError
p = sys.argv[1]
orig = tpu_plane.decode_tpu_line
def shrink_then_decode(*a, **k):
    os.truncate(p, 4096)
    return orig(*a, **k)
tpu_plane.decode_tpu_line = shrink_then_decode
xplane.PLANE_THREADS = 1
try:
    xplane.read_xplane(p)
    print("read")
except TraceviewError as exc:
    print("error:", exc)
"""
    r = subprocess.run([sys.executable, "-c", child2, str(copy)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.startswith("error:") and "changed while it was read" in r.stdout, r.stdout


def _big_xplane():
    import importlib.util

    spec = importlib.util.spec_from_file_location("big_xplane", Path(__file__).resolve().parents[1] / "benchmarks"
                                                  / "big_xplane.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_merged_profile_of_many_planes_reads_whole(tmp_path):
    # 600 device planes (one per rank), past the 256 a host has: every plane is a device
    p = tmp_path / "merged.xplane.pb"
    p.write_bytes(_big_xplane().many_planes(600, ops=4))
    td = xplane.read_xplane(p)
    assert len(td.devices) == 600 and td.devices[599].name == "/device:TPU:599"
    assert td.table.height == 2400 and td.table.attrs.height == 2400 and td.module_runs.height == 600
    per_dev = td.ops.group_by("device").agg(pl.len().alias("n"), pl.col("shape").n_unique().alias("shapes"))
    assert per_dev.height == 600 and set(per_dev["n"]) == {4} and set(per_dev["shapes"]) == {4}
    # the ranks' metadata bytes are the same: read once, shared; as when each plane reads its own
    assert len({xline.metadata_bytes(p_, 1 << 20) for p_ in xline.map_xspace(p).planes}) == 1
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(xplane, "SHARED_METADATA_BYTES", -1)
        _same_trace(td, xplane.read_xplane(p))
    finally:
        mp.undo()


def test_plane_of_many_descriptions_reads_each_once(tmp_path, monkeypatch):
    # 3,000 descriptions over 512 HLO shape patterns: each description keeps its own name and
    # the shape its own text gives (the parse is shared per name-blanked pattern); the
    # metadata read as columns from the plane's bytes equal the parsed messages' reading
    p = tmp_path / "desc.xplane.pb"
    p.write_bytes(_big_xplane().many_descriptions(3000))
    assert 3000 >= xplane.COLUMNS_MIN_DESCRIPTIONS
    td = xplane.read_xplane(p)
    monkeypatch.setattr(xplane, "COLUMNS_MIN_DESCRIPTIONS", 10**9)
    _same_trace(td, xplane.read_xplane(p))
    assert td.table.height == 3000 and td.table.attrs.height == 3000
    attrs = td.table.attrs.sort("op_name")
    assert attrs["op_name"].n_unique() == 3000
    one = attrs.filter(pl.col("op_name") == "fusion.2999").row(0, named=True)
    assert (one["shape"], one["op_kind"], one["category"], one["flops"]) == (
        "f32[8,440] <- f32[8,440]", "fusion", "loop fusion", 8.0 * 440)
    assert one["hlo_text"].startswith("%fusion.2999 = f32[8,440]{1,0} fusion(")


def _frames_equal(a, b) -> None:
    for name in ("memory", "kernel_lines", "hlo_protos"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None and name == "hlo_protos":  # one row per program, in map order
            x, y = x.sort("program_id"), y.sort("program_id")
        if x is not None:
            assert x.equals(y, null_equal=True), name


def test_metadata_left_in_the_file_reads_as_protobuf_parses_it(shared_traces, monkeypatch):
    # every plane's event_metadata map left in the mapped file (parsed entry by entry when
    # asked for): ops, steps, module runs, memory, kernel lines and HLO as when protobuf
    # parses the whole map
    files = _xplanes(shared_traces)
    eager = [xplane.read_xplane(p) for p in files]
    monkeypatch.setattr(xline, "LAZY_METADATA_ENTRIES", 0)
    assert all(isinstance(pl_.event_metadata, xline.LazyEventMetadata) for pl_ in xline.map_xspace(files[0]).planes)
    lazy = [xplane.read_xplane(p) for p in files]
    for a, b in zip(eager, lazy):
        _same_trace(a, b)
        _frames_equal(a, b)
    assert any(t.memory is not None and t.memory.height for t in lazy)
    assert any(t.kernel_lines is not None and t.kernel_lines.height for t in lazy)


def test_lazy_metadata_map_behaves_as_protobufs(shared_traces, monkeypatch, tmp_path):
    from traceview.errors import TraceUnreadable
    from traceview.read.xplane.protos import XEventMetadata, XPlane, XSpace

    path = shared_traces / "tpu_v6e_4chip_psum.xplane.pb"
    parsed = XSpace.FromString(path.read_bytes())
    monkeypatch.setattr(xline, "LAZY_METADATA_ENTRIES", 0)
    mapped = xline.map_xspace(path)
    for want, got in zip(parsed.planes, mapped.planes):
        table = got.event_metadata
        assert len(table) == len(want.event_metadata) and sorted(table) == sorted(want.event_metadata)
        assert dict(table.items()) == dict(want.event_metadata.items())
        assert dict(xline.metadata_names(got)) == {k: v.name for k, v in want.event_metadata.items()}
        assert dict(xline.metadata_names(got, containing=(b"\x00no such name",))) == {}
        for k in list(want.event_metadata)[:5]:
            assert k in table and table[k] == want.event_metadata[k] and table.get(k) == want.event_metadata[k]
        assert -1 not in table and table.get(-1) is None and "x" not in table
        with pytest.raises(KeyError):
            table[-1]
    # a repeated id is its last entry (protobuf's map parse); an entry protobuf refuses names
    # the file when it is asked for
    a, b, bad = XPlane(id=1, name="/device:TPU:0"), XPlane(), XPlane()
    a.event_metadata[5].name, b.event_metadata[5].name = "first", "second"
    b.event_metadata[6].name = "other"
    bad.event_metadata[7].name = "broken"
    good = XEventMetadata(name="broken").SerializeToString()
    cut = bad.SerializeToString().replace(good, b"\x12\x09broken")  # a string length past its end
    assert len(cut) == len(bad.SerializeToString())
    body = a.SerializeToString() + b.SerializeToString() + cut
    out = tmp_path / "dup.xplane.pb"
    out.write_bytes(b"\x0a" + xline._varint_bytes(len(body)) + body)
    table = xline.map_xspace(out).planes[0].event_metadata
    assert isinstance(table, xline.LazyEventMetadata) and sorted(table) == [5, 6, 7]
    assert table[5].name == "second" and table[6].name == "other"
    with pytest.raises(TraceUnreadable, match="event metadata 7"):
        table[7]


_spans = st.lists(st.tuples(st.integers(-5, 60), st.integers(-3, 12)), max_size=12)


@settings(max_examples=400, deadline=None)
@given(_spans, _spans, _spans, _spans, st.lists(st.tuples(st.integers(-10, 80), st.integers(-5, 40)), max_size=6),
       st.booleans())
def test_c_partition_and_covered_equal_numpy(cu, sy, asy, ho, wins, in_order):
    """The overlap's step partition and covered time in C equal numpy's sweep, negative
    spans (running maxima that go back) and windows included; windows in order and disjoint
    (answered during the merge) or not."""
    from traceview.analysis.communication import overlap

    if in_order:  # consecutive windows, each from where the last ended (some empty)
        at, ordered = -12, []
        for a, d in wins:
            at += abs(a) % 9
            ordered.append((at, abs(d) % 15))
            at += abs(d) % 15
        wins = ordered

    def sets():
        out = []
        for x in (cu, sy, asy, ho):
            s = np.array([a for a, _ in x], dtype=np.int64)
            out.append(overlap._union(s, s + np.array([d for _, d in x], dtype=np.int64)))
        return out

    wa = np.array([a for a, _ in wins], dtype=np.int64)
    wb = wa + np.array([d for _, d in wins], dtype=np.int64)
    fast_sets = sets()
    fast = overlap._partition(*fast_sets, wa, wb)
    fast_cov = overlap._covered(*fast_sets[0], wa, wb)
    with _numpy_only(overlap):
        ref_sets = sets()
        ref = overlap._partition(*ref_sets, wa, wb)
        ref_cov = overlap._covered(*ref_sets[0], wa, wb)
    assert [x.tolist() for x in fast] == [x.tolist() for x in ref]
    assert fast_cov.tolist() == ref_cov.tolist()



@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(-10, 20) | st.just(1 << 62), st.integers(0, 9)), max_size=60),
       st.lists(st.integers(0, 9), max_size=4), st.booleans(), st.booleans())
def test_c_union_where_equals_numpy(items, kept, in_order, as_durs):
    """The union of the intervals of some codes (``union_where``) equals the masks and
    :func:`_union`, ends before starts and wrapping ends included; out of order it refuses
    and the sort decides."""
    from traceview.analysis.communication import overlap

    if in_order:
        items = sorted(items, key=lambda x: x[0])
    s = np.array([x[0] for x in items], dtype=np.int64)
    v = np.array([x[1] for x in items], dtype=np.int64)
    codes = np.array([x[2] for x in items], dtype=np.int8)
    lut = overlap._lut(kept)
    with np.errstate(over="ignore"):
        args = (s, None, v, codes, lut) if as_durs else (s, s + v, None, codes, lut)
        fast = overlap._union_where(*args)
        with _numpy_only(overlap):
            ref = overlap._union_where(*args)
    assert fast[0].tolist() == ref[0].tolist() and fast[1].tolist() == ref[1].tolist()

def _copy_pairs_case(events, in_order: bool):
    """(attr ids uint32, starts int64, attrs frame) of six copy descriptions on two devices
    (starts, a start and a done of one pair, ...) for the pairing tests; ``events`` (attr,
    start) pairs, sorted by start when ``in_order``."""
    ev = sorted(events, key=lambda e: e[1]) if in_order else events
    attrs = pl.DataFrame({
        "attr": pl.Series(range(6), dtype=pl.UInt32), "host": ["h"] * 6, "device": ["d0", "d0", "d0", "d1", "d1", "d1"],
        "program_id": pl.Series([1] * 6, dtype=pl.UInt64),
        "op_name": ["copy-start.1", "copy-done.1", "copy-start.2", "copy-start.1", "copy-done.1", "fusion"],
        "op_kind": ["copy-start", "copy-done", "copy-start", "copy-start", "copy-done", "fusion"],
        "hlo_text": ["", "%copy-done.1 = f32[8]{0} copy-done(f32[8]{0} %copy-start.1)", "", "",
                     "%copy-done.1 = f32[8]{0} copy-done(f32[8]{0} %copy-start.1)", ""]})
    return (np.array([x for x, _ in ev], dtype=np.uint32), np.array([y for _, y in ev], dtype=np.int64), attrs)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 30)), max_size=60), st.booleans())
def test_c_pair_by_key_equals_numpy(events, in_order):
    """The collectives' pairing (_pair_index) with the C pass (each key's events in time order:
    one pass in event order; out of order: it refuses) equals the sorts and searches."""
    from traceview.analysis.communication import collectives

    a, t, attrs = _copy_pairs_case(events, in_order)
    fast = collectives._pair_index(a, t, attrs)
    with _numpy_only(collectives):
        ref = collectives._pair_index(a, t, attrs)
    assert fast[0].tolist() == ref[0].tolist() and fast[1].tolist() == ref[1].tolist()



@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 30)), max_size=60), st.booleans(),
       st.lists(st.integers(-5, 40) | st.integers(-(1 << 62), 1 << 62), min_size=60, max_size=60),
       st.lists(st.integers(-5, 40) | st.just(1 << 62), min_size=60, max_size=60))
def test_c_pair_spans_equal_numpy(events, in_order, durs, selfs):
    """The pairs' time in flight and done self time (``pair_spans``) equal numpy's gathers,
    unmatched starts and wrapping sums included."""
    from traceview.analysis.communication import collectives

    a, t, attrs = _copy_pairs_case(events, in_order)
    ev = pl.DataFrame({"attr": pl.Series(a, dtype=pl.UInt32), "start_ps": pl.Series(t, dtype=pl.Int64),
                       "duration_ps": pl.Series(durs[:len(a)], dtype=pl.Int64),
                       "self_ps": pl.Series(selfs[:len(a)], dtype=pl.Int64)})
    for ordered in (True, False):
        fast = collectives._pair_spans(ev, attrs, None, ordered)
        with _numpy_only(collectives):
            with np.errstate(over="ignore"):
                ref = collectives._pair_spans(ev, attrs, None, ordered)
        if ordered:
            assert [x.tolist() for x in fast] == [x.tolist() for x in ref]
        else:  # the starts in event order (C) or in time order (numpy): the same pairs
            assert sorted(zip(*[x.tolist() for x in fast])) == sorted(zip(*[x.tolist() for x in ref]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 40), st.integers(-3, 12), st.booleans()), max_size=60),
       st.lists(st.integers(-1, 1), min_size=6, max_size=6), st.lists(st.integers(0, 2), min_size=6, max_size=6),
       st.lists(st.sampled_from([float("nan"), 0.0, 1.5, 3.0, 1e12]), min_size=6, max_size=6))
def test_c_direction_busy_equals_numpy_and_the_covered_cells(records, dir_of, dev_of, by_attr):
    """The host transfers' per-direction bytes and busy time (``direction_busy``) equal the
    numpy sort-and-merge, bit for bit, in or out of start order and with spans ending before
    they start; with none of those, busy time is the number of unit cells some transfer of
    the direction covers on each device, summed over devices."""
    from traceview.analysis.communication import collectives

    ra = np.array([r[0] for r in records], dtype=np.uint32)
    start = np.array([r[1] for r in records], dtype=np.int64)
    ix = np.arange(len(records), dtype=np.int64)[::-1].copy()  # records read their events backwards
    start = start[::-1].copy()
    t = np.array([r[2] for r in records], dtype=np.int64)
    ok = np.array([r[3] for r in records], dtype=bool)
    d_of, v_of, b_of = np.array(dir_of, dtype=np.int64), np.array(dev_of, dtype=np.int64), np.array(by_attr)
    busy, moved, first = (np.zeros(2, dtype=np.int64), np.zeros(2), np.zeros(2, dtype=np.int64))
    assert collectives._fast.direction_busy(ra, ix, start, t, ok.view(np.uint8), d_of, v_of, b_of, busy, moved, first)
    ref = collectives._direction_busy(2, ra, ix, start, t, ok, d_of, v_of, b_of)
    assert busy.tolist() == ref[0].tolist() and moved.tobytes() == ref[1].tobytes() and first.tolist() == ref[2].tolist()
    counted = [r for r, (a, _, dt, k) in enumerate(records) if k and d_of[a] >= 0 and not np.isnan(b_of[a])]
    if all(records[r][2] >= 0 for r in counted):
        cells = np.zeros((2, 3, 60), dtype=bool)
        for r in counted:
            a, s0, dt, _ = records[r]
            cells[d_of[a], v_of[a], s0:s0 + dt] = True
        assert busy.tolist() == cells.sum(axis=(1, 2)).tolist()
    assert first.tolist() == [min((r for r in counted if d_of[records[r][0]] == d), default=-1) for d in (0, 1)]



@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.booleans(), st.integers(-(1 << 62), 1 << 62) | st.integers(-5, 50),
                          st.integers(-(1 << 62), 1 << 62) | st.integers(-5, 50), st.integers(-3, 40),
                          st.integers(-(1 << 62), 1 << 62) | st.integers(0, 9)), max_size=60),
       st.integers(0, 3))
def test_c_record_sums_equal_numpy(records, extra):
    """The overlap's per-description counts and sums of its records (``record_sums``) equal
    the bincounts: first record, synchronous ones, int64 sums wrapping as numpy's do."""
    from traceview.analysis.communication import overlap

    rec = {"attr": np.array([r[0] for r in records], dtype=np.uint32), "sync": np.array([r[1] for r in records], dtype=bool),
           "start": np.array([r[2] for r in records], dtype=np.int64), "wait": np.array([r[5] for r in records], dtype=np.int64)}
    with np.errstate(over="ignore"):
        rec["end"] = rec["start"] + np.array([r[3] for r in records], dtype=np.int64)
    hid = np.array([r[4] for r in records], dtype=np.int64)
    size = (int(rec["attr"].max()) + 1 if records else 0) + extra
    fast = overlap._record_sums(rec, hid, size)
    with _numpy_only(overlap):
        with np.errstate(over="ignore"):
            ref = overlap._record_sums(rec, hid, size)
    assert [x.tolist() for x in fast[:3]] == [x.tolist() for x in ref[:3]]
    assert {k: v.tolist() for k, v in fast[3].items()} == {k: v.tolist() for k, v in ref[3].items()}
    if records:  # an attr id past the outputs: refused
        small = int(rec["attr"].max())
        assert not overlap._fast.record_sums(rec["attr"], rec["sync"].view(np.uint8), rec["start"], rec["end"], hid,
                                             rec["wait"], *[np.empty(small, dtype=np.int64) for _ in range(6)])

def test_collapse_by_counting_equals_the_group_by_on_every_trace(shared_traces):
    """OpTable.collapse counts per attr id (numpy) when every event is one occurrence and
    nothing is null: the polars group-by's figures, on every shared xplane and fixture."""
    from traceview.model import optable

    for p in _xplanes(shared_traces):
        ev = xplane.read_xplane(p).table.events
        got = optable._collapse_counted(ev)
        if ev.height == 0:  # a trace without HLO ops: nothing to count
            assert got is None
            continue
        assert got is not None, p.name  # these tables take the counting path
        want = optable._collapse_grouped(ev).sort("attr")
        assert got.schema == want.schema and got.equals(want), p.name
        fast, optable._fast = optable._fast, None  # the numpy counting gives the same
        try:
            assert optable._collapse_counted(ev).equals(want), p.name
        finally:
            optable._fast = fast


_EV = st.tuples(st.integers(0, 5), st.integers(-50, 50) | st.none(), st.integers(0, 1 << 40),
                st.integers(-(1 << 40), 1 << 40), st.sampled_from([1, 1, 1, 0, 2]))


@settings(max_examples=200, deadline=None)
@given(st.lists(_EV, max_size=40))
def test_collapse_by_counting_equals_the_group_by(events):
    """The counting path gives the group-by's frame (sums, rows, min/max per occurrence,
    first start), and leaves to the group-by the tables it does not cover: a null start, an
    event of several occurrences."""
    from traceview.model import optable

    ev = pl.DataFrame({"attr": pl.Series([e[0] for e in events], dtype=pl.UInt32),
                       "start_ps": pl.Series([e[1] for e in events], dtype=pl.Int64),
                       "duration_ps": pl.Series([e[2] for e in events], dtype=pl.Int64),
                       "self_ps": pl.Series([e[3] for e in events], dtype=pl.Int64),
                       "count": pl.Series([e[4] for e in events], dtype=pl.Int64)})
    covered = bool(events) and all(e[1] is not None and e[4] <= 1 for e in events)
    fast = optable._fast
    try:
        for optable._fast in ((fast, None) if fast is not None else (None,)):  # the C pass (counts 1) and numpy
            got = optable._collapse_counted(ev)
            assert (got is not None) == covered
            if covered:
                want = optable._collapse_grouped(ev).sort("attr")
                assert got.schema == want.schema and got.equals(want)
    finally:
        optable._fast = fast


def _profiles(shared_traces):
    """Every shared trace with ops (xplanes, the vLLM trace JSON) and every fixture, loaded."""
    import traceview

    paths = sorted(p for p in shared_traces.glob("*.xplane.pb") if "corrupt" not in p.name and "bert" not in p.name)
    paths += [shared_traces / "vllm_tpu_qwen"] + sorted(d for d in FIXTURES.iterdir() if (d / "plugins").exists())
    return [(str(p), traceview.load(p, cache=False, stale_after_s=None)) for p in paths]


def test_c_step_sums_equal_numpy_on_every_trace(shared_traces, monkeypatch):
    """The phases' per-step FLOP/byte sums and the family roofline's window sums in C
    (``attr_sums``, ``row_sums``) are numpy's bincounts, figure for figure, on every shared
    trace and fixture (MFU, MBU, tokens/s, the FLOPs source line, every roofline row)."""
    from traceview.analysis.steps import family_roofline, phases
    from traceview.analysis.report import build_report

    got = {}
    for name, prof in _profiles(shared_traces):
        rep = build_report(prof)
        got[name] = (rep.family_roofline, rep.phases)
        prof._derived = {}
    assert sum(r[1] is not None and r[1].steps.height > 0 for r in got.values()) >= 8
    monkeypatch.setattr(phases, "_fast", None)
    monkeypatch.setattr(family_roofline, "_fast", None)
    for name, prof in _profiles(shared_traces):
        rep = build_report(prof)
        fr, ph = got[name]
        assert rep.family_roofline.equals(fr, null_equal=True), name
        if ph is None:
            assert rep.phases is None, name
            continue
        assert rep.phases.steps.equals(ph.steps, null_equal=True), name
        assert rep.phases.summary.equals(ph.summary, null_equal=True), name
        assert rep.phases.flops_source == ph.flops_source, name


def _same_section(x, y) -> bool:
    """Whether two report sections (or diff sides) hold the same figures (frames equal, nulls
    equal; arrays element for element; the functions they keep to build details are not
    compared)."""
    import dataclasses

    if isinstance(x, pl.DataFrame):
        return isinstance(y, pl.DataFrame) and x.equals(y, null_equal=True)
    if isinstance(x, np.ndarray):  # (a diff side's samples)
        return isinstance(y, np.ndarray) and x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return type(x) is type(y) and all(_same_section(getattr(x, f.name), getattr(y, f.name))
                                          for f in dataclasses.fields(x))
    if isinstance(x, (list, tuple)):
        return type(x) is type(y) and len(x) == len(y) and all(map(_same_section, x, y))
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(_same_section(x[k], y[k]) for k in x)
    if isinstance(x, float) and isinstance(y, float) and x != x:
        return y != y
    if callable(x) and callable(y):  # a section's builder of its details: not a figure
        return True
    return x == y


def test_report_sections_beside_equal_inline(shared_traces):
    """``build_report(beside=True)`` (the populations, communication, memory and phases
    sections on threads of their own) gives the same sections and findings as computed inline, on every
    shared trace and fixture; an error of a section's thread is raised by the caller."""
    from traceview.analysis import report

    for name, prof in _profiles(shared_traces):
        a = report.build_report(prof, beside=True)
        prof._derived = {}
        b = report.build_report(prof)
        for section in ("table", "by_shape", "population_regimes", "program_splits", "communication", "memory",
                        "phases", "overlap", "stragglers", "family_roofline"):
            assert _same_section(getattr(a, section), getattr(b, section)), (name, section)
        assert [f.id for f in a.findings or []] == [f.id for f in b.findings or []], name
    for by in ("name", "program", "program-shape", "kind"):  # the op table keyed otherwise: computed here
        a = report.build_report(prof, by=by, beside=True)
        prof._derived = {}
        b = report.build_report(prof, by=by)
        assert _same_section(a.table, b.table) and _same_section(a.by_shape, b.by_shape), by

    def fail():
        raise ValueError("boom")

    first, second, third = report._beside(fail, lambda: 7, lambda: 8)
    assert third() == 8 and second() == 7
    with pytest.raises(ValueError, match="boom"):
        first()


def test_diff_side_beside_equals_inline(shared_traces):
    """``diff.side(beside=True)`` (the populations and tables on a thread of their own while
    the step anatomy is computed; ``diff``'s path) gives the side computed inline, field for
    field, on every shared trace and fixture, as a base and as a treatment of a base (whose
    step module it then looks up off its kernels)."""
    from traceview.analysis.compare.diff import side

    for name, prof in _profiles(shared_traces):
        a = side(prof, beside=True)
        prof._derived = {}
        b = side(prof)
        assert _same_section(a, b), name
        prof._derived = {}
        ta = side(prof, base=b, beside=True)
        prof._derived = {}
        assert _same_section(ta, side(prof, base=b)), name
    from traceview.errors import UsageError

    with pytest.raises(UsageError):  # a bad rule raised by the caller, from the thread
        side(prof, rules=["x=("], beside=True)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 4), st.integers(0, 3), st.integers(0, 1 << 40), st.integers(1, 9)),
                max_size=60),
       st.lists(st.floats(-1e6, 1e6, allow_nan=False) | st.just(0.0), min_size=8, max_size=8),
       st.lists(st.booleans(), min_size=5, max_size=5), st.booleans())
def test_c_attr_and_row_sums_equal_bincount(events, weights, keep, counted):
    """``attr_sums`` / ``row_sums`` add exactly what numpy's weighted bincounts add (event
    order, products not fused), with and without per-event counts and a kept-rows mask."""
    from traceview.analysis import _passes

    rows = np.array([r for r, _, _, _ in events], dtype=np.int32)
    attr = np.array([a for _, a, _, _ in events], dtype=np.uint32)
    vals = np.array([v for _, _, v, _ in events], dtype=np.int64)
    cnt = np.array([c if counted else 1 for _, _, _, c in events], dtype=np.int64)
    keep_a = np.array(keep, dtype=bool)
    inside = (rows >= 0) & np.append(keep_a, False)[rows]
    out = np.zeros((2, 4))
    seen = np.zeros(4, dtype=np.uint8)
    assert _passes.attr_sums(rows, keep_a.view(np.uint8), attr, np.stack([vals, cnt]), 2, out, seen)
    a_in = attr[inside].astype(np.int64)
    assert out[0].tolist() == np.bincount(a_in, weights=vals[inside].astype(np.float64), minlength=4).tolist()
    assert out[1].tolist() == np.bincount(a_in, weights=cnt[inside].astype(np.float64), minlength=4).tolist()
    assert seen.astype(bool).tolist() == (np.bincount(a_in, minlength=4) > 0).tolist()
    w = np.array(weights, dtype=np.float64).reshape(2, 4)
    sums = np.zeros((2, 5))
    assert _passes.row_sums(rows, attr, cnt if counted else b"", w, np.array([1, 0], dtype=np.uint8), sums)
    r_in, at = rows[rows >= 0], attr[rows >= 0]
    want0 = w[0][at] * (cnt[rows >= 0].astype(np.float64) if counted else 1.0)
    assert sums[0].tolist() == np.bincount(r_in, weights=want0, minlength=5).tolist()
    assert sums[1].tolist() == np.bincount(r_in, weights=w[1][at], minlength=5).tolist()
    # a description outside the weights: refused (the caller takes numpy)
    if (rows >= 0).any() and attr[rows >= 0].max() > 0:
        assert not _passes.row_sums(rows, attr, b"", np.ascontiguousarray(w[:, :1]), np.array([1, 0], dtype=np.uint8),
                                    np.zeros((2, 5)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6), st.integers(0, (1 << 63) - 1), st.booleans()),
                min_size=2, max_size=60))
def test_c_program_runs_equal_numpy(events):
    """The executions derived from ops (GPU/CPU traces) in two C passes over the events in time
    order (``program_runs``; sorted by start first when they are not), in (start, key) order,
    equal numpy's sort by program put in that order: same keys, starts and durations
    (ends wrapping past int64), groups of equal start, events before a first anchor dropped."""

    def ref_runs(*a):
        got = xplane._program_runs(*a)
        o = np.argsort(got[1], kind="stable")
        return [x[o] for x in got]

    ev = sorted(events, key=lambda e: e[1])
    kid = np.array([k for k, _, _, _ in ev], dtype=np.uint16)
    start = np.array([s * 1000 for _, s, _, _ in ev], dtype=np.int64)
    dur = np.array([d for _, _, d, _ in ev], dtype=np.int64)
    anchor = np.array([a for _, _, _, a in ev], dtype=bool)
    fast = xplane._c_program_runs(kid, start, dur, anchor, 5)
    assert fast is not None
    ref = ref_runs(kid, start, dur, anchor, 5)
    for a, b in zip(fast, ref):
        assert a.dtype == b.dtype and a.tolist() == b.tolist()
    # out of time order (several lines' events): sorted by start first, numpy's figures still
    for perm in (np.arange(len(kid))[::-1], np.argsort(kid, kind="stable")):
        fast = xplane._c_program_runs(kid[perm], start[perm], dur[perm], anchor[perm], 5)
        ref = ref_runs(kid[perm], start[perm], dur[perm], anchor[perm], 5)
        for a, b in zip(fast, ref):
            assert a.dtype == b.dtype and a.tolist() == b.tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(-50, 50) | st.none(),
                          st.integers(-(1 << 40), 1 << 40) | st.integers(-(1 << 62), 1 << 62) | st.none()
                          | st.integers(0, 1 << 51),
                          st.integers(0, 3) | st.none()), max_size=40))
def test_float_attr_sums_equal_the_bincounts(events):
    """Per-description self time and occurrences read from the collapsed rows are the float64
    bincounts' sums (nulls as 0 and 1), and the bincounts themselves where a null or a sum
    past 2**53 makes the collapsed rows differ."""
    from traceview.model.optable import float_attr_sums

    ev = pl.DataFrame({"attr": pl.Series([e[0] for e in events], dtype=pl.UInt32),
                       "start_ps": pl.Series([e[1] for e in events], dtype=pl.Int64),
                       "duration_ps": pl.Series([5] * len(events), dtype=pl.Int64),
                       "self_ps": pl.Series([e[2] for e in events], dtype=pl.Int64),
                       "count": pl.Series([e[3] for e in events], dtype=pl.Int64)})
    table = OpTable(ev, pl.DataFrame({"attr": pl.Series(range(6), dtype=pl.UInt32)}))
    a = ev["attr"].to_numpy().astype(np.int64)
    want_t = np.bincount(a, weights=ev["self_ps"].fill_null(0).to_numpy().astype(np.float64), minlength=6)
    want_c = np.bincount(a, weights=ev["count"].fill_null(1).to_numpy().astype(np.float64), minlength=6)
    from traceview.model import optable

    fast = optable._fast
    try:
        for impl in (fast, None):  # the C pass and numpy's bincounts
            optable._fast = impl
            t, c = float_attr_sums(table)
            assert t.tolist() == want_t.tolist() and c.tolist() == want_c.tolist()
    finally:
        optable._fast = fast


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 1 << 51) | st.integers(-(1 << 40), 1 << 40)
                          | st.integers(0, 1 << 58)), max_size=60))
def test_int_bincount_sums_are_exact(pairs):
    """Per-key int64 sums by float bincount where no partial sum reaches 2**53 (non-negative
    values: their total below it), else by ``np.add.at``: always the exact integer sums."""
    from traceview.model.optable import int_bincount

    keys = np.array([k for k, _ in pairs], dtype=np.int64)
    vals = np.array([v for _, v in pairs], dtype=np.int64)
    want = [0] * 5
    for k, v in pairs:
        want[k] += v
    got = int_bincount(keys, vals, 5)
    assert got.dtype == np.int64 and got.tolist() == want


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 30)), max_size=60), st.booleans(),
       st.lists(st.booleans(), min_size=6, max_size=6))
def test_pair_by_key_over_kept_descriptions_equals_the_gathered_rows(events, in_order, keep):
    """The collectives' pairing over the events of some descriptions only (``keep``), in C and
    numpy, equals the pairing of those events gathered out first; unordered, the same pairs."""
    from traceview.analysis.communication import collectives

    a, t, attrs = _copy_pairs_case(events, in_order)
    kept = np.array(keep)
    rows = np.flatnonzero(kept[a]) if len(a) else np.zeros(0, dtype=np.int64)
    saved = collectives._fast
    try:
        for fast in (saved, None):
            collectives._fast = fast
            if not len(rows):
                continue
            si, d = collectives._pair_index(a[rows], t[rows], attrs)
            ref = (rows[si].tolist(), [rows[x] if x >= 0 else -1 for x in d.tolist()])
            got = collectives._pair_index(a, t, attrs, kept)
            assert (got[0].tolist(), got[1].tolist()) == ref
            un = collectives._pair_index(a, t, attrs, kept, False)
            assert sorted(zip(un[0].tolist(), un[1].tolist())) == sorted(zip(*ref))
    finally:
        collectives._fast = saved


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-2, 6), st.integers(0, 3), st.integers(-5, 5) | st.integers(0, 1 << 40),
                          st.integers(0, 3), st.integers(0, 2)), max_size=40))
def test_straggler_step_picks_equal_the_sorts(rows):
    """The stragglers' per-step order, medians and picks (numpy, linear) equal polars' sort and
    median and the lexsorts they replace."""
    from traceview.analysis.communication import stragglers as sg

    df = pl.DataFrame(rows, schema={"step": pl.Int64, "_d": pl.UInt32, "busy": pl.Int64, "la": pl.Int64,
                                    "caused": pl.Int64}, orient="row")
    o = sg._step_order(df["step"], df["_d"])
    if o is None:  # a repeated (step, device): the caller sorts with polars
        assert df.select("step", "_d").is_duplicated().any()
        return
    srt = df[pl.Series(o)]
    assert srt.select("step", "_d").equals(df.sort(["step", "_d"]).select("step", "_d"))
    if not srt.height:
        return
    sv = srt["step"].to_numpy()
    firsts = np.flatnonzero(np.r_[True, sv[1:] != sv[:-1]])
    gid = np.repeat(np.arange(len(firsts)), np.diff(np.append(firsts, len(sv))))
    busy, la, caused = (srt[c].to_numpy() for c in ("busy", "la", "caused"))
    rank = -srt["_d"].to_numpy().astype(np.int64)
    assert sg._first_best(firsts, (busy,)).tolist() == np.lexsort((-busy, gid))[firsts].tolist()
    assert (sg._first_best(firsts, (caused, la, rank)).tolist()
            == np.lexsort((-rank, -la, -caused, gid))[firsts].tolist())
    med = srt.group_by("step", maintain_order=True).agg(pl.col("busy").median())["busy"].to_numpy()
    assert sg._medians(busy, firsts).tolist() == med.tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=60), st.integers(0, 12))
def test_c_attr_counts_equal_bincount(ids, n):
    """The attr ids counted in C (``attr_counts``) equal ``np.bincount``, with or without a
    minimum length; an id past the table is refused and bincount decides."""
    from traceview.analysis.communication import collectives, overlap

    a = np.array(ids, dtype=np.uint32)
    assert collectives._attr_counts(a, n).tolist() == np.bincount(a).tolist()
    if not len(a) or int(a.max()) < n:
        assert overlap._attr_counts(a, n).tolist() == np.bincount(a, minlength=n).tolist()
    with _numpy_only(collectives), _numpy_only(overlap):
        assert collectives._attr_counts(a, n).tolist() == np.bincount(a).tolist()
        if not len(a) or int(a.max()) < n:
            assert overlap._attr_counts(a, n).tolist() == np.bincount(a, minlength=n).tolist()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 40), st.integers(-3, 12), st.booleans()), max_size=60),
       st.lists(st.integers(-1, 1), min_size=6, max_size=6), st.lists(st.integers(0, 2), min_size=6, max_size=6),
       st.lists(st.sampled_from([float("nan"), 0.0, 1.5, 3.0, 1e12]), min_size=6, max_size=6), st.booleans())
def test_c_direction_busy_in_order_equals_direction_busy(records, dir_of, dev_of, by_attr, in_order):
    """The one-pass host-transfer sweep (``direction_busy_in_order``) gives ``direction_busy``'s
    figures bit for bit whenever each (direction, device)'s counted records come in start
    order, and refuses exactly when one does not."""
    from traceview.analysis.communication import collectives

    if in_order:
        records = sorted(records, key=lambda r: r[1])
    ra = np.array([r[0] for r in records], dtype=np.uint32)
    start = np.array([r[1] for r in records], dtype=np.int64)
    ix = np.arange(len(records), dtype=np.int64)
    t = np.array([r[2] for r in records], dtype=np.int64)
    ok = np.array([r[3] for r in records], dtype=bool).view(np.uint8)
    d_of, v_of, b_of = np.array(dir_of, dtype=np.int64), np.array(dev_of, dtype=np.int64), np.array(by_attr)
    outs = [(np.zeros(2, dtype=np.int64), np.zeros(2), np.zeros(2, dtype=np.int64)) for _ in range(2)]
    got = collectives._fast.direction_busy_in_order(ra, ix, start, t, ok, d_of, v_of, b_of, *outs[0])
    assert collectives._fast.direction_busy(ra, ix, start, t, ok, d_of, v_of, b_of, *outs[1])
    groups: dict = {}
    for r, (a, s0, _, k) in enumerate(records):
        if k and d_of[a] >= 0 and not np.isnan(b_of[a]):
            groups.setdefault((d_of[a], v_of[a]), []).append(s0)
    assert got == all(g == sorted(g) for g in groups.values())
    if got:
        assert outs[0][0].tolist() == outs[1][0].tolist() and outs[0][1].tobytes() == outs[1][1].tobytes()
        assert outs[0][2].tolist() == outs[1][2].tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(-5, 50) | st.just(1 << 62), st.integers(0, 30)),
                min_size=1, max_size=60),
       st.lists(st.integers(0, 3), min_size=8, max_size=8))
def test_c_transfer_groups_equal_the_group_by(records, g_of):
    """The host transfers' per-group figures from the C passes (``attr_stats``, ``median_by``)
    equal polars' group-by (order of first appearance, first attr, count, median, sums)."""
    from traceview.analysis.communication import collectives

    ra = np.array([r[0] for r in records], dtype=np.uint32)
    g = np.array(g_of, dtype=np.int64)
    rec = pl.DataFrame({"_g": g[ra], "attr": pl.Series(ra, dtype=pl.UInt32),
                        "t_ps": pl.Series([r[1] for r in records], dtype=pl.Int64),
                        "all_self_ps": pl.Series([r[2] for r in records], dtype=pl.Int64)})
    fast, ua = collectives._transfer_groups(rec, g, ra)
    with _numpy_only(collectives):
        ref, ua_ref = collectives._transfer_groups(rec, g, ra)
    assert fast.equals(ref) and fast.schema == ref.schema and ua.tolist() == ua_ref.tolist()


def _comm_records_rule(a, start, dur, dev, sk, dk, sy, cap):
    """``comm_records_stream``'s contract stated plainly: None where it must refuse (events out
    of (device, start) order, outputs shorter than the synchronous events plus the starts), else
    its records as lists (attr, dev, start, end, wait, sync)."""
    n = len(a)
    if any((dev[i - 1], start[i - 1]) > (dev[i], start[i]) for i in range(1, n)):
        return None
    if cap < sum(1 for x in a if sy[x] or sk[x] >= 0):
        return None
    starts, dones = {}, {}
    for i in range(n):
        if sk[a[i]] >= 0:
            starts.setdefault(int(sk[a[i]]), []).append(i)
        if dk[a[i]] >= 0:
            dones.setdefault(int(dk[a[i]]), []).append(i)
    pairs = []
    for key, ss in starts.items():  # the k-th start with the k-th done after the key's first start
        for s, d in zip(ss, [d for d in dones.get(key, []) if d > ss[0]]):
            if start[d] >= start[s]:
                pairs.append((s, d))
    pairs.sort()
    end = [int(start[i]) + int(dur[i]) for i in range(n)]
    rec = [(int(dev[i]), int(start[i]), 0, i, int(a[i]), end[i], 0) for i in range(n) if sy[a[i]]]
    rec += [(int(dev[s]), int(start[s]), 1, s, int(a[s]), max(end[d], end[s]), end[d] - int(start[d]))
            for s, d in pairs]
    rec.sort()
    return [[r[4] for r in rec], [r[0] for r in rec], [r[1] for r in rec], [r[5] for r in rec],
            [r[6] for r in rec], [1 - r[2] for r in rec]]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 1), st.integers(0, 12), st.integers(-3, 10)), max_size=60),
       st.lists(st.sampled_from(["sync", "start", "done", "none"]), min_size=8, max_size=8),
       st.lists(st.integers(0, 2), min_size=8, max_size=8), st.booleans(), st.integers(0, 3))
def test_c_comm_records_stream_equals_the_rule(events, role, key, in_order, short):
    """The overlap's records built in one streaming pass (``comm_records_stream``) equal the rule
    (:func:`_comm_records_rule`): pairs by rank per key (dones before the key's first start
    orphaned, dones before the start of their rank), unmatched starts and pairs whose done
    starts earlier dropped, synchronous records first within a (device, start); the same
    refusals (out of order, outputs too short). Each description is one of synchronous, a start,
    a done or neither, as ``_comm_ops`` classifies them."""
    from traceview.analysis.communication import overlap

    if in_order:
        events = sorted(events, key=lambda e: (e[1], e[2]))
    a = np.array([e[0] for e in events], dtype=np.uint32)
    dev = np.array([e[1] for e in events], dtype=np.int32)
    start = np.array([e[2] for e in events], dtype=np.int64)
    dur = np.array([e[3] for e in events], dtype=np.int64)
    sk = np.array([k if r == "start" else -1 for r, k in zip(role, key)], dtype=np.int64)
    dk = np.array([k if r == "done" else -1 for r, k in zip(role, key)], dtype=np.int64)
    sy = np.array([r == "sync" for r in role], dtype=np.uint8)
    cap = max(0, int(sum(1 for x in a if sy[x] or sk[x] >= 0)) - short)
    o = (np.zeros(cap, dtype=np.uint32), np.zeros(cap, dtype=np.int32), np.zeros(cap, dtype=np.int64),
         np.zeros(cap, dtype=np.int64), np.zeros(cap, dtype=np.int64), np.zeros(cap, dtype=np.uint8))
    got = overlap._fast.comm_records_stream(a, start, dur, dev, sk, dk, sy, *o)
    want = _comm_records_rule(a, start, dur, dev, sk, dk, sy, cap)
    assert (got < 0) == (want is None)
    if want is not None:
        assert got == len(want[0]) and [x[:got].tolist() for x in o] == want


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 60)), max_size=30),
       st.lists(st.tuples(st.integers(0, 2), st.integers(0, 50), st.integers(0, 12)), max_size=30))
def test_window_steps_equal_the_asof_join(arrivals, windows):
    """The stragglers' window per arrival (:func:`_window_steps`: a sort and a search per
    device) equals the backward as-of join by device and its end check; two windows of a
    device beginning together are left to the join."""
    from traceview.analysis.communication import stragglers

    ex = pl.DataFrame({"_d": pl.Series([a for a, _ in arrivals], dtype=pl.UInt32),
                       "start_ps": pl.Series([t for _, t in arrivals], dtype=pl.Int64)}).sort("start_ps")
    w = pl.DataFrame({"_d": pl.Series([d for d, _, _ in windows], dtype=pl.UInt32),
                      "step": pl.Series(range(len(windows)), dtype=pl.Int64),
                      "start_ps": pl.Series([s for _, s, _ in windows], dtype=pl.Int64)})
    w = w.with_columns((pl.col("start_ps") + pl.Series([n for _, _, n in windows], dtype=pl.Int64)).alias("_e"))
    got = stragglers._window_steps(ex, w)
    starts = [(d, s) for d, s, _ in windows]
    if not windows or len(set(starts)) < len(starts):
        assert got is None
        return
    ref = ex.join_asof(w.select("_d", "step", pl.col("start_ps").alias("_ws"), "_e").sort("_ws"),
                       left_on="start_ps", right_on="_ws", by="_d", strategy="backward", check_sortedness=False)
    ref = ref.select(pl.when(pl.col("start_ps") < pl.col("_e")).then(pl.col("step")).alias("step"))["step"]
    assert got.to_list() == ref.to_list() and got.dtype == ref.dtype


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 20)), max_size=50), st.booleans(),
       st.lists(st.integers(0, 2), min_size=6, max_size=6), st.lists(st.integers(0, 4), min_size=6, max_size=6))
def test_c_events_placed_equal_the_gathers(events, in_order, dev_of, cls_of):
    """Each event's device and class with the (device, start) order checked in one C pass
    (``events_placed``) equal numpy's gathers and comparisons; an id past the tables is refused."""
    from traceview.analysis.communication import overlap

    d_of, c_of = np.array(dev_of, dtype=np.int32), np.array(cls_of, dtype=np.int8)
    if in_order:
        events = sorted(events, key=lambda e: (dev_of[e[0]] if e[0] < 6 else 0, e[1]))
    a = np.array([e[0] for e in events], dtype=np.uint32)
    s = np.array([e[1] for e in events], dtype=np.int64)
    dev, cls, placed = overlap._placed(a, s, d_of, c_of)
    if len(a) and int(a.max()) >= 6:
        assert placed == -1
        return
    assert dev.tolist() == d_of[a].tolist() and cls.tolist() == c_of[a].tolist()
    ordered = all((dev[i], s[i]) >= (dev[i - 1], s[i - 1]) for i in range(1, len(a)))
    assert placed == int(ordered)


def test_a_section_thread_keeps_a_base_exception_for_its_getter(monkeypatch):
    """A section computed beside (analysis.report._beside) that raises a BaseException (a
    panic of polars' while the command is interrupted, as PyO3's PanicException is one) gives
    it to its getter; it never reaches threading's hook, which printed "Exception in thread
    traceview-section: Traceback" beside "traceview: interrupted" (2 in 40 interrupted runs)."""
    import threading

    from traceview.analysis.report import _beside

    class Panic(BaseException):
        pass

    hooked = []
    monkeypatch.setattr(threading, "excepthook", hooked.append)

    def panics():
        raise Panic("interrupted")

    first, second = _beside(panics, lambda: 2)
    with pytest.raises(Panic):
        first()
    with pytest.raises(RuntimeError, match="ended early"):  # not run after the panic
        second()
    ok, fails = _beside(lambda: 1, lambda: 1 / 0)
    assert ok() == 1
    with pytest.raises(ZeroDivisionError):
        fails()
    assert hooked == []
