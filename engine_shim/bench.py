"""Benchmark harness with the study's protocol; returns results, prints nothing.

Protocol (reference study, "Environment, Stack, and Measurement Harness"):

1. build the engine and time initialisation separately (``init_s``; precompile inside it
   reported as ``precompile_s``);
2. warm up with a small generation over the same prompt set (first-touch paths);
3. batch TTFT: generate exactly one token for every prompt (``ttft_s``);
4. main generation: ``max_tokens`` (default 128) per request, temperature 0 (greedy) or the
   top-p sampler; optionally wrapped in ``start_profile`` / ``stop_profile`` so the trace
   holds the main generation only;
5. ``itl_s = (main_s - ttft_s) / max_tokens``; wall-clock tokens/s = output tokens /
   ``main_s``; engine tokens/s = the engine's own counter delta / the engine's own time in
   ``generate`` — the two must agree within a few percent (the study's paired check).

Workload: the four short vLLM example prompts repeated ``batch_mult`` times. Every request
generates exactly ``max_tokens`` (``ignore_eos=True``) so per-request token counts are fixed.
Throughput quoted from a profiled run is not a headline number (tracing adds overhead); the
result says ``"profiled": true``.
"""

from __future__ import annotations

import platform
import time
from dataclasses import asdict

import jax

from .engine import LLM
from .sampling import SamplingParams

PROMPTS = [
    "Hello, my name is",
    "The president of the United States is",
    "The capital of France is",
    "The future of AI is",
]

SAMPLING_MODES = ("greedy", "topp")


def sampling_params(mode: str, max_tokens: int, *, top_p: float = 1.0, temperature: float = 1.0,
                    repetition_penalty: float = 1.0) -> SamplingParams:
    """``greedy``: temperature 0 (no sampler). ``topp``: the top-p sampler path, by default at
    ``top_p=1.0`` — a no-op that still pays the 32-iteration search (the study's first finding).

    Raises: ValueError for an unknown mode.
    """
    if mode == "greedy":
        return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    if mode == "topp":
        return SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                              repetition_penalty=repetition_penalty, ignore_eos=True)
    raise ValueError(f"sampling mode {mode!r} must be one of {SAMPLING_MODES}")


def run_bench(*, model: str = "tiny", max_num_seqs: int = 8, max_model_len: int = 512, batch_mult: int = 2,
              max_tokens: int = 128, kv_block_size: int | None = None, sampling: str = "greedy", top_p: float = 1.0,
              temperature: float = 1.0, repetition_penalty: float = 1.0, profile: bool = False,
              log_dir: str = "./profile", warmup_tokens: int = 4, precompile: bool = True, seed: int = 0,
              prompts: list[str] | None = None, kv_dtype: str | None = None, kv_cache_bytes: int | None = None) -> dict:
    """Run the protocol once; returns a JSON-serialisable dict (times in seconds).

    Keys: ``config`` (the arguments, resolved KV block and KV dtype), ``kv_capacity``
    (:meth:`~traceview.engine_shim.kv_cache.KVCapacity.as_dict`), ``init_s``, ``precompile_s``,
    ``ttft_s``, ``main_s``, ``itl_s``, ``num_requests``, ``tokens_per_request``,
    ``output_tokens``, ``wall_tokens_per_s``, ``engine_tokens_per_s``, ``engine_counted_tokens``,
    ``tokens_per_s_rel_diff`` (|engine - wall| / wall), ``decode_steps`` (every decode step since
    start-up, warm-up included), ``main_decode_steps`` (those of the main generation: what a
    profile of it holds, the N of ``traceview analyze --steps N``), ``profiled``, ``profile_dir`` (run
    folder or None), ``compiled_modules``, ``environment``.

    Raises: ValueError for invalid arguments (including ``TRACEVIEW_KV_BLOCK_SIZE``).
    """
    if batch_mult < 1 or max_tokens < 1:
        raise ValueError(f"batch_mult={batch_mult} and max_tokens={max_tokens} must be >= 1")
    base = list(prompts) if prompts else PROMPTS
    workload = base * batch_mult
    main_params = sampling_params(sampling, max_tokens, top_p=top_p, temperature=temperature,
                                  repetition_penalty=repetition_penalty)

    t0 = time.perf_counter()
    llm = LLM(model, max_num_seqs=max_num_seqs, max_model_len=max_model_len, kv_block_size=kv_block_size,
              seed=seed, precompile=precompile, kv_dtype=kv_dtype, kv_cache_bytes=kv_cache_bytes)
    init_s = time.perf_counter() - t0

    llm.generate(workload, sampling_params(sampling, max(2, warmup_tokens), top_p=top_p, temperature=temperature,
                                           repetition_penalty=repetition_penalty))

    t0 = time.perf_counter()
    llm.generate(workload, sampling_params(sampling, 1, top_p=top_p, temperature=temperature,
                                           repetition_penalty=repetition_penalty))
    ttft_s = time.perf_counter() - t0

    count0, engine_t0, steps0 = llm.stats.num_generated_tokens, llm.stats.generate_s, llm.stats.num_decode_steps
    run_dir = None
    if profile:
        llm.start_profile(log_dir)
    t0 = time.perf_counter()
    try:
        outs = llm.generate(workload, main_params)
        main_s = time.perf_counter() - t0
    finally:
        if profile:
            run_dir = llm.stop_profile()
    engine_tokens = llm.stats.num_generated_tokens - count0
    engine_s = llm.stats.generate_s - engine_t0
    output_tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    wall_tps = output_tokens / main_s
    engine_tps = engine_tokens / engine_s if engine_s > 0 else float("nan")
    return {
        "config": {"model": model, "max_num_seqs": max_num_seqs, "max_model_len": max_model_len,
                   "batch_mult": batch_mult, "max_tokens": max_tokens, "sampling": sampling,
                   "sampling_params": asdict(main_params), "kv_block_size": llm.kv_block_size,
                   "kv_block_size_requested": kv_block_size, "request_buckets": llm.request_buckets,
                   "token_buckets": llm.token_buckets, "precompile": precompile, "seed": seed,
                   "kv_dtype": llm.config.kv_dtype, "kv_cache_bytes": kv_cache_bytes},
        "kv_capacity": llm.kv_capacity.as_dict(),
        "init_s": init_s,
        "precompile_s": llm.stats.precompile_s,
        "ttft_s": ttft_s,
        "main_s": main_s,
        "itl_s": (main_s - ttft_s) / max_tokens,
        "num_requests": len(workload),
        "tokens_per_request": max_tokens,
        "output_tokens": output_tokens,
        "engine_counted_tokens": engine_tokens,
        "wall_tokens_per_s": wall_tps,
        "engine_tokens_per_s": engine_tps,
        "tokens_per_s_rel_diff": abs(engine_tps - wall_tps) / wall_tps,
        "decode_steps": llm.stats.num_decode_steps,
        "main_decode_steps": llm.stats.num_decode_steps - steps0,
        "profiled": profile,
        "profile_dir": str(run_dir) if run_dir else None,
        "compiled_modules": list(llm.stats.compiled_modules),
        "environment": {"jax": jax.__version__, "backend": jax.default_backend(), "python": platform.python_version(),
                        "machine": platform.machine(), "processor": platform.processor() or None,
                        "cpu_count": _cpu_count()},
    }


def _cpu_count():
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count()
