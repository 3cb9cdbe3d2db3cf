"""Roofline, FLOPs from shapes, chip peaks and the analyze output that shows them (issue 4).

Oracles: the GEMM FLOPs are recomputed here from the shapes printed in the HLO text
(2·M·N·K, independently of traceview's derivation); XProf's hlo_stats on the same file is the
witness that the trace itself carries no FLOPs for these custom-calls; the TPU peaks are read
straight from the plane stats with the raw protobuf schema.
"""

from __future__ import annotations

import json
import re

import polars as pl
import pytest

import traceview
from traceview.analysis.chips import CHIPS, find_chip, gpu_peak_flops
from traceview.cli import main
from traceview.analysis.peaks import Peaks, resolve_peaks
from traceview.analysis.roofline import predicted_vs_measured, roofline

GEMM = "mi300x_jax_gemm_sweep.xplane.pb"
TPU = "tpu_v6e_4chip_psum.xplane.pb"


@pytest.fixture(scope="module")
def gemm(shared_traces):
    return traceview.load(shared_traces / GEMM)


def _mnk(hlo_text: str) -> tuple[int, int, int]:
    """M, N, K of a row-major GEMM read off its HLO text: result [M,N] <- [M,K], [K,N]."""
    dims = [tuple(int(x) for x in d.split(",")) for d in re.findall(r"bf16\[([0-9,]+)\]", hlo_text)]
    (m, n), (m2, k), (k2, n2) = dims[0], dims[1], dims[2]
    assert (m, k, n) == (m2, k2, n2)
    return m, n, k


def test_gemm_flops_come_from_shapes_where_xprof_has_none(gemm, shared_traces):
    from oracle import xprof_hlo_stats

    roof = gemm.roofline()
    calls = roof.filter(pl.col("op_name") == "custom-call.1")
    assert calls.height == 5
    texts = (gemm.ops.filter(pl.col("op_name") == "custom-call.1")
             .group_by("shape").agg(pl.col("hlo_text").first()))
    by_shape = dict(zip(texts["shape"], texts["hlo_text"]))
    for r in calls.iter_rows(named=True):
        m, n, k = _mnk(by_shape[r["shape"]])
        assert r["flops"] == 2 * m * n * k
        assert r["cost_source"] == "derived"
    big = calls.filter(pl.col("shape") == "bf16[8192,8192] <- bf16[8192,4096], bf16[4096,8192]")
    assert big["flops"].item() == 2 * 8192 * 8192 * 4096
    # achieved FLOP/s below the MI300X peak (clock x CUs x 2048 FLOP/clock), every one of them
    peak = resolve_peaks(gemm.devices).peak_flops
    assert peak == pytest.approx(2.1e9 * 304 * 2048)
    assert (calls["achieved_flops"] < peak).all() and calls["warning"].to_list() == [""] * 5
    # the largest GEMM: 5.4976e11 FLOP in 611.001 µs mean = 899.8 TFLOP/s, 68.8% of peak
    assert big["achieved_flops"].item() == pytest.approx(2 * 8192 * 8192 * 4096 / 611.001e-6, rel=1e-6)
    assert big["bound_by"].item() == "compute"
    # XProf's table for the same rows: FLOP rate 0 (it does not count library GEMMs)
    x = xprof_hlo_stats(shared_traces / GEMM).filter(pl.col("hlo_op_name") == "custom-call.1")
    assert x.height == 5 and (x["model_flop_rate"] == 0).all()


def test_tpu_peaks_come_from_plane_stats_and_ridge_is_printed(shared_traces, capsys):
    from traceview.read.xplane.protos import XSpace

    space = XSpace()
    space.ParseFromString((shared_traces / TPU).read_bytes())
    plane = next(p for p in space.planes if p.name == "/device:TPU:0")
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    stats = {names[s.metadata_id]: s.double_value for s in plane.stats if s.WhichOneof("value") == "double_value"}
    prof = traceview.load(shared_traces / TPU)
    p = prof.peaks()
    assert p.peak_flops == stats["peak_teraflops_per_second"] * 1e12
    assert p.peak_bw == stats["peak_hbm_bw_gigabytes_per_second"] * 1e9
    assert "plane stats" in p.flops_source and "plane stats" in p.bw_source
    ridge = stats["peak_teraflops_per_second"] * 1e12 / (stats["peak_hbm_bw_gigabytes_per_second"] * 1e9)
    assert p.ridge == pytest.approx(ridge)
    assert main(["analyze", str(shared_traces / TPU), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert f"ridge point {ridge:.1f} FLOP/byte" in out
    assert main(["analyze", str(shared_traces / TPU), "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["peaks"]["ridge"] == pytest.approx(ridge)


def test_overrides_and_chip_table(gemm):
    p = gemm.peaks(chip="h100")
    assert (p.peak_flops, p.peak_bw) == (CHIPS["h100"].peak_flops, CHIPS["h100"].peak_bw)
    p = gemm.peaks(peak_flops=1e15, peak_bw=2e12)
    assert (p.peak_flops, p.peak_bw, p.ridge) == (1e15, 2e12, 500.0)
    assert find_chip("TPU v6 Lite").key == "tpu-v6e" and find_chip("TPU v5 lite").key == "tpu-v5e"
    with pytest.raises(traceview.UsageError):
        gemm.peaks(chip="no-such-chip")
    with pytest.raises(traceview.UsageError):
        gemm.peaks(peak_flops=-1)
    # V100 (sm_70): 80 SMs x 1.53 GHz x 1024 FLOP/clock = 125.3 TFLOP/s fp16 tensor
    f, _ = gpu_peak_flops({"clock_rate": 1530000, "core_count": 80, "compute_cap_major": 7, "compute_cap_minor": 0})
    assert f == pytest.approx(125.3376e12)


def test_no_efficiency_above_peak_without_a_warning(shared_traces):
    """The attention trace has broadcasts that XProf itself puts above 100% of HBM bandwidth."""
    prof = traceview.load(shared_traces / "mi300x_jax_attention.xplane.pb")
    roof = prof.roofline()
    over = roof.filter((pl.col("frac_peak_bw") > 1) | (pl.col("frac_peak_flops") > 1) | (pl.col("efficiency") > 1))
    assert over.height > 0  # the trace's own memory_bandwidth stat (2.66 TB/s) is below what they reach
    assert (over["warning"] != "").all()
    ok = roof.filter(pl.col("warning") == "")
    assert ((ok["efficiency"].fill_null(0) <= 1) & (ok["frac_peak_bw"].fill_null(0) <= 1)).all()


def test_roofline_time_is_max_of_compute_and_memory_time():
    ops = pl.DataFrame({
        "op_name": ["a", "b"], "shape": ["f32[1]", "f32[2]"], "category": ["dot", "copy"], "op_kind": ["dot", "copy"],
        "count": [2, 1], "duration_ps": [4_000_000, 3_000_000], "flops": [2e9, 0.0], "bytes_accessed": [1e6, 3e6],
        "cost_source": ["derived", "derived"]})
    peaks = Peaks(peak_flops=1e15, peak_bw=1e12)
    r = {x["op_name"]: x for x in roofline(ops, peaks).iter_rows(named=True)}
    # a: 2e9 FLOP / 1e15 = 2 µs vs 1e6 B / 1e12 = 1 µs -> 2 µs roof, 2 µs measured mean
    assert r["a"]["roofline_ps"] == pytest.approx(2e6) and r["a"]["efficiency"] == pytest.approx(1.0)
    assert r["a"]["bound_by"] == "compute" and r["a"]["intensity"] == pytest.approx(2000)
    # b: 3e6 B / 1e12 = 3 µs roof, 3 µs measured
    assert r["b"]["roofline_ps"] == pytest.approx(3e6) and r["b"]["bound_by"] == "memory"
    s = predicted_vs_measured(roofline(ops, peaks))
    assert s["predicted_ps"] == pytest.approx(2 * 2e6 + 3e6) and s["measured_ps"] == 7_000_000


def test_async_halves_stay_off_the_roofline(shared_traces):
    prof = traceview.load(shared_traces / TPU)
    roof = prof.roofline()
    halves = roof.filter(pl.col("op_name").str.contains(r"^copy-(start|done)"))
    assert halves.height > 0
    assert set(halves["bound_by"]) == {"async"} and halves["roofline_ps"].is_null().all()
