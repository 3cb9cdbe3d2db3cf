"""traceview's (program, op) table against XProf's own ``hlo_stats`` (the independent oracle).

For every real xplane with HLO ops in ``../shared/traces``: the (program_id, op) keys, the
occurrence counts and the total times must equal XProf 2.24.2's ``hlo_stats`` rows, and the
module names must equal XProf's program names. Then what traceview adds: the MI300X GEMM
sweep's ``custom-call.1`` splits into its five GEMM shapes, and a live XLA:CPU profile (which
XProf reports as empty) gives one population per batch size.

Times: XProf reports µs as a double (the ps sum / 1e6); traceview keeps integer ps. A row
matches when ``|ours_us - xprof_us| <= max(1e-6 * xprof_us, 0.001)``.
"""

from __future__ import annotations

import re

import polars as pl
import pytest

import traceview
from traceview.analysis.ops import aggregate

from oracle import raw_hlo_events, xprof_hlo_stats

# name -> XProf hlo_stats row count (xprof 2.24.2, use_saved_result=False; see traces/README)
HLO_TRACES = {
    "tpu_v6e_4chip_psum.xplane.pb": 17,
    "mi300x_jax_gemm_sweep.xplane.pb": 16,
    "mi300x_jax_attention.xplane.pb": 24,
    "mi300x_jax_conv3d.xplane.pb": 4,
}
NO_XLA_TRACE = "gpu_v100x8_tf2_bert_no_xla.xplane.pb"

# custom-call.1 in the MI300X GEMM sweep: program_id -> shape signature (workspace tuple
# element dropped), read from the HLO text in the file (XProf's hlo_op_expression agrees).
GEMM_SHAPES = {
    49: "bf16[8192,8192] <- bf16[8192,4096], bf16[4096,8192]",
    79: "bf16[16384,4096] <- bf16[16384,1024], bf16[1024,4096]",
    34: "bf16[4096,4096] <- bf16[4096,4096], bf16[4096,4096]",
    64: "bf16[2048,2048] <- bf16[2048,8192], bf16[8192,2048]",
    21: "bf16[1024,1024] <- bf16[1024,1024], bf16[1024,1024]",
}


def _time_ok(ours_ps: int, xprof_us: float) -> bool:
    return abs(ours_ps / 1e6 - xprof_us) <= max(1e-6 * abs(xprof_us), 0.001)


def _trace(shared_traces, name):
    path = shared_traces / name
    if not path.is_file():
        pytest.fail(f"missing shared trace {path}")
    return path


_loaded: dict = {}


def _ours(path) -> pl.DataFrame:
    """traceview's by_program_op for one file (loaded once per session)."""
    key = str(path)
    if key not in _loaded:
        _loaded[key] = aggregate.by_program_op(traceview.load(path).ops)
    return _loaded[key]


def _joined(path) -> pl.DataFrame:
    xp = xprof_hlo_stats(path)
    ours = _ours(path)
    return xp.join(
        ours.rename({"op_name": "hlo_op_name", "module": "our_module", "occurrences": "our_occurrences"}),
        on=["program_id", "hlo_op_name"],
        how="full",
        coalesce=True,
    )


# --------------------------------------------------------------------------- the oracle


@pytest.mark.parametrize("name,rows", [*HLO_TRACES.items(), (NO_XLA_TRACE, 0)])
def test_xprof_row_counts(shared_traces, name, rows):
    xp = xprof_hlo_stats(_trace(shared_traces, name))
    assert xp.height == rows
    assert xp.schema["program_id"] == pl.UInt64
    assert xp.schema["occurrences"] == pl.Int64
    assert xp.select("program_id", "hlo_op_name").n_unique() == xp.height, "XProf rows are keyed by (program, op)"
    if rows:
        assert xp["module"].null_count() == 0, "every XProf program has a module name"


def test_xprof_facts_on_real_traces(shared_traces):
    gemm = xprof_hlo_stats(_trace(shared_traces, "mi300x_jax_gemm_sweep.xplane.pb"))
    cc = gemm.filter(pl.col("hlo_op_name") == "custom-call.1")
    assert sorted(cc["program_id"].to_list()) == [21, 34, 49, 64, 79]
    assert set(cc["module"]) == {"jit_dot"}
    assert cc["occurrences"].to_list() == [3] * 5
    # XProf's cost model gives GEMM custom-calls no FLOPs, hence "Unknown" bound.
    assert set(cc["model_flop_rate"]) == {0.0} and set(cc["bound_by"]) == {"Unknown"}

    tpu = xprof_hlo_stats(_trace(shared_traces, "tpu_v6e_4chip_psum.xplane.pb"))
    # 64-bit TPU fingerprints survive (this one is above the Int64 range).
    assert 12190760917235803885 in set(tpu["program_id"])
    # summed over the 4 TensorCores: jit_f ran 100 times per core
    jit_f = tpu.filter(pl.col("module") == "jit_f")
    assert set(jit_f["occurrences"]) == {400}
    assert tpu.filter(pl.col("hlo_op_name") == "all-reduce")["occurrences"].to_list() == [12]


def test_xprof_tpu_times_are_device_clock_durations(shared_traces):
    """XProf times a TPU op by its ``device_duration_ps`` stat (device clock; XLA's
    ``GetDeviceEventTimespan``), not by the XEvent's ``duration_ps`` on the host-aligned
    timeline. The two differ: in this trace one ``copy-done.2`` event lasts 391.6 ms on the
    timeline but 194.1 ms on the device (the timeline has a ~197 ms jump inside it; the next
    op starts 194.1 ms later by the device clock)."""
    path = _trace(shared_traces, "tpu_v6e_4chip_psum.xplane.pb")
    raw = (
        raw_hlo_events(path)
        .filter(pl.col("device").str.starts_with("/device:TPU:") & (pl.col("line") == "XLA Ops"))
        .group_by("program_id", "hlo_op")
        .agg(
            pl.len().alias("n"),
            pl.col("device_duration_ps").sum().alias("device_ps"),
            pl.col("duration_ps").sum().alias("timeline_ps"),
        )
    )
    j = xprof_hlo_stats(path).join(raw, left_on=["program_id", "hlo_op_name"], right_on=["program_id", "hlo_op"])
    assert j.height == 17
    for r in j.iter_rows(named=True):
        assert r["n"] == r["occurrences"]
        assert _time_ok(r["device_ps"], r["total_time_us"]), r
    cd2 = j.filter(pl.col("hlo_op_name") == "copy-done.2").row(0, named=True)
    assert cd2["timeline_ps"] > 1.1 * cd2["device_ps"]


# --------------------------------------------------------------- traceview vs the oracle


@pytest.mark.parametrize("name", list(HLO_TRACES))
def test_program_op_keys_match_xprof(shared_traces, name):
    j = _joined(_trace(shared_traces, name))
    only_xprof = j.filter(pl.col("our_occurrences").is_null()).select("program_id", "hlo_op_name")
    only_ours = j.filter(pl.col("occurrences").is_null()).select("program_id", "hlo_op_name")
    assert only_xprof.height == 0 and only_ours.height == 0, (
        f"(program_id, op) keys differ from XProf's hlo_stats.\nonly in XProf:\n{only_xprof}\n"
        f"only in traceview:\n{only_ours}"
    )


@pytest.mark.parametrize("name", list(HLO_TRACES))
def test_occurrences_and_modules_match_xprof(shared_traces, name):
    j = _joined(_trace(shared_traces, name)).drop_nulls(["occurrences", "our_occurrences"])
    bad = j.filter(pl.col("occurrences") != pl.col("our_occurrences"))
    assert bad.height == 0, f"occurrences differ:\n{bad.select('program_id', 'hlo_op_name', 'occurrences', 'our_occurrences')}"
    bad = j.filter(pl.col("module") != pl.col("our_module"))
    assert bad.height == 0, f"modules differ:\n{bad.select('program_id', 'hlo_op_name', 'module', 'our_module')}"


@pytest.mark.parametrize("name", list(HLO_TRACES))
def test_total_time_matches_xprof(shared_traces, name):
    j = _joined(_trace(shared_traces, name)).drop_nulls(["total_time_us", "total_ps"])
    bad = [
        (r["program_id"], r["hlo_op_name"], r["total_time_us"], r["total_ps"] / 1e6)
        for r in j.iter_rows(named=True)
        if not _time_ok(r["total_ps"], r["total_time_us"])
    ]
    assert not bad, (
        f"{len(bad)}/{j.height} (program, op) total times differ from XProf "
        "[program_id, op, xprof_us, traceview_us]:\n" + "\n".join(map(str, bad))
    )


@pytest.mark.parametrize("name", list(HLO_TRACES))
def test_total_self_time_matches_xprof(shared_traces, name):
    j = _joined(_trace(shared_traces, name)).drop_nulls(["total_self_time_us", "self_ps"])
    bad = [
        (r["program_id"], r["hlo_op_name"], r["total_self_time_us"], r["self_ps"] / 1e6)
        for r in j.iter_rows(named=True)
        if not _time_ok(r["self_ps"], r["total_self_time_us"])
    ]
    assert not bad, (
        f"{len(bad)}/{j.height} (program, op) self times differ from XProf "
        "[program_id, op, xprof_us, traceview_us]:\n" + "\n".join(map(str, bad))
    )


# ------------------------------------------------------------ what XProf cannot show


def test_gemm_custom_call_splits_into_five_shapes(shared_traces):
    path = _trace(shared_traces, "mi300x_jax_gemm_sweep.xplane.pb")
    ops = traceview.load(path).ops
    pops = aggregate.by_shape(ops).filter(pl.col("op_name") == "custom-call.1")
    assert sorted(pops["shape"]) == sorted(GEMM_SHAPES.values())
    assert pops["occurrences"].to_list() == [3] * 5

    # each shape row is exactly XProf's row for the program compiled at that shape
    xp = xprof_hlo_stats(path).filter(pl.col("hlo_op_name") == "custom-call.1")
    by_pid = {r["program_id"]: r for r in xp.iter_rows(named=True)}
    for pid, shape in GEMM_SHAPES.items():
        row = pops.filter(pl.col("shape") == shape).row(0, named=True)
        x = by_pid[pid]
        assert row["occurrences"] == x["occurrences"]
        assert _time_ok(row["total_ps"], x["total_time_us"]), (shape, row["total_ps"], x["total_time_us"])
        # and XProf's HLO text carries the same operand shapes
        result, operands = shape.split(" <- ")
        expr = re.sub(r"\{[^}]*\}", "", x["hlo_op_expression"])
        assert f"({result}, s8[" in expr and all(o in expr for o in operands.split(", ")), expr

    # XProf's name-only grouping mixes all five; the name view shows one row with 5 shapes
    by_name = aggregate.by_name(ops).filter(pl.col("op_name") == "custom-call.1").row(0, named=True)
    assert by_name["occurrences"] == 15 and by_name["n_shapes"] == 5


def test_no_xla_trace_has_no_ops_either(shared_traces):
    path = _trace(shared_traces, NO_XLA_TRACE)
    assert xprof_hlo_stats(path).height == 0
    prof = traceview.load(path, require_ops=False)
    assert prof.ops.height == 0
    with pytest.raises(traceview.NoOpsFound):
        traceview.load(path)


def _cpu_xplane(cpu_profile_dir):
    (path,) = cpu_profile_dir.glob("plugins/profile/*/*.xplane.pb")
    return path


def test_xprof_shows_nothing_for_cpu_profile(cpu_profile_dir, cpu_profile_spec):
    path = _cpu_xplane(cpu_profile_dir)
    # the XLA:CPU op events are in the file ...
    raw = raw_hlo_events(path).filter(pl.col("hlo_module") == cpu_profile_spec["module"])
    assert raw.height > 0 and raw["program_id"].n_unique() == len(cpu_profile_spec["batches"])
    # ... and XProf's HLO table is empty all the same
    assert xprof_hlo_stats(path).height == 0


def test_cpu_profile_program_ops_match_raw_events(cpu_profile_dir, cpu_profile_spec):
    path = _cpu_xplane(cpu_profile_dir)
    module = cpu_profile_spec["module"]
    raw = (
        raw_hlo_events(path)
        .filter(pl.col("hlo_module") == module)
        .group_by("program_id", "hlo_op")
        .agg(pl.len().cast(pl.Int64).alias("occurrences"), pl.col("duration_ps").sum().alias("total_ps"))
        .rename({"hlo_op": "op_name"})
        .sort("program_id", "op_name")
    )
    ours = aggregate.by_program_op(traceview.load(cpu_profile_dir).ops.filter(pl.col("module") == module))
    ours = ours.select("program_id", "op_name", "occurrences", "total_ps").sort("program_id", "op_name")
    assert ours.equals(raw), f"traceview:\n{ours}\nraw xplane events:\n{raw}"
    assert set(ours["occurrences"]) == {cpu_profile_spec["calls"]}


def test_cpu_profile_one_population_per_batch(cpu_profile_dir, cpu_profile_spec):
    ops = traceview.load(cpu_profile_dir).ops.filter(pl.col("module") == cpu_profile_spec["module"])
    batches = set(cpu_profile_spec["batches"])
    assert ops["program_id"].n_unique() == len(batches)
    assert (ops["shape"] != "").all(), "every XLA:CPU op gets a shape from the HLO protos"

    # op names compiled in both programs (XLA may fuse differently per batch size; the
    # dot fusion is always common)
    names_per_program = ops.group_by("program_id").agg(pl.col("op_name").unique())["op_name"]
    common = set.intersection(*(set(n) for n in names_per_program))
    assert common, f"no op name common to both programs: {names_per_program.to_list()}"

    pops = aggregate.by_shape(ops)
    for name in sorted(common):
        rows = pops.filter(pl.col("op_name") == name)
        leading = sorted(int(re.match(r"\w+\[(\d+)", s).group(1)) for s in rows["shape"])
        assert leading == sorted(batches), f"{name}: populations {rows['shape'].to_list()}"
        assert set(rows["occurrences"]) == {cpu_profile_spec["calls"]}
        assert set(rows["n_programs"]) == {1}
        # the name-keyed view mixes the two batch sizes into one row
        mixed = aggregate.by_name(ops).filter(pl.col("op_name") == name).row(0, named=True)
        assert mixed["n_shapes"] == 2 and mixed["occurrences"] == 2 * cpu_profile_spec["calls"]
