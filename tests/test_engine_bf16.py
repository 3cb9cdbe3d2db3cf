"""The bundled engine in bfloat16 (issue 26 item 3): the production-like logits path (the
runner converts the bf16 logits to float32, the greedy sampler returns a float32 copy) and
the ``greedy_bf16_logits`` treatment that skips both, on real CPU recordings.

The model is tiny with a vocabulary of 1,000 that no other dimension shares, so every
``[batch, 1000]`` array is logits. Only structure and counts are asserted, never times."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

import jax  # noqa: E402  (the engine extra: installed wherever the tests run; never skipped)
import jax.numpy as jnp  # noqa: E402

import traceview  # noqa: E402
from traceview.analysis.findings import Inputs, decode  # noqa: E402
from traceview.engine_shim.config import ModelConfig  # noqa: E402
from traceview.engine_shim.engine import LLM  # noqa: E402
from traceview.engine_shim.sampling import SamplingParams  # noqa: E402

V = 1000
MC = ModelConfig("bf16-test", vocab_size=V, d_model=64, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=32,
                 mlp_hidden=128, cpu_ok=True)
PROMPTS = ["Hello, my name is", "The capital of France is", "The future of AI is", "abc"]
GREEDY = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
STEPS = 5  # decode steps of one generation: 6 tokens, the first from prefill


def _engine(**kw):
    return LLM(MC, dtype="bfloat16", max_num_seqs=8, max_model_len=64, precompile=False, **kw)


def _record(llm, log_dir):
    llm.generate(PROMPTS, GREEDY)  # compile outside the profile
    llm.start_profile(log_dir)
    try:
        outs = llm.generate(PROMPTS, GREEDY)
    finally:
        run = llm.stop_profile()
    return [o.outputs[0].token_ids for o in outs], traceview.load(run, stale_after_s=None)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """(tokens, profile) of the production-like engine and of the treatment, batch bucket 8."""
    d = tmp_path_factory.mktemp("bf16")
    return {"base": _record(_engine(), d / "base"), "treat": _record(_engine(greedy_bf16_logits=True), d / "treat")}


def _pops(prof) -> pl.DataFrame:
    """(module, op_kind, shape) -> occurrences of the profile's ops."""
    return (prof.ops.group_by("module", "op_kind", "shape").agg(pl.len().alias("n"))
            .sort("module", "op_kind", "shape"))


def _count(pops, module, kind, shape) -> int:
    hit = pops.filter((pl.col("module") == module) & (pl.col("op_kind") == kind) & (pl.col("shape") == shape))
    return int(hit["n"].sum()) if hit.height else 0


def test_dtype_reaches_weights_kv_and_logits():
    llm = _engine()
    assert llm.model_config.dtype == "bfloat16" and llm.config.kv_dtype == "bfloat16"
    assert {x.dtype for x in jax.tree.leaves(llm.params)} == {jnp.dtype(jnp.bfloat16)}
    assert llm.k_cache[0].dtype == jnp.bfloat16
    assert LLM(MC, dtype="bfloat16", kv_dtype="float32", precompile=False).config.kv_dtype == "float32"
    assert LLM(MC, precompile=False).model_config.dtype == "float32"  # the preset's, unchanged
    assert llm.upcast_logits and "logits_f32_b8" in llm.bucket_names()
    treat = _engine(greedy_bf16_logits=True)
    names = treat.bucket_names()
    assert not treat.upcast_logits and not any(n.startswith(("logits_f32", "sample")) for n in names)


def test_treatment_refusals():
    with pytest.raises(ValueError, match="needs a bfloat16 model"):
        LLM(MC, greedy_bf16_logits=True, precompile=False)
    llm = _engine(greedy_bf16_logits=True)
    for sp in (SamplingParams(max_tokens=2, temperature=1.0), SamplingParams(max_tokens=2, temperature=0.0,
                                                                            repetition_penalty=1.2)):
        with pytest.raises(ValueError, match="greedy requests only"):
            llm.generate(PROMPTS[:1], sp)


def test_production_path_converts_and_copies_the_logits_every_step(recorded):
    """Per decode step: the decode program rounds its float32-accumulated logits to bf16, the
    runner's program converts them to float32, the greedy program returns a float32 copy."""
    _, prof = recorded["base"]
    n = prof.step_markers.filter(pl.col("name") == "decode").height
    assert n == STEPS
    pops = _pops(prof)
    assert _count(pops, "jit_logits_f32_b8", "fusion", f"f32[8,{V}] <- bf16[8,{V}]") == n
    assert _count(pops, "jit_greedy_b8", "copy", f"f32[8,{V}] <- f32[8,{V}]") == n
    assert pops.filter(pl.col("module") == "jit_greedy_b8")["shape"].str.contains(f"<- f32\\[8,{V}\\]$").all()
    # the prefill's logits take the same path at bucket 1
    assert _count(pops, "jit_logits_f32_b1", "fusion", f"f32[1,{V}] <- bf16[1,{V}]") == len(PROMPTS)
    # the [batch, vocabulary] rule sees the three populations at batch 8, in every step (the
    # default "steady" window drops steps whose time is an outlier, which a loaded CPU makes)
    c = decode.logits_cost(Inputs(prof.analyze(step_window="all")))
    assert c is not None and c["vocab"] == V and c["batch"] == 8
    got = sorted(zip(c["rows"]["module"], c["rows"]["shape"], c["rows"]["count"]))
    assert got == [("jit_decode_b8_bkv64", f"bf16[8,{V}] <- f32[8,{V}]", n),
                   ("jit_greedy_b8", f"f32[8,{V}] <- f32[8,{V}]", n),
                   ("jit_logits_f32_b8", f"f32[8,{V}] <- bf16[8,{V}]", n)]


def test_treatment_skips_both_and_keeps_the_tokens(recorded):
    toks, prof = recorded["treat"]
    assert toks == recorded["base"][0]  # a widening conversion cannot change the argmax
    pops = _pops(prof)
    assert not pops["module"].str.starts_with("jit_logits_f32").any()
    assert pops.filter(pl.col("op_kind") == "copy")["shape"].str.contains(f"\\[8,{V}\\]").sum() == 0
    assert pops.filter(pl.col("shape") == f"f32[8,{V}] <- bf16[8,{V}]").height == 0
    greedy = pops.filter(pl.col("module") == "jit_greedy_b8")
    assert greedy.height and greedy["shape"].str.ends_with(f"<- bf16[8,{V}]").all()  # argmax reads the bf16 logits
    c = decode.logits_cost(Inputs(prof.analyze(step_window="all")))  # only the decode program's rounding to bf16 is left
    assert c is not None and c["rows"]["module"].to_list() == ["jit_decode_b8_bkv64"]


def test_cli_flags(tmp_path, capsys):
    from traceview.engine_shim.cli import main

    assert main(["profile", "--greedy-bf16-logits", "--sampling", "topp"]) == 2
    assert "--greedy-bf16-logits needs greedy sampling" in capsys.readouterr().err
    assert main(["profile", "--greedy-bf16-logits"]) == 2  # tiny is float32 unless --dtype bfloat16
    assert "needs a bfloat16 model" in capsys.readouterr().err
    assert main(["bench", "--dtype", "float16"]) == 2
    out = tmp_path / "r.json"
    assert main(["bench", "--dtype", "bfloat16", "--greedy-bf16-logits", "--batch-mult", "1", "--max-tokens", "2",
                 "--max-num-seqs", "4", "--max-model-len", "64", "--no-precompile", "--json", str(out)]) in (0, 1)
    assert "dtype=bfloat16 logits=bf16 (argmax on them)" in capsys.readouterr().out
    c = json.loads(out.read_text())["config"]
    assert (c["dtype"], c["kv_dtype"], c["greedy_bf16_logits"], c["logits_f32"]) == ("bfloat16", "bfloat16", True, False)
    assert np.isfinite(json.loads(out.read_text())["wall_tokens_per_s"])
