"""Virtual CPU devices, communication overlap and stragglers on the recorded 8-device fixtures
(``fixtures/collectives_8dev``, ``fixtures/straggler_8dev``: ``fixtures/record_multidevice.py``)
and the shared 4-chip v6e trace."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import traceview
from traceview.analysis.communication.overlap import overlap
from traceview.analysis.communication.stragglers import stragglers
from traceview.analysis.compare.verify_grammar import parse_check
from traceview.cli import main
from traceview.read.xplane.wire import _full_line, read_xspace_bytes

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def _xplane(name: str) -> Path:
    return next((FIX / name).rglob("*.xplane.pb"))


def _expected(name: str) -> dict:
    return json.loads((FIX / name / "expected.json").read_text())


def _raw_ops(path: Path) -> pl.DataFrame:
    """Oracle: the op events of the /host:CPU plane decoded with protobuf alone (no traceview
    model code): op name (metadata name), device_ordinal stat, start and end (ps)."""
    space = read_xspace_bytes(path.read_bytes(), str(path))
    rows = []
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        sn = {k: v.name for k, v in plane.stat_metadata.items()}
        for raw in plane.lines:
            line = _full_line(raw, str(path))
            for ev in line.events:
                st = {sn.get(s.metadata_id): s for s in ev.stats}
                if "hlo_op" not in st or "device_ordinal" not in st:
                    continue
                name = plane.event_metadata[ev.metadata_id].name
                if name.startswith("end: "):
                    continue
                t0 = line.timestamp_ns * 1000 + ev.offset_ps
                rows.append((name, int(st["device_ordinal"].int64_value), t0, t0 + ev.duration_ps))
    return pl.DataFrame(rows, schema={"name": pl.Utf8, "ordinal": pl.Int64, "start": pl.Int64, "end": pl.Int64},
                        orient="row")


@pytest.fixture(scope="module")
def coll():
    return traceview.load(FIX / "collectives_8dev", cache=False)


@pytest.fixture(scope="module")
def strag():
    return traceview.load(FIX / "straggler_8dev", cache=False)


@pytest.fixture(scope="module")
def coll_overlap(coll):
    return coll.overlap()


def test_each_virtual_device_is_a_device(coll):
    exp = _expected("collectives_8dev")
    raw = _raw_ops(_xplane("collectives_8dev"))
    want = raw.group_by("ordinal").len().sort("ordinal")
    got = coll.ops.group_by("device").len().sort("device")
    assert got["device"].to_list() == [f"/device:CPU:{i}" for i in range(exp["devices"])]
    assert got["len"].to_list() == want["len"].to_list()  # every event on the device its stat names
    runs = coll.module_runs.filter(pl.col("module") == "jit_body").group_by("device").len()
    assert runs["len"].to_list() == [exp["steps"]] * exp["devices"]
    # each collective ran once per step on every device
    for c in exp["collectives_per_step"]:
        n = coll.ops.filter(pl.col("op_kind") == c["hlo_kind"]).height
        assert n == exp["steps"] * exp["devices"], c["hlo_kind"]
    anat = coll.steps()
    coll_share = anat.families.filter(pl.col("family") == "collectives")["share"][0]
    assert 0 < coll_share < 1.0  # per device, not the ops of 8 devices summed as one
    assert anat.steps.select("device").n_unique() == exp["devices"]


def test_single_device_cpu_trace_keeps_its_plane():
    prof = traceview.load(FIX / "greedy_b4", cache=False)
    assert prof.ops["device"].unique().to_list() == ["/host:CPU"]


def test_overlap_identities_on_the_fixture(coll, coll_overlap):
    ov = coll_overlap
    exp = _expected("collectives_8dev")
    o = ov.ops
    assert o.height == exp["steps"] * exp["devices"] * len(exp["collectives_per_step"])
    assert (o["hidden_ps"] + o["exposed_ps"] == o["in_flight_ps"]).all()
    # XLA:CPU collectives are synchronous: wholly exposed
    assert o["sync"].all() and (o["hidden_ps"] == 0).all() and ov.summary["synchronous"]
    st = ov.steps
    assert st.height == exp["steps"] * exp["devices"]
    total = st["compute_ps"] + st["exposed_ps"] + st["host_ps"] + st["idle_ps"]
    assert ((total - st["step_ps"]).abs() <= 0.01 * st["step_ps"]).all()
    assert (st["idle_ps"] >= 0).all()
    # oracle: a device runs its collectives one after another, so its exposed time in a step is
    # the sum of its collective events' durations inside the step window (from the raw XPlane)
    raw = _raw_ops(_xplane("collectives_8dev"))
    kinds = {c["primitive"] for c in exp["collectives_per_step"]}
    is_coll = pl.col("name").str.extract(r"^([a-z_\-]+)").str.replace_all("-", "_").is_in(
        ["psum", "all_gather", "reduce_scatter", "ppermute", "all_to_all"])
    assert kinds == {"psum", "all_gather", "psum_scatter", "ppermute", "all_to_all"}
    rc = raw.filter(is_coll)
    assert rc.height == o.height
    for r in st.iter_rows(named=True):
        dev = int(r["device"].rsplit(":", 1)[1])
        inside = rc.filter((pl.col("ordinal") == dev) & (pl.col("start") >= r["start_ps"])
                           & (pl.col("end") <= r["start_ps"] + r["step_ps"]))
        assert int((inside["end"] - inside["start"]).sum()) == r["exposed_ps"]


def test_participants_match_the_program(coll):
    st = coll.stragglers()
    exp = _expected("collectives_8dev")
    by_kind = dict(st.collectives.group_by("op_kind").agg(pl.col("participants").unique()).iter_rows())
    for c in exp["collectives_per_step"]:
        n = len(c["source_target_pairs"]) if "source_target_pairs" in c else c["group_size"]
        assert by_kind[c["hlo_kind"]] == [n], c
    assert st.collectives.height == exp["steps"] * len(exp["collectives_per_step"])


def test_overlap_on_v6e_async_host_copies(shared_traces):
    prof = traceview.load(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    ov = prof.overlap()
    o = ov.ops
    copies = o.filter(pl.col("op_kind") == "copy-start")
    n_start = prof.ops.filter(pl.col("op_kind") == "copy-start").height
    assert copies.height == n_start == prof.ops.filter(pl.col("op_kind") == "copy-done").height
    assert (~copies["sync"]).all() and set(copies["kind"].to_list()) == {"host transfer"}  # S(5) shapes
    assert (o["hidden_ps"] + o["exposed_ps"] == o["in_flight_ps"]).all()
    assert (copies["wait_at_done_ps"] <= copies["exposed_ps"]).all()
    st = ov.steps
    total = st["compute_ps"] + st["exposed_ps"] + st["host_ps"] + st["idle_ps"]
    assert ((total - st["step_ps"]).abs() <= 0.01 * st["step_ps"]).all()
    # TPU ops run one at a time on 'XLA Ops': compute in a step is the fusions' time there
    f = prof.ops.filter(pl.col("op_kind") == "fusion")
    r = st.row(0, named=True)
    inside = f.filter((pl.col("device") == r["device"]) & (pl.col("start_ps") >= r["start_ps"])
                      & (pl.col("start_ps") < r["start_ps"] + r["step_ps"]))
    copy_ev = prof.ops.filter(pl.col("op_kind").is_in(["copy-start", "copy-done"]) & (pl.col("device") == r["device"])
                              & (pl.col("start_ps") >= r["start_ps"]) & (pl.col("start_ps") < r["start_ps"] + r["step_ps"]))
    assert r["compute_ps"] == int(inside["duration_ps"].sum())
    assert copy_ev.height and r["host_ps"] > 0.9 * r["step_ps"]  # a host-offload stress test


def test_straggler_named_with_its_lead_and_the_waits(strag):
    exp = _expected("straggler_8dev")
    st = strag.stragglers()
    s = st.summary
    who = f"/device:CPU:{exp['straggler_device']}"
    assert s["straggler"] == who and s["steps_slowest"] == exp["steps"]
    assert s["lead_median"] > 1.0  # its busy time over twice the median device's
    assert s["attributed_share"] > 0.9
    # oracle from the raw XPlane: at each psum execution, every other device's wait is the
    # straggler's arrival minus its own
    raw = _raw_ops(_xplane("straggler_8dev")).filter(pl.col("name").str.starts_with("psum"))
    raw = raw.sort("start").with_columns(pl.int_range(pl.len()).over("ordinal").alias("k"))
    for k, g in raw.group_by("k"):
        last = g.sort("start").row(-1, named=True)
        assert last["ordinal"] == exp["straggler_device"]
        row = st.collectives.filter(pl.col("execution") == k[0]).row(0, named=True)
        assert row["last_device"] == who
        assert row["wait_ps"] == int((last["start"] - g["start"]).sum())
    others = st.devices.filter(pl.col("device") != who)
    assert (others["caused_wait_ps"] == 0).all() and (others["wait_ps"] > 0).all()


def test_clock_offset_between_hosts_is_estimated_and_applied(strag):
    shift = 7_654_321_000  # ps: host b's clock runs ahead by 7.65 ms
    a = strag.ops.select("host", "device", "module", "op_name", "op_kind", "shape", "hlo_text",
                                      "start_ps", "duration_ps")
    b = a.with_columns(pl.lit("b").alias("host"), pl.col("device").str.replace("CPU", "GPU"),
                       pl.col("start_ps") + shift)
    both = pl.concat([a.with_columns(pl.lit("a").alias("host")), b])
    ov = overlap(both, None)
    st = stragglers(both, ov.steps)
    assert st.clock_offsets == {"a": 0, "b": -shift}
    assert "clock offsets applied" in st.notes[0]
    # aligned, b is a's twin: each execution's skew is the one host's own (unaligned it would
    # be the shift plus that), and the straggler's two copies arrive last together
    one = strag.stragglers().collectives
    assert st.collectives["skew_ps"].to_list() == one["skew_ps"].to_list()
    assert st.summary["straggler"] in ("a:/device:CPU:5", "b:/device:GPU:5")
    assert set(st.collectives["participants"].to_list()) == {16}


def test_cli_sections_json_and_verify(capsys):
    run = str(FIX / "straggler_8dev")
    assert main(["analyze", run, "--no-cache", "--format", "json", "-o", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stragglers"]["summary"]["straggler"] == "/device:CPU:5"
    assert out["overlap"]["summary"]["n_devices"] == 8 and out["overlap"]["summary"]["synchronous"] is True
    assert main(["analyze", run, "--no-cache", "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert "stragglers and skew" in text and "straggler /device:CPU:5: slowest in 3 of 3" in text
    assert "communication overlap" in text
    rc = main(["verify", run, "-c", "straggler lead < 50%", "-c", "exposed communication share < 100%"])
    text = capsys.readouterr().out
    assert rc == 1 and "FAIL  straggler lead < 50%" in text and "PASS  exposed communication share" in text
    assert parse_check("exposed communication share < 5%").args == {"cmp": "<", "bound": 0.05}
    single = traceview.verify(FIX / "greedy_b4", ["exposed communication share < 1%", "straggler lead < 50%"])
    # no collective on one device: a measured 0% exposed over the 3 steps passes; the straggler
    # lead has nothing to compare, so it is unknown (never a pass, and not a failure either)
    assert [r.status for r in single.results] == ["pass", "unknown"] and not single.ok
    assert single.results[0].message == ("exposed communication is 0.0% of step time: no collective or async copy in "
                                         "the trace (3 step(s), 2.893 ms), bound < 1%")
    assert single.results[1].message == ("straggler lead unknown: no collective execution was matched across two or "
                                         "more devices")


def test_html_report_has_the_communication_section(strag, tmp_path):
    out = strag.report(tmp_path / "r.html")
    html = out.read_text()
    sec = html[html.index('<section id="overlap">'):]
    sec = sec[:sec.index("</section>")]
    assert sec.count("<svg") == 2  # the per-step stacked bar and the per-device skew strip
    assert "Straggler <code>/device:CPU:5</code>: slowest in 3 of 3 step(s)" in sec
    assert "exposed communication" in sec and "/device:CPU:7" in sec


@pytest.fixture(scope="module")
def tp():
    return traceview.load(FIX / "tp_decode", cache=False)


def test_tensor_parallel_decode_fixture(tp):
    exp = _expected("tp_decode")
    assert sorted(tp.ops["device"].unique().to_list()) == [f"/device:CPU:{i}" for i in range(exp["devices"])]
    dec = tp.ops.filter(pl.col("module").str.starts_with(exp["decode_program_prefix"]))
    (c,) = exp["collectives_per_decode_step"]
    ar = dec.filter(pl.col("op_kind") == c["hlo_kind"])
    assert set(ar["shape"].str.extract(r"^(\S+)").to_list()) == {c["operand"]}
    per_dev = ar.group_by("device").len()["len"].to_list()
    assert per_dev == [c["count"] * exp["decode_steps"]] * exp["devices"]
    # the kernel ran on each device's query heads: 8 heads / 4 devices = 2 (q f32[4,1,2,64] per device)
    kern = tp.kernels()
    assert kern.height == 1 and kern["shape"][0].startswith("(f32[4,1,2,64],")
    st = tp.stragglers()
    parts = st.collectives.filter(pl.col("module").str.starts_with(exp["decode_program_prefix"]))["participants"]
    assert parts.unique().to_list() == [c["group_size"]]
    ov = tp.overlap()
    s = ov.steps
    assert ((s["compute_ps"] + s["exposed_ps"] + s["host_ps"] + s["idle_ps"] - s["step_ps"]).abs()
            <= 0.01 * s["step_ps"]).all()


def test_step_row_names_the_device_its_attributed_wait_belongs_to(tp, tmp_path):
    """Each step's ``last_to_arrive`` is the device whose late arrivals cost the others the most
    wait, and ``attributed_wait_ps`` is that device's own ``caused_wait_ps`` (it used to be the
    most-last-arrivals device next to another device's wait)."""
    st = tp.stragglers()
    dev = st.devices
    for r in st.steps.iter_rows(named=True):
        own = dev.filter((pl.col("step") == r["step"]) & (pl.col("device") == r["last_to_arrive"]))
        assert own["caused_wait_ps"].item() == r["attributed_wait_ps"] == dev.filter(
            pl.col("step") == r["step"])["caused_wait_ps"].max()
    # read off the fixture: step 0 CPU:0 arrived last twice (2.277 ms caused), CPU:3 once
    # (2.765 ms); step 1 CPU:2 twice (1.166 ms), CPU:3 once (4.193 ms)
    assert st.steps.select("step", "last_to_arrive", "attributed_wait_ps").rows() == [
        (0, "/device:CPU:3", 2_765_183_000), (1, "/device:CPU:3", 4_192_533_000)]
    s0 = dev.filter(pl.col("step") == 0).sort("device")
    assert s0["last_arrivals"].to_list() == [2, 0, 1, 1]
    assert s0["caused_wait_ps"].to_list() == [2_277_369_000, 0, 654_957_000, 2_765_183_000]
    # the summary's device and figure agree with its own rows
    s = st.summary
    assert s["straggler"] == "/device:CPU:0" and s["attributed_wait_ps"] == 2_277_369_000 == int(
        dev.filter(pl.col("device") == "/device:CPU:0")["caused_wait_ps"].sum())
    from rich.console import Console

    from traceview.render.overlap_view import render_stragglers

    con = Console(record=True, width=200)
    render_stragglers(con, st, top=10)
    rows = [ln for ln in con.export_text().splitlines() if ln.startswith("│")]
    assert "/device:CPU:3" in rows[0] and "2.765 ms" in rows[0] and "/device:CPU:0       │" not in rows[0]
    assert "/device:CPU:3" in rows[1] and "4.193 ms" in rows[1]
    html = tp.report(tmp_path / "r.html").read_text()
    assert "<td><code>/device:CPU:3</code></td><td class=\"r\">2.765 ms</td>" in html


def test_engine_tensor_parallel_matches_one_device(tmp_path):
    """Greedy tokens of the tiny engine split over 2 virtual CPU devices equal the 1-device ones."""
    import os
    import subprocess
    import sys

    code = (
        "from traceview.engine_shim.engine import LLM\n"
        "from traceview.engine_shim.bench import sampling_params\n"
        "sp = sampling_params('greedy', 3)\n"
        "kw = dict(max_num_seqs=2, max_model_len=64, min_request_bucket=2, precompile=False, seed=0)\n"
        "a = [o.outputs[0].token_ids for o in LLM('tiny', **kw).generate(['Hello, my name is'], sp)]\n"
        "llm = LLM('tiny', tensor_parallel=2, **kw)\n"
        "b = [o.outputs[0].token_ids for o in llm.generate(['Hello, my name is'], sp)]\n"
        "print(a == b, a, b, tuple(llm.params['layers'][0]['w_down'].sharding.spec))\n")
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("True "), out.stdout
    assert out.stdout.rstrip().endswith("('tp', None)")  # w_down split by rows


def test_engine_tensor_parallel_needs_the_devices(capsys):
    from traceview.engine_shim.engine import LLM

    with pytest.raises(ValueError, match="tensor_parallel=2 needs 2 devices, 1 available"):
        LLM("tiny", max_num_seqs=2, max_model_len=64, precompile=False, tensor_parallel=2)
    assert main(["engine", "bench", "--tensor-parallel", "2", "--max-tokens", "2"]) == 2
    assert "needs 2 devices" in capsys.readouterr().err


def test_trace_json_splits_virtual_devices_too():
    """The trace.json export carries ``args.device_ordinal`` as well: 8 devices, 3 executions
    each; without HLO opcodes no collective is matched, so no straggler is named."""
    exp = _expected("straggler_8dev")
    prof = traceview.load(next((FIX / "straggler_8dev").rglob("*.trace.json.gz")), cache=False)
    raw = _raw_ops(_xplane("straggler_8dev"))
    got = prof.ops.group_by("device").len().sort("device")
    assert got["device"].to_list() == [f"/device:CPU:{i}" for i in range(exp["devices"])]
    assert got["len"].to_list() == raw.group_by("ordinal").len().sort("ordinal")["len"].to_list()
    assert prof.module_runs.group_by("device").len()["len"].to_list() == [exp["steps"]] * exp["devices"]
    st = prof.stragglers()
    assert "straggler" not in st.summary and "no collective" in st.notes[0]
    assert prof.overlap().ops.height == 0  # the JSON names no HLO opcode: no collective is recognised


def test_vllm_tpu_collectives_and_generic_async_ops(shared_traces):
    """The vLLM trace's all-reduce / all-gather are synchronous collectives over its 2 devices;
    its async ``slice-start`` (a wrapped slice) is device work, not communication."""
    prof = traceview.load(shared_traces / "vllm_tpu_qwen")
    ov = prof.overlap()
    o = ov.ops
    n_coll = prof.ops.filter(pl.col("op_kind").is_in(["all-reduce", "all-gather"])).height
    coll = o.filter(pl.col("kind") == "collective")
    assert coll.height == n_coll and coll["sync"].all()
    assert set(o.filter(pl.col("op_name").str.starts_with("slice-start"))["kind"].to_list()) == {"async op"}
    assert (o["hidden_ps"] + o["exposed_ps"] == o["in_flight_ps"]).all()
    s = ov.steps
    assert ((s["compute_ps"] + s["exposed_ps"] + s["host_ps"] + s["idle_ps"] - s["step_ps"]).abs()
            <= 0.01 * s["step_ps"]).all()
    # one device runs its collectives one after another: exposed = their summed durations in the step
    for r in s.iter_rows(named=True):
        c = prof.ops.filter(pl.col("op_kind").is_in(["all-reduce", "all-gather"]) & (pl.col("device") == r["device"])
                            & (pl.col("start_ps") >= r["start_ps"]) & (pl.col("start_ps") < r["start_ps"] + r["step_ps"]))
        assert r["exposed_ps"] == int(c["duration_ps"].sum())
    st = prof.stragglers()
    assert st.collectives["participants"].unique().to_list() == [2]


def test_a_three_way_tie_is_not_called_slowest_most_often(capsys):
    """collectives_8dev: three devices are each slowest in one of the three steps; the summary
    says so and names the one with the most attributed waits, not a 'slowest most often'."""
    from pathlib import Path

    from traceview.cli import main

    fx = Path(__file__).resolve().parents[1] / "fixtures" / "collectives_8dev"
    st = traceview.load(fx, stale_after_s=None).analyze().stragglers
    assert st.summary["tied_devices"] == 3 and st.summary["steps_slowest"] == 1
    assert main(["analyze", str(fx), "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert f"no device slowest most often (3 tied); most waits attributed to {st.summary['straggler']}:" in out
    assert "slowest most often /device" not in out
