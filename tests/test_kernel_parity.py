"""Pallas paged decode kernel vs the jnp reference (CPU interpret mode), naming and lowering."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from traceview.kernels.paged_attention import paged_decode  # noqa: E402
from traceview.kernels.reference import paged_decode_reference  # noqa: E402

PAGE = 16


def _problem(lens, *, hq=8, hkv=1, d=64, pps=8, dtype=jnp.float32, seed=0):
    rng = np.random.default_rng(seed)
    b = len(lens)
    num_pages = b * pps + 1  # page 0 is never handed out, like the engine's trash page
    q = jnp.asarray(rng.standard_normal((b, hq, d)), dtype)
    k = jnp.asarray(rng.standard_normal((hkv, num_pages, PAGE, d)), dtype)
    v = jnp.asarray(rng.standard_normal((hkv, num_pages, PAGE, d)), dtype)
    # Shuffled, non-contiguous pages so the page table really is consulted.
    pt = jnp.asarray(rng.permutation(np.arange(1, num_pages))[: b * pps].reshape(b, pps), jnp.int32)
    return q, k, v, jnp.asarray(lens, jnp.int32), pt


def _edge_lengths(bkv, max_kv):
    lens = {0, 1, PAGE - 1, PAGE, PAGE + 1, bkv - 1, bkv, bkv + 1, max_kv - 1, max_kv, 2 * PAGE + 5}
    return sorted(x for x in lens if 0 <= x <= max_kv)


@pytest.mark.parametrize("bkv", [16, 32, 64, 128])
def test_parity_across_block_sizes_and_ragged_lengths(bkv):
    max_kv = 8 * PAGE  # 128 tokens
    lens = _edge_lengths(bkv, max_kv)
    q, k, v, kv_lens, pt = _problem(lens)
    out = jax.jit(lambda *a: paged_decode(*a, kv_block_size=bkv))(q, k, v, kv_lens, pt)
    ref = paged_decode_reference(q, k, v, kv_lens, pt)
    assert out.shape == q.shape and out.dtype == q.dtype
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=2e-5, rtol=2e-5)
    # kv_len == 0 rows (padded request slots) are exactly zero, never nan.
    assert np.all(np.asarray(out)[np.asarray(lens) == 0] == 0.0)
    assert np.all(np.isfinite(np.asarray(out)))


def test_parity_grouped_heads_bf16_and_block_not_dividing_context():
    # GQA 8:2, bf16 cache, bkv=48 (3 pages) does not divide the 128-token context.
    lens = [0, 47, 48, 49, 96, 127, 128, 5]
    q, k, v, kv_lens, pt = _problem(lens, hq=8, hkv=2, d=32, dtype=jnp.bfloat16, seed=1)
    out = jax.jit(lambda *a: paged_decode(*a, kv_block_size=48))(q, k, v, kv_lens, pt)
    ref = paged_decode_reference(q, k, v, kv_lens, pt)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(ref, np.float32), atol=2e-2, rtol=2e-2)


def test_stale_scratch_does_not_leak_nan():
    # A long sequence followed by a short one: the short one's block reuses scratch rows that
    # still hold the long one's pages; poisoned (nan) pages past kv_len must not leak.
    lens = [128, 3]
    q, k, v, kv_lens, pt = _problem(lens, seed=2)
    poison = np.asarray(pt)[1, 1:]  # pages of seq 1 beyond its first page
    k = k.at[:, poison].set(jnp.nan)
    v = v.at[:, poison].set(jnp.nan)
    out = jax.jit(lambda *a: paged_decode(*a, kv_block_size=64))(q, k, v, kv_lens, pt)
    ref = paged_decode_reference(q, k, v, kv_lens, pt)
    assert np.all(np.isfinite(np.asarray(out)))
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=2e-5, rtol=2e-5)


def test_kernel_name_in_hlo_carries_block_size():
    from traceview.kernels import parse_kernel_config

    q, k, v, kv_lens, pt = _problem([5, 9])
    text = jax.jit(lambda *a: paged_decode(*a, kv_block_size=32)).lower(q, k, v, kv_lens, pt).compile().as_text()
    assert "RPAd-p_16-bq_1_1-bkv_32_32" in text
    op_names = [line for line in text.splitlines() if "RPAd-" in line]
    assert parse_kernel_config(op_names[0])["bkv"] == (32, 32)


def test_block_size_from_env_reaches_kernel(monkeypatch):
    monkeypatch.setenv("TRACEVIEW_KV_BLOCK_SIZE", "48")
    q, k, v, kv_lens, pt = _problem([5, 9])
    text = jax.jit(lambda *a: paged_decode(*a)).lower(q, k, v, kv_lens, pt).compile().as_text()
    assert "RPAd-p_16-bq_1_1-bkv_48_48" in text


def test_invalid_block_size_raises_before_tracing():
    q, k, v, kv_lens, pt = _problem([5, 9])
    with pytest.raises(ValueError, match="multiple of the page size"):
        paged_decode(q, k, v, kv_lens, pt, kv_block_size=20)


@pytest.mark.parametrize("chip", ["TPU v5 lite", "TPU v6 lite"])
def test_cross_lowers_to_mosaic_tpu(chip):
    """Lowering only (no TPU here): the kernel becomes a tpu_custom_call named by its config."""
    from jax.sharding import AbstractDevice, AbstractMesh, use_abstract_mesh

    b, hq, hkv, d, pps = 8, 8, 1, 256, 128  # Gemma-2B-like layer, 2048-token context
    dt = jnp.bfloat16
    shapes = (
        jax.ShapeDtypeStruct((b, hq, d), dt),
        jax.ShapeDtypeStruct((hkv, b * pps + 1, PAGE, d), dt),
        jax.ShapeDtypeStruct((hkv, b * pps + 1, PAGE, d), dt),
        jax.ShapeDtypeStruct((b,), jnp.int32),
        jax.ShapeDtypeStruct((b, pps), jnp.int32),
    )
    f = jax.jit(lambda *a: paged_decode(*a, interpret=False))  # heuristic block: 2048
    with use_abstract_mesh(AbstractMesh((1,), ("x",), abstract_device=AbstractDevice(chip, 1, "tpu"))):
        text = f.trace(*shapes).lower(lowering_platforms=("tpu",)).as_text()
    assert "tpu_custom_call" in text
    assert 'kernel_name = "RPAd-p_16-bq_1_1-bkv_2048_2048"' in text
