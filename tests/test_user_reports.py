"""Defects a new user found by trying traceview on the shared traces (issue 24's second look):
each test names what was wrong and checks the real output now."""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest

import traceview
from traceview.analysis.compare.diff import COMMON_SHIFT_MIN, common_shift
from traceview.cli import main
from traceview.render.diff_summary import noise_cell

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "fixtures"
CONV = "mi300x_jax_conv3d.xplane.pb"
V6E = "tpu_v6e_4chip_psum.xplane.pb"
VLLM = "vllm_tpu_qwen"


def test_the_terminal_hint_names_a_json_key_that_exists(shared_traces, capsys):
    """The op table's hint "--format json, split_names" named a key the JSON did not have."""
    assert main(["analyze", str(shared_traces / VLLM), "--no-cache", "--top", "1"]) == 0
    text = capsys.readouterr().out
    assert "2 more op names split (3 in all: --format json, split_names)" in text
    assert main(["analyze", str(shared_traces / VLLM), "--format", "json", "--no-cache"]) == 0
    j = json.loads(capsys.readouterr().out)
    rep = traceview.load(shared_traces / VLLM).analyze()
    assert j["rows"]["split_names"] == {"shown": 3, "total": 3} == {"shown": rep.split.height, "total": 3}
    assert [r["op_name"] for r in j["split_names"]] == ["fusion", "copy-done", "copy-start"]
    assert [r["n"] for r in j["split_names"]] == [3, 4, 4]


def test_a_huge_top_is_every_row_not_a_number_echoed(shared_traces, capsys):
    """--top 10**23 was echoed as "top": 4611686018427387904 (the cap)."""
    path = str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")
    assert main(["analyze", path, "--format", "json", "--top", "1" + "0" * 23, "--no-cache"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["top"] is None and all(n["shown"] == n["total"] for n in j["rows"].values())
    assert main(["analyze", path, "--format", "json", "--top", "7", "--no-cache"]) == 0
    assert json.loads(capsys.readouterr().out)["top"] == 7


def test_a_broken_symlink_says_so(tmp_path, capsys):
    link = tmp_path / "x.xplane.pb"
    os.symlink(tmp_path / "gone" / "x.xplane.pb", link)
    assert main(["analyze", str(link)]) == 3
    err = capsys.readouterr().err.strip()
    assert err == f"traceview: error: {link}: is a broken symbolic link (to {tmp_path / 'gone' / 'x.xplane.pb'}, " \
                  f"which does not exist)"


def test_a_loop_of_symlinks_says_so(tmp_path, capsys):
    """Two links naming each other: a loop, not a broken link to a file that 'does not exist'."""
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    assert main(["analyze", str(tmp_path / "a")]) == 3
    err = capsys.readouterr().err.strip()
    assert err == f"traceview: error: {tmp_path / 'a'}: is a symbolic link that leads back to itself (to b, a loop of links)"


def test_no_straggler_is_named_on_a_lead_of_a_tenth_of_a_percent(shared_traces, capsys):
    """The v6e chips take turns being slowest by ~0.1%: that device was called "straggler"."""
    assert main(["analyze", str(shared_traces / V6E), "--no-cache"]) == 0
    text = capsys.readouterr().out
    assert "slowest most often /device:TPU:3: slowest in 65 of 100 step(s), median lead 0.1%" in text
    assert "straggler /device" not in text
    # the straggler fixture's device 5 is one (the finding names it): the line says so
    assert main(["analyze", str(FIX / "straggler_8dev"), "--no-cache"]) == 0
    assert "  straggler /device:CPU:5: slowest in 3 of 3" in capsys.readouterr().out


def test_the_noise_cell_shows_the_estimate_its_interval_belongs_to():
    """The diff's ratio column (total over total) sat outside the interval shown beside it; the
    cell now carries the per-step estimate the interval is about, inside it."""
    r = {"ratio_lo": 0.91, "ratio_hi": 1.2, "median_ratio": 1.02, "significant": False}
    assert noise_cell(r) == "~ 1.02x [0.91-1.20x]"
    assert noise_cell(r | {"significant": True, "median_ratio": 2.8, "ratio_lo": 2.1, "ratio_hi": 3.6}) \
        == "2.80x [2.10-3.60x]"
    assert noise_cell(r | {"significant": None}) == "? 1.02x [0.91-1.20x]"
    assert noise_cell({"ratio_lo": None}) == "-"


def test_every_diff_cell_estimate_lies_in_its_interval():
    d = traceview.diff(FIX / "greedy_b4", FIX / "nodonate_b4")
    m = d.populations.filter(pl.col("ratio_lo").is_not_null())
    assert m.height >= 10
    assert (m["ratio_lo"] <= m["median_ratio"]).all() and (m["median_ratio"] <= m["ratio_hi"]).all()


def _pops(los, his, meds):
    return pl.DataFrame({"ratio_lo": los, "ratio_hi": his, "median_ratio": meds})


def test_a_shift_common_to_every_population_gets_a_note():
    n = COMMON_SHIFT_MIN + 2
    all_slow = _pops([0.55] * n, [0.66] * n, [0.61] * n)
    note = common_shift(all_slow)
    assert note.startswith(f"{n} of {n} matched populations moved the same way (median 0.61x per step)")
    # one population in ten holding 1: still common (90%); two: not
    mixed = _pops([0.55] * (n - 1) + [0.9], [0.66] * (n - 1) + [1.1], [0.61] * (n - 1) + [1.0])
    assert common_shift(mixed) is not None
    mixed2 = _pops([0.55] * (n - 2) + [0.9] * 2, [0.66] * (n - 2) + [1.1] * 2, [0.61] * (n - 2) + [1.0] * 2)
    assert common_shift(mixed2) is None
    assert common_shift(all_slow.head(COMMON_SHIFT_MIN - 1)) is None  # too few to say
    # a treatment of a few ops (the fixture pair: 4 populations moved) gets no such note
    d = traceview.diff(FIX / "greedy_b4", FIX / "nodonate_b4")
    assert not any("moved the same way" in n for n in d.notes)


def test_host_bound_steps_states_the_step_the_anatomy_shows(shared_traces):
    """The finding said "of each 24.5 ms step" where the step anatomy shows ~1.1 ms steps (the
    24.5 ms is from one step's start to the next)."""
    rep = traceview.load(shared_traces / CONV).analyze()
    f = next(x for x in rep.findings if x.id == "host-bound-steps")
    mean = float(rep.steps.steps.filter(pl.col("in_window"))["duration_ps"].mean())
    assert f.evidence["step_ps"] == pytest.approx(mean)
    assert "from one step's start to the next" in f.statement and "inside the 1.084 ms step" in f.statement


def test_verify_help_lists_every_check_kind(capsys):
    assert main(["verify", "--help"]) == 0
    text = capsys.readouterr().out
    for form in ("exposed communication share CMP PCT", "straggler lead CMP PCT", "no finding ID",
                 "finding ID [present|absent]"):
        assert form in text, form


def test_costs_unknown_is_silent_on_interpreted_kernels_and_speaks_on_the_tpu(shared_traces):
    """A CPU profile's Pallas kernels run in the interpreter, which drops pl.CostEstimate: no
    evidence either way, so no finding (it fired on every engine profile); a TPU kernel
    without costs still gets it."""
    cpu = traceview.load(FIX / "greedy_b4").analyze()
    assert cpu.kernels.height == 1 and "costs-unknown" not in {f.id for f in cpu.findings}
    tpu = traceview.load(shared_traces / "tpu_v6e_pallas_matmul_llo.xplane.pb").analyze()
    assert "costs-unknown" in {f.id for f in tpu.findings}


def test_host_transfers_why_does_not_cite_the_trace_it_fires_on(shared_traces):
    rep = traceview.load(shared_traces / V6E).analyze()
    f = next(x for x in rep.findings if x.id == "host-transfers-dominate")
    assert "v6e 4-chip" not in f.why and "96.9%" not in f.why and "63 GB/s" in f.why


def test_family_roofline_counts_a_gpu_op_once_per_execution(shared_traces):
    """cudnn-conv.1 launches two kernels per execution (Im3d2Col, then a GEMM): its FLOPs were
    counted per kernel event (73.2 GFLOP per step); one execution per step is 36.6 GFLOP, the
    op's own cost."""
    rep = traceview.load(shared_traces / CONV).analyze()
    mm = rep.family_roofline.filter(pl.col("family") == "matmul/convolution").row(0, named=True)
    conv = rep.roofline.filter(pl.col("op_name") == "cudnn-conv.1").row(0, named=True)
    assert 1.9 < conv["kernels_per_execution"] <= 2.0  # 79 kernel events for 40 executions
    assert mm["occurrences"] == 2.0 and mm["flops"] == pytest.approx(conv["flops"]) == pytest.approx(3.661e10, rel=1e-3)
    assert mm["bytes"] == pytest.approx(conv["bytes"])


# -- the second new user (helper report of 2026-12-02) ---------------------------------------

def test_all_runs_keeps_each_run_on_its_own_timeline(capsys):
    """``analyze fixtures --all-runs`` put five single-CPU runs on one ``/host:CPU`` device:
    negative gaps between steps and a straggler made of other runs' steps. Each run's host is
    now ``RUN/HOST``."""
    prof = traceview.load(FIX, all_runs=True, stale_after_s=None)
    runs = {f.run for f in prof.discovery.files}
    hosts = set(prof.table.attrs["host"].unique().to_list())
    folders = [p for p in FIX.glob("*/plugins/profile/*") if p.is_dir()]  # a run each (two share a name)
    assert len(folders) == 10 and len(runs) == 10
    assert len(hosts) == 10 and all(any(h.startswith(r + "/") for r in runs) for h in hosts)
    st = prof.analyze().steps.steps
    assert st["gap_before_ps"].drop_nulls().min() >= 0 and st["gap_after_ps"].drop_nulls().min() >= 0
    one = traceview.load(FIX / "greedy_b4", stale_after_s=None)  # one run: hosts unchanged
    assert set(one.table.attrs["host"].unique().to_list()) == {"engine-cpu"}


def test_diff_steps_are_analyzes_steps_one_sample_per_step(capsys):
    """diff read the engine's prefill executions as its steps (1.57x) where analyze reads the
    step markers (1.16x), and counted each device's copy of a step as a sample (x24 on 8 devices
    for 3 steps, a falsely tight interval)."""
    a, b = (traceview.load(FIX / n, stale_after_s=None) for n in ("greedy_b4", "topp_b4"))
    d = traceview.diff(a, b)
    ra, rb = a.analyze().steps, b.analyze().steps
    assert d.steps.method_base == ra.method == "markers" and d.steps.steps_base == 3
    assert d.steps.step_ps_base == pytest.approx(ra.coverage.step_ps)
    assert d.steps.step_ps_treatment == pytest.approx(rb.coverage.step_ps)
    assert main(["diff", str(FIX / "greedy_b4"), str(FIX / "topp_b4")]) == 0
    assert "[step markers x3 vs step markers x3]" in capsys.readouterr().out
    d8 = traceview.diff(FIX / "collectives_8dev", FIX / "straggler_8dev")
    assert (d8.steps.steps_base, d8.steps.steps_treatment) == (3, 3)
    assert d8.steps.change.lo is None and d8.steps.change.n_base == 3  # 3 samples a side: no interval


def test_bounds_that_cannot_be_counts_are_usage_errors(capsys):
    assert main(["history", str(FIX / "greedy_b4"), "--regression-threshold", "nan"]) == 2
    assert main(["analyze", str(FIX / "greedy_b4"), "--steps", "9" * 23]) == 2
    assert main(["analyze", str(FIX / "greedy_b4"), "--expect-batch", "9" * 23]) == 2
    assert main(["verify", str(FIX / "topp_b4"), "-c", "op matching ynn count != nan"]) == 2
    err = capsys.readouterr().err
    assert "finite number" in err and "below 2**62" in err and "Traceback" not in err


def test_no_device_is_named_last_at_collectives_it_never_joined(shared_traces):
    rep = traceview.load(shared_traces / V6E).analyze()
    assert rep.stragglers is None or rep.stragglers.steps["last_to_arrive"].null_count() == rep.stragglers.steps.height
    st = traceview.load(FIX / "straggler_8dev", stale_after_s=None).analyze().stragglers.steps
    assert st["last_to_arrive"].to_list() == ["/device:CPU:5"] * 3


def test_small_figures_a_user_reads(shared_traces, capsys):
    from traceview.model.units import fmt_pct

    assert fmt_pct(float("inf")) == "-" == fmt_pct(float("nan")) and fmt_pct(0.5) == "50.0%"
    # a family with no costed op was measured against nothing: null, not 0 ps
    fr = traceview.load(shared_traces / V6E).analyze().family_roofline
    copies = fr.filter(pl.col("family") == "copies and conversions").row(0, named=True)
    assert copies["measured_ps"] is None and copies["predicted_ps"] is None and copies["costed_share"] == 0.0
    # query --tables counts the op table without building it
    assert main(["query", str(FIX / "greedy_b4"), "--tables", "--format", "json"]) == 0
    rows = {t["table"]: t["rows"] for t in json.loads(capsys.readouterr().out)["tables"]}
    assert rows["ops"] == traceview.load(FIX / "greedy_b4", stale_after_s=None).table.height == 510
    # one program name compiled six times: the steps say they mix programs
    notes = traceview.load(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb").analyze().steps.notes
    assert any(n.startswith("jit_dot is 6 compiled programs (program_id 5, 21, 34, 49, 64, 79)") for n in notes)


def test_families_that_place_nothing_say_so():
    """``--families study`` on the fixtures (compiled without named scopes) put every op in
    'other' without a word."""
    from traceview.analysis.ops.families import read_rules

    a = traceview.load(FIX / "greedy_b4", stale_after_s=None).steps(rules=read_rules("study"))
    assert a.families["family"].to_list() == ["other"]
    assert any(n.startswith("the families given leave 100% of the steps' op time in 'other'") for n in a.notes)
    assert not any("families given" in n for n in traceview.load(FIX / "greedy_b4", stale_after_s=None).steps().notes)
