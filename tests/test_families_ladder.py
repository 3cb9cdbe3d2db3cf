"""Families across layers (``--by kind``, field rules, the engine's named scopes, ``--families
study``), the roofline per family, and ``traceview ladder``, on the shared vLLM trace and on
two small engine profiles recorded here (tiny preset, batch 8 and 16).

Oracles: the raw trace JSON read with plain Python (vLLM), the op table summed row by row, and
the model's shapes (a dot of [R, d] x [d, f] is 2·R·d·f FLOPs).
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections import defaultdict

import polars as pl
import pytest

import traceview
from traceview.analysis.ops import families
from traceview.analysis.steps.family_roofline import family_roofline, summary
from traceview.analysis.compare.ladder import ladder
from traceview.analysis.hardware.peaks import Peaks
from traceview.cli import main
from traceview.errors import UsageError

VLLM = "vllm_tpu_qwen/plugins/profile/2026_01_11_21_26_41/t1v-n-9eb622fc-w-0.trace.json.gz"
STUDY = ("attention", "gate-up", "down", "logits", "sampler")
SCOPES = {"attention": "attention", "gate-up": "mlp_gate_up", "down": "mlp_down", "logits": "logits",
          "sampler": "sampler"}


# -- --by kind on the shared vLLM trace ------------------------------------------------------

@pytest.fixture(scope="module")
def vllm_prof(shared_traces):
    return traceview.load(shared_traces / "vllm_tpu_qwen")


def test_by_kind_puts_the_ffn_matmul_of_every_layer_in_one_row(vllm_prof, shared_traces):
    """Must show 2: the FFN gate/up matmul (``convolution_bitcast_fusion.N``, one per layer) is
    one row; its member count and occurrences are read again from the raw JSON: events grouped
    by their HLO text with instruction names and layouts removed."""
    kinds = vllm_prof.by_kind()
    top = kinds.row(0, named=True)
    assert top["op_name"] == "convolution_bitcast_fusion" and top["kind"] == "fusion"
    assert top["shape"].startswith("bf16[1024,1,27648] <- bf16[27648,5120]")
    # oracle: the raw events
    with gzip.open(shared_traces / VLLM, "rt") as f:
        events = json.load(f)["traceEvents"]
    names, occ = defaultdict(set), defaultdict(int)
    for e in events:
        ln = (e.get("args") or {}).get("long_name", "")
        if e.get("ph") == "X" and e.get("name", "").startswith("convolution_bitcast_fusion"):
            body = ln.split(" = ", 1)[1] if " = " in ln else ln
            key = re.sub(r"\{[^}]*\}", "", re.sub(r"%[\w.\-]+", "%", body))
            names[key].add(e["name"])
            occ[key] += 1
    biggest = max(names, key=lambda k: len(names[k]))
    assert top["members"] == len(names[biggest]) == 63  # 64 layers; the first layer's operands differ
    assert sorted(top["op_names"]) == sorted(names[biggest])
    assert top["occurrences"] == occ[biggest] == 126  # 2 devices x 63
    assert top["per_execution"] == 63.0
    # the (name, shape) table holds the same time in 63 rows of ~0.5% each
    by_shape = vllm_prof.by_shape().filter(pl.col("op_name").is_in(top["op_names"]) & (pl.col("shape") == top["shape"]))
    assert by_shape.height == 63 and by_shape["share"].max() < 0.006
    assert by_shape["self_ps"].sum() == top["self_ps"]
    assert top["share"] == pytest.approx(by_shape["share"].sum())
    assert 0.32 < top["share"] < 0.33
    # every op event is in exactly one kind row
    assert kinds["occurrences"].sum() <= vllm_prof.by_shape()["occurrences"].sum()
    assert kinds["self_ps"].sum() == vllm_prof.by_shape()["self_ps"].sum()


def test_analyze_by_kind_json_and_table(vllm_prof, shared_traces, tmp_path, capsys):
    out = tmp_path / "k.json"
    path = str(shared_traces / "vllm_tpu_qwen")
    assert main(["analyze", path, "--by", "kind", "--top", "3", "-o", str(out), "--no-cache"]) == 0
    data = json.loads(out.read_text())
    assert data["ops"][0]["members"] == 63 and data["ops"][0]["op_name"] == "convolution_bitcast_fusion"
    assert main(["analyze", path, "--by", "kind", "--top", "2", "--no-cache"]) == 0
    text = capsys.readouterr().out
    assert "×63 (convolution_bitcast_fusion" in text and "copies across layers in one row" in text
    page = tmp_path / "k.html"
    assert main(["report", path, "--by", "kind", "--top", "3", "-o", str(page), "--no-cache"]) == 0
    html = page.read_text()
    assert "Ops across layers (by kind)" in html and "<code>convolution_bitcast_fusion</code>" in html and "×63" in html


# -- family rules: fields and built-in sets ---------------------------------------------------

def test_rule_fields_parse_and_match():
    r = families.parse_rule("mm=line:model\\.py:95$")
    assert (r.name, r.field, r.pattern) == ("mm", "line", "model\\.py:95$")
    # line: the direct file:line and each stack frame, ^/$ per frame
    assert r.matches("x", "", "", "/a/model.py", source_line=95)
    assert not r.matches("x", "", "", "/a/model.py", source_line=951)
    assert r.matches("x", "", "", "/a/other.py", source_line=3, source_stack="/a/other.py:3\n/a/model.py:95")
    s = families.parse_rule("att=scope:(^|/)attention(/|$)")
    assert s.matches("fusion.1", "", "jit(f)/attention/dot_general", "")
    assert not s.matches("attention.1", "attention", "jit(f)/mlp/dot", "attention.py")  # only the scope
    plain = families.parse_rule("a=attention")
    assert plain.field == "" and plain.matches("attention.1", "", "", "")
    for bad, why in (("x=scope:", "empty"), ("x=line:(", "regular expression"), ("=scope:a", "name"),
                     ("x=nofield:y", "unknown field 'nofield'"), ("x=source:model", "unknown field 'source'"),
                     ("x=Op:fusion", "unknown field 'Op' \\(fields are lowercase\\)")):
        with pytest.raises(UsageError, match=why):
            families.parse_rule(bad)
    # the text 'nofield:' itself, searched in every field, as the refusal says to write it
    lit = families.parse_rule("x=(?:nofield):y")
    assert lit.field == "" and lit.matches("nofield:y.1", "", "", "")
    # a C++ namespace (GPU kernel names: cutlass::, std::) is text, not a field
    ns = families.parse_rule("x=cutlass::gemm")
    assert ns.field == "" and ns.pattern == "cutlass::gemm" and ns.matches("custom-call.3", "cutlass::gemm::Kernel", "", "")
    study = families.read_rules("study")
    assert [r.name for r in study] == [*STUDY, "other"] and all(r.field for r in study)


# -- engine profiles: tiny preset at batch 8 and 16 -------------------------------------------

# ``engine_runs`` (tests/conftest.py, one recording per session, shared with test_steps.py):
# the tiny preset at batch 8 and 16, max_model_len 128, 4 greedy tokens (3 decode steps each)


@pytest.fixture(scope="module")
def b8(engine_runs):
    return traceview.load(engine_runs[8])


CPU_PEAKS = Peaks(peak_flops=5e10, peak_bw=2e10, flops_source="test", bw_source="test")


def test_named_scopes_reach_the_cpu_trace(b8):
    """The model's and the sampler's named scopes are in the trace's framework ops (the HLO
    op_name metadata): every block of the decode program, and the sampler's program."""
    ops = b8.ops
    decode = ops.filter(pl.col("module") == "jit_decode_b8_bkv128")
    assert decode.height
    for scope in ("attention", "mlp_gate_up", "mlp_down", "logits"):
        assert decode["framework_op"].str.contains(f"^jit\\(decode_b8_bkv128\\)/{scope}/").any(), scope
    greedy = ops.filter(pl.col("module") == "jit_greedy_b8")
    assert greedy.height and greedy["framework_op"].str.contains("^jit\\(greedy_b8\\)/sampler/").all()
    # the kernel sits inside the attention scope
    kern = ops.filter(pl.col("op_name").str.starts_with("RPAd"))
    assert kern.height and kern["framework_op"].str.contains("/attention/").all()


def test_study_families_cover_the_step_and_match_a_hand_sum(b8):
    """Must show 3 in miniature: the study set's families; the five named ones are each
    present and, with ``other``, sum to the families' time; each family's time per step is
    recomputed from the op rows (step-marker windows, scope regexes) by hand."""
    a = b8.steps("study")
    assert a.method == "markers"
    fams = dict(zip(a.families["family"], a.families["self_ps"]))
    assert set(fams) <= {*STUDY, "other"} and set(STUDY) <= set(fams)
    # each named family has time; its share of a fresh CPU recording is timing, not asserted
    # (it moved from 96% to under 95% on a loaded 2-core machine)
    assert all(fams[f] > 0 for f in STUDY)
    windows = [(r["start_ps"], r["start_ps"] + r["duration_ps"]) for r in a.steps.iter_rows(named=True)
               if r["in_window"]]  # the steady window's steps
    by_hand: dict = defaultdict(int)
    for r in b8.ops.filter(pl.col("start_ps").is_not_null()).iter_rows(named=True):
        if any(lo <= r["start_ps"] < hi for lo, hi in windows):
            fop = r["framework_op"] or ""
            fam = next((f for f in STUDY if re.search(f"(^|[/;]){SCOPES[f]}(/|;|$)", fop)), "other")
            by_hand[fam] += r["self_ps"]
    for f in fams:
        assert fams[f] == pytest.approx(by_hand[f] / len(windows)), f


def test_family_roofline_figures(b8):
    """FLOPs per step of the MLP blocks from the model's shapes (tiny: d_model 256, mlp_hidden
    512, 2 layers; decode bucket R = 8): gate and up are two [8,256]x[256,512] dots per layer,
    down one [8,512]x[512,256]; the roofline time is recomputed op by op."""
    a = b8.steps("study")
    fr = family_roofline(a, CPU_PEAKS)
    rows = {r["family"]: r for r in fr.iter_rows(named=True)}
    assert set(STUDY) <= set(rows)
    R, d, f, L = 8, 256, 512, 2
    down = rows["down"]
    assert down["flops"] == pytest.approx(2 * R * f * d * L, rel=0.01)  # + the residual add
    gate = rows["gate-up"]
    assert 2 * 2 * R * d * f * L <= gate["flops"] <= 1.1 * 2 * 2 * R * d * f * L  # + norm, GeGLU
    for r in rows.values():
        assert r["share"] == pytest.approx(r["time_ps"] / r["step_ps"])
        if r["bytes"]:
            assert r["intensity"] == pytest.approx((r["flops"] or 0) / r["bytes"])
            # at or above the ridge, an intensity that is an upper bound (FLOPs without bytes
            # for part of the time: the interpreted attention kernel) proves no compute bound
            assert r["bound_by"] == ("memory" if r["intensity"] < CPU_PEAKS.ridge else
                                     "unknown" if r["no_bytes_share"] else "compute"), r
    assert sum(r["time_ps"] for r in rows.values()) == pytest.approx(a.coverage.family_ps)
    # predicted: each op's max(FLOPs / peak, bytes / peak), by hand over the op rows in steps
    windows = [(r["start_ps"], r["start_ps"] + r["duration_ps"]) for r in a.steps.iter_rows(named=True)
               if r["in_window"]]  # the steady window's steps
    pred = 0.0
    for r in b8.ops.filter(pl.col("start_ps").is_not_null()).iter_rows(named=True):
        if re.search("(^|[/;])mlp_down(/|;|$)", r["framework_op"] or "") and any(lo <= r["start_ps"] < hi
                                                                              for lo, hi in windows):
            if r["flops"] is not None or r["bytes_accessed"] is not None:
                pred += r["count"] * max((r["flops"] or 0) / CPU_PEAKS.peak_flops,
                                         (r["bytes_accessed"] or 0) / CPU_PEAKS.peak_bw) * 1e12
    assert down["predicted_ps"] == pytest.approx(pred / len(windows))
    s = summary(fr)
    assert s["ratio"] == pytest.approx(a.coverage.ratio) and s["window"] == "window steady"


def test_family_roofline_keeps_to_the_analysed_window(b8):
    """When the step table says which steps are in the analysed window (``in_window``, the
    steady-state rule), the figures are over those steps only."""
    import dataclasses

    a = b8.steps("study")
    st = a.steps.with_columns((pl.col("step") > 0).alias("in_window"))  # the first step out
    fr = family_roofline(dataclasses.replace(a, steps=st), CPU_PEAKS)
    keep = st.with_row_index("step_row").filter(pl.col("in_window"))
    assert fr["n_steps"][0] == keep.height == a.steps.height - 1 and fr["window"][0] == "window steady"
    assert fr["step_ps"][0] == pytest.approx(keep["duration_ps"].mean())
    per = a.family_time_by_step(keep["step_row"].to_numpy()).group_by("family").agg(pl.col("self_ps").sum())
    for fam, t in per.iter_rows():
        assert fr.filter(pl.col("family") == fam)["time_ps"][0] == pytest.approx(t / keep.height), fam


def test_family_roofline_in_the_report_outputs(engine_runs, tmp_path, capsys):
    path = str(engine_runs[8])
    out = tmp_path / "a.json"
    # every step (3 decode steps recorded): the steady window's count depends on the timing
    # of this fresh recording (a step slowed by a busy machine leaves it)
    assert main(["analyze", path, "--families", "study", "--peak-flops", "5e10", "--peak-bw", "2e10",
                 "--step-window", "all", "-o", str(out), "--no-cache"]) == 0
    data = json.loads(out.read_text())
    fams = {r["family"] for r in data["family_roofline"]}
    assert set(STUDY) <= fams and data["family_roofline_summary"]["n_steps"] == 3
    html = tmp_path / "r.html"
    assert main(["report", path, "--families", "study", "-o", str(html), "--no-cache"]) == 0
    page = html.read_text()
    assert "Roofline per family" in page and "<code>gate-up</code>" in page and "<script" not in page
    assert main(["analyze", path, "--families", "study", "--top", "3", "--no-cache"]) == 0
    text = capsys.readouterr().out
    assert "roofline per family" in text and "no peaks known" in text


# -- the ladder --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_points(engine_runs, b8):
    return [b8, traceview.load(engine_runs[16])]


def test_ladder_reads_the_batch_and_scales(two_points):
    lad = ladder(two_points, labels=["b8", "b16"], rules="study", peaks=CPU_PEAKS)
    assert lad.points["x"].to_list() == [8.0, 16.0] and lad.x_name == "batch"
    assert lad.points["x_source"].str.contains("jit_decode_b16_bkv128").any()
    t = lad.table
    down = t.filter(pl.col("family") == "down").sort("x")
    # FLOPs of the down projection double with the batch (2·R·f·d·L)
    assert down["flops"][1] / down["flops"][0] == pytest.approx(2.0, rel=0.01)
    for r in lad.scaling.iter_rows(named=True):
        sub = t.filter(pl.col("family") == r["family"]).sort("x")
        if sub.height == 2:
            assert r["factor_per_doubling"] == pytest.approx(sub["time_ps"][1] / sub["time_ps"][0])
            assert r["factors"] == [pytest.approx(r["factor_per_doubling"])]
    assert lad.scaling.filter(pl.col("family") == "down")["flops_per_doubling"][0] == pytest.approx(2.0, rel=0.01)


def test_ladder_finds_a_ridge_crossing(two_points):
    """With a ridge set between the gate-up block's intensities at batch 8 and 16 (their
    geometric mean), the block crosses from memory to compute between the two, at
    x = sqrt(8·16) on the log-log line."""
    lad0 = ladder(two_points, rules="study", peaks=CPU_PEAKS)
    i8, i16 = lad0.table.filter(pl.col("family") == "gate-up").sort("x")["intensity"].to_list()
    assert i16 > i8  # a GEMM with a fixed weight: intensity rises with the batch
    ridge = math.sqrt(i8 * i16)
    lad = ladder(two_points, rules="study", peaks=Peaks(peak_flops=ridge * 1e10, peak_bw=1e10))
    row = lad.scaling.filter(pl.col("family") == "gate-up").row(0, named=True)
    assert row["crosses"] == "memory -> compute" and row["cross_between"] == [8.0, 16.0]
    assert row["cross_x"] == pytest.approx(math.sqrt(8 * 16))


def test_ladder_cli(engine_runs, shared_traces, tmp_path, capsys):
    a, b = str(engine_runs[8]), str(engine_runs[16])
    out = tmp_path / "l.json"
    assert main(["ladder", b, a, "--families", "study", "-o", str(out), "--no-cache"]) == 0
    data = json.loads(out.read_text())
    assert [p["x"] for p in data["points"]] == [8.0, 16.0] and {r["family"] for r in data["scaling"]} >= set(STUDY)
    page = tmp_path / "l.html"
    assert main(["ladder", a, b, "--x", "1,2", "--family", "<script>k=op:^RPA", "-o", str(page), "--no-cache"]) == 0
    html = page.read_text()
    assert "<svg" in html and "<script" not in html and "http://" not in html and "x 1, 2" in html
    assert "&lt;script&gt;k" in html  # a family name is the user's string: escaped
    assert main(["ladder", a, b, "--no-cache"]) == 0
    assert "per doubling" in capsys.readouterr().out
    assert main(["ladder", a, b, "--x", "8"]) == 2
    assert main(["ladder", a, a, "--no-cache"]) == 2  # the same batch twice
    v6e = str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    assert main(["ladder", v6e, a, "--no-cache"]) == 2  # no engine bucket name: --x needed
    err = capsys.readouterr().err
    assert "give the sweep values with --x" in err and "Traceback" not in err
    assert err.count(v6e) == 1 and f"{v6e}: cannot read its batch: " in err  # the profile named once
    # a step module one profile lacks: the error names that profile
    assert main(["ladder", a, b, "--step-module", "nosuch", "--no-cache"]) == 2
    assert f"error: {a}: module 'nosuch' has no executions in this trace" in capsys.readouterr().err  # b8 sorts first


def test_family_rules_that_match_no_op_say_so(b8, shared_traces):
    """The study rules on a profile without the model's named scopes (the shared v6e trace)
    match nothing but their catch-all: one warning names the rules' families; on the engine's
    own profile (named scopes) they match and nothing is said."""
    v6e = traceview.load(shared_traces / "tpu_v6e_4chip_psum.xplane.pb", stale_after_s=None)
    said = [w for w in v6e.analyze(rules="study").warnings if w.startswith("no op matched the family rules")]
    assert said == ["no op matched the family rules (5 families: attention, down, gate-up, logits ...): the families "
                    "shown are the built-in ones or the rules' catch-all; the rules search op names, HLO text, "
                    "framework ops and source files"]
    assert not [w for w in b8.analyze(rules="study").warnings if w.startswith("no op matched")]
    assert not [w for w in v6e.analyze().warnings if w.startswith("no op matched")]


def test_ladder_says_when_its_rules_match_no_op():
    """The study rules on two fixtures recorded without the study's named scopes: every op
    falls outside the rules, and the ladder says so instead of a silent 'other'; the built-in
    families (no rules) give no such note."""
    from pathlib import Path

    fx = Path(__file__).resolve().parents[1] / "fixtures"
    profs = [traceview.load(fx / "greedy_b4"), traceview.load(fx / "greedy_b8")]
    lad = ladder(profs, rules="study")
    said = [n for n in lad.notes if n.startswith("no op of any profile matched the family rules")]
    assert len(said) == 1 and "attention" in said[0]
    assert not set(lad.table["family"].to_list()) & {"attention", "down", "gate-up", "logits"}
    assert not any("matched the family rules" in n for n in ladder(profs).notes)


def test_ladder_says_when_its_points_are_not_one_sweep(shared_traces):
    """An engine run (CPU, step markers) beside the v6e psum trace (TPU, jit_f), or beside the
    engine on four devices: the ladder says they are not one sweep; two batches of the engine's
    decode are one (no such note)."""
    from pathlib import Path

    fx = Path(__file__).resolve().parents[1] / "fixtures"
    b4, b8 = traceview.load(fx / "greedy_b4"), traceview.load(fx / "greedy_b8")
    v6e = traceview.load(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    lad = ladder([b4, v6e], xs=[4, 8], labels=["b4", "v6e"])
    said = [n for n in lad.notes if n.startswith("the points are not one sweep")]
    assert len(said) == 1 and "b4: step markers on 1 x CPU" in said[0] and "v6e: jit_f on 4 x TPU v6 Lite" in said[0], said
    assert not any("not one sweep" in n for n in ladder([b4, b8]).notes)
    # the same kind of device, another count: the 4-device tensor-parallel decode beside b4's one
    tp = traceview.load(fx / "tp_decode")
    said = [n for n in ladder([b4, tp], xs=[1, 2], labels=["b4", "tp"]).notes if "not one sweep" in n]
    assert len(said) == 1 and "b4: step markers on 1 x CPU; tp: step markers on 4 x CPU" in said[0], said


def test_the_sampling_prefilter_agrees_with_the_search():
    """``_sampling_in`` (words first, then the regex) says what ``_SAMPLING.search`` says,
    on ASCII text and on text whose case folding is not ASCII's."""
    from traceview.analysis.ops.families import _SAMPLING, _sampling_in

    for t in ["", "model.py:12 sample_logits", "jit(step)/TOP_K", "topp", "top_p/argmax:3", "resort", "sorted",
              "x/sort:1", "Binary_Search", "samplers/greedy", "upsample", "argsort", "ſampler", "arg\u212aax",
              "Sampling", "stop_gradient", "laptop"]:
        assert _sampling_in(t) == (_SAMPLING.search(t) is not None), t


def test_an_upper_bound_intensity_proves_no_compute_bound():
    """The 4-device tensor-parallel decode (fixture tp_decode): its attention kernels, run
    interpreted on CPU, have FLOPs but no byte count for 99.3% of the family's time, so the
    family's intensity (all FLOPs over the bytes of the few ops that have them) is an upper
    bound. Under a ridge below it the family is bound by "unknown", not "compute"; under a
    ridge above it, "memory" (the bound proves it). The ladder marks the cell "<=" and reads no
    crossing from it."""
    from pathlib import Path

    from traceview.analysis.compare.ladder import _crossing
    from traceview.analysis.steps.anatomy import profile_anatomy
    from traceview.render.ladder import render_ladder_text

    fx = Path(__file__).resolve().parents[1] / "fixtures"
    tp = traceview.load(fx / "tp_decode")
    anat = profile_anatomy(tp)
    low, high = Peaks(peak_flops=1e12, peak_bw=1e10), Peaks(peak_flops=1e13, peak_bw=1e10)  # ridges 100, 1000
    att = family_roofline(anat, low).filter(pl.col("family") == "attention/custom kernels").row(0, named=True)
    assert att["no_bytes_share"] == pytest.approx(0.9935, abs=5e-4)
    assert att["intensity"] == pytest.approx(att["flops"] / att["bytes"]) and 100 < att["intensity"] < 1000
    assert att["bound_by"] == "unknown"
    assert family_roofline(anat, high).filter(pl.col("family") == "attention/custom kernels")["bound_by"][0] == "memory"
    for r in family_roofline(anat, low).filter(pl.col("family") != "attention/custom kernels").iter_rows(named=True):
        if r["intensity"] is not None:  # exact intensities keep their verdict
            assert r["no_bytes_share"] == 0 and r["bound_by"] == ("compute" if r["intensity"] >= 100 else "memory")
    # the ladder: "<=" on the cell, a note, and no crossing read off an upper bound above the ridge
    b4 = traceview.load(fx / "greedy_b4")
    lad = ladder([tp, b4], xs=[1, 2], labels=["tp", "b4"], peaks=low)
    text = render_ladder_text(lad, width=200)
    assert f"<={att['intensity']:.3g} unknown" in text
    assert any(n.startswith("intensities shown with <= are upper bounds") and "attention/custom kernels" in n
               for n in lad.notes)
    assert _crossing([1.0, 2.0], [50.0, 150.0], 100.0)[0] == "memory -> compute"
    assert _crossing([1.0, 2.0], [50.0, 150.0], 100.0, [False, True]) == (None, None, None)
    assert _crossing([1.0, 2.0], [150.0, 50.0], 100.0, [False, True])[0] == "compute -> memory"  # below: proven
