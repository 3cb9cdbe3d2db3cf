"""Ragged paged attention, decode phase: a Pallas kernel (one query token per sequence).

Layout (MaxText / jax ``ops.tpu.paged_attention`` style, one pool per layer):

* ``q``: ``[B, Hq, D]`` — one query token per sequence; ``Hq = G * Hkv`` query heads, where
  the ``G`` heads of group ``h`` share KV head ``h`` (MQA when ``Hkv == 1``).
* ``k_pages``, ``v_pages``: ``[Hkv, num_pages, page_size, D]`` — the paged KV cache.
* ``kv_lens``: ``int32[B]`` — valid cached tokens per sequence (0 allowed: output is zeros).
* ``page_table``: ``int32[B, pages_per_seq]`` — page ids; token ``t`` of sequence ``b`` sits
  at ``k_pages[:, page_table[b, t // page_size], t % page_size]``. Entries past
  ``ceil(kv_len / page_size)`` are never read.

Kernel structure (the body style of tpu-inference RPA v3): grid ``(B, Hkv)``; ``kv_lens`` and the flattened page
table are scalar-prefetched; K/V stay in ``pl.ANY`` memory and a ``fori_loop`` *inside the
kernel* walks ``ceil(kv_len / bkv)`` KV blocks. For each block it copies the block's valid
pages (one async copy per page, skipped past ``kv_len``) into a ``[bkv/page, page, D]``
scratch buffer, then computes the *full* ``bkv``-wide block with a mask (online softmax in
float32). Hence a short sequence in a large block pays for the masked columns — the effect
the KV-block-size override exists to avoid.

Backends (what was actually exercised, jax 0.10.2):

* CPU, ``interpret=True`` (generic Pallas interpreter): **run** — parity tests, engine, traces.
* TPU (Mosaic): **lowered only**, by cross-lowering on a CPU host to ``tpu_custom_call``
  (see ``tests/test_kernel_parity.py::test_cross_lowers_to_mosaic_tpu``); never run on a
  TPU here. Mosaic's layout passes run later in the TPU compiler, so lowering is necessary,
  not sufficient.
* GPU: not supported compiled (Mosaic GPU has no scalar prefetch; the Triton backend is
  deprecated from JAX 0.11). ``interpret=None`` therefore runs the interpreter on GPU.

The kernel name carries its configuration (``RPAd-p_{page}-bq_1_1-bkv_{bkv}_{bkv}``, see
:mod:`traceview.kernels.naming`), so the KV block size can be read off any trace.

Imports are absolute (``traceview.kernels...``) so that a copy of this file placed
elsewhere (the transplant shim's ``my_kernels/kernel.py``) still imports.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from traceview.kernels.block_sizes import resolve_kv_block_size
from traceview.kernels.naming import kernel_name

# Grid semantics: every (sequence, KV head) program is independent -> both axes parallel.
# pltpu.PARALLEL where the installed jax has it, else the string form.
_PARALLEL = getattr(pltpu, "PARALLEL", "parallel")

#: Finite mask value for masked logits (as jax's Pallas attention ops use), so that
#: ``exp(mask - max)`` underflows to 0 instead of producing ``inf - inf = nan``.
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


def decode_block_size(kv_block_size=None, *, head_dim: int, num_kv_heads: int, dtype, page_size: int, max_kv: int) -> int:
    """KV block size (tokens) the decode kernel will use for this cache geometry.

    Precedence: ``kv_block_size`` argument > env ``TRACEVIEW_KV_BLOCK_SIZE`` > the 16 MiB
    heuristic of tpu-inference RPA v3 (:func:`traceview.kernels.block_sizes.default_kv_block_size`).
    The engine calls this once per engine so the value can be put in bucket names.

    Raises: ValueError for a value that is not a positive multiple of ``page_size`` or that
      exceeds ``max_kv``.
    """
    bkv, _source = resolve_kv_block_size(
        kv_block_size, head_dim=head_dim, num_kv_heads=num_kv_heads, dtype=dtype, page_size=page_size, max_kv=max_kv
    )
    return bkv


def _paged_decode_kernel(
    kv_lens_ref,  # SMEM int32[B]
    page_idx_ref,  # SMEM int32[B * pages_per_seq]
    q_ref,  # [G, D]
    k_hbm,  # ANY [Hkv, P, page, D]
    v_hbm,  # ANY [Hkv, P, page, D]
    o_ref,  # [G, D]
    k_buf,  # VMEM [pages_per_block, page, D]
    v_buf,  # VMEM [pages_per_block, page, D]
    sems,  # DMA semaphores (2,)
    *,
    page_size: int,
    pages_per_block: int,
    pages_per_seq: int,
    sm_scale: float,
):
    b = pl.program_id(0)
    h = pl.program_id(1)
    kv_len = kv_lens_ref[b]
    bkv = pages_per_block * page_size
    g, d = q_ref.shape
    q = q_ref[...].astype(jnp.float32) * sm_scale

    def page_copies(blk, i):
        page = page_idx_ref[b * pages_per_seq + blk * pages_per_block + i]
        return (
            pltpu.make_async_copy(k_hbm.at[h, page], k_buf.at[i], sems.at[0]),
            pltpu.make_async_copy(v_hbm.at[h, page], v_buf.at[i], sems.at[1]),
        )

    def block_body(blk, carry):
        m_prev, l_prev, acc_prev = carry
        first_tok = blk * bkv

        # Fetch: one copy per valid page of this block; pages past kv_len are skipped.
        def start(i, c):
            @pl.when(first_tok + i * page_size < kv_len)
            def _():
                for cp in page_copies(blk, i):
                    cp.start()
            return c

        def wait(i, c):
            @pl.when(first_tok + i * page_size < kv_len)
            def _():
                for cp in page_copies(blk, i):
                    cp.wait()
            return c

        lax.fori_loop(0, pages_per_block, start, 0)
        lax.fori_loop(0, pages_per_block, wait, 0)

        # Compute the full block width with a mask (reshape values, not refs).
        k = k_buf[...].reshape(bkv, d).astype(jnp.float32)
        v = v_buf[...].reshape(bkv, d).astype(jnp.float32)
        col = first_tok + lax.broadcasted_iota(jnp.int32, (g, bkv), 1)
        row = first_tok + lax.broadcasted_iota(jnp.int32, (bkv, d), 0)
        v = jnp.where(row < kv_len, v, 0.0)  # stale scratch rows must not leak nan/inf
        s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        s = jnp.where(col < kv_len, s, MASK_VALUE)
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
        alpha = jnp.exp(m_prev - m_new)
        p = jnp.exp(s - m_new)
        l_new = alpha * l_prev + jnp.sum(p, axis=1, keepdims=True)
        acc_new = alpha * acc_prev + lax.dot_general(p, v, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
        return m_new, l_new, acc_new

    num_blocks = (kv_len + bkv - 1) // bkv
    init = (
        jnp.full((g, 1), -jnp.inf, jnp.float32),
        jnp.zeros((g, 1), jnp.float32),
        jnp.zeros((g, d), jnp.float32),
    )
    _, l_fin, acc = lax.fori_loop(0, num_blocks, block_body, init)
    safe_l = jnp.where(l_fin > 0.0, l_fin, 1.0)
    o_ref[...] = jnp.where(l_fin > 0.0, acc / safe_l, 0.0).astype(o_ref.dtype)


def paged_decode(
    q,
    k_pages,
    v_pages,
    kv_lens,
    page_table,
    *,
    kv_block_size: int | None = None,
    sm_scale: float | None = None,
    interpret: bool | None = None,
):
    """Decode attention over a paged KV cache (Pallas).

    Args:
      q: ``[B, Hq, D]`` queries (any float dtype; computed in float32).
      k_pages, v_pages: ``[Hkv, num_pages, page_size, D]`` paged cache; ``Hq % Hkv == 0``.
      kv_lens: ``int32[B]`` valid tokens per sequence, ``0 <= kv_len <= pages_per_seq * page_size``.
      page_table: ``int32[B, pages_per_seq]`` page ids per sequence.
      kv_block_size: KV block in tokens; None resolves via :func:`decode_block_size`
        (env ``TRACEVIEW_KV_BLOCK_SIZE``, then the 16 MiB heuristic). Static: each value
        compiles its own kernel.
      sm_scale: logit scale, default ``D ** -0.5``.
      interpret: True runs the generic Pallas interpreter; False compiles (Mosaic TPU);
        None picks False on TPU and True elsewhere.

    Returns: ``[B, Hq, D]`` in ``q.dtype``; rows with ``kv_len == 0`` are zeros.

    Math: ``out[b, h] = softmax(sm_scale * q[b, h] . K_b^T) V_b`` over the first
    ``kv_lens[b]`` tokens of sequence ``b``, KV head ``h // (Hq // Hkv)``; online softmax
    (running max / denominator, float32) across KV blocks.

    Raises: ValueError for inconsistent shapes or an invalid KV block size.
    """
    if q.ndim != 3 or k_pages.ndim != 4 or v_pages.shape != k_pages.shape:
        raise ValueError(f"expected q[B,Hq,D] and k/v_pages[Hkv,P,page,D] of equal shape; got {q.shape}, {k_pages.shape}, {v_pages.shape}")
    bsz, hq, d = q.shape
    hkv, _num_pages, page_size, dk = k_pages.shape
    if dk != d or hq % hkv:
        raise ValueError(f"head_dim mismatch or Hq={hq} not a multiple of Hkv={hkv} (q {q.shape}, pages {k_pages.shape})")
    if page_table.ndim != 2 or page_table.shape[0] != bsz or kv_lens.shape != (bsz,):
        raise ValueError(f"expected page_table[{bsz}, pages_per_seq] and kv_lens[{bsz}]; got {page_table.shape}, {kv_lens.shape}")
    pages_per_seq = page_table.shape[1]
    bkv = decode_block_size(
        kv_block_size, head_dim=d, num_kv_heads=hkv, dtype=k_pages.dtype, page_size=page_size, max_kv=pages_per_seq * page_size
    )
    pages_per_block = bkv // page_size
    group = hq // hkv
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(d)
    if interpret is None:
        interpret = jax.default_backend() != "tpu"

    # Pad the page table so a block's page index never reads past the row (the last block
    # may extend beyond pages_per_seq when max context is not a multiple of bkv).
    padded_pps = -(-pages_per_seq // pages_per_block) * pages_per_block
    pt = page_table.astype(jnp.int32)
    if padded_pps != pages_per_seq:
        pt = jnp.pad(pt, ((0, 0), (0, padded_pps - pages_per_seq)))

    kernel = functools.partial(
        _paged_decode_kernel,
        page_size=page_size,
        pages_per_block=pages_per_block,
        pages_per_seq=padded_pps,
        sm_scale=float(sm_scale),
    )
    qg = q.reshape(bsz, hkv, group, d)
    blk = pl.BlockSpec((None, None, group, d), lambda b, h, *_: (b, h, 0, 0))
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2,
        grid=(bsz, hkv),
        in_specs=[blk, pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=blk,
        scratch_shapes=[
            pltpu.VMEM((pages_per_block, page_size, d), k_pages.dtype),
            pltpu.VMEM((pages_per_block, page_size, d), v_pages.dtype),
            pltpu.SemaphoreType.DMA((2,)),
        ],
    )
    itemsize = jnp.dtype(k_pages.dtype).itemsize
    max_kv = padded_pps * page_size
    # Upper bound (every sequence at max context): XLA only uses it for scheduling.
    cost = pl.CostEstimate(
        flops=4 * bsz * hq * d * max_kv,
        transcendentals=bsz * hq * max_kv,
        bytes_accessed=2 * bsz * hkv * max_kv * d * itemsize + 2 * q.size * jnp.dtype(q.dtype).itemsize,
    )
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(qg.shape, q.dtype),
        grid_spec=grid_spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=(_PARALLEL, _PARALLEL)),
        interpret=interpret,
        name=kernel_name(page_size=page_size, kv_block=bkv),
        cost_estimate=cost,
    )(kv_lens.astype(jnp.int32), pt.reshape(-1), qg, k_pages, v_pages)
    return out.reshape(bsz, hq, d)
