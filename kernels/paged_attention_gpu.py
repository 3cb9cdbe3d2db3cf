"""Ragged paged attention, decode phase, compiled for NVIDIA GPUs (Pallas, Triton backend).

Same contract, layout and kernel name as :func:`traceview.kernels.paged_attention.paged_decode`
(the TPU kernel): ``q[B, Hq, D]``, ``k_pages``/``v_pages`` ``[Hkv, num_pages, page, D]``
(bfloat16, float32, or int8 with float32 per-token scales ``[Hkv, num_pages, page]``),
``kv_lens int32[B]``, ``page_table int32[B, pages_per_seq]``; output ``[B, Hq, D]``, zeros
where ``kv_len == 0``. The name is ``RPAd-p_{page}-bq_1_1-bkv_{bkv}_{bkv_c}``.

Why Triton, why not Mosaic GPU. Pallas offers two GPU backends. Mosaic GPU is the future
one (JAX 0.11 deprecates the Triton backend, to be removed "in a future version"), but its
warpgroup matmuls need 64-row operands in swizzled shared memory, TMA copies and explicit
barriers; the Triton backend takes ``pl.pallas_call(..., compiler_params=plgpu.CompilerParams)``
with plain masked loads, lowers on a host without a GPU, and is present in JAX 0.10 and 0.11.
Neither has scalar prefetch, so the page table is a normal input and **page ids are read
inside the kernel** (a masked gather load per KV chunk).

Kernel structure (grid ``(B, Hkv)``, one program per sequence and KV head, every input a
whole array in global memory, indexed by hand):

* the ``G = Hq / Hkv`` query rows of the group are loaded once (rows padded to
  ``Gp = max(16, next_pow2(G))``, masked: Triton tiles are powers of two and its dot needs 16);
* a ``fori_loop`` walks ``ceil(kv_len / bkv)`` KV blocks, as the TPU kernel does; each block
  is computed in ``bkv_c``-token chunks (``bkv_c`` a power of two, at most 16384 / D tokens so
  a K or V chunk stays 32 KiB in bf16). Per chunk: the token positions
  ``t = blk * bkv + c * bkv_c + iota``, the page ids ``page_table[b, t // page]`` (masked
  load), the rows ``page_id * page + t % page`` of the ``[Hkv, num_pages * page, D]`` pool,
  K and V loaded masked (``t < min(kv_len, block end)``: nothing past ``kv_len`` is read),
  int8 dequantized (``x = q * scale``) after the load and before the dots, then the logits,
  the mask and the online-softmax update in float32;
* every chunk of a block is computed, masked columns included, so a short sequence in a
  large block pays for the whole block as on TPU (``bkv`` 2048 at 140 tokens: 93% masked).
  Chunks past the block's ``bkv`` tokens (when ``bkv`` is not a power of two) are masked.

Numerics: float32 throughout (``q`` and the dequantized K/V cast to float32; dots at the
default precision, which the Triton lowering takes as IEEE float32 for float32 inputs), the
same online softmax and the same finite mask value as the TPU kernel.

``interpret=True`` runs the same kernel in the generic Pallas interpreter (the parity tests);
``interpret=False`` lowers to the XLA:GPU Triton custom call (``__gpu$xla.gpu.triton`` in
JAX 0.10 and 0.11), whose backend config names the kernel. JAX 0.11 warns at each such
lowering (``DeprecationWarning``, id ``jax-pallas-triton``) and, on a host without a GPU, needs
an abstract device naming the GPU (``jax.sharding.AbstractDevice("NVIDIA H200", ...)`` in an
abstract mesh) to pick the target; JAX 0.10 falls back to compute capability 9.0.

Imports jax.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from traceview.kernels.block_sizes import resolve_kv_block_size
from traceview.kernels.contract import MASK_VALUE, check_decode_inputs
from traceview.kernels.naming import kernel_name

#: Smallest tile side of a Triton dot (M, N and K must each be at least 16).
MIN_DOT = 16
#: Elements of one K (or V) chunk ``[bkv_c, D]``: 16384 = 32 KiB in bf16, 64 KiB in f32.
CHUNK_ELEMENTS = 16384


def _next_pow2(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


def compute_chunk(kv_block: int, head_dim: int) -> int:
    """Tokens per compute chunk ``bkv_c`` of a ``kv_block``-token KV block.

    ``min(next_pow2(kv_block), max(16, 16384 // D))``, at least 16: a power of two (Triton
    tiles), at least a Triton dot's 16, and a ``[bkv_c, D]`` chunk of at most 16384 elements.
    """
    return max(MIN_DOT, min(_next_pow2(kv_block), max(MIN_DOT, CHUNK_ELEMENTS // head_dim)))


def gpu_kernel_name(*, page_size: int, kv_block: int, head_dim: int) -> str:
    """The GPU kernel's name, ``RPAd-p_{page}-bq_1_1-bkv_{kv_block}_{bkv_c}`` (:func:`compute_chunk`)."""
    return kernel_name(page_size=page_size, kv_block=kv_block, kv_compute_block=compute_chunk(kv_block, head_dim))


def _gpu_decode_kernel(kv_lens_ref, pt_ref, q_ref, k_ref, v_ref, *rest, group: int, group_pad: int, page_size: int,
                       kv_block: int, chunk: int, sm_scale: float, quantized: bool):
    # kv_lens_ref int32[B]; pt_ref int32[B, pps]; q_ref [B, Hkv, G, D]; k_ref, v_ref [Hkv, P*page, D];
    # rest: (ks_ref, vs_ref [Hkv, P*page] f32,)? o_ref [B, Hkv, G, D]
    if quantized:
        ks_ref, vs_ref, o_ref = rest
    else:
        (o_ref,) = rest
    b = pl.program_id(0)
    h = pl.program_id(1)
    kv_len = kv_lens_ref[b]
    d = q_ref.shape[-1]
    # Every index is an array (or a scalar), none a slice: gathers both Triton and the
    # interpreter's discharge rule accept.
    rows_g = lax.broadcasted_iota(jnp.int32, (group_pad, 1), 0)
    cols = lax.broadcasted_iota(jnp.int32, (1, d), 1)
    q_mask = (rows_g < group) & (cols < d)
    q = plgpu.load(q_ref.at[b, h, rows_g, cols], mask=q_mask, other=0.0).astype(jnp.float32) * sm_scale
    n_chunks = -(-kv_block // chunk)
    lane = lax.broadcasted_iota(jnp.int32, (chunk,), 0)

    def chunk_body(blk, c, carry):
        m_prev, l_prev, acc_prev = carry
        tok = blk * kv_block + c * chunk + lane
        valid = (tok < kv_len) & (tok < (blk + 1) * kv_block)
        page_id = plgpu.load(pt_ref.at[b, tok // page_size], mask=valid, other=0)
        row = page_id * page_size + tok % page_size
        kv_mask = valid[:, None] & (cols < d)
        k = plgpu.load(k_ref.at[h, row[:, None], cols], mask=kv_mask, other=0).astype(jnp.float32)
        v = plgpu.load(v_ref.at[h, row[:, None], cols], mask=kv_mask, other=0).astype(jnp.float32)
        if quantized:
            k = k * plgpu.load(ks_ref.at[h, row], mask=valid, other=0.0)[:, None]
            v = v * plgpu.load(vs_ref.at[h, row], mask=valid, other=0.0)[:, None]
        s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        s = jnp.where(valid[None, :], s, MASK_VALUE)
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=1))
        alpha = jnp.exp(m_prev - m_new)
        p = jnp.exp(s - m_new[:, None])
        l_new = alpha * l_prev + jnp.sum(p, axis=1)
        acc_new = alpha[:, None] * acc_prev + lax.dot_general(p, v, (((1,), (0,)), ((), ())),
                                                              preferred_element_type=jnp.float32)
        return m_new, l_new, acc_new

    def block_body(blk, carry):
        return lax.fori_loop(0, n_chunks, functools.partial(chunk_body, blk), carry)

    num_blocks = (kv_len + kv_block - 1) // kv_block
    init = (
        jnp.full((group_pad,), -jnp.inf, jnp.float32),
        jnp.zeros((group_pad,), jnp.float32),
        jnp.zeros((group_pad, d), jnp.float32),
    )
    _, l_fin, acc = lax.fori_loop(0, num_blocks, block_body, init)
    safe_l = jnp.where(l_fin > 0.0, l_fin, 1.0)
    out = jnp.where((l_fin > 0.0)[:, None], acc / safe_l[:, None], 0.0)
    plgpu.store(o_ref.at[b, h, rows_g, cols], out.astype(o_ref.dtype), mask=q_mask)


def paged_decode_gpu(q, k_pages, v_pages, kv_lens, page_table, *, k_scales=None, v_scales=None,
                     kv_block_size: int | None = None, sm_scale: float | None = None, interpret: bool = False,
                     num_warps: int = 4, num_stages: int = 2):
    """Decode attention over a paged KV cache, compiled for NVIDIA GPUs (Pallas Triton).

    Args: as :func:`traceview.kernels.paged_attention.paged_decode` (same shapes, dtypes,
      int8 scale contract and KV block resolution); additionally ``D`` must be a power of two
      of at least 16 (Triton tiles). ``interpret=True`` runs the generic Pallas interpreter;
      ``num_warps``, ``num_stages``: Triton launch parameters.

    Returns: ``[B, Hq, D]`` in ``q.dtype``; rows with ``kv_len == 0`` are zeros.

    No cost estimate is passed: the Triton lowering drops it. The work at the maximum context
    is :func:`~traceview.kernels.paged_attention.decode_cost_estimate`'s with
    ``n_blk * ceil(bkv / bkv_c) * bkv_c`` computed columns.

    Raises: ValueError as ``paged_decode`` does, and for a head dim that is not a power of two
      of at least 16.
    """
    bsz, hq, d, hkv, page_size, quantized = check_decode_inputs(q, k_pages, v_pages, kv_lens, page_table, k_scales, v_scales)
    if d < MIN_DOT or d & (d - 1):
        raise ValueError(f"the GPU decode kernel needs a head dim that is a power of two of at least {MIN_DOT}, got {d}")
    pages_per_seq = page_table.shape[1]
    num_pages = k_pages.shape[1]
    bkv, _source = resolve_kv_block_size(kv_block_size, head_dim=d, num_kv_heads=hkv, dtype=k_pages.dtype,
                                         page_size=page_size, max_kv=pages_per_seq * page_size)
    chunk = compute_chunk(bkv, d)
    group = hq // hkv
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(d)
    kernel = functools.partial(_gpu_decode_kernel, group=group, group_pad=max(MIN_DOT, _next_pow2(group)),
                               page_size=page_size, kv_block=bkv, chunk=chunk, sm_scale=float(sm_scale),
                               quantized=quantized)
    # Row-major reshapes only (no copy): the pools as [Hkv, num_pages * page, D] rows.
    operands = [kv_lens.astype(jnp.int32), page_table.astype(jnp.int32), q.reshape(bsz, hkv, group, d),
                k_pages.reshape(hkv, num_pages * page_size, d), v_pages.reshape(hkv, num_pages * page_size, d)]
    if quantized:
        operands += [k_scales.astype(jnp.float32).reshape(hkv, num_pages * page_size),
                     v_scales.astype(jnp.float32).reshape(hkv, num_pages * page_size)]
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((bsz, hkv, group, d), q.dtype),
        grid=(bsz, hkv),
        compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages),
        interpret=interpret,
        name=gpu_kernel_name(page_size=page_size, kv_block=bkv, head_dim=d),
    )(*operands)
    return out.reshape(bsz, hq, d)


__all__ = ["paged_decode_gpu", "gpu_kernel_name", "compute_chunk"]
