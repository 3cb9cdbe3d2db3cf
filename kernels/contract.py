"""The decode contract shared by the TPU and GPU decode kernels: input checks, the mask value.

Used by :mod:`traceview.kernels.paged_attention` (TPU, and the interpreter on CPU) and
:mod:`traceview.kernels.paged_attention_gpu` (GPU), so that both accept and refuse the same
inputs. Imports jax.
"""

from __future__ import annotations

import jax.numpy as jnp

from traceview.kernels.quant import kv_dtype_name

#: Finite mask value for masked logits (as jax's Pallas attention ops use), so that
#: ``exp(mask - max)`` underflows to 0 instead of producing ``inf - inf = nan``.
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


def check_decode_inputs(q, k_pages, v_pages, kv_lens, page_table, k_scales=None, v_scales=None):
    """Validate the decode contract shared by the TPU and GPU kernels (shapes, KV dtype, scales).

    Returns: ``(B, Hq, D, Hkv, page_size, quantized)``.
    Raises: ValueError for inconsistent shapes, an unsupported KV dtype, or int8 scales missing,
      misshapen or given with a float cache.
    """
    if q.ndim != 3 or k_pages.ndim != 4 or v_pages.shape != k_pages.shape:
        raise ValueError(f"expected q[B,Hq,D] and k/v_pages[Hkv,P,page,D] of equal shape; got {q.shape}, {k_pages.shape}, {v_pages.shape}")
    bsz, hq, d = q.shape
    hkv, _num_pages, page_size, dk = k_pages.shape
    if dk != d or hq % hkv:
        raise ValueError(f"head_dim mismatch or Hq={hq} not a multiple of Hkv={hkv} (q {q.shape}, pages {k_pages.shape})")
    if page_table.ndim != 2 or page_table.shape[0] != bsz or kv_lens.shape != (bsz,):
        raise ValueError(f"expected page_table[{bsz}, pages_per_seq] and kv_lens[{bsz}]; got {page_table.shape}, {kv_lens.shape}")
    kv_dtype = kv_dtype_name(k_pages.dtype)
    if kv_dtype_name(v_pages.dtype) != kv_dtype:
        raise ValueError(f"k_pages and v_pages dtypes differ: {k_pages.dtype} vs {v_pages.dtype}")
    quantized = kv_dtype == "int8"
    if quantized:
        for label, sc in (("k_scales", k_scales), ("v_scales", v_scales)):
            if sc is None or tuple(sc.shape) != k_pages.shape[:3]:
                raise ValueError(f"an int8 KV cache needs {label} of shape {k_pages.shape[:3]} (float32); got "
                                 f"{None if sc is None else sc.shape}")
    elif k_scales is not None or v_scales is not None:
        raise ValueError(f"k_scales/v_scales are only for an int8 KV cache, not {kv_dtype}")
    return bsz, hq, d, hkv, page_size, quantized
