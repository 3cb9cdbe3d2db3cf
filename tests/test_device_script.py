"""``benchmarks/device/run.sh`` in its dry run (``DRY_RUN=1``): the device script's steps on the CPU.

The same steps as on a GPU at toy sizes (tiny preset, 64-token context, KV blocks 16 and 64
standing for 128 and 2048, 2 tokens per request): six engine profiles, traceview analyze /
verify / diff on them, and the (program, op) oracle. XProf's ``hlo_stats`` is empty on
XLA:CPU profiles, so there the oracle that must agree is the raw HLO-op XEvents.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("xprof")

REPO = Path(__file__).resolve().parents[1]
RUNS = ["tiny_bf16", "tiny_bf16_cmdbuf_off", "study_bf16_bkv128", "study_bf16_bkv2048", "study_bf16_bkv128_nodonate",
        "study_int8_bkv128"]
PAIRS = ["study_bf16_bkv2048__study_bf16_bkv128", "study_bf16_bkv128__study_bf16_bkv128_nodonate",
         "study_bf16_bkv128__study_int8_bkv128", "tiny_bf16__tiny_bf16_cmdbuf_off"]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("device")
    out, work = base / "out", base / "work"
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "TRACEVIEW_KV_BLOCK_SIZE")}
    # the script's budget under the subprocess timeout below: a loaded machine skips no step
    env.update(DRY_RUN="1", OUT=str(out), WORK=str(work), PYTHON=sys.executable, BUDGET_S="850")
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "device" / "run.sh")], env=env, capture_output=True,
                          text=True, timeout=900)
    return proc, out


def _json(path: Path):
    return json.loads(path.read_text())


@pytest.mark.slow
def test_dry_run_exits_0_with_a_record_per_step(dry_run):
    proc, out = dry_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = _json(out / "summary.json")
    assert summary["ok"] and summary["dry_run"] and summary["env"]["backend"] == "cpu"
    want = (["env", "kernel_check"] + [f"profile_{r}" for r in RUNS] + [f"{k}_{r}" for r in RUNS for k in ("analyze", "verify")]
            + [f"{k}_{p}" for p in PAIRS for k in ("diff", "verify")] + [f"oracle_{r}" for r in RUNS])
    records = [_json(f) for f in sorted((out / "steps").glob("*.json"))]
    assert sorted(r["step"] for r in records) == sorted(want)
    assert [r["index"] for r in records] == list(range(len(want)))  # NN_ prefixes in step order
    assert all(r["ok"] for r in records), [r for r in records if not r["ok"]]
    assert "| oracle_study_int8_bkv128 | yes |" in (out / "summary.md").read_text()
    assert "# device run (DRY_RUN on cpu): ok" in proc.stdout


@pytest.mark.slow
def test_dry_run_profiles_are_the_configurations_asked_for(dry_run):
    _, out = dry_run
    runs = _json(out / "summary.json")["runs"]
    assert sorted(runs) == sorted(RUNS)
    for name in RUNS:
        traces = list((out / runs[name]["profile_dir"]).glob("*.xplane.pb"))
        assert len(traces) == 1 and traces[0].stat().st_size > 0  # the trace itself is kept under OUT
        cfg = _json(out / "profiles" / name / "engine.json")["config"]
        assert cfg["kv_dtype"] == ("int8" if "int8" in name else "bfloat16")
        assert cfg["donate"] is ("nodonate" not in name)
    assert runs["study_bf16_bkv2048"]["kernel"] == "RPAd-p_16-bq_1_1-bkv_64_64"
    assert runs["study_bf16_bkv128"]["kernel"] == "RPAd-p_16-bq_1_1-bkv_16_16"
    off = _json(out / "steps" / "03_profile_tiny_bf16_cmdbuf_off.json")
    assert off["env"]["XLA_FLAGS"].endswith("--xla_gpu_enable_command_buffer=")


@pytest.mark.slow
def test_dry_run_checks_the_gpu_kernel_in_the_interpreter(dry_run):
    _, out = dry_run
    kc = _json(out / "kernel_check.json")
    assert kc["ok"] and kc["interpret"] and kc["backend"] == "cpu"
    assert {(c["kv_dtype"], c["kernel"]) for c in kc["cases"]} == {
        (dt, f"RPAd-p_16-bq_1_1-bkv_{b}_{b}") for dt in ("bfloat16", "int8", "float32") for b in (16, 64)}
    assert all(c["max_abs_err"] <= c["tolerance"] for c in kc["cases"])


@pytest.mark.slow
def test_dry_run_traceview_reads_the_kernel_block_off_each_trace(dry_run):
    _, out = dry_run
    kernels = {n: {k["kernel"] for k in _json(out / "analyze" / f"{n}.json")["kernels"]} for n in RUNS}
    assert kernels["study_bf16_bkv2048"] == {"RPAd-p_16-bq_1_1-bkv_64_64"}
    assert kernels["study_int8_bkv128"] == {"RPAd-p_16-bq_1_1-bkv_16_16"}
    pair = _json(out / "verify" / "study_bf16_bkv2048__study_bf16_bkv128.json")
    assert pair["ok"] and any(r["check"] == "kernel 'RPAd*' changed bkv 64_64 -> 16_16" and r["ok"] for r in pair["results"])
    for p in PAIRS:
        assert isinstance(_json(out / "diff" / f"{p}.json"), dict)


@pytest.mark.slow
def test_dry_run_oracle_equal(dry_run):
    _, out = dry_run
    for name in RUNS:
        o = _json(out / "oracle" / f"{name}.json")
        assert o["equal"] and o["raw_equal"], o
        # every HLO-op XEvent counted, inside the interpreted kernel too; XProf shows none on CPU
        assert o["raw_rows"] > o["traceview_rows"] > 0
        assert o["xprof_rows"] == 0 and o["xprof_equal"] is None


def _oracle_compare():
    sys.path.insert(0, str(REPO / "benchmarks" / "device"))
    from device_run import oracle_compare

    return oracle_compare


@pytest.mark.parametrize("name,rows", [("mi300x_jax_gemm_sweep.xplane.pb", 16), ("mi300x_jax_attention.xplane.pb", 24)])
def test_device_oracle_agrees_on_real_gpu_traces(shared_traces, name, rows):
    # The comparison the device run makes on a GPU profile, on the shared AMD GPU traces
    # (XProf has rows there): keys, occurrences and total times, and the device-plane XEvents.
    o = _oracle_compare()(shared_traces / name, expect_xprof=True)
    assert o["xprof_rows"] == o["traceview_rows"] == o["raw_rows"] == rows
    assert o["xprof_equal"] and o["raw_equal"] and o["equal"]


def test_device_oracle_fails_on_an_empty_xprof_table_when_one_is_expected():
    (cpu,) = (REPO / "fixtures" / "greedy_b4").glob("plugins/profile/*/*.xplane.pb")
    o = _oracle_compare()(cpu, expect_xprof=True)  # as if this XLA:CPU profile came off a GPU
    assert o["xprof_rows"] == 0 and o["xprof_equal"] is False and not o["equal"]
    assert o["raw_equal"]  # the raw XEvents still agree with traceview
