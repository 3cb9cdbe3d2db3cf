"""KV cache dtypes and the int8 KV quantization contract shared by the kernel and the reference.

Supported KV cache dtypes (:data:`KV_DTYPES`): ``bfloat16``, ``float32`` (values stored as is,
cast on write) and ``int8`` (symmetric, **per token and per KV head** scales).

int8 contract, for one token ``t`` of KV head ``h`` (a ``D``-vector ``x``)::

    scale[h, t] = max_d |x[d]| / 127                       (float32; 0 for an all-zero x)
    q[h, t, d]  = clip(round_half_even(x[d] / scale), -127, 127)   (int8; 0 where scale == 0)
    x'[d]       = q[h, t, d] * scale[h, t]                  (dequantized, float32)

so ``|x'[d] - x[d]| <= scale / 2 = max|x| / 254`` per element. Per-token scales need no
re-quantization when a page fills up token by token (a per-page scale would change as later
tokens arrive); they cost 4 bytes per token and head beside the ``D`` int8 values (1.6% at
``D = 256``). Layout: values ``[Hkv, num_pages, page_size, D]`` int8 beside scales
``[Hkv, num_pages, page_size]`` float32 (:class:`QuantizedPages`).

Imports jax.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

#: KV cache dtype names accepted by the engine (``--kv-dtype``) and the kernel.
KV_DTYPES = ("bfloat16", "float32", "int8")

#: Largest int8 magnitude used (symmetric range, -128 unused).
INT8_MAX = 127.0

#: Bytes of one int8 scale (float32).
SCALE_BYTES = 4


class QuantizedPages(NamedTuple):
    """One layer's int8 K (or V) pool: ``values`` int8 ``[Hkv, P, page, D]``, ``scales`` f32 ``[Hkv, P, page]``.

    A NamedTuple, hence a JAX pytree: it passes through ``jit``, donation and ``tree.map``.
    """

    values: object
    scales: object


def kv_dtype_name(dtype) -> str:
    """Canonical name of a KV cache dtype (``"bfloat16"``, ``"float32"`` or ``"int8"``).

    Raises: ValueError for any other dtype, naming the choices.
    """
    try:
        name = str(np.dtype(jnp.dtype(dtype)))
    except TypeError:
        name = str(dtype)
    if name not in KV_DTYPES:
        raise ValueError(f"KV cache dtype {dtype!r} is not supported; choose one of {', '.join(KV_DTYPES)}")
    return name


def kv_token_bytes(*, head_dim: int, dtype) -> int:
    """Bytes one token occupies in one KV head of one pool (K or V): ``D * itemsize`` (+ 4 for the int8 scale)."""
    name = kv_dtype_name(dtype)
    return head_dim * np.dtype(jnp.dtype(name)).itemsize + (SCALE_BYTES if name == "int8" else 0)


def quantize_int8(x):
    """Quantize ``x[..., D]`` per vector along the last axis: returns ``(q int8[..., D], scale f32[...])``.

    Contract in the module docstring.
    """
    xf = jnp.asarray(x, jnp.float32)
    scale = jnp.max(jnp.abs(xf), axis=-1) / INT8_MAX
    safe = jnp.where(scale > 0, scale, 1.0)
    q = jnp.clip(jnp.round(xf / safe[..., None]), -INT8_MAX, INT8_MAX).astype(jnp.int8)
    return q, scale


def dequantize_int8(q, scale):
    """Inverse of :func:`quantize_int8`: ``q.astype(f32) * scale[..., None]`` (float32)."""
    return q.astype(jnp.float32) * jnp.asarray(scale, jnp.float32)[..., None]
