"""Plain ``jax.numpy`` reference for paged decode attention (the parity oracle).

Same contract as :func:`traceview.kernels.paged_attention.paged_decode`, computed by
gathering every sequence's pages into a contiguous ``[B, Hkv, pages_per_seq*page, D]``
tensor and applying a masked softmax in float32. No blocking, no online softmax: it is
the textbook formula ``softmax(sm_scale * q K^T + mask) V``.
"""

from __future__ import annotations

import math

import jax.numpy as jnp


def paged_decode_reference(q, k_pages, v_pages, kv_lens, page_table, *, k_scales=None, v_scales=None,
                           sm_scale: float | None = None):
    """Reference decode attention.

    Args:
      q: ``[B, Hq, D]``; k_pages, v_pages: ``[Hkv, P, page, D]``; kv_lens: ``int32[B]``;
      page_table: ``int32[B, pages_per_seq]``; sm_scale: default ``D ** -0.5``.
      k_scales, v_scales: float32 ``[Hkv, P, page]`` per-token scales of an int8 cache
        (:mod:`traceview.kernels.quant`): the gathered pages are dequantized, ``q * scale``,
        before the einsums. None for a float cache.

    Returns: ``[B, Hq, D]`` in ``q.dtype``; rows with ``kv_len == 0`` are zeros.
    """
    bsz, hq, d = q.shape
    hkv, _, page, _ = k_pages.shape
    group = hq // hkv
    pps = page_table.shape[1]
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(d)
    # [Hkv, B, pps, page, D] -> [B, Hkv, pps*page, D]
    k = k_pages[:, page_table].transpose(1, 0, 2, 3, 4).reshape(bsz, hkv, pps * page, d).astype(jnp.float32)
    v = v_pages[:, page_table].transpose(1, 0, 2, 3, 4).reshape(bsz, hkv, pps * page, d).astype(jnp.float32)
    if (k_scales is None) != (v_scales is None):
        raise ValueError("give both k_scales and v_scales, or neither")
    if k_scales is not None:
        k = k * k_scales[:, page_table].transpose(1, 0, 2, 3).reshape(bsz, hkv, pps * page, 1).astype(jnp.float32)
        v = v * v_scales[:, page_table].transpose(1, 0, 2, 3).reshape(bsz, hkv, pps * page, 1).astype(jnp.float32)
    qg = q.reshape(bsz, hkv, group, d).astype(jnp.float32) * sm_scale
    s = jnp.einsum("bhgd,bhtd->bhgt", qg, k)
    valid = jnp.arange(pps * page)[None, :] < kv_lens[:, None]  # [B, T]
    s = jnp.where(valid[:, None, None, :], s, -jnp.inf)
    v = jnp.where(valid[:, None, :, None], v, 0.0)  # unused cache slots may hold anything
    m = jnp.max(s, axis=-1, keepdims=True)
    p = jnp.where(valid[:, None, None, :], jnp.exp(s - jnp.where(jnp.isfinite(m), m, 0.0)), 0.0)
    l = jnp.sum(p, axis=-1, keepdims=True)
    o = jnp.einsum("bhgt,bhtd->bhgd", p, v) / jnp.where(l > 0, l, 1.0)
    return o.reshape(bsz, hq, d).astype(q.dtype)
