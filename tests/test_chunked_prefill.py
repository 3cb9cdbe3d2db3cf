"""Chunked, batched prefill and the prefix cache of the bundled engine (engine_shim).

Real engine runs on CPU: the greedy tokens of chunked prefill against one-request prefill,
prefix-cache hits on a repeated prompt set, and two profiles of the ``study`` preset (top-p
and greedy) read back with traceview: the top-p search among the top populations and gone
under greedy, and a prefill population whose token dimension is the budget.
"""

from __future__ import annotations

import json
import math

import polars as pl
import pytest

pytest.importorskip("jax")

from traceview.engine_shim.kv_cache import PageAllocator, PrefixCache, page_hashes  # noqa: E402
from traceview.engine_shim.sampling import SamplingParams  # noqa: E402

GREEDY = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
# 18, 38, 41 and 76 tokens (BOS included): one to four full 16-token pages each
PROMPTS = ["Hello, my name is", "The president of the United States is", "x" * 40, "The capital of France is " * 3]
TINY = dict(max_num_seqs=4, max_model_len=128, min_request_bucket=2, precompile=False)


def test_page_hashes_chain_contents_and_position():
    ids = list(range(40))
    a = page_hashes(ids, 16)
    assert len(a) == 2 and a == page_hashes(list(ids), 16)  # the partial third page has no key
    b = page_hashes([99] + ids[1:], 16)
    assert b[0] != a[0] and b[1] != a[1]  # a change in page 0 changes every later key (chained)
    c = page_hashes(ids[:16] + [99] + ids[17:], 16)
    assert c[0] == a[0] and c[1] != a[1]
    same = page_hashes([7] * 32, 16)
    assert same[0] != same[1]  # equal contents at another position: another key


def test_prefix_cache_refcounts_hits_and_eviction():
    pc = PrefixCache(PageAllocator(5), page_size=4)  # pages 1..4
    keys = page_hashes(list(range(9)), 4)  # two full pages
    first, hits = pc.allocate(keys, 3, max_hit_pages=2)
    assert (first, hits) == ([1, 2, 3], 0)
    pc.register(keys[0], first[0])
    pc.register(keys[1], first[1])
    second, hits = pc.allocate(keys, 3, max_hit_pages=2)
    assert (second, hits) == ([1, 2, 4], 2)
    assert (pc.queried_pages, pc.hit_pages, pc.queried_tokens, pc.hit_tokens) == (4, 2, 16, 8)
    pc.release(first)  # page 3 is free again; pages 1 and 2 are still held by the second request
    assert pc.allocator.num_free == 1 and pc.num_available == 1
    pc.release(second)  # 1 and 2 stay cached (evictable), 4 goes back to the free list
    assert pc.num_available == 4 and pc.num_cached == 2
    with pytest.raises(MemoryError):
        pc.allocate([], 5, max_hit_pages=0)
    assert pc.queried_pages == 4  # a refused request counts nothing
    other, hits = pc.allocate(page_hashes(list(range(100, 109)), 4), 4, max_hit_pages=2)
    assert hits == 0 and sorted(other) == [1, 2, 3, 4] and pc.num_cached == 0  # a miss evicted both
    assert pc.match(keys, 2) == []
    pc.release(other)
    with pytest.raises(ValueError, match="not held"):
        pc.release([1])


@pytest.fixture(scope="module")
def one_request_outputs():
    from traceview.engine_shim.engine import LLM

    llm = LLM("tiny", **TINY)
    return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY)]


def test_chunked_prefill_matches_one_request_prefill(one_request_outputs):
    from traceview.engine_shim.engine import LLM

    llm = LLM("tiny", enable_chunked_prefill=True, max_num_batched_tokens=16, **TINY)
    outs = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY)]
    assert outs == one_request_outputs  # bit-identical greedy tokens, 4 x 10
    total = sum(len(llm.tokenizer.encode(p)) for p in PROMPTS)  # 173
    s = llm.stats
    # FIFO packing fills the 16-token budget at every step but the last
    assert (s.num_prefill_steps, s.num_prefill_computed_tokens, s.num_prefills) == (math.ceil(total / 16), total, 4)
    assert s.num_prefill_chunks > len(PROMPTS)  # prompts were split
    prefills = [m for m in s.compiled_modules if "prefill" in m]
    assert prefills and all(m.startswith("jit_prefill_t16_r") for m in prefills), prefills
    assert llm.allocator.num_free == llm.config.total_pages - 1


def test_prefix_cache_hits_on_a_repeated_prompt_set(one_request_outputs):
    from traceview.engine_shim.engine import LLM

    llm = LLM("tiny", enable_prefix_caching=True, max_num_batched_tokens=32, **TINY)
    pages = sum((len(llm.tokenizer.encode(p)) - 1) // 16 for p in PROMPTS)  # 1 + 2 + 2 + 4 full pages
    first = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY)]
    s = llm.stats
    assert (s.prefix_queried_pages, s.prefix_hit_pages) == (pages, 0)
    computed = s.num_prefill_computed_tokens
    again = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY)]
    assert first == again == one_request_outputs
    assert (s.prefix_queried_pages, s.prefix_hit_pages) == (2 * pages, pages)
    assert (s.prefix_queried_tokens, s.prefix_hit_tokens) == (2 * pages * 16, pages * 16)
    assert s.num_prefill_computed_tokens - computed == computed - pages * 16  # hits were not recomputed
    assert llm.pool.num_available == llm.config.total_pages - 1 and llm.pool.num_cached == pages


def test_cli_bench_reports_prefix_hits(capsys):
    from traceview.engine_shim.cli import main

    args = ["bench", "--max-tokens", "2", "--batch-mult", "1", "--max-model-len", "128", "--no-precompile",
            "--enable-prefix-caching", "--prefix-tokens", "40", "--time-tolerance", "1",
            "--max-num-batched-tokens", "32"]  # a loaded machine's gaps between tiny steps are no defect here
    assert main([*args, "--format", "json"]) == 0
    r = json.loads(capsys.readouterr().out)
    from traceview.engine_shim.bench import PROMPTS as BENCH

    pages = sum((1 + 40 + len(p) - 1) // 16 for p in BENCH)
    main_run = r["prefill"]["main"]  # warm-up and TTFT runs cached every full prompt page
    assert (main_run["queried_pages"], main_run["hit_pages"], main_run["hit_rate"]) == (pages, pages, 1.0)
    assert r["config"]["enable_chunked_prefill"] and r["config"]["max_num_batched_tokens"] == 32
    assert main(args[:-2] + ["--max-num-batched-tokens", "0"]) == 2
    err = capsys.readouterr().err
    assert err == "traceview engine: error: --max-num-batched-tokens=0 must be a positive integer\n"


# ---------------------------------------------------------------------------- study profiles
STUDY_BUDGET = 64


@pytest.fixture(scope="module")
def study_profiles(tmp_path_factory):
    """One study-preset engine (batch 8, chunked prefill at a 64-token budget), two profiled
    generations of 2 tokens per request: top-p then greedy. Returns (llm, {mode: (run, steps)})."""
    from traceview.engine_shim.bench import PROMPTS as BENCH, sampling_params
    from traceview.engine_shim.engine import LLM

    llm = LLM("study", max_num_seqs=8, max_model_len=128, max_num_batched_tokens=STUDY_BUDGET,
              enable_chunked_prefill=True, precompile=False)
    runs = {}
    for mode in ("topp", "greedy"):
        steps0 = llm.stats.num_prefill_steps
        llm.start_profile(tmp_path_factory.mktemp(mode))
        llm.generate(BENCH * 2, sampling_params(mode, 2))
        runs[mode] = (llm.stop_profile(), llm.stats.num_prefill_steps - steps0)
    return llm, runs


def test_study_topp_search_is_a_top_population_and_gone_under_greedy(study_profiles):
    from traceview.api import load, verify
    from traceview.render.verify import verify_text

    _, runs = study_profiles
    topp, greedy = runs["topp"][0], runs["greedy"][0]
    rep = verify(topp, ["op matching topp_binary_search present", "op matching topp_binary_search/while/body/add count == 32 per execution"])
    assert rep.ok, verify_text(rep)
    assert verify(greedy, ["no op matching topp_binary_search"]).ok
    assert not verify(topp, ["no op matching topp_binary_search"]).ok
    ops = load(topp).by_shape()  # the search's populations by what they are, not by their rank in time
    search = ops.filter(pl.col("framework_op").fill_null("").str.contains("topp_binary_search"))
    assert any(s.startswith("f32[8,256000]") for s in search["shape"]), search.select("op_name", "shape")


def test_study_chunked_prefill_population_at_the_budget(study_profiles):
    from traceview.api import load

    llm, runs = study_profiles
    run, steps = runs["greedy"]
    from traceview.engine_shim.bench import PROMPTS as BENCH

    total = sum(len(llm.tokenizer.encode(p)) for p in BENCH * 2)
    assert steps == math.ceil(total / STUDY_BUDGET)
    t = load(run).by_shape()
    # the query projection of each layer at the budget's token dimension, once per full-budget step
    q = t.filter(t["shape"].str.starts_with(f"f32[{STUDY_BUDGET},2048] <- f32[{STUDY_BUDGET},256]"))
    modules = {m for ms in q["modules"].to_list() for m in ms}
    assert modules and all(m.startswith(f"jit_prefill_t{STUDY_BUDGET}_r") for m in modules), q
    assert q["occurrences"].sum() == llm.model_config.num_layers * (total // STUDY_BUDGET)


def test_study_chunked_prefill_phases(study_profiles):
    """Each prefill chunk is an execution of a prefill program (as many as the engine's prefill
    steps); each step is decode or mixed (a chunk between two decode steps), with its reason."""
    import polars as pl

    from traceview.analysis import derived
    from traceview.analysis.steps.phases import phases
    from traceview.api import load

    _, runs = study_profiles
    run, steps = runs["greedy"]
    prof = load(run)
    ph = phases(prof, derived.step_anatomy(prof), None)
    assert ph.executions.filter(pl.col("phase") == "prefill").height == steps
    labels = set(ph.steps["phase"].to_list())
    assert labels <= {"decode", "mixed"} and "decode" in labels
    for r in ph.steps.iter_rows(named=True):
        assert "jit_decode_b" in r["why"], r
        assert (r["phase"] == "mixed") == ("prefill" in r["why"] and not r["why"].startswith("the first step")), r
