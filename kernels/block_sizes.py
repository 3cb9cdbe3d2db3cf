"""KV block size for the paged decode kernel: heuristic, environment override, validation.

The *KV block* is the number of cached tokens the decode kernel fetches and computes per
inner-loop step. A sequence of ``kv_len`` tokens costs ``ceil(kv_len / bkv)`` full-width
blocks: only valid pages are copied, but every block is computed over all ``bkv`` columns
with a mask. Large blocks therefore waste work on short sequences (the study's finding:
2048-token blocks at ~140-token sequences leave ~93% of each block masked).

Precedence used by :func:`resolve_kv_block_size`:

1. the explicit ``kv_block_size`` argument,
2. the environment variable ``TRACEVIEW_KV_BLOCK_SIZE`` (tokens; empty means unset),
3. :func:`default_kv_block_size`, the production heuristic.

Every value, whatever its source, must be a positive integer multiple of the page size and
at most the maximum context (``pages_per_seq * page_size``); otherwise ``ValueError``.
"""

from __future__ import annotations

import os

import numpy as np

ENV_VAR = "TRACEVIEW_KV_BLOCK_SIZE"

#: Bytes of K+V one decode block should carry so that its copy alone saturates HBM
#: bandwidth ("min_bkv_sz_to_peak" in tpu-inference RPA v3 ``get_default_block_sizes``).
TARGET_BLOCK_BYTES = 16 * 1024 * 1024


def _align_to(x: int, a: int) -> int:
    return -(-x // a) * a


def _next_pow2(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


def kv_packing(dtype) -> int:
    """Values packed per 32-bit word for ``dtype`` (f32: 1, bf16: 2, int8/fp8: 4).

    Source: tpu-inference RPA v3 ``get_dtype_packing`` (``32 // bitwidth``).
    """
    bits = np.dtype(dtype).itemsize * 8
    if bits > 32 or 32 % bits:
        raise ValueError(f"unsupported KV cache dtype {np.dtype(dtype)!s}: bit width {bits} must divide 32")
    return 32 // bits


def default_kv_block_size(*, head_dim: int, num_kv_heads: int, dtype, page_size: int, max_kv: int) -> int:
    """Production heuristic for the decode KV block, in tokens.

    Formula (tpu-inference RPA v3's ``get_default_block_sizes``, decode case)::

        min_bkv_sz_to_peak = 16 MiB * packing / 4 / align(D, 128) / next_pow2(align(2*Hkv, packing))
        bkv = align_up(min(min_bkv_sz_to_peak, max_kv), page_size)

    i.e. 16 MiB divided by the (lane-padded) K+V bytes of one token, capped at the maximum
    context and aligned up to a whole page. Gemma-2B-like layer (D=256, 1 KV head, bf16):
    16384-token target, capped to 2048 at a 2048-token context.

    Args:
      head_dim: D, elements per head.
      num_kv_heads: Hkv.
      dtype: KV cache dtype (anything ``numpy.dtype`` accepts, including ``jnp.bfloat16``).
      page_size: tokens per page.
      max_kv: maximum context in tokens (``pages_per_seq * page_size``).

    Returns: block size in tokens (int).
    Raises: ValueError for non-positive sizes or an unsupported dtype.
    """
    for name, v in (("head_dim", head_dim), ("num_kv_heads", num_kv_heads), ("page_size", page_size), ("max_kv", max_kv)):
        if int(v) <= 0:
            raise ValueError(f"{name} must be positive, got {v!r}")
    packing = kv_packing(dtype)
    to_peak = TARGET_BLOCK_BYTES * packing // 4 // _align_to(head_dim, 128) // _next_pow2(_align_to(2 * num_kv_heads, packing))
    return _align_to(max(1, min(to_peak, max_kv)), page_size)


def validate_kv_block_size(value, *, page_size: int, max_kv: int, source: str = "kv_block_size") -> int:
    """Check a KV block size and return it as ``int``.

    Rule: a positive integer, a multiple of ``page_size`` and at most ``max_kv`` tokens.

    Raises: ValueError naming ``source``, the offending value and the rule.
    """
    rule = f"must be a positive integer multiple of the page size ({page_size} tokens) and at most the max context ({max_kv} tokens)"
    if isinstance(value, bool):
        raise ValueError(f"{source}={value!r} is invalid: {rule}")
    try:
        n = int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{source}={value!r} is not an integer: {rule}") from None
    if not isinstance(value, str) and n != value:
        raise ValueError(f"{source}={value!r} is not an integer: {rule}")
    if n <= 0 or n % page_size or n > max_kv:
        raise ValueError(f"{source}={value!r} is invalid: {rule}")
    return n


def resolve_kv_block_size(
    kv_block_size=None, *, head_dim: int, num_kv_heads: int, dtype, page_size: int, max_kv: int, env=None
) -> tuple[int, str]:
    """Pick the decode KV block size: argument > ``TRACEVIEW_KV_BLOCK_SIZE`` > heuristic.

    Args:
      kv_block_size: explicit size in tokens, or None.
      head_dim, num_kv_heads, dtype, page_size, max_kv: the cache geometry (see
        :func:`default_kv_block_size`).
      env: mapping to read the override from (default ``os.environ``); an empty or
        whitespace-only value counts as unset.

    Returns: ``(tokens, source)`` with source one of ``"argument"``, ``"env"``, ``"heuristic"``.
    Raises: ValueError if the chosen argument or environment value breaks the rule of
      :func:`validate_kv_block_size`.
    """
    if kv_block_size is not None:
        return validate_kv_block_size(kv_block_size, page_size=page_size, max_kv=max_kv), "argument"
    env = os.environ if env is None else env
    raw = env.get(ENV_VAR, "")
    if raw.strip():
        return validate_kv_block_size(raw, page_size=page_size, max_kv=max_kv, source=ENV_VAR), "env"
    return (
        default_kv_block_size(head_dim=head_dim, num_kv_heads=num_kv_heads, dtype=dtype, page_size=page_size, max_kv=max_kv),
        "heuristic",
    )
