"""Compile time of the Pallas decode kernel against the jnp reference (``traceview engine compile-time``).

The study's Pallas-versus-XLA compile measurement at one decode shape: for each
implementation (``pallas``: :func:`traceview.kernels.paged_attention.paged_decode`;
``reference``: :func:`traceview.kernels.reference.paged_decode_reference`, plain XLA ops),
each trial is a **fresh Python process** (``python -m traceview.engine_shim.compile_time
--worker SPEC``) with the JAX compilation cache disabled (``JAX_ENABLE_COMPILATION_CACHE=false``,
``JAX_COMPILATION_CACHE_DIR`` removed, and ``jax_enable_compilation_cache`` set off in the
worker), so no trial reuses another's compiled code or tracing caches. In the worker, after
importing jax and one trivial warm-up op (backend start-up is not compile time):

* ``lower_s``: ``jax.jit(f).lower(*args)`` (tracing + lowering to StableHLO);
* ``compile_s``: ``.compile()`` of that lowering (XLA, and for Pallas on TPU, Mosaic);
* ``first_exec_s``: the first call of the compiled function, to ``block_until_ready``.

Inputs: ``q [B, Hq, D]`` and K/V pools for ``B`` sequences at ``max_model_len`` tokens
(``pages_per_seq = ceil(max_model_len / page)``), every ``kv_len`` at the maximum, random
normal values (int8: quantized before timing). Trials alternate which implementation runs
first. Times in seconds (``time.perf_counter``); summaries are the median and the range
(min, max) over the trials.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

IMPLS = ("pallas", "reference")
PHASES = ("lower_s", "compile_s", "first_exec_s")


def shape_spec(*, model: str = "study", batch: int = 8, max_model_len: int = 512, kv_block_size: int | None = None,
               kv_dtype: str | None = None, interpret: bool | None = None) -> dict:
    """The decode shape of a model preset: ``{batch, num_q_heads, num_kv_heads, head_dim, page_size,
    pages_per_seq, kv_block_size, kv_dtype, interpret, model}``.

    ``kv_dtype`` None is resolved in the worker (:func:`~traceview.engine_shim.config.default_kv_dtype`
    of its backend), and so is ``kv_block_size`` None (the kernel's heuristic for that dtype; the
    worker's environment has no ``TRACEVIEW_KV_BLOCK_SIZE``). An explicit block is validated here.

    Raises: ValueError for an unknown preset, non-positive sizes, an unknown KV dtype or an
      invalid KV block size.
    """
    from traceview.kernels.block_sizes import validate_kv_block_size

    from .config import KV_DTYPES, model_config

    mc = model_config(model)
    if int(batch) < 1 or int(max_model_len) < 1:
        raise ValueError(f"batch={batch} and max_model_len={max_model_len} must be positive")
    if kv_dtype is not None and kv_dtype not in KV_DTYPES:
        raise ValueError(f"kv_dtype={kv_dtype!r} must be one of {', '.join(KV_DTYPES)}")
    pps = -(-int(max_model_len) // mc.page_size)
    bkv = None if kv_block_size is None else validate_kv_block_size(kv_block_size, page_size=mc.page_size,
                                                                     max_kv=pps * mc.page_size)
    return {"model": mc.name, "batch": int(batch), "num_q_heads": mc.num_heads, "num_kv_heads": mc.num_kv_heads,
            "head_dim": mc.head_dim, "page_size": mc.page_size, "pages_per_seq": pps, "kv_block_size": bkv,
            "kv_dtype": kv_dtype, "interpret": interpret}


def measure_once(impl: str, spec: dict) -> dict:
    """Time lower / compile / first execution of ``impl`` at ``spec`` in *this* process.

    Returns: ``{"impl", "lower_s", "compile_s", "first_exec_s", "kv_dtype", "kv_block_size", "backend", "jax"}``.
    Raises: ValueError for an unknown ``impl``.
    """
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r} must be one of {IMPLS}")
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    import jax.numpy as jnp
    import numpy as np

    from traceview.kernels.paged_attention import decode_block_size, paged_decode
    from traceview.kernels.quant import quantize_int8
    from traceview.kernels.reference import paged_decode_reference

    from .config import default_kv_dtype

    jnp.zeros(()).block_until_ready()  # backend start-up, outside the timings
    kv_dtype = spec["kv_dtype"] or default_kv_dtype(jax.default_backend())
    b, hq, hkv, d, page, pps = (spec[k] for k in ("batch", "num_q_heads", "num_kv_heads", "head_dim", "page_size",
                                                  "pages_per_seq"))
    rng = np.random.default_rng(0)
    num_pages = b * pps + 1
    q = jnp.asarray(rng.standard_normal((b, hq, d)), jnp.float32)
    kf = rng.standard_normal((hkv, num_pages, page, d)).astype(np.float32)
    vf = rng.standard_normal((hkv, num_pages, page, d)).astype(np.float32)
    kv_lens = jnp.full((b,), pps * page, jnp.int32)
    table = jnp.asarray(np.arange(1, num_pages, dtype=np.int32).reshape(b, pps))
    if kv_dtype == "int8":
        (k, ks), (v, vs) = quantize_int8(kf), quantize_int8(vf)
        extra = (ks, vs)
    else:
        k, v, extra = jnp.asarray(kf, kv_dtype), jnp.asarray(vf, kv_dtype), ()
    args = jax.block_until_ready((q, k, v, kv_lens, table, *extra))

    bkv = decode_block_size(spec["kv_block_size"], head_dim=d, num_kv_heads=hkv, dtype=k.dtype, page_size=page,
                            max_kv=pps * page)
    interpret = spec["interpret"]

    def fn(q, k, v, kv_lens, table, *scales):
        sc = dict(zip(("k_scales", "v_scales"), scales))
        if impl == "pallas":
            return paged_decode(q, k, v, kv_lens, table, kv_block_size=bkv, interpret=interpret, **sc)
        return paged_decode_reference(q, k, v, kv_lens, table, **sc)

    fn.__name__ = fn.__qualname__ = f"attention_{impl}"
    t0 = time.perf_counter()
    lowered = jax.jit(fn).lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    t3 = time.perf_counter()
    return {"impl": impl, "lower_s": t1 - t0, "compile_s": t2 - t1, "first_exec_s": t3 - t2, "kv_dtype": kv_dtype,
            "kv_block_size": bkv,
            "backend": jax.default_backend(), "jax": jax.__version__}


def _child_env(env) -> dict:
    out = dict(env)
    out["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    out.pop("JAX_COMPILATION_CACHE_DIR", None)
    out.pop("TRACEVIEW_KV_BLOCK_SIZE", None)
    return out


def _run_worker(impl: str, spec: dict, *, python: str, timeout_s: float, env) -> dict:
    cmd = [python, "-m", "traceview.engine_shim.compile_time", "--worker", json.dumps({"impl": impl, "spec": spec})]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=_child_env(env))
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{impl} trial ran past {timeout_s:g} s") from None
    wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise RuntimeError(f"{impl} trial failed: {last}")
    out = json.loads(lines[-1])
    out["process_s"] = wall
    return out


def _summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}


def run_compile_time(*, trials: int = 5, model: str = "study", batch: int = 8, max_model_len: int = 512,
                     kv_block_size: int | None = None, kv_dtype: str | None = None, interpret: bool | None = None,
                     python: str | None = None, timeout_s: float = 600.0, env=None) -> dict:
    """Run ``trials`` fresh-process trials per implementation; returns a JSON-serialisable dict.

    Keys: ``spec`` (:func:`shape_spec`, ``kv_dtype`` resolved), ``trials``, ``environment``
    (``jax``, ``backend``, ``python``), ``results``: ``{impl: {phase: {median, min, max, values}}}``
    with phases :data:`PHASES` plus ``process_s`` (the worker's whole wall time, Python and
    jax imports included), and ``ratio`` (pallas / reference medians per phase).

    Raises: ValueError for invalid arguments (see :func:`shape_spec`, ``trials < 1``);
      RuntimeError when a worker fails or exceeds ``timeout_s``.
    """
    if isinstance(trials, bool) or int(trials) != trials or trials < 1:
        raise ValueError(f"trials={trials!r} must be a positive integer")
    spec = shape_spec(model=model, batch=batch, max_model_len=max_model_len, kv_block_size=kv_block_size,
                      kv_dtype=kv_dtype, interpret=interpret)
    python = python or sys.executable
    env = os.environ if env is None else env
    runs: dict[str, list[dict]] = {impl: [] for impl in IMPLS}
    for i in range(int(trials)):
        for impl in (IMPLS if i % 2 == 0 else IMPLS[::-1]):
            runs[impl].append(_run_worker(impl, spec, python=python, timeout_s=timeout_s, env=env))
    first = runs[IMPLS[0]][0]
    spec = dict(spec, kv_dtype=first["kv_dtype"], kv_block_size=first["kv_block_size"])
    results = {impl: {ph: _summary([r[ph] for r in rs]) for ph in (*PHASES, "process_s")} for impl, rs in runs.items()}
    ratio = {ph: results["pallas"][ph]["median"] / results["reference"][ph]["median"]
             if results["reference"][ph]["median"] > 0 else None for ph in PHASES}
    import platform

    return {"spec": spec, "trials": int(trials), "results": results, "ratio": ratio,
            "environment": {"jax": first["jax"], "backend": first["backend"], "python": platform.python_version()}}


def format_text(r: dict) -> str:
    """A table: one row per implementation and phase, median and range in milliseconds."""
    s = r["spec"]
    lines = [
        f"compile-time  model={s['model']} B={s['batch']} Hq={s['num_q_heads']} Hkv={s['num_kv_heads']} D={s['head_dim']} "
        f"page={s['page_size']} context={s['pages_per_seq'] * s['page_size']} kv_block={s['kv_block_size']} "
        f"kv_dtype={s['kv_dtype']}",
        f"              jax {r['environment']['jax']} on {r['environment']['backend']}; {r['trials']} trials per "
        "implementation, each a fresh process, compilation cache off",
        f"{'impl':<10} {'phase':<13} {'median ms':>10} {'min ms':>10} {'max ms':>10}",
    ]
    for impl in IMPLS:
        for ph in (*PHASES, "process_s"):
            v = r["results"][impl][ph]
            lines.append(f"{impl:<10} {ph[:-2]:<13} {v['median'] * 1e3:>10.1f} {v['min'] * 1e3:>10.1f} {v['max'] * 1e3:>10.1f}")
    ratios = ", ".join(f"{ph[:-2]} {x:.2f}x" for ph, x in r["ratio"].items() if x is not None)
    lines.append(f"pallas / reference (medians): {ratios}")
    return "\n".join(lines)


def _worker_main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "--worker":
        print("usage: python -m traceview.engine_shim.compile_time --worker JSON", file=sys.stderr)
        return 2
    job = json.loads(argv[1])
    print(json.dumps(measure_once(job["impl"], job["spec"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(_worker_main(sys.argv[1:]))
