"""Token selection: ``SamplingParams``, greedy argmax, and the top-k/top-p sampler.

The sampler mirrors the production TPU sampler the study profiled: top-p is found by a
*fixed 32-iteration binary search* over the probability threshold (:func:`topp_binary_search`,
a ``lax.fori_loop``), which runs in full even when ``top_p == 1.0`` (a mathematical no-op).
Its ops carry the ``topp_binary_search`` named scope in their HLO ``op_name`` and this
file as ``source_file``, so the cost is visible in a trace. Greedy selection never runs it.

Logits precision (a bfloat16 model returns ``bf16[R, V]`` logits): the production-like path
the study profiled converts them to float32 twice, in the runner before the sampler
(:func:`runner_logits_f32`) and again in the sampler, which also returns the float32 logits
(for log-probabilities) that greedy decoding never reads (:func:`greedy_tokens_f32`); the
treatment takes the argmax on the bf16 logits directly (:func:`greedy_tokens`): a widening
conversion cannot change which element is largest, so the tokens are the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax import lax

TOPP_SEARCH_ITERATIONS = 32


@dataclass(frozen=True)
class SamplingParams:
    """Per-request generation settings (vLLM names and defaults).

    * ``max_tokens``: tokens to generate (>= 1).
    * ``temperature``: 0 selects greedy decoding (argmax); > 0 samples.
    * ``top_p``: nucleus mass in (0, 1]; ``top_k``: -1 or 0 disables, else keep the k best.
    * ``repetition_penalty``: > 0; logits of already-seen tokens are divided (if > 0) or
      multiplied (if < 0) by it (vLLM / CTRL convention). 1.0 disables.
    * ``seed``: per-request sampling seed (default: derived from the engine seed and request index).
    * ``ignore_eos``: keep generating past the EOS token (benchmarks use fixed lengths).
    """

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    repetition_penalty: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False

    def __post_init__(self):
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens={self.max_tokens} must be at least 1")
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature} must be >= 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p={self.top_p} must be in (0, 1]")
        if self.top_k < -1:
            raise ValueError(f"top_k={self.top_k} must be -1, 0 (disabled) or positive")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty={self.repetition_penalty} must be > 0")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def greedy_tokens(logits):
    """``int32[R]`` argmax over ``logits[R, V]`` of any float dtype (named scope ``sampler``).

    Elements are compared as float32 inside the reduction: exact (widening preserves order),
    fused by XLA into the argmax so no float32 ``[R, V]`` array is written, and on XLA:CPU
    faster than its bf16 reduction. A no-op on float32 logits."""
    with jax.named_scope("sampler"):
        return jnp.argmax(logits.astype(jnp.float32), axis=-1).astype(jnp.int32)


def runner_logits_f32(logits):
    """The runner's conversion of the model's logits to ``f32[R, V]`` before the sampler
    (named scope ``runner_logits_f32``), a program of its own: one ``convert`` of
    ``[R, V]`` per step."""
    with jax.named_scope("runner_logits_f32"):
        return logits.astype(jnp.float32)


def greedy_tokens_f32(logits):
    """The production-like greedy sampler: converts ``logits[R, V]`` to float32 again (free
    on the runner's float32 logits) and returns ``(int32[R] argmax, f32[R, V] logits)``, the
    float32 logits kept for log-probabilities; returned unchanged, they make the compiled
    program copy its input (one ``copy`` of ``f32[R, V]`` per step)."""
    with jax.named_scope("sampler"):
        logits = logits.astype(jnp.float32)
        return jnp.argmax(logits, axis=-1).astype(jnp.int32), logits


def topp_binary_search(probs, top_p):
    """Per-row probability threshold for nucleus (top-p) filtering, by bisection.

    Finds (to 32 bisection steps) the largest ``t`` with ``sum(probs[probs >= t]) >= top_p``;
    keeping ``probs >= t`` keeps the smallest high-probability set of mass ``>= top_p``.
    Always runs :data:`TOPP_SEARCH_ITERATIONS` iterations over the whole vocabulary, even for
    ``top_p == 1.0`` (as the production sampler does).

    Args: probs ``f32[R, V]`` (rows sum to 1), top_p ``f32[R]``.
    Returns: ``f32[R]`` thresholds.
    """
    with jax.named_scope("topp_binary_search"):
        lo = jnp.zeros(probs.shape[:1], jnp.float32)  # mass(lo) = 1 >= top_p: invariant holds
        hi = jnp.max(probs, axis=-1)

        def body(_, carry):
            lo, hi = carry
            mid = 0.5 * (lo + hi)
            mass = jnp.sum(jnp.where(probs >= mid[:, None], probs, 0.0), axis=-1)
            ok = mass >= top_p
            return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid)

        lo, _ = lax.fori_loop(0, TOPP_SEARCH_ITERATIONS, body, (lo, hi))
        return lo


def sample_tokens(logits, temperature, top_k, top_p, repetition_penalty, seen, seeds):
    """:func:`_sample_tokens` under the named scope ``sampler`` (the model's block scopes:
    :data:`traceview.engine_shim.model.SCOPES`)."""
    with jax.named_scope("sampler"):
        return _sample_tokens(logits, temperature, top_k, top_p, repetition_penalty, seen, seeds)


def _sample_tokens(logits, temperature, top_k, top_p, repetition_penalty, seen, seeds):
    """Sample ``int32[R]`` from ``logits f32[R, V]``.

    Order (vLLM's): repetition penalty over ``seen`` (bool ``[R, V]``: prompt and output
    tokens) -> temperature -> top-k (k-th largest logit as threshold, by a sort that runs only
    when some row has k > 0; k <= 0 disables) ->
    softmax -> top-p threshold by :func:`topp_binary_search` -> Gumbel-max draw with a
    per-row key from ``seeds`` (uint32 ``[R]``). Rows with ``temperature == 0`` take the
    argmax of the penalised logits.
    """
    v = logits.shape[-1]
    logits = logits.astype(jnp.float32)
    pen = repetition_penalty[:, None]
    logits = jnp.where(seen, jnp.where(logits > 0, logits / pen, logits * pen), logits)
    greedy = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    scaled = logits / jnp.maximum(temperature, 1e-6)[:, None]
    k = jnp.where(top_k > 0, jnp.minimum(top_k, v), v)

    def kth_largest(scaled):
        return jnp.take_along_axis(jnp.sort(scaled, axis=-1), (v - k)[:, None], axis=-1)

    # the vocabulary-sized sort runs only when some row asks for top-k (vLLM skips it too)
    kth = lax.cond(jnp.any(top_k > 0), kth_largest, lambda s: jnp.full((s.shape[0], 1), -jnp.inf, s.dtype), scaled)
    scaled = jnp.where(scaled >= kth, scaled, -jnp.inf)
    probs = jax.nn.softmax(scaled, axis=-1)
    threshold = topp_binary_search(probs, top_p)
    probs = jnp.where(probs >= threshold[:, None], probs, 0.0)
    keys = jax.vmap(jax.random.key)(seeds)
    gumbel = jax.vmap(lambda kk: jax.random.gumbel(kk, (v,), jnp.float32))(keys)
    sampled = jnp.argmax(jnp.where(probs > 0, jnp.log(probs) + gumbel, -jnp.inf), axis=-1).astype(jnp.int32)
    return jnp.where(temperature == 0.0, greedy, sampled)
