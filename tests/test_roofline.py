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
from traceview.analysis.hardware.chips import CHIPS, find_chip, gpu_peak_flops
from traceview.cli import main
from traceview.analysis.hardware.peaks import Peaks, resolve_peaks
from traceview.analysis.ops.roofline import predicted_vs_measured, roofline

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
    # --chip as people write it: without the tpu prefix, any case and punctuation
    assert [find_chip(t).key for t in ("v6e", "TPU_v6e", "tpu v5p", "A100 40GB", "MI300X")] == \
        ["tpu-v6e", "tpu-v6e", "tpu-v5p", "a100-40gb", "mi300x"]
    assert find_chip("v7") is None and find_chip("x") is None
    with pytest.raises(traceview.UsageError):
        gemm.peaks(chip="no-such-chip")
    with pytest.raises(traceview.UsageError):
        gemm.peaks(peak_flops=-1)
    # V100 (sm_70): 80 SMs x 1.53 GHz x 1024 FLOP/clock = 125.3 TFLOP/s fp16 tensor
    f, _ = gpu_peak_flops({"clock_rate": 1530000, "core_count": 80, "compute_cap_major": 7, "compute_cap_minor": 0})
    assert f == pytest.approx(125.3376e12)


@pytest.mark.parametrize("name", ["mi300x_jax_attention.xplane.pb", "mi300x_jax_conv3d.xplane.pb", GEMM, TPU])
def test_no_op_above_peak_without_a_warning(shared_traces, name):
    """With the MI300X's sourced 5.3 TB/s (not the planes' 2.66 TB/s stat) and costs per
    execution, no op on the shared traces reaches 100% of a peak; any that did would carry a
    warning."""
    roof = traceview.load(shared_traces / name).roofline()
    over = roof.filter((pl.col("frac_peak_bw") > 1) | (pl.col("frac_peak_flops") > 1) | (pl.col("efficiency") > 1))
    assert over.height == 0
    assert (roof["warning"] == "").all()
    # and the warning fires as soon as a peak is set below what an op reaches
    low = traceview.load(shared_traces / name).roofline(peak_bw=1e11)
    hot = low.filter(pl.col("frac_peak_bw") > 1)
    assert hot.height > 0 and (hot["warning"] != "").all()


def test_mi300x_ridge_and_gemm_bound(shared_traces, gemm):
    """Ridge = 1,307.4 TFLOP/s / 5.3 TB/s = 246.7 FLOP/byte on every MI300X trace; a bf16
    8192x1024x1024 GEMM (2·M·N·K / 2(MK + KN + MN) = 481.9 FLOP/byte) is bound by compute."""
    for name in ("mi300x_jax_attention.xplane.pb", "mi300x_jax_conv3d.xplane.pb", GEMM):
        p = traceview.load(shared_traces / name).peaks()
        assert p.ridge == pytest.approx(2.1e9 * 304 * 2048 / 5.3e12)
        assert p.peak_bw == CHIPS["mi300x"].peak_bw and p.trace_bw == 2.6624e12 and p.chip == "mi300x"
    m, n, k = 8192, 1024, 1024
    flops, nbytes = 2 * m * n * k, 2 * (m * k + k * n + m * n)
    assert flops / nbytes == pytest.approx(481.9, abs=0.1)
    ops = pl.DataFrame({"op_name": ["custom-call.1"], "shape": [f"bf16[{m},{n}] <- bf16[{m},{k}], bf16[{k},{n}]"],
                        "category": ["custom-call"], "op_kind": ["custom-call"], "count": [1],
                        "duration_ps": [100_000_000], "flops": [float(flops)], "bytes_accessed": [float(nbytes)],
                        "cost_source": ["derived"]})
    assert roofline(ops, gemm.peaks())["bound_by"].item() == "compute"
    # the plane stat alone (2.66 TB/s, ridge 491) would have called it memory-bound
    assert roofline(ops, gemm.peaks(peak_bw=2.6624e12))["bound_by"].item() == "memory"


def test_conv_kernels_are_costed_per_execution(shared_traces):
    """cudnn-conv.1 runs as Im3d2Col + a Cijk GEMM kernel: XProf counts 79 kernel events (its
    hlo_stats occurrences); they are 40 executions, 5 per device, and each execution's time is
    the sum of its kernels' durations read straight off the protobuf."""
    from oracle import raw_hlo_events, xprof_hlo_stats

    path = shared_traces / "mi300x_jax_conv3d.xplane.pb"
    prof = traceview.load(path)
    raw = raw_hlo_events(path).filter((pl.col("hlo_op") == "cudnn-conv.1") & pl.col("device").str.starts_with("/device:"))
    per_kernel = raw.group_by("device", "name").agg(pl.len().alias("n"), pl.col("duration_ps").sum())
    assert per_kernel.filter(pl.col("device") == "/device:GPU:0").sort("name")["n"].to_list() == [5, 4]  # Cijk, Im3d2Col
    raw_execs = int(per_kernel.group_by("device").agg(pl.col("n").max())["n"].sum())
    x = xprof_hlo_stats(path).filter(pl.col("hlo_op_name") == "cudnn-conv.1")
    row = prof.by_shape().filter(pl.col("op_name") == "cudnn-conv.1").row(0, named=True)
    assert row["occurrences"] == raw.height == int(x["occurrences"].sum()) == 79
    assert row["executions"] == raw_execs == 40
    assert row["kernels_per_execution"] == pytest.approx(79 / 40)
    r = prof.roofline().filter(pl.col("op_name") == "cudnn-conv.1").row(0, named=True)
    total = int(raw["duration_ps"].sum())
    assert r["total_ps"] == total and r["exec_ps"] == pytest.approx(total / 40)
    assert r["achieved_flops"] == pytest.approx(r["flops"] / (total / 40 * 1e-12))
    assert r["roofline_ps"] * 40 <= total  # one execution's roofline, not one kernel's, times executions
    # device 0 alone: 68.52 µs of Im3d2Col + 1,498.202 µs of GEMM over its 5 executions
    dev0 = per_kernel.filter(pl.col("device") == "/device:GPU:0")["duration_ps"].sum()
    assert dev0 == 68_520_000 + 1_498_202_000


def test_collectives_stay_off_the_hbm_roofline(shared_traces, capsys):
    prof = traceview.load(shared_traces / TPU)
    roof = prof.roofline()
    ar = roof.filter(pl.col("op_name").str.starts_with("all-reduce"))
    assert ar.height > 0 and set(ar["bound_by"]) == {"collective"}
    assert ar["frac_peak_bw"].is_null().all() and ar["roofline_ps"].is_null().all()
    summ = predicted_vs_measured(roof)
    coll = next(o for o in summ["off_roofline"] if o["bound_by"] == "collective")
    assert coll["populations"] == ar.height and "interconnect" in coll["why"]
    assert main(["analyze", str(shared_traces / TPU)]) == 0
    out = capsys.readouterr().out
    assert "off the HBM roofline" in out and "collective" in out
    assert not re.search(r"all-reduce .*memory", out)


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


def test_chip_identified_from_compute_capability_and_memory():
    """A GPU plane that names only its vendor is identified by compute capability, and parts
    of one architecture by the HBM capacity the plane reports (bytes)."""
    from traceview.analysis.hardware.chips import identify_chip

    amd = {"device_vendor": "AMD", "compute_cap_major": 9, "compute_cap_minor": 4, "clock_rate": 2100000}
    assert identify_chip("AMD GPU", {**amd, "memory_size": 206141652992})[0].key == "mi300x"
    assert identify_chip("AMD GPU", {**amd, "memory_size": 256 * 2 ** 30})[0].key == "mi325x"
    chip, why = identify_chip("AMD GPU", amd)  # no memory_size: two candidates, no guess
    assert chip is None and "mi300x" in why and "mi325x" in why
    nv = {"device_vendor": "NVIDIA", "compute_cap_major": 9, "compute_cap_minor": 0}
    assert identify_chip("GPU", {**nv, "memory_size": 85_520_809_984})[0].key == "h100"
    assert identify_chip("GPU", {**nv, "memory_size": 150_754_820_096})[0].key == "h200"
    assert identify_chip("GPU", {**nv, "memory_size": 24e9})[0] is None  # no 24 GB sm_90 part
    assert identify_chip("NVIDIA H200", {})[0].key == "h200"
    mi355 = {"device_vendor": "AMD", "compute_cap_major": 9, "compute_cap_minor": 5, "memory_size": 288 * 2 ** 30}
    assert identify_chip("AMD GPU", {**mi355, "clock_rate": 2400000})[0].key == "mi355x"
    assert identify_chip("AMD GPU", {**mi355, "clock_rate": 2200000})[0].key == "mi350x"


def test_trace_peak_that_disagrees_with_the_chip_gives_way_and_both_are_shown(shared_traces, capsys):
    from traceview.analysis.hardware.peaks import DISAGREE
    from traceview.model.schema import DeviceInfo

    stats = {"device_vendor": "AMD", "compute_cap_major": 9, "compute_cap_minor": 4, "memory_size": 206141652992,
             "clock_rate": 2100000, "core_count": 304}
    near = resolve_peaks([DeviceInfo(name="/device:GPU:0", kind="GPU", device_type="AMD GPU", stats=stats,
                                     peak_bw=5.3e12 / DISAGREE * 1.01)])
    assert near.peak_bw == 5.3e12 / DISAGREE * 1.01 and "plane stats" in near.bw_source and not near.notes
    far = resolve_peaks([DeviceInfo(name="/device:GPU:0", kind="GPU", device_type="AMD GPU", stats=stats,
                                    peak_bw=5.3e12 / DISAGREE * 0.99)])
    assert far.peak_bw == 5.3e12 and "chip table (mi300x)" in far.bw_source
    assert far.trace_bw == 5.3e12 / DISAGREE * 0.99 and far.table_bw == 5.3e12 and len(far.notes) == 1
    # a trace figure that is not a finite positive rate is ignored, with a note
    bad = resolve_peaks([DeviceInfo(name="/device:GPU:0", kind="GPU", device_type="AMD GPU", stats=stats,
                                    peak_bw=float("inf"))])
    assert bad.peak_bw == 5.3e12 and any("not a finite positive" in n for n in bad.notes)
    # shown in every format: terminal, JSON, HTML
    path = str(shared_traces / GEMM)
    assert main(["analyze", path]) == 0
    out = capsys.readouterr().out
    assert "2.662 TB/s" in out and "5.3 TB/s" in out and "ridge point 246.7" in out
    assert main(["analyze", path, "--format", "json"]) == 0
    pk = json.loads(capsys.readouterr().out)["peaks"]
    assert (pk["peak_bw"], pk["trace_bw"], pk["table_bw"], pk["chip"]) == (5.3e12, 2.6624e12, 5.3e12, "mi300x")
    assert pk["notes"] and pk["ridge"] == pytest.approx(246.69, abs=0.01)


def test_a_given_peak_silences_the_disagreement_and_the_devices_line_names_the_roofline_figure(shared_traces, capsys):
    """--peak-bw wins without the "using the chip table's figure" note, and the devices line,
    which shows the trace's own plane stats, says which figure the roofline uses instead."""
    path = str(shared_traces / GEMM)
    assert main(["analyze", path, "--peak-bw", "4e12", "--format", "json"]) == 0
    pk = json.loads(capsys.readouterr().out)["peaks"]
    assert pk["peak_bw"] == 4e12 and pk["bw_source"] == "given on the command line"
    assert not any("chip table's figure" in n for n in pk["notes"])
    assert main(["analyze", path]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("devices"))
    assert "memory 2.662 TB/s, from the trace's plane stats; the roofline uses 5.3 TB/s" in line


def test_roofline_rows_show_the_operands(shared_traces, tmp_path, capsys, monkeypatch):
    """Two GEMMs with one result shape (8192x1024 from K=1024 and from K=4096) are told apart
    by their operands in the terminal and HTML roofline tables, as their intensities differ."""
    monkeypatch.setenv("TRACEVIEW_NO_CACHE", "1")
    path = str(shared_traces / "mi300x_jax_attention.xplane.pb")
    page = tmp_path / "r.html"
    assert main(["analyze", path, "--top", "4", "--html", str(page)]) == 0
    roof = capsys.readouterr().out.split("roofline of the top 4")[1]
    gemms = {"bf16[8192,1024] <- bf16[8192,1024], bf16[1024,1024]": "482",
             "bf16[8192,1024] <- bf16[8192,4096], bf16[4096,1024]": "745"}
    for shape, intensity in gemms.items():
        row = next(ln for ln in roof.splitlines() if shape in ln)
        assert row.split("│")[3].strip() == intensity
    html = page.read_text().split('id="roofline"')[1].split("</section>")[0]
    for shape in gemms:
        result, operands = shape.split(" <- ")
        # the operands line is cut in the middle to fit the page, whole in its title
        assert f'title="← {operands}"' in html


def test_per_layer_copies_are_one_row(shared_traces, capsys):
    """vLLM Qwen on v6e: 3,454 (name, shape) rows, the L per-layer copies of each op under L
    names; ``layer_copies`` makes each op one row whose sums are its members' and whose
    efficiency is the time-weighted one, checked against a plain-Python grouping of the rows."""
    from traceview.analysis.ops.roofline import layer_copies

    prof = traceview.load(shared_traces / "vllm_tpu_qwen")
    peaks = resolve_peaks(prof.devices, chip="tpu-v6e")
    roof = roofline(prof.table, peaks)
    got = layer_copies(roof, peaks)
    groups: dict = {}
    for r in roof.iter_rows(named=True):
        k = (re.sub(r"\.\d+$", "", r["op_name"]), r["shape"], r["category"], r["cost_source"], r["flops"], r["bytes"])
        groups.setdefault(k, []).append(r)
    assert roof.height == 3454 and got.height == len(groups) == 75
    assert got["total_ps"].sum() == roof["total_ps"].sum() and got["occurrences"].sum() == roof["occurrences"].sum()
    top = got.row(0, named=True)  # the MLP up-projection of 63 layers (the 64th differs in an operand)
    members = groups[("convolution_bitcast_fusion", top["shape"], top["category"], top["cost_source"], top["flops"],
                      top["bytes"])]
    assert top["op_name"] == "convolution_bitcast_fusion" and top["members"] == len(members) == 63
    assert top["op_names"] == sorted(m["op_name"] for m in members)
    execs = sum(m["executions"] for m in members)
    total = sum(m["total_ps"] for m in members)
    assert top["efficiency"] == pytest.approx(members[0]["roofline_ps"] * execs / total, rel=1e-12)
    assert top["efficiency_min"] == min(m["efficiency"] for m in members)
    assert top["efficiency_max"] == max(m["efficiency"] for m in members)
    assert top["achieved_flops"] == pytest.approx(top["flops"] * execs / (total * 1e-12), rel=1e-12)
    single = got.filter(pl.col("members") == 1).row(0, named=True)  # a lone op keeps its own name and figures
    assert single == {**roof.filter((pl.col("op_name") == single["op_name"]) & (pl.col("shape") == single["shape"]))
                      .row(0, named=True), "members": 1, "op_names": [single["op_name"]],
                      "efficiency_min": single["efficiency"], "efficiency_max": single["efficiency"]}
    # the terminal shows the grouped rows: the op with its copy count and the members' range
    main(["analyze", str(shared_traces / "vllm_tpu_qwen"), "--chip", "tpu-v6e", "--no-findings"])
    out = capsys.readouterr().out
    assert "roofline of the top 25 ops (×N: an op's N per-layer copies as one row) by total time" in out
    assert re.search(r"convolution_bitcast_fusion ×63 .* 91\.2% \(90\.8-91\.7%\)", out)


def test_a_kernel_the_trace_costs_at_zero_stays_out_of_predicted_vs_measured(shared_traces):
    """vLLM Qwen: the ragged paged-attention kernel (25.3% of op time) carries 0 FLOPs and 0
    bytes: no roofline time, no efficiency, no achieved rate (unknown, not 0), its family's
    FLOPs and bytes unknown, and predicted-vs-measured covers the other ops only
    (their measured time summed by hand)."""
    prof = traceview.load(shared_traces / "vllm_tpu_qwen")
    roof = roofline(prof.table, resolve_peaks(prof.devices, chip="v6e"))
    rpa = roof.filter(pl.col("op_name").str.starts_with("RPA-"))
    assert rpa.height == 64 and (rpa["flops"] == 0).all() and (rpa["bytes"] == 0).all()
    assert rpa["roofline_ps"].null_count() == 64 and rpa["efficiency"].null_count() == 64
    # its achieved rates are unknown, not 0 FLOP/s and 0 B/s; so is its family's cost
    assert rpa["achieved_flops"].null_count() == 64 and rpa["achieved_bw"].null_count() == 64
    fam = prof.analyze(peaks=resolve_peaks(prof.devices, chip="v6e")).family_roofline.filter(pl.col("family") == "attention/custom kernels")
    assert fam.height == 1 and fam["flops"].null_count() == 1 and fam["bytes"].null_count() == 1
    costed = roof.filter((pl.col("flops").fill_null(0) != 0) | (pl.col("bytes").fill_null(0) != 0))
    s = predicted_vs_measured(roof)
    assert s["measured_ps"] == costed["total_ps"].sum() == 93_470_752_714
    assert s["covered_share"] == pytest.approx(costed["total_ps"].sum() / roof["total_ps"].sum())
    assert s["ratio"] == pytest.approx(0.941, abs=5e-4)
