"""Engine bench: the donation switch seen in real traces, the verification lines read off the
allocated arrays and compiled executables (XLA's memory analysis of each program included),
goodput under an ITL objective (each request's gaps between consecutive tokens, chunked
prefill interleaving), and the paired checks (a broken step clock fails)."""

from __future__ import annotations

import functools
import json
import re
import time

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp

# tiny preset, 4 requests x 3 tokens: 2 decode steps per run; pool [1, 17, 16, 64] per layer
SMALL = ["--max-tokens", "3", "--max-num-seqs", "4", "--batch-mult", "1", "--max-model-len", "64", "--no-precompile",
         "--format", "json"]
CACHE = "f32\\[1,17,16,64\\]"
COPY = f'"^copy {CACHE} <- {CACHE}"'  # the cache-sized copy, by its HLO text (names removed)


def _engine(argv, capsys):
    from traceview.engine_shim.cli import main

    rc = main(argv)
    out = capsys.readouterr()
    return rc, out


@pytest.fixture(scope="module")
def donation_runs(tmp_path_factory):
    """``traceview engine profile`` donated and ``--no-donate``: {name: (result, log dir)}."""
    from traceview.engine_shim.cli import main

    runs = {}
    # the time check's bound opened wide: a loaded machine's gaps between steps are no defect here
    # (test_broken_step_clock_fails_the_time_check keeps the default bound)
    for name, extra in (("donated", ["--itl-slo", "0.0001"]), ("copying", ["--no-donate"])):
        extra = [*extra, "--time-tolerance", "1"]
        log = tmp_path_factory.mktemp(name)
        out = log / "r.json"
        assert main(["profile", *SMALL, *extra, "--log-dir", str(log / "profile"), "--json", str(out)]) == 0
        runs[name] = (json.loads(out.read_text()), log / "profile")
    return runs


def _verify(*argv):
    from traceview.cli import main

    return main(["verify", "--no-cache", *argv])


def test_copying_trace_has_one_cache_sized_copy_per_layer_and_pool_per_step(donation_runs, capsys):
    don, don_dir = donation_runs["donated"]
    cop, cop_dir = donation_runs["copying"]
    assert don["config"]["donate"] is True and cop["config"]["donate"] is False
    steps = cop["profile_run"]["decode_steps"]
    layers = 2
    assert steps == 2 and don["profile_run"]["decode_steps"] == steps
    # K and V per layer: 4 copies of the whole pool in every decode step, none when donated
    assert _verify(str(cop_dir), "-c", f"op matching {COPY} count == {2 * layers * steps}",
                   "-c", f"op matching {COPY} count == 1 per execution") == 0
    assert _verify(str(don_dir), str(cop_dir), "-c", f"op matching {COPY} appeared",
                   "-c", f"base: op matching {COPY} absent") == 0
    capsys.readouterr()
    assert _verify(str(don_dir), "-c", f"op matching {COPY} present") == 1
    assert "no op matches" in capsys.readouterr().out


def test_verification_lines_read_off_arrays_and_executables(donation_runs):
    from traceview.engine_shim.config import PRESETS

    mc = PRESETS["tiny"]
    d, f = mc.d_model, mc.mlp_hidden
    per_layer = 2 * d + d * mc.num_heads * mc.head_dim * 2 + d * mc.num_kv_heads * mc.head_dim * 2 + 3 * d * f
    params = mc.vocab_size * d + d + mc.num_layers * per_layer
    for name, aliased in (("donated", True), ("copying", False)):
        r, _ = donation_runs[name]
        v = r["verification"]
        assert v["param_count"] == params == 1_508_608 and v["param_bytes"] == 4 * params
        kv = v["kv_cache"]
        # max_num_seqs 4 x 4 pages of 16 tokens + the trash page; K and V, 2 layers, 64 dims, f32
        assert (kv["pages"], kv["usable_pages"], kv["page_size"], kv["tokens"]) == (17, 16, 16, 256)
        assert kv["bytes"] == 2 * 2 * 17 * 16 * 64 * 4 and kv["bytes_per_token"] == 1024 and kv["dtypes"] == ["float32"]
        assert v["buckets_compiled"] == [] and v["decode_donation"]["module"] is None  # --no-precompile
        assert r["verification_end"]["buckets_compiled"] == r["compiled_modules"] == [
            "jit_prefill_t32", "jit_greedy_b1", "jit_prefill_t64", "jit_decode_b4_bkv64", "jit_greedy_b4"]
        end = r["verification_end"]["decode_donation"]
        assert end["module"] == "jit_decode_b4_bkv64" and end["requested"] is aliased
        # the compiled executable, not the flag: the whole cache aliased, or nothing
        assert end["aliased_bytes"] == (kv["bytes"] if aliased else 0)


DECODE = "jit_decode_b4_bkv64"


def test_memory_analysis_shows_the_second_kv_pool_without_donation(donation_runs):
    from traceview.engine_shim.verification import format_lines

    mem = {}
    for name in ("donated", "copying"):
        r, _ = donation_runs[name]
        assert r["verification"]["memory"] == {}  # --no-precompile: nothing compiled at start-up
        assert r["memory"] == r["verification_end"]["memory"] and list(r["memory"]) == r["compiled_modules"]
        assert all(m["unknown"] is None and m["resident_bytes"] > 0 for m in r["memory"].values())
        m = mem[name] = r["memory"][DECODE]
        kv, params = r["verification_end"]["kv_cache"]["bytes"], r["verification_end"]["param_bytes"]
        # the pool in the compiled program's arguments is the allocated one
        assert m["kv_pool_bytes"] == kv and m["kv_dtypes"] == ["float32"] and m["kv_scale_bytes"] == 0
        assert m["argument_bytes"] >= params + kv and m["output_bytes"] >= kv
        assert m["resident_bytes"] == m["argument_bytes"] + m["output_bytes"] - m["alias_bytes"] + m["temp_bytes"]
        assert m["kv_tokens"] == 17 * 16 and m["kv_bytes_per_token"] == kv / (17 * 16)
    don, cop = mem["donated"], mem["copying"]
    kv = don["kv_pool_bytes"]
    # donated: the whole pool aliased, held once; copying: nothing aliased, a second pool held
    assert don["alias_bytes"] >= kv and don["kv_pools_held"] == 1
    assert cop["alias_bytes"] <= kv // 100 and cop["kv_pools_held"] == 2
    assert (cop["argument_bytes"], cop["output_bytes"]) == (don["argument_bytes"], don["output_bytes"])
    held = lambda m: m["argument_bytes"] + m["output_bytes"] - m["alias_bytes"]  # noqa: E731
    assert held(cop) - held(don) == kv
    lines = {n: "\n".join(format_lines(donation_runs[n][0]["verification_end"])) for n in ("donated", "copying")}
    assert f"memory            {DECODE}: arguments " in lines["donated"]
    assert f"aliased {kv:,} B" in lines["donated"] and "KV pool held 1.00x" in lines["donated"]
    assert "aliased 0 B" in lines["copying"] and "KV pool held 2.00x" in lines["copying"]
    assert "programs analysed" in lines["copying"]


def _gaps(token_times):
    """Every request's gaps between consecutive tokens (seconds), recomputed from the JSON."""
    return [b - a for times in token_times for a, b in zip(times, times[1:])]


def test_goodput_absent_without_an_objective_and_zero_under_a_tiny_one(donation_runs):
    from traceview.engine_shim.bench import goodput

    don, cop = donation_runs["donated"][0], donation_runs["copying"][0]
    assert cop["goodput"] is None and cop["config"]["itl_slo_ms"] is None
    times = don["main_token_times"]  # 4 requests x 3 tokens, one prefill each before the first decode
    assert [len(t) for t in times] == [3] * 4 and all(a < b for t in times for a, b in zip(t, t[1:]))
    steps = don["main_steps"]
    assert [k for k, *_ in steps] == ["prefill"] * 4 + ["decode"] * 2
    # each first token at its own prefill's end; the second tokens all at the first decode's end,
    # so a request's first gap spans the prefills after its own
    assert sorted({t[0] for t in times}) == [t[0] for t in times] and len({t[1] for t in times}) == 1
    assert all(t[0] < times[-1][0] for t in times[:-1])
    g = don["goodput"]
    assert g["itl_slo_ms"] == 0.0001 and g["tokens_per_s"] == 0 and g["tokens_met"] == g["gaps_met"] == 0
    assert (g["tokens"], g["first_tokens"], g["gaps"]) == (12, 4, 8) == (don["output_tokens"], 4, len(_gaps(times)))
    every = sorted(x * 1e3 for x in _gaps(times))
    assert g["itl_median_ms"] == pytest.approx((every[3] + every[4]) / 2)
    assert [r["gaps"] for r in g["per_request"]] == [2] * 4 and all(r["met"] == 0 for r in g["per_request"])
    # at the 4th of the 8 gaps (a hair above, clear of rounding): at least half of them in
    slo = every[3] * (1 + 1e-9)
    half = goodput(times, don["main_s"], slo)
    assert 4 <= half["tokens_met"] == sum(x <= slo / 1e3 for x in _gaps(times)) <= 8
    assert half["tokens_per_s"] < don["wall_tokens_per_s"]
    assert goodput(times, don["main_s"], 1e12)["tokens_per_s"] == 8 / don["main_s"]
    assert goodput([[], [0.5]], 1.0, 1.0) | {"per_request": None} == {
        "itl_slo_ms": 1.0, "tokens_per_s": 0.0, "tokens_met": 0, "gaps": 0, "gaps_met": 0, "tokens": 1,
        "first_tokens": 1, "itl_median_ms": None, "itl_p90_ms": None, "per_request": None}


class _StepClock:
    """A step clock advancing 1 ms per reading: every step takes 1 ms and 1 ms passes between a
    step's end and the next step's start, so a request's gap is 2 ms over one decode step, 4 ms
    when another request's prefill ran in between (a deterministic interleaving)."""

    def __init__(self):
        self.n = 0

    def __call__(self) -> float:
        self.n += 1
        return self.n * 1e-3


@pytest.fixture(scope="module")
def chunked_run():
    """4 requests x 3 tokens, chunked prefill at a 16-token budget (the prompts take 2 chunks
    each: prefill steps interleave with decode), objective 3 ms on the 1 ms step clock."""
    from traceview.engine_shim.bench import run_bench

    return run_bench(model="tiny", max_num_seqs=4, max_model_len=64, batch_mult=1, max_tokens=3, precompile=False,
                     max_num_batched_tokens=16, enable_chunked_prefill=True, itl_slo_ms=3.0, step_clock=_StepClock())


def test_goodput_judges_each_request_gap_across_interleaved_prefill(chunked_run):
    """A gap is the time between a request's consecutive tokens: a prefill step of another
    request in between counts; a request's first token is never judged."""
    from traceview.engine_shim.bench import goodput
    from traceview.engine_shim.cli import format_text

    r = chunked_run
    steps, times, main_s = r["main_steps"], r["main_token_times"], r["main_s"]
    kinds = [k for k, *_ in steps]
    assert r["config"]["enable_chunked_prefill"] and r["checks"]["tokens"]["ok"]
    assert any(a == "decode" and b == "prefill" for a, b in zip(kinds, kinds[1:]))  # interleaved
    # the clock read once at generate(), then twice per step: step k ends (2k + 2) ms after that
    ends = [(2 * k + 2) * 1e-3 for k in range(len(steps))]
    made = {}  # step end -> tokens stamped with it
    for t in (t for ts in times for t in ts):
        k = round(t * 1e3 / 2 - 1)
        assert t == pytest.approx(ends[k]), t
        made[k] = made.get(k, 0) + 1
    assert made == {k: n for k, (_, _, n, _) in enumerate(steps) if n}
    # independently: the gaps within 3 ms are exactly those that no prefill step ended inside
    prefill_ends = [e for e, (kind, *_) in zip(ends, steps) if kind == "prefill"]
    gaps = [(a, b) for ts in times for a, b in zip(ts, ts[1:])]
    spanned = [any(a < e < b for e in prefill_ends) for a, b in gaps]
    met = sum(b - a <= 3.0 / 1e3 for a, b in gaps)
    assert 0 < sum(spanned) < len(gaps) and met == spanned.count(False)
    g = r["goodput"]
    assert (g["gaps"], g["first_tokens"], g["tokens"]) == (len(gaps), 4, 12) and len(gaps) == 12 - 4
    assert g["tokens_met"] == g["gaps_met"] == met and g["tokens_per_s"] == met / main_s
    assert [p["met"] for p in g["per_request"]] == [sum(b - a <= 3e-3 for a, b in zip(ts, ts[1:])) for ts in times]
    assert g["itl_median_ms"] == pytest.approx(2.0) and g["itl_p90_ms"] == pytest.approx(4.0)
    # the old per-step reading (every step is 1 ms, within 3 ms) counted all 12 tokens
    assert all(sec <= 3e-3 for *_, sec in steps) and met < 12
    # an objective no gap misses: every token but the first of each request, over main_s
    huge = goodput(times, main_s, 1e9)
    assert huge["tokens_met"] == huge["gaps"] == r["output_tokens"] - r["num_requests"] == 8
    assert huge["tokens_per_s"] == (r["output_tokens"] - r["num_requests"]) / main_s < r["wall_tokens_per_s"]
    tiny = goodput(times, main_s, 0.0001)
    assert tiny["tokens_met"] == 0 and tiny["tokens_per_s"] == 0 and tiny["gaps"] == 8
    assert (f"goodput {met / main_s:.1f} tok/s under ITL <= 3 ms: {met}/8 gaps between a request's consecutive "
            f"tokens within it (4 first tokens not judged, 12 tokens); gaps median 2.00 ms, p90 4.00 ms") in format_text(r)


def test_int8_kv_pool_as_compiled_and_goodput_under_a_huge_objective(donation_runs, capsys):
    from traceview.engine_shim.cli import format_text
    from traceview.engine_shim.config import PRESETS

    rc, out = _engine(["bench", *SMALL, "--kv-dtype", "int8", "--itl-slo", "1e9", "--time-tolerance", "1"], capsys)
    assert rc == 0, out.err
    r = json.loads(out.out)
    f32 = donation_runs["donated"][0]
    assert f32["config"]["kv_dtype"] == "float32" and r["config"]["kv_dtype"] == "int8"
    q, f = r["memory"][DECODE], f32["memory"][DECODE]
    assert q["kv_dtypes"] == ["int8"] and q["kv_tokens"] == f["kv_tokens"] and q["kv_pools_held"] == 1
    # int8 values are a quarter of float32's; the float32 per-token scales add 4 bytes per head_dim
    overhead = 4 / PRESETS["tiny"].head_dim
    assert f["kv_pool_bytes"] / 4 < q["kv_pool_bytes"] <= f["kv_pool_bytes"] / 4 * (1 + overhead)
    assert q["kv_pool_bytes"] - q["kv_scale_bytes"] == f["kv_pool_bytes"] / 4
    assert q["kv_bytes_at"]["float32"] == f["kv_pool_bytes"] and q["alias_bytes"] >= q["kv_pool_bytes"]
    assert q["kv_pool_bytes"] == r["verification_end"]["kv_cache"]["bytes"]
    g = r["goodput"]  # an objective every gap meets: all tokens but each request's first, over main_s
    assert g["tokens_met"] == g["gaps"] == 12 - 4 and g["tokens_per_s"] == 8 / r["main_s"]
    text = format_text(r)
    if r["itl_s"] is not None:  # the study's figure: (main - TTFT) over all 3 tokens, not the 2 gaps
        assert r["itl_s"] == (r["main_s"] - r["ttft_s"]) / 3
        assert (f"ITL     {r['itl_s'] * 1e3:.2f} ms/token  ((main - TTFT) / 3 tokens per request, the study's figure: "
                "divided by every token, not by the gaps after the first)") in text, text
    assert re.search(r"goodput [\d.]+ tok/s under ITL <= 1e\+09 ms: 8/8 gaps between a request's consecutive tokens "
                     r"within it \(4 first tokens not judged, 12 tokens\); gaps median [\d.]+ ms, p90 [\d.]+ ms; ", text), text
    kv, sc, fb = q["kv_pool_bytes"], q["kv_scale_bytes"], f["kv_pool_bytes"]
    assert (f"memory  KV pool as compiled in {DECODE}: {kv:,} bytes int8 ({sc:,} of them per-token scales) for "
            f"{q['kv_tokens']:,} token slots ({kv / q['kv_tokens']:,.0f} B/token); the same slots at float32 {fb:,} "
            f"({fb / kv:.2f}x the bytes), bfloat16 {fb // 2:,} ({fb / 2 / kv:.2f}x the bytes)") in text, text


class _NoAnalysis:
    """A compiled program whose backend gives no memory analysis (raises, or returns None)."""

    def __init__(self, raises):
        self.raises = raises

    def memory_analysis(self):
        if self.raises:
            raise NotImplementedError("GetCompiledMemoryStats is not supported")
        return None


def test_a_program_without_memory_analysis_is_unknown_not_invented():
    from traceview.engine_shim.verification import memory_lines, program_memory

    mem = {f"jit_decode_b{i}_bkv64": program_memory(_NoAnalysis(raises), (1, 2), (1, 2))
           for i, raises in ((4, True), (8, False))}
    for m in mem.values():
        assert m["unknown"].startswith("no memory analysis")
        assert all(v is None for k, v in m.items() if k != "unknown")
    assert "NotImplementedError: GetCompiledMemoryStats" in mem["jit_decode_b4_bkv64"]["unknown"]
    lines = memory_lines(mem)
    assert lines[0].startswith("jit_decode_b4_bkv64: unknown (no memory analysis (NotImplementedError")
    assert lines[-1] == "no program analysed (2 compiled, the backend gives no memory analysis)"
    assert not any("KV pool" in x for x in lines) and memory_lines({}) == []


def test_itl_slo_must_be_positive(capsys):
    for bad in ("0", "-1", "nan", "inf"):
        rc, out = _engine(["bench", *SMALL, "--itl-slo", bad], capsys)
        assert rc == 2 and "--itl-slo" in out.err and "Traceback" not in out.err


def test_kv_capacity_follows_the_cache_dtype_and_gemma_memory_line():
    from traceview.engine_shim import model as model_lib
    from traceview.engine_shim.config import PRESETS
    from traceview.engine_shim.kv_cache import empty_cache
    from traceview.engine_shim.verification import array_bytes, cache_capacity

    caps = {dt: cache_capacity(*empty_cache(num_layers=2, num_kv_heads=1, num_pages=9, page_size=128, head_dim=256,
                                         dtype=dt)) for dt in (jnp.float32, jnp.bfloat16)}
    assert caps[jnp.float32]["tokens"] == caps[jnp.bfloat16]["tokens"] == 8 * 128
    assert caps[jnp.float32]["bytes"] == 2 * caps[jnp.bfloat16]["bytes"] == 2 * 2 * 9 * 128 * 256 * 4
    assert caps[jnp.bfloat16]["dtypes"] == ["bfloat16"]
    # the study's start-up line read 4.67 GiB for Gemma 2B's bf16 weights
    count, nbytes = array_bytes(jax.eval_shape(lambda: model_lib.init_params(PRESETS["gemma-2b"], 0)))
    assert count == 2_506_172_416 and round(nbytes / 2 ** 30, 2) == 4.67


def test_paired_checks_agree_and_profile_is_a_separate_run(donation_runs):
    for name in ("donated", "copying"):
        r, log = donation_runs[name]
        ck = r["checks"]
        assert ck["ok"] and ck["tokens"]["outputs"] == ck["tokens"]["scheduler"] == r["output_tokens"] == 12
        assert ck["time"]["steps_s"] <= ck["time"]["wall_s"] and ck["time"]["tolerance"] == 1.0
        assert ck["time"]["rel_diff"] == pytest.approx(1 - ck["time"]["steps_s"] / ck["time"]["wall_s"])
        assert ck["main_compiles"]["count"] == 0
        assert r["engine_tokens_per_s"] == pytest.approx(12 / ck["time"]["steps_s"])
        # the headline is unprofiled; the trace is of a second main generation
        assert r["profile_run"]["decode_steps"] == r["main_decode_steps"] == 2
        assert r["decode_steps"] == 1 + 2 + 2 + 2  # warm-up 4 tokens, TTFT none, main, profiled
        assert r["profile_dir"] and str(log) in r["profile_dir"]


def _half_speed() -> float:
    return time.perf_counter() * 0.5


def test_broken_step_clock_fails_the_time_check(monkeypatch, capsys):
    """A step clock running at half speed: the tokens still agree, the time check fails, exit 1."""
    from traceview.engine_shim import bench

    monkeypatch.setattr(bench, "run_bench", functools.partial(bench.run_bench, step_clock=_half_speed))
    argv = ["bench", "--max-tokens", "3", "--max-num-seqs", "4", "--batch-mult", "1", "--max-model-len", "64",
            "--no-precompile"]
    rc, out = _engine(argv, capsys)
    assert rc == 1
    # halved step times: 1 - steps/(2 wall), at least 50% (and more when a loaded machine adds gaps)
    m = re.search(r"check   FAIL time: wall [\d.]+ s, steps summed [\d.]+ s .* diff (\d+\.\d\d)%", out.out)
    assert m and 45 <= float(m[1]) <= 100, out.out
    assert "check   ok   tokens: 12 in the outputs, 12 by the scheduler's step counters" in out.out
    assert "paired check failed (time)" in out.err
    assert "engine: KV cache capacity 16 pages x 16 = 256 tokens (17 pages allocated with the trash page); " \
           "278,528 bytes" in out.err
    assert "engine: buckets compiled  0: none yet" in out.err


def test_counter_checks_flag_token_mismatch_and_compiles():
    from traceview.engine_shim.bench import counter_checks

    ck = counter_checks(100, 96, 2.0, 1.98, 0)
    assert not ck["ok"] and not ck["tokens"]["ok"] and ck["tokens"]["rel_diff"] == pytest.approx(0.04)
    assert ck["time"]["ok"] and ck["time"]["rel_diff"] == pytest.approx(0.01)
    ck = counter_checks(100, 100, 2.0, 1.98, 1)
    assert not ck["ok"] and not ck["main_compiles"]["ok"]
    assert counter_checks(100, 100, 2.0, 1.98, 0)["ok"]
