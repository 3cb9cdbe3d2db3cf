"""Source attribution (traceview.analysis.ops.sources) on real traces, cross-checked by plain Python.

The expected files and shares below were read off the traces; each test also recomputes them
independently (from the raw trace JSON, or by summing the op table row by row).
"""

from __future__ import annotations

import gzip
import json
from collections import Counter

import polars as pl
import pytest

from traceview.model.files import read_file
from traceview.analysis.ops import sources
from traceview.errors import UsageError
from traceview.model.schema import OPS_SCHEMA, frame

VLLM = "vllm_tpu_qwen/plugins/profile/2026_01_11_21_26_41/t1v-n-9eb622fc-w-0.trace.json.gz"
QWEN2 = "/home/amandaliang_google_com/vllm/vllm/model_executor/models/qwen2.py"
ATTN_IFACE = "/home/amandaliang_google_com/tpu-inference/tpu_inference/layers/common/attention_interface.py"
TORCH_MODULE = "/mnt/pd/vllm_env/lib/python3.12/site-packages/torch/nn/modules/module.py"


@pytest.fixture(scope="module")
def vllm_ops(shared_traces):
    return read_file(shared_traces / VLLM).ops


@pytest.fixture(scope="module")
def vllm_raw(shared_traces):
    """XLA Ops events of the vLLM trace straight from the JSON (no traceview code)."""
    with gzip.open(shared_traces / VLLM, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    return [e for e in events if e.get("ph") == "X" and threads.get((e["pid"], e["tid"])) == "XLA Ops"]


def _raw_shares(raw, user: bool) -> dict[str, float]:
    per: Counter = Counter()
    for e in raw:
        a = e["args"]
        src = a.get("source", "").rsplit(":", 1)[0] if a.get("source") else ""
        key = src
        if user:
            files = [ln.rsplit(":", 2)[0] for ln in a.get("source_stack", "").splitlines() if ln.strip()]
            key = next((f for f in files if "site-packages" not in f), src)
        per[key] += e["dur"]
    total = sum(per.values())
    return {k: v / total for k, v in per.items()}


@pytest.mark.parametrize("path,origin", [
    ("/mnt/pd/vllm_env/lib/python3.12/site-packages/torch/nn/modules/module.py", "site-packages"),
    ("/usr/lib/python3/dist-packages/numpy/core/numeric.py", "site-packages"),
    ("/usr/lib/python3.11/threading.py", "site-packages"),
    ("/opt/conda/lib/python3.12/concurrent/futures/thread.py", "site-packages"),
    ("C:\\Python311\\Lib\\site-packages\\jax\\numpy.py", "site-packages"),
    ("<frozen runpy>", "site-packages"),
    ("<embedded module '_launcher'>", "site-packages"),
    ("third_party/py/absl/app.py", "site-packages"),
    ("/home/me/vllm/vllm/model_executor/models/qwen2.py", "project"),
    ("my_kernels/kernel.py", "project"),
    ("/tmp/ipykernel_1234/3412.py", "project"),
    ("<ipython-input-3-abc>", "project"),
    ("", ""),
    (None, ""),
])
def test_classify_path(path, origin):
    assert sources.classify_path(path) == origin


def test_frames_are_innermost_first_in_either_stack_order(shared_traces):
    # vLLM writes innermost first: the direct source is the first frame
    inner_first = "a/site-packages/torchax/tensor.py:602:14\nproj/rotary.py:173:24\nproj/custom_op.py:78:15"
    fr = sources.frames(inner_first, "a/site-packages/torchax/tensor.py", 602)
    assert fr[0] == ("a/site-packages/torchax/tensor.py", 602) and fr[-1] == ("proj/custom_op.py", 78)
    # the TPU v6e trace writes outermost first (launcher ... line 29): read it reversed
    ops = read_file(shared_traces / "tpu_v6e_4chip_psum.xplane.pb").ops
    row = ops.filter(pl.col("category") == "loop fusion").row(0, named=True)
    assert (row["source_file"], row["source_line"]) == (
        "experimental/users/davelacey/host_offload_stress_test/host_offload_stress_test.py", 29)
    assert row["source_stack"].splitlines()[0].startswith("<embedded module '_launcher'>")
    fr = sources.frames(row["source_stack"], row["source_file"], row["source_line"])
    assert fr[0] == (row["source_file"], 29)
    assert fr[-1] == ("<embedded module '_launcher'>", 153)
    # so the user frame is line 29 (innermost project frame), not the launcher's caller
    att = sources.attribute(ops.filter(pl.col("category") == "loop fusion").head(1))
    assert att.row(0, named=True)["user_line"] == 29


def test_vllm_direct_source_shares_match_raw_json(vllm_ops, vllm_raw):
    table = sources.by_file(vllm_ops)
    got = {r["file"]: r for r in table.iter_rows(named=True)}
    raw = _raw_shares(vllm_raw, user=False)
    # the whole table, file by file, agrees with the raw JSON
    assert set(got) == set(raw)
    for f, share in raw.items():
        assert got[f]["share"] == pytest.approx(share, abs=1e-6)
    # figures read off the trace
    assert table["file"][0] == TORCH_MODULE and got[TORCH_MODULE]["origin"] == "site-packages"
    assert got[TORCH_MODULE]["share"] == pytest.approx(0.49268, abs=1e-5)
    assert got[ATTN_IFACE]["share"] == pytest.approx(0.33182, abs=1e-5)
    assert got[QWEN2]["share"] == pytest.approx(0.013024, abs=1e-5)
    assert got[QWEN2]["origin"] == "project" and got[QWEN2]["occurrences"] == 384
    assert table["share"].sum() == pytest.approx(1.0)
    # ops with no source are kept as one "" row
    assert got[""]["origin"] == "" and got[""]["occurrences"] == 3530


def test_vllm_user_frame_attributes_library_ops_to_the_model(vllm_ops, vllm_raw):
    table = sources.by_file(vllm_ops, frame="user")
    got = {r["file"]: r for r in table.iter_rows(named=True)}
    raw = _raw_shares(vllm_raw, user=True)
    assert set(got) == set(raw)
    for f, share in raw.items():
        assert got[f]["share"] == pytest.approx(share, abs=1e-6)
    # torch's module.py disappears: its ops are the model's (qwen2.py) and the layers'
    assert TORCH_MODULE not in got
    assert table["file"][0] == QWEN2 and got[QWEN2]["share"] == pytest.approx(0.50570, abs=1e-5)
    assert got[ATTN_IFACE]["share"] == pytest.approx(0.33182, abs=1e-5)
    layer_files = [f for f in got if "/tpu_inference/layers/" in f or "/model_executor/layers/" in f]
    assert len(layer_files) >= 6
    assert set(table["origin"]) == {"project", ""}


def test_vllm_lines_and_the_attention_kernel(vllm_ops):
    lines = sources.by_line(vllm_ops, frame="user")
    top = lines.row(0, named=True)
    assert (top["file"], top["line"]) == (ATTN_IFACE, 335)
    # the RPA attention kernel: emitted through torch's module.py, called from qwen2.py:228
    att = sources.attribute(vllm_ops.filter(pl.col("op_name").str.starts_with("RPA")))
    assert att.height == 128
    assert set(att["src_file"]) == {TORCH_MODULE} and set(att["src_origin"]) == {"site-packages"}
    assert set(zip(att["user_file"], att["user_line"])) == {(QWEN2, 228)}
    q = lines.filter((pl.col("file") == QWEN2) & (pl.col("line") == 228)).row(0, named=True)
    # independent: sum the table row by row
    expect = sum(r["self_ps"] for r in att.iter_rows(named=True))
    assert q["self_ps"] >= expect
    total = sum(vllm_ops["self_ps"].to_list())
    assert q["share"] == pytest.approx(q["self_ps"] / total)


def test_mi300x_gemm_lines_summed_by_hand(shared_traces):
    ops = read_file(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb").ops
    lines = sources.by_line(ops)
    per: Counter = Counter()
    names: dict = {}
    for r in ops.iter_rows(named=True):
        per[(r["source_file"], r["source_line"])] += r["self_ps"]
        names.setdefault((r["source_file"], r["source_line"]), set()).add(r["op_name"])
    total = sum(per.values())
    assert lines.height == len(per)
    for r in lines.iter_rows(named=True):
        key = (r["file"], r["line"])
        assert r["self_ps"] == per[key]
        assert r["share"] == pytest.approx(per[key] / total)
        assert r["n_ops"] == len(names[key])
    top = lines.row(0, named=True)
    assert (top["file"], top["line"], top["origin"]) == ("/workspace/traces/generate_gemm_trace.py", 37, "project")
    assert top["self_ps"] == 3233884000 and top["occurrences"] == 18


def test_transplanted_kernel_shows_in_the_origin_column():
    installed = "/venv/lib/python3.12/site-packages/tpu_inference/kernels/ragged_paged_attention/v3/kernel.py"
    copied = "/home/me/bench/my_rpa/kernel.py"
    rows = {k: [] for k in OPS_SCHEMA}
    for src, dur in ((installed, 700), (installed, 700), (copied, 600)):
        for k in OPS_SCHEMA:
            rows[k].append(None)
        rows["op_name"][-1] = "RPAd-bq_1-bkv_2048"
        rows["shape"][-1] = "bf16[128,8,128]"
        rows["source_file"][-1] = src
        rows["source_line"][-1] = 412
        rows["source_stack"][-1] = f"{src}:412:5\n/home/me/bench/model.py:88:3"
        rows["self_ps"][-1] = rows["duration_ps"][-1] = dur
        rows["count"][-1] = 1
    ops = frame(rows, OPS_SCHEMA)
    files = sources.by_file(ops)
    assert dict(zip(files["file"], files["origin"])) == {installed: "site-packages", copied: "project"}
    pop = sources.by_file_and_population(ops)
    assert pop["population_self_ps"].to_list() == [2000, 2000]
    assert dict(zip(pop["file"], pop["population_share"])) == {installed: 0.7, copied: 0.3}
    # the user frame would fold both into the caller: that is why direct is the default
    assert set(sources.by_file(ops, frame="user")["file"]) == {copied, "/home/me/bench/model.py"}


def test_file_and_population_shares(shared_traces):
    ops = read_file(shared_traces / "mi300x_jax_attention.xplane.pb").ops
    pop = sources.by_file_and_population(ops)
    sums = pop.group_by(["op_name", "shape"]).agg(pl.col("population_share").sum())
    assert sums["population_share"].to_list() == pytest.approx([1.0] * sums.height)
    assert pop["share"].sum() == pytest.approx(1.0)
    # independent: the population self time is the table's sum over that (op_name, shape)
    r = pop.row(0, named=True)
    expect = sum(x["self_ps"] for x in ops.iter_rows(named=True)
                 if x["op_name"] == r["op_name"] and x["shape"] == r["shape"])
    assert r["population_self_ps"] == expect


def test_bad_frame_and_empty_input():
    with pytest.raises(UsageError, match="unknown source frame 'outer'"):
        sources.by_file(pl.DataFrame(schema=OPS_SCHEMA), frame="outer")
    empty = pl.DataFrame(schema=OPS_SCHEMA)
    assert sources.by_file(empty).columns == ["file", "origin", "occurrences", "self_ps", "share", "n_ops"]
    assert sources.by_line(empty, frame="user").height == 0
    assert sources.by_file_and_population(empty).height == 0
    assert sources.attribute(empty).columns[-6:] == sources.ATTRIBUTE_COLUMNS


def test_engine_fixture_files():
    from pathlib import Path

    found = sorted((Path(__file__).resolve().parents[1] / "fixtures").glob("topp_b4/plugins/profile/*/*.xplane.pb"))
    ops = read_file(found[0]).ops
    files = sources.by_file(ops)
    known = {"/work/main/engine_shim/model.py", "/work/main/kernels/paged_attention.py",
             "/work/main/engine_shim/sampling.py", "/work/main/engine_shim/kv_cache.py"}  # kv_cache: the quantizing cache write
    assert set(files["file"]) == known | {""}
    assert set(files.filter(pl.col("file") != "")["origin"]) == {"project"}
    # independent: occurrences per file counted row by row
    per: Counter = Counter()
    for r in ops.iter_rows(named=True):
        per[r["source_file"]] += r["count"]
    assert dict(zip(files["file"], files["occurrences"])) == dict(per)
