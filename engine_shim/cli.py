"""Command line for the bundled engine: ``traceview engine {bench,profile,compile-time,transplant,patch} ...``
(``transplant``, ``patch`` and ``--kernel-dir``: :mod:`.transplant_cli`).

``main(argv)`` returns an exit code (0 ok, 1 a paired check of the bench failed: results
still printed and written, the failing check marked FAIL, 2 usage or configuration error,
4 runtime failure; Ctrl-C stops the profiler and raises ``KeyboardInterrupt``, which the
command line reports in one line with exit 130) and never calls ``sys.exit``; ``python -m traceview.engine_shim.cli``
works as well. The verification lines (model memory, KV cache capacity, buckets compiled,
decode donation, each compiled program's memory) go to stderr as soon as the engine is built;
the bench's text adds the memory lines of the programs compiled by the end and, with
``--itl-slo MS``, the goodput line.

Environment variables (a flag, when given, wins):

* ``BATCH_MULT`` — prompt-set repetitions (``--batch-mult``);
* ``MAX_NUM_SEQS`` — concurrency cap (``--max-num-seqs``);
* ``SAMPLING`` — ``greedy`` or ``topp`` (``--sampling``);
* ``PROFILE`` — ``1``/``true`` traces the main generation (``--profile`` / ``--no-profile``);
* ``TRACEVIEW_KV_BLOCK_SIZE`` — decode KV block in tokens (``--kv-block``), read by the kernel.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .transplant_cli import add_kernel_dir, add_subcommands, kernel_dir
from .config import DTYPES, KV_DTYPES

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _env_int(env, name, default):
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        v = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} must be a positive integer") from None
    if v < 1:
        raise ValueError(f"{name}={raw!r} must be a positive integer")
    return v


def _env_bool(env, name, default):
    raw = env.get(name)
    if raw is None:
        return default
    if raw.strip().lower() in _TRUE:
        return True
    if raw.strip().lower() in _FALSE:
        return False
    raise ValueError(f"{name}={raw!r} must be one of 1/0, true/false, yes/no, on/off")


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive integer")
    return v


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="traceview engine", description="Bundled Pallas decode engine: benchmark, profile, transplant kernels, patch sources.")
    sub = p.add_subparsers(dest="command", required=True)
    for name, helptext, tokens, mult in (
        ("bench", "the study's protocol: init, warmup, batch TTFT, main generation, ITL, tokens/s", 128, 2),
        ("profile", "record a short profile of the main generation and print how to analyse it", 8, 1),
    ):
        s = sub.add_parser(name, help=helptext, description=helptext)
        s.add_argument("--model", default="tiny", help="preset: tiny (CPU, seconds), study (the study's vocabulary and attention shapes, CPU) "
                                                          "or gemma-2b (accelerators only) [default tiny]")
        s.add_argument("--max-num-seqs", type=int, default=None, help="concurrency cap [env MAX_NUM_SEQS, default 8]")
        s.add_argument("--batch-mult", type=int, default=None, help=f"repeat the 4 prompts N times [env BATCH_MULT, default {mult}]")
        s.add_argument("--max-tokens", type=int, default=tokens, help=f"tokens per request in the main run [default {tokens}]")
        s.add_argument("--max-model-len", type=int, default=512, help="max context per request [default 512]")
        s.add_argument("--kv-block", type=int, default=None, help="decode KV block in tokens [env TRACEVIEW_KV_BLOCK_SIZE, default heuristic]")
        s.add_argument("--dtype", choices=DTYPES, default=None,
                       help="model dtype: weights, activations, logits and (unless --kv-dtype) the KV cache; bfloat16 "
                            "runs the production-like logits path (the runner converts the bf16 logits to float32 "
                            "before the sampler, the sampler returns a float32 copy) [default the preset's: float32 "
                            "for tiny and study, bfloat16 for gemma-2b]")
        s.add_argument("--greedy-bf16-logits", action="store_true",
                       help="with a bfloat16 model and greedy sampling: take the argmax on the bf16 logits and skip "
                            "the runner's float32 conversion and the sampler's copy (the treatment) [default off]")
        s.add_argument("--kv-dtype", choices=KV_DTYPES, default=None,
                       help="KV cache dtype; int8 has per-token scales [default --dtype when given, else bfloat16 on "
                            "TPU/GPU, float32 on CPU]")
        s.add_argument("--kv-cache-bytes", type=_positive_int, default=None, metavar="N",
                       help="KV memory budget in bytes; the page count is derived from it for --kv-dtype, scales "
                            "included [default: pages for every request slot at --max-model-len]")
        s.add_argument("--sampling", choices=("greedy", "topp"), default=None, help="greedy (temperature 0) or topp [env SAMPLING, default greedy]")
        s.add_argument("--top-p", type=float, default=1.0, help="top_p for --sampling topp [default 1.0: a no-op that still runs the search]")
        s.add_argument("--temperature", type=float, default=1.0, help="temperature for --sampling topp [default 1.0]")
        s.add_argument("--repetition-penalty", type=float, default=1.0)
        s.add_argument("--seed", type=int, default=0)
        s.add_argument("--no-precompile", action="store_true", help="compile buckets on first use instead of at start-up")
        s.add_argument("--interpret", action="store_true",
                       help="run the decode kernel in the Pallas interpreter, whatever the backend [default: "
                            "compiled on TPU (Mosaic) and GPU (Triton), interpreted on CPU]")
        s.add_argument("--no-donate", action="store_true",
                       help="compile the decode with a copying KV cache update (no buffer donation) [default donated]")
        s.add_argument("--host-sampler-mask", action="store_true",
                       help="compute a token mask on the host (Python, per decode step) before sampling: the "
                            "host-bound treatment [default off]")
        s.add_argument("--tensor-parallel", type=int, default=1, metavar="N",
                       help="split the model over N devices (heads and MLP hidden units; on CPU set "
                            "XLA_FLAGS=--xla_force_host_platform_device_count=N first) [default 1]")
        s.add_argument("--allow-cpu", action="store_true",
                       help="run an accelerator-sized preset (gemma-2b) even on a CPU-only machine")
        s.add_argument("--time-tolerance", type=float, default=None, metavar="F",
                       help="bound on the paired time check: the relative difference between the main "
                            "generation's wall clock and the sum of its steps' times [default 0.05]; a loaded "
                            "machine's gaps between steps can need more")
        s.add_argument("--itl-slo", type=float, default=None, metavar="MS",
                       help="inter-token latency objective in ms: also report goodput, the tokens/s counting the "
                            "tokens whose gap from the same request's previous token is within it (first tokens "
                            "never count) [default none: no goodput]")
        s.add_argument("--log-dir", default="./profile", help="profile log dir [default ./profile]")
        s.add_argument("--max-num-batched-tokens", type=int, default=None, metavar="N",
                       help="prefill token budget per step; turns on chunked prefill [default max-model-len, one request per prefill]")
        s.add_argument("--chunked-prefill", action="store_true", help="chunked, batched prefill at the default budget")
        s.add_argument("--enable-prefix-caching", action="store_true",
                       help="reuse KV pages of repeated prompt prefixes (implies chunked prefill)")
        s.add_argument("--prefix-tokens", type=int, default=0, metavar="N",
                       help="put a shared N-token prefix (a system prompt) before every prompt [default 0]")
        if name == "bench":
            g = s.add_mutually_exclusive_group()
            g.add_argument("--profile", dest="profile", action="store_true", default=None, help="trace the main generation [env PROFILE]")
            g.add_argument("--no-profile", dest="profile", action="store_false")
        add_kernel_dir(s)
        s.add_argument("--format", choices=("text", "json"), default="text", help="stdout format")
        s.add_argument("--json", metavar="FILE", default=None, help="also write the results as JSON to FILE")
    add_subcommands(sub)
    ct = sub.add_parser("compile-time", help="lower/compile/first-execution times of the Pallas kernel vs the jnp reference",
                        description="Lower, compile and first-execution times of the Pallas decode kernel against the jnp "
                                    "reference at one decode shape; every trial a fresh process, compilation cache off.")
    ct.add_argument("--model", default="study", help="preset whose decode shape is measured [default study]")
    ct.add_argument("--batch", type=_positive_int, default=8, help="sequences in the decode batch [default 8]")
    ct.add_argument("--max-model-len", type=_positive_int, default=512, help="context per sequence, all full [default 512]")
    ct.add_argument("--kv-block", type=int, default=None, help="decode KV block in tokens [default heuristic]")
    ct.add_argument("--kv-dtype", choices=KV_DTYPES, default=None, help="KV cache dtype [default bfloat16 on TPU/GPU, float32 on CPU]")
    ct.add_argument("--trials", type=_positive_int, default=5, help="fresh-process trials per implementation [default 5]")
    ct.add_argument("--trial-timeout", type=float, default=600.0, help="seconds allowed per trial process [default 600]")
    ct.add_argument("--format", choices=("text", "json"), default="text", help="stdout format")
    return p


def _compile_time(args) -> int:
    from .compile_time import format_text as ct_text
    from .compile_time import run_compile_time

    try:
        from .config import PRESETS

        if args.model not in PRESETS:
            raise ValueError(f"unknown model preset {args.model!r}; choose one of {', '.join(sorted(PRESETS))}")
        if not args.trial_timeout > 0:
            raise ValueError(f"--trial-timeout {args.trial_timeout} must be positive")
        result = run_compile_time(trials=args.trials, model=args.model, batch=args.batch, max_model_len=args.max_model_len,
                                  kv_block_size=args.kv_block, kv_dtype=args.kv_dtype, timeout_s=args.trial_timeout)
    except ValueError as e:
        print(f"traceview engine: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a worker failed or timed out: one line, exit 4
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        print(f"traceview engine: error: {type(e).__name__}: {first}", file=sys.stderr)
        return 4
    print(json.dumps(result, indent=2) if args.format == "json" else ct_text(result))
    return 0


def _resolve(args, env) -> dict:
    profile = args.command == "profile" or (args.profile if args.profile is not None else _env_bool(env, "PROFILE", False))
    sampling = args.sampling or (env.get("SAMPLING", "").strip() or "greedy")
    if sampling not in ("greedy", "topp"):
        raise ValueError(f"SAMPLING={sampling!r} must be greedy or topp")
    if args.greedy_bf16_logits:
        from .config import PRESETS

        if sampling != "greedy":
            raise ValueError(f"--greedy-bf16-logits needs greedy sampling: the {sampling} sampler reads the float32 "
                             "logits (drop --sampling topp / SAMPLING=topp)")
        dtype = args.dtype or (PRESETS[args.model].dtype if args.model in PRESETS else None)
        if dtype == "float32":
            raise ValueError("--greedy-bf16-logits needs a bfloat16 model: pass --dtype bfloat16 (a float32 model's "
                             "logits are never converted)")
    return dict(
        model=args.model,
        max_num_seqs=args.max_num_seqs if args.max_num_seqs is not None else _env_int(env, "MAX_NUM_SEQS", 8),
        batch_mult=args.batch_mult if args.batch_mult is not None else _env_int(env, "BATCH_MULT", 2 if args.command == "bench" else 1),
        max_tokens=args.max_tokens,
        max_model_len=args.max_model_len,
        kv_block_size=args.kv_block,
        kv_dtype=args.kv_dtype,
        kv_cache_bytes=args.kv_cache_bytes,
        sampling=sampling,
        top_p=_in_range("--top-p", args.top_p, 0.0, 1.0, low_open=True),
        temperature=_in_range("--temperature", args.temperature, 0.0, float("inf")),
        repetition_penalty=_in_range("--repetition-penalty", args.repetition_penalty, 0.0, float("inf"), low_open=True),
        profile=profile,
        log_dir=args.log_dir,
        precompile=not args.no_precompile,
        seed=args.seed,
        max_num_batched_tokens=_positive("--max-num-batched-tokens", args.max_num_batched_tokens),
        enable_chunked_prefill=args.chunked_prefill or args.max_num_batched_tokens is not None,
        enable_prefix_caching=args.enable_prefix_caching,
        prefix_tokens=_nonnegative("--prefix-tokens", args.prefix_tokens),
        donate=not args.no_donate,
        **({"interpret": True} if getattr(args, "interpret", False) else {}),
        **({"host_sampler_mask": True} if getattr(args, "host_sampler_mask", False) else {}),
        tensor_parallel=_positive("--tensor-parallel", args.tensor_parallel),
        dtype=args.dtype,
        greedy_bf16_logits=args.greedy_bf16_logits,
        itl_slo_ms=None if args.itl_slo is None else _in_range("--itl-slo", args.itl_slo, 0.0, float("inf"), low_open=True),
        **({} if args.time_tolerance is None else
           {"time_tolerance": _in_range("--time-tolerance", args.time_tolerance, 0.0, float("inf"), low_open=True)}),
    )


def _check_json_target(name: str) -> None:
    """ValueError (before the run) unless ``--json`` names a writable file outside any profile
    folder (:func:`traceview.read.guard.refuse_inside_inputs`): a trace is never overwritten."""
    from traceview.errors import UsageError
    from traceview.read.guard import check_writable, refuse_inside_inputs

    if not str(name).strip():
        raise ValueError("--json needs a file name (got an empty one)")
    try:
        check_writable(Path(name), "--json")
        refuse_inside_inputs(Path(name), "--json")
    except UsageError as e:
        raise ValueError(str(e)) from None


def _refuse_nested_log_dir(log_dir: Path) -> None:
    """ValueError when ``log_dir`` lies inside a profile tree (the profiler writes
    ``LOG_DIR/plugins/profile/RUN/``): a ``plugins/profile`` folder or one below it, a run
    folder (:func:`traceview.read.guard.run_folder`), or a ``plugins`` folder holding
    ``profile``. A run would nest inside another run, where readers take it for a second
    host or miss it; the message names the log dir above to pass instead."""
    from traceview.read.guard import run_folder

    real = log_dir.resolve()
    chain = [real, *real.parents]
    above = None
    for p in chain:
        if p.name == "profile" and p.parent.name == "plugins":
            above = p.parent.parent
            break
    else:
        if real.name == "plugins" and (real / "profile").is_dir():
            above = real.parent
        elif any(run_folder(p) for p in chain):
            above = next(p for p in chain if run_folder(p)).parent
    if above is not None:
        raise ValueError(f"--log-dir {log_dir} is inside a profile tree (runs go to LOG_DIR/plugins/profile/RUN/): "
                         f"a new run would nest inside it; pass the log dir {above} to add a run beside the others")


def _in_range(flag, v, lo, hi, *, low_open=False):
    """``v`` when it is a number in [lo, hi] ((lo, hi] with ``low_open``); ValueError otherwise (NaN included)."""
    import math

    if not math.isfinite(v) or v > hi or v < lo or (low_open and v == lo):
        raise ValueError(f"{flag}={v} must be a finite number in {'(' if low_open else '['}{lo:g}, {hi:g}"
                         f"{')' if math.isinf(hi) else ']'}")
    return v


def _positive(flag, v):
    if v is not None and v < 1:
        raise ValueError(f"{flag}={v} must be a positive integer")
    return v


def _nonnegative(flag, v):
    if v < 0:
        raise ValueError(f"{flag}={v} must be >= 0")
    return v


def _capacity_line(c: dict) -> str:
    budget = "" if c["budget_bytes"] is None else f" from a {c['budget_bytes']:,}-byte budget"
    return (f"{c['dtype']} cache: {c['num_pages']} pages of {c['page_size']} tokens ({c['usable_pages']} usable, "
            f"{c['tokens']:,} tokens), {c['bytes']:,} bytes{budget}")


def _logits_note(c: dict) -> str:
    """`` logits=...`` for a non-float32 model: the production-like float32 path or the treatment."""
    if c.get("greedy_bf16_logits"):
        return " logits=bf16 (argmax on them)"
    if c.get("logits_f32"):
        return " logits=f32 (runner converts, sampler copies)"
    return ""


def format_text(r: dict) -> str:
    c = r["config"]
    lines = [
        f"engine  model={c['model']} max_num_seqs={c['max_num_seqs']} max_model_len={c['max_model_len']} "
        f"kv_block={c['kv_block_size']} sampling={c['sampling']} donate={'on' if c['donate'] else 'off'} "
        f"dtype={c.get('dtype', 'float32')}{_logits_note(c)} requests={r['num_requests']} x {r['tokens_per_request']} tokens",
        f"        jax {r['environment']['jax']} on {r['environment']['backend']} ({r['environment']['cpu_count']} CPUs); "
        f"request buckets {c['request_buckets']}, token buckets {c['token_buckets']}",
        f"init    {r['init_s']:.2f} s (precompile {r['precompile_s']:.2f} s; {len(r['compiled_modules'])} bucket modules compiled by the end)",
        f"TTFT    {r['ttft_s'] * 1e3:.1f} ms (batch of {r['num_requests']}, one token each)",
        f"main    {r['main_s']:.3f} s for {r['output_tokens']} tokens in {r['main_decode_steps']} decode steps "
        f"({r['decode_steps']} since start-up, warm-up included)"
        + (f"; median decode step {r['decode_step_median_s'] * 1e3:.2f} ms" if r["decode_step_median_s"] else ""),
        f"KV      {_capacity_line(r['kv_capacity'])}",
        (f"ITL     {r['itl_s'] * 1e3:.2f} ms/token  ((main - TTFT) / {round(r['output_tokens'] / r['num_requests'])} "
         "tokens per request, the study's figure: divided by every token, not by the gaps after the first)"
         if r["itl_s"] is not None else
         "ITL     n/a (one token per request, or the main run was no longer than the TTFT run)"),
        f"tok/s   {r['wall_tokens_per_s']:.1f} wall-clock | {r['engine_tokens_per_s']:.1f} engine counter "
        f"({r['engine_counted_tokens']} step tokens / summed step times) | diff {100 * r['tokens_per_s_rel_diff']:.2f}%",
    ]
    g = r.get("goodput")
    if g is not None:
        gaps = (f"; gaps median {g['itl_median_ms']:.2f} ms, p90 {g['itl_p90_ms']:.2f} ms"
                if g["itl_median_ms"] is not None else "")
        lines.append(f"goodput {g['tokens_per_s']:.1f} tok/s under ITL <= {g['itl_slo_ms']:g} ms: {g['tokens_met']}/{g['gaps']} "
                     f"gaps between a request's consecutive tokens within it ({g['first_tokens']} first tokens "
                     f"not judged, {g['tokens']} tokens){gaps}; {r['wall_tokens_per_s']:.1f} tok/s wall-clock counting all")
    from .verification import memory_lines

    lines += [f"memory  {x}" for x in memory_lines(r.get("memory") or {})]
    pm, pt = r["prefill"]["main"], r["prefill"]["total"]
    lines.append(f"prefill {'chunked, budget ' + str(c['max_num_batched_tokens']) + ' tokens' if c['enable_chunked_prefill'] else 'one request per step'}: "
                 f"{pm['steps']} steps, {pm['chunks']} chunks, {pm['computed_tokens']} tokens computed in the main run")
    if c["enable_prefix_caching"]:
        rate = "n/a" if pt["hit_rate"] is None else f"{100 * pt['hit_rate']:.1f}%"
        lines.append(f"prefix  cache hits {pm['hit_pages']}/{pm['queried_pages']} pages ({pm['hit_tokens']}/{pm['queried_tokens']} tokens) "
                     f"in the main run; {pt['hit_tokens']}/{pt['queried_tokens']} tokens ({rate}) since start-up")
    ck = r["checks"]
    t, n = ck["time"], ck["tokens"]
    lines += [
        f"check   {'ok  ' if n['ok'] else 'FAIL'} tokens: {n['outputs']} in the outputs, {n['scheduler']} by the scheduler's step counters",
        f"check   {'ok  ' if t['ok'] else 'FAIL'} time: wall {t['wall_s']:.3f} s, steps summed {t['steps_s']:.3f} s "
        f"(each blocked on its tokens), diff {100 * t['rel_diff']:.2f}% (bound {100 * t['tolerance']:g}%)",
        f"check   {'ok  ' if ck['main_compiles']['ok'] else 'FAIL'} compiles during the main generation: {ck['main_compiles']['count']}",
    ]
    if r["profile_run"]:
        p = r["profile_run"]
        lines.append(f"profile a separate run after the headline one: {p['main_s']:.3f} s, {p['wall_tokens_per_s']:.1f} tok/s "
                     f"with tracing overhead (not a headline figure), {p['decode_steps']} decode steps")
    return "\n".join(lines)


def _interrupted() -> bool:
    """Whether Ctrl-C arrived (:func:`traceview.cli.process.interrupted`, when the command
    line runs the engine): an import interrupted may surface as another error (numpy's
    import as an ImportError), which is then reported as the interrupt."""
    process = sys.modules.get("traceview.cli.process")
    return bool(process is not None and process.interrupted())


def _stop_profiler() -> None:
    """Stop ``jax.profiler`` tracing if a trace is running (after an interrupt: the run's
    ``finally`` stops its own; this covers one that arrived while it was starting)."""
    jax = sys.modules.get("jax")
    if jax is None:
        return
    try:
        jax.profiler.stop_trace()
    except Exception:  # noqa: BLE001 - none was running
        pass


def _failed(e: Exception) -> int:
    """One line for a failed run and its exit code: 2 out of memory or a usage / configuration
    error (ValueError), 4 a JAX runtime failure (device, profiler, disk)."""
    if isinstance(e, MemoryError):
        print(f"traceview engine: error: out of memory{': ' + str(e) if str(e) else ''} (fewer requests, "
              "--batch-mult or --max-tokens)", file=sys.stderr)
        return 2
    if isinstance(e, ValueError):
        print(f"traceview engine: error: {e}", file=sys.stderr)
        return 2
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    print(f"traceview engine: error: {type(e).__name__}: {first}", file=sys.stderr)
    return 4


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``traceview engine``; returns the exit code. Ctrl-C raises
    ``KeyboardInterrupt`` out of it once the profiler is stopped (``traceview.cli.entry`` and
    ``python -m traceview.engine_shim.cli`` print one line and exit 130)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or usage error (2)
        return int(e.code or 0)
    if args.command == "compile-time":
        return _compile_time(args)
    if args.command in ("transplant", "patch"):
        from .transplant_cli import run

        return run(args)
    try:
        kwargs = _resolve(args, os.environ)
        if kwargs["profile"] and not str(kwargs["log_dir"] or "").strip():
            raise ValueError("--log-dir needs a folder name (got an empty one)")
        if args.json is not None:
            _check_json_target(args.json)
        if kwargs["log_dir"] and kwargs["profile"]:
            log_dir = Path(kwargs["log_dir"])
            if log_dir.exists() and not log_dir.is_dir():
                raise ValueError(f"--log-dir {log_dir} is not a folder")
            _refuse_nested_log_dir(log_dir)
            probe = log_dir if log_dir.exists() else next((p for p in log_dir.parents if p.exists()), Path("."))
            if not os.access(probe, os.W_OK):
                raise ValueError(f"cannot write the profile under {log_dir}: {probe} is not writable")
        from .config import PRESETS

        if kwargs["model"] not in PRESETS:
            raise ValueError(f"unknown model preset {kwargs['model']!r}; choose one of {', '.join(sorted(PRESETS))}")
        from .bench import run_bench  # imports jax: keep `--help` fast

        if not PRESETS[kwargs["model"]].cpu_ok and not args.allow_cpu:
            import jax

            if jax.default_backend() == "cpu":
                raise ValueError(f"model {kwargs['model']!r} is for accelerators: on this CPU-only machine it would "
                                 "run for hours; use --model tiny or study, or pass --allow-cpu to insist")
        from .verification import format_lines

        with kernel_dir(args.kernel_dir) as transplanted:  # before the engine is built
            result = run_bench(**kwargs, on_start=lambda v: print("\n".join(f"engine: {x}" for x in format_lines(v)),
                                                                   file=sys.stderr, flush=True))
        if transplanted is not None:
            result["transplant"] = transplanted.as_dict()
    except KeyboardInterrupt:  # Ctrl-C: the profiler stopped, the caller prints one line and exits 130
        _stop_profiler()
        raise
    except Exception as e:
        if _interrupted():  # an interrupt another error stands for
            _stop_profiler()
            raise KeyboardInterrupt from None
        return _failed(e)
    if args.json:
        from traceview.errors import UsageError
        from traceview.read.guard import write_atomic

        try:
            write_atomic(Path(args.json), json.dumps(result, indent=2) + "\n")
        except UsageError as e:
            print(f"traceview engine: error: {e}", file=sys.stderr)
            return 2
    if args.format == "json":
        print(json.dumps(result, indent=2))
    else:
        print(format_text(result))
    if result["profiled"]:
        where = result["profile_dir"]
        if where is None:
            print(f"profile: no new run folder found under {Path(kwargs['log_dir']) / 'plugins' / 'profile'}", file=sys.stderr)
        else:
            stream = sys.stderr if args.format == "json" else sys.stdout
            print(f"profile written to {where}", file=stream)
            n = result["profile_run"]["decode_steps"]
            per = " ".join(f"--steps {m}={k}" for m, k in result["profile_run"]["decode_modules"].items() if k > 0)
            print(f"it holds {n} decode steps (the main generation); check each decode program ran once per step "
                  f"with:\n  traceview analyze {where}{' ' + per if per else ''}", file=stream)
    if args.json:
        print(f"results written to {args.json}", file=sys.stderr if args.format == "json" else sys.stdout)
    if not result["checks"]["ok"]:
        failed = ", ".join(k for k, v in result["checks"].items() if k != "ok" and not v["ok"])
        print(f"traceview engine: error: paired check failed ({failed}): the figures above are not to be quoted",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from traceview.cli import process

    try:
        process.handle_interrupts("traceview engine")
        code = main()
    except KeyboardInterrupt:
        code = process.say_interrupted()
    process.exit_now(code, teardown=True)
