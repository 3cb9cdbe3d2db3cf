"""The prefetch (traceview.read.prefetch): decoding a file's planes (TPU, GPU, or the host
plane of a CPU trace) on a thread while polars imports changes nothing in what is read, and is
dropped when the file changes."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from traceview.cli import process
from traceview.errors import TraceUnreadable
from traceview.model import from_xplane as xplane
from traceview.model.annotated_plane import prefetch_plan
from traceview.read import prefetch
from traceview.read.xplane import wire as xline

pytestmark = pytest.mark.skipif(not xline.has_decoder(), reason="the C accelerator is not built")


def _same(a, b) -> None:
    assert a.ops.equals(b.ops, null_equal=True)
    assert a.module_runs.equals(b.module_runs, null_equal=True)
    assert (a.n_events, a.notes, a.has_shapes) == (b.n_events, b.notes, b.has_shapes)
    assert [d.name for d in a.devices] == [d.name for d in b.devices]


def test_prefetched_read_equals_a_plain_read(shared_traces):
    path = shared_traces / "tpu_v6e_4chip_psum.xplane.pb"
    plain = xplane.read_xplane(path)
    pf = prefetch.start(path, prefetch_plan)
    assert pf is not None and pf.matches(path)
    other = prefetch.start(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb", prefetch_plan)
    # a prefetch of another file is not taken: the reader decodes this one itself
    _same(plain, xplane.read_xplane(path, prefetch=other))
    pre = xplane.read_xplane(path, prefetch=pf)
    _same(plain, pre)
    # the v6e trace: 4 TPU planes, 6,013 op events of 65 descriptions (as XProf's hlo_stats counts)
    assert pre.table.height == 6013 and pre.table.attrs.height == 65
    assert sum(d.name.startswith("/device:TPU:") for d in pre.devices) == 4


GPUS = [f"/device:GPU:{i}" for i in range(8)]
ENGINE = next((Path(__file__).parent.parent / "fixtures" / "greedy_b4").glob("plugins/profile/*/*.xplane.pb"))


@pytest.mark.parametrize("path, planes", [
    ("mi300x_jax_gemm_sweep.xplane.pb", GPUS),  # GPU stream lines
    ("gpu_v100x8_tf2_bert_no_xla.xplane.pb", GPUS),  # TensorFlow without XLA: no HLO op
    ("tpu_v6e_pallas_matmul_llo.xplane.pb", ["/device:TPU:0", "/device:CUSTOM:Megascale Trace"]),
    (ENGINE, ["/host:CPU"]),  # a CPU trace: its host plane holds the ops
])
def test_every_plane_kind_is_prefetched_and_read_the_same(shared_traces, path, planes):
    from traceview.read.xplane.wire import AnnotatedLine

    path = shared_traces / path
    plain = xplane.read_xplane(path)
    pf = prefetch.start(path, prefetch_plan)
    assert pf is not None
    space, results = pf.take()
    assert [p.name for p in space.planes if id(p) in results] == planes
    assert all(isinstance(x, (AnnotatedLine, int)) for p in space.planes if not p.name.startswith("/device:TPU:")
               and id(p) in results for x in results[id(p)])
    got = xplane.convert_xspace(space, str(path), plain.host, "", decoded=results)
    _same(plain, got)
    assert got.step_markers.equals(plain.step_markers)
    assert (got.ops.height > 0) == ("no_xla" not in str(path))


def test_a_file_changed_after_the_start_is_read_afresh(tmp_path, shared_traces):
    a = tmp_path / "h.xplane.pb"
    shutil.copyfile(shared_traces / "tpu_v6e_4chip_psum.xplane.pb", a)
    pf = prefetch.start(a, prefetch_plan)
    assert pf is not None
    other = tmp_path / "other.xplane.pb"
    shutil.copyfile(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb", other)
    other.replace(a)  # a new file under the same name: its identity differs
    assert pf.take() is None
    got = xplane.read_xplane(a, prefetch=pf)
    want = xplane.read_xplane(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb", host="h")
    assert got.ops["device"].str.starts_with("/device:GPU:").all()
    assert got.ops.drop("file").equals(want.ops.drop("file"), null_equal=True)


def _refused_alike(tmp_path, data: bytes) -> str:
    """The message of the error reading ``data`` (written to tmp_path) raises, the same with a
    prefetch as without."""
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(bytes(data))
    with pytest.raises(TraceUnreadable) as plain:
        xplane.read_xplane(bad)
    pf = prefetch.start(bad, prefetch_plan)
    assert pf is not None
    with pytest.raises(TraceUnreadable) as pre:
        xplane.read_xplane(bad, prefetch=pf)
    assert str(pre.value) == str(plain.value)
    return str(pre.value)


@pytest.mark.parametrize("name, plane_name, line_name", [
    ("tpu_v6e_4chip_psum.xplane.pb", "/device:TPU:", "XLA Ops"),
    ("mi300x_jax_gemm_sweep.xplane.pb", "/device:GPU:", None),  # a GPU stream line
])
def test_a_malformed_line_raises_the_same_error_with_and_without_prefetch(tmp_path, shared_traces, name, plane_name,
                                                                           line_name):
    data = bytearray((shared_traces / name).read_bytes())
    space = xline.map_xspace(shared_traces / name)
    plane = next(p for p in space.planes if p.name.startswith(plane_name))
    ops = max((m for m, raw in zip(plane.mapped_lines, plane.lines)
               if line_name in (None, xline.line_header(raw, "x").name)), key=lambda m: m.end - m.start)
    mid = (ops.start + ops.end) // 2
    data[mid:mid + 16] = b"\xff" * 16  # an over-long varint inside the line's events
    bad = _refused_alike(tmp_path, data)
    assert "malformed XLine" in bad and str(tmp_path / "bad.xplane.pb") in bad


def test_load_prefetches_only_the_plain_case(tmp_path, shared_traces, monkeypatch, cache_dir):
    from traceview.api import load
    from traceview.model.load import start_prefetch
    from traceview.read.cache import TableCache
    from traceview.read.discover import discover

    src = shared_traces / "tpu_v6e_4chip_psum.xplane.pb"
    one = tmp_path / "one"
    one.mkdir()
    f = one / "h.xplane.pb"
    f.write_bytes(src.read_bytes() * 2)  # over the cache's 1 MiB floor: a cache entry is possible
    monkeypatch.delenv("TRACEVIEW_MAX_BYTES", raising=False)
    started = []
    monkeypatch.setattr(prefetch, "start", lambda p, plan, idle=None: started.append(p) or "started")
    cache = TableCache(cache_dir, min_file_bytes=1 << 20)

    def start(**kw):
        return start_prefetch(discover(str(one)), **{"max_bytes": None, "cache": cache, "local": True, **kw})

    assert start() == "started" and started == [f]
    assert start(max_bytes=10 ** 9) is None  # limits are checked first
    assert start(local=False) is None  # a pool or a cluster reads the file
    monkeypatch.setenv("TRACEVIEW_MAX_BYTES", "1000000000")
    assert start() is None
    monkeypatch.delenv("TRACEVIEW_MAX_BYTES")
    shutil.copyfile(src, one / "h2.xplane.pb")  # two hosts: the parallel readers' business
    assert start() is None
    (one / "h2.xplane.pb").unlink()
    # a fresh parsed-table entry: the cache serves the table, nothing to decode
    load(str(one), cache=cache, prefetch=False)
    assert start() is None
    assert started == [f]


@pytest.mark.parametrize("fails", [False, True])
def test_the_taker_runs_its_idle_work_while_the_thread_decodes(shared_traces, fails):
    """take() runs the caller's idle work once while a plane is still being decoded (here the
    plane's work waits for it), then waits; what the idle work raises is dropped, and the
    planes are read as without it."""

    path = shared_traces / "mi300x_jax_gemm_sweep.xplane.pb"
    ran = threading.Event()
    calls = []

    def plan(space):
        def slow(plane, p):
            assert ran.wait(30)  # decoded only once the taker has done its idle work
            return ("decoded", plane.name)
        return [(space.planes[0], slow)]

    def idle():
        calls.append(1)
        ran.set()
        if fails:
            raise ImportError("no such module")

    pf = prefetch.start(path, plan, idle)
    _until_claimed(pf)
    got = pf.take()
    assert calls == [1] and got is not None
    space, results = got
    assert list(results.values()) == [("decoded", space.planes[0].name)]


def test_a_plane_in_parts_is_joined_in_plan_order(shared_traces):
    """A plan naming a plane in several parts: their lists joined in plan order whatever order
    they ran in (the heaviest started first), the first failing part's exception standing for
    the plane (as a decoding line by line raises the first bad line's)."""
    path = shared_traces / "mi300x_jax_gemm_sweep.xplane.pb"

    def part(tag, fails=False):
        def work(plane, p):
            if fails:
                raise ValueError(tag)
            return [tag]
        return work

    def plan(space):
        a, b = space.planes[0], space.planes[1]
        return [(a, part("a1"), 1), (a, part("a2"), 5), (a, part("a3"), 3),
                (b, part("b1")), (b, part("b2", True)), (b, part("b3", True))]

    pf = prefetch.start(path, plan)
    assert pf is not None
    space, results = pf.take()
    assert pf.order == [1, 2, 0, 3, 4, 5]
    assert results[id(space.planes[0])] == ["a1", "a2", "a3"]
    err = results[id(space.planes[1])]
    assert isinstance(err, ValueError) and str(err) == "b2"


def test_a_split_plane_decodes_as_a_whole_one(shared_traces):
    """The engine trace's host plane is decoded in parts (its large lines apart): the parts'
    lines joined are the plane's lines decoded in one go."""
    import numpy as np

    from traceview.model.annotated_plane import decode_lines

    space = xline.map_xspace(ENGINE)
    plan = prefetch_plan(space)
    assert len(plan) > 1 and len({id(x[0]) for x in plan}) == 1
    whole = decode_lines(plan[0][0], str(ENGINE), False)
    joined = [x for p, work, _ in plan for x in work(p, str(ENGINE))]
    assert len(joined) == len(whole) == len(plan[0][0].lines)
    for a, b in zip(whole, joined):
        assert a.name == b.name and len(a) == len(b)
        assert all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("starts", "durations", "combo", "combo_mids",
                                                                         "combo_kinds", "combo_values", "extra_values"))


def test_the_imports_while_decoding_all_import():
    """Every module the CLI imports while a trace is decoded exists (a renamed module would
    otherwise be skipped silently)."""
    import importlib.util


    names = [m for ms in process.AFTER_READ_IMPORTS.values() for m in ms]
    assert names and all(importlib.util.find_spec(m) is not None for m in names)
    process.imports_while_decoding("analysis", "table", "no such part")()  # imports them, without error


def test_imports_beside_runs_the_imports_on_a_thread_and_joins_it():
    """process.imports_beside: the idle work runs on another thread while the block runs, is
    done when the block ends, its exceptions swallowed; the switch interval is restored (also
    when the block raises); None does nothing."""
    import sys


    saved = sys.getswitchinterval()
    seen, go = [], threading.Event()

    def idle():
        go.wait(5)
        seen.append(threading.current_thread().name)

    with process.imports_beside(idle):
        assert sys.getswitchinterval() == process.DECODE_SWITCH_INTERVAL_S
        go.set()  # the block goes on while the thread works
    assert seen == ["traceview-imports"] and sys.getswitchinterval() == saved

    def failing():
        raise ImportError("no such module")

    with process.imports_beside(failing):
        pass
    with pytest.raises(KeyError):
        with process.imports_beside(lambda: None):
            raise KeyError("x")
    assert sys.getswitchinterval() == saved
    with process.imports_beside(None):
        assert sys.getswitchinterval() == saved


def test_a_line_name_is_read_without_walking_its_events(shared_traces):
    """wire.line_name gives line_header's name for every XLine of the shared traces, reading
    only the fields before the events: a line cut inside its events (which line_header
    refuses as malformed) still gives its name, so a mapped line's released pages are not
    paged in again to look for the export's step line."""
    from pathlib import Path

    from traceview.errors import TraceUnreadable
    from traceview.read.xplane import wire

    n = 0
    for name in ("mi300x_jax_gemm_sweep.xplane.pb", "tpu_v6e_4chip_psum.xplane.pb", "mi300x_jax_attention.xplane.pb"):
        space = wire.map_xspace(Path(shared_traces / name))
        for plane in space.planes:
            for raw in plane.lines:
                want = wire.line_header(raw, name).name
                assert wire.line_name(raw, name) == want
                n += 1
                if len(raw) > 4096:  # cut inside the events
                    cut = bytes(raw[:2048])
                    with pytest.raises(TraceUnreadable):
                        wire.line_header(cut, name)
                    assert wire.line_name(cut, name) == want
    assert n > 50


def _line_in_pieces(raw, ids, slots, piece_bytes):
    """wire.decode_annotated_piece over line_layout's pieces of ``raw``, joined."""
    import numpy as np

    from traceview.model.annotated_plane import EXTRA_STATS, KEY_STATS

    nkey, nslot = len(KEY_STATS), len(KEY_STATS) + len(EXTRA_STATS)
    head, bounds, counts = xline.annotated_layout(raw, "x", piece_bytes)
    arrays = xline.annotated_arrays(counts[-1], nslot - nkey)
    order = list(range(len(bounds) - 1))[::-1]  # pieces may be decoded in any order
    got = {k: xline.decode_annotated_piece(memoryview(raw)[bounds[k]:bounds[k + 1]], "x", head.name,
                                           np.asarray(ids), np.asarray(slots), nkey, nslot,
                                           counts[k + 1] - counts[k], arrays, counts[k]) for k in order}
    return len(bounds) - 1, xline.join_annotated(head, arrays, counts, [got[k] for k in sorted(got)], nkey, nslot)


def _same_line(a, b) -> None:
    import numpy as np

    assert a.header == b.header and a.name == b.name and a.strings == b.strings
    assert [type(s) for s in a.strings] == [type(s) for s in b.strings]
    for k in ("starts", "durations", "occurrences", "has_stats", "combo", "extra_kinds", "extra_values", "combo_mids",
              "combo_kinds", "combo_values"):
        x, y = getattr(a, k), getattr(b, k)
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), k


def test_a_line_decoded_in_pieces_is_the_line_decoded_whole():
    """Pieces of a line, each with its own combos and strings, joined: the arrays, combos
    (in order of first appearance) and strings (str and bytes apart) of the whole line; str
    values in key and extra slots renumbered, pre-aggregated events kept."""
    from traceview.model.annotated_plane import EXTRA_STATS, KEY_STATS, stat_slots
    from traceview.read.xplane.protos import XLine

    names = {1: "hlo_op", 2: "hlo_module", 3: "program_id", 4: "step_num", 5: "name", 6: "tf_op"}
    ids, slots = stat_slots(names)
    line = XLine(id=3, name="Stream #7", timestamp_ns=12345)
    for i in range(600):
        ev = line.events.add(metadata_id=1 + i % 5, duration_ps=10 + i)
        if i % 97 == 5:
            ev.num_occurrences = 3
        else:
            ev.offset_ps = 1000 * i
        if i % 4:
            ev.stats.add(metadata_id=1, str_value=f"op{(i * 7) % 11}")
            ev.stats.add(metadata_id=3, uint64_value=i % 3)
        if i % 9 == 0:
            ev.stats.add(metadata_id=5, bytes_value=b"op%d" % (i % 4))  # bytes alongside equal str
            ev.stats.add(metadata_id=6, str_value=b"op%d" % (i % 4))
        if i % 13 == 0:
            ev.stats.add(metadata_id=4, str_value=f"step {i // 50}")  # a str in an extra slot
        elif i % 13 == 1:
            ev.stats.add(metadata_id=4, int64_value=i)
    raw = line.SerializeToString()
    nkey, nslot = len(KEY_STATS), len(KEY_STATS) + len(EXTRA_STATS)
    whole = xline.decode_annotated(raw, "x", ids, slots, nkey, nslot, xline.line_walk(raw, "x"))
    assert len(whole.strings) > 10 and whole.occurrences.any()
    for piece_bytes in (1, 100, 2000, len(raw)):
        n, joined = _line_in_pieces(raw, ids, slots, piece_bytes)
        assert n > 1 or piece_bytes == len(raw)
        _same_line(whole, joined)


def test_a_large_line_is_decoded_in_pieces_by_both_threads(shared_traces, monkeypatch):
    """With the split thresholds lowered, the GPU and CPU traces' largest lines are decoded in
    pieces (SplitLine parts): the file reads the same as without a prefetch."""
    from traceview.model import annotated_plane

    monkeypatch.setattr(annotated_plane, "SPLIT_MIN_BYTES", 1)
    monkeypatch.setattr(annotated_plane, "PIECE_SHARE", 1 / 64)
    monkeypatch.setattr(annotated_plane, "PIECE_MIN_BYTES", 1)
    for path in (shared_traces / "mi300x_jax_attention.xplane.pb", ENGINE,
                 shared_traces / "gpu_v100x8_tf2_bert_no_xla.xplane.pb"):
        plain = xplane.read_xplane(path)
        space = xline.map_xspace(path)
        plan = prefetch_plan(space)
        pieces = [w for _, w, _ in plan if getattr(w, "func", None) is annotated_plane.decode_piece]
        assert len(pieces) > 4
        pf = prefetch.start(path, prefetch_plan)
        assert pf is not None
        space, results = pf.take()
        assert any(isinstance(x, annotated_plane.SplitLine) for r in results.values() if isinstance(r, list)
                   for x in r)
        got = xplane.convert_xspace(space, str(path), plain.host, "", decoded=results)
        _same(plain, got)
        assert got.step_markers.equals(plain.step_markers)


def test_a_malformed_line_in_pieces_raises_the_error_of_the_whole_line(tmp_path, shared_traces, monkeypatch):
    """A fault inside one piece of a split line: the whole line is decoded again, which raises
    what a read without a prefetch raises."""
    from traceview.model import annotated_plane

    monkeypatch.setattr(annotated_plane, "SPLIT_MIN_BYTES", 1)
    monkeypatch.setattr(annotated_plane, "PIECE_SHARE", 1 / 64)
    monkeypatch.setattr(annotated_plane, "PIECE_MIN_BYTES", 1)
    name = "mi300x_jax_attention.xplane.pb"
    data = bytearray((shared_traces / name).read_bytes())
    space = xline.map_xspace(shared_traces / name)
    plane = next(p for p in space.planes if p.name.startswith("/device:GPU:"))
    ops = max(plane.mapped_lines, key=lambda m: m.end - m.start)
    for at in (ops.start + (ops.end - ops.start) * 3 // 4, ops.start + (ops.end - ops.start) // 3):
        data[at:at + 3] = b"\x22\x01\xff"  # a stat of one byte: not a valid XStat
    _refused_alike(tmp_path, data)


def _until_claimed(pf) -> None:
    """Wait until ``pf``'s thread has claimed its one plane (the taker then drains nothing)."""
    assert pf is not None
    for _ in range(3000):
        with pf.lock:
            if pf.next == 1:
                return
        time.sleep(0.01)


# -- the loading thread's idle work in steps (process.imports_while_decoding): take() leaves
# it once the trace is decoded; no imports beside the report under pytest


def test_the_takers_idle_steps_stop_once_every_part_is_decoded(shared_traces):
    """An idle work with ``steps`` (process.imports_while_decoding's) is stepped through only
    while a part is still being decoded: once every part is done, take() leaves the rest (the
    caller's to do later) and hands the planes over."""
    path = shared_traces / "mi300x_jax_gemm_sweep.xplane.pb"
    first = threading.Event()
    taken = []

    def plan(space):
        def slow(plane, p):
            assert first.wait(30)  # decoded once the taker has taken its first step
            return ("decoded", plane.name)
        return [(space.planes[0], slow)]

    def idle():
        raise AssertionError("stepped through, not called")

    def steps():
        for i in range(5):
            taken.append(i)
            if i == 0:
                first.set()
                assert pf.done[0].wait(30)  # the part is decoded before the next step is asked for
            yield i

    idle.steps = steps
    pf = prefetch.start(path, plan, idle)
    _until_claimed(pf)
    space, results = pf.take()
    assert taken == [0]
    assert list(results.values()) == [("decoded", space.planes[0].name)]


def test_the_imports_while_decoding_come_in_steps():
    """process.imports_while_decoding's idle imports every module when called, and its steps
    one module each, in order."""
    idle = process.imports_while_decoding("json", "no such part")
    assert list(idle.steps()) == list(process.AFTER_READ_IMPORTS["json"])
    assert idle() is None


def test_no_imports_beside_under_pytests_import_hook():
    """Under pytest (its assertion rewriting parses traceview's modules with ast, not
    thread-safe in CPython 3.11) a command imports nothing on a second thread."""
    assert process.imports_may_race()
