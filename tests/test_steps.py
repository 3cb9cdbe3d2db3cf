"""Step anatomy and op families (traceview.analysis.steps.anatomy) on real traces and a live CPU profile.

Expected figures were read off the traces and are recomputed here independently (raw trace
JSON with plain Python, or the op table summed row by row).
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

import traceview
from traceview.model.files import read_file
from traceview.analysis.ops import families
from traceview.analysis.steps import anatomy as steps
from traceview.errors import UsageError

VLLM = "vllm_tpu_qwen/plugins/profile/2026_01_11_21_26_41/t1v-n-9eb622fc-w-0.trace.json.gz"


@pytest.fixture(scope="module")
def vllm(shared_traces):
    return read_file(shared_traces / VLLM)


@pytest.fixture(scope="module")
def v6e(shared_traces):
    return read_file(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")


def _check_identities(a: steps.StepAnatomy) -> None:
    """Invariants that hold on every profile, whatever the timing: the coverage and the
    families are over the window's steps, ``coverage_all`` over every step."""
    s_all, c = a.steps, a.coverage
    s = s_all.filter(pl.col("in_window"))
    n = s.height
    assert c.n_steps == n > 0 and c.excluded == s_all.height - n
    assert a.coverage_all.n_steps == s_all.height
    assert a.coverage_all.step_ps == pytest.approx(s_all["duration_ps"].sum() / s_all.height)
    assert c.step_ps == pytest.approx(s["duration_ps"].sum() / n)
    assert c.family_ps == pytest.approx(s["op_time_ps"].sum() / n)
    # families partition the op time inside steps
    assert a.families["self_ps"].sum() == pytest.approx(c.family_ps)
    assert a.families["share"].sum() == pytest.approx(c.ratio)
    # X = Y - idle + overlap, exactly
    assert c.family_ps == pytest.approx(c.step_ps - c.idle_ps + c.overlap_ps)
    assert (s["busy_ps"] <= s["duration_ps"]).all() and (s["idle_ps"] >= 0).all()
    # op time inside + outside = all op time
    total = a.ops["self_ps"].sum()
    assert s_all["op_time_ps"].sum() + c.outside_ps == total


def test_vllm_step_anatomy_covers_the_step(vllm, shared_traces):
    a = steps.anatomy(vllm.ops, vllm.module_runs)
    _check_identities(a)
    assert (a.method, a.module, a.extent) == ("module", "jit_step_fun", "span")
    # one decode step per device; the step spans step_fun, select, logits and sample
    assert a.steps.select("device", "step").rows() == [("/device:TPU:0", 0), ("/device:TPU:1", 0)]
    # independent: the raw JSON, per device
    with gzip.open(shared_traces / VLLM, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    def t(e):  # TPU events on the device clock, integer ps (as XProf's op metrics)
        return int(e["args"]["device_offset_ps"]), int(e["args"]["device_duration_ps"])

    for row in a.steps.iter_rows(named=True):
        pid = next(p for p, n in procs.items() if n == row["device"])
        evs = [e for e in events if e.get("ph") == "X" and e["pid"] == pid
               and threads.get((pid, e["tid"])) in ("XLA Modules", "XLA Ops")]
        start = min(t(e)[0] for e in evs if e["name"].startswith("jit_step_fun("))
        end = max(sum(t(e)) for e in evs if t(e)[0] >= start)
        op_ps = sum(t(e)[1] for e in evs if threads[(pid, e["tid"])] == "XLA Ops" and t(e)[0] >= start)
        assert (row["start_ps"], row["duration_ps"], row["op_time_ps"]) == (start, end - start, op_ps)
    c = a.coverage
    # the coverage line: 67.208 of 67.275 ms (99.9%)
    assert c.ratio >= 0.95
    assert c.family_ps / 1e9 == pytest.approx(67.208, abs=0.001)
    assert c.step_ps / 1e9 == pytest.approx(67.275, abs=0.001)
    assert 0 <= c.overlap_ps < 1e-6 * c.step_ps  # 173 ps: device-clock ops touching
    assert c.outside_ps == 0 and c.gap_between_ps is None
    assert "families sum to 67.208 of 67.275 ms" in c.line()
    fam = {r["family"]: r for r in a.families.iter_rows(named=True)}
    assert a.families["family"].to_list()[:2] == ["matmul/convolution", "attention/custom kernels"]
    assert fam["matmul/convolution"]["share"] == pytest.approx(0.6285, abs=1e-4)
    assert fam["attention/custom kernels"]["share"] == pytest.approx(0.2528, abs=1e-4)
    assert fam["attention/custom kernels"]["per_step"] == 64  # one RPA call per layer
    assert fam["collectives"]["per_step"] == 129 + 2  # all-reduces in the model, all-gathers in the sampler
    assert set(fam) == {"matmul/convolution", "attention/custom kernels", "collectives", "copies and conversions",
                        "elementwise fusions", "sampling"}
    # independent family check: attention is exactly the RPA kernel calls, summed by hand
    rpa = sum(r["self_ps"] for r in vllm.ops.iter_rows(named=True) if r["op_name"].startswith("RPA"))
    assert fam["attention/custom kernels"]["self_ps"] == pytest.approx(rpa / 2)


def test_v6e_steps_per_device(v6e):
    a = steps.anatomy(v6e.ops, v6e.module_runs)
    _check_identities(a)
    assert (a.method, a.module) == ("module", "jit_f")
    per = a.steps.group_by("device").agg(pl.len().alias("n"), pl.col("op_time_ps").sum().alias("t")).sort("device")
    assert per["device"].to_list() == [f"/device:TPU:{i}" for i in range(4)]
    assert per["n"].to_list() == [100] * 4
    # independent: per device, the self time of jit_f's ops summed row by row
    by_dev: dict = defaultdict(int)
    other = 0
    for r in v6e.ops.iter_rows(named=True):
        if r["module"] == "jit_f":
            by_dev[r["device"]] += r["self_ps"]
        else:
            other += r["self_ps"]
    assert per["t"].to_list() == [by_dev[d] for d in per["device"]]
    # psum / broadcast / convert ran before the first jit_f: outside the steps
    assert a.coverage.outside_ps == other
    # each step holds exactly one execution's 15 ops (6 copy-start, 6 copy-done, 3 fusions)
    assert set(a.steps["ops"]) == {15}
    # the ops are on the device clock; the reader moves the host-aligned XLA Modules onto it,
    # so every step starts at or before its execution's first op (a copy-start)
    heads = a.ops.filter(pl.col("step_row").is_not_null()).sort("start_ps").group_by(
        "step_row", maintain_order=True).first().sort("step_row")
    starts = a.steps["start_ps"].to_list()
    assert all(s <= h for s, h in zip(starts, heads["start_ps"].to_list()))
    assert set(heads["op_name"]) == {"copy-start"}
    c = a.coverage
    assert c.ratio >= 0.99 and c.n_steps == 400 and c.devices == 4
    assert c.step_ps / 1e9 == pytest.approx(784.133, abs=0.001)
    assert 0 < c.gap_between_ps / 1e6 < 2.0  # about a µs between executions (1.27 µs read here)
    fam = {r["family"]: r for r in a.families.iter_rows(named=True)}
    assert set(fam) == {"copies and conversions", "elementwise fusions"}
    assert fam["copies and conversions"]["share"] == pytest.approx(0.9693, abs=1e-4)
    assert fam["copies and conversions"]["per_step"] == 12


def test_module_runs_are_aligned_to_the_op_clock(v6e, vllm, shared_traces):
    runs, fixed = steps.align_module_runs(v6e.ops, v6e.module_runs)
    # the reader already shifts host-aligned modules onto the ops' device clock; the few
    # executions whose host-clock duration is shorter than their ops' device span still
    # get rebuilt here
    assert {d for _, d in fixed} <= {f"/device:TPU:{i}" for i in range(4)}
    assert runs.height == v6e.module_runs.height
    # every jit_f op now starts inside an execution of jit_f on its device (checked by hand)
    for dev in ("/device:TPU:0", "/device:TPU:3"):
        ivs = [(s, s + d) for s, d in runs.filter((pl.col("device") == dev) & (pl.col("module") == "jit_f"))
               .select("start_ps", "duration_ps").rows()]
        for s in v6e.ops.filter((pl.col("device") == dev) & (pl.col("module") == "jit_f"))["start_ps"]:
            assert any(a <= s < b for a, b in ivs)
    # traces whose runs already hold their ops are left alone
    for td in (vllm, read_file(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")):
        same, fixed = steps.align_module_runs(td.ops, td.module_runs)
        assert fixed == {} and same.equals(td.module_runs)


def test_v6e_windows(v6e):
    span = steps.find_steps(v6e.ops, v6e.module_runs)
    period = steps.find_steps(v6e.ops, v6e.module_runs, extent="period")
    run = steps.find_steps(v6e.ops, v6e.module_runs, extent="run")
    assert span.height == period.height == run.height == 400
    # period: start to next start on the same device (the last step as in span)
    p = period.sort(["device", "start_ps"]).with_columns(pl.col("start_ps").shift(-1).over("device").alias("nxt"))
    inner = p.filter(pl.col("nxt").is_not_null())
    assert (inner["start_ps"] + inner["duration_ps"]).to_list() == inner["nxt"].to_list()
    assert (period["gap_after_ps"].drop_nulls() == 0).all()
    # a span never ends before its own run
    assert all(s >= r for s, r in zip(span["duration_ps"].to_list(), run["duration_ps"].to_list()))


def test_cpu_profile_steps(cpu_profile_dir, cpu_profile_spec):
    prof = traceview.load(cpu_profile_dir)
    a = steps.anatomy(prof.ops, prof.module_runs)
    _check_identities(a)
    assert (a.method, a.module) == ("module", cpu_profile_spec["module"])
    n = len(cpu_profile_spec["batches"]) * cpu_profile_spec["calls"]
    assert a.steps.height == n and set(a.steps["device"]) == {"/host:CPU"}
    assert a.coverage.outside_ps == 0 and (a.steps["ops"] >= 1).all()
    # every op of the profile sits in exactly one step (independent count)
    assert a.steps["ops"].sum() == prof.ops["count"].sum()
    # the dot runs as an XNNPACK/YNNPACK fusion or a dot on XLA:CPU: matmul family
    assert "matmul/convolution" in set(a.families["family"])
    # host dispatch between calls is not step time: it is the gap between steps
    assert a.coverage.gap_between_ps is not None and a.coverage.gap_between_ps > 0
    period = steps.anatomy(prof.ops, prof.module_runs, extent="period", window="all").coverage
    assert period.step_ps > a.coverage_all.step_ps and period.family_ps == pytest.approx(a.coverage_all.family_ps)


def test_whole_trace_step_without_module_runs(shared_traces):
    td = read_file(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")
    a = steps.anatomy(td.ops, td.module_runs.clear())
    _check_identities(a)
    assert a.method == "trace" and a.steps.height == 1
    starts = td.ops["start_ps"].to_list()
    ends = [s + d for s, d in zip(starts, td.ops["duration_ps"].to_list())]
    row = a.steps.row(0, named=True)
    assert (row["start_ps"], row["duration_ps"]) == (min(starts), max(ends) - min(starts))
    assert row["op_time_ps"] == sum(td.ops["self_ps"].to_list())
    fam = dict(zip(a.families["family"], a.families["self_ps"]))
    # the five __cublas$gemm custom-calls and the gemm fusions, by hand
    gemm = sum(r["self_ps"] for r in td.ops.iter_rows(named=True)
               if "__cublas$gemm" in r["hlo_text"] or r["op_name"].startswith("gemm_fusion"))
    assert fam["matmul/convolution"] == gemm == 3233884000


def test_markers_define_steps(v6e):
    runs = v6e.module_runs.filter((pl.col("module") == "jit__psum") & (pl.col("device") == "/device:TPU:0"))
    markers = runs.select("host", pl.lit("").alias("device"), "start_ps", "duration_ps")
    a = steps.anatomy(v6e.ops, v6e.module_runs, markers=markers)
    assert a.method == "markers"
    # a device-less marker applies to every device of its host
    assert a.steps.height == 3 * 4
    assert set(a.families["family"]) <= {"collectives"}


@pytest.mark.parametrize("fields,family", [
    # real rows from the shared traces: (op_name, op_kind, category, hlo_text, framework_op, source_file)
    (("RPA-bq_32-bkvp_64-p_64-.1", "custom-call", "custom-call",
      '%RPA-bq_32-bkvp_64-p_64-.1 = (bf16[4,1024,3,2,128]) custom-call(s32[] %bitcast), '
      'custom_call_target="tpu_custom_call"', "jit(step_fun)/RPA-bq_32-bkvp_64-p_64-/pallas_call", ""),
     "attention/custom kernels"),
    (("custom-call.4", "custom-call", "custom-call",
      '%custom-call.4 = bf16[1024,5120] custom-call(s8[4194304] %slice-done), custom_call_target="ConcatBitcast"',
      "", ""), "copies and conversions"),
    (("custom-call.1", "custom-call", "custom-call",
      '%custom-call.1 = (bf16[1024,1024], s8[4194304]) custom-call(bf16[1024,1024] %a.1, bf16[1024,1024] %b.1), '
      'custom_call_target="__cublas$gemm"', "jit(dot)/dot_general", ""), "matmul/convolution"),
    (("cudnn-conv.1", "custom-call", "custom-call", 'custom_call_target="__cudnn$convForward"',
      "jit(forward_3d_conv)/conv_general_dilated", ""), "matmul/convolution"),
    (("gemm_fusion_dot_general.1", "fusion", "custom fusion", "", "jit(dot)/dot_general", ""), "matmul/convolution"),
    (("fusion.3", "fusion", "convolution fusion", "", "jit(step_fun)/RowParallelLinear/mn,pn->mp/dot_general", ""),
     "matmul/convolution"),
    (("ynn_fusion", "fusion", "custom fusion", "", "jit(f)/reduce_sum", ""), "matmul/convolution"),
    (("all-reduce.1", "all-reduce", "all-reduce", "", "", ""), "collectives"),
    (("all-gather-start.2", "all-gather-start", "", "", "", ""), "collectives"),
    (("copy-done.3", "copy-done", "copy-done", "", "", ""), "copies and conversions"),
    (("slice-start", "async-start", "async-start", "", "", ""), "copies and conversions"),
    (("dynamic-update-slice.7", "dynamic-update-slice", "", "", "", ""), "copies and conversions"),
    (("copy_bitcast_fusion.63", "fusion", "loop fusion", "", "jit(step_fun)/transpose", ""), "copies and conversions"),
    (("wrapped_convert", "fusion", "loop fusion", "", "jit(convert_element_type)/convert_element_type", ""),
     "copies and conversions"),
    (("fusion.1", "fusion", "custom fusion", "", "jit(step_fun)/aten::index_select/jit(_take)/gather", ""),
     "copies and conversions"),
    # GPU names fusions after the root only: loop_convert_fusion computes exp here
    (("loop_convert_fusion", "fusion", "loop fusion", "", "jit(exp)/exp", ""), "elementwise fusions"),
    (("add_reduce_fusion", "fusion", "loop fusion", "", "jit(sample)/reduce",
      "/home/x/tpu_inference/layers/jax/sample/sampling.py"), "sampling"),
    (("multiply_fusion.9", "fusion", "loop fusion", "", "jit(f)/top_p_mask/mul",
      "/home/x/model.py"), "sampling"),
    (("sort.2", "sort", "sort", "", "jit(f)/sort", ""), "sampling"),
    (("jit_ragged_paged_attention_.201", "broadcast", "broadcast", "", "", ""), "elementwise fusions"),
    (("while.3", "while", "while", "", "", ""), "other"),
])
def test_default_families(fields, family):
    assert families.family_of(*fields) == family


def test_user_rules_come_first(vllm, tmp_path: Path):
    rules = ["# the study's fused gate-and-up projection", "gate_up=MergedColumnParallelLinear", "",
             "down=RowParallelLinear"]
    a = steps.anatomy(vllm.ops, vllm.module_runs, rules=rules)
    _check_identities(a)
    fam = {r["family"]: r for r in a.families.iter_rows(named=True)}
    # independent: ops whose framework op names the layer, summed by hand, per step
    gate = sum(r["self_ps"] for r in vllm.ops.iter_rows(named=True) if "MergedColumnParallelLinear" in r["framework_op"])
    assert fam["gate_up"]["self_ps"] == pytest.approx(gate / 2)
    assert fam["gate_up"]["per_step"] == 64
    assert "down" in fam and fam["matmul/convolution"]["self_ps"] < 0.6 * a.coverage.step_ps
    # the same rules from a file
    f = tmp_path / "families.txt"
    f.write_text("\n".join(rules) + "\n")
    b = steps.anatomy(vllm.ops, vllm.module_runs, rules=f)
    assert b.families.equals(a.families)
    assert steps.anatomy(vllm.ops, vllm.module_runs, rules=str(f)).families.equals(a.families)


@pytest.mark.parametrize("rules,message", [
    (["gate_up"], "rule 1: bad family rule 'gate_up': expected NAME=REGEX"),
    (["=dot"], "the family name before '=' is empty"),
    (["x="], "the regular expression after '=' is empty"),
    (["ok=a", "bad=("], r"rule 2: bad family rule 'bad=\(': invalid regular expression"),
])
def test_bad_rules(v6e, rules, message):
    with pytest.raises(UsageError, match=message):
        steps.anatomy(v6e.ops, v6e.module_runs, rules=rules)


def test_bad_rules_file(v6e, tmp_path: Path):
    f = tmp_path / "rules.txt"
    f.write_text("# ok\nattn=RPA\nbroken=[\n")
    with pytest.raises(UsageError, match=r"rules.txt:3: bad family rule 'broken=\['") as exc:
        steps.anatomy(v6e.ops, v6e.module_runs, rules=f)
    assert "\n" not in str(exc.value)
    with pytest.raises(UsageError, match="cannot read family rules file"):
        families.read_rules(tmp_path / "missing.txt")


def test_bad_extent_and_module(v6e):
    with pytest.raises(UsageError, match="unknown step extent 'wall'"):
        steps.find_steps(v6e.ops, v6e.module_runs, extent="wall")
    with pytest.raises(UsageError, match="module 'jit_nope' has no executions"):
        steps.anatomy(v6e.ops, v6e.module_runs, module="jit_nope")
    a = steps.anatomy(v6e.ops, v6e.module_runs, module="jit__psum")
    assert a.module == "jit__psum" and a.steps.height == 12


def test_empty_input():
    from traceview.model.schema import empty_module_runs, empty_ops

    a = steps.anatomy(empty_ops(), empty_module_runs())
    assert a.steps.height == 0 and a.families.height == 0 and a.coverage.n_steps == 0
    assert a.families.columns == list(steps.FAMILIES_SCHEMA)


def test_busy_time_is_the_union_of_intervals():
    """busy_ps's union arithmetic against a brute-force count of covered picoseconds."""
    import numpy as np

    rng = np.random.default_rng(1)
    for _ in range(300):
        n = int(rng.integers(1, 12))
        st = rng.integers(0, 100, n)
        en = st + rng.integers(0, 30, n)
        lo, hi = sorted(int(x) for x in rng.integers(0, 130, 2))
        covered = set()
        for a, b in zip(st.tolist(), en.tolist()):
            covered.update(range(max(a, lo), min(b, hi)))
        assert steps._busy(st, en, lo, hi) == len(covered)


# --------------------------------------------------------------------------------------
# the bundled engine's CPU fixtures (fixtures/README.md): structure, never times

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _fixture(name: str):
    found = sorted(FIXTURES.glob(f"{name}/plugins/profile/*/*.xplane.pb"))
    assert len(found) == 1, f"expected one xplane under fixtures/{name}"
    return read_file(found[0])


@pytest.mark.parametrize("name,batch,sampler", [("greedy_b4", 4, "greedy"), ("greedy_b8", 8, "greedy"),
                                                ("topp_b4", 4, "sample")])
def test_engine_fixture_decode_anatomy(name, batch, sampler):
    td = _fixture(name)
    decode, samp = f"jit_decode_b{batch}_bkv128", f"jit_{sampler}_b{batch}"
    a = steps.anatomy(td.ops, td.module_runs, module=decode)
    _check_identities(a)
    # 3 decode steps on the host CPU device, each holding one decode and one sampler execution
    assert (a.method, a.module, a.steps.height) == ("module", decode, 3)
    per_step = [td.ops.filter(pl.col("module") == m)["count"].sum() // 3 for m in (decode, samp)]
    assert a.steps["ops"].to_list() == [sum(per_step)] * 3
    inside = a.ops.filter(pl.col("step_row").is_not_null())
    assert set(inside["module"]) == {decode, samp}
    fam = dict(zip(a.families["family"], a.families["self_ps"]))
    # attention = every op of the Pallas kernel (interpret mode on CPU), found by hand from
    # the kernel's name scope; the same ops are exactly those sourced from the kernel file
    kernel = inside.filter(pl.col("framework_op").str.contains("/RPAd-p_16-bq_1_1-bkv_128_128/", literal=True))
    assert kernel.height > 0
    assert set(kernel["family"]) == {"attention/custom kernels"}
    assert fam["attention/custom kernels"] == pytest.approx(sum(kernel["self_ps"].to_list()) / 3)
    assert set(inside.filter(pl.col("family") == "attention/custom kernels")["source_file"]) == {
        "/work/main/kernels/paged_attention.py"}
    # the sampler: top-p's binary search (run although top_p=1.0) vs greedy's argmax
    sampling = inside.filter(pl.col("family") == "sampling")
    assert set(sampling["module"]) == {samp}
    if sampler == "sample":
        search = inside.filter(pl.col("framework_op").str.contains("topp_binary_search"))
        assert search.height > 0 and set(search["family"]) == {"sampling"}
        assert sampling.height > search.height  # plus sort/argmax-style ops around it
    else:
        assert sampling.height == 3 and set(sampling["source_file"]) == {"/work/main/engine_shim/sampling.py"}
    assert {"matmul/convolution", "copies and conversions"} <= set(fam)


def test_engine_fixture_default_steps_and_windows():
    td = _fixture("topp_b4")
    a = steps.anatomy(td.ops, td.module_runs)
    _check_identities(a)
    # the dominant module is the one with the most op self time: in a 4-token run, a prefill
    # or the decode; either way every execution of it is a step
    runs = td.module_runs.filter(pl.col("module") == a.module)
    assert a.module in ("jit_prefill_t32", "jit_decode_b4_bkv128") and a.steps.height == runs.height
    for window in ("run", "period"):
        b = steps.anatomy(td.ops, td.module_runs, module="jit_decode_b4_bkv128", extent=window)
        _check_identities(b)
    run = steps.find_steps(td.ops, td.module_runs, module="jit_decode_b4_bkv128", extent="run")
    span = steps.find_steps(td.ops, td.module_runs, module="jit_decode_b4_bkv128")
    # run windows hold the decode program only; span adds the sampler that follows it
    assert (run["duration_ps"] <= span["duration_ps"]).all() and (run["ops"] < span["ops"]).all()


@pytest.fixture(scope="module")
def engine_profile(engine_runs):
    """A live engine profile in the shape of ``traceview engine profile``: tiny model, 8
    requests x 4 greedy tokens, buckets warmed before the traced ``generate`` (the session's
    batch-8 recording, tests/conftest.py ``engine_runs``)."""
    return traceview.load(engine_runs[8])


def test_engine_profile_families_cover_the_decode_step(engine_profile):
    """Issue 4, must-show 4: on an engine profile the families sum to the step time.

    Steps are the decode program's executions (window "run": the program's own wall time on
    the XLA:CPU thread). What is left is thunk-scheduling idle inside the program; measured
    95.6% here (94.4% with the default span window, which adds the host gap before the
    sampler program): a timing, in the notes of issue 4, not asserted on a fresh recording;
    the identities and the hand sum are exact."""
    prof = engine_profile
    decode = [m for m in prof.modules()["module"].to_list() if m.startswith("jit_decode_b8")]
    assert decode == ["jit_decode_b8_bkv128"]
    a = prof.steps(module=decode[0], extent="run")
    _check_identities(a)
    assert a.coverage_all.n_steps == 3  # 4 tokens: the first comes from prefill
    # the coverage ratio and the family shares of a fresh CPU recording are timing (asserted
    # on committed traces above); here the structure: the Pallas kernel's ops are the
    # attention family, and every step holds op time
    fams = dict(zip(a.families["family"], a.families["self_ps"]))
    assert fams.get("attention/custom kernels", 0) > 0 and (a.steps["op_time_ps"] > 0).all()
    # independent: per step, the self time of the ops that start inside the run, summed by hand
    runs = prof.module_runs.filter(pl.col("module") == decode[0]).sort("start_ps").rows(named=True)
    total = 0
    for r in prof.ops.filter(pl.col("start_ps").is_not_null()).iter_rows(named=True):
        for run in runs:
            if run["start_ps"] <= r["start_ps"] < run["start_ps"] + run["duration_ps"]:
                total += r["self_ps"]
                break
    assert a.coverage_all.family_ps == pytest.approx(total / len(runs))


def test_step_markers_from_the_engine_fixture_define_cpu_steps():
    """The engine wraps each decode step in ``StepTraceAnnotation("decode", step_num=i)``; on a
    CPU trace the reader exposes them and the step anatomy uses them (same host clock)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "fixtures"
    prof = traceview.load(root / "greedy_b8")
    mk = prof.step_markers
    assert mk["name"].to_list() == ["decode"] * 3 and mk["step_num"].to_list() == [3, 4, 5]
    a = prof.steps()
    assert a.method == "markers" and a.coverage.n_steps == 3
    _check_identities(a)
    # each marker window holds exactly one execution of the decode program and of the sampler
    for r in mk.iter_rows(named=True):
        lo, hi = r["start_ps"], r["start_ps"] + r["duration_ps"]
        inside = prof.module_runs.filter((pl.col("start_ps") >= lo) & (pl.col("start_ps") < hi))
        assert sorted(inside["module"].to_list()) == ["jit_decode_b8_bkv128", "jit_greedy_b8"]
    # naming a module, or markers=None, falls back to module executions
    assert prof.steps(module="jit_decode_b8_bkv128").method == "module"
    assert prof.steps(markers=None).method == "module"
    # TPU ops run on the device clock: host markers are never applied there automatically
    v6e = traceview.load(Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "tpu_v6e_4chip_psum.xplane.pb")
    assert v6e.steps().method == "module"
