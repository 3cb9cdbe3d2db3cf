"""The benchmark trace scaler (benchmarks/scale_trace.py) keeps every population's numbers.

A trace whose device events are repeated R times must give, per (op, shape) population and
per (program, op) row, exactly R times the unscaled occurrences, total time and self time,
and R times the module executions — on TPU (XLA Ops / XLA Modules lines with device-clock
stats), GPU (stream lines) and a TPU trace.json.gz. XProf itself, run on a scaled TPU file,
must agree too (its counts are the independent check that the scaled file is well formed).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import polars as pl
import pytest

from traceview.model.files import read_file
from traceview.read.xplane.protos import XSpace
from traceview.analysis.ops.aggregate import by_program_op, by_shape

_SPEC = importlib.util.spec_from_file_location(
    "scale_trace", Path(__file__).resolve().parents[1] / "benchmarks" / "scale_trace.py")
scale_trace = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(scale_trace)

_KEYS = {"shape": ["op_name", "shape", "module"], "program": ["program_id", "op_name"]}


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("TRACEVIEW_NO_CACHE", "1")


def _totals(ops: pl.DataFrame, key: str) -> pl.DataFrame:
    table = by_shape(ops) if key == "shape" else by_program_op(ops)
    return table.select(*_KEYS[key], "occurrences", "total_ps", "self_ps").sort(_KEYS[key], nulls_last=True)


def _assert_scaled(base, scaled, repeat: int) -> None:
    for key in _KEYS:
        want = _totals(base.ops, key).with_columns(pl.col("occurrences", "total_ps", "self_ps") * repeat)
        got = _totals(scaled.ops, key)
        assert got.height == want.height > 0
        assert got.equals(want), (key, got.join(want, on=_KEYS[key], suffix="_want").head())
    assert scaled.module_runs.height == base.module_runs.height * repeat
    assert scaled.ops.height == base.ops.height * repeat


@pytest.mark.parametrize("name", ["tpu_v6e_4chip_psum.xplane.pb", "mi300x_jax_gemm_sweep.xplane.pb"])
def test_scaled_xplane_multiplies_every_population(shared_traces, tmp_path, name):
    src = shared_traces / name
    repeat = 3
    dst = tmp_path / f"x{repeat}.xplane.pb"
    info = scale_trace.scale_xplane(src, dst, repeat)
    per_rep, other = scale_trace.count_device_events(src)
    assert info["events"] == per_rep * repeat + other
    space = XSpace.FromString(dst.read_bytes())  # the full schema parses it
    assert sum(len(line.events) for p in space.planes for line in p.lines) == info["events"]
    base = read_file(src)
    scaled = read_file(dst, host=base.host)
    assert scaled.n_events == info["events"] == base.n_events + per_rep * (repeat - 1)
    _assert_scaled(base, scaled, repeat)


def test_scaled_xplane_op_lines_only(shared_traces, tmp_path):
    src = shared_traces / "tpu_v6e_4chip_psum.xplane.pb"
    dst = tmp_path / "ops_only.xplane.pb"
    scale_trace.scale_xplane(src, dst, 2, op_lines_only=True)
    space = XSpace.FromString(dst.read_bytes())
    orig = XSpace.FromString(src.read_bytes())
    for p, q in zip(space.planes, orig.planes):
        for a, b in zip(p.lines, q.lines):
            want = len(b.events) * (2 if p.name.startswith("/device:") and b.name in ("XLA Ops", "XLA Modules") else 1)
            assert len(a.events) == want, (p.name, a.name)
    _assert_scaled(read_file(src), read_file(dst, host="tpu_v6e_4chip_psum"), 2)


def test_scaled_trace_json_multiplies_every_population(shared_traces, tmp_path):
    src = next((shared_traces / "vllm_tpu_qwen").rglob("*.trace.json.gz"))
    dst = tmp_path / "host.trace.json.gz"
    info = scale_trace.scale_trace_json(src, dst, 2)
    assert info["device_events"] > 0 and info["json_bytes"] > 0
    base = read_file(src, host="h")
    scaled = read_file(dst, host="h")
    _assert_scaled(base, scaled, 2)


def test_xprof_agrees_on_a_scaled_trace(shared_traces, tmp_path):
    """XProf's own hlo_stats on the scaled file: every row's occurrences and total time are
    the unscaled ones times the repeat factor (µs totals within float rounding)."""
    from oracle import xprof_hlo_stats

    src = shared_traces / "tpu_v6e_4chip_psum.xplane.pb"
    dst = tmp_path / "scaled.xplane.pb"
    scale_trace.scale_xplane(src, dst, 2)
    key = ["program_id", "hlo_op_name"]
    a = xprof_hlo_stats(src).select(*key, "occurrences", "total_time_us").sort(key)
    b = xprof_hlo_stats(dst).select(*key, "occurrences", "total_time_us").sort(key)
    assert a.height == b.height == 17
    assert (b["occurrences"] == a["occurrences"] * 2).all()
    assert ((b["total_time_us"] - a["total_time_us"] * 2).abs() <= 1e-6 * b["total_time_us"].abs() + 1e-9).all()


def test_step_is_wider_than_every_event(shared_traces):
    space = XSpace.FromString((shared_traces / "tpu_v6e_4chip_psum.xplane.pb").read_bytes())
    step, per_rep = scale_trace.xplane_step_ps(space)
    assert per_rep > 0 and step % 1_000_000 == 0
    for plane in space.planes:
        if plane.name.startswith("/device:"):
            for line in plane.lines:
                for ev in line.events:
                    assert ev.duration_ps < step


def test_us_text_is_exact():
    assert scale_trace._us_text(1_144_995_949_630) == b"1144995.94963"
    assert scale_trace._us_text(2_000_000) == b"2"
    assert scale_trace._us_text(1) == b"0.000001"
    assert scale_trace._varint(300) == b"\xac\x02"


def _stat_values(space, name: str) -> list[int]:
    out = []
    for plane in space.planes:
        if not plane.name.startswith("/device:"):
            continue
        ids = {k for k, v in plane.stat_metadata.items() if v.name == name}
        out += [st.uint64_value or st.int64_value for line in plane.lines for ev in line.events
                for st in ev.stats if st.metadata_id in ids]
    return out


def test_scaled_copies_have_distinct_run_ids(shared_traces, tmp_path):
    """Each repetition is a distinct module run: its run_ids are the original ones shifted by
    k * id_step (id_step: the largest original run_id + 1), on xplane and trace.json alike."""
    src = shared_traces / "tpu_v6e_4chip_psum.xplane.pb"
    dst = tmp_path / "x3.xplane.pb"
    info = scale_trace.scale_xplane(src, dst, 3)
    base = _stat_values(XSpace.FromString(src.read_bytes()), "run_id")
    got = _stat_values(XSpace.FromString(dst.read_bytes()), "run_id")
    assert len(base) == 414 and info["id_step"] == max(base) + 1
    step = info["id_step"]
    assert sorted(got) == sorted(v + k * step for k in range(3) for v in base)

    jsrc = next((shared_traces / "vllm_tpu_qwen").rglob("*.trace.json.gz"))
    jdst = tmp_path / "x3.trace.json"
    jinfo = scale_trace.scale_trace_json(jsrc, jdst, 3)
    import orjson
    evs = orjson.loads(jdst.read_bytes())["traceEvents"]
    dev_pids = {e["pid"] for e in evs if e.get("ph") == "M" and e.get("name") == "process_name"
                and e["args"]["name"].startswith("/device:")}
    rids = sorted(e["args"]["run_id"] for e in evs if e.get("pid") in dev_pids and "run_id" in e.get("args", {}))
    assert len(rids) == 8 * 3 and all(type(r) is str for r in rids)
    assert len(set(rids)) == len(set(r for r in rids if int(r) < jinfo["id_step"])) * 3


def test_scaled_engine_cpu_trace_repeats_host_threads(tmp_path):
    """--host-cpu repeats an engine CPU trace's /host:CPU threads: every population and every
    module run times R (module runs are told apart by run_id)."""
    src = next((Path(__file__).resolve().parents[1] / "fixtures" / "greedy_b4").rglob("*.xplane.pb"))
    dst = tmp_path / "cpu_x2.xplane.pb"
    scale_trace.scale_xplane(src, dst, 2, host_cpu=True)
    _assert_scaled(read_file(src, host="engine-cpu"), read_file(dst, host="engine-cpu"), 2)
