"""Prefill/decode/mixed steps, utilisation and ``--phase`` (issue 25): labels with their reasons
on the vLLM trace and the engine fixtures, MFU/MBU against sums taken here from the op table,
the phase filter against the programs' own ops, and bad phases."""

from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pytest

import traceview
from traceview.analysis import derived
from traceview.analysis.steps.phases import phase_profile, phases
from traceview.errors import UsageError

VLLM = "vllm_tpu_qwen"


@pytest.fixture(scope="module")
def vllm(shared_traces):
    prof = traceview.load(shared_traces / VLLM, cache=False, stale_after_s=None)
    return prof, phases(prof, derived.step_anatomy(prof), prof.peaks(chip="tpu-v6e"))


def test_vllm_steps_are_prefill_with_their_reason(vllm):
    _, ph = vllm
    assert ph.label_line() == "2 prefill"
    assert ph.steps["why"].to_list() == ["jit_step_fun runs 1024 tokens for 8 sequences"] * 2
    assert ph.steps["step_tokens"].to_list() == [1024, 1024] and ph.steps["sequences"].to_list() == [8, 8]
    # the program table: T read off the heaviest matmul population, B off the LM head program
    progs = {r["module"]: r for r in ph.programs.iter_rows(named=True)}
    assert progs["jit_step_fun"]["tokens"] == 1024 and progs["jit_compute_logits_func"]["lm_rows"] == 8
    assert ph.summary["op_share"][0] == pytest.approx(
        ph.executions.filter(pl.col("phase") == "prefill")["duration_ps"].sum() / ph.executions["duration_ps"].sum())


def test_vllm_mfu_mbu_equal_sums_over_the_step_window(vllm):
    """MFU = model FLOPs of the ops starting in the step / (step time x 918 TFLOP/s); MBU = their
    bytes / (step time x 1.64 TB/s), collectives and async halves left out as the roofline leaves
    them out (the copy-start/-done pair of one copy counted its bytes twice); both in (0, 1); the
    bytes per step equal the family roofline's."""
    prof, ph = vllm
    pk = prof.peaks(chip="tpu-v6e")
    assert (pk.peak_flops, pk.peak_bw) == (918e12, 1.64e12)  # TPU v6e per chip (traceview.analysis.hardware.chips)
    ops = prof.ops
    for r in ph.steps.iter_rows(named=True):
        inside = ops.filter((pl.col("device") == r["device"]) & (pl.col("start_ps") >= r["start_ps"])
                            & (pl.col("start_ps") < r["start_ps"] + r["duration_ps"]))
        # bytes as the roofline counts them: none for collectives and the halves of async ops
        costed = inside.filter(~pl.col("op_kind").str.contains(r"-(start|done)$|^(all-reduce|all-gather|reduce-scatter"
                                                                 r"|all-to-all|collective-permute|collective-broadcast)$"))
        mf = (costed["model_flops"].fill_null(costed["flops"]).fill_null(0) * costed["count"]).sum()
        by = (costed["bytes_accessed"].fill_null(0) * costed["count"]).sum()
        sec = r["duration_ps"] * 1e-12
        assert r["mfu"] == pytest.approx(mf / (sec * pk.peak_flops), rel=1e-9)
        assert r["mbu"] == pytest.approx(by / (sec * pk.peak_bw), rel=1e-9)
        assert 0 < r["mfu"] < 1 and 0 < r["mbu"] < 1
    assert ph.flops_source == "model_flops from the trace"
    fam = prof.analyze(peaks=pk).family_roofline
    assert ph.steps["bytes"].to_list() == pytest.approx([fam["bytes"].sum()] * 2)


def test_mfu_unknown_without_peaks(shared_traces):
    prof = traceview.load(shared_traces / VLLM, cache=False, stale_after_s=None)
    ph = phases(prof, derived.step_anatomy(prof), None)
    assert ph.steps["mfu"].null_count() == ph.steps.height and any("MFU unknown" in n for n in ph.notes)


@pytest.fixture(scope="module")
def greedy_b4():
    prof = traceview.load("fixtures/greedy_b4", cache=False, stale_after_s=None)
    return prof, phases(prof, derived.step_anatomy(prof), None)


def test_engine_fixture_decode_steps_tokens_from_names(greedy_b4):
    """The engine's decode program jit_decode_b4_bkv128 makes 4 tokens a step; the prefill ran
    before the first step, which stays decode."""
    _, ph = greedy_b4
    assert ph.label_line() == "3 decode"
    assert ph.steps["tokens"].to_list() == [4, 4, 4]
    assert ph.steps["why"][0].startswith("the first step: program jit_decode_b4_bkv128 is named decode")
    tps = ph.steps["tokens_per_s"].to_list()
    assert tps == pytest.approx([4 / (d * 1e-12) for d in ph.steps["duration_ps"].to_list()])


def test_phase_filter_keeps_the_programs_ops(greedy_b4):
    prof, ph = greedy_b4
    want = prof.ops.filter(pl.col("module").str.starts_with("jit_prefill")).height
    got = phase_profile(prof, "prefill", ph)
    assert got.table.height == want > 0 and type(got) is type(prof)
    assert {m.split("_t")[0] for m in got.module_runs["module"].unique().to_list()} == {"jit_prefill"}
    dec = phase_profile(prof, "decode", ph)
    assert dec.ops.filter(~pl.col("module").str.starts_with("jit_decode")).height == 0
    with pytest.raises(UsageError, match="no step of that phase.*phases found: decode, prefill"):
        phase_profile(prof, "mixed", ph)
    with pytest.raises(UsageError, match="expected one of"):
        phase_profile(prof, "warmup", ph)


def test_cli_phase_section_and_flag(shared_traces):
    cmd = [sys.executable, "-m", "traceview.cli"]
    out = subprocess.run(cmd + ["analyze", "fixtures/greedy_b4", "--no-cache", "--format", "json", "--phase", "decode"],
                         capture_output=True, text=True, check=True).stdout
    d = json.loads(out)
    assert d["phases"]["labels"] == "3 decode"
    assert any(w.startswith("--phase decode:") for w in d["warnings"])
    assert "host-bound-steps" not in {f["id"] for f in d["findings"]}  # other phases' time is not idle
    bad = subprocess.run(cmd + ["analyze", str(shared_traces / VLLM), "--no-cache", "--phase", "decode"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "no program execution of that phase in this profile (phases found: prefill)" in bad.stderr
    text = subprocess.run(cmd + ["analyze", str(shared_traces / VLLM), "--no-cache", "--chip", "tpu-v6e"],
                          capture_output=True, text=True, check=True).stdout
    assert "phases — 2 prefill; MFU counts model_flops from the trace" in text


def test_phase_prefill_steps_are_its_executions(greedy_b4):
    """--phase prefill drops the engine's decode step markers: the steps are the prefill
    program's executions, labelled prefill."""
    prof, ph = greedy_b4
    kept = phase_profile(prof, "prefill", ph)
    assert kept.step_markers.height == 0 and kept.phase == "prefill"
    anat = derived.step_anatomy(kept)
    ph2 = phases(kept, anat, None)
    dominant = kept.module_runs.filter(pl.col("module") == anat.module).height
    assert anat.module.startswith("jit_prefill") and set(ph2.steps["phase"]) == {"prefill"}
    assert ph2.steps.height == dominant > 0


def test_tokens_per_step_is_bounded():
    from traceview.cli import main

    assert main(["analyze", "fixtures/greedy_b4", "--no-cache", "--tokens-per-step", str(1 << 40)]) == 2


def test_a_phase_of_every_window_step_has_the_anatomys_p10_p90(greedy_b4):
    """All three steps of the fixture are decode steps: the phases table's median, p10 and
    p90 are the step anatomy's (linear interpolation, as numpy's percentile), not a second
    quantile rule (polars' default is nearest)."""
    prof, ph = greedy_b4
    dist = derived.step_anatomy(prof).distribution
    row = ph.summary.filter(pl.col("phase") == "decode").row(0, named=True)
    assert row["window_steps"] == dist["n_window"] == 3
    for k in ("median_ps", "p10_ps", "p90_ps"):
        assert row[k] == pytest.approx(dist[k], rel=1e-12)
