"""Bundled toy serving engine (installed as ``traceview.engine_shim``).

* :mod:`.config` — model presets (``tiny``, ``gemma-2b``) and the engine configuration.
* :mod:`.model` — Gemma-like forward passes: jnp prefill, decode through the Pallas kernel.
* :mod:`.kv_cache` — paged KV pools and the page allocator (page 0 = trash page).
* :mod:`.buckets` — power-of-two token / request compile buckets.
* :mod:`.sampling` — ``SamplingParams``, greedy, and the 32-iteration top-p binary-search sampler.
* :mod:`.tokenizer` — toy byte-level tokenizer.
* :mod:`.engine` — ``LLM``: scheduling, named compiled buckets, counters, profiling.
* :mod:`.bench` — the study's benchmark protocol (returns a dict).
* :mod:`.compile_time` — Pallas-vs-reference lower/compile/first-execution times, fresh process per trial.
* :mod:`.cli` — ``traceview engine {bench,profile,compile-time}``.
* :mod:`.transplant` — kernel-module injection and anchored source patches.

``LLM`` and ``SamplingParams`` are importable from here; jax is imported on first use.
"""

__all__ = ["LLM", "SamplingParams"]


def __getattr__(name):
    if name == "LLM":
        from .engine import LLM

        return LLM
    if name == "SamplingParams":
        from .sampling import SamplingParams

        return SamplingParams
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
