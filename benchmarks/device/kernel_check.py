"""The GPU decode kernel against the reference on the device (step ``kernel_check`` of run.sh).

Compiles :func:`traceview.kernels.paged_attention_gpu.paged_decode_gpu` (interpreted when the
backend is not a GPU: the dry run) for the tiny and study layer shapes (dry run: tiny at a
64-token context), bf16, float32 (tiny) and int8 KV, KV blocks 128 and 2048 (dry run: 16 and
64), ragged lengths; checks parity with
:func:`traceview.kernels.reference.paged_decode_reference` under the same storage (float32
rounding, ``atol = rtol = 2e-5``, bf16 outputs ``2e-2``), and times each compiled call
(median of ``REPS`` calls after one warm-up, blocked on the result; GPU only).

Prints one JSON object: ``{"backend", "interpret", "cases": [{..., "max_abs_err", "ok",
"median_us"}], "ok"}``. Exit 0 when every case matches, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from traceview.kernels.paged_attention_gpu import gpu_kernel_name, paged_decode_gpu
from traceview.kernels.quant import quantize_int8
from traceview.kernels.reference import paged_decode_reference


def _case(*, d, page, pps, bkv, kv_dtype, lens, interpret, reps, seed=0):
    rng = np.random.default_rng(seed)
    b, hq, hkv = len(lens), 8, 1
    num_pages = b * pps + 1
    q = jnp.asarray(rng.standard_normal((b, hq, d)), jnp.float32 if kv_dtype == "float32" else jnp.bfloat16)
    k = jnp.asarray(rng.standard_normal((hkv, num_pages, page, d)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((hkv, num_pages, page, d)), jnp.float32)
    pt = jnp.asarray(rng.permutation(np.arange(1, num_pages))[: b * pps].reshape(b, pps), jnp.int32)
    kv_lens = jnp.asarray(lens, jnp.int32)
    scales = {}
    if kv_dtype == "int8":
        (k, ks), (v, vs) = quantize_int8(k), quantize_int8(v)
        scales = {"k_scales": ks, "v_scales": vs}
    else:
        k, v = k.astype(kv_dtype), v.astype(kv_dtype)
    f = jax.jit(lambda *a, **s: paged_decode_gpu(*a, kv_block_size=bkv, interpret=interpret, **s))
    out = f(q, k, v, kv_lens, pt, **scales).block_until_ready()
    ref = paged_decode_reference(q, k, v, kv_lens, pt, **scales)
    err = float(jnp.max(jnp.abs(out.astype(jnp.float32) - ref.astype(jnp.float32))))
    tol = 2e-2 if q.dtype == jnp.bfloat16 else 2e-5
    ok = bool(np.allclose(np.asarray(out, np.float32), np.asarray(ref, np.float32), atol=tol, rtol=tol))
    ok = ok and bool(np.all(np.asarray(out, np.float32)[np.asarray(lens) == 0] == 0.0))
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f(q, k, v, kv_lens, pt, **scales).block_until_ready()
        times.append(time.perf_counter() - t)
    return {"kernel": gpu_kernel_name(page_size=page, kv_block=bkv, head_dim=d), "head_dim": d, "kv_dtype": kv_dtype,
            "batch": b, "lens": list(lens), "max_abs_err": err, "tolerance": tol, "ok": ok,
            "median_us": round(1e6 * float(np.median(times)), 1) if times else None}


def main() -> int:
    on_gpu = jax.default_backend() == "gpu"
    dry = not on_gpu
    reps = int(os.environ.get("REPS", "20")) if on_gpu else 0
    big, small = ("64", "16") if dry else ("2048", "128")
    cases = []
    shapes = ((64, 16, 64),) if dry else ((64, 16, 512), (256, 128, 2048))  # (D, page, context): tiny, study
    for d, page, ctx in shapes:
        pps = ctx // page
        lens = [0, page + 1, ctx - 1, 140 % ctx] if dry else [0, 1, page - 1, page + 1, ctx // 2 + 3, ctx - 1, ctx, 140]
        for kv_dtype in ("bfloat16", "int8") + (("float32",) if d == 64 else ()):
            for bkv in (int(small), min(int(big), ctx)):
                cases.append(_case(d=d, page=page, pps=pps, bkv=bkv, kv_dtype=kv_dtype, lens=lens, interpret=dry, reps=reps))
                print(json.dumps(cases[-1]), file=sys.stderr, flush=True)
    res = {"backend": jax.default_backend(), "interpret": dry, "jax": jax.__version__, "cases": cases,
           "ok": all(c["ok"] for c in cases)}
    print(json.dumps(res, indent=2))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
