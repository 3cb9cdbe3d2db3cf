"""Interpreted Pallas kernels (CPU, ``interpret=True``) read as one op row per invocation,
as a TPU trace shows the kernel's custom-call (:mod:`traceview.model.interpreted`); the
inside comes back with ``expand_kernels=True`` / ``--expand-kernels``.

On the committed engine fixture (tiny preset, batch 8, 3 decode steps) and on a profile of
two other, differently named Pallas kernels recorded here (one with a grid loop, one whose
one-step loop XLA removes), next to a named scope holding a ``fori_loop`` that is no kernel.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest
from traceview.engine_shim.config import PRESETS

import traceview
from traceview.cli import main

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
KERNEL = "RPAd-p_16-bq_1_1-bkv_128_128"
DECODE = "jit_decode_b8_bkv128"
DECODE_STEPS = 3  # fixtures/README.md: max_tokens=4, the first token from prefill
LAYERS = PRESETS["tiny"].num_layers


@pytest.fixture(scope="module")
def b8():
    return traceview.load(str(FIXTURES / "greedy_b8"), cache=False)


@pytest.fixture(scope="module")
def b8_expanded():
    return traceview.load(str(FIXTURES / "greedy_b8"), cache=False, expand_kernels=True)


def test_kernel_is_one_population_of_layers_times_steps(b8, b8_expanded):
    bs = b8.by_shape()
    k = bs.filter(pl.col("op_name") == KERNEL)
    assert k.height == 1  # one population: one row per invocation, one shape
    r = k.row(0, named=True)
    assert r["occurrences"] == LAYERS * DECODE_STEPS == 6
    assert r["op_kind"] == r["category"] == "custom-call" and r["modules"] == [DECODE]
    # the loop carry without its counters: the kernel's q / KV pages / output / scratch, batch 8
    assert r["shape"].startswith("(f32[8,1,8,64], f32[1,65,16,64], f32[1,65,16,64], f32[8,1,8,64]")
    assert "kernels/paged_attention.py:" in r["source"]  # the pallas_call site, as on TPU
    # the outermost grid loops of the expanded trace are the invocations
    loops = b8_expanded.ops.filter(pl.col("framework_op").str.ends_with(f"/{KERNEL}/while")
                                   & (pl.col("op_kind") == "while"))
    assert loops.height == r["occurrences"]
    # nothing of the kernel is left outside its rows; the op time is the same
    inside = b8.ops.filter(pl.col("framework_op").str.contains(f"{KERNEL}/while", literal=True))
    assert inside.height == 0
    assert b8.op_time_ps == b8_expanded.op_time_ps
    assert r["self_ps"] == b8_expanded.ops.filter(
        pl.col("framework_op").str.contains(KERNEL, literal=True))["self_ps"].sum() + _bare_inside(b8_expanded)
    assert b8_expanded.table.height - b8.table.height > 1000


def _bare_inside(prof) -> int:
    """Self time of the loop-state copies (no op_name) that run inside the kernel's grid loops."""
    ops = prof.ops
    loops = ops.filter(pl.col("framework_op").str.ends_with(f"/{KERNEL}/while") & (pl.col("op_kind") == "while"))
    bare = ops.filter(pl.col("framework_op") == "")
    total = 0
    for lp in loops.iter_rows(named=True):
        s, e = lp["start_ps"], lp["start_ps"] + lp["duration_ps"]
        total += bare.filter((pl.col("line") == lp["line"]) & (pl.col("start_ps") >= s)
                             & (pl.col("start_ps") + pl.col("duration_ps") <= e))["self_ps"].sum()
    return total


def test_top_rows_hold_no_interpreter_scalar_op(b8, b8_expanded):
    def scalar(df):
        return df.filter(pl.col("shape").str.contains(r"^(s32|pred)\[\] <-")
                         | pl.col("framework_op").str.contains(f"{KERNEL}/while", literal=True))

    assert scalar(b8.by_shape().head(15)).height == 0
    assert scalar(b8.by_shape()).filter(pl.col("framework_op").str.contains(KERNEL, literal=True)).height == 0
    # what the collapse removes: the interpreter's scalar bookkeeping, many populations
    inside = scalar(b8_expanded.by_shape()).filter(pl.col("framework_op").str.contains(KERNEL, literal=True))
    assert inside.height >= 5 and inside["occurrences"].sum() > 500


def test_occurrence_check_counts_invocations_per_step(b8):
    oc = b8.occurrence_checks(steps=DECODE_STEPS)
    r = oc.filter(pl.col("op_name") == KERNEL).row(0, named=True)
    assert r["occurrences"] == 6 and r["program_runs"] == DECODE_STEPS and r["per_execution"] == LAYERS
    assert r["steps_ok"] is True


def test_kernel_flops_are_the_interpreted_ops_flops(b8, b8_expanded):
    col = b8.table.collapse().filter(pl.col("op_name") == KERNEL)
    ex = b8_expanded.table.collapse().filter(pl.col("framework_op").str.contains(KERNEL, literal=True))
    total = float((ex["flops"].fill_null(0) * ex["count"]).sum())
    assert total > 0
    per = float((col["flops"] * col["count"]).sum()) / int(col["count"].sum())
    assert per == pytest.approx(total / 6)
    assert col["bytes_accessed"].null_count() == col.height and set(col["cost_source"]) == {"derived"}


def test_kernels_table_reads_the_configuration(b8):
    k = b8.kernels().row(0, named=True)
    assert k["kernel"] == KERNEL and k["invocations"] == k["ops"] == 6 and k["config"] == "p=16, bq=1_1, bkv=128_128"


def test_named_scope_with_ops_outside_its_loop_is_no_kernel():
    a = traceview.load(str(FIXTURES / "topp_b4"), cache=False)
    b = traceview.load(str(FIXTURES / "topp_b4"), cache=False, expand_kernels=True)
    pick = pl.col("framework_op").str.contains("topp_binary_search", literal=True)
    assert a.ops.filter(pick).height == b.ops.filter(pick).height > 100
    assert a.ops.filter(pl.col("op_name") == "topp_binary_search").height == 0


def test_cli_collapses_and_expand_kernels_shows_the_inside(tmp_path, capsys):
    out, out_x = tmp_path / "a.json", tmp_path / "b.json"
    path = str(FIXTURES / "greedy_b8")
    assert main(["analyze", path, "--steps", "3", "--format", "json", "-o", str(out), "--no-cache", "--all-rows"]) == 0
    assert main(["analyze", path, "--steps", "3", "--format", "json", "-o", str(out_x), "--no-cache",
                 "--expand-kernels", "--all-rows"]) == 0
    a, b = json.loads(out.read_text()), json.loads(out_x.read_text())
    ka = [r for r in a["ops"] if r["op_name"] == KERNEL]
    assert len(ka) == 1 and ka[0]["occurrences"] == 6
    assert not [r for r in b["ops"] if r["op_name"] == KERNEL]
    assert [r for r in b["ops"] if f"{KERNEL}/while/body" in (r.get("framework_op") or "")]
    checks = {r["op_name"]: r for r in a["occurrence_checks"]}
    assert checks[KERNEL]["steps_ok"] is True
    check = ["-c", "op matching ^RPAd- count == 6", "-c", "op matching ^RPAd- count == 2 per execution"]
    assert main(["verify", path, *check, "--no-cache"]) == 0
    assert main(["verify", path, *check, "--no-cache", "--expand-kernels"]) == 1
    capsys.readouterr()


# -- a second, different pair of Pallas kernels, recorded here ---------------------------

_SCRIPT = textwrap.dedent('''
    import sys, jax, jax.numpy as jnp
    from jax.experimental import pallas as pl

    def scale_add(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0 + 1.0

    def mm(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...])

    def not_a_kernel(x):
        with jax.named_scope("not_a_kernel"):
            m = jnp.max(x)
            return jax.lax.fori_loop(0, 4, lambda i, v: v * 0.5 + m, x)

    @jax.jit
    def f(x, y):
        a = pl.pallas_call(scale_add, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True,
                           grid=(2,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                           out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)), name="scale_add")(x)
        b = pl.pallas_call(mm, out_shape=jax.ShapeDtypeStruct((16, 128), x.dtype), interpret=True,
                           name="tiny_mm",
                           cost_estimate=pl.CostEstimate(flops=12345678, bytes_accessed=7654321,
                                                         transcendentals=0))(a, y)
        return not_a_kernel(jnp.tanh(b) + a)

    x = jnp.ones((16, 128)); y = jnp.ones((128, 128))
    f(x, y).block_until_ready()
    jax.profiler.start_trace(sys.argv[1])
    for _ in range(3):
        f(x, y).block_until_ready()
    jax.profiler.stop_trace()
''')


@pytest.fixture(scope="module")
def two_kernels(tmp_path_factory):
    d = tmp_path_factory.mktemp("two_kernels")
    script = d / "record.py"
    script.write_text(_SCRIPT)
    subprocess.run([sys.executable, str(script), str(d / "prof")], check=True, timeout=300,
                   capture_output=True, env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
    return (traceview.load(str(d / "prof"), cache=False),
            traceview.load(str(d / "prof"), cache=False, expand_kernels=True))


def test_any_named_pallas_kernel_is_one_row_per_invocation(two_kernels):
    prof, expanded = two_kernels
    bs = prof.by_shape()
    rows = {r["op_name"]: r for r in bs.filter(pl.col("op_kind") == "custom-call").iter_rows(named=True)}
    assert set(rows) == {"scale_add", "tiny_mm"}
    # a grid of 2: the loop carries the input and output blocks' arrays, the counters dropped
    assert rows["scale_add"]["occurrences"] == 3 and rows["scale_add"]["shape"] == "(f32[16,128], f32[16,128])"
    assert rows["scale_add"]["framework_op"] == "jit(f)/scale_add"
    # a one-step grid: XLA removed the loop, the kernel's one dot is the invocation
    assert rows["tiny_mm"]["occurrences"] == 3
    assert rows["tiny_mm"]["shape"] == "f32[16,128] <- f32[16,128], f32[128,128]"
    assert prof.op_time_ps == expanded.op_time_ps
    ex = expanded.by_shape()
    assert ex.filter(pl.col("framework_op").str.starts_with("jit(f)/scale_add/while")).height >= 3
    assert ex.filter(pl.col("op_kind") == "custom-call").height == 0


def test_cost_estimate_does_not_reach_a_cpu_trace(two_kernels):
    prof, _ = two_kernels
    col = prof.table.collapse().filter(pl.col("op_name") == "tiny_mm")
    # the interpreter drops pallas_call's CostEstimate: the FLOPs are the dot's, 2*16*128*128
    assert set(col["flops"].to_list()) == {2 * 16 * 128 * 128}
    assert col["bytes_accessed"].null_count() == col.height
    assert not prof.ops.filter(pl.col("hlo_text").str.contains("12345678", literal=True)).height


def test_named_scope_around_a_loop_and_other_ops_stays_expanded(two_kernels):
    prof, expanded = two_kernels
    pick = pl.col("framework_op").str.contains("not_a_kernel", literal=True)
    assert prof.ops.filter(pick).height == expanded.ops.filter(pick).height > 0
    assert prof.ops.filter(pl.col("op_name") == "not_a_kernel").height == 0


def test_kernel_invocations_leave_the_prologue_ops_out():
    """On the four-device tensor-parallel fixture the kernel ran 16 times (2 layers x 2
    decode steps x 4 devices): the kernels table says 16 folded or expanded, as the folded op
    table's kernel rows and diff's root ops do, not 24 with the 8 prologue broadcasts beside
    the grid loop."""
    import polars as pl

    from traceview.analysis.compare.populations import kernel_table
    from traceview.analysis.ops.kernels import kernels

    fx = Path(__file__).resolve().parents[1] / "fixtures" / "tp_decode"
    folded = traceview.load(fx, cache=False)
    name = kernels(folded.table)["kernel"][0]
    rows = folded.table.collapse().filter(pl.col("op_name") == name)
    assert int(rows["count"].sum()) == 16
    for prof in (folded, traceview.load(fx, cache=False, expand_kernels=True)):
        assert kernels(prof.table)["invocations"].to_list() == [16]
    assert kernel_table(folded)["invocations"].to_list() == [16]
