"""Step distributions and the steady window (traceview.analysis.steps.stepstats) on the shared traces,
a CPU profile recorded here with two first executions inside its steps, and synthetic series.

Expected figures are recomputed independently: step durations from the trace's own step
markers or ``XLA Modules`` executions, medians with ``statistics.median``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import textwrap

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings, strategies as st

import traceview
from traceview.analysis.steps import stepstats, anatomy as steps
from traceview.errors import UsageError

# --------------------------------------------------------------------------------------
# the rule on synthetic series


@pytest.mark.parametrize("series, flagged", [
    ([5.0, 1.0, 1.02, 0.98, 1.01, 0.99, 4.5], [0, 6]),      # first and last 4-5x the rest
    ([5.0, 1.0, 1.0, 1.0, 1.0, 1.0, 5.0], [0, 6]),           # MAD = 0: off the median is an outlier
    ([1.0] * 9, []),                                         # all identical
    ([5.0, 1.0], []),                                        # two steps: cannot tell which is usual
    ([7.0], []),                                             # one step
    ([784.13, 784.21, 784.11, 784.12, 784.23, 784.10], []),  # TPU-tight: within 20% of the median
    ([1.0, 1.0, 1.0, 0.2], [3]),                             # a cut-short last step
])
def test_outlier_rule_edge_cases(series, flagged):
    got = np.flatnonzero(stepstats.outliers(series)).tolist()
    assert got == flagged
    rest = [x for i, x in enumerate(series) if i not in flagged]
    if len(series) >= 5 and flagged:
        assert statistics.median(rest) == pytest.approx(1.0, rel=0.03)  # the steady state


def test_robust_z_is_iglewicz_hoaglin():
    x = np.array([1.0, 2.0, 3.0, 4.0, 100.0])
    # median 3, |x - 3| = 2 1 0 1 97, MAD = 1: z = 0.6745 * |x - 3|
    assert stepstats.robust_z(x).tolist() == pytest.approx([1.349, 0.6745, 0.0, 0.6745, 65.4265])
    assert stepstats.robust_z(np.array([2.0, 2.0, 2.0, 3.0])).tolist() == [0.0, 0.0, 0.0, float("inf")]


@settings(max_examples=150, deadline=None)
@given(n=st.integers(8, 60), seed=st.integers(0, 2**31), base=st.floats(1e3, 1e12),
       spikes=st.lists(st.floats(2.5, 40.0), min_size=0, max_size=3), jitter=st.floats(0.0, 0.05))
def test_spikes_are_flagged_and_the_steady_median_kept(n, seed, base, spikes, jitter):
    """A steady series (uniform jitter of up to ±5%) with up to three steps 2.5-40x longer
    at random places: exactly the spikes are flagged, and the median of the rest is the
    steady state."""
    rng = np.random.default_rng(seed)
    x = base * (1 + rng.uniform(-jitter, jitter, n))
    where = rng.choice(n, size=len(spikes), replace=False)
    x[where] = base * np.array(spikes)
    got = stepstats.outliers(x)
    assert set(np.flatnonzero(got).tolist()) == set(where.tolist())
    assert np.median(x[~got]) == pytest.approx(base, rel=0.05)


def test_windows_parse_and_select():
    assert stepstats.parse_window("steady") == ("steady", None)
    assert stepstats.parse_window(" 1:-1 ") == ("1:-1", slice(1, -1))
    assert stepstats.parse_window(":3") == (":3", slice(None, 3))
    for bad in ("warm", "1:2:3", "a:b", "", 3):
        with pytest.raises(UsageError, match="step window"):
            stepstats.parse_window(bad)
    # A:B is range(n)[A:B] per device; gap_before is the previous step's gap_after
    frame = pl.DataFrame({"host": ["h"] * 5 + ["h"] * 3, "device": ["a"] * 5 + ["b"] * 3,
                          "step": [0, 1, 2, 3, 4, 0, 1, 2], "start_ps": [0, 10, 20, 30, 40, 0, 10, 20],
                          "duration_ps": [9, 8, 8, 8, 8, 8, 8, 8], "gap_after_ps": [1, 2, 2, 2, None, 2, 2, None]})
    out = stepstats.annotate(frame, window="1:-1")
    assert out["in_window"].to_list() == [False, True, True, True, False, False, True, False]
    assert out["gap_before_ps"].to_list() == [None, 1, 2, 2, 2, None, 2, 2]
    assert stepstats.annotate(frame, window="all")["in_window"].all()


def test_few_steps_are_judged_against_the_module_on_every_device():
    """A device with 4 steps of which 2 are warm-up: its own median sits between the regimes
    (nothing flagged); pooled with the same module's steps on the other devices, the two
    long steps are outliers and the steady median is the other devices' ~1.0."""
    dur = [43.0, 1.1, 45.0, 1.0] + [1.0, 0.95, 1.05, 1.0, 0.98] * 3
    dev = ["g0"] * 4 + [f"g{1 + i // 5}" for i in range(15)]
    step = [0, 1, 2, 3] + [i % 5 for i in range(15)]
    frame = pl.DataFrame({"host": ["h"] * 19, "device": dev, "step": step, "module": ["jit_f"] * 19,
                          "start_ps": [10 * i for i in step], "duration_ps": dur, "gap_after_ps": [1] * 19})
    assert not stepstats.outliers(dur[:4]).any()  # the device alone cannot tell
    out = stepstats.annotate(frame)
    assert out.filter(pl.col("outlier")).select("device", "step").rows() == [("g0", 0), ("g0", 2)]
    assert stepstats.distribution(out)["median_ps"] == pytest.approx(1.0)
    # a different module on another device is not a reference: g0 alone again, nothing flagged
    other = frame.with_columns(pl.when(pl.col("device") != "g0").then(pl.lit("jit_g")).otherwise(pl.col("module"))
                               .alias("module"))
    assert not stepstats.annotate(other)["outlier"].any()


def test_a_long_host_gap_is_a_flagged_steps_reason_only():
    """A long host gap before a flagged step is one of its reasons; the gap before an
    unflagged step (on a device with no outlier, or on the flagged device) is no reason."""
    n = 10
    dur = [100] * n
    dur[6] = 1000  # flagged, after a long gap
    start, t = [], 0
    for i in range(n):
        t += 5000 if i in (3, 6) else 10  # gap before step 3 (not flagged) and before 6 (flagged)
        start.append(t)
        t += dur[i]
    gap_after = [start[i + 1] - start[i] - dur[i] for i in range(n - 1)] + [None]
    one = {"host": ["h"] * n, "step": list(range(n)), "module": ["jit_f"] * n, "start_ps": start,
           "duration_ps": dur, "gap_after_ps": gap_after}
    frame = pl.concat([pl.DataFrame({**one, "device": ["g0"] * n}),
                       pl.DataFrame({**one, "device": ["g1"] * n, "duration_ps": [100] * n})])
    out = stepstats.annotate(frame)
    flagged = out.filter(pl.col("outlier"))
    assert flagged.select("device", "step").rows() == [("g0", 6)]
    assert flagged["reason"][0] == "10x the median; host gap before 0.000 ms"
    assert out.filter(~pl.col("outlier"))["reason"].null_count() == 2 * n - 1


# --------------------------------------------------------------------------------------
# real traces


def test_v6e_steps_are_one_steady_distribution(shared_traces):
    """400 executions of jit_f on 4 chips, 784.1 ms each within ±0.02%: no outlier; the
    distribution's median is the median of the executions' own durations (the span extent
    reaches the end of the ops they start: 134 µs, 0.017%, longer)."""
    prof = traceview.load(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    a = prof.steps()
    d = a.distribution
    assert (d["n"], d["n_window"], d["n_outliers"], d["window"]) == (400, 400, 0, "steady")
    runs = prof.module_runs.filter(pl.col("module") == "jit_f")["duration_ps"].to_list()
    assert len(runs) == 400
    assert d["median_ps"] == pytest.approx(statistics.median(runs), rel=5e-4)
    assert 783.8e9 < d["p10_ps"] <= d["median_ps"] <= d["p90_ps"] <= d["max_ps"] < 784.5e9
    assert a.steps.filter(pl.col("step") > 0)["gap_before_ps"].null_count() == 0
    assert a.steps.filter(pl.col("step") == 0)["gap_before_ps"].null_count() == 4
    assert a.coverage.excluded == 0 and a.coverage.line() == a.coverage_all.line()
    assert "no outliers" in a.summary() and "400 of 400 steps" in a.summary()


def test_vllm_two_devices_one_step_each(shared_traces):
    a = traceview.load(shared_traces / "vllm_tpu_qwen").steps()
    assert a.steps.height == 2 and a.distribution["n_outliers"] == 0
    # one step per device: median of the two step durations
    assert a.distribution["median_ps"] == pytest.approx(statistics.median(a.steps["duration_ps"].to_list()))
    assert a.steps["gap_before_ps"].null_count() == 2


# --------------------------------------------------------------------------------------
# a recorded profile whose steps 0 and 4 compile and first-run a program

_RECORD = textwrap.dedent("""
    import sys
    import jax, jax.numpy as jnp
    @jax.jit
    def f(x):
        return jnp.tanh(x @ x) + 1.0
    @jax.jit
    def g(x):
        return jnp.sin(x).sum(axis=0)
    x = jnp.ones((256, 256), jnp.float32)
    jax.profiler.start_trace(sys.argv[1])
    for i in range(8):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            y = f(x)
            if i == 4:
                y = y + g(y)
            y.block_until_ready()
    jax.profiler.stop_trace()
""")


@pytest.fixture(scope="module")
def first_runs(tmp_path_factory):
    """Eight StepTraceAnnotation steps; f compiles in step 0, g in step 4 (about 3 s)."""
    d = tmp_path_factory.mktemp("first_runs")
    subprocess.run([sys.executable, "-c", _RECORD, str(d)], check=True, timeout=300,
                   env=dict(os.environ, JAX_PLATFORMS="cpu"))
    return d


def test_first_executions_are_flagged_and_left_out(first_runs):
    prof = traceview.load(first_runs)
    a = prof.steps()
    assert a.method == "markers" and a.steps.height == 8
    out = a.steps.filter(pl.col("outlier"))
    flagged = out["step"].to_list()
    # 0 and 4 compile (tens of ms against ~1-3 ms); a loaded CI machine may add noisy ones
    assert {0, 4} <= set(flagged), out
    why = dict(zip(flagged, out["reason"].to_list()))
    assert why[0].endswith("x the median; first execution of jit_f")
    assert "first execution of jit_g" in why[4] and "op mix differs from the modal step" in why[4]
    assert float(why[0].split("x")[0]) > 1
    assert a.steps.filter(~pl.col("outlier"))["reason"].null_count() == 8 - len(flagged)
    # independent: the steady figures are the non-flagged markers' own durations
    mk = prof.step_markers.sort("start_ps")
    assert mk["step_num"].to_list() == list(range(8))
    steady = [d for i, d in enumerate(mk["duration_ps"].to_list()) if i not in flagged]
    assert a.distribution["median_ps"] == pytest.approx(statistics.median(steady))
    assert a.distribution["mean_ps"] == pytest.approx(statistics.mean(steady))
    assert a.coverage.n_steps == len(steady) and a.coverage.excluded == len(flagged)
    assert a.coverage.step_ps == pytest.approx(statistics.mean(steady))
    assert a.coverage_all.n_steps == 8 and a.coverage_all.step_ps > a.coverage.step_ps
    # families are over the window: per step, the steady steps' ops only
    ops_in_window = a.steps.filter(pl.col("in_window"))["ops"].sum()
    assert a.families["occurrences"].sum() == ops_in_window
    # the same profile over every step, and over a range
    assert prof.steps(window="all").coverage.n_steps == 8
    b = prof.steps(window="1:4")
    assert b.coverage.n_steps == 3 and b.distribution["window"] == "1:4"
    assert b.steps.filter(pl.col("in_window"))["step"].to_list() == [1, 2, 3]
    # a window of none of the 8 steps is refused, as analyze --step-window refuses it
    for empty in ("5:2", "100:200"):
        with pytest.raises(UsageError, match=rf"step_window {empty} holds none of the trace's 8 steps"):
            prof.steps(window=empty)
    # the library's report names its own argument (the command line names --step-window) and the file
    with pytest.raises(UsageError, match=r"step_window 100:200 holds none of the trace's 8 steps") as e:
        prof.analyze(step_window="100:200")
    assert "--step-window" not in str(e.value) and e.value.path == str(prof.discovery.root)


def test_cli_step_window_and_json(first_runs, tmp_path, capsys):
    from traceview.cli import main

    assert main(["analyze", str(first_runs), "--format", "json", "--no-cache"]) == 0
    s = json.loads(capsys.readouterr().out)["steps"]
    assert (s["window"], s["extent"]) == ("steady", "span")
    flagged = [r["step"] for r in s["records"] if r["outlier"]]
    assert {0, 4} <= set(flagged)
    assert set(s["records"][0]) >= {"device", "step", "start_ps", "duration_ps", "idle_ps", "gap_before_ps",
                                    "outlier", "reason", "in_window"}
    assert s["distribution"]["n"] == 8 and s["distribution"]["n_window"] == 8 - len(flagged)
    assert main(["analyze", str(first_runs), "--step-window", "all", "--step-extent", "period", "--no-cache",
                 "-o", str(tmp_path / "a.txt")]) == 0
    text = (tmp_path / "a.txt").read_text()
    assert "8 of 8 steps in window all" in text and "outlier" in text and "first execution of" in text
    assert main(["analyze", str(first_runs), "--step-window", "warm"]) == 2
    err = capsys.readouterr().err
    assert "unknown step window 'warm'" in err and "Traceback" not in err
    html = tmp_path / "r.html"
    assert main(["report", str(first_runs), "-o", str(html), "--no-cache"]) == 0
    page = html.read_text()
    assert "Step time:" in page and page.count("<svg") == 2 and "first execution of" in page


def test_diff_step_time_uses_the_window(first_runs):
    """The diff's step time is the steady mean by default, the mean of all steps on request."""
    d = traceview.diff(first_runs, first_runs)
    a = traceview.load(first_runs).steps()  # the diff's steps are analyze's (the step markers here)
    assert d.steps.step_ps_base == pytest.approx(a.coverage.step_ps)
    d_all = traceview.diff(first_runs, first_runs, step_window="all")
    assert d_all.steps.step_ps_base == pytest.approx(a.coverage_all.step_ps)
    with pytest.raises(UsageError):
        traceview.diff(first_runs, first_runs, step_window="x")
    assert steps.EXTENTS == ("span", "period", "run")


def test_tpu_steps_line_gives_the_steps(shared_traces, tmp_path):
    """A TPU plane's ``Steps`` line (the shared v6e trace has none: here each plane gets one,
    copied from its jit_f executions on the ``XLA Modules`` line) is read as device step
    markers and, with no --step-module, its events are the steps."""
    from traceview.read.xplane.protos import XSpace

    sp = XSpace()
    sp.ParseFromString((shared_traces / "tpu_v6e_4chip_psum.xplane.pb").read_bytes())
    want = {}
    for p in sp.planes:
        if not p.name.startswith("/device:TPU:"):
            continue
        assert "Steps" not in {ln.name for ln in p.lines}
        mods = next(ln for ln in p.lines if ln.name == "XLA Modules")
        fid = next(k for k, v in p.event_metadata.items() if v.name.startswith("jit_f"))
        line = p.lines.add()
        line.CopyFrom(mods)
        line.name, line.display_name, line.id = "Steps", "Steps", 999
        del line.events[:]
        for e in mods.events:
            if e.metadata_id == fid:
                line.events.add().CopyFrom(e)
        want[p.name] = sorted(e.duration_ps for e in line.events)
    path = tmp_path / "v6e_steps.xplane.pb"
    path.write_bytes(sp.SerializeToString())
    prof = traceview.load(path, cache=False)
    mk = prof.step_markers
    assert mk.height == 400 and set(mk["name"]) == {"Steps"} and set(mk["device"]) == set(want)
    for dev, durs in want.items():
        assert sorted(mk.filter(pl.col("device") == dev)["duration_ps"].to_list()) == durs
    a = prof.steps()
    assert a.method == "markers" and a.notes[0].startswith("steps are the events of the TPU Steps line (400 on 4")
    assert a.steps.height == 400
    assert a.distribution["median_ps"] == pytest.approx(statistics.median(d for v in want.values() for d in v))
    assert prof.steps(module="jit_f").method == "module"  # naming a program still wins


def test_step_strip_is_bounded_and_keeps_envelope_and_outliers():
    """The HTML strip chart of a long run draws at most 2 points per bin of the inliers and of
    the outliers each, and the shortest and longest steps of every bin are among them (the
    envelope)."""
    import random
    from types import SimpleNamespace

    from traceview.analysis.report import step_strip

    rng = random.Random(7)
    n, bins = 20_000, 100
    d = [1_000_000 + rng.randrange(50_000) for _ in range(n)]
    outl = {17, 9_999, 19_998}
    for i in outl:
        d[i] = 40_000_000
    st = pl.DataFrame({"step": list(range(n)), "duration_ps": d, "outlier": [i in outl for i in range(n)]})
    s = step_strip(SimpleNamespace(steps=st, distribution={"median_ps": 1_025_000.0}), bins=bins)
    assert s.n_steps == n and s.shown <= 2 * bins + len(outl)
    kept = set(zip(s.steps, s.durations))
    assert {(i, d[i]) for i in outl} <= kept
    width = -(-n // bins)
    for b in range(bins):
        members = [(i, d[i]) for i in range(b * width, min(n, (b + 1) * width)) if i not in outl]
        assert min(members, key=lambda x: x[1])[1] in {v for i, v in kept if b * width <= i < (b + 1) * width}
        assert max(members, key=lambda x: x[1])[1] in {v for i, v in kept if b * width <= i < (b + 1) * width}
    short = st.head(50)
    assert step_strip(SimpleNamespace(steps=short, distribution={})).shown == 50
    # a run where every other step is an outlier (a scaled trace: 123,000 of them took the
    # chart worker 15 s to draw): the outliers get their own envelope, also bounded
    alt = st.with_columns((pl.col("step") % 2 == 0).alias("outlier"))
    s = step_strip(SimpleNamespace(steps=alt, distribution={}), bins=bins)
    assert s.shown <= 4 * bins and sum(s.outliers) <= 2 * bins and sum(s.outliers) >= bins
    kept = set(zip(s.steps, s.durations))
    o = alt.filter(pl.col("outlier"))
    assert (o.sort("duration_ps").row(0)[0], o["duration_ps"].min()) in kept
    assert (o.sort("duration_ps").row(-1)[0], o["duration_ps"].max()) in kept


def test_steps_of_different_programs_are_judged_against_their_own_program(shared_traces):
    """A shape sweep's steps are executions of several compiled programs: a step is an outlier
    against its own program's steps, never because its program is longer than the others
    (a user saw "8.6x the median" across programs). On the MI300X attention trace the long
    programs' steps (program ids 32 and 73) were flagged; on the GEMM sweep each program's third
    execution (with extra ops) is, and no other step."""
    from traceview.analysis.steps.anatomy import profile_anatomy

    att = profile_anatomy(traceview.load(shared_traces / "mi300x_jax_attention.xplane.pb", cache=False)).steps
    assert att.height == 24 and not att["outlier"].any()
    gemm = profile_anatomy(traceview.load(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb", cache=False)).steps
    flagged = gemm.filter(pl.col("outlier")).sort("step")
    assert flagged["step"].to_list() == [2, 5, 8, 11, 14]
    for row in flagged.iter_rows(named=True):  # slower than both other executions of its program
        same = gemm.filter((pl.col("program_id") == row["program_id"]) & ~pl.col("outlier"))
        assert same.height == 2 and row["duration_ps"] > 2 * same["duration_ps"].max()
        # the ratio says which median it is against: its program's, not the 148 µs shown for all
        ratio = row["duration_ps"] / gemm.filter(pl.col("program_id") == row["program_id"])["duration_ps"].median()
        shown = f"{ratio:.2g}x" if ratio < 10 else f"{ratio:.0f}x"
        assert row["reason"].startswith(f"{shown} its program's median;"), row["reason"]


def test_a_step_window_outside_the_steps_is_a_usage_error(shared_traces, capsys):
    """``--step-window 500:600`` on a trace of 100 steps: exit 2 and one line saying how many
    steps there are, not a report of no steps whose findings read "none" (absence of
    evidence), naming the file as diff and verify do; a window that holds steps still reads."""
    from traceview.cli import main

    path = str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    for cmd, extra in (("analyze", []), ("report", ["-o", os.devnull])):
        assert main([cmd, path, "--step-window", "500:600", "--no-cache", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"traceview: error: {path}: --step-window 500:600 holds none of the trace's 100 steps (0..99; "
                       "A:B counts from 0, B excluded, negatives from the end)"]
    assert main(["analyze", path, "--step-window", "5:8", "--brief", "--no-cache"]) == 0
    assert "12 of 400 device-steps (window 5:8)" in capsys.readouterr().out
