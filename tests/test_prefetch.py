"""The CLI's prefetch (traceview.prefetch): decoding a file's TPU planes on a thread while
polars imports changes nothing in what is read, and is dropped when the file changes."""

from __future__ import annotations

import shutil

import pytest

from traceview import prefetch, xline, xplane
from traceview.errors import TraceUnreadable

pytestmark = pytest.mark.skipif(xline._fast is None, reason="the C accelerator is not built")


def _same(a, b) -> None:
    assert a.ops.equals(b.ops, null_equal=True)
    assert a.module_runs.equals(b.module_runs, null_equal=True)
    assert (a.n_events, a.notes, a.has_shapes) == (b.n_events, b.notes, b.has_shapes)
    assert [d.name for d in a.devices] == [d.name for d in b.devices]


def test_prefetched_read_equals_a_plain_read(shared_traces):
    path = shared_traces / "tpu_v6e_4chip_psum.xplane.pb"
    plain = xplane.read_xplane(path)
    assert prefetch.start(path)
    assert not prefetch.start(path)  # one per file at a time
    assert prefetch.pending() == 1
    pre = xplane.read_xplane(path)
    assert prefetch.pending() == 0  # taken
    _same(plain, pre)
    # the v6e trace: 4 TPU planes, 6,013 op events of 65 descriptions (as XProf's hlo_stats counts)
    assert pre.table.height == 6013 and pre.table.attrs.height == 65
    assert sum(d.name.startswith("/device:TPU:") for d in pre.devices) == 4


def test_a_file_changed_after_the_start_is_read_afresh(tmp_path, shared_traces):
    a = tmp_path / "h.xplane.pb"
    shutil.copyfile(shared_traces / "tpu_v6e_4chip_psum.xplane.pb", a)
    assert prefetch.start(a)
    other = tmp_path / "other.xplane.pb"
    shutil.copyfile(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb", other)
    other.replace(a)  # a new file under the same name: its identity differs
    got = xplane.read_xplane(a)
    want = xplane.read_xplane(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb", host="h")
    assert prefetch.pending() == 0
    assert got.ops["device"].str.starts_with("/device:GPU:").all()
    assert got.ops.drop("file").equals(want.ops.drop("file"), null_equal=True)


def test_a_malformed_line_raises_the_same_error_with_and_without_prefetch(tmp_path, shared_traces):
    data = bytearray((shared_traces / "tpu_v6e_4chip_psum.xplane.pb").read_bytes())
    space = xline.map_xspace(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    tpu = next(p for p in space.planes if p.name.startswith("/device:TPU:"))
    ops = next(m for m, raw in zip(tpu.mapped_lines, tpu.lines) if xline.line_header(raw, "x").name == "XLA Ops")
    mid = (ops.start + ops.end) // 2
    data[mid:mid + 16] = b"\xff" * 16  # an over-long varint inside the XLA Ops events
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(bytes(data))
    with pytest.raises(TraceUnreadable) as plain:
        xplane.read_xplane(bad)
    assert prefetch.start(bad)
    with pytest.raises(TraceUnreadable) as pre:
        xplane.read_xplane(bad)
    assert str(pre.value) == str(plain.value)
    assert "malformed XLine" in str(pre.value) and str(bad) in str(pre.value)


def test_the_cli_prefetches_only_the_plain_case(tmp_path, shared_traces, monkeypatch, cache_dir):
    from traceview import cli
    from traceview.discover import discover

    src = shared_traces / "tpu_v6e_4chip_psum.xplane.pb"
    one = tmp_path / "one"
    one.mkdir()
    f = one / "h.xplane.pb"
    f.write_bytes(src.read_bytes() * 2)  # over the cache's 1 MiB floor: a cache entry is possible
    args = cli.build_parser().parse_args(["analyze", str(one), "--format", "json"])
    monkeypatch.delenv("TRACEVIEW_MAX_BYTES", raising=False)
    started = []
    monkeypatch.setattr(prefetch, "start", lambda p: started.append(p) or True)
    assert cli._start_prefetch(discover(str(one)), args) and started == [f]
    with_limit = cli.build_parser().parse_args(["analyze", str(one), "--max-bytes", "1000000000"])
    assert not cli._start_prefetch(discover(str(one)), with_limit)  # limits are checked first
    monkeypatch.setenv("TRACEVIEW_MAX_BYTES", "1000000000")
    assert not cli._start_prefetch(discover(str(one)), args)
    monkeypatch.delenv("TRACEVIEW_MAX_BYTES")
    shutil.copyfile(src, one / "h2.xplane.pb")  # two hosts: the parallel readers' business
    assert not cli._start_prefetch(discover(str(one)), args)
    (one / "h2.xplane.pb").unlink()
    # a fresh parsed-table entry: the cache serves the table, nothing to decode
    from traceview.profile import load

    load(str(one))
    assert not cli._start_prefetch(discover(str(one)), args)
    assert started == [f]
