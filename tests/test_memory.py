"""Device memory from the allocators' events (issue 25): traceview's figures per allocator
against XProf 2.24's ``memory_profile`` tool on every shared trace that has allocator events,
the section in every output, the verify checks and findings, and bad events."""

from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pytest

import traceview
from traceview.analysis.memory.allocators import memory
from traceview.analysis.compare.verify_grammar import parse_check
from traceview.errors import UsageError
from traceview.model.memory_events import MEMORY_SCHEMA
from traceview.read.xplane import wire

from oracle import xprof_tool_json

#: shared traces with allocator events -> allocators (XProf's memory ids)
WITH_MEMORY = {
    "tpu_v6e_4chip_psum.xplane.pb": ["0", "1", "2", "3"],
    "tpu_v6e_pallas_matmul_llo.xplane.pb": ["0"],
    "mi300x_jax_conv3d.xplane.pb": [f"GPU_{i}_bfc" for i in range(8)],
    "mi300x_jax_gemm_sweep.xplane.pb": ["GPU_0_bfc", "xla_gpu_host_bfc"],
    "mi300x_jax_attention.xplane.pb": ["GPU_0_bfc", "xla_gpu_host_bfc"],
}


def _host_line_starts_ps(path) -> set[int]:
    """The timestamps (ps) of the host plane's XLines: XProf keys a snapshot by its offset
    within its line, traceview by line timestamp + offset."""
    sp = wire.map_xspace(path) if wire.has_decoder() else wire.read_xspace_bytes(path.read_bytes(), str(path))
    out = set()
    for pl_ in sp.planes:
        if pl_.name == "/host:CPU":
            for raw in pl_.lines:
                out.add(wire.line_header(raw, str(path)).timestamp_ns * 1000)
    return out


@pytest.mark.parametrize("name", sorted(WITH_MEMORY))
def test_allocators_equal_xprof_memory_profile(shared_traces, name):
    """Per allocator: capacity (memoryCapacity), lifetime peak (peakBytesUsageLifetime), peak in
    use with its heap and stack terms and fragmentation (peakStats.*) equal XProf's; the peak's
    time is XProf's peakStatsTimePs on its line's clock."""
    path = shared_traces / name
    xp = xprof_tool_json(path, "memory_profile")
    prof = traceview.load(path, cache=False, stale_after_s=None)
    rep = prof.memory_report()
    got = {a.allocator: a for a in rep.allocators}
    assert sorted(got) == sorted(xp["memoryIds"]) == sorted(WITH_MEMORY[name])
    lines = _host_line_starts_ps(path)
    for mid, a in got.items():
        s = xp["memoryProfilePerAllocator"][mid]["profileSummary"]
        ps = s["peakStats"]
        assert a.capacity == int(s["memoryCapacity"]), mid
        assert a.lifetime_peak == int(s["peakBytesUsageLifetime"]), mid
        assert a.peak_in_use == int(ps["peakBytesInUse"]), mid
        assert a.peak_heap == int(ps["heapAllocatedBytes"]), mid
        assert a.peak_stack == int(ps["stackReservedBytes"]), mid
        assert a.fragmentation == pytest.approx(float(ps["fragmentation"]), abs=1e-12), mid
        assert a.peak_time_ps - int(s["peakStatsTimePs"]) in lines, mid
        # what was alive at the peak and what was allocated before the profile make up the heap
        assert a.alive_bytes + a.unattributed == a.peak_heap
        assert a.events == a.allocations + int((prof.memory.filter(
            (pl.col("allocator") == mid) & ~pl.col("alloc"))).height)


def test_values_read_off_the_v6e_trace(shared_traces):
    """The 4-chip v6e: each TPU allocator peaks at 20.02 GiB of 31.25 GiB, almost all of it the
    21,491,712,000-byte stack reservation; the events carry no step ids, so per-step figures
    come from the step windows."""
    prof = traceview.load(shared_traces / "tpu_v6e_4chip_psum.xplane.pb", cache=False, stale_after_s=None)
    rep = prof.memory_report()
    assert [a.peak_stack for a in rep.allocators] == [21_491_712_000] * 4
    assert {a.capacity for a in rep.allocators} == {33_550_237_696}
    assert {a.step_source for a in rep.allocators} == {"step windows"}
    assert all(a.steps.height > 0 for a in rep.allocators)


def test_cpu_trace_memory_unknown(tmp_path):
    """XLA:CPU records no allocator events: the section says unknown, the checks fail as
    unknown, no finding fires."""
    prof = traceview.load("fixtures/tp_decode", cache=False, stale_after_s=None)
    rep = prof.memory_report()
    assert not rep.known and "no allocator events" in rep.notes[0]
    res = traceview.verify(prof, ["memory peak < 12 GiB", "memory growth per step < 1%"])
    assert [r.ok for r in res.results] == [False, False]
    assert all("unknown" in r.message for r in res.results)
    assert not [i for i in prof.findings()["id"].to_list() if i.startswith("memory-")]


def test_verify_memory_checks_on_a_gpu_trace(shared_traces):
    prof = traceview.load(shared_traces / "mi300x_jax_attention.xplane.pb", cache=False, stale_after_s=None)
    res = traceview.verify(prof, ["memory peak < 12 GiB", "memory peak < 400MiB", "memory peak <= 452985344"])
    assert [r.ok for r in res.results] == [True, False, True]
    assert "432.00 MiB" in res.results[1].message


def test_memory_check_grammar():
    assert parse_check("memory peak < 12GiB").args == {"cmp": "<", "bound": 12 * 2 ** 30}
    assert parse_check("memory peak < 12 GiB").args["bound"] == 12 * 2 ** 30
    assert parse_check("memory peak >= 500MB").args["bound"] == 500e6
    assert parse_check("memory growth per step < 1%").args == {"cmp": "<", "bound": 0.01}
    for bad in ("memory peak < 12 parsecs", "memory peak < lots", "memory peak < inf", "memory growth < 1%"):
        with pytest.raises(UsageError):
            parse_check(bad)


def test_near_capacity_finding_follows_its_threshold(shared_traces):
    """GPU_0_bfc of the attention trace peaks at 0.29% of its pool: silent at the default 90%,
    and it fires when the threshold is set below that share."""
    prof = traceview.load(shared_traces / "mi300x_jax_attention.xplane.pb", cache=False, stale_after_s=None)
    assert "memory-near-capacity" not in prof.findings()["id"].to_list()
    got = prof.findings(thresholds=["memory-near-capacity=0.002"]).filter(pl.col("id") == "memory-near-capacity")
    assert got.height == 1
    ev = json.loads(got["evidence"][0])
    assert ev["allocator"] == "GPU_0_bfc" and ev["peak_in_use_bytes"] == 452_985_344


def _events(rows: list[dict]) -> pl.DataFrame:
    base = {k: None for k in MEMORY_SCHEMA}
    base.update(host="h", allocator="a", op="", region="", data_type="", shape="")
    return pl.DataFrame([{**base, **r} for r in rows], schema=MEMORY_SCHEMA)


def test_bad_events_are_noted_not_invented():
    """A negative byte count is dropped with a note; a deallocation with no allocation, a zero
    capacity and an allocator without events leave bounded figures and notes."""
    ev = _events([
        dict(time_ps=1, alloc=True, address=1, allocation_bytes=100, requested_bytes=90, heap_bytes=100,
             stack_bytes=0, free_bytes=900),
        dict(time_ps=2, alloc=False, address=7, allocation_bytes=50, heap_bytes=50, stack_bytes=0, free_bytes=950),
        dict(time_ps=3, alloc=True, address=2, allocation_bytes=-5, heap_bytes=-5, stack_bytes=0, free_bytes=0),
        dict(allocator="z", time_ps=4, alloc=False, address=3, heap_bytes=0, stack_bytes=0, free_bytes=0),
        dict(time_ps=5, alloc=True, address=9, allocation_bytes=1 << 62, heap_bytes=1 << 62, stack_bytes=0,
             free_bytes=0),
    ])
    rep = memory(ev)
    assert any("2 allocator events with a negative or absurd byte count" in n for n in rep.notes)
    a, z = rep.allocators
    assert (a.peak_in_use, a.capacity, a.peak_share, a.alive_bytes, a.unattributed) == (100, 1000, 0.1, 100, 0)
    assert type(a.capacity) is int and a.growth_per_step is None and a.step_source == "unknown"
    assert z.capacity is None and any("capacity" in n for n in z.notes) and z.peak_share is None
    assert memory(ev.head(0)).known is False


def test_outputs_carry_the_section(shared_traces, tmp_path):
    """JSON `memory` (allocators, alive_at_peak, steps, rows counted), the query tables, the
    terminal section and the HTML section with its chart."""
    path = shared_traces / "mi300x_jax_gemm_sweep.xplane.pb"
    cmd = [sys.executable, "-m", "traceview.cli"]
    out = subprocess.run(cmd + ["analyze", str(path), "--no-cache", "--format", "json"], capture_output=True,
                         text=True, check=True).stdout
    mem = json.loads(out)["memory"]
    assert [a["allocator"] for a in mem["allocators"]] == ["GPU_0_bfc", "xla_gpu_host_bfc"]
    assert mem["allocators"][0]["peak_in_use_bytes"] == 482_345_216
    assert json.loads(out)["rows"]["memory.allocators"] == {"shown": 2, "total": 2}
    text = subprocess.run(cmd + ["analyze", str(path), "--no-cache"], capture_output=True, text=True,
                          check=True).stdout
    assert "memory — 2 allocators" in text and "460.00 MiB" in text
    q = subprocess.run(cmd + ["query", str(path),
                              "select allocator, count(*) as n from memory_events group by allocator order by n desc",
                              "--no-cache", "--format", "csv"],
                       capture_output=True, text=True, check=True).stdout
    assert q.splitlines()[1:] == ["GPU_0_bfc,138", "xla_gpu_host_bfc,24"]
    html = tmp_path / "r.html"
    subprocess.run(cmd + ["report", str(path), "--no-cache", "-o", str(html)], capture_output=True, check=True)
    page = html.read_text()
    assert 'id="memory"' in page and "Device memory" in page and page.count("<svg") >= 2


def test_device_selection_reaches_the_allocators(shared_traces):
    """--device keeps the allocators of the devices kept (TPU allocator N serves /device:TPU:N,
    GPU_N_bfc /device:GPU:N); their per-step figures come from their own device's steps."""
    prof = traceview.load(shared_traces / "tpu_v6e_4chip_psum.xplane.pb", cache=False, stale_after_s=None)
    one = prof.filter(device_regex="TPU:2$").memory_report()
    assert [a.allocator for a in one.allocators] == ["2"]
    res = traceview.verify(prof.filter(device_regex="TPU:2$"), ["memory peak < 12GiB"])
    assert "(2 on" in res.results[0].message or "allocator 2" in res.results[0].message or " 2 on " in res.results[0].message
    # a device filter that keeps no allocator says so, not that the trace has no allocator events
    gemm = traceview.load(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb", cache=False, stale_after_s=None)
    none = gemm.filter(device_regex="nomatch")
    assert none.memory.height == 0 and none.memory_note is not None
    assert none.memory_report().notes == ["the device filter 'nomatch' keeps none of the trace's 162 allocator "
                                          "events (allocators GPU_0_bfc, xla_gpu_host_bfc)"]
    assert gemm.filter(device_regex="GPU:0$").memory_note is None and gemm.memory_note is None
    # the memory findings' reason is the same, not "no allocator events in the trace"
    from traceview.analysis.report import build_report

    why = build_report(none).findings_not_evaluated
    assert why["memory-near-capacity"] == why["memory-grows-per-step"] == none.memory_report().notes[0]


def test_growth_check_on_a_sweep_is_unknown_and_its_grammar(shared_traces):
    """The GEMM sweep is not one repeated step: its growth per step is unknown to the check (the
    finding stays silent on it for the same reason); a growth bound takes a sign and a %, and a
    bare 1 is refused (1% or 100%?)."""
    prof = traceview.load(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb", cache=False, stale_after_s=None)
    res = traceview.verify(prof, ["memory growth per step < 1%"])
    assert not res.results[0].ok and "not one repeated step" in res.results[0].message
    assert parse_check("memory growth per step < -0.5%").args["bound"] == -0.005
    assert parse_check("memory growth per step < 250%").args["bound"] == 2.5
    with pytest.raises(UsageError):
        parse_check("memory growth per step < 1")


def test_an_empty_device_selection_reads_plainly(shared_traces, capsys):
    """analyze --device matching nothing: the memory section and the memory findings say the
    filter kept no allocator, and the communication line says there is no op time to share
    (not 'collectives - and host transfers - of op time')."""
    from traceview.cli import main

    path = str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")
    assert main(["analyze", path, "--device", "nomatch", "--no-cache", "--width", "400"]) == 0
    out = capsys.readouterr().out
    said = "the device filter 'nomatch' keeps none of the trace's 162 allocator events (allocators GPU_0_bfc, xla_gpu_host_bfc)"
    assert f"memory — unknown: {said}" in out
    assert f"memory-near-capacity, memory-grows-per-step ({said})" in " ".join(out.split())  # the line may wrap
    assert "communication — no op time to share out;" in out and "collectives - and" not in out
    assert "FLOPs from" not in out  # no op time: no FLOP provenance shares ('derived - of op time')
