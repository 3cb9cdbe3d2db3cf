"""Unprofiled KV-block sweep on the ``study`` preset: tokens/s and ITL per ``--kv-block``.

The study preset (vocabulary 256,000, 8 query heads of dim 256 on 1 KV head, 128-token pages,
2 layers) at ``max_model_len`` 512, so the valid KV blocks are 128, 256 and 512 tokens (512
is also the heuristic's choice). One engine per block (``LLM(..., kv_block_size=B)``, every
bucket precompiled), one warm-up generation each; then, in interleaved rounds (block order
rotated each round, so machine noise falls on every block alike), the protocol of
``traceview engine bench``: TTFT = a batch of the prompts generating 1 token; main = the same
batch generating ``--max-tokens`` greedy tokens; ITL = (main - TTFT) / max_tokens; tok/s =
generated tokens / main. No profiler runs. Generated tokens are compared across blocks (the
block changes the schedule of the work, not the arithmetic, up to float summation order).

Usage::

    python benchmarks/kv_block_sweep_study.py [--blocks 128,256,512] [--repeats 3] [--max-tokens 128]
                                              [--batch-mult 2] [--kv-dtype float32] [--json FILE]

Prints a Markdown table (pasted into ``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", default="128,256,512")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--batch-mult", type=int, default=2)
    ap.add_argument("--max-model-len", type=int, default=512)
    ap.add_argument("--kv-dtype", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import jax

    from traceview.engine_shim.bench import PROMPTS
    from traceview.engine_shim.engine import LLM
    from traceview.engine_shim.sampling import SamplingParams

    blocks = [int(b) for b in args.blocks.split(",")]
    prompts = PROMPTS * args.batch_mult
    main_sp = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True)
    one_sp = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    engines, init_s = {}, {}
    for b in blocks:
        t0 = time.perf_counter()
        engines[b] = LLM("study", max_num_seqs=8, max_model_len=args.max_model_len, kv_block_size=b,
                         kv_dtype=args.kv_dtype)
        engines[b].generate(prompts, SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
        init_s[b] = time.perf_counter() - t0
    runs = {b: [] for b in blocks}
    tokens = {}
    for rnd in range(args.repeats):
        order = blocks[rnd % len(blocks):] + blocks[: rnd % len(blocks)]
        for b in order:
            llm = engines[b]
            t0 = time.perf_counter()
            llm.generate(prompts, one_sp)
            ttft = time.perf_counter() - t0
            t0 = time.perf_counter()
            outs = llm.generate(prompts, main_sp)
            main_s = time.perf_counter() - t0
            n = sum(len(o.outputs[0].token_ids) for o in outs)
            tokens[b] = [o.outputs[0].token_ids for o in outs]
            runs[b].append({"ttft_s": ttft, "main_s": main_s, "tokens": n, "tok_s": n / main_s,
                            "itl_ms": (main_s - ttft) / args.max_tokens * 1e3})
    from traceview.kernels.block_sizes import default_kv_block_size

    mc, ec = engines[blocks[0]].model_config, engines[blocks[0]].config
    heuristic = default_kv_block_size(head_dim=mc.head_dim, num_kv_heads=mc.num_kv_heads, dtype=ec.kv_dtype,
                                      page_size=ec.page_size, max_kv=ec.pages_per_seq * ec.page_size)
    same = all(tokens[b] == tokens[blocks[0]] for b in blocks)
    env = {"jax": jax.__version__, "backend": jax.default_backend(), "python": platform.python_version(),
           "cpus": len(os.sched_getaffinity(0)), "load_after": os.getloadavg()[0],
           "kv_dtype": engines[blocks[0]].config.kv_dtype}
    print(f"study preset, max_model_len {args.max_model_len}, {len(prompts)} requests x {args.max_tokens} greedy tokens, "
          f"kv_dtype {env['kv_dtype']}, jax {env['jax']} on {env['backend']} ({env['cpus']} CPUs), "
          f"{args.repeats} interleaved rounds; tokens identical across blocks: {same}\n")
    print("| KV block | tok/s median | tok/s range | ITL ms median | ITL ms range | TTFT ms median | init + warm-up s |")
    print("|---|---|---|---|---|---|---|")
    for b in blocks:
        tps = [r["tok_s"] for r in runs[b]]
        itl = [r["itl_ms"] for r in runs[b]]
        ttft = [r["ttft_s"] * 1e3 for r in runs[b]]
        heur = " (heuristic)" if b == heuristic else ""
        print(f"| {b}{heur} | {statistics.median(tps):.1f} | {min(tps):.1f}-{max(tps):.1f} | {statistics.median(itl):.1f} | "
              f"{min(itl):.1f}-{max(itl):.1f} | {statistics.median(ttft):.0f} | {init_s[b]:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "init_s": init_s, "identical_tokens": same, "environment": env}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
