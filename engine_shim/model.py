"""Gemma-like decoder forward passes: jnp causal prefill, and decode through the Pallas kernel.

Architecture (Gemma 1, reduced to what matters for profiles): token embedding scaled by
``sqrt(d_model)``; per layer RMSNorm (``x * rsqrt(mean(x^2) + eps) * (1 + w)``) -> attention
with RoPE (rotate-half form, base 10000) and ``Hq`` query heads sharing ``Hkv`` KV heads ->
residual -> RMSNorm -> GeGLU MLP (``gelu_tanh(x Wg) * (x Wu) Wd``) -> residual; final
RMSNorm; logits against the tied embedding, accumulated in float32 and returned in the
model's dtype (``bf16[R, V]`` for a bfloat16 model, as a production engine returns them).

Weights are deterministic functions of a seed (``jax.random``), nothing is downloaded. The
output projections (``wo``, ``w_down``) are drawn :data:`OUTPUT_PROJ_SCALE` times larger than
``1/sqrt(fan_in)``: with tied embeddings a random model otherwise lets the last input
token's own embedding dominate the residual stream and just repeats that token, so greedy
outputs would not depend on attention at all (and kernel errors would be invisible).

The decode attention is called through the name ``paged_decode`` bound in this module
(``from traceview.kernels.paged_attention import paged_decode``): the transplant shim
rebinds exactly this kind of direct reference.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from traceview.kernels.paged_attention import paged_decode

from .config import ModelConfig
from .kv_cache import decode_operands, gather_pages, write_tokens

OUTPUT_PROJ_SCALE = 8.0


def init_params(cfg: ModelConfig, seed: int = 0) -> dict:
    """Random weights for ``cfg`` from ``seed``: normal(0, 1/fan_in) projections (times
    :data:`OUTPUT_PROJ_SCALE` for ``wo`` and ``w_down``), normal(0, 1/d_model) embedding,
    zero norm weights (i.e. unit scale)."""
    dt = jnp.dtype(cfg.dtype)
    d, hq, hkv, hd, f = cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.mlp_hidden
    key = jax.random.key(seed)

    def normal(k, shape, fan_in, scale=1.0):
        return (jax.random.normal(k, shape, jnp.float32) * (scale / math.sqrt(fan_in))).astype(dt)

    keys = jax.random.split(key, 1 + 7 * cfg.num_layers)
    params = {"embed": normal(keys[0], (cfg.vocab_size, d), d), "final_norm": jnp.zeros((d,), dt), "layers": []}
    for i in range(cfg.num_layers):
        k = keys[1 + 7 * i: 8 + 7 * i]
        params["layers"].append({
            "attn_norm": jnp.zeros((d,), dt),
            "wq": normal(k[0], (d, hq * hd), d),
            "wk": normal(k[1], (d, hkv * hd), d),
            "wv": normal(k[2], (d, hkv * hd), d),
            "wo": normal(k[3], (hq * hd, d), hq * hd, OUTPUT_PROJ_SCALE),
            "mlp_norm": jnp.zeros((d,), dt),
            "w_gate": normal(k[4], (d, f), d),
            "w_up": normal(k[5], (d, f), d),
            "w_down": normal(k[6], (f, d), f, OUTPUT_PROJ_SCALE),
        })
    return params


def rms_norm(x, w, eps):
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return (y * (1.0 + w.astype(jnp.float32))).astype(x.dtype)


def rope(x, positions, base):
    """Rotary embedding on ``x[..., T-like, H, D]`` at integer ``positions`` (broadcast over heads)."""
    d = x.shape[-1]
    inv = 1.0 / (base ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    ang = positions.astype(jnp.float32)[..., None, None] * inv  # [..., 1, D/2]
    sin, cos = jnp.sin(ang), jnp.cos(ang)
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def _mm(x, w):
    """``x @ w`` accumulated in float32, returned in ``x``'s dtype (the same program for a
    float32 model; for bfloat16, XLA:CPU's bf16 dot would otherwise convert ``w`` to float32
    on every call)."""
    return jnp.matmul(x, w, preferred_element_type=jnp.float32).astype(x.dtype)


def mlp(x, layer):
    return _mm(jax.nn.gelu(_mm(x, layer["w_gate"]), approximate=True) * _mm(x, layer["w_up"]), layer["w_down"])


#: the named scopes of the model's blocks (``jax.named_scope``): they reach the HLO ``op_name``
#: metadata and so a trace's framework op (``jit(decode_b8_bkv128)/attention/...``), which
#: family rules match (``traceview analyze --families study``)
SCOPES = ("attention", "mlp_gate_up", "mlp_down", "logits", "sampler")


def _mlp_block(x, layer, cfg):
    """``x + mlp(rms_norm(x))`` under the named scopes ``mlp_gate_up`` (norm, gate and up
    projections, GeGLU) and ``mlp_down`` (down projection, residual)."""
    with jax.named_scope("mlp_gate_up"):
        h = rms_norm(x, layer["mlp_norm"], cfg.norm_eps)
        h = jax.nn.gelu(_mm(h, layer["w_gate"]), approximate=True) * _mm(h, layer["w_up"])
    with jax.named_scope("mlp_down"):
        return x + _mm(h, layer["w_down"])


def _embed(params, cfg, tokens):
    return params["embed"][tokens] * jnp.asarray(math.sqrt(cfg.d_model), params["embed"].dtype)


def _logits(params, cfg, x):
    """Logits in ``cfg.dtype``: float32 accumulation (XLA:CPU's bf16 dot otherwise converts the
    whole embedding to float32 on every call), then rounded to the model's dtype."""
    with jax.named_scope("logits"):
        x = rms_norm(x, params["final_norm"], cfg.norm_eps)
        y = jnp.einsum("...d,vd->...v", x, params["embed"], preferred_element_type=jnp.float32)
        return y.astype(cfg.dtype)


def _qkv(layer, cfg: ModelConfig, x, positions):
    """One layer's attention inputs for ``x[N, d_model]`` at ``positions[N]``: ``q[N, Hq, D]``
    and ``k[N, Hkv, D]`` rotated (RoPE), ``v[N, Hkv, D]``, all from the RMS-normed ``x``."""
    n, hq, hkv, hd = x.shape[0], cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    h = rms_norm(x, layer["attn_norm"], cfg.norm_eps)
    q = rope(_mm(h, layer["wq"]).reshape(n, hq, hd), positions, cfg.rope_base)
    k = rope(_mm(h, layer["wk"]).reshape(n, hkv, hd), positions, cfg.rope_base)
    return q, k, _mm(h, layer["wv"]).reshape(n, hkv, hd)


def prefill_forward(params, cfg: ModelConfig, k_cache, v_cache, tokens, length, page_row, *, page_size: int):
    """Prefill one request: causal jnp attention over ``tokens``; writes K/V pages.

    Args:
      tokens: ``int32[T]`` padded to a token bucket; ``length``: int32 scalar (valid tokens).
      page_row: ``int32[pages_per_seq]`` the request's pages (unused entries may be 0).
      k_cache, v_cache: lists (per layer) of ``[Hkv, P, page, D]`` pools (int8 ones are
        :class:`~traceview.kernels.quant.QuantizedPages`). The prompt attends to its own
        unquantized K/V; the cache stores them in its dtype.

    Returns: ``(logits [V] at position length-1 in ``cfg.dtype``, k_cache, v_cache)``. Padded positions
    write to the trash page 0.
    """
    t = tokens.shape[0]
    hq, hkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    pos = jnp.arange(t, dtype=jnp.int32)
    valid = pos < length
    pids = jnp.where(valid, page_row[pos // page_size], 0)
    offs = pos % page_size
    causal = (pos[None, :] <= pos[:, None]) & valid[None, :]  # [T(query), T(key)]
    x = _embed(params, cfg, tokens)
    new_k, new_v = [], []
    for layer, kc, vc in zip(params["layers"], k_cache, v_cache):
        with jax.named_scope("attention"):
            q, k, v = _qkv(layer, cfg, x, pos)
            new_k.append(write_tokens(kc, pids, offs, k.transpose(1, 0, 2)))  # quantized on write for int8
            new_v.append(write_tokens(vc, pids, offs, v.transpose(1, 0, 2)))
            qg = q.reshape(t, hkv, hq // hkv, hd)
            s = jnp.einsum("thgd,shd->hgts", qg, k, preferred_element_type=jnp.float32) / math.sqrt(hd)
            s = jnp.where(causal, s, -jnp.inf)
            p = jax.nn.softmax(s, axis=-1).astype(v.dtype)
            o = jnp.einsum("hgts,shd->thgd", p, v).reshape(t, hq * hd)
            x = x + _mm(o, layer["wo"])
        x = _mlp_block(x, layer, cfg)
    last = jax.lax.dynamic_index_in_dim(x, jnp.maximum(length - 1, 0), axis=0, keepdims=False)
    return _logits(params, cfg, last), new_k, new_v


def chunked_prefill_forward(params, cfg: ModelConfig, k_cache, v_cache, tokens, positions, slots, page_table,
                            last_index, *, page_size: int):
    """One packed prefill step: prompt chunks of up to ``S`` requests in one token bucket.

    Each chunk's K/V are written to its request's pages first; then every token attends
    (causal jnp attention) over its own request's pages in the cache, i.e. the KV of earlier
    chunks or of prefix-cache pages, plus its own chunk up to itself.

    Args:
      tokens, positions: ``int32[T]`` packed chunk tokens and their positions in their
        request; ``slots``: ``int32[T]`` the token's request row in ``page_table``, ``-1`` for
        padding (written to the trash page 0, attends to nothing).
      page_table: ``int32[S, pages_per_seq]`` page rows of the requests in the step.
      last_index: ``int32[L]`` index in ``tokens`` of each row's last chunk token (``L >= S``
        rows of logits, the token-selection bucket; extra entries may be 0).
      k_cache, v_cache: lists (per layer) of ``[Hkv, P, page, D]`` pools.

    Returns: ``(logits [L, V] (``cfg.dtype``) at each row's last chunk token, k_cache, v_cache)``.
    Masked scores are ``-1e30`` rather than ``-inf`` so all-padding rows stay finite (the
    trash page must never hold NaN: a zero weight times NaN is NaN).
    Scores are ``[Hkv, G, T, S * pages_per_seq * page]``: masked to the token's own row and
    to key positions ``<=`` its position.
    """
    t = tokens.shape[0]
    s_rows, pps = page_table.shape
    hq, hkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    valid = slots >= 0
    row = jnp.where(valid, slots, 0)
    pids = jnp.where(valid, page_table[row, positions // page_size], 0)
    offs = positions % page_size
    ctx = pps * page_size
    key_row = jnp.arange(s_rows * ctx, dtype=jnp.int32) // ctx
    key_pos = jnp.arange(s_rows * ctx, dtype=jnp.int32) % ctx
    mask = (key_row[None, :] == slots[:, None]) & (key_pos[None, :] <= positions[:, None])  # [T, S*ctx]
    flat_pages = page_table.reshape(-1)
    x = _embed(params, cfg, tokens)
    new_k, new_v = [], []
    for layer, kc, vc in zip(params["layers"], k_cache, v_cache):
        with jax.named_scope("attention"):
            q, k, v = _qkv(layer, cfg, x, positions)
            kc = write_tokens(kc, pids, offs, k.transpose(1, 0, 2))  # quantized on write for int8
            vc = write_tokens(vc, pids, offs, v.transpose(1, 0, 2))
            new_k.append(kc)
            new_v.append(vc)
            kk = gather_pages(kc, flat_pages).reshape(hkv, s_rows * ctx, hd)  # the rows' pages, gathered
            vv = gather_pages(vc, flat_pages).reshape(hkv, s_rows * ctx, hd)
            qg = q.reshape(t, hkv, hq // hkv, hd)
            sc = jnp.einsum("thgd,hsd->hgts", qg, kk, preferred_element_type=jnp.float32) / math.sqrt(hd)
            sc = jnp.where(mask, sc, -1e30)  # finite: padding rows (all masked) stay finite, not NaN
            p = jax.nn.softmax(sc, axis=-1).astype(vv.dtype)
            o = jnp.einsum("hgts,hsd->thgd", p, vv).reshape(t, hq * hd)
            x = x + _mm(o, layer["wo"])
        x = _mlp_block(x, layer, cfg)
    return _logits(params, cfg, x[last_index]), new_k, new_v


def decode_forward(params, cfg: ModelConfig, k_cache, v_cache, tokens, positions, page_table, *, page_size: int,
                   kv_block_size: int, interpret: bool | None, attention=None):
    """One decode step for a padded batch of ``R`` rows.

    Args:
      tokens, positions: ``int32[R]`` last token and its position (= tokens already cached).
      page_table: ``int32[R, pages_per_seq]``; padded rows are all-zero (trash page).
      kv_block_size: static KV block for the kernel.

    Returns: ``(logits [R, V] in ``cfg.dtype``, k_cache, v_cache)``. Row ``r`` attends over
    ``positions[r] + 1`` tokens; padded rows (page table row 0) get ``kv_len`` 0.
    ``attention``: what runs the decode attention (``paged_decode``'s signature), default
    ``paged_decode``; the tensor-parallel engine passes it under ``shard_map``
    (:mod:`~traceview.engine_shim.tensor_parallel`).
    """
    r = tokens.shape[0]
    hq, hd = cfg.num_heads, cfg.head_dim
    real = page_table[:, 0] != 0
    kv_lens = jnp.where(real, positions + 1, 0).astype(jnp.int32)
    rows = jnp.arange(r)
    pids = page_table[rows, positions // page_size]
    offs = positions % page_size
    x = _embed(params, cfg, tokens)
    new_k, new_v = [], []
    for layer, kc, vc in zip(params["layers"], k_cache, v_cache):
        with jax.named_scope("attention"):
            q, k, v = _qkv(layer, cfg, x, positions)
            kc = write_tokens(kc, pids, offs, k.transpose(1, 0, 2))  # quantized on write for int8
            vc = write_tokens(vc, pids, offs, v.transpose(1, 0, 2))
            new_k.append(kc)
            new_v.append(vc)
            pages, scales = decode_operands(kc, vc)
            attn = paged_decode if attention is None else attention
            o = attn(q, *pages, kv_lens, page_table, kv_block_size=kv_block_size, interpret=interpret, **scales)
            x = x + _mm(o.reshape(r, hq * hd), layer["wo"])
        x = _mlp_block(x, layer, cfg)
    return _logits(params, cfg, x), new_k, new_v
