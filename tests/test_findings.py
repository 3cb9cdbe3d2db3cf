"""Findings (:mod:`traceview.analysis.findings`): each rule fires on a trace built to show it
and stays silent on one that does not, on the engine's recorded fixtures (top-p / greedy,
donated / ``--no-donate``, KV block 128 over a 128-token context / 64, a host-side token mask)
and the shared real traces; and the findings reach analyze, JSON, HTML, the notebook summary,
verify and the pytest helpers."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

import traceview
from traceview.analysis.findings import (Finding, Inputs, NotEvaluated, Thresholds, find, parse_threshold,
                                        thresholds_of)
from traceview.analysis.findings import decode, quality
from traceview.cli import main
from traceview.errors import UsageError

pytest_plugins = ["pytester"]

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(scope="module")
def reps(shared_traces):
    """Reports of the fixtures and shared traces (each read and analysed once)."""
    paths = {n: FIXTURES / n for n in ("topp_b4", "greedy_b4", "greedy_b8", "nodonate_b4", "hostmask_b4",
                                       "straggler_8dev", "collectives_8dev", "tp_decode")}
    paths.update(vllm=shared_traces / "vllm_tpu_qwen", conv=shared_traces / "mi300x_jax_conv3d.xplane.pb",
                 gemm=shared_traces / "mi300x_jax_gemm_sweep.xplane.pb",
                 attn=shared_traces / "mi300x_jax_attention.xplane.pb",
                 psum=shared_traces / "tpu_v6e_4chip_psum.xplane.pb",
                 pallas=shared_traces / "tpu_v6e_pallas_matmul_llo.xplane.pb")
    out = {}
    for name, p in paths.items():
        prof = traceview.load(p, stale_after_s=None)  # staleness depends on today's date
        out[name] = (prof, prof.analyze())
    return out


def test_expected_findings_both_ways(reps, shared_traces):
    """Every shared trace and every fixture gives exactly the finding ids of
    ``tests/expected_findings.py`` (nothing missing, nothing extra); the table names every one."""
    from expected_findings import FIXTURES as WANT_FIXTURES, SHARED as WANT_SHARED

    import traceview.errors as errors
    from traceview.analysis.findings import IDS

    shared = {p.name for p in shared_traces.iterdir() if p.name != "README.md"}
    fixtures = {p.name for p in FIXTURES.iterdir() if p.is_dir()}
    assert set(WANT_SHARED) == shared and set(WANT_FIXTURES) == fixtures
    by_path = {str(prof.discovery.root): rep for prof, rep in reps.values()}
    got_ids = {}
    for base, want in [(shared_traces, WANT_SHARED), (FIXTURES, WANT_FIXTURES)]:
        for name, expected in want.items():
            path = base / name
            if isinstance(expected, str):  # no report at all: the error the CLI exits with
                with pytest.raises(getattr(errors, expected)):
                    traceview.load(path, stale_after_s=None)
                continue
            assert set(expected) <= set(IDS), name
            rep = by_path.get(str(path))
            if rep is None:
                rep = traceview.load(path, stale_after_s=None).analyze()
            got_ids[name] = ids(rep)
    want_all = {n: set(v) for n, v in {**WANT_SHARED, **WANT_FIXTURES}.items() if not isinstance(v, str)}
    missing = {n: sorted(want_all[n] - got_ids[n]) for n in want_all if want_all[n] - got_ids[n]}
    extra = {n: sorted(got_ids[n] - want_all[n]) for n in want_all if got_ids[n] - want_all[n]}
    assert not missing and not extra, f"missing: {missing}; extra: {extra}"


def test_every_finding_has_its_section_and_a_why_of_its_own(reps):
    """docs/findings.md has one section per finding id (its anchor is the id); no why leans on a
    study the user has not read, and each carries a measurement (a digit)."""
    from traceview.analysis.findings import IDS

    page = (FIXTURES.parent / "docs" / "findings.md").read_text(encoding="utf-8")
    heads = {line[3:].strip() for line in page.splitlines() if line.startswith("## ")}
    assert set(IDS) <= heads, sorted(set(IDS) - heads)
    seen = [f for _, rep in reps.values() for f in rep.findings]
    assert {f.id for f in seen} >= {"costs-unknown", "host-transfers-dominate", "state-copied-every-step"}
    for f in seen:
        assert f.doc == f"docs/findings.md#{f.id}" and not f.why.lower().startswith("the study")
        assert "the study (" not in f.why and any(c.isdigit() for c in f.why), (f.id, f.why)


def ids(rep) -> set:
    return {f.id for f in rep.findings}


def one(rep, fid) -> Finding:
    (f,) = [f for f in rep.findings if f.id == fid]
    return f


def test_sampler_search_topp_against_greedy(reps):
    f = one(reps["topp_b4"][1], "sampler-search-dominates")
    assert f.evidence["scopes"] == ["topp_binary_search"] and f.evidence["vocab"] == 512  # the tiny preset's
    # the search's time per step is what the step anatomy's ops inside the steps say
    anat = reps["topp_b4"][1].steps
    ops = anat.ops.filter(pl.col("step_row").is_not_null() & pl.col("framework_op").str.contains("topp_binary_search"))
    assert f.evidence["per_step_ps"] == pytest.approx(ops["self_ps"].sum() / anat.coverage.n_steps)
    assert 0.03 <= f.evidence["share_of_step"] < 0.2 and f.severity == "medium"
    assert "op matching topp_binary_search vanished" in f.verify_hint
    assert "sampler-search-dominates" not in ids(reps["greedy_b4"][1])
    # the threshold is an argument: above the measured share the rule is silent
    above = f.evidence["share_of_step"] + 0.01
    assert "sampler-search-dominates" not in {x.id for x in find(reps["topp_b4"][1], thresholds={
        "sampler-search-dominates": above})}


def test_kv_block_covering_the_context(reps):
    # greedy_b4: bkv 128 over 8 pages of 16 (max_model_len 128); hostmask_b4: bkv 64, same context
    f = one(reps["greedy_b4"][1], "kv-block-covers-context")
    (k,) = f.evidence["kernels"]
    assert (k["bkv"], k["page"], k["batch"], k["pages_per_seq"], k["max_context"]) == (128, 16, 4, 8, 128)
    assert k["kernel"] == "RPAd-p_16-bq_1_1-bkv_128_128"
    # the next step names a smaller block (a quarter, a multiple of the page) and its check
    assert "--kv-block 32" in f.next_step and f.verify_hint.endswith("has bkv 32'")
    assert "kv-block-covers-context" not in ids(reps["hostmask_b4"][1])
    # vLLM's RPA: 64-page blocks of 64 tokens (4,096) against 512 pages per sequence (32,768): silent
    assert "kv-block-covers-context" not in ids(reps["vllm"][1])
    assert decode._max_context(reps["vllm"][1].kernels["shape"][0], 64) == (256, 512, 32768)


def test_state_copied_every_step_donated_against_not(reps):
    f = one(reps["nodonate_b4"][1], "state-copied-every-step")
    assert len(f.evidence["copies"]) == 4  # K and V pools of 2 layers
    assert {c["shape"] for c in f.evidence["copies"]} == {"f32[1,33,16,64] <- f32[1,33,16,64]"}
    assert all(c["per_step"] == 1 and c["bytes"] == 33 * 16 * 64 * 4 for c in f.evidence["copies"])
    assert "state-copied-every-step" not in ids(reps["greedy_b4"][1])


def test_verify_no_finding_cli(capsys):
    donated, copying = str(FIXTURES / "greedy_b4"), str(FIXTURES / "nodonate_b4")
    assert main(["verify", donated, "--check", "no finding state-copied-every-step"]) == 0
    assert main(["verify", copying, "--check", "no finding state-copied-every-step"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  no finding state-copied-every-step" in out and "f32[1,33,16,64]" in out
    assert main(["verify", copying, "-c", "finding state-copied-every-step present"]) == 0
    # thresholds reach verify: no copy is 1 GB
    assert main(["verify", copying, "-c", "no finding state-copied-every-step",
                 "--finding-threshold", "state-copied-every-step=1e9"]) == 0
    assert main(["verify", copying, "-c", "no finding nope"]) == 2
    assert main(["verify", copying, "-c", "no finding costs-unknown", "--no-findings"]) == 2
    capsys.readouterr()


def test_host_bound_steps(reps):
    f = one(reps["hostmask_b4"][1], "host-bound-steps")
    st = reps["hostmask_b4"][1].steps.steps
    assert f.evidence["idle_ps"] == pytest.approx(st["idle_ps"].mean())
    assert f.evidence["share"] > 0.5
    assert "host-bound-steps" not in ids(reps["greedy_b4"][1])


def test_several_regimes_names_the_steady_decode(reps):
    f = one(reps["topp_b4"][1], "one-name-several-regimes")
    pops = f.evidence["populations"]
    steady = [p for p in pops if p["steady_decode"]]
    assert len(steady) == 1 and steady[0]["modules"] == ["jit_decode_b4_bkv128"] and steady[0]["occurrences"] == 3
    assert any(not p["multiple_of_steps"] for p in pops)
    # the prefill bucket t32 ran 3 times too (3 prompts): the counts coincide, the module tells
    assert "by coincidence" in f.statement
    # a GEMM sweep's five shapes are not padding buckets of one another
    assert "one-name-several-regimes" not in ids(reps["gemm"][1])
    assert decode._bucket_of([("f32", (4, 512)), ("f32", (4, 256))], [("f32", (32, 512)), ("f32", (32, 256))])
    assert not decode._bucket_of([("b", (8192, 4096))], [("b", (4096, 4096))])


def test_costs_unknown_and_roofline_on_real_traces(reps):
    f = one(reps["vllm"][1], "costs-unknown")
    assert f.evidence["kernels"][0]["name"] == "RPA-bq_32-bkvp_64-p_64-"
    assert f.evidence["share_of_op_time"] == pytest.approx(reps["vllm"][1].kernels["share"].sum(), abs=0.01)
    assert "costs-unknown" not in ids(reps["gemm"][1])  # hipBLASLt GEMMs: costs derived from their shapes
    g = one(reps["conv"][1], "far-below-roofline")
    (fam,) = g.evidence["families"]
    assert fam["family"] == "matmul/convolution" and fam["peak_bw"] == 5.3e12
    assert fam["populations"][0]["op_name"] == "cudnn-conv.1" and 0.3 < fam["fraction_of_peak_bw"] < 0.4
    for quiet in ("vllm", "gemm", "attn"):  # no peaks (vLLM); compute-bound or near the roof (MI300X)
        assert "far-below-roofline" not in ids(reps[quiet][1])


def test_warmup_and_trace_quality(reps, shared_traces):
    # the MI300X conv trace's GPU:0 runs its first step in 43.1 ms against ~1 ms on its 7
    # other GPUs: an outlier whose reason names the first execution; the default steady window
    # leaves it out, so there is nothing to act on and no finding; a window holding it fires
    prof, rep = reps["conv"]
    st = rep.steps.steps
    (out,) = st.filter(~pl.col("in_window") & pl.col("reason").str.contains("first execution")).to_dicts()
    assert (out["device"], out["step"]) == ("/device:GPU:0", 0)
    assert "warmup-in-window" not in ids(rep)
    w = one(prof.analyze(step_window="all"), "warmup-in-window")
    s0 = w.evidence["steps"][0]
    assert (s0["device"], s0["step"], s0["in_window"]) == ("/device:GPU:0", 0, True)
    assert s0["duration_ps"] == 43_133_070_000 and "first execution of jit_forward_3d_conv" in s0["reason"]
    assert w.severity == "medium" and w.evidence["inside_window"] == 1
    assert w.evidence["steady_median_ps"] < 2e9 < w.evidence["mean_all_ps"]
    assert "warmup-in-window" not in ids(reps["gemm"][1])
    s = one(traceview.load(shared_traces / "vllm_tpu_qwen").analyze(), "stale-trace")  # default: 7 days
    assert "days old" in s.statement
    assert ids(reps["psum"][1]) == {"host-transfers-dominate"}


def test_host_transfers_dominate_the_v6e_psum_steps(reps):
    """The v6e psum trace: copies to and from host memory (memory space S(5)) fill 96.9% of
    every jit_f step on each of the 4 chips; the rule reads the overlap section's split."""
    rep = reps["psum"][1]
    f = one(rep, "host-transfers-dominate")
    st = rep.overlap.steps
    assert f.evidence["host_ps"] == pytest.approx(float(st["host_ps"].mean()))
    assert f.evidence["step_ps"] == pytest.approx(float(st["step_ps"].mean()))
    assert f.evidence["n_steps"] == 400 and f.severity == "high" and "96.9%" in f.statement
    assert f.evidence["populations"] and f.evidence["populations"][0]["op_name"].startswith("copy-")
    # the threshold is an argument; the engine fixtures move nothing to the host
    assert "host-transfers-dominate" not in {x.id for x in find(rep, thresholds={"host-transfers-dominate": 0.98})}
    for name in ("greedy_b4", "hostmask_b4", "collectives_8dev"):
        assert "host-transfers-dominate" not in ids(reps[name][1])


def test_communication_findings_on_the_multidevice_fixtures(reps):
    """Rule 9 on recorded traces: the straggler fixture (device 5 does 200 extra matmuls before
    a psum) names CPU:5 with its lead and the exposed communication the others wait in; the
    exposed share equals the overlap section's own figures; silent on one-device profiles."""
    prof, rep = reps["straggler_8dev"]
    s = one(rep, "straggler-device")
    summ = rep.stragglers.summary
    assert (s.evidence["device"], s.evidence["steps_slowest"], s.evidence["n_steps"]) == ("/device:CPU:5", 3, 3)
    assert s.evidence["lead_median"] == summ["lead_median"] > 10 and "3 of 3 step(s)" in s.statement
    e = one(rep, "exposed-communication")
    # its exposed time is waiting for CPU:5: the next step is the straggler, not the collective
    assert e.evidence["waiting_for_straggler"] == "/device:CPU:5" and e.severity == "medium"
    assert "straggler" in e.next_step and "waiting for the straggler /device:CPU:5" in e.statement
    st = rep.overlap.steps
    assert e.evidence["exposed_ps"] == pytest.approx(float(st["exposed_ps"].mean()))
    assert e.evidence["step_ps"] == pytest.approx(float(st["step_ps"].mean()) if "step_ps" in st.columns
                                                  else float(st["duration_ps"].mean()))
    # the collectives fixture: every device does the same work; its slowest device changes from
    # step to step (thread scheduling), so no straggler; its synchronous CPU collectives are exposed
    assert "straggler-device" not in ids(reps["collectives_8dev"][1])
    e8 = one(reps["collectives_8dev"][1], "exposed-communication")
    assert e8.severity == "high" and e8.evidence["waiting_for_straggler"] is None
    # the tensor-parallel decode: CPU:0 slowest in 2 of 2 steps by 33%, too little evidence
    assert "straggler-device" not in ids(reps["tp_decode"][1])
    for name in ("greedy_b4", "topp_b4", "gemm"):
        assert not {"straggler-device", "exposed-communication"} & set(ids(reps[name][1]))


def test_bad_traces_have_no_findings(shared_traces, capsys):
    assert main(["analyze", str(shared_traces / "gpu_v100x8_tf2_bert_no_xla.xplane.pb")]) == 5
    assert main(["analyze", str(shared_traces / "corrupt_utf8_mangled.xplane.pb")]) == 4
    captured = capsys.readouterr()
    assert "finding" not in captured.out + captured.err


def test_rules_on_hand_built_inputs():
    """Rule logic where no recorded trace carries the input yet: the communication analyses,
    the steps branch's outlier columns, and a diff whose traced events multiplied."""
    th = Thresholds()
    ov = SimpleNamespace(steps=pl.DataFrame({"compute_ps": [800] * 3, "exposed_ps": [200] * 3,
                                             "hidden_ps": [50] * 3, "idle_ps": [0] * 3}))
    f = quality.exposed_communication(Inputs(SimpleNamespace(overlap=ov, steps=None)), th)
    assert f.id == "exposed-communication" and f.evidence["exposed_ps"] == 200 and f.evidence["step_ps"] == 1000
    # two executions are not a repeated step: not evaluated (the tensor-parallel fixture's 2 decode steps)
    two = SimpleNamespace(steps=ov.steps.head(2))
    assert quality.exposed_communication(Inputs(SimpleNamespace(overlap=two, steps=None)), th) == NotEvaluated(
        "exposed-communication", "2 step(s) per device: the rule needs a step repeated 3 times")
    ov.steps = ov.steps.with_columns(pl.lit(10).alias("exposed_ps"))
    assert quality.exposed_communication(Inputs(SimpleNamespace(overlap=ov, steps=None)), th) is None
    sg = SimpleNamespace(summary={"straggler": "c", "n_steps": 4, "steps_slowest": 3, "lead_median": 0.5,
                                  "wait_ps": 100, "attributed_wait_ps": 90}, devices=None)
    f = quality.straggler(Inputs(SimpleNamespace(stragglers=sg)), th)
    assert f.evidence["device"] == "c" and "3 of 4 step(s), 1.50x" in f.statement and "90.0%" in f.statement
    sg.summary["steps_slowest"] = 1  # a different slowest device in most steps: noise
    assert quality.straggler(Inputs(SimpleNamespace(stragglers=sg)), th) is None
    sg.summary.update(steps_slowest=4, lead_median=0.1)  # always slowest, but by 10%: under the 1.2 factor
    assert quality.straggler(Inputs(SimpleNamespace(stragglers=sg)), th) is None
    sg.summary.update(n_steps=2, steps_slowest=2, lead_median=0.33)  # 2 of 2 by chance 1 in 4 (tp_decode)
    assert quality.straggler(Inputs(SimpleNamespace(stragglers=sg)), th) is None
    sg.summary.update(lead_median=1.5)  # but 2.5x the median device in both: named
    assert quality.straggler(Inputs(SimpleNamespace(stragglers=sg)), th).evidence["device"] == "c"
    sg.summary.update(n_steps=4, steps_slowest=4, lead_median=0.1)
    assert quality.straggler(Inputs(SimpleNamespace(stragglers=sg)), th) is None
    # no straggler figure: not evaluated, unless there is one device only (nothing to be slower than)
    assert quality.straggler(Inputs(SimpleNamespace()), th) == NotEvaluated(
        "straggler-device", "no collective execution matched across two or more devices")
    one_dev = SimpleNamespace(devices=pl.DataFrame({"device": ["d"]}))
    assert quality.straggler(Inputs(one_dev), th) is None
    steps = pl.DataFrame({"host": ["h"] * 4, "device": ["d"] * 4, "step": [0, 1, 2, 3], "start_ps": [0, 9, 12, 15],
                          "duration_ps": [9, 3, 3, 3], "gap_after_ps": [0, 0, 0, None], "idle_ps": [0] * 4,
                          "outlier": [True, False, False, False], "reason": ["first execution of jit_x", None, None, None],
                          "in_window": [True] * 4})
    loop = {("step_loop", th.step_repeats): {"repeated": True}}  # a step loop (its op mix is not built here)
    rep = SimpleNamespace(steps=SimpleNamespace(steps=steps))
    f = decode.warmup_in_window(Inputs(rep, cache=dict(loop)), th)
    assert f.evidence["steps"][0]["reason"] == "first execution of jit_x" and f.evidence["steady_median_ps"] == 3
    assert f.severity == "medium" and f.evidence["inside_window"] == 1
    # without an op mix nothing says the steps repeat: not evaluated, not a guess
    got = decode.warmup_in_window(Inputs(rep), th)
    assert isinstance(got, NotEvaluated) and got.id == "warmup-in-window" and "not one repeated step" in got.reason
    # the warm-up step already out of the window: nothing to act on, no finding
    out = SimpleNamespace(steps=SimpleNamespace(steps=steps.with_columns(in_window=pl.Series([False, True, True, True]))))
    assert decode.warmup_in_window(Inputs(out, cache=dict(loop)), th) is None
    d = SimpleNamespace(events_base=100, events_treatment=900, populations=pl.DataFrame({
        "status": ["matched", "matched"], "stem": ["RPAd", "fusion"], "shape": ["s", "t"],
        "events_base": [10, 50], "events_treatment": [80, 50], "self_ps_base": [1, 1], "self_ps_treatment": [2, 1],
        "kernel_changes": ["bkv 512_512 -> 64_64", ""]}))
    (f,) = find(diff=d)
    assert f.id == "profiling-overhead" and f.evidence["populations"][0]["stem"] == "RPAd"
    assert find(diff=d, thresholds={"profiling-overhead": 10}) == []



def test_profiling_overhead_silent_on_the_fixture_block_diff():
    """KV block 128 -> 64 on prompts shorter than 64 tokens: one block per sequence either way,
    so the kernel's traced events change by far less than 4x (1,950 -> 1,566) and the diff
    carries no overhead finding; at a factor under that ratio it does."""
    d = traceview.diff(FIXTURES / "greedy_b4", FIXTURES / "hostmask_b4")
    k = d.populations.filter(pl.col("is_kernel") & (pl.col("status") == "matched")).row(0, named=True)
    ratio = k["events_base"] / k["events_treatment"]
    assert k["kernel_changes"] == "bkv 128_128 -> 64_64" and 1 < ratio < 2
    assert d.findings == []
    (f,) = traceview.diff(FIXTURES / "greedy_b4", FIXTURES / "hostmask_b4", overhead_factor=ratio * 0.98).findings
    assert f.id == "profiling-overhead" and f.evidence["populations"][0]["events_base"] == k["events_base"]


def test_thresholds():
    assert parse_threshold("host-bound-steps=0.5").host_share == 0.5
    assert parse_threshold("sampler-search-dominates=10%").sampler_share == pytest.approx(0.1)
    assert thresholds_of({"warmup_factor": 3}).warmup_factor == 3
    for bad in ("nope=1", "host-bound-steps", "host-bound-steps=x", "host-bound-steps=-1"):
        with pytest.raises(UsageError):
            parse_threshold(bad)
    # a share is 30% or 0.3: a bare 30 would be a threshold no trace reaches, so it is refused
    with pytest.raises(UsageError, match="host_share is a share: write 30% for a percentage, or 0.3 as a fraction"):
        parse_threshold("host-bound-steps=30")
    with pytest.raises(UsageError, match="at most 100%"):
        parse_threshold("host-bound-steps=150%")
    with pytest.raises(UsageError, match="straggler_factor is not a share: write a plain number"):
        parse_threshold("straggler-device=20%")
    assert parse_threshold("memory-grows-per-step=200%").memory_growth == 2.0  # growth may pass 100%
    assert parse_threshold("kv-block-covers-context=1.5").kv_cover == parse_threshold("kv_cover=150%").kv_cover == 1.5


def test_analyze_json_html_and_library(reps, tmp_path, capsys):
    topp = str(FIXTURES / "topp_b4")
    assert main(["analyze", topp, "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert out.index("findings (") < out.index("devices ") and "sampler-search-dominates" in out
    assert main(["analyze", topp, "--format", "json", "--no-cache"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "sampler-search-dominates" in [f["id"] for f in doc["findings"]]
    # every finding links its section of the findings page; the terminal gives the same reference
    assert all(f["doc"] == f"docs/findings.md#{f['id']}" for f in doc["findings"])
    assert "more: docs/findings.md#sampler-search-dominates" in out
    assert main(["analyze", topp, "--format", "json", "--no-cache", "--no-findings"]) == 0
    assert json.loads(capsys.readouterr().out)["findings"] is None
    assert main(["analyze", topp, "--finding-threshold", "bogus=1"]) == 2
    capsys.readouterr()

    prof, rep = reps["topp_b4"]
    frame = prof.findings()
    assert frame.columns == ["id", "severity", "statement", "evidence", "why", "next_step", "verify_hint", "doc",
                             "impact_method", "impact_share_low", "impact_share_high", "impact"]
    assert set(frame["id"]) == ids(rep) and json.loads(frame.filter(pl.col("id") == "sampler-search-dominates")
                                                       ["evidence"][0])["vocab"] == 512

    # HTML: at the top, escaped
    from traceview.analysis.report import add_html_sections
    from traceview.render.html import render_report, summary_html
    from traceview.analysis.report import build_summary

    add_html_sections(rep, prof)
    saved = rep.findings
    rep.findings = saved + [Finding("stale-trace", "info", "run <script>alert(1)</script> is old", {"x": "<b>"})]
    html = render_report(rep, top=5)
    rep.findings = saved
    assert html.index('id="findings"') < html.index('id="read"')
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "sampler-search-dominates" in html
    note = summary_html(build_summary(prof))
    assert "sampler-search-dominates" in note and "finding" in note


USER_TESTS = '''
from traceview import testing as tvt


def test_donated_cache_is_not_copied(recorded_trace):
    tvt.assert_no_finding(recorded_trace("donated"), "state-copied-every-step")
    tvt.assert_finding(recorded_trace("copying"), "state-copied-every-step")


def test_copying_cache_fails(recorded_trace):
    tvt.assert_no_finding(recorded_trace("copying"), "state-copied-every-step")
'''


def test_pytest_helpers_in_a_user_project(pytester, tmp_path):
    import traceview.testing  # noqa: F401 - imported in the outer session (numpy cannot be imported twice)

    traceview.testing.check(traceview.load(FIXTURES / "greedy_b4"), "no finding state-copied-every-step")
    own = tmp_path / "traces"
    own.mkdir()
    (own / "donated").symlink_to(FIXTURES / "greedy_b4", target_is_directory=True)
    (own / "copying").symlink_to(FIXTURES / "nodonate_b4", target_is_directory=True)
    pytester.makeini(textwrap.dedent(f"""
        [pytest]
        traceview_fixtures_dir = {own}
    """))
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "no finding state-copied-every-step: finding state-copied-every-step (high)" in out


def test_host_mask_keeps_the_best_token():
    """The engine's --host-sampler-mask treatment bans control bytes and keeps each row's best token."""
    import numpy as np

    from traceview.engine_shim.engine import host_mask
    from traceview.engine_shim.tokenizer import ByteTokenizer

    logits = np.zeros((2, 300), np.float32)
    logits[0, 10], logits[1, 65] = 5.0, 5.0  # row 0's best is the newline byte
    m = host_mask(logits, ByteTokenizer())
    assert m[0, 10] == 0 and m[1, 10] == -np.inf and m[1, 65] == 0 and m[0, 65] == 0
    assert (m[:, 256:] == 0).all()


def test_logits_rule_logic(reps):
    """Rule 4's comparison of two batch sizes; the engine's float32 model writes its logits in
    float32, so its profiles hold no [batch, vocabulary] conversion and the rule is silent."""
    assert decode.grows_with_batch(4, 1.0, 8, 1.9) and decode.grows_with_batch(8, 2.0, 4, 1.1)
    assert not decode.grows_with_batch(4, 1.0, 8, 1.2) and not decode.grows_with_batch(4, 1.0, 4, 2.0)
    assert not decode.grows_with_batch(4, 1.0, 8, 0.5)
    for name in ("topp_b4", "greedy_b4"):
        assert decode.logits_cost(Inputs(reps[name][1])) is None
        assert "logits-conversions" not in ids(reps[name][1])
    assert decode.logits_growth(reps["greedy_b4"][1], reps["nodonate_b4"][1]) is None


def test_step_pops_from_the_anatomy_sums_equal_the_event_pass(reps):
    """step_pops reads the anatomy's exact per-description window sums; without them it sums
    the window's events itself: the same populations and figures on every report."""
    import dataclasses

    from traceview.analysis.findings import _context

    for name, (_, rep) in reps.items():
        if rep.steps is None:
            continue
        fast = _context.step_pops(Inputs(rep))
        bare = SimpleNamespace(steps=dataclasses.replace(rep.steps, window_sums=None))
        slow = _context.step_pops(Inputs(bare))
        assert fast.sort(fast.columns).equals(slow.sort(slow.columns), null_equal=True), name
        assert rep.steps.window_sums is None or fast.height, name


def test_every_verify_hint_pastes_into_a_shell(reps):
    """A finding's verify line is copied into a shell: it must parse (bash -n). Explanations
    are shell comments, never parentheses (a user pasted one and got 'syntax error near
    unexpected token (')."""
    import subprocess

    hints = {f.verify_hint for _, rep in reps.values() for f in (rep.findings or []) if f.verify_hint}
    assert len(hints) >= 5
    for h in hints:
        r = subprocess.run(["bash", "-n", "-c", h], capture_output=True, text=True)
        assert r.returncode == 0, (h, r.stderr)


# -- impact (issue 26, item 1) ----------------------------------------------------------------

def test_every_finding_has_an_impact_and_findings_are_ranked_by_it(reps):
    """On every fixture and shared trace: each finding's impact has a method, a basis and the
    provenance of its inputs; known shares are a range within [0, 1]; the list is ranked by the
    upper share (unknown last)."""
    from traceview.analysis.findings.impact import METHODS

    seen = set()
    for name, (_, rep) in reps.items():
        fs = rep.findings
        for f in fs:
            imp = f.impact
            assert imp["method"] in METHODS and imp["basis"], (name, f.id)
            if imp["method"] == "unknown":
                assert imp["share_high"] is None and imp["high_ps"] is None, (name, f.id)
                continue
            assert imp["inputs"] and set(imp["inputs"].values()) <= {"counted", "inferred"}, (name, f.id)
            assert 0 <= imp["share_low"] <= imp["share_high"] <= 1, (name, f.id, imp)
            seen.add(imp["method"])
        highs = [f.impact["share_high"] for f in fs]
        known = [h for h in highs if h is not None]
        assert known == sorted(known, reverse=True) and highs[:len(known)] == known, name
    assert seen == {"measured", "bounded", "modelled"}


def test_impact_values_read_off_the_evidence(reps):
    # measured: the state copies' time per step, removed whole by donation
    f = next(x for x in reps["nodonate_b4"][1].findings if x.id == "state-copied-every-step")
    assert f.impact["low_ps"] == f.impact["high_ps"] == f.evidence["per_step_ps"]
    # bounded: host-bound steps recover at most the idle time inside and between steps
    h = next(x for x in reps["conv"][1].findings if x.id == "host-bound-steps")
    assert h.impact["low_ps"] == 0 and h.impact["share_high"] == pytest.approx(h.evidence["share"])
    # modelled: up to the matmul family's gap to its roofline time, per step
    rep = reps["conv"][1]
    r = next(x for x in rep.findings if x.id == "far-below-roofline")
    fam = rep.family_roofline.filter(pl.col("family") == "matmul/convolution").row(0, named=True)
    assert r.impact["high_ps"] == pytest.approx(fam["time_ps"] - fam["predicted_ps"])
    assert r.impact["inputs"]["peaks"] == "inferred"


def test_verify_finding_impact(reps):
    prof = reps["nodonate_b4"][0]
    share = next(x for x in reps["nodonate_b4"][1].findings if x.id == "state-copied-every-step").impact["share_high"]
    res = traceview.verify(prof, [f"finding state-copied-every-step impact < {100 * share + 1:.3f}%",
                                  f"finding state-copied-every-step impact > {100 * share + 1:.3f}%",
                                  "finding kv-block-covers-context impact < 50%",
                                  "finding sampler-search-dominates impact < 1%"])
    assert [r.ok for r in res.results] == [True, False, False, True]
    assert "impact unknown" in res.results[2].message and "taken as 0" in res.results[3].message
    with pytest.raises(UsageError):
        traceview.verify(prof, ["finding state-copied-every-step impact"])


def _loop_profile(prefill_in_gaps: bool):
    """A synthetic one-device profile: 8 executions of jit_decode_b8 (4 ms of ops each, 5 ms
    apart), and, when ``prefill_in_gaps``, a 0.9 ms jit_prefill_t32 op in each 1 ms gap."""
    from traceview.model.profiledata import ProfileData
    from traceview.model.schema import OPS_SCHEMA

    rows = []
    for k in range(8):
        t0 = k * 5_000_000_000
        for i in range(4):
            rows.append({"module": "jit_decode_b8", "op_name": f"dot.{i}", "op_kind": "dot", "shape": "f32[8,8]",
                         "start_ps": t0 + i * 1_000_000_000, "duration_ps": 1_000_000_000})
        if prefill_in_gaps:
            rows.append({"module": "jit_prefill_t32", "op_name": "dot.9", "op_kind": "dot", "shape": "f32[32,8]",
                         "start_ps": t0 + 4_050_000_000, "duration_ps": 900_000_000})
    df = pl.DataFrame(rows).with_columns(
        pl.lit("h").alias("host"), pl.lit("/device:TPU:0").alias("device"), pl.lit("XLA Ops").alias("line"),
        pl.col("duration_ps").alias("self_ps"), pl.lit(1, dtype=pl.Int64).alias("count"),
        pl.lit(1, dtype=pl.UInt64).alias("program_id"))
    df = df.with_columns([pl.lit(None, dtype=t).alias(c) for c, t in OPS_SCHEMA.items() if c not in df.columns])
    df = df.with_columns(pl.when(pl.col("module") == "jit_prefill_t32").then(pl.lit(2, dtype=pl.UInt64))
                         .otherwise(pl.col("program_id")).alias("program_id"))
    runs = (df.group_by("host", "device", "module", "program_id", (pl.col("start_ps") // 5_000_000_000).alias("_k"))
            .agg(pl.col("start_ps").min(), (pl.col("start_ps") + pl.col("duration_ps")).max().alias("_end"))
            .select("host", "device", "module", "program_id", "start_ps",
                    (pl.col("_end") - pl.col("start_ps")).alias("duration_ps")).sort("start_ps"))
    return ProfileData(ops=df.select(list(OPS_SCHEMA)).cast(OPS_SCHEMA), module_runs=runs)


def test_host_bound_counts_other_programs_in_the_gap_as_busy():
    """A prefill chunk run between two decode steps keeps the device busy: the gap it fills is
    not the host's time (a chunked-prefill engine profile fired host-bound-steps falsely)."""
    from traceview.analysis.report import build_report

    busy = build_report(_loop_profile(True), finding_thresholds=["host-bound-steps=0.1"])
    idle = build_report(_loop_profile(False), finding_thresholds=["host-bound-steps=0.1"])
    f = next(x for x in idle.findings if x.id == "host-bound-steps")
    assert f.evidence["gap_ps"] == pytest.approx(1_000_000_000) and f.evidence["gap_busy_ps"] == 0
    assert "host-bound-steps" not in {x.id for x in busy.findings}


#: the step rules: on a trace without a repeated step none of them can judge it
STEP_RULES = {"sampler-search-dominates", "state-copied-every-step", "logits-conversions", "one-name-several-regimes",
              "host-bound-steps", "warmup-in-window", "memory-grows-per-step"}


def test_rules_that_could_not_run_are_recorded_with_their_reason(reps):
    """A rule whose inputs a trace lacks is not evaluated (not "no finding"): the report keeps
    {id: reason}, read here off the shared traces."""
    sweep = ("the steps are not one repeated step: the commonest op mix runs {n} time(s) per device, in {n} of {m} "
             "step(s), and the rule needs 3 and half the steps")
    got = {k: reps[k][1].findings_not_evaluated for k in ("gemm", "attn", "conv", "psum", "pallas", "vllm")}
    # a sweep of jit_dot at several sizes, and of attention's pieces: no step rule can judge them
    assert got["gemm"] == dict.fromkeys(STEP_RULES, sweep.format(n=3, m=13))
    assert got["attn"] == dict.fromkeys(STEP_RULES, sweep.format(n=6, m=24))
    # 8 GPUs without a collective: nothing to wait at, so no straggler figure
    assert got["conv"] == {"straggler-device": "no collective execution matched across two or more devices"}
    assert got["psum"] == {}  # every rule ran on the v6e psum steps
    assert got["pallas"] == {"far-below-roofline": "no op with a byte count to place on the roofline",
                             "memory-grows-per-step": "no allocator has per-step figures"}
    one = "1 step(s) per device: the rule needs a step repeated 3 times"
    assert got["vllm"] == {**dict.fromkeys(STEP_RULES - {"memory-grows-per-step"}, one),
                           "exposed-communication": one, "host-transfers-dominate": one,
                           "far-below-roofline": "no peak FLOP/s and bandwidth known for the device: give "
                                                 "--chip, or --peak-flops and --peak-bw",
                           "memory-near-capacity": "no allocator events in the trace",
                           "memory-grows-per-step": "no allocator events in the trace"}
    # a rule that was not evaluated never fires, and one that fired was evaluated
    for prof, rep in reps.values():
        assert not set(rep.findings_not_evaluated) & ids(rep)


def test_not_evaluated_rules_are_shown_in_terminal_json_and_html(shared_traces, capsys):
    gemm = str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")
    assert main(["analyze", gemm, "--no-cache", "--top", "3"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("findings"))
    assert line.startswith("findings: none among the rules that could run; not evaluated: ")
    assert "(the steps are not one repeated step: the commonest op mix runs 3 time(s) per device" in out
    assert main(["analyze", gemm, "--no-cache", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["findings"] == [] and set(doc["findings_not_evaluated"]) == STEP_RULES
    assert main(["analyze", gemm, "--no-cache", "--format", "json", "--no-findings"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["findings"] is None and doc["findings_not_evaluated"] is None
    # findings and rules that could not run side by side: conv3d's two findings, then the straggler rule
    conv = str(shared_traces / "mi300x_jax_conv3d.xplane.pb")
    assert main(["analyze", conv, "--no-cache", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert ("  not evaluated: straggler-device (no collective execution matched across two or more devices)"
            in out.splitlines())


def test_an_empty_selection_is_the_not_evaluated_reason(shared_traces, capsys):
    """--device / --filter that keep no op: every rule that needs ops says so (the selection's
    reason, as the memory section gives the device filter's), not "no steps found" or "no op
    populations"; the memory rules keep their own reasons."""
    b4 = str(FIXTURES / "greedy_b4")
    op_rules = {"sampler-search-dominates", "state-copied-every-step", "logits-conversions",
                "one-name-several-regimes", "host-bound-steps", "far-below-roofline", "warmup-in-window",
                "costs-unknown"}
    for flag, rx, which in (("--device", "zzz", "device"), ("--filter", "zzzz", "op")):
        assert main(["analyze", b4, flag, rx, "--no-cache", "--format", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert f"no op left after {flag} '{rx}'" in doc["warnings"]
        assert doc["findings"] == [] and doc["findings_not_evaluated"] == {
            **dict.fromkeys(op_rules, f"no op left after the {which} filter '{rx}'"),
            "memory-near-capacity": "no allocator events in the trace",
            "memory-grows-per-step": "no allocator events in the trace"}
    assert main(["analyze", b4, "--device", "zzz", "--no-cache"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("findings"))
    assert "(no op left after the device filter 'zzz');" in line and "no steps found" not in line
    assert main(["analyze", b4, "--device", "zzz", "--brief", "--no-cache"]) == 0  # the brief's step line too
    step = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("step time"))
    assert step == "step time unknown: no op left after the device filter 'zzz'"
    # the library: Profile.filter says why its op table is empty; a selection that keeps ops says nothing
    v6e = traceview.load(shared_traces / "tpu_v6e_4chip_psum.xplane.pb", stale_after_s=None)
    assert v6e.ops_note is None and v6e.filter(device_regex="TPU:0$").ops_note is None
    none = v6e.filter(op_regex="zzz", device_regex="TPU:0$")
    assert none.table.height == 0 and none.ops_note == "no op left after the op filter 'zzz' and the device filter 'TPU:0$'"
    # v6e --filter: its allocators stay (the op filter keeps memory), so memory-near-capacity runs, while
    # memory-grows-per-step, which needs the steps, names the selection
    assert none.filter(op_regex="add").ops_note == none.ops_note  # a narrower selection keeps the reason
    assert main(["analyze", str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb"), "--filter", "zzz", "--no-cache",
                 "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)["findings_not_evaluated"]
    assert got == dict.fromkeys(op_rules | {"memory-grows-per-step"}, "no op left after the op filter 'zzz'")


def test_step_loop_words_and_distinct_steps():
    """step_loop's words are splitmix64 of 1..n (non-zero); step_info's distinct step count equals
    polars' n_unique, nulls and large or negative values included."""
    from traceview.analysis.findings._context import _n_distinct, _words

    def splitmix64(x):
        m = (1 << 64) - 1
        z = (x * 0x9E3779B97F4A7C15) & m
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        return z ^ (z >> 31)

    w = _words(1000)
    assert w.dtype.name == "uint64" and [int(x) for x in w[:50]] == [splitmix64(i) for i in range(1, 51)]
    assert (w != 0).all() and len(set(w.tolist())) == 1000
    for s in (pl.Series([0, 1, 1, 7]), pl.Series([3, None, 3]), pl.Series([-1, 2, 2]),
              pl.Series([10 ** 15, 1]), pl.Series([4, 4], dtype=pl.UInt64), pl.Series([], dtype=pl.Int64)):
        assert _n_distinct(s) == s.n_unique()


def test_user_family_rules_do_not_hide_the_sampler_finding(reps, capsys):
    """Family rules group ops for display: a rule that takes the sampler's search ops out of
    the built-in ``sampling`` family (``--family search=topp_binary_search``, or a catch-all
    ``mine=fusion``) leaves the finding as it is, so ``verify 'no finding ...'`` does not pass
    on a renamed family; the table shows the user's families."""
    base = one(reps["topp_b4"][1], "sampler-search-dominates")
    prof = reps["topp_b4"][0]
    for rules in (["search=topp_binary_search"], ["mine=fusion"]):
        rep = prof.analyze(rules=rules)
        f = one(rep, "sampler-search-dominates")
        assert f.statement == base.statement and f.evidence["per_step_ps"] == base.evidence["per_step_ps"]
        assert f.evidence["vocab"] == 512 and f.evidence["scopes"] == ["topp_binary_search"]
        assert rules[0].split("=")[0] in set(rep.steps.families["family"].to_list())
    topp = str(FIXTURES / "topp_b4")
    assert main(["verify", topp, "--family", "search=topp_binary_search", "--no-cache",
                 "-c", "no finding sampler-search-dominates", "-c", "family search share > 1%"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "FAIL  no finding sampler-search-dominates"
    assert "takes 160.62 µs of each 3.363 ms step (4.8%)" in out and "PASS  family search share > 1%" in out
