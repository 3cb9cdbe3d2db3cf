"""Benchmark harness with the study's protocol; returns results, prints nothing.

Protocol (reference study, "Environment, Stack, and Measurement Harness"):

1. build the engine and time initialisation separately (``init_s``; precompile inside it
   reported as ``precompile_s``); read the verification figures off what was allocated and
   compiled (model memory, KV cache capacity, buckets compiled, decode donation);
2. warm up with a small generation over the same prompt set (first-touch paths);
3. batch TTFT: generate exactly one token for every prompt (``ttft_s``);
4. main generation, profiler off: ``max_tokens`` (default 128) per request, temperature 0
   (greedy) or the top-p sampler;
5. ``itl_s = (main_s - ttft_s) / N``, N the tokens each request generated in the main run
   (None when N is 1 or the main run was no longer than the TTFT run: no decode time to
   divide). This is the study's figure, kept as the study defined it: ``main_s - ttft_s``
   is about the time of the N - 1 steps after every request's first token, but it is divided
   by all N tokens, not by those N - 1 gaps, so it reads about (N - 1) / N of the mean gap
   between a request's consecutive tokens (7/8 at N = 8, 127/128 at the default 128). The
   measured per-request gaps are in ``main_token_times`` (summarised in ``goodput``).
   Wall-clock tokens/s = tokens counted from the returned outputs / ``main_s``; the paired
   checks (:func:`counter_checks`) compare them with sources that do not share the wall
   clock: the scheduler's per-step token counters and the step times summed, each step
   blocked on its tokens (``block_until_ready``);
6. goodput under an ITL objective (``itl_slo_ms``, :func:`goodput`): each token of the main
   generation is stamped with the end of the step that produced it (blocked on its tokens);
   a token counts when its gap from the same request's previous token is within the
   objective, whatever steps ran in between (another request's prefill included); a
   request's first token has no such gap and never counts; goodput = those tokens /
   ``main_s``, beside the wall-clock tokens/s; absent without an objective;
7. with ``profile``, a separate run of the main generation inside ``start_profile`` /
   ``stop_profile`` after the headline one, so the trace holds a main generation only and
   no headline figure carries tracing overhead (its own figures are in ``profile_run``).

Workload: the four short vLLM example prompts repeated ``batch_mult`` times, each optionally
after a shared ``prefix_tokens``-token prefix (:func:`shared_prefix`: a system prompt, which
makes prompts long enough to chunk and gives the prefix cache full pages to reuse). Every request
generates exactly ``max_tokens`` (``ignore_eos=True``) so per-request token counts are fixed.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable
from dataclasses import asdict

import jax
import numpy as np

from .engine import LLM
from .sampling import SamplingParams

PROMPTS = [
    "Hello, my name is",
    "The president of the United States is",
    "The capital of France is",
    "The future of AI is",
]

SAMPLING_MODES = ("greedy", "topp")

_SYSTEM = "You are a careful assistant. Answer briefly and cite the passage you used. "


def shared_prefix(num_tokens: int) -> str:
    """A fixed English text of exactly ``num_tokens`` byte tokens (0 gives "")."""
    if num_tokens < 0:
        raise ValueError(f"prefix_tokens={num_tokens} must be >= 0")
    return (_SYSTEM * (num_tokens // len(_SYSTEM) + 1))[:num_tokens]


#: default bound on the time check (relative difference between the main generation's wall
#: clock and its summed step times)
TIME_TOLERANCE = 0.05


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
              prompts: list[str] | None = None, max_num_batched_tokens: int | None = None,
              enable_chunked_prefill: bool = False, enable_prefix_caching: bool = False, prefix_tokens: int = 0,
              donate: bool = True, time_tolerance: float = TIME_TOLERANCE, kv_dtype: str | None = None,
              kv_cache_bytes: int | None = None, host_sampler_mask: bool = False, tensor_parallel: int = 1,
              itl_slo_ms: float | None = None, dtype: str | None = None, greedy_bf16_logits: bool = False,
              step_clock: Callable[[], float] | None = None, on_start: Callable[[dict], None] | None = None,
              interpret: bool | None = None) -> dict:
    """Run the protocol once; returns a JSON-serialisable dict (times in seconds).

    Args (beyond the engine's): ``donate`` (False: the copying decode cache update);
    ``host_sampler_mask`` (a token mask computed on the host each decode step, :func:`~traceview.engine_shim.engine.host_mask`);
    ``tensor_parallel``: devices the model is split over (``LLM(tensor_parallel=...)``);
    ``dtype``: the model dtype (None: the preset's) and ``greedy_bf16_logits`` (argmax on the
    bf16 logits, no float32 conversion or copy; greedy only): ``LLM(dtype=..., greedy_bf16_logits=...)``;
    ``interpret``: the decode kernel in the Pallas interpreter when True (``LLM(interpret=...)``;
    None: compiled on TPU and GPU, interpreted on CPU);
    ``time_tolerance``: bound on the time check's relative difference; ``itl_slo_ms``: the
    inter-token latency objective for ``goodput`` (None: no goodput); ``step_clock``: the
    engine's per-step clock (tests inject a broken one); ``on_start``: called with the
    verification dict right after the engine is built (the CLI prints it to stderr).

    Keys: ``config`` (the arguments, resolved KV block, model dtype and KV dtype), ``kv_capacity``
    (:meth:`~traceview.engine_shim.kv_cache.KVCapacity.as_dict`), ``init_s``, ``precompile_s``, ``ttft_s``, ``main_s``, ``itl_s``,
    ``num_requests``, ``tokens_per_request``, ``output_tokens`` (counted from the returned
    outputs), ``engine_counted_tokens`` (the scheduler's per-step counters), ``steps_s`` (the
    main generation's step times summed, each blocked on its tokens), ``wall_tokens_per_s``
    (outputs / ``main_s``), ``engine_tokens_per_s`` (per-step tokens / ``steps_s``),
    ``tokens_per_s_rel_diff``, ``decode_step_median_s``, ``main_steps`` (the main generation's
    steps: ``[kind, bucket, tokens, seconds]``), ``main_token_times`` (per request, in prompt
    order: the seconds from the start of the main generation, on the step clock, at which each
    of its tokens was ready: the end of the step that produced it), ``goodput``
    (:func:`goodput` of those token times over ``main_s``, or None without ``itl_slo_ms``),
    ``memory`` (``{program: bytes}`` of every program compiled by the end:
    :meth:`LLM.program_memory`, XLA's ``CompiledMemoryStats``), ``checks`` (``tokens``,
    ``time``, ``main_compiles``, ``ok``), ``verification`` (after start-up) and ``verification_end``
    (after the main generation; :meth:`LLM.verification`), ``decode_steps`` (since start-up),
    ``main_decode_steps``, ``profiled`` (a profile was recorded), ``profile_dir``,
    ``profile_run`` (the separate profiled run: ``main_s``, ``decode_steps``,
    ``decode_modules`` (decode steps per decode program, ``{"jit_decode_b8_bkv128": 7}``),
    ``wall_tokens_per_s``; None unless ``profile``), ``compiled_modules``, ``environment``,
    ``prefill``: ``{"main": ..., "total": ...}`` prefill counters of the main generation and
    since start-up (``steps``, ``chunks``, ``computed_tokens``; prefix cache ``queried_pages``,
    ``hit_pages``, ``queried_tokens``, ``hit_tokens``, ``hit_rate`` = hit / queried tokens or None).

    Raises: ValueError for invalid arguments (including ``TRACEVIEW_KV_BLOCK_SIZE``, and
    ``greedy_bf16_logits`` with a float32 model or the ``topp`` sampling mode).
    """
    if batch_mult < 1 or max_tokens < 1:
        raise ValueError(f"batch_mult={batch_mult} and max_tokens={max_tokens} must be >= 1")
    if not time_tolerance > 0:
        raise ValueError(f"time_tolerance={time_tolerance} must be > 0")
    if itl_slo_ms is not None and not (math.isfinite(itl_slo_ms) and itl_slo_ms > 0):
        raise ValueError(f"itl_slo_ms={itl_slo_ms} must be a positive finite number of milliseconds")
    if greedy_bf16_logits and sampling != "greedy":
        raise ValueError(f"greedy_bf16_logits needs greedy sampling (the {sampling} sampler reads float32 logits)")
    prefix = shared_prefix(prefix_tokens)
    base = [prefix + p for p in (list(prompts) if prompts else PROMPTS)]
    workload = base * batch_mult
    main_params = sampling_params(sampling, max_tokens, top_p=top_p, temperature=temperature,
                                  repetition_penalty=repetition_penalty)

    t0 = time.perf_counter()
    llm = LLM(model, max_num_seqs=max_num_seqs, max_model_len=max_model_len, kv_block_size=kv_block_size,
              seed=seed, precompile=precompile, max_num_batched_tokens=max_num_batched_tokens,
              enable_chunked_prefill=enable_chunked_prefill, enable_prefix_caching=enable_prefix_caching,
              donate=donate, step_clock=step_clock, kv_dtype=kv_dtype,
              kv_cache_bytes=kv_cache_bytes, host_sampler_mask=host_sampler_mask, tensor_parallel=tensor_parallel,
              dtype=dtype, greedy_bf16_logits=greedy_bf16_logits, interpret=interpret)
    init_s = time.perf_counter() - t0
    startup = llm.verification()
    if on_start is not None:
        on_start(startup)

    llm.generate(workload, sampling_params(sampling, max(2, warmup_tokens), top_p=top_p, temperature=temperature,
                                           repetition_penalty=repetition_penalty))

    t0 = time.perf_counter()
    llm.generate(workload, sampling_params(sampling, 1, top_p=top_p, temperature=temperature,
                                           repetition_penalty=repetition_penalty))
    ttft_s = time.perf_counter() - t0

    # headline: the main generation, profiler off
    st = llm.stats
    prefill0 = _prefill_counters(st)
    tok0, step_s0, steps0, compiled0 = st.step_tokens, st.step_s, st.num_decode_steps, st.num_compiled
    t0 = time.perf_counter()
    outs = llm.generate(workload, main_params)
    main_s = time.perf_counter() - t0
    prefill_main = _with_rate({k: v - prefill0[k] for k, v in _prefill_counters(st).items()})
    engine_tokens, steps_s = st.step_tokens - tok0, st.step_s - step_s0
    main_steps, main_compiles = st.num_decode_steps - steps0, st.num_compiled - compiled0
    decode_times = sorted(sec for kind, _, _, sec in st.last_steps if kind == "decode")
    steps = [list(x) for x in st.last_steps]
    token_times = [list(t) for t in st.last_token_times]
    output_tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    per_request = round(output_tokens / len(workload))
    wall_tps = output_tokens / main_s
    engine_tps = engine_tokens / steps_s if steps_s > 0 else float("nan")
    checks = counter_checks(output_tokens, engine_tokens, main_s, steps_s, main_compiles, time_tolerance)
    end = llm.verification()

    profile_run, run_dir = None, None
    if profile:  # a separate run after the headline one: its figures include tracing overhead
        p_steps0 = st.num_decode_steps
        llm.start_profile(log_dir)
        t0 = time.perf_counter()
        try:
            p_outs = llm.generate(workload, main_params)
            p_main_s = time.perf_counter() - t0
        finally:
            run_dir = llm.stop_profile()
        modules: dict[str, int] = {}
        for kind, bucket, _, _ in st.last_steps:  # the decode program each step ran (its bucket)
            if kind == "decode":
                name = "jit_" + llm.decode_program(bucket)
                modules[name] = modules.get(name, 0) + 1
        profile_run = {"main_s": p_main_s, "decode_steps": st.num_decode_steps - p_steps0,
                       "decode_modules": modules,
                       "wall_tokens_per_s": sum(len(o.outputs[0].token_ids) for o in p_outs) / p_main_s}
    return {
        "config": {"model": model, "max_num_seqs": max_num_seqs, "max_model_len": max_model_len,
                   "batch_mult": batch_mult, "max_tokens": max_tokens, "sampling": sampling,
                   "sampling_params": asdict(main_params), "kv_block_size": llm.kv_block_size,
                   "kv_block_size_requested": kv_block_size, "request_buckets": llm.request_buckets,
                   "token_buckets": llm.token_buckets, "precompile": precompile, "seed": seed,
                   "max_num_batched_tokens": llm.token_buckets[-1], "enable_chunked_prefill": llm.chunked,
                   "enable_prefix_caching": enable_prefix_caching, "prefix_tokens": prefix_tokens, "donate": donate, "tensor_parallel": tensor_parallel,
                   "time_tolerance": time_tolerance, "itl_slo_ms": itl_slo_ms, "kv_dtype": llm.config.kv_dtype, "kv_cache_bytes": kv_cache_bytes,
                   "dtype": llm.model_config.dtype, "greedy_bf16_logits": llm.greedy_bf16_logits,
                   "logits_f32": llm.upcast_logits, "interpret": interpret},
        "kv_capacity": llm.kv_capacity.as_dict(),
        "init_s": init_s,
        "precompile_s": llm.stats.precompile_s,
        "ttft_s": ttft_s,
        "main_s": main_s,
        # the study's ITL: divided by the N tokens each request actually generated (max_tokens
        # is a cap, not a count), not by the N - 1 gaps after the first token (see the docstring)
        "itl_s": (main_s - ttft_s) / per_request if per_request > 1 and main_s > ttft_s else None,
        "num_requests": len(workload),
        "tokens_per_request": max_tokens,
        "output_tokens": output_tokens,
        "engine_counted_tokens": engine_tokens,
        "steps_s": steps_s,
        "wall_tokens_per_s": wall_tps,
        "engine_tokens_per_s": engine_tps,
        "tokens_per_s_rel_diff": abs(engine_tps - wall_tps) / wall_tps,
        "decode_step_median_s": decode_times[len(decode_times) // 2] if decode_times else None,
        "main_steps": steps,
        "main_token_times": token_times,
        "goodput": None if itl_slo_ms is None else goodput(token_times, main_s, itl_slo_ms),
        "memory": end["memory"],
        "checks": checks,
        "verification": startup,
        "verification_end": end,
        "decode_steps": llm.stats.num_decode_steps,
        "main_decode_steps": main_steps,
        "profiled": profile,
        "profile_dir": str(run_dir) if run_dir else None,
        "profile_run": profile_run,
        "compiled_modules": list(llm.stats.compiled_modules),
        "prefill": {"main": prefill_main,
                    "total": _with_rate(_prefill_counters(llm.stats))},
        "environment": {"jax": jax.__version__, "backend": jax.default_backend(), "python": platform.python_version(),
                        "machine": platform.machine(), "processor": platform.processor() or None,
                        "cpu_count": _cpu_count()},
    }


def goodput(token_times, wall_s: float, itl_slo_ms: float) -> dict:
    """Tokens per second counting only the tokens that meet an inter-token latency objective.

    ``token_times``: per request, the time (seconds, any origin) each of its tokens was ready
    on the host, in order (``EngineStats.last_token_times``: the end of the step that produced
    it, blocked on its tokens). A request's inter-token latency (ITL) is the gap between two
    of its consecutive tokens: every step that ran in between counts, a prefill step (or
    chunk) of another request included, so it is not one step's time. A token meets the
    objective when its gap from the same request's previous token, in seconds, is
    <= ``itl_slo_ms`` / 1000. A request's first token has no previous token (its latency is
    the time to first token, which an ITL objective does not judge): it is never counted.

    Returns ``itl_slo_ms``; ``tokens_per_s`` (``tokens_met`` / ``wall_s``); ``tokens_met`` (the
    tokens whose gap meets the objective, = ``gaps_met``); ``gaps`` (the gaps judged: every
    token but each request's first) and ``gaps_met``; ``tokens`` (all) and ``first_tokens``
    (excluded: one per request that made a token); ``itl_median_ms`` / ``itl_p90_ms`` over all
    gaps and ``per_request`` (``gaps``, ``met``, ``median_ms``, ``p90_ms`` per request, in
    order), percentiles interpolated linearly (``numpy.percentile``), None without gaps.
    Raises ValueError unless ``wall_s`` > 0.
    """
    if not wall_s > 0:
        raise ValueError(f"wall_s={wall_s} must be > 0")
    bound = itl_slo_ms / 1e3
    per_request, every = [], []
    for times in token_times:
        gaps = [b - a for a, b in zip(times, times[1:])]
        every += gaps
        median, p90 = _ms_percentiles(gaps)
        per_request.append({"gaps": len(gaps), "met": sum(g <= bound for g in gaps), "median_ms": median, "p90_ms": p90})
    met = sum(r["met"] for r in per_request)
    median, p90 = _ms_percentiles(every)
    return {"itl_slo_ms": itl_slo_ms, "tokens_per_s": met / wall_s, "tokens_met": met, "gaps": len(every),
            "gaps_met": met, "tokens": sum(len(t) for t in token_times),
            "first_tokens": sum(1 for t in token_times if t), "itl_median_ms": median, "itl_p90_ms": p90,
            "per_request": per_request}


def _ms_percentiles(gaps: list[float]) -> tuple[float | None, float | None]:
    """(median, p90) of ``gaps`` (seconds) in milliseconds; (None, None) when empty."""
    if not gaps:
        return None, None
    median, p90 = np.percentile(np.asarray(gaps) * 1e3, [50, 90])
    return float(median), float(p90)


def _prefill_counters(stats) -> dict:
    return {"steps": stats.num_prefill_steps, "chunks": stats.num_prefill_chunks,
            "computed_tokens": stats.num_prefill_computed_tokens, "queried_pages": stats.prefix_queried_pages,
            "hit_pages": stats.prefix_hit_pages, "queried_tokens": stats.prefix_queried_tokens,
            "hit_tokens": stats.prefix_hit_tokens}


def _with_rate(c: dict) -> dict:
    return {**c, "hit_rate": c["hit_tokens"] / c["queried_tokens"] if c["queried_tokens"] else None}


def counter_checks(output_tokens: int, step_tokens: int, wall_s: float, steps_s: float, main_compiles: int,
                   time_tolerance: float = TIME_TOLERANCE) -> dict:
    """The paired checks of the main generation, each ``{..., "ok": bool}``; ``ok`` = all pass.

    * ``tokens``: tokens counted from the returned outputs == the scheduler's per-step
      counters (1 per prefill, num_seqs per decode step);
    * ``time``: ``|wall_s - steps_s| / wall_s <= time_tolerance``, the wall clock of the main
      generation against its step times summed (each blocked on its tokens); the gap is
      host work between steps (the study measured 85 us against an 11.9 ms step);
    * ``main_compiles``: no bucket compiled during the main generation (a compile there
      would be timed as generation).
    """
    t_rel = abs(wall_s - steps_s) / wall_s if wall_s > 0 else float("inf")
    c = {
        "tokens": {"outputs": output_tokens, "scheduler": step_tokens,
                   "rel_diff": abs(output_tokens - step_tokens) / max(output_tokens, 1),
                   "ok": output_tokens == step_tokens},
        "time": {"wall_s": wall_s, "steps_s": steps_s, "rel_diff": t_rel, "tolerance": time_tolerance,
                 "ok": t_rel <= time_tolerance},
        "main_compiles": {"count": main_compiles, "ok": main_compiles == 0},
    }
    c["ok"] = all(v["ok"] for v in c.values())
    return c


def _cpu_count():
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count()
