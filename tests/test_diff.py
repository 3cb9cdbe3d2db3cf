"""``traceview diff``: populations matched by (kind, shape, HLO fingerprint), not by name.

* Two engine profiles recorded here at KV block 2048 and 256 (the study's block-size
  treatment): the diff reports the kernel's block size change and the attention
  population's time change, and matches every other population.
* A vLLM TPU trace against a copy whose XLA names were consistently renumbered: every
  population is matched by shape and fingerprint although no op name is shared.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

import traceview
from traceview.cli import main
from traceview.analysis.compare.diff import THROUGHPUT_RULE
from traceview.analysis.compare.populations import populations
from traceview.api import diff
from traceview.model.fingerprint import population_fingerprint
from traceview.model.kernelname import find_kernel_name, kernel_config, kernel_id
from traceview.api import Profile
from traceview.render.diff_html import diff_section_html, render_diff_page
from traceview.render.diff_terminal import render_diff_text

PROMPTS = ["Hello, my name is", "The capital of France is"]
KV_BLOCKS = (2048, 256)  # base (the heuristic at a 2048-token context), treatment (the study's tuned block)


def _record(kv_block: int, log_dir: Path) -> Path:
    """Tiny engine, 2 requests x 6 tokens (5 decode steps: enough that the decode program
    dominates the profile's op time, as the step finder needs), buckets compiled and warmed
    before the traced ``generate``; returns the run folder."""
    from traceview.engine_shim.bench import sampling_params
    from traceview.engine_shim.engine import LLM

    llm = LLM("tiny", max_num_seqs=2, min_request_bucket=2, max_model_len=2048, kv_block_size=kv_block,
              precompile=False, seed=0)
    params = sampling_params("greedy", 6)
    llm.generate(PROMPTS, params)
    llm.start_profile(log_dir)
    llm.generate(PROMPTS, params)
    run = llm.stop_profile()
    assert run is not None, f"no profile written under {log_dir}"
    return run


@pytest.fixture(scope="session")
def kv_block_pair(tmp_path_factory) -> tuple[Path, Path]:
    """Run folders of two engine profiles differing only in the decode KV block (2048 -> 256).
    About 25 s on 2 CPU cores (two decode-kernel compilations in Pallas interpret mode)."""
    root = tmp_path_factory.mktemp("kv_block_pair")
    return tuple(_record(k, root / f"bkv{k}") for k in KV_BLOCKS)


@pytest.fixture(scope="module")
def kv_diff(kv_block_pair):
    return diff(*kv_block_pair)


def test_kv_block_diff_reports_block_change_and_attention_time(kv_diff):
    d = kv_diff
    # the kernel's configuration, read off its name, changed 2048 -> 256
    kc = d.kernel_changes()
    assert kc.height == 1
    k = kc.row(0, named=True)
    assert k["names_base"] == ["RPAd-p_16-bq_1_1-bkv_2048_2048"]
    assert k["names_treatment"] == ["RPAd-p_16-bq_1_1-bkv_256_256"]
    assert k["changes"] == "bkv 2048_2048 -> 256_256"
    # 2 layers x 5 decode steps, on both sides
    assert k["invocations_base"] == k["invocations_treatment"] == 10

    # the attention population: one kernel population, matched across the change, with its time delta
    att = d.populations.filter(pl.col("kind") == "kernel")
    assert att.height == 1
    a = att.row(0, named=True)
    assert a["status"] == "matched" and a["match"] == "kernel+module"
    assert a["kernel_changes"] == "bkv 2048_2048 -> 256_256"
    assert a["occurrences_base"] == a["occurrences_treatment"] == 10
    assert a["self_ps_base"] > 0 and a["self_ps_treatment"] > 0
    assert a["delta_self_ps"] == a["self_ps_treatment"] - a["self_ps_base"]
    assert a["family"] == "attention/custom kernels"
    fam = d.families.filter(pl.col("family") == "attention/custom kernels").row(0, named=True)
    assert fam["self_ps_base"] == a["self_ps_base"] and fam["self_ps_treatment"] == a["self_ps_treatment"]

    # everything else is matched: nothing appeared or vanished
    assert d.appeared().height == 0, d.appeared().select("kind", "stem", "shape").to_dicts()
    assert d.vanished().height == 0, d.vanished().select("kind", "stem", "shape").to_dicts()
    others = d.populations.filter(pl.col("kind") != "kernel")
    assert others.height > 30
    assert set(others["match"]) <= {"exact", "config-scaled"}
    # scratch buffers sized by the block (bkv/page pages x page x head_dim) pair up by the 8x scale
    scaled = others.filter(pl.col("match") == "config-scaled")
    assert scaled.height >= 1
    for r in scaled.iter_rows(named=True):
        assert "128,16,64" in r["shape"] and "16,16,64" in r["shape_treatment"]
    # the model's own ops ran the same number of times
    exact = others.filter(pl.col("match") == "exact")
    assert (exact["occurrences_base"] == exact["occurrences_treatment"]).all()
    assert d.source_changes().height == 0


def test_kv_block_diff_steps_modules_and_overhead_note(kv_diff):
    d = kv_diff
    s = d.steps
    # analyze's steps: the engine's step markers (5 decode steps a side), not a module's runs
    assert s.method_base == s.method_treatment == "markers"
    assert s.steps_base == s.steps_treatment == 5
    assert s.step_ps_base > 0 and s.step_ps_treatment > 0
    mods = {r["module"]: r for r in d.modules.iter_rows(named=True)}
    assert mods["jit_decode_b2_bkv2048"]["module_treatment"] == "jit_decode_b2_bkv256"
    assert mods["jit_decode_b2_bkv2048"]["executions_base"] == mods["jit_decode_b2_bkv2048"]["executions_treatment"] == 5
    # the 2048 block walks 128 pages per block, the 256 block 16: many more traced events in the base
    k = d.kernels.row(0, named=True)
    assert k["events_base"] >= 4 * k["events_treatment"]
    kernel_row = d.populations.filter(pl.col("kind") == "kernel").row(0, named=True)
    assert "fewer traced events in the treatment" in kernel_row["overhead_note"]
    assert any(THROUGHPUT_RULE in n for n in d.notes)


def test_kv_block_diff_outputs(kv_block_pair, kv_diff, tmp_path, capsys):
    text = render_diff_text(kv_diff, top=10)
    assert "bkv 2048_2048 -> 256_256" in text and "RPAd-p_16-bq_1_1-bkv_256_256" in text
    assert THROUGHPUT_RULE in text

    html = diff_section_html(kv_diff, top=10)
    assert html.startswith('<section class="tv-diff"') and "bkv 2048_2048 -&gt; 256_256" in html
    page = render_diff_page(kv_diff)
    assert "<script" not in page and "http" not in page.split("<body>")[1]

    out = tmp_path / "diff.json"
    base, treat = (str(p) for p in kv_block_pair)
    assert main(["diff", base, treat, "--format", "json", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["counts"] == {"matched": kv_diff.populations.height, "appeared": 0, "vanished": 0}
    assert doc["kernels"][0]["changes"] == "bkv 2048_2048 -> 256_256"
    assert doc["units"] == "ps"

    assert main(["diff", base, treat, "--top", "5"]) == 0
    printed = capsys.readouterr().out
    assert "kernels whose configuration changed" in printed and "matched by kernel+module" in printed

    # the verify command on the same pair: the treatment took effect
    assert main(["verify", base, treat, "-c", "kernel RPAd* changed bkv 2048 -> 256", "-c", "kernel RPAd* has bkv 256",
                 "-c", "base: kernel RPAd* has bkv 2048", "-c", "all matched"]) == 0
    assert "4 check(s): 4 passed, 0 failed" in capsys.readouterr().out


@pytest.fixture(scope="module")
def transplanted_256(kv_block_pair, tmp_path_factory) -> Path:
    """The same engine at KV block 256 with the kernel module transplanted: an unmodified
    copy at ``my_kernels/kernel.py`` injected before the engine is built (the study's
    Strategy 4). About 10 s."""
    import traceview.kernels.paged_attention as stock
    from traceview.engine_shim.transplant import copy_module_source, inject

    root = tmp_path_factory.mktemp("transplant")
    copy_path = copy_module_source(stock, root / "my_kernels", filename="kernel.py")
    with inject(stock, copy_path, rebind_prefixes=("traceview.engine_shim",)) as rep:
        run = _record(256, root / "bkv256_transplant")
        assert rep.fired("paged_decode")
    return run


def test_transplant_shows_as_a_source_change_only(kv_block_pair, transplanted_256, capsys):
    d = diff(kv_block_pair[1], transplanted_256)
    assert d.appeared().height == 0 and d.vanished().height == 0
    assert d.kernel_changes().height == 0  # same kernel, same configuration
    changed = d.source_changes()
    assert changed["kind"].to_list() == ["kernel"]  # the kernel's ops, and nothing else, moved
    k = changed.row(0, named=True)
    assert k["source_changed"] == "file"
    assert k["source_files_base"] and all(f.endswith("kernels/paged_attention.py") for f in k["source_files_base"])
    assert k["source_files_treatment"] and all(f.endswith("my_kernels/kernel.py") for f in k["source_files_treatment"])
    assert k["occurrences_base"] == k["occurrences_treatment"] == 10
    assert main(["verify", str(kv_block_pair[1]), str(transplanted_256), "-c", "source of kernel RPAd* changed",
                 "-c", "source of kernel RPAd* under my_kernels/", "-c", "base: source of kernel RPAd* under kernels/",
                 "-c", "kernel RPAd* has bkv 256", "-c", "all matched"]) == 0
    assert "5 check(s): 5 passed, 0 failed" in capsys.readouterr().out


# -- renumbered op names --------------------------------------------------------------------

_NAME_REF = re.compile(r"%([\w\-\.]+)")


def _renumbered(prof: Profile) -> tuple[Profile, dict]:
    """A copy of ``prof`` whose op names (and the names inside the HLO text) were renumbered
    consistently, as a recompilation does: ``fusion.12`` -> ``fusion.9012``, ``fusion`` ->
    ``fusion.9000`` ..."""
    names = sorted(set(prof.ops["op_name"].to_list()))
    new = {n: f"{re.sub(r'[.][0-9]+$', '', n)}.{9000 + i}" for i, n in enumerate(names)}

    def hlo(text: str) -> str:
        return _NAME_REF.sub(lambda m: "%" + new.get(m.group(1), m.group(1) + ".r"), text)

    ops = prof.ops.with_columns(pl.col("op_name").replace_strict(new, return_dtype=pl.Utf8),
                                pl.col("hlo_text").map_elements(hlo, return_dtype=pl.Utf8))
    return Profile(ops=ops, module_runs=prof.module_runs, devices=prof.devices, traces=prof.traces), new


@pytest.fixture(scope="module")
def vllm(shared_traces):
    return traceview.load(shared_traces / "vllm_tpu_qwen")


def test_renumbered_vllm_profile_matches_by_shape_and_fingerprint(vllm):
    renamed, mapping = _renumbered(vllm)
    assert not set(vllm.ops["op_name"].to_list()) & set(renamed.ops["op_name"].to_list())  # no name in common
    d = diff(vllm, renamed, labels=("vllm", "vllm renumbered"))
    assert d.appeared().height == 0 and d.vanished().height == 0
    assert set(d.populations["match"]) == {"exact"}
    assert (d.populations["occurrences_base"] == d.populations["occurrences_treatment"]).all()
    assert (d.populations["delta_self_ps"] == 0).all()
    # every population was matched to the renamed ops of the same computation
    for r in d.populations.head(40).iter_rows(named=True):
        assert [mapping[n] for n in r["op_names_base"]] == sorted(r["op_names_treatment"]) or r["kind"] == "kernel"
    # fusion.N names recur across programs with different shapes: they stay separate populations
    fusions = d.populations.filter(pl.col("stem") == "fusion")
    assert fusions.height > 10 and fusions["shape"].n_unique() > 10
    # the ragged paged attention custom call is one kernel population, read off its legacy name
    k = d.populations.filter(pl.col("kind") == "kernel").row(0, named=True)
    assert k["stem"] == "RPA-bq_*-bkvp_*-p_*-" and k["occurrences_base"] == k["occurrences_treatment"] > 0
    assert d.kernels.row(0, named=True)["changes"] == ""
    assert d.steps.step_ps_base == d.steps.step_ps_treatment


def test_renumbered_treatment_reports_removed_and_slower_populations(vllm):
    renamed, mapping = _renumbered(vllm)
    # the treatment: the sampler program's ops gone, the attention kernel 2x slower
    kernel_names = {mapping[n] for n in vllm.ops["op_name"].unique().to_list() if n.startswith("RPA-")}
    ops = renamed.ops.filter(pl.col("module") != "jit_sample").with_columns(
        pl.when(pl.col("op_name").is_in(list(kernel_names))).then(pl.col("duration_ps") * 2)
        .otherwise(pl.col("duration_ps")).alias("duration_ps"),
        pl.when(pl.col("op_name").is_in(list(kernel_names))).then(pl.col("self_ps") * 2)
        .otherwise(pl.col("self_ps")).alias("self_ps"))
    treat = Profile(ops=ops, module_runs=renamed.module_runs, devices=renamed.devices, traces=renamed.traces)
    d = diff(vllm, treat)
    sample_pops = populations(Profile(ops=vllm.ops.filter(pl.col("module") == "jit_sample"),
                                      module_runs=vllm.module_runs, devices=vllm.devices))
    gone = d.vanished()
    assert gone.height > 0 and d.appeared().height == 0
    assert {m for ms in gone["modules_base"].to_list() for m in ms} == {"jit_sample"}
    # populations that ran only in jit_sample vanished; those shared with other programs shrank
    assert gone.height <= sample_pops.height
    k = d.populations.filter(pl.col("kind") == "kernel").row(0, named=True)
    assert k["status"] == "matched" and k["self_ratio"] == pytest.approx(2.0)
    assert d.populations.row(0, named=True)["kind"] == "kernel"  # largest |delta| first


def test_gemm_sweep_custom_call_populations_are_separate(shared_traces):
    prof = traceview.load(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")
    renamed, _ = _renumbered(prof)
    d = diff(prof, renamed)
    cc = d.populations.filter(pl.col("stem") == "custom-call")
    assert cc.height == 5 and cc["shape"].n_unique() == 5  # custom-call.1 in five programs, five shapes
    assert set(d.populations["status"]) == {"matched"}


def test_name_stem_can_be_left_out(shared_traces):
    prof = traceview.load(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    with_stem = populations(prof)
    without = populations(prof, name_stem=False)
    assert set(without["stem"]) == {""} and without.height <= with_stem.height
    d = diff(prof, prof, name_stem=False)
    assert set(d.populations["status"]) == {"matched"}


# -- kernel names and fingerprints ----------------------------------------------------------

def test_kernel_names_and_configs():
    assert find_kernel_name("jit(decode_b8_bkv256)/RPAd-p_16-bq_1_1-bkv_256_256/while/body") == \
        "RPAd-p_16-bq_1_1-bkv_256_256"
    assert find_kernel_name("RPA-bq_32-bkvp_64-p_64-.40") == "RPA-bq_32-bkvp_64-p_64-"
    assert find_kernel_name("fusion.12") is None and find_kernel_name("jit(f)/dynamic-update-slice") is None
    cfg = kernel_config("RPAd-p_16-bq_1_1-bkv_256_256")
    assert cfg["bkv"] == (256, 256) and cfg["phase"] == "decode" and cfg["page"] == (16,) and cfg["p"] == (16,)
    legacy = kernel_config("RPA-bq_32-bkvp_64-p_64-")
    assert legacy["bkv"] == (4096, 4096) and legacy["bkvp"] == (64,)  # 64 pages of 64 tokens
    assert kernel_config("flash-bq_128-bk_512")["bk"] == (512,)
    assert kernel_id("RPAd-p_16-bq_1_1-bkv_256_256") == "RPAd-p_*-bq_*_*-bkv_*_*"


def test_population_fingerprint_drops_names_layouts_and_payloads():
    a = ('%fusion.12 = bf16[8,128]{1,0:T(8,128)(2,1)} fusion(bf16[8,256]{1,0} %param.3, f32[8]{0} %copy.7), '
         'kind=kLoop, calls=%fused_computation.12, metadata={op_name="jit(f)/add" source_file="a.py"}')
    b = ('%fusion.40 = bf16[8,128]{0,1} fusion(bf16[8,256]{1,0} %param.9, f32[8]{0} %copy.1), '
         'kind=kLoop, calls=%fused_computation.40, metadata={op_name="jit(g)/add" source_file="b.py"}')
    assert population_fingerprint(a) == population_fingerprint(b) == \
        "fusion bf16[8,128] <- bf16[8,256], f32[8] kind=kLoop, calls=%_"
    c = ('%custom-call.3 = f32[4,8]{1,0} custom-call(f32[4,8]{1,0} %x), custom_call_target="tpu_custom_call", '
         'backend_config={"custom_call_config": {"body": "TUxJUh..."}, "kernel_name": "RPAd-p_16-bq_1_1-bkv_256_256"}')
    fp = population_fingerprint(c)
    assert "backend_config" not in fp and 'custom_call_target="tpu_custom_call"' in fp
    assert population_fingerprint("") == ""


def test_diff_rejects_bad_arguments(shared_traces):
    from traceview.errors import NoTraceFound, UsageError

    prof = traceview.load(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    with pytest.raises(UsageError):
        diff(prof, prof, overhead_factor=1.0)
    with pytest.raises(UsageError):
        diff(prof, object())
    with pytest.raises(NoTraceFound):
        diff(prof, shared_traces / "no_such_folder_here")
    assert main(["diff", str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb"), str(shared_traces / "nope")]) == 3


def test_html_section_escapes_trace_strings(shared_traces):
    prof = traceview.load(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    evil = '<script>alert("x")</script>'
    ops = prof.ops.with_columns((pl.lit(evil) + pl.col("op_name")).alias("op_name"),
                                pl.lit("fusion").alias("op_kind"))
    treat = Profile(ops=ops, module_runs=prof.module_runs, devices=prof.devices, traces=prof.traces)
    d = diff(prof, treat, labels=("base <b>", evil))
    html = diff_section_html(d)
    assert "<script" not in html and "&lt;script&gt;" in html and "base &lt;b&gt;" in html
    assert "<script" not in render_diff_page(d)


def test_the_same_recording_twice_on_a_side_is_refused(tmp_path, capsys):
    """Listed twice (or copied), one recording passed for two: the noise measured between
    recordings was zero and 48 of 88 populations 'changed'. The same path or a copy is a usage
    error naming both; distinct recordings still diff."""
    import shutil

    from traceview.cli import main

    fx = Path(__file__).resolve().parents[1] / "fixtures"
    greedy, nodonate = str(fx / "greedy_b4"), str(fx / "nodonate_b4")
    copy = tmp_path / "greedy_copy"
    shutil.copytree(greedy, copy)
    for base, why in (([greedy, greedy], "is given twice to --base"), ([greedy, str(copy)], "are the same recording")):
        assert main(["diff", "--base", *base, "--treatment", nodonate, "--no-cache"]) == 2
        err = capsys.readouterr().err
        assert why in err and "greedy_b4" in err and "Traceback" not in err
    assert main(["diff", "--base", greedy, str(fx / "topp_b4"), "--treatment", nodonate, "--no-cache"]) == 0


def test_repeated_base_and_treatment_flags_pool(shared_traces, capsys):
    """--base A --base B --treatment C used B alone (argparse kept the last flag), A silently
    dropped; repeated flags add up and pool as --base A B does, a path given twice to one side
    is a usage error naming it, and the pooling refusal (other hardware) applies to repeats."""
    fx = Path(__file__).resolve().parents[1] / "fixtures"
    g4, g8, topp, nodonate = (str(fx / n) for n in ("greedy_b4", "greedy_b8", "topp_b4", "nodonate_b4"))
    outs = []
    for argv in (["--base", g4, "--base", g8, "--treatment", topp], ["--base", g4, g8, "--treatment", topp]):
        assert main(["diff", *argv, "--format", "json", "--all-rows", "--no-cache"]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0] == outs[1]
    d = outs[0]
    assert "greedy_b4" in d["base"] and "greedy_b8" in d["base"]
    assert d["noise"]["run_to_run"]["recordings"] == [2, 1]
    assert d["counts"] == {"matched": 99, "appeared": 61, "vanished": 30}
    # pooled, a vanished population's samples are one array per recording: each counted
    assert sum(p["noise"] == "significant (vanished)" for p in d["populations"]) == 30
    assert main(["diff", "--base", g4, "--treatment", topp, "--treatment", nodonate, "--format", "json",
                 "--no-cache"]) == 0
    assert json.loads(capsys.readouterr().out)["noise"]["run_to_run"]["recordings"] == [1, 2]
    for argv in (["--base", g4, "--base", g4 + "/", "--treatment", topp],
                 ["--base", g4, "--treatment", topp, "--treatment", topp]):
        assert main(["diff", *argv, "--no-cache"]) == 2
        err = capsys.readouterr().err
        flag = "--base" if argv.count("--base") == 2 else "--treatment"
        assert f"is given twice to {flag}" in err and ("greedy_b4" in err or "topp_b4" in err), err
    tpu, gemm = (str(shared_traces / f) for f in ("tpu_v6e_4chip_psum.xplane.pb", "mi300x_jax_gemm_sweep.xplane.pb"))
    assert main(["diff", "--base", tpu, "--base", gemm, "--treatment", topp, "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "cannot pool" in err and "tpu_v6e_4chip_psum" in err and "mi300x_jax_gemm_sweep" in err
    # greedy (KV block 128) pooled with hostmask (64) is not one configuration: pooled, but said; and
    # greedy_b4 on both sides is said too (an A/A diff of the same paths is not)
    hostmask = str(fx / "hostmask_b4")
    assert main(["diff", "--base", g4, hostmask, "--treatment", g4, nodonate, "--format", "json", "--no-cache"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    mixed = [n for n in notes if n.startswith("base: the pooled recordings are not one configuration: ")]
    assert len(mixed) == 1 and "(RPAd-p_16-bq_1_1-bkv_128_128) vs " in mixed[0] and "(RPAd-p_16-bq_1_1-bkv_64_64)" in mixed[0]
    assert not [n for n in notes if n.startswith("treatment: the pooled")]  # greedy and nodonate: both bkv 128
    both = [n for n in notes if " is on both sides: " in n]
    assert len(both) == 1 and both[0].startswith(f"{g4}/plugins/profile/") and "engine-cpu.xplane.pb" in both[0]
    assert main(["diff", g4, g4, "--format", "json", "--no-cache"]) == 0
    assert not [n for n in json.loads(capsys.readouterr().out)["notes"] if "both sides" in n or "pooled" in n]


def test_a_device_filter_that_matches_nothing_is_refused(capsys):
    """diff --device zzz compared 0 ps with 0 ps and said nothing; it is a usage error naming
    the file (as verify's), and report warns as analyze does."""
    from traceview.cli import main

    fx = Path(__file__).resolve().parents[1] / "fixtures"
    assert main(["diff", str(fx / "greedy_b4"), str(fx / "topp_b4"), "--device", "zzz", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "--device 'zzz' leaves no op of" in err and "greedy_b4" in err


def test_a_runs_xplane_and_trace_json_are_one_recording(capsys):
    """A run folder's .xplane.pb and .trace.json.gz of one host are one recording in two
    formats: pooled as two, they made a noise band out of a format difference."""
    from traceview.cli import main

    fx = Path(__file__).resolve().parents[1] / "fixtures"
    run = next((fx / "greedy_b4" / "plugins" / "profile").iterdir())
    assert main(["diff", "--base", str(run / "engine-cpu.xplane.pb"), str(run / "engine-cpu.trace.json.gz"),
                 "--treatment", str(fx / "topp_b4"), "--no-cache"]) == 2
    assert "are the same recording (the same hosts of one run folder)" in capsys.readouterr().err


def test_a_kernels_traced_events_are_those_folded_into_it_and_its_unfolded_ops(kv_block_pair):
    """diff's traced events of an interpreted kernel: the events folded into its invocations
    plus its ops left unfolded. With one kernel a profile, that is the events the folding
    removed (traced op events less the folded table's) plus the kernel's rows in the folded
    table, on one device and on the four-device tensor-parallel fixture (where a name-stack
    rule alone missed 248 of the 3,024 folded events)."""
    from traceview.analysis.compare.diff import side
    from traceview.analysis.compare.populations import kernel_table

    fx = Path(__file__).resolve().parents[1] / "fixtures"
    paths = list(kv_block_pair) + [fx / n for n in ("tp_decode", "greedy_b4", "topp_b4", "hostmask_b4")]
    for p in paths:
        prof = traceview.load(p, cache=False)
        raw = sum(tr.table.height for tr in prof.traces)
        rows = kernel_table(prof)
        assert rows.height == 1, p
        got = side(prof).kernels
        assert got["events"].to_list() == [raw - prof.table.height + rows["events"][0]], p
    tp = side(traceview.load(fx / "tp_decode", cache=False)).kernels
    assert tp["events"].to_list() == [3032]


def test_traced_op_events_count_the_events_before_folding():
    """The summary's traced op events are the events the profiler recorded (an interpreted
    kernel's events before they are folded into its invocations), as analyze counts them:
    topp vs greedy is 5,016 -> 2,454 (2.0x), under the 4x of the tracing-overhead note."""
    fx = Path(__file__).resolve().parents[1] / "fixtures"
    base, treat = fx / "topp_b4", fx / "greedy_b4"
    d = diff(traceview.load(base, cache=False), traceview.load(treat, cache=False))
    for p, got in ((base, d.events_base), (treat, d.events_treatment)):
        assert got == int(traceview.load(p, expand_kernels=True, cache=False).table.events["count"].sum())
    assert (d.events_base, d.events_treatment) == (5016, 2454)
    assert not any(n.startswith("traced op events") for n in d.notes)


def test_a_step_window_without_steps_is_refused_by_analyze_diff_and_verify(capsys):
    fx = Path(__file__).resolve().parents[1] / "fixtures"
    g = str(fx / "greedy_b4")
    for argv in (["diff", g, g, "--step-window", "100:200"], ["analyze", g, "--step-window", "100:200"],
                 ["verify", g, g, "--step-window", "100:200", "-c", "family sampling share < 1%"],
                 ["verify", g, "--step-window", "100:200", "-c", "family sampling share < 1%"]):
        assert main(argv) == 2
        assert "--step-window 100:200 holds none of the trace's 3 steps" in capsys.readouterr().err
    with pytest.raises(traceview.UsageError):
        diff(traceview.load(g, cache=False), traceview.load(g, cache=False), step_window="100:200")


def test_traced_op_events_under_a_phase_are_the_phases(capsys):
    """With --phase, the traced op events are those inside the phase's executions, as
    analyze --phase --expand-kernels counts them (decode 2,163, prefill 284 of topp's 5,016)."""
    fx = Path(__file__).resolve().parents[1] / "fixtures"
    t, g = str(fx / "topp_b4"), str(fx / "greedy_b4")
    for phase in ("decode", "prefill"):
        assert main(["diff", t, g, "--phase", phase, "--format", "json"]) == 0
        ev = json.loads(capsys.readouterr().out)["events"]
        for path, got in ((t, ev["base"]), (g, ev["treatment"])):
            assert main(["analyze", path, "--phase", phase, "--expand-kernels", "--format", "json"]) == 0
            assert got == sum(d["ops"] for d in json.loads(capsys.readouterr().out)["devices"]), (phase, path)


def test_expand_kernels_makes_each_op_of_a_kernel_its_own_population(capsys):
    """diff --expand-kernels (a user saw no effect): topp vs greedy has 162 populations, the
    decode kernel one row; expanded, its 1,950 traced events are 36 op populations under the
    kernel's identity (197 in all), every one matched, with the kernel's self time between
    them. The kernels table is the same either way."""
    fx = Path(__file__).resolve().parents[1] / "fixtures"
    t, g = str(fx / "topp_b4"), str(fx / "greedy_b4")
    got = {}
    for flag in ([], ["--expand-kernels"]):
        assert main(["diff", t, g, "--all-rows", "--format", "json", "--no-cache"] + flag) == 0
        got[bool(flag)] = json.loads(capsys.readouterr().out)
    folded, expanded = got[False], got[True]
    assert len(folded["populations"]) == 162 and len(expanded["populations"]) == 197
    k = [p for p in folded["populations"] if p["stem"].startswith("RPAd-")]
    assert [(p["kind"], p["stem"], p["occurrences_base"], p["events_base"]) for p in k] == [
        ("kernel", "RPAd-p_*-bq_*_*-bkv_*_*", 6, 1950)]
    ops = [p for p in expanded["populations"] if p["stem"].startswith("RPAd-p_*-bq_*_*-bkv_*_*/")]
    assert len(ops) == 36 and {p["status"] for p in ops} == {"matched"} and "kernel" not in {p["kind"] for p in ops}
    assert sum(p["events_base"] for p in ops) == 1950
    assert sum(p["self_ps_base"] for p in ops) == k[0]["self_ps_base"]
    assert {p["stem"] for p in ops} >= {"RPAd-p_*-bq_*_*-bkv_*_*/while", "RPAd-p_*-bq_*_*-bkv_*_*/copy"}
    assert expanded["kernels"] == folded["kernels"]
    assert expanded["counts"] == {"matched": 134, "appeared": 2, "vanished": 61}


def test_pooling_recordings_of_other_hardware_or_steps_is_refused(shared_traces, capsys):
    """--base TPU MI300X pooled a 4-chip TPU v6e recording with a one-GPU MI300X one and said
    nothing; recordings whose hardware (device kind, type, count) or steps (markers, the step
    program) differ are refused in one line naming both files and what differs (exit 2)."""
    from traceview.analysis.compare.diff import side
    from traceview.analysis.compare.pooled import pool

    fx = Path(__file__).resolve().parents[1] / "fixtures"
    tpu, gemm, att = (str(shared_traces / f) for f in ("tpu_v6e_4chip_psum.xplane.pb", "mi300x_jax_gemm_sweep.xplane.pb",
                                                        "mi300x_jax_attention.xplane.pb"))
    cases = [([tpu, gemm], "they differ in hardware (4 x TPU v6 Lite vs 1 x AMD GPU) and steps (executions of jit_f "
                           "vs executions of jit_dot)"),
             ([gemm, att], "they differ in steps (executions of jit_dot vs executions of jit_matmul);"),
             ([str(fx / "greedy_b4"), str(fx / "tp_decode")], "they differ in hardware (1 x CPU vs 4 x CPU);")]
    for base, why in cases:
        assert main(["diff", "--base", *base, "--treatment", att, "--no-cache"]) == 2
        err = capsys.readouterr().err
        lines = [ln for ln in err.splitlines() if ln.startswith("traceview: error:")]
        assert len(lines) == 1 and "Traceback" not in err, err
        assert lines[0].startswith("traceview: error: cannot pool ") and why in lines[0], lines[0]
        assert all(Path(b).name in lines[0] for b in base)  # the files (a folder's under its name)
    with pytest.raises(traceview.UsageError, match=r"hardware \(1 x AMD GPU vs 4 x TPU v6 Lite\)"):
        pool([side(traceview.load(gemm)), side(traceview.load(tpu))])
    # recordings of one hardware and one step definition still pool (two engine configurations)
    assert main(["diff", "--base", str(fx / "greedy_b4"), str(fx / "topp_b4"), "--treatment", str(fx / "nodonate_b4"),
                 "--format", "json", "--no-cache"]) == 0
    assert json.loads(capsys.readouterr().out)["noise"]["run_to_run"]["recordings"] == [2, 1]


def test_a_diff_across_hardware_or_step_definitions_says_so(shared_traces, capsys, tmp_path):
    """TPU v6e against MI300X, or an engine trace stepped by markers against one stepped by a
    program, diffed without a word on it: a note (terminal, JSON, HTML) names each side's
    devices or steps; JSON gives each side's hardware. Alike sides get neither note."""
    fx = Path(__file__).resolve().parents[1] / "fixtures"
    tpu, gemm, att = (str(shared_traces / f) for f in ("tpu_v6e_4chip_psum.xplane.pb", "mi300x_jax_gemm_sweep.xplane.pb",
                                                        "mi300x_jax_attention.xplane.pb"))
    greedy = str(fx / "greedy_b4")

    def notes(a, b):
        assert main(["diff", a, b, "--format", "json", "--top", "1", "--no-cache"]) == 0
        d = json.loads(capsys.readouterr().out)
        return d["hardware"], d["notes"]

    hw, ns = notes(tpu, gemm)
    assert hw == {"base": "4 x TPU v6 Lite", "treatment": "1 x AMD GPU"}
    assert ns[0].startswith("the sides ran on different hardware: 4 x TPU v6 Lite (base) vs 1 x AMD GPU (treatment): "
                            "the comparison crosses hardware")
    assert "steps are executions of jit_f (base) and jit_dot (treatment): different step programs" in "\n".join(ns)
    hw, ns = notes(greedy, att)
    assert hw == {"base": "1 x CPU", "treatment": "1 x AMD GPU"}
    assert ns[1].startswith("the sides' steps were found differently: step markers (base) vs executions of "
                            "jit_matmul (treatment)")
    hw, ns = notes(greedy, str(fx / "tp_decode"))  # one CPU device against four
    assert hw == {"base": "1 x CPU", "treatment": "4 x CPU"}
    assert ns[0].startswith("the sides ran on different hardware: 1 x CPU (base) vs 4 x CPU (treatment)")
    assert not any("steps were found differently" in n for n in ns)
    hw, ns = notes(greedy, str(fx / "topp_b4"))
    assert hw == {"base": "1 x CPU", "treatment": "1 x CPU"} and not any("different hardware" in n for n in ns)
    assert main(["diff", tpu, gemm, "--top", "1", "--width", "400", "--no-cache"]) == 0
    assert "note: the sides ran on different hardware: 4 x TPU v6 Lite (base) vs 1 x AMD GPU" in capsys.readouterr().out
    page = tmp_path / "d.html"
    assert main(["diff", greedy, att, "-o", str(page), "--no-cache"]) == 0
    html = page.read_text()
    assert "the sides ran on different hardware: 1 x CPU (base) vs 1 x AMD GPU (treatment)" in html
    assert "step markers (base) vs executions of jit_matmul (treatment)" in html


def test_a_treatment_takes_its_own_steps_when_the_bases_program_is_not_in_it(shared_traces, capsys):
    """diff TPU-psum greedy_b4 stepped the treatment by jit_prefill_t32 (8.129 ms x3, the base's
    jit_f not running in it) where analyze, and greedy_b4 as the base, find its step markers
    (2.893 ms x3): a treatment whose steps are of another kind than the base's, or that does not
    run the base's step program, takes the steps analyze finds in it, and the note says so."""
    fx = Path(__file__).resolve().parents[1] / "fixtures"
    greedy = str(fx / "greedy_b4")
    tpu, att, gemm = (str(shared_traces / f) for f in ("tpu_v6e_4chip_psum.xplane.pb", "mi300x_jax_attention.xplane.pb",
                                                        "mi300x_jax_gemm_sweep.xplane.pb"))

    def steps(a, b):
        assert main(["diff", a, b, "--format", "json", "--top", "1", "--no-cache"]) == 0
        d = json.loads(capsys.readouterr().out)
        return d["steps"], d["notes"]

    as_base, _ = steps(greedy, att)
    assert (as_base["method_base"], as_base["steps_base"], as_base["module_base"]) == ("markers", 3, None)
    assert as_base["step_ps_base"] == pytest.approx(2.893185e9)
    for base, mod in ((tpu, "jit_f"), (att, "jit_matmul")):
        st, ns = steps(base, greedy)
        assert (st["method_base"], st["module_base"]) == ("module", mod)
        assert (st["method_treatment"], st["steps_treatment"], st["module_treatment"]) == ("markers", 3, None)
        assert st["step_ps_treatment"] == as_base["step_ps_base"]
        assert f"the sides' steps were found differently: executions of {mod} (base) vs step markers (treatment): " \
               "each side's steps are those analyze finds in it" in "\n".join(ns)
    st, ns = steps(tpu, gemm)  # both stepped by a module, the base's not in the treatment: its own dominant one
    assert (st["module_treatment"], st["steps_treatment"]) == ("jit_dot", 18)
    assert "different step programs (jit_f does not run in the treatment, whose steps are those analyze finds " \
           "in it)" in "\n".join(ns)


def test_the_step_time_is_the_slowest_devices_per_step(shared_traces, capsys):
    """diff v6e v6e gave a step time of 784.133 ms, the mean over the 400 device-steps of the 4
    chips, while its noise samples (median 784.338 ms) and history take per step index the
    slowest chip's: the headline is the mean of those per-step walls too (as history's window).
    The self-diff of each shared trace still reads no change."""
    from traceview.analysis import derived
    from traceview.analysis.steps.stepstats import step_walls

    path = shared_traces / "tpu_v6e_4chip_psum.xplane.pb"
    assert main(["diff", str(path), str(path), "--format", "json", "--no-cache"]) == 0
    st = json.loads(capsys.readouterr().out)["steps"]
    a = derived.step_anatomy(traceview.load(str(path)), None)
    win = a.steps.filter(pl.col("in_window"))
    walls = step_walls(win)
    assert (win.height, walls.size, st["window_steps_base"]) == (400, 100, 100)
    assert round(st["step_ps_base"] / 1e9, 3) == round(float(walls.mean()) / 1e9, 3) == 784.266
    assert round(a.coverage.step_ps / 1e9, 3) == 784.133  # the mean over every chip's copy: not a step time
    assert st["step_ps_treatment"] == st["step_ps_base"] and st["delta_ps"] == 0
    assert round(st["noise"]["median_base"] / 1e9, 3) == 784.338 and st["noise"]["verdict"] == "no change"
    for name in ("mi300x_jax_attention.xplane.pb", "mi300x_jax_conv3d.xplane.pb", "mi300x_jax_gemm_sweep.xplane.pb",
                 "tpu_v6e_pallas_matmul_llo.xplane.pb", "vllm_tpu_qwen"):
        f = str(shared_traces / name)
        assert main(["diff", f, f, "--format", "json", "--all-rows", "--no-cache"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["steps"]["delta_ps"] == 0 and d["noise"]["significant"] == 0, name
        assert d["steps"]["noise"]["verdict"] in ("no change", "within noise", "no interval"), name
        assert {p["noise"] for p in d["populations"]} <= {"no change", "within noise", "no interval"}, name


def test_the_noise_summary_counts_the_populations_of_one_side_only(tmp_path, capsys):
    """diff topp_b4 greedy_b4: top-level noise.significant was 0 and the headline "0 of 31
    matched ... changed beyond the noise" while 63 populations were significant: 61 vanished and
    2 appeared. The JSON, text and HTML summaries count them; significant counts every
    significant population, as DiffReport.significant() lists them."""
    fx = Path(__file__).resolve().parents[1] / "fixtures"
    topp, greedy = str(fx / "topp_b4"), str(fx / "greedy_b4")
    assert main(["diff", topp, greedy, "--format", "json", "--all-rows", "--no-cache"]) == 0
    d = json.loads(capsys.readouterr().out)
    n = d["noise"]
    assert {k: n[k] for k in ("compared", "significant_matched", "unknown", "vanished", "appeared", "significant")} \
        == {"compared": 31, "significant_matched": 0, "unknown": 0, "vanished": 61, "appeared": 2, "significant": 63}
    assert n["one_side_too_few"] == 0  # every vanished and appeared population of topp vs greedy is significant
    assert sum(p["significant"] is True for p in d["populations"]) == 63
    assert d["counts"] == {"matched": 99, "appeared": 2, "vanished": 61}
    line = next(x for x in d["summary"] if x.startswith("noise: 0 of 31"))
    assert line.endswith("; 61 vanished and 2 appeared are significant: each ran in 2 or more samples of one side only")
    rep = traceview.diff(traceview.load(topp), traceview.load(greedy))
    assert rep.significant().height == 63 and rep.noise_counts()["significant"] == 63
    assert main(["diff", topp, greedy, "--width", "400", "--no-cache"]) == 0
    assert "changed beyond the noise" in (out := capsys.readouterr().out) and "; 61 vanished and 2 appeared" in out
    page = tmp_path / "d.html"
    assert main(["diff", topp, greedy, "-o", str(page), "--no-cache"]) == 0
    assert "; 61 vanished and 2 appeared are significant" in page.read_text()
    # nothing on one side only: no clause
    assert main(["diff", greedy, greedy, "--format", "json", "--no-cache"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["noise"]["vanished"], d["noise"]["appeared"], d["noise"]["significant"]) == (0, 0, 0)
    line = next(x for x in d["summary"] if x.startswith("noise: "))
    assert "vanished" not in line and "appeared" not in line and line.endswith("~ marks a change within noise)")


def test_an_op_inside_a_kernel_is_labelled_under_the_kernel(tmp_path, capsys):
    """diff --expand-kernels labelled an op inside a kernel by its name alone: the RPAd
    kernel's subtract_exponential_fusion row read as the sampler's. The text and HTML label
    carry the kernel's identity, as JSON's stem does; an op outside a kernel keeps its name."""
    from traceview.render.diff_terminal import population_label

    fx = Path(__file__).resolve().parents[1] / "fixtures"
    argv = ["diff", str(fx / "topp_b4"), str(fx / "greedy_b4"), "--expand-kernels", "--all-rows", "--no-cache"]
    assert main(argv + ["--format", "json"]) == 0
    pops = json.loads(capsys.readouterr().out)["populations"]
    sub = {p["stem"]: p for p in pops if "subtract_exponential_fusion" in (p["op_names_base"] or [])}
    inside, outside = sub["RPAd-p_*-bq_*_*-bkv_*_*/subtract_exponential_fusion"], sub["subtract_exponential_fusion"]
    assert population_label(inside) == "RPAd-p_*-bq_*_*-bkv_*_*/subtract_exponential_fusion, subtract_exponential_fusion.2"
    assert population_label(outside) == "subtract_exponential_fusion" and outside["program"] == "jit_sample"
    assert sum(population_label(p).startswith("RPAd-p_*-bq_*_*-bkv_*_*/") for p in pops) == 36
    assert main(argv + ["--width", "400"]) == 0
    text = capsys.readouterr().out
    assert "│ RPAd-p_*-bq_*_*-bkv_*_*/subtract_exponential_fusion, subtract_exponential_fusion.2 " in text
    page = tmp_path / "d.html"
    assert main(argv + ["-o", str(page)]) == 0
    assert "RPAd-p_*-bq_*_*-bkv_*_*/subtract_exponential_fusion, subtract_exponential_fusion.2" in page.read_text()
    # folded (the default), the kernel is one row labelled by its name
    assert main(argv[:3] + ["--all-rows", "--no-cache", "--format", "json"]) == 0
    k = [p for p in json.loads(capsys.readouterr().out)["populations"] if p["kind"] == "kernel"]
    assert [population_label(p) for p in k] == ["RPAd-p_16-bq_1_1-bkv_128_128"]


def test_a_side_warning_names_its_file_once(tmp_path, shared_traces, capsys):
    """diff prefixed every side warning with the side's path, and a warning that names it
    already (a trace.json's 'no shapes' note, loose files in a folder) showed it twice."""
    import shutil

    fx = Path(__file__).resolve().parents[1] / "fixtures"
    run = next((fx / "greedy_b4" / "plugins" / "profile").iterdir())
    tj = str(run / "engine-cpu.trace.json.gz")
    loose = tmp_path / "loose"
    loose.mkdir()
    shutil.copy(run / "engine-cpu.xplane.pb", loose)
    shutil.copy(shared_traces / "mi300x_jax_attention.xplane.pb", loose)
    two = tmp_path / "two" / "plugins" / "profile"
    for name in ("greedy_b4", "topp_b4"):
        src = next((fx / name / "plugins" / "profile").iterdir())
        shutil.copytree(src, two / src.name)
    cases = [(tj, tj, "trace.json carries no shapes or program ids for CPU ops"),
             (str(loose), str(fx / "topp_b4"), "trace files lie loose in"),
             (str(tmp_path / "two"), str(fx / "topp_b4"), "2 runs found; reading the newest")]
    for base, treat, what in cases:
        assert main(["diff", base, treat, "-o", str(tmp_path / "d.json"), "--no-cache"]) == 0
        warns = [ln for ln in capsys.readouterr().err.splitlines() if what in ln]
        assert warns and all(ln.startswith("traceview: warning: ") and ln.count(base) == 1 for ln in warns), warns
    assert warns == [f"traceview: warning: {tmp_path / 'two'}: 2 runs found; reading the newest "
                     f"{max(p.name for p in two.iterdir())}; pass --run-base / --run-treatment to choose (the newest "
                     "run may not be the session you just profiled if clocks or copies differ)"]


def test_a_fault_of_one_side_names_its_file(shared_traces, capsys):
    """TPU v6e (100 steps) against MI300X GEMM (18 steps) with --step-window 20:40 said
    'holds none of the trace's 18 steps' without saying which trace; a --phase that finds
    nothing on one side neither. The error names the side's file, either way round, exit 2;
    a malformed window is no side's fault and names none."""
    fx = Path(__file__).resolve().parents[1] / "fixtures"
    tpu, gemm = str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb"), str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")
    for a, b in ((tpu, gemm), (gemm, tpu)):
        assert main(["diff", a, b, "--step-window", "20:40", "--no-cache"]) == 2
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("traceview: error:")]
        assert err == [f"traceview: error: {gemm}: --step-window 20:40 holds none of the trace's 18 steps (0..17; A:B "
                       "counts from 0, B excluded, negatives from the end)"]
    greedy, topp = str(fx / "greedy_b4"), str(fx / "topp_b4")
    for argv in (["diff", greedy, gemm], ["diff", "--base", greedy, topp, "--treatment", gemm]):
        assert main(argv + ["--phase", "decode", "--no-cache"]) == 2
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("traceview: error:")]
        assert err == [f"traceview: error: {gemm}: --phase decode: no program execution of that phase in this profile "
                       "(phases found: none)"]
    assert main(["diff", greedy, topp, "--step-window", "x:y"]) == 2
    err = capsys.readouterr().err
    assert "traceview: error: unknown step window 'x:y'" in err and greedy not in err


def test_the_librarys_diff_names_the_side_a_step_window_misses(shared_traces):
    """traceview.diff with a step_window past one side's steps names that side's file, as the
    CLI does (the analysis layer names it, the CLI passes it on): from paths and from loaded
    profiles, either way round."""
    tpu, gemm = str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb"), str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")
    want = (f"{gemm}: step_window 20:40 holds none of the trace's 18 steps (0..17; A:B counts from 0, B excluded, "
            "negatives from the end)")
    loaded = (traceview.load(tpu, cache=False), traceview.load(gemm, cache=False))
    for a, b in ((tpu, gemm), (gemm, tpu), loaded, loaded[::-1]):
        with pytest.raises(traceview.UsageError) as ei:
            traceview.diff(a, b, step_window="20:40")
        assert str(ei.value) == want and ei.value.path == gemm


def test_json_top_is_the_row_limit_applied(capsys):
    """diff --format json said "top": null without --top although every table was cut to 25
    rows; it gives the limit applied: 25 by default, --top's value, null under --all-rows."""
    fx = Path(__file__).resolve().parents[1] / "fixtures"
    base = ["diff", str(fx / "topp_b4"), str(fx / "greedy_b4"), "--format", "json", "--no-cache"]
    for flag, top in (([], 25), (["--top", "3"], 3), (["--all-rows"], None)):
        assert main(base + flag) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["top"] == top and d["rows"]["populations"]["total"] == 162
        assert d["rows"]["populations"]["shown"] == len(d["populations"]) == (top or 162)
        assert all(r["shown"] == min(r["total"], top or r["total"]) for r in d["rows"].values())


def test_a_folder_and_its_file_on_one_side_say_given_twice(capsys):
    """A run folder and the file inside it are one recording: the refusal says it is given
    twice, not 'X and X are the same recording'."""
    from traceview.cli import main

    fx = Path(__file__).resolve().parents[1] / "fixtures"
    run = next((fx / "greedy_b4" / "plugins" / "profile").iterdir())
    assert main(["diff", "--base", str(fx / "greedy_b4"), str(run / "engine-cpu.xplane.pb"),
                 "--treatment", str(fx / "topp_b4"), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"traceview: error: {run / 'engine-cpu.xplane.pb'} is given twice (a run folder and a path "
                          "inside it name one recording): give each recording once")


def test_tiny_ratios_keep_their_digits(shared_traces, capsys):
    """A 784 ms step against a 2.9 ms one read '(0.00x)': under 0.1 a ratio keeps two
    significant digits."""
    from traceview.cli import main
    from traceview.model.units import fmt_ratio

    assert [fmt_ratio(x) for x in (None, 0.0, 0.0036889, 0.099, 0.1, 1.0, 12.345)] == [
        "-", "0.00", "0.0037", "0.099", "0.10", "1.00", "12.35"]
    fx = Path(__file__).resolve().parents[1] / "fixtures"
    assert main(["diff", str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb"), str(fx / "greedy_b4"), "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "step time 784.266 ms -> 2.893 ms (0.0037x)" in out
    # the one-side-only populations: how many of each are significant, and how many ran in too few samples
    assert ("; 4 of 5 vanished and 88 of 101 appeared are significant: each ran in 2 or more samples of one side "
            "only (14 more on one side only ran in fewer)") in out


def test_cli_diff_releases_each_side_before_the_next_is_read(shared_traces, monkeypatch, capsys):
    """diff reads one profile at a time: the base's profile is gone (only its summary kept)
    when the treatment's is read, so the peak is one profile's, not two."""
    import gc
    import weakref

    import traceview.analysis.compare.diff as diff_mod
    import traceview.model.load as load_mod

    made, alive_at_load = [], []
    real_load, real_side = load_mod.load, diff_mod.side

    def load(*a, **k):
        gc.collect()
        alive_at_load.append(sum(r() is not None for r in made))
        return real_load(*a, **k)

    def side(prof, **k):
        made.append(weakref.ref(prof))
        return real_side(prof, **k)

    monkeypatch.setattr(load_mod, "load", load)
    monkeypatch.setattr(diff_mod, "side", side)
    base = shared_traces / "mi300x_jax_gemm_sweep.xplane.pb"
    treatment = shared_traces / "mi300x_jax_attention.xplane.pb"
    assert main(["diff", str(base), str(treatment), "--format", "json", "--no-cache"]) == 0
    capsys.readouterr()
    assert len(made) == 2 and len(alive_at_load) == 2
    # when the treatment is read the base's profile is gone (the first read has nothing before it)
    assert alive_at_load[1] == 0


def test_the_same_source_from_another_checkout_is_no_file_change():
    """greedy_b4 was recorded from /work/main, nodonate_b4 from /work/wt-finds: the engine's
    ops come from engine_shim/model.py in both. Only line changes are reported (the file
    moved code between the recordings: 31 populations), no 'file' change for the checkout's
    root (84 were before); a kernel moved to another file still is one (the transplant test)."""
    fx = Path(__file__).resolve().parents[1] / "fixtures"
    d = diff(traceview.load(fx / "greedy_b4"), traceview.load(fx / "nodonate_b4"))
    changed = d.source_changes()
    assert changed["source_changed"].unique().to_list() == ["line"] and changed.height == 31
    r = changed.row(0, named=True)
    assert r["source_base"].startswith("/work/main/") and r["source_treatment"].startswith("/work/wt-finds/")


def test_a_pooled_diffs_modules_are_deterministic_and_met_by_name_first(capsys):
    """The modules table took each treatment module's name from an unordered unique(), so two
    treatment modules renamed to one base module (bkv64 and bkv128 of a pooled side) named
    either from run to run; and a treatment module renamed by the kernel's config change
    (jit_prefill_t64 -> a jit_prefill_t128 neither side ran) missed its own base module. A
    treatment module meets the base module of its name, else the one its renamed name is;
    module_treatment is the met module of most time, ties by name."""
    import os
    import subprocess
    import sys

    from traceview.analysis.compare.diff import module_sums

    fx = Path(__file__).resolve().parents[1] / "fixtures"
    base, treat = [str(fx / n) for n in ("topp_b4", "nodonate_b4")], [str(fx / n) for n in ("greedy_b4", "hostmask_b4")]
    argv = ["diff", "--base", *base, "--treatment", *treat, "--format", "json", "--all-rows", "--no-cache"]
    outs = []
    for _ in range(3):
        assert main(argv) == 0
        outs.append(capsys.readouterr().out)
    root = str(Path(__file__).resolve().parents[1])
    for threads in ("1", "3"):
        env = dict(os.environ, POLARS_MAX_THREADS=threads, PYTHONPATH=root)
        outs.append(subprocess.run([sys.executable, "-m", "traceview.cli", *argv], env=env, cwd=root, check=True,
                                   capture_output=True, text=True).stdout)
    assert len(set(outs)) == 1
    d = json.loads(outs[0])

    def sums(paths):
        out: dict[str, list[int]] = {}
        for p in paths:
            for r in module_sums(traceview.load(p).runs).iter_rows(named=True):
                e = out.setdefault(r["module"], [0, 0])
                e[0] += r["executions"]
                e[1] += r["total_ps"]
        return out

    sb, st = sums(base), sums(treat)
    (change,) = [k["changes"] for k in d["kernels"] if k["changes"]]  # bkv 128_128 -> 64_64
    was, now = change.split(" ", 1)[1].split(" -> ")
    vmap = {t: b for b, t in zip(re.findall(r"\d+", was), re.findall(r"\d+", now)) if t != b}

    def met(m):
        renamed = re.sub(r"\d+", lambda x: vmap.get(x.group(0), x.group(0)), m)
        return m if m in sb else renamed if renamed in sb else m

    rows = {r["module"]: r for r in d["modules"]}
    assert set(rows) == set(sb) | {met(m) for m in st}
    for name, r in rows.items():
        members = sorted((m for m in st if met(m) == name), key=lambda m: (-st[m][1], m))
        assert r["executions_base"] == (sb[name][0] if name in sb else None)
        assert r["executions_treatment"] == (sum(st[m][0] for m in members) if members else None)
        assert r["module_treatment"] == (members[0] if members else None)  # (null: only the base ran it)
    lumped = [n for n in rows if sum(met(m) == n for m in st) > 1]
    assert lumped == ["jit_decode_b4_bkv128"] and rows["jit_decode_b4_bkv128"]["module_treatment"] == "jit_decode_b4_bkv64"
    assert rows["jit_prefill_t64"]["module_treatment"] == "jit_prefill_t64" and "jit_prefill_t128" not in rows
