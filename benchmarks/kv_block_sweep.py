"""KV-block sweep: the study's block-size finding, reproduced on CPU in interpret mode.

Two levels, both at a 2048-token max context with ~150-token sequences:

* kernel: ``paged_decode`` alone (8 sequences, Gemma-like 8:1 MQA, D=64, f32, page 16),
  median time per call per KV block, with the masked share of computed columns;
* engine: the tiny engine at ``max_model_len=2048`` generating 128 greedy tokens for 8
  prompts of ~86 tokens (mean KV length during decode ~150), tokens/s per KV block, the
  heuristic's choice (2048 = the whole context) included; unprofiled, median of
  interleaved repeats.
  Generated tokens are compared across blocks (must be identical: block size changes
  scheduling, not arithmetic).

Usage::

    python benchmarks/kv_block_sweep.py [--blocks 64,128,256,512,1024,2048] [--repeats 5]
                                        [--json benchmarks/out/kv_block_sweep.json] [--skip-engine]

Prints Markdown tables (pasted into ``benchmarks/KV_BLOCK_SWEEP.md``).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

MAX_CTX = 2048
PAGE = 16
BASE_PROMPTS = [
    "Hello, my name is",
    "The president of the United States is",
    "The capital of France is",
    "The future of AI is",
]
PROMPT_TOKENS = [70, 80, 90, 104]  # + BOS; mean 86 -> mean KV length over 128 decode steps ~150


def sweep_prompts(mult: int = 2) -> list[str]:
    out = []
    for p, n in zip(BASE_PROMPTS, PROMPT_TOKENS):
        filler = " and then it said that"
        text = p
        while len(text.encode()) + 1 < n:
            text += filler
        out.append(text.encode()[: n - 1].decode())
    return out * mult


def kernel_sweep(blocks, repeats_per_block: int = 200, seed: int = 0) -> list[dict]:
    import jax
    import jax.numpy as jnp

    from traceview.kernels.paged_attention import paged_decode

    rng = np.random.default_rng(seed)
    b, hq, hkv, d = 8, 8, 1, 64
    pps = MAX_CTX // PAGE
    num_pages = b * pps + 1
    q = jnp.asarray(rng.standard_normal((b, hq, d)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((hkv, num_pages, PAGE, d)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((hkv, num_pages, PAGE, d)), jnp.float32)
    pt = jnp.asarray(rng.permutation(np.arange(1, num_pages))[: b * pps].reshape(b, pps), jnp.int32)
    lens_np = rng.integers(100, 201, b)
    lens = jnp.asarray(lens_np, jnp.int32)
    fns = {}
    for bkv in blocks:
        fns[bkv] = jax.jit(lambda *a, bkv=bkv: paged_decode(*a, kv_block_size=bkv))
        fns[bkv](q, k, v, lens, pt).block_until_ready()
    times = {bkv: [] for bkv in blocks}
    for _ in range(repeats_per_block):  # interleaved rounds: machine noise hits every block alike
        for bkv in blocks:
            t0 = time.perf_counter()
            fns[bkv](q, k, v, lens, pt).block_until_ready()
            times[bkv].append(time.perf_counter() - t0)
    rows = []
    for bkv in blocks:
        ts = times[bkv]
        computed = int(sum(-(-int(n) // bkv) * bkv for n in lens_np))
        useful = int(lens_np.sum())
        rows.append({"kv_block": bkv, "median_ms": 1e3 * statistics.median(ts), "min_ms": 1e3 * min(ts), "p10_ms": 1e3 * float(np.percentile(ts, 10)),
                     "p90_ms": 1e3 * float(np.percentile(ts, 90)), "computed_cols": computed, "useful_cols": useful,
                     "masked_fraction": 1 - useful / computed, "mean_len": float(lens_np.mean())})
    return rows


def engine_sweep(blocks, repeats: int = 3, max_tokens: int = 128, max_num_seqs: int = 8) -> list[dict]:
    from traceview.engine_shim.engine import LLM
    from traceview.engine_shim.sampling import SamplingParams

    prompts = sweep_prompts(max_num_seqs // len(BASE_PROMPTS))
    sp = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    engines = []
    for bkv in [None, *blocks]:
        llm = LLM("tiny", max_num_seqs=max_num_seqs, max_model_len=MAX_CTX, kv_block_size=bkv, precompile=False)
        llm.generate(prompts, SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))  # compile + warm up
        engines.append((bkv, llm, [], None))
    for _ in range(repeats):  # interleaved rounds: machine noise hits every block alike
        for i, (bkv, llm, times, _tokens) in enumerate(engines):
            c0 = llm.stats.num_generated_tokens
            t0 = time.perf_counter()
            outs = llm.generate(prompts, sp)
            times.append(time.perf_counter() - t0)
            assert llm.stats.num_generated_tokens - c0 == max_tokens * len(prompts)
            engines[i] = (bkv, llm, times, outs)
    rows = []
    reference_tokens = [o.outputs[0].token_ids for o in engines[0][3]]
    for bkv, llm, times, outs in engines:
        kv_lens = [len(o.prompt_token_ids) + t for o in outs for t in range(max_tokens - 1)]
        med = statistics.median(times)
        rows.append({"kv_block": llm.kv_block_size, "source": "heuristic" if bkv is None else "argument",
                     "median_s": med, "all_s": times, "tokens_per_s": max_tokens * len(prompts) / med,
                     "best_tokens_per_s": max_tokens * len(prompts) / min(times),
                     "mean_kv_len": float(np.mean(kv_lens)), "prompt_tokens": [len(o.prompt_token_ids) for o in outs],
                     "identical_tokens": [o.outputs[0].token_ids for o in outs] == reference_tokens})
    return rows


def _markdown(kernel_rows, engine_rows) -> str:
    out = []
    if kernel_rows:
        out += ["| KV block (tokens) | median ms / call | min ms / call | p10–p90 ms | masked share of computed columns |",
                "|---:|---:|---:|---:|---:|"]
        best = min(r["median_ms"] for r in kernel_rows)
        best_min = min(r["min_ms"] for r in kernel_rows)
        for r in kernel_rows:
            out.append(f"| {r['kv_block']} | {r['median_ms']:.3f} ({r['median_ms'] / best:.1f}×) | "
                       f"{r['min_ms']:.3f} ({r['min_ms'] / best_min:.1f}×) | "
                       f"{r['p10_ms']:.3f}–{r['p90_ms']:.3f} | {100 * r['masked_fraction']:.0f}% |")
        out.append("")
    if engine_rows:
        out += ["| KV block (tokens) | chosen by | tokens/s (median run) | tokens/s (best run) | per-run seconds | "
                "median vs best block | same tokens as heuristic run |",
                "|---:|---|---:|---:|---|---:|---|"]
        best = max(r["tokens_per_s"] for r in engine_rows)
        for r in engine_rows:
            out.append(f"| {r['kv_block']} | {r['source']} | {r['tokens_per_s']:.0f} | {r['best_tokens_per_s']:.0f} | "
                       f"{', '.join(f'{t:.3f}' for t in r['all_s'])} | {r['tokens_per_s'] / best:.2f} | "
                       f"{'yes' if r['identical_tokens'] else 'NO'} |")
        out.append("")
        out.append(f"mean KV length during decode: {engine_rows[0]['mean_kv_len']:.0f} tokens; "
                   f"prompt tokens {engine_rows[0]['prompt_tokens']}")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", default="64,128,256,512,1024,2048")
    ap.add_argument("--repeats", type=int, default=5, help="engine: timed generations per block")
    ap.add_argument("--json", default=None)
    ap.add_argument("--skip-engine", action="store_true")
    ap.add_argument("--skip-kernel", action="store_true")
    args = ap.parse_args(argv)
    import jax

    blocks = [int(x) for x in args.blocks.split(",")]
    kernel_rows = [] if args.skip_kernel else kernel_sweep(blocks)
    engine_rows = [] if args.skip_engine else engine_sweep(blocks, repeats=args.repeats)
    print(_markdown(kernel_rows, engine_rows))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({
            "kernel": kernel_rows, "engine": engine_rows,
            "environment": {"jax": jax.__version__, "backend": jax.default_backend(),
                            "python": platform.python_version(), "machine": platform.machine()},
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
