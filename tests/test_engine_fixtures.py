"""The committed engine traces (fixtures/, recorded by fixtures/record.py) read back with
traceview: one decode module per request bucket, the KV block in the kernel name, and the
top-p binary-search sampler present only in the top-p trace."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import traceview
from traceview.kernels import parse_kernel_config

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
DECODE_STEPS = 3  # max_tokens=4: the first token comes from prefill


def _load(name):
    runs = list((FIXTURES / name / "plugins" / "profile").glob("*/engine-cpu.xplane.pb"))
    assert len(runs) == 1, runs
    assert runs[0].stat().st_size < 2_000_000
    return traceview.load(str(FIXTURES / name))


def _modules(prof):
    return dict(prof.modules().select("module", "executions").iter_rows())


def _ops_matching(prof, text):
    df = prof.by_shape()
    return df.filter(pl.col("framework_op").fill_null("").str.contains(text, literal=True))


@pytest.mark.parametrize("name,batch", [("greedy_b4", 4), ("greedy_b8", 8)])
def test_greedy_fixture_buckets_and_kernel_name(name, batch):
    prof = _load(name)
    mods = _modules(prof)
    decode = [m for m in mods if m.startswith("jit_decode_")]
    assert decode == [f"jit_decode_b{batch}_bkv128"] and mods[decode[0]] == DECODE_STEPS
    assert mods[f"jit_greedy_b{batch}"] == DECODE_STEPS
    assert mods["jit_greedy_b1"] == batch  # one prefill (and first-token argmax) per request
    assert not [m for m in mods if m.startswith("jit_sample_")]
    kernel = _ops_matching(prof, "RPAd-")
    assert kernel.height > 0
    assert {parse_kernel_config(op)["bkv"] for op in kernel["framework_op"]} == {(128, 128)}
    assert _ops_matching(prof, "topp_binary_search").height == 0


def test_topp_fixture_has_32_iteration_binary_search():
    prof = _load("topp_b4")
    mods = _modules(prof)
    assert mods["jit_sample_b4"] == DECODE_STEPS and mods["jit_sample_b1"] == 4
    assert not [m for m in mods if m.startswith("jit_greedy_")]
    search = _ops_matching(prof, "topp_binary_search")
    in_sampler = search.filter(pl.col("modules").list.contains("jit_sample_b4"))
    assert in_sampler.height > 0
    assert all(s and "sampling.py" in s for s in in_sampler["source"].to_list())
    # Ops inside the loop body run 32 times per sampler call (top_p = 1.0 here).
    body = in_sampler.filter(pl.col("framework_op").str.contains("while/body", literal=True)
                             & (pl.col("modules").list.len() == 1))
    assert body.height > 0 and set(body["occurrences"].to_list()) == {32 * DECODE_STEPS}


@pytest.mark.parametrize("name", ["greedy_b4", "topp_b4"])
def test_rerecording_matches_the_golden_summary(name, tmp_path):
    """The same configuration recorded again (fixtures/record.py into a temporary folder)
    matches the committed fixture's golden summary in its structure, exactly: populations,
    occurrences, module executions, kernels. Times are not compared: shares of a fresh CPU
    recording move by up to 18 points between recordings and failed the ±25-point family
    bound on a loaded machine. The time tolerances are checked on the committed fixture: a
    real regression (the largest population taking three times its share) fails them."""
    import importlib.util

    from traceview import testing as tvt

    spec = importlib.util.spec_from_file_location("record", FIXTURES / "record.py")
    record = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(record)
    run = record.record(name, tmp_path)
    golden = tvt.golden_summary(_load(name))
    again = tvt.golden_summary(traceview.load(str(run)))
    assert tvt.compare_summaries(again, golden, check_times=False) == []
    # the exact parts are exact
    assert again["modules"] == golden["modules"] and again["kernels"] == golden["kernels"]
    assert [p["occurrences"] for p in again["populations"]] == [p["occurrences"] for p in golden["populations"]]
    worse = {**golden, "populations": [dict(p) for p in golden["populations"]]}
    top = max(worse["populations"], key=lambda p: p["share"])
    top["share"] = min(1.0, top["share"] * 3 + 0.2)
    top["self_ps"] = top["self_ps"] * 3 + 20_000_000  # its time, with its share
    assert tvt.compare_summaries(golden, golden) == []
    assert any("of op time" in d for d in tvt.compare_summaries(golden, worse))
