"""The GPU decode kernel (Pallas Triton): parity in interpret mode, lowering for CUDA on a CPU host.

No GPU here: the kernel's algorithm runs in the generic Pallas interpreter (``interpret=True``)
against the jnp reference, and the compiled path is exported for ``cuda`` (the Triton
lowering needs no device: JAX 0.10 falls back to compute capability 9.0, JAX 0.11 reads the
abstract device ``NVIDIA H200`` of the abstract mesh).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from traceview.kernels import parse_kernel_config  # noqa: E402
from traceview.kernels.paged_attention import paged_decode  # noqa: E402
from traceview.kernels.paged_attention_gpu import compute_chunk, gpu_kernel_name, paged_decode_gpu  # noqa: E402
from traceview.kernels.quant import quantize_int8  # noqa: E402
from traceview.kernels.reference import paged_decode_reference  # noqa: E402

# the custom call Pallas Triton lowers to (JAX 0.11 names it CUSTOM_CALL_TARGET_NAME; same value)
TRITON_CALL = getattr(__import__("jax.experimental.pallas.triton", fromlist=["_"]), "CUSTOM_CALL_TARGET_NAME",
                      "__gpu$xla.gpu.triton")


def _problem(lens, *, page=16, hq=8, hkv=1, d=64, pps=8, dtype=jnp.float32, seed=0):
    rng = np.random.default_rng(seed)
    b = len(lens)
    num_pages = b * pps + 1  # page 0 never handed out (the engine's trash page)
    q = jnp.asarray(rng.standard_normal((b, hq, d)), dtype)
    k = jnp.asarray(rng.standard_normal((hkv, num_pages, page, d)), dtype)
    v = jnp.asarray(rng.standard_normal((hkv, num_pages, page, d)), dtype)
    pt = jnp.asarray(rng.permutation(np.arange(1, num_pages))[: b * pps].reshape(b, pps), jnp.int32)
    return q, k, v, jnp.asarray(lens, jnp.int32), pt


def _run(q, k, v, kv_lens, pt, bkv, **scales):
    f = jax.jit(lambda *a, **s: paged_decode_gpu(*a, kv_block_size=bkv, interpret=True, **s))
    return np.asarray(f(q, k, v, kv_lens, pt, **scales), np.float32)


@pytest.mark.parametrize("page,bkv,pps,lens", [
    # page 16, block of 1 page; lengths at every page and block edge
    (16, 16, 8, [0, 1, 15, 16, 17, 37, 127, 128]),
    # 3-page block (48 tokens, not a power of two: the last chunk is masked at the block end)
    (16, 48, 8, [0, 47, 48, 49, 96, 127, 128, 5]),
    # page 8 (one page is smaller than the 16-token chunk), block 128 over a 96-token context
    (8, 32, 12, [0, 1, 7, 8, 9, 31, 33, 96]),
    # page 128 (the study's): one page per block, two blocks
    (128, 128, 2, [0, 1, 127, 128, 129, 200, 255, 256]),
])
def test_gpu_kernel_parity_f32_pages_blocks_ragged(page, bkv, pps, lens):
    q, k, v, kv_lens, pt = _problem(lens, page=page, pps=pps, seed=page + bkv)
    out = _run(q, k, v, kv_lens, pt, bkv)
    ref = np.asarray(paged_decode_reference(q, k, v, kv_lens, pt))
    np.testing.assert_allclose(out, ref, atol=2e-5, rtol=2e-5)
    assert np.all(out[np.asarray(lens) == 0] == 0.0) and np.all(np.isfinite(out))


def test_gpu_kernel_parity_grouped_heads_bf16_and_tpu_kernel_agreement():
    # GQA 12:4 (G = 3, padded to 16 rows), bf16 cache and queries, 48-token block.
    lens = [0, 47, 48, 49, 96, 127, 128, 5]
    q, k, v, kv_lens, pt = _problem(lens, hq=12, hkv=4, d=32, dtype=jnp.bfloat16, seed=1)
    out = _run(q, k, v, kv_lens, pt, 48)
    ref = np.asarray(paged_decode_reference(q, k, v, kv_lens, pt), np.float32)
    np.testing.assert_allclose(out, ref, atol=2e-2, rtol=2e-2)
    tpu = np.asarray(jax.jit(lambda *a: paged_decode(*a, kv_block_size=48, interpret=True))(q, k, v, kv_lens, pt), np.float32)
    np.testing.assert_allclose(out, tpu, atol=2e-2, rtol=2e-2)  # both round the f32 result to bf16


@pytest.mark.parametrize("bkv", [16, 64])
def test_gpu_kernel_parity_int8_same_contract(bkv):
    lens = [0, 1, 17, 47, 48, 96, 128, 5]
    q, k, v, kv_lens, pt = _problem(lens, hkv=2, d=32, seed=3)
    kq, ksc = quantize_int8(k)
    vq, vsc = quantize_int8(v)
    out = _run(q, kq, vq, kv_lens, pt, bkv, k_scales=ksc, v_scales=vsc)
    same = np.asarray(paged_decode_reference(q, kq, vq, kv_lens, pt, k_scales=ksc, v_scales=vsc))
    np.testing.assert_allclose(out, same, atol=2e-5, rtol=2e-5)
    exact = np.asarray(paged_decode_reference(q, k, v, kv_lens, pt))
    assert np.abs(out - exact).max() > 1e-4  # the int8 storage is really in effect


def test_gpu_kernel_reads_no_page_past_kv_len():
    # Poisoned (nan) pages past kv_len, and a page id past the pool in an unused table slot:
    # masked loads never read them.
    lens = [128, 3]
    q, k, v, kv_lens, pt = _problem(lens, seed=2)
    poison = np.asarray(pt)[1, 1:]
    k = k.at[:, poison].set(jnp.nan)
    v = v.at[:, poison].set(jnp.nan)
    pt = pt.at[1, 7].set(10_000)
    out = _run(q, k, v, kv_lens, pt, 64)
    assert np.all(np.isfinite(out))
    ref = np.asarray(paged_decode_reference(q, k, v, kv_lens, pt.at[1, 7].set(0)))
    np.testing.assert_allclose(out, ref, atol=2e-5, rtol=2e-5)


def test_gpu_kernel_name_and_chunk():
    assert compute_chunk(128, 64) == 128 and compute_chunk(2048, 256) == 64 and compute_chunk(48, 32) == 64
    assert compute_chunk(8, 64) == 16  # a Triton dot needs 16 columns
    name = gpu_kernel_name(page_size=128, kv_block=2048, head_dim=256)
    assert name == "RPAd-p_128-bq_1_1-bkv_2048_64"
    assert parse_kernel_config(name)["bkv"] == (2048, 64) and parse_kernel_config(name)["page"] == 128
    q, k, v, kv_lens, pt = _problem([5], d=24)
    with pytest.raises(ValueError, match="power of two"):
        paged_decode_gpu(q, k, v, kv_lens, pt, kv_block_size=16)


def _export_cuda(fn, args):
    """``jax.export`` for ``cuda`` on this CPU host; returns the module's MLIR text."""
    from jax.sharding import AbstractDevice, AbstractMesh, use_abstract_mesh

    mesh = AbstractMesh((1,), ("x",), abstract_device=AbstractDevice("NVIDIA H200", None, "cuda"))
    checks = [jax.export.DisabledSafetyCheck.custom_call(TRITON_CALL)]
    with use_abstract_mesh(mesh):
        exp = jax.export.export(jax.jit(fn), platforms=["cuda"], disabled_checks=checks)(*args)
    assert exp.platforms == ("cuda",)
    return exp.mlir_module()


def _triton_calls(text):
    return [line for line in text.splitlines() if f"custom_call @{TRITON_CALL}" in line]


@pytest.mark.parametrize("dtype,page,bkv,want", [
    ("bfloat16", 128, 2048, "RPAd-p_128-bq_1_1-bkv_2048_64"),  # the study's layer (D 256, 128-token pages)
    ("bfloat16", 128, 128, "RPAd-p_128-bq_1_1-bkv_128_64"),
    ("int8", 16, 256, "RPAd-p_16-bq_1_1-bkv_256_64"),
    ("float32", 16, 32, "RPAd-p_16-bq_1_1-bkv_32_32"),
])
def test_gpu_kernel_exports_for_cuda_as_named_triton_call(dtype, page, bkv, want):
    b, hq, hkv, d, pps = 8, 8, 1, 256, 2048 // page
    pool = jnp.int8 if dtype == "int8" else jnp.dtype(dtype)
    qdt = jnp.float32 if dtype == "float32" else jnp.bfloat16
    args = [jax.ShapeDtypeStruct((b, hq, d), qdt), jax.ShapeDtypeStruct((hkv, b * pps + 1, page, d), pool),
            jax.ShapeDtypeStruct((hkv, b * pps + 1, page, d), pool), jax.ShapeDtypeStruct((b,), jnp.int32),
            jax.ShapeDtypeStruct((b, pps), jnp.int32)]
    if dtype == "int8":
        args += [jax.ShapeDtypeStruct((hkv, b * pps + 1, page), jnp.float32)] * 2
        fn = lambda q, k, v, l, t, ks, vs: paged_decode_gpu(q, k, v, l, t, k_scales=ks, v_scales=vs, kv_block_size=bkv)  # noqa: E731
    else:
        fn = lambda *a: paged_decode_gpu(*a, kv_block_size=bkv)  # noqa: E731
    text = _export_cuda(fn, args)
    [call] = _triton_calls(text)
    assert f'name = "{want}"' in call  # the Triton kernel is named by its configuration
    assert "grid_x = 8 : i32, grid_y = 1 : i32" in call  # grid (B, Hkv)
    # the page table and kv_lens are plain operands (no scalar prefetch): 5 operands, 7 for int8
    assert len(re.search(r"\(([^)]*)\)", call.split(TRITON_CALL, 1)[1]).group(1).split(",")) == (7 if dtype == "int8" else 5)
    assert re.search(rf'loc\("[^"]*/{re.escape(want)}/pallas_call"', text)  # the op_name carries it too


def test_paged_decode_dispatches_to_gpu_kernel_on_a_gpu_backend(monkeypatch):
    # The engine calls paged_decode; on a GPU backend it must compile the GPU kernel (not the
    # interpreter, not Mosaic TPU), and interpret=True must keep the interpreter.
    q, k, v, kv_lens, pt = _problem([5, 40])
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    text = _export_cuda(lambda *a: paged_decode(*a, kv_block_size=32), (q, k, v, kv_lens, pt))
    [call] = _triton_calls(text)
    assert 'name = "RPAd-p_16-bq_1_1-bkv_32_32"' in call
    interp = jax.jit(lambda *a: paged_decode(*a, kv_block_size=32, interpret=True)).trace(q, k, v, kv_lens, pt)
    assert TRITON_CALL not in interp.lower(lowering_platforms=("cuda",)).as_text()


def test_engine_cli_interpret_flag_reaches_the_engine():
    # --interpret keeps the decode kernel in the Pallas interpreter on any backend (the device
    # run's fallback when the GPU kernel fails its check); without it the backend decides.
    from traceview.engine_shim.cli import _parser, _resolve

    args = _parser().parse_args(["profile", "--interpret", "--max-tokens", "2"])
    assert _resolve(args, {})["interpret"] is True
    assert "interpret" not in _resolve(_parser().parse_args(["profile"]), {})
