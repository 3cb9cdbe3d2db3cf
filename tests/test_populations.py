"""Per-population distributions and program-aware populations (issue 15, points 2 and 6).

One engine profile recorded here where the prefill token bucket equals the decode request
bucket (T = B = 32: ``jit_prefill_t32`` and ``jit_decode_b32_*`` compile ops of equal name
and shape), read back with traceview: the by-shape table splits them by module, the step
checks count each program apart, a diff never matches a prefill population with a decode
one. Distributions are checked against numpy on the raw events of the shared MI300X trace
(``tests/oracle.py``'s independent protobuf reader) and the C pass against polars.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import polars as pl
import pytest

import traceview
from traceview.analysis.ops import aggregate, distributions as dist
from traceview.analysis.compare.populations import program_stem

from oracle import raw_hlo_events

GEMM = "mi300x_jax_gemm_sweep.xplane.pb"


@pytest.fixture(scope="module")
def t32b32(tmp_path_factory):
    """A tiny-preset profile: 4 prompts (18-41 tokens, padded to 32 or 64), decode always
    in the 32-request bucket; one unprofiled generation first (compiles), then the profiled
    one. Returns (run folder, decode steps in the profiled run)."""
    pytest.importorskip("jax")
    from traceview.engine_shim.engine import LLM
    from traceview.engine_shim.sampling import SamplingParams

    prompts = ["Hello, my name is", "The president of the United States is", "x" * 30, "y" * 20]
    llm = LLM("tiny", max_num_seqs=32, min_request_bucket=32, min_token_bucket=32, max_model_len=64,
              precompile=False)
    sp = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    llm.generate(prompts, sp)
    steps0 = llm.stats.num_decode_steps
    llm.start_profile(tmp_path_factory.mktemp("t32b32"))
    llm.generate(prompts, sp)
    run = llm.stop_profile()
    return run, llm.stats.num_decode_steps - steps0


@pytest.fixture(scope="module")
def prof(t32b32):
    return traceview.load(t32b32[0], cache=False)


def _decode(prof) -> str:
    (m,) = [m for m in prof.module_runs["module"].unique().to_list() if m.startswith("jit_decode_b32")]
    return m


def test_prefill_and_decode_of_equal_shape_no_longer_merge(prof):
    mods = prof.module_runs["module"].unique().to_list()
    assert "jit_prefill_t32" in mods and _decode(prof) in mods, mods
    merged = aggregate.by_shape(prof.table, split_modules=False)
    both = merged.filter(pl.col("modules").list.len() > 1)
    pd = both.filter(pl.col("modules").list.contains("jit_prefill_t32") & pl.col("modules").list.contains(_decode(prof)))
    assert pd.height > 0, "the T = B = 32 profile should compile equal (name, shape) in prefill and decode"
    split = prof.by_shape()
    assert split.filter(pl.col("modules").list.len() > 1).height == 0
    assert split["programs"].to_list() == split["modules"].to_list()
    assert (split["module"] == split["modules"].list.first()).all()
    # each split row is exactly the events of its (op, shape, module), counted on the raw ops
    raw = prof.ops.group_by("op_name", "shape", "module").agg(pl.col("count").sum().alias("n"),
                                                             pl.col("duration_ps").sum().alias("t"))
    j = split.join(raw, on=["op_name", "shape", "module"], how="full", coalesce=True)
    assert j.height == split.height == raw.height
    assert (j["occurrences"] == j["n"]).all() and (j["total_ps"] == j["t"]).all()
    assert aggregate.program_splits(split)["keys"] == both.height


def test_step_checks_are_per_program(prof, t32b32):
    dec = _decode(prof)
    n = prof.module_runs.filter(pl.col("module") == dec).height
    assert n == t32b32[1] >= 2  # one decode program run per scheduler decode step
    chk = prof.occurrence_checks(steps={dec: n})
    assert chk.filter(pl.col("modules").list.len() > 1).height == 0
    checked = chk.filter(pl.col("steps").is_not_null())
    assert checked.height and (checked["modules"].list.first() == dec).all()
    assert checked["steps_ok"].all(), checked.filter(~pl.col("steps_ok"))
    # a key shared by prefill and decode is two rows: the decode one checked, the prefill one not
    shared = chk.group_by("op_name", "shape").agg(
        pl.len().alias("k"), pl.col("steps").drop_nulls().len().alias("c"),
        (pl.col("modules").list.first() == dec).any().alias("in_decode"))
    shared = shared.filter((pl.col("k") > 1) & pl.col("in_decode"))
    assert shared.height and (shared["c"] == 1).all(), shared


def test_diff_matches_within_programs(prof):
    assert program_stem(_decode(prof)) == "jit_decode" and program_stem("jit_prefill_t32_r4") == "jit_prefill"
    assert program_stem("jit_step_fun") == "jit_step_fun" and program_stem("jit_dot.3") == "jit_dot"
    from traceview.api import Profile

    dec = _decode(prof)
    no_decode = Profile(ops=prof.ops.filter(pl.col("module") != dec), module_runs=prof.module_runs.filter(
        pl.col("module") != dec), devices=prof.devices, traces=prof.traces)
    d = traceview.diff(prof, no_decode)
    gone = d.vanished()
    assert gone.height and {m for ms in gone["modules_base"].to_list() for m in ms} == {dec}
    matched = d.matched()
    assert (matched["program"] != "jit_decode").all()
    # every matched prefill population keeps its occurrences: nothing of the decode mixed in
    assert (matched["occurrences_base"] == matched["occurrences_treatment"]).all()
    # without the program in the key, the shared keys match across programs and lose occurrences
    old = traceview.diff(prof, no_decode, program_key=False).matched()
    assert (old["occurrences_base"] != old["occurrences_treatment"]).any()


def test_population_series_against_module_runs(prof):
    dec = _decode(prof)
    row = (prof.by_shape().filter((pl.col("module") == dec) & (pl.col("occurrences") > 1))
           .sort("self_ps", descending=True).row(0, named=True))
    s = prof.population_series(row["op_name"], row["shape"], dec)
    assert s.height == row["occurrences"]
    runs = prof.module_runs.filter(pl.col("module") == dec).sort("start_ps").with_row_index("k")
    # oracle: the run whose [start, end) holds each occurrence's start (as-of join on the runs)
    want = s.sort("start_ps").join_asof(runs.select(pl.col("k").cast(pl.Int64), "start_ps", "duration_ps")
                                        .rename({"start_ps": "rs", "duration_ps": "rd"}),
                                        left_on="start_ps", right_on="rs")
    assert (want["start_ps"] < want["rs"] + want["rd"]).all()
    assert want["execution"].to_list() == want["k"].to_list()
    per = s.group_by("execution").agg(pl.len().alias("n"), pl.col("occurrence").sort().alias("o"))
    m = row["occurrences"] // runs.height
    assert (per["n"] == m).all() and all(o == list(range(m)) for o in per["o"].to_list())
    assert s.filter(pl.col("execution").is_null()).height == 0


def test_spread_matches_numpy_on_raw_events(shared_traces):
    path = shared_traces / GEMM
    p = traceview.load(path, cache=False)
    bs = p.by_shape()
    raw = raw_hlo_events(path).filter(pl.col("hlo_op") == "custom-call.1")
    # the oracle's GPU kernel events (one per execution here), grouped by program as XProf does
    raw = raw.filter(~pl.col("device").str.contains("host", literal=True))
    pops = bs.filter(pl.col("op_name") == "custom-call.1")
    assert pops.height == 5 and set(pops["programs"].list.join(",")) == {"jit_dot"}
    by_pid = {pid: np.sort(g["duration_ps"].to_numpy()) for (pid,), g in raw.group_by("program_id")}
    for r in pops.iter_rows(named=True):
        cands = [v for v in by_pid.values() if len(v) == r["occurrences"]
                 and abs(v.sum() - r["total_ps"]) <= 1e-6 * r["total_ps"]]
        assert len(cands) == 1, r["shape"]
        v = cands[0].astype(float)
        assert r["p50_ps"] == pytest.approx(np.percentile(v, 50)) and r["median_ps"] == r["p50_ps"]
        assert r["p90_ps"] == pytest.approx(np.percentile(v, 90))
        assert r["max_ps"] == v.max() and r["cv"] == pytest.approx(v.std() / v.mean())
    # the --by program rows (one program per GEMM shape here) carry the same distributions
    prog = p.by_program_op().filter(pl.col("op_name") == "custom-call.1")
    for c in ("p50_ps", "p90_ps", "max_ps", "cv"):
        assert sorted(prog[c].to_list()) == pytest.approx(sorted(pops[c].to_list())), c


def test_c_pass_equals_polars(prof, monkeypatch):
    fast = prof.by_shape().sort("op_name", "shape", "module")
    monkeypatch.setattr(dist, "_fast", None)
    slow = prof.by_shape().sort("op_name", "shape", "module")
    for c in ("p50_ps", "p90_ps", "cv"):
        a, b = fast[c].to_numpy().astype(float), slow[c].to_numpy().astype(float)
        assert np.allclose(a, b, rtol=1e-9, equal_nan=True), c
    assert fast["regimes"].to_list() == slow["regimes"].to_list()


def test_regimes_warm_up_two_programs_and_bimodal():
    """Synthetic op tables with a known answer for each regime rule."""
    base = dict(host="h", device="d", module="jit_f", op_kind="fusion", shape="f32[8]", count=1)

    def table(durs, programs=None):
        rows = [{**base, "op_name": "fusion", "program_id": (programs[i] if programs else 1),
                 "start_ps": 1_000_000_000 * i, "duration_ps": d, "self_ps": d} for i, d in enumerate(durs)]
        return pl.DataFrame(rows)

    def runs(n, programs=None):
        return pl.DataFrame({"host": ["h"] * n, "device": ["d"] * n, "module": ["jit_f"] * n,
                             "program_id": pl.Series([programs[i] if programs else 1 for i in range(n)], dtype=pl.UInt64),
                             "start_ps": [1_000_000_000 * i for i in range(n)], "duration_ps": [900_000_000] * n})

    steady = [1_000_000 + 1000 * (i % 3) for i in range(9)]
    warm = aggregate.by_shape(table([10_000_000] + steady), runs(10)).row(0, named=True)
    assert warm["regimes"].startswith("warm-up: execution 0 10.0x"), warm["regimes"]
    assert aggregate.by_shape(table(steady), runs(9)).row(0, named=True)["regimes"] is None
    progs = [1] * 5 + [2] * 5
    two = aggregate.by_shape(table([1_000_000] * 5 + [4_000_000] * 5, progs), runs(10, progs)).row(0, named=True)
    assert "2 programs" in two["regimes"] and "bimodal: 50%" in two["regimes"]
    bi = aggregate.by_shape(table([1_000_000, 3_000_000] * 6), runs(12)).row(0, named=True)
    assert bi["regimes"] == "bimodal: 50% near 1.00 µs, 50% near 3.00 µs"
    # one or two slow samples are outliers, not a mode (each mode needs 3 and 10% of them)
    for n, k in ((10, 1), (12, 2)):
        durs = [1_000_000 + 1000 * (i % 3) for i in range(n - k)] + [3_000_000] * k
        assert aggregate.by_shape(table(durs), runs(n)).row(0, named=True)["regimes"] is None, k
    three = aggregate.by_shape(table([1_000_000 + 1000 * (i % 3) for i in range(9)] + [3_000_000] * 3), runs(12))
    assert three.row(0, named=True)["regimes"] == "bimodal: 75% near 1.00 µs, 25% near 3.00 µs"
    # a smooth spread (1 to 3 µs, 10% apart) has modes 1.5x apart by median but no empty gap
    smooth = [round(1_000_000 * 1.1 ** i) for i in range(12)]
    assert aggregate.by_shape(table(smooth), runs(12)).row(0, named=True)["regimes"] is None
    # below MIN_P50_PS the spread is the timer's: never examined
    tiny = aggregate.by_shape(table([2_500, 3_750] * 6), runs(12)).row(0, named=True)
    assert tiny["regimes"] is None


def test_cli_program_shape_and_json(t32b32, tmp_path):
    run = t32b32[0]
    out = tmp_path / "a.json"
    subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(run), "--by", "program-shape",
                    "--all-rows", "--no-cache", "-o", str(out)], check=True, capture_output=True, text=True, timeout=300)
    j = json.loads(out.read_text())
    ops = pl.DataFrame(j["ops"], infer_schema_length=None)
    assert list(j["ops"][0])[0] == "module"
    assert ops.group_by("module").agg(pl.col("module_share").sum())["module_share"].to_list() == pytest.approx(
        [1.0] * ops["module"].n_unique())
    assert j["program_splits"]["keys"] > 0 and j["population_regimes"] is not None
    assert {"p50_ps", "p90_ps", "cv", "programs", "regimes"} <= set(j["ops"][0])
    text = subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(run), "--no-cache", "--top", "5"],
                          check=True, capture_output=True, text=True, timeout=300).stdout
    assert "keys run in several programs" in text and "jit_prefill_t32" in text


def test_shared_traces_have_no_program_merges(shared_traces):
    for name in ("vllm_tpu_qwen", GEMM):
        p = traceview.load(shared_traces / name)
        bs = p.by_shape()
        assert bs.filter(pl.col("modules").list.len() > 1).height == 0
        assert aggregate.by_shape(p.table, split_modules=False).height == bs.height
    # vLLM: fusion names recur in several programs, each (name, shape) in one
    v = traceview.load(shared_traces / "vllm_tpu_qwen").by_shape()
    fus = v.filter(pl.col("op_name").str.starts_with("fusion"))
    assert fus["module"].n_unique() >= 3
    per_name = fus.group_by("op_name").agg(pl.col("module").n_unique().alias("m"))
    assert per_name["m"].max() >= 2


def test_series_chunks_when_runs_are_on_another_clock():
    """Runs shifted off the ops (TPU ops on the device clock beside host-aligned runs): the
    k-th run holds occurrences k*m .. k*m+m-1 in time order."""
    from traceview.model.optable import OpTable

    n_runs, m = 4, 3
    ops = pl.DataFrame([{"host": "h", "device": "d", "module": "jit_f", "program_id": 7, "op_name": "fusion",
                         "shape": "f32[8]", "op_kind": "fusion", "count": 1,
                         "start_ps": 10_000 * k + 1_000 * j, "duration_ps": 500 + k, "self_ps": 500 + k}
                        for k in range(n_runs) for j in range(m)])
    runs = pl.DataFrame({"host": ["h"] * n_runs, "device": ["d"] * n_runs, "module": ["jit_f"] * n_runs,
                         "program_id": pl.Series([7] * n_runs, dtype=pl.UInt64),
                         "start_ps": [10_000 * k + 5_000_000 for k in range(n_runs)],  # far from the ops
                         "duration_ps": [9_000] * n_runs})
    s = dist.population_series(OpTable.from_frame(ops), runs, "fusion", "f32[8]")
    assert s["execution"].to_list() == [k for k in range(n_runs) for _ in range(m)]
    assert s["occurrence"].to_list() == list(range(m)) * n_runs
    assert s["duration_ps"].to_list() == [500 + k for k in range(n_runs) for _ in range(m)]
    # one occurrence short: not a whole multiple of the runs, so no execution index
    s = dist.population_series(OpTable.from_frame(ops.head(n_runs * m - 1)), runs, "fusion", "f32[8]")
    assert s["execution"].null_count() == s.height
    assert s["occurrence"].to_list() == list(range(n_runs * m - 1))  # counted on the device


def test_spread_of_pre_aggregated_rows_counts_each_row_mean_once():
    ops = pl.DataFrame({"host": "h", "device": "d", "module": "m", "op_name": "x", "shape": "f32[1]",
                        "start_ps": [0, 10, 20], "duration_ps": [4_000, 10_000, 9_000], "self_ps": [4_000, 10_000, 9_000],
                        "count": [2, 5, 1]})
    r = aggregate.by_shape(ops).row(0, named=True)
    v = np.array([2_000.0, 2_000.0, 9_000.0])  # per-occurrence means of the three rows
    assert r["p50_ps"] == pytest.approx(np.percentile(v, 50)) and r["p90_ps"] == pytest.approx(np.percentile(v, 90))
    assert r["cv"] == pytest.approx(v.std() / v.mean())


def test_row_codes_and_lex_order_equal_join_and_lexsort():
    """The runs' (host, device, program) codes equal an inner join's, nulls equal and unknown
    values dropped; the runs' order equals numpy's lexsort, in time order or not."""
    rng = np.random.default_rng(7)
    n = 5000
    hosts = pl.Series([None if x == 2 else f"h{x}" for x in rng.integers(0, 4, n)], dtype=pl.Utf8)
    frame = pl.DataFrame({"host": hosts, "device": [f"d{x}" for x in rng.integers(0, 3, n)],
                          "program_id": pl.Series([None if x == 5 else int(x) for x in rng.integers(0, 7, n)],
                                                  dtype=pl.UInt64)})
    ref = (pl.DataFrame({"host": [None, "h0", "h1", "h1", "h3"], "device": ["d0", "d0", "d1", "d2", "d1"],
                         "program_id": pl.Series([1, None, 3, 4, 6], dtype=pl.UInt64)})
           .with_columns(pl.col("program_id").cast(pl.UInt64)))
    for big in (False, True):
        f, r = frame, ref
        if big:  # program ids past the lookup table: the replace path
            f = frame.with_columns(pl.col("program_id") * (1 << 40))
            r = ref.with_columns(pl.col("program_id") * (1 << 40))
        want = (f.with_row_index("_i").join(r.with_row_index("_r"), on=["host", "device", "program_id"], how="left",
                                            nulls_equal=True).sort("_i")["_r"].cast(pl.Int64).fill_null(-1).to_numpy())
        got = dist._row_codes(f, r, ["host", "device", "program_id"])
        assert (got == want).all() and (got >= 0).any() and (got < 0).any()
    for sort_b in (True, False):
        a = rng.integers(0, 5, n).astype(np.int64)
        b = rng.integers(0, 50, n).astype(np.int64)
        c = rng.integers(0, 3, n).astype(np.int64)
        if sort_b:
            o = np.lexsort((c, b))
            b, c = b[o], c[o]
        got = dist._lex_order(a, b, c)
        want = np.lexsort((c, b, a))
        assert got is not None and (got == want).all()
        s = np.lexsort((c, b, a))
        again = dist._lex_order(a[s], b[s], c[s])
        assert again is None or (again == np.arange(n)).all()
    t = np.arange(10)
    assert dist._lex_order(np.zeros(10, dtype=np.int64), t, t) is None
    # runs in time order per device, programs interleaved within each device
    dev = np.sort(rng.integers(0, 3, n))
    prog = rng.integers(0, 4, n)
    a = dev * 4 + prog
    b = np.concatenate([np.sort(rng.integers(0, 40, (dev == d).sum())) for d in range(3)])
    c = rng.integers(0, 2, n)
    got = dist._lex_order(a, b, c)
    assert got is not None and (got == np.lexsort((c, b, a))).all()


def _multi_device(durs_by_device: dict[str, list[int]]):
    """An op table and its runs: each device runs the program once per entry of its list,
    one occurrence of the population per run (times in ps)."""
    from traceview.model.optable import OpTable

    ops, runs = [], []
    for d, durs in durs_by_device.items():
        for i, dur in enumerate(durs):
            t = 1_000_000_000 * i
            ops.append({"host": "h", "device": d, "module": "jit_f", "program_id": 1, "op_name": "fusion",
                        "shape": "f32[8]", "op_kind": "fusion", "count": 1, "start_ps": t, "duration_ps": dur,
                        "self_ps": dur})
            runs.append({"host": "h", "device": d, "module": "jit_f", "program_id": 1, "start_ps": t,
                         "duration_ps": 900_000_000})
    runs = pl.DataFrame(runs).with_columns(pl.col("program_id").cast(pl.UInt64))
    return OpTable.from_frame(pl.DataFrame(ops)), runs


def test_warm_up_needs_execution_0_slow_on_its_own_devices():
    """A device slow in every execution makes execution 0's pooled mean slow too: that is a
    device split, not a warm-up. Slow only in execution 0 on every device is."""
    fast, slow = 1_000_000, 50_000_000
    one_dev = {f"d{i}": [fast] * 3 for i in range(7)} | {"d7": [slow] * 3}
    r = aggregate.by_shape(*_multi_device(one_dev)).row(0, named=True)
    assert r["regimes"] == ("device split: d7 near 50.00 µs in all 3 executions, 7 other device(s) "
                            "near 1.00 µs"), r["regimes"]
    every = {f"d{i}": [slow, fast, fast] for i in range(4)}
    assert aggregate.by_shape(*_multi_device(every)).row(0, named=True)["regimes"].startswith(
        "warm-up: execution 0 50.0x")
    # one device's spike in execution 0 is no warm-up of the program (a user saw 7 of 8 devices
    # at their usual time and one 917 us event called one)
    single = {"d0": [slow, fast, fast]} | {f"d{i}": [fast] * 3 for i in range(1, 4)}
    assert "warm-up" not in (aggregate.by_shape(*_multi_device(single)).row(0, named=True)["regimes"] or "")
    # execution 0 slow on every device, but the later executions have a mode as slow: recurring
    recurring = {f"d{i}": [slow, fast, slow, fast, fast] for i in range(4)}
    reg = aggregate.by_shape(*_multi_device(recurring)).row(0, named=True)["regimes"]
    assert reg is not None and "warm-up" not in reg and reg.startswith("bimodal:"), reg
    # two devices slow in one execution each: a mode of two device-programs' occurrences
    # shared with fast ones, so plainly bimodal, no device named
    mixed = {"d0": [slow, fast, fast], "d1": [fast, slow, fast], "d2": [fast, fast, slow]} | {
        f"d{i}": [fast] * 3 for i in range(3, 8)}
    assert aggregate.by_shape(*_multi_device(mixed)).row(0, named=True)["regimes"].startswith("bimodal: 88%")


def test_straggler_fixture_conditional_is_a_device_split_not_a_warm_up():
    """straggler_8dev: CPU:5 runs ``conditional.1.clone`` for milliseconds in all three
    executions (its injected delay), the other devices for well under a microsecond."""
    from pathlib import Path

    p = traceview.load(Path(__file__).resolve().parents[1] / "fixtures" / "straggler_8dev", stale_after_s=None)
    bs = p.by_shape().filter(pl.col("op_name") == "conditional.1.clone")
    (r,) = bs.iter_rows(named=True)
    s = dist.population_series(p.table, p.module_runs, "conditional.1.clone", r["shape"], "jit_body")
    cpu5 = s.filter(pl.col("device") == "/device:CPU:5").sort("execution")
    rest = s.filter(pl.col("device") != "/device:CPU:5")
    assert cpu5["execution"].to_list() == [0, 1, 2]
    assert cpu5["duration_ps"].min() > 6_000_000_000 and rest["duration_ps"].max() < 2_000_000
    assert "warm-up" not in r["regimes"]
    reg = p.analyze().population_regimes.filter(pl.col("op_name") == "conditional.1.clone").row(0, named=True)
    assert reg["regimes"] == r["regimes"]
    assert reg["regimes"].startswith("device split: /device:CPU:5 near ")
    assert "in all 3 executions, 7 other device(s)" in reg["regimes"]
    assert reg["high_mode_ps"] == float(cpu5["duration_ps"].median())
    assert reg["low_mode_ps"] == float(rest["duration_ps"].median())
    assert reg["high_mode_share"] == 3 / 24


def test_per_step_samples_are_each_populations_self_time_per_step(shared_traces):
    """The diff's per-step samples (:func:`traceview.analysis.compare.samples.population_samples`)
    against a plain group-by: per population, its events' self time summed per step it has
    events in, in step order (float64, exact); fewer than MIN_STEPS such steps: per occurrence."""
    import numpy as np

    import traceview
    from traceview.analysis import derived
    from traceview.analysis.compare.samples import MIN_STEPS, _attr_codes, population_samples

    prof = traceview.load(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    t, a = derived.tagged(prof), derived.step_anatomy(prof)
    idx = a.steps["step"].to_numpy()
    rows = np.where(a.step_rows >= 0, idx[np.clip(a.step_rows, 0, None)], -1)
    got = population_samples(prof.table, t, rows)
    code, keys = _attr_codes(t, True, prof.table.attrs.height)
    ev = prof.table.events
    per = (pl.DataFrame({"pop": code[ev["attr"].to_numpy()], "step": rows, "t": ev["self_ps"]})
           .filter((pl.col("pop") >= 0) & (pl.col("step") >= 0))
           .group_by("pop", "step").agg(pl.col("t").sum()).sort("pop", "step")
           .group_by("pop", maintain_order=True).agg(pl.col("t")))
    n = 0
    for p, ts in per.iter_rows():
        kind, arr = got.by_key[keys[p]]
        if len(ts) >= MIN_STEPS:
            assert kind == "per step" and arr.dtype == np.float64 and arr.tolist() == [float(x) for x in ts]
            n += 1
        else:
            assert kind == "per occurrence"
    assert n >= 3 and len(got.by_key) == len(keys)


def test_regime_helpers_equal_the_numpy_calls_they_replace():
    """series' event and run selection, the mode split's medians and distinct codes compute
    what np.flatnonzero(member[values]), np.median and np.unique give."""
    rng = np.random.default_rng(7)
    for n_codes in (1, 3, 8, 9, 40):
        values = rng.integers(0, n_codes, 5000).astype(np.uint32)
        for k in (0, 1, 2, 8, 9, n_codes):
            member = np.zeros(n_codes, dtype=bool)
            member[rng.permutation(n_codes)[:k]] = True
            assert np.array_equal(dist._where_in(values, member), np.flatnonzero(member[values]))
    for n in range(1, 60):
        v = np.sort(rng.integers(0, 10 ** 13, n).astype(np.float64))
        assert dist._sorted_median(v) == float(np.median(v))
    for dtype in (np.int64, np.int32, np.uint64):
        for codes in (rng.integers(0, 30, 500), rng.integers(0, 10 ** 9, 50), np.array([5])):
            c = codes.astype(dtype)
            got, want = dist._distinct(c), np.unique(c)
            assert np.array_equal(got, want) and got.dtype == want.dtype
    assert dist._distinct(np.array([-3, 2, -3])).tolist() == [-3, 2]
