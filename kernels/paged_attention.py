"""Ragged paged attention, decode phase: a Pallas kernel (one query token per sequence).

Layout (MaxText / jax ``ops.tpu.paged_attention`` style, one pool per layer):

* ``q``: ``[B, Hq, D]`` — one query token per sequence; ``Hq = G * Hkv`` query heads, where
  the ``G`` heads of group ``h`` share KV head ``h`` (MQA when ``Hkv == 1``).
* ``k_pages``, ``v_pages``: ``[Hkv, num_pages, page_size, D]`` — the paged KV cache, bfloat16,
  float32 or int8; int8 comes with float32 per-token scales ``k_scales``, ``v_scales``
  ``[Hkv, num_pages, page_size]`` (contract: :mod:`traceview.kernels.quant`), copied beside
  their pages and applied after the copy, before the dots.
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
* GPU: this kernel is not compiled there (Mosaic GPU has no scalar prefetch). On a GPU
  backend :func:`paged_decode` hands over to the GPU kernel of
  :mod:`traceview.kernels.paged_attention_gpu` (same contract and name grammar, page ids
  read inside the kernel) unless ``interpret=True``.

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
from traceview.kernels.contract import MASK_VALUE, check_decode_inputs
from traceview.kernels.naming import kernel_name
from traceview.kernels.quant import kv_dtype_name, kv_token_bytes

# Grid semantics: every (sequence, KV head) program is independent -> both axes parallel.
# pltpu.PARALLEL where the installed jax has it, else the string form.
_PARALLEL = getattr(pltpu, "PARALLEL", "parallel")


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
    *rest,
    page_size: int,
    pages_per_block: int,
    pages_per_seq: int,
    sm_scale: float,
    quantized: bool,
):
    # rest (float cache): o_ref [G, D], k_buf, v_buf (VMEM [pages_per_block, page, D]), sems DMA (2,)
    # rest (int8 cache):  ks_hbm, vs_hbm (ANY [Hkv, P, page] f32), o_ref, k_buf, v_buf,
    #                     ks_buf, vs_buf (VMEM [pages_per_block, page] f32), sems DMA (4,)
    if quantized:
        ks_hbm, vs_hbm, o_ref, k_buf, v_buf, ks_buf, vs_buf, sems = rest
    else:
        o_ref, k_buf, v_buf, sems = rest
    b = pl.program_id(0)
    h = pl.program_id(1)
    kv_len = kv_lens_ref[b]
    bkv = pages_per_block * page_size
    g, d = q_ref.shape
    q = q_ref[...].astype(jnp.float32) * sm_scale

    def page_copies(blk, i):
        page = page_idx_ref[b * pages_per_seq + blk * pages_per_block + i]
        copies = [
            pltpu.make_async_copy(k_hbm.at[h, page], k_buf.at[i], sems.at[0]),
            pltpu.make_async_copy(v_hbm.at[h, page], v_buf.at[i], sems.at[1]),
        ]
        if quantized:
            copies += [
                pltpu.make_async_copy(ks_hbm.at[h, page], ks_buf.at[i], sems.at[2]),
                pltpu.make_async_copy(vs_hbm.at[h, page], vs_buf.at[i], sems.at[3]),
            ]
        return copies

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

        # Compute the full block width with a mask (reshape values, not refs). An int8 block
        # is dequantized here, after its copy and before the dots (per-token scales).
        k = k_buf[...].reshape(bkv, d).astype(jnp.float32)
        v = v_buf[...].reshape(bkv, d).astype(jnp.float32)
        if quantized:
            k = k * ks_buf[...].reshape(bkv, 1)
            v = v * vs_buf[...].reshape(bkv, 1)
        col = first_tok + lax.broadcasted_iota(jnp.int32, (g, bkv), 1)
        row = first_tok + lax.broadcasted_iota(jnp.int32, (bkv, d), 0)
        v = jnp.where(row < kv_len, v, 0.0)  # stale scratch rows must not leak nan/inf
        s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        s = jnp.where(col < kv_len, s, MASK_VALUE)  # also hides stale k (and scale) rows
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


def decode_cost_estimate(*, batch: int, num_q_heads: int, num_kv_heads: int, head_dim: int, page_size: int,
                         pages_per_seq: int, kv_block: int, kv_dtype, q_dtype) -> dict:
    """Static cost of one :func:`paged_decode` call, as given to ``pl.CostEstimate``.

    ``kv_lens`` are traced values, so the estimate is taken at the **maximum context**: every
    sequence at ``kv_len = pages_per_seq * page_size`` tokens. With ``ppb = kv_block / page``
    pages per block, ``n_blk = ceil(pages_per_seq / ppb)`` blocks and ``T_c = n_blk * kv_block``
    computed columns (the **whole padded blocks**, masked columns included, as the kernel
    computes them):

    * ``flops = 4 * B * Hq * D * T_c``: QK^T and PV, 2 FLOPs per multiply-add each. The
      softmax, masking and int8 dequantization (elementwise) are not counted.
    * ``transcendentals = B * Hq * (T_c + n_blk)``: one ``exp`` per computed logit plus the
      per-block rescale ``exp(m_prev - m_new)``.
    * ``bytes_accessed = 2 * B * Hkv * pages_per_seq * page * (D * itemsize + s)`` (the K and V
      pages actually copied: all valid pages, none past ``kv_len``; ``s = 4`` bytes of int8
      scale per token, else 0) ``+ 2 * B * Hq * D * q_itemsize`` (q in, out)
      ``+ 4 * B * (1 + n_blk * ppb)`` (``kv_lens`` and the padded page table, int32).

    Returns: ``{"flops", "transcendentals", "bytes_accessed"}`` (ints).
    """
    ppb = kv_block // page_size
    n_blk = -(-pages_per_seq // ppb)
    t_c = n_blk * kv_block
    kv_bytes = 2 * batch * num_kv_heads * pages_per_seq * page_size * kv_token_bytes(head_dim=head_dim, dtype=kv_dtype)
    q_bytes = 2 * batch * num_q_heads * head_dim * jnp.dtype(q_dtype).itemsize
    return {
        "flops": 4 * batch * num_q_heads * head_dim * t_c,
        "transcendentals": batch * num_q_heads * (t_c + n_blk),
        "bytes_accessed": kv_bytes + q_bytes + 4 * batch * (1 + n_blk * ppb),
    }


def paged_decode(
    q,
    k_pages,
    v_pages,
    kv_lens,
    page_table,
    *,
    k_scales=None,
    v_scales=None,
    kv_block_size: int | None = None,
    sm_scale: float | None = None,
    interpret: bool | None = None,
):
    """Decode attention over a paged KV cache (Pallas).

    Args:
      q: ``[B, Hq, D]`` queries (any float dtype; computed in float32).
      k_pages, v_pages: ``[Hkv, num_pages, page_size, D]`` paged cache (bfloat16, float32, or
        int8 with scales); ``Hq % Hkv == 0``.
      kv_lens: ``int32[B]`` valid tokens per sequence, ``0 <= kv_len <= pages_per_seq * page_size``.
      page_table: ``int32[B, pages_per_seq]`` page ids per sequence.
      k_scales, v_scales: float32 ``[Hkv, num_pages, page_size]`` per-token scales, required
        with (and only with) an int8 cache (contract: :mod:`traceview.kernels.quant`). Each
        copied KV block is dequantized in the kernel, ``x = q * scale``, before the dots.
      kv_block_size: KV block in tokens; None resolves via :func:`decode_block_size`
        (env ``TRACEVIEW_KV_BLOCK_SIZE``, then the 16 MiB heuristic). Static: each value
        compiles its own kernel.
      sm_scale: logit scale, default ``D ** -0.5``.
      interpret: True runs this kernel in the generic Pallas interpreter (any backend).
        Otherwise: on a GPU backend the compiled GPU kernel
        (:func:`traceview.kernels.paged_attention_gpu.paged_decode_gpu`) runs; False compiles
        Mosaic TPU; None compiles on TPU and interprets on CPU.

    Returns: ``[B, Hq, D]`` in ``q.dtype``; rows with ``kv_len == 0`` are zeros.

    Math: ``out[b, h] = softmax(sm_scale * q[b, h] . K_b^T) V_b`` over the first
    ``kv_lens[b]`` tokens of sequence ``b``, KV head ``h // (Hq // Hkv)``; online softmax
    (running max / denominator, float32) across KV blocks. Cost estimate given to XLA:
    :func:`decode_cost_estimate`.

    Raises: ValueError for inconsistent shapes, an unsupported KV dtype, scales missing or
      misshapen, or an invalid KV block size.
    """
    bsz, hq, d, hkv, page_size, quantized = check_decode_inputs(q, k_pages, v_pages, kv_lens, page_table, k_scales, v_scales)
    kv_dtype = kv_dtype_name(k_pages.dtype)
    pages_per_seq = page_table.shape[1]
    bkv = decode_block_size(
        kv_block_size, head_dim=d, num_kv_heads=hkv, dtype=k_pages.dtype, page_size=page_size, max_kv=pages_per_seq * page_size
    )
    pages_per_block = bkv // page_size
    group = hq // hkv
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(d)
    backend = jax.default_backend()
    if backend == "gpu" and interpret is not True:
        from traceview.kernels.paged_attention_gpu import paged_decode_gpu

        return paged_decode_gpu(q, k_pages, v_pages, kv_lens, page_table, k_scales=k_scales, v_scales=v_scales,
                                kv_block_size=kv_block_size, sm_scale=sm_scale)
    if interpret is None:
        interpret = backend != "tpu"

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
        quantized=quantized,
    )
    qg = q.reshape(bsz, hkv, group, d)
    blk = pl.BlockSpec((None, None, group, d), lambda b, h, *_: (b, h, 0, 0))
    any_spec = pl.BlockSpec(memory_space=pl.ANY)
    scratch = [
        pltpu.VMEM((pages_per_block, page_size, d), k_pages.dtype),
        pltpu.VMEM((pages_per_block, page_size, d), v_pages.dtype),
    ]
    operands = [qg, k_pages, v_pages]
    if quantized:
        scratch += [pltpu.VMEM((pages_per_block, page_size), jnp.float32)] * 2
        operands += [k_scales.astype(jnp.float32), v_scales.astype(jnp.float32)]
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2,
        grid=(bsz, hkv),
        in_specs=[blk] + [any_spec] * (len(operands) - 1),
        out_specs=blk,
        scratch_shapes=scratch + [pltpu.SemaphoreType.DMA((4 if quantized else 2,))],
    )
    cost = pl.CostEstimate(**decode_cost_estimate(
        batch=bsz, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=page_size, pages_per_seq=pages_per_seq,
        kv_block=bkv, kv_dtype=kv_dtype, q_dtype=q.dtype))
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(qg.shape, q.dtype),
        grid_spec=grid_spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=(_PARALLEL, _PARALLEL)),
        interpret=interpret,
        name=kernel_name(page_size=page_size, kv_block=bkv),
        cost_estimate=cost,
    )(kv_lens.astype(jnp.int32), pt.reshape(-1), *operands)
    return out.reshape(bsz, hq, d)
