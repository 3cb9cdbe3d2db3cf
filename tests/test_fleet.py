"""Fleet mode: per-host partial aggregates merged on the client give the single-process op
table (sums, counts, extremes exactly; p50/p90 within the sketch's bound), device summary,
step rows and stragglers, in this process and in a process pool; the CLI's --fleet."""

from __future__ import annotations

import multiprocessing
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from traceview.analysis import fleet
from traceview.analysis.ops import aggregate
from traceview.analysis.report import communication_sections
from traceview.analysis.steps.anatomy import profile_anatomy
from traceview.api import load

KEYS = ["op_name", "shape", "module"]
EXACT = ["op_kind", "category", "occurrences", "executions", "kernels_per_execution", "total_ps", "self_ps",
         "mean_ps", "min_ps", "max_ps", "share", "modules", "n_programs", "devices", "source", "framework_op",
         "programs"]


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("TRACEVIEW_NO_CACHE", "1")


def _run(root, files: dict) -> object:
    run = root / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    for name, src in files.items():
        shutil.copyfile(src, run / name)
    return root


@pytest.fixture(scope="module")
def mixed(shared_traces, tmp_path_factory):
    """Three hosts: two TPU v6e hosts and one MI300X host."""
    return _run(tmp_path_factory.mktemp("mixed"), {
        "tpu-a.xplane.pb": shared_traces / "tpu_v6e_4chip_psum.xplane.pb",
        "tpu-b.xplane.pb": shared_traces / "tpu_v6e_4chip_psum.xplane.pb",
        "gpu-c.xplane.pb": shared_traces / "mi300x_jax_gemm_sweep.xplane.pb"})


@pytest.fixture(scope="module")
def pod(tmp_path_factory):
    """Two hosts of the 8-device CPU straggler recording (device 5 is slow)."""
    src = next((Path(__file__).resolve().parents[1] / "fixtures" / "straggler_8dev").rglob("*.xplane.pb"))
    return _run(tmp_path_factory.mktemp("pod"), {"host-a.xplane.pb": src, "host-b.xplane.pb": src})


@pytest.fixture(scope="module")
def tpu2(shared_traces, tmp_path_factory):
    """Two TPU v6e hosts (each device's steps numerous enough to be judged alone)."""
    return _run(tmp_path_factory.mktemp("tpu2"), {
        "tpu-a.xplane.pb": shared_traces / "tpu_v6e_4chip_psum.xplane.pb",
        "tpu-b.xplane.pb": shared_traces / "tpu_v6e_4chip_psum.xplane.pb"})


def _check_quantiles(single: pl.DataFrame, merged: pl.DataFrame, alpha: float) -> float:
    j = single.select(*KEYS, "p50_ps", "p90_ps", "cv").join(
        merged.select(*KEYS, "p50_ps", "p90_ps", "cv"), on=KEYS, nulls_equal=True)
    assert j.height == single.height
    worst = 0.0
    for c in ("p50_ps", "p90_ps"):
        a, b = j[c].to_numpy(), j[c + "_right"].to_numpy()
        rel = np.abs(a - b) / np.abs(a)
        worst = max(worst, float(rel.max()))
        assert (rel <= alpha * (1 + 1e-9)).all(), c
    assert np.allclose(j["cv"].to_numpy(), j["cv_right"].to_numpy(), rtol=1e-9, equal_nan=True)
    return worst


def test_op_table_and_devices_equal_single_process(mixed):
    prof = load(mixed)
    single = aggregate.by_shape(prof.table, prof.module_runs)
    f = fleet.load_fleet(mixed)
    assert f.hosts == ["gpu-c", "tpu-a", "tpu-b"]
    assert f.by_shape.height == single.height == 33
    assert_frame_equal(single.select(*KEYS, *EXACT), f.by_shape.select(*KEYS, *EXACT))
    assert f.op_events == prof.op_events and f.op_time_ps == prof.op_time_ps
    assert_frame_equal(prof.device_summary(), f.devices)
    assert f.by_shape["regimes"].null_count() == f.by_shape.height  # not computed in fleet mode
    # the TPU copy-done populations have 400 events per host: over EXACT_MAX, from the sketch
    assert f.quantiles["exact"] + f.quantiles["sketch"] == 33 and f.quantiles["sketch"] > 0
    worst = _check_quantiles(single, f.by_shape, fleet.ALPHA)
    assert worst > 0  # the sketch did answer some quantile, within its bound
    assert "within 1.0%" in f.quantiles["bound"]
    # the GPU host's steps are of another program: said, not guessed
    assert f.steps is None and any("not computed in fleet mode" in n for n in f.notes)


def test_quantiles_exact_when_every_value_travels(mixed, monkeypatch):
    monkeypatch.setattr(fleet, "EXACT_MAX", 1 << 30)
    prof = load(mixed)
    single = aggregate.by_shape(prof.table, prof.module_runs)
    f = fleet.load_fleet(mixed)
    assert f.quantiles["sketch"] == 0
    assert_frame_equal(single.select(*KEYS, "p50_ps", "p90_ps"), f.by_shape.select(*KEYS, "p50_ps", "p90_ps"))


def test_sketch_bound_on_a_real_population(shared_traces):
    """Every quantile of the v6e trace's per-occurrence durations, read off the sketch, is
    within α of numpy's (linear) quantile; at a coarser α too."""
    from traceview.read.batch import ReadTask

    hp = fleet.host_partial(ReadTask(path=str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb"), kind="xplane",
                                     host="h"))
    prof = load(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")
    dur = prof.table.events["duration_ps"].to_numpy().astype(np.float64)
    assert int(hp.sketch["n"].sum()) == len(dur) == 6013
    for alpha in (0.01, 0.1):
        b = fleet.buckets(dur, alpha)
        assert (np.abs(fleet.bucket_value(b, alpha) - dur) <= alpha * dur * (1 + 1e-9)).all()


def test_steps_and_stragglers_equal_single_process(pod):
    prof = load(pod)
    anat = profile_anatomy(prof)
    ov, st = communication_sections(prof)
    f = fleet.load_fleet(pod)
    assert f.steps is not None and anat.steps.height == f.steps.steps.height > 0
    cols = [c for c in anat.steps.columns if c != "reason"]
    order = ["host", "device", "step"]
    assert_frame_equal(anat.steps.select(cols).sort(order), f.steps.steps.select(cols).sort(order))
    assert f.steps.coverage == anat.coverage and f.steps.coverage_all == anat.coverage_all
    assert_frame_equal(anat.families.drop("n_populations"), f.steps.families.drop("n_populations"))
    assert_frame_equal(ov.steps.sort(order), f.overlap_steps.sort(order))
    assert st is not None and f.stragglers is not None
    assert f.stragglers.summary == st.summary and f.stragglers.summary["straggler"].endswith("/device:CPU:5")
    assert f.stragglers.clock_offsets == st.clock_offsets
    assert_frame_equal(st.collectives, f.stragglers.collectives)


def test_process_pool_equals_in_process(pod):
    """The partials cross a process boundary (pickled) unchanged. A Dask cluster takes the
    same path (:func:`traceview.read.batch.read_many`, tested on Dask in test_parallel.py);
    ``benchmarks/fleet.py`` compares its op table with the single process's."""
    here = fleet.load_fleet(pod)
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as ex:
        pooled = fleet.load_fleet(pod, executor=ex)
    assert_frame_equal(here.by_shape, pooled.by_shape)
    assert_frame_equal(here.devices, pooled.devices)
    assert_frame_equal(here.steps.steps, pooled.steps.steps)
    assert pooled.stragglers.summary == here.stragglers.summary


def test_unreadable_host_is_a_warning(mixed, shared_traces, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(mixed, bad)
    run = next(bad.rglob("2026_01_01_00_00_00"))
    shutil.copyfile(shared_traces / "corrupt_utf8_mangled.xplane.pb", run / "zz-broken.xplane.pb")
    f = fleet.load_fleet(bad)
    assert f.hosts == ["gpu-c", "tpu-a", "tpu-b"]
    assert any("zz-broken" in w for w in f.warnings)


def test_cli_fleet_json_and_refusals(mixed, tmp_path, capsys):
    import orjson

    from traceview.cli import main

    out = tmp_path / "f.json"
    assert main(["analyze", str(mixed), "--fleet", "--format", "json", "-o", str(out), "--top", "5"]) == 0
    doc = orjson.loads(out.read_bytes())
    prof = load(mixed)
    assert doc["mode"] == "fleet" and doc["hosts"] == ["gpu-c", "tpu-a", "tpu-b"]
    assert doc["op_events"] == prof.op_events and doc["op_time_ps"] == prof.op_time_ps
    assert doc["rows"]["ops"] == {"shown": 5, "total": 33} and len(doc["ops"]) == 5 and doc["traceview"]
    assert "within 1.0%" in doc["quantiles"]["bound"] and "regimes" in doc["not_computed"]
    capsys.readouterr()
    assert main(["analyze", str(mixed), "--fleet-ops", "--filter", "fusion"]) == 2
    assert "--filter is not available with --fleet" in capsys.readouterr().err


def test_ops_only_partials_are_per_description(pod):
    whole = fleet.load_fleet(pod)
    ops = fleet.load_fleet(pod, options=fleet.FleetOptions(steps=False))
    assert_frame_equal(whole.by_shape, ops.by_shape)
    assert_frame_equal(whole.devices, ops.devices)
    assert ops.steps is None and ops.stragglers is None
    assert any("without steps" in n for n in ops.notes)


@pytest.mark.parametrize("which", ["mixed", "topp_b4"])
def test_roofline_and_kernels_from_merged_descriptions(which, mixed):
    """Roofline and kernels read only the descriptions' sums: fleet mode gives the
    single-process tables (topp_b4: one Pallas kernel, interpreted on CPU)."""
    from traceview.analysis.ops.kernels import kernels
    from traceview.analysis.hardware.peaks import profile_peaks
    from traceview.analysis.ops.roofline import predicted_vs_measured, roofline

    path = mixed if which == "mixed" else Path(__file__).resolve().parents[1] / "fixtures" / "topp_b4"
    prof = load(path)
    f = fleet.load_fleet(path, options=fleet.FleetOptions(steps=False))
    peaks = profile_peaks(prof)
    got_peaks, roof, summary = f.roofline()
    assert got_peaks == peaks
    assert_frame_equal(roofline(prof.table, peaks), roof)
    assert summary == predicted_vs_measured(roof)
    assert_frame_equal(kernels(prof.table), f.kernels())
    assert f.kernels().height == (1 if which == "topp_b4" else 0)


def test_step_module_missing_on_some_hosts_is_said(mixed):
    from traceview.errors import UsageError

    f = fleet.load_fleet(mixed, options=fleet.FleetOptions(step_module="jit_f"))
    assert f.steps is None and f.hosts == ["gpu-c", "tpu-a", "tpu-b"]
    assert f.notes == ["steps and stragglers not computed in fleet mode: gpu-c: module 'jit_f' has no executions "
                       "in this trace"]
    with pytest.raises(UsageError, match="module 'nope' has no executions"):
        fleet.load_fleet(mixed, options=fleet.FleetOptions(step_module="nope"))


def test_sketch_rows_and_buckets_equal_a_group_by(monkeypatch):
    """The host's sketch rows (dense bins, or a sort past ``_BINS_MAX``) equal a group_by
    over (attr, bucket); the bucket of a value is the same with or without zeros about."""
    rng = np.random.default_rng(7)
    for trial in range(40):
        n, na = int(rng.integers(1, 2000)), int(rng.integers(1, 30))
        v = np.floor(rng.lognormal(10, 5, n)) * (rng.random(n) > 0.2)
        if trial % 2:
            v = np.maximum(v, 1.0)
        elif trial % 10 == 4:
            v[:] = 0.0
        b = fleet.buckets(v)
        pos = v > 0
        assert (b[pos] == fleet.buckets(v[pos])).all() and (b[~pos] == fleet.ZERO_BUCKET).all()
        attr = rng.integers(0, na, n)
        want = (pl.DataFrame({"attr": pl.Series(attr, dtype=pl.UInt32), "bucket": b})
                .group_by("attr", "bucket").agg(pl.len().cast(pl.Int64).alias("n")).sort("attr", "bucket"))
        monkeypatch.setattr(fleet, "_BINS_MAX", 1 << 22 if trial % 4 < 2 else 1)
        assert_frame_equal(want, fleet._sketch_rows(attr, b, na).sort("attr", "bucket"))
    assert fleet._sketch_rows(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32), 3).height == 0


def test_partial_travels_packed_and_comes_back_the_same(shared_traces, monkeypatch):
    """A host's large frames are pickled as compressed Arrow IPC; unpickled, they stay packed
    until used, and every frame has its schema and values again, read as an attribute or
    through ``frame`` (here every frame packed, empty ones too); pickled again, the same."""
    import pickle

    from traceview.read.batch import ReadTask

    hp = fleet.host_partial(ReadTask(path=str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb"), kind="xplane",
                                     host="h"))
    monkeypatch.setattr(fleet, "PACK_MIN_BYTES", 0)
    assert isinstance(hp.__getstate__()["steps"], fleet._Packed)
    back = pickle.loads(pickle.dumps(hp))
    frames = [k for k, v in hp.__dict__.items() if isinstance(v, pl.DataFrame)]
    assert sorted(back._packed) == sorted(frames) and not any(k in back.__dict__ for k in frames)
    again = pickle.loads(pickle.dumps(back))  # (packed frames sent on as they came)
    for k, v in hp.__dict__.items():
        if isinstance(v, pl.DataFrame):
            assert back.rows(k) == v.height and back.columns(k) == v.columns, k
            got = back.frame(k)
            assert k in back._packed and got.schema == v.schema, k  # (frame: not kept unpacked)
            assert_frame_equal(v, got, check_exact=True)
            assert_frame_equal(v, getattr(back, k), check_exact=True)  # an attribute: unpacked, kept
            assert k not in back._packed and k in back.__dict__, k
            assert_frame_equal(v, again.frame(k, drop=True), check_exact=True)
            assert again.rows(k) == 0 and getattr(again, k) is None, k
        else:
            assert back.__dict__[k] == v and again.__dict__[k] == v, k


def test_dask_cluster_equals_in_process(pod, mixed, monkeypatch):
    """On a Dask cluster (results gathered as they complete, one file a task or several) the
    merged fleet is the in-process one."""
    from traceview.read import batch

    distributed = pytest.importorskip("distributed")
    here = fleet.load_fleet(pod)
    mixed_here = fleet.load_fleet(mixed)
    per_task = []
    real = batch._files_per_task
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as client:
        there = fleet.load_fleet(pod, executor=client)
        per_task += [real(client, 2), real(client, 16)]  # 16 files on 2 threads: 8 tasks of 2
        monkeypatch.setattr(batch, "_files_per_task", lambda c, n: 2)  # 3 hosts: tasks of 2 files and 1
        mixed_there = fleet.load_fleet(mixed, executor=client)
        both = fleet.load_fleet(pod, executor=client)
    assert per_task == [1, 2]
    assert_frame_equal(mixed_here.by_shape, mixed_there.by_shape, check_exact=True)
    assert mixed_there.files == mixed_here.files and mixed_there.notes == mixed_here.notes
    assert_frame_equal(both.steps.steps, here.steps.steps, check_exact=True)
    assert both.stragglers.summary == here.stragglers.summary
    for a, b in ((here.by_shape, there.by_shape), (here.devices, there.devices), (here.steps.steps, there.steps.steps),
                 (here.steps.families, there.steps.families), (here.overlap_steps, there.overlap_steps),
                 (here.stragglers.devices, there.stragglers.devices)):
        assert_frame_equal(a, b, check_exact=True)
    assert there.stragglers.summary == here.stragglers.summary and there.files == here.files


@pytest.mark.parametrize("which", ["pod", "mixed"])
def test_partials_prepared_on_arrival_merge_the_same(which, request):
    """What load_fleet does as each partial arrives (read_many's ``arrived``) leaves the merge
    as it is; read_many keeps what ``arrived`` returns."""
    from traceview.read.batch import ReadTask, read_many

    root = request.getfixturevalue(which)
    tasks = [ReadTask(path=str(f), kind="xplane", host=f.name.split(".")[0]) for f in sorted(root.rglob("*.xplane.pb"))]
    seen = []

    def arrived(res):
        seen.append(res)
        return ("kept", res)

    out = read_many(tasks, fleet.host_partial, arrived=arrived)
    assert [r for _, r in out] == seen and all(k == "kept" for k, _ in out) and len(seen) == len(tasks)
    raw = fleet.merge([fleet.host_partial(t) for t in tasks])
    prep = fleet._Arrived("steady")  # (each host with steps prepared as it comes)
    ready = [prep(fleet.host_partial(t)) for t in tasks]
    assert all("steps" in p._prepared for p in ready if p.rows("steps") and p.step_method != "error")
    got = fleet.merge(ready, consume=True)
    assert (raw.steps is None) == (got.steps is None) and (which == "mixed") == (raw.steps is None)  # (mixed:
    # its hosts find steps differently)
    pairs = [(raw.by_shape, got.by_shape), (raw.devices, got.devices), (raw.overlap_steps, got.overlap_steps)]
    if raw.steps is not None:
        pairs += [(raw.steps.steps, got.steps.steps), (raw.steps.families, got.steps.families)]
        assert raw.steps.coverage == got.steps.coverage
    for a, b in pairs:
        assert_frame_equal(a, b, check_exact=True)
    assert (raw.stragglers is None) == (got.stragglers is None)
    if raw.stragglers is not None:
        assert_frame_equal(raw.stragglers.devices, got.stragglers.devices, check_exact=True)
        assert_frame_equal(raw.stragglers.steps, got.stragglers.steps, check_exact=True)
        assert raw.stragglers.summary == got.stragglers.summary
    assert raw.notes == got.notes


@pytest.mark.parametrize("which", ["pod", "tpu2"])
@pytest.mark.parametrize("case", ["default", "window", "alike", "arrived", "arrived-window", "arrived-alike"])
def test_packed_partials_consumed_merge_the_same(which, case, request):
    """Partials as the client gets them (pickled: their large frames packed until the merge
    unpacks them, one host at a time, and lets them go) merge as the same partials held
    unpacked: the hosts' own annotations, the fleet's (another window) and hosts named alike."""
    import pickle

    from traceview.read.batch import ReadTask

    root = request.getfixturevalue(which)
    files = sorted(root.rglob("*.xplane.pb"))
    tasks = [ReadTask(path=str(f), kind="xplane", host="h" if case.endswith("alike") else f.name.split(".")[0])
             for f in files]
    window = "all" if case.endswith("window") else "steady"
    plain = fleet.merge([fleet.host_partial(t) for t in tasks], window=window)
    monkey = fleet.PACK_MIN_BYTES
    try:
        fleet.PACK_MIN_BYTES = 0  # every frame packed
        parts = [pickle.loads(pickle.dumps(fleet.host_partial(t))) for t in tasks]
    finally:
        fleet.PACK_MIN_BYTES = monkey
    assert all(p._packed for p in parts)
    if case.startswith("arrived"):  # prepared as they come (load_fleet's _Arrived, for the merge's window)
        arrived = fleet._Arrived(window)
        parts = [arrived(p) for p in parts]
        # (the window's own sums: made for hosts that judged their steps alone for this window,
        # used only when no two hosts share a name)
        assert all(("families" in p._prepared) == (window == "steady" and which == "tpu2") for p in parts)
    got = fleet.merge(parts, window=window, consume=True)
    assert all(p.rows(n) == 0 for p in parts for n in ("steps", "step_families", "overlap_steps", "collectives"))
    assert plain.steps is not None and plain.steps.steps.height > 0
    pairs = [(plain.by_shape, got.by_shape), (plain.steps.steps, got.steps.steps),
             (plain.steps.families, got.steps.families), (plain.overlap_steps, got.overlap_steps)]
    assert (plain.stragglers is None) == (got.stragglers is None) and (which == "pod") <= (got.stragglers is not None)
    if plain.stragglers is not None:
        pairs += [(plain.stragglers.devices, got.stragglers.devices), (plain.stragglers.steps, got.stragglers.steps)]
    for a, b in pairs:
        assert_frame_equal(a, b, check_exact=True)
    assert got.steps.families.height > 0
    assert plain.steps.coverage == got.steps.coverage and plain.notes == got.notes
    if case in ("default", "arrived"):  # the coverage (devices counted off the hosts' own ids): the single process's
        anat = profile_anatomy(load(root))
        assert got.steps.coverage == anat.coverage and got.steps.coverage_all == anat.coverage_all
    if case.endswith("window"):  # the fleet's annotation of the hosts' rows: the single process's
        prof = load(root)
        anat = profile_anatomy(prof, window="all")
        order = ["host", "device", "step"]
        cols = [c for c in anat.steps.columns if c != "reason"]
        assert_frame_equal(anat.steps.select(cols).sort(order), got.steps.steps.select(cols).sort(order))
    if case.endswith("alike"):
        assert got.overlap_steps.height == plain.overlap_steps.height > 0


def test_cat_text_equals_a_cast(monkeypatch):
    """A categorical column as text (the step rows' names): the cast's values, nulls and all."""
    s = pl.Series("device", ["/device:TPU:1", "/device:TPU:0", "/device:TPU:1", "h"] * 50, dtype=pl.Categorical)
    for x in (s, s.scatter([3], None), s.head(0)):
        got = fleet._cat_text(x)
        assert got.dtype == pl.Utf8 and got.name == "device"
        assert_frame_equal(x.cast(pl.Utf8).to_frame(), got.to_frame(), check_exact=True)
    monkeypatch.setattr(fleet, "_LUT_MAX", 0)  # codes past the table: a cast
    assert_frame_equal(s.cast(pl.Utf8).to_frame(), fleet._cat_text(s).to_frame())


def test_one_trace_under_two_host_names_is_said_as_without_fleet(mixed):
    """tpu-a and tpu-b are the same v6e bytes: fleet mode warns as load() does (it said
    nothing, and the trace was counted twice without a word)."""
    import traceview

    said = [w for w in fleet.load_fleet(mixed).warnings if "under 2 names" in w]
    assert len(said) == 1 and "tpu-a.xplane.pb" in said[0] and "tpu-b.xplane.pb" in said[0]
    assert said == [w for w in traceview.load(mixed, cache=False).warnings if "under 2 names" in w]


def test_a_host_with_an_unreadable_xplane_is_read_from_its_json(tmp_path):
    """As without --fleet: host A's .xplane.pb cut in half, its .trace.json.gz beside it. Fleet
    mode read only host B and skipped A; now A is read from its JSON, with the warning load()
    gives."""
    fx = Path(__file__).resolve().parents[1] / "fixtures"
    (a,) = (fx / "greedy_b4" / "plugins" / "profile").iterdir()
    b = next((fx / "nodonate_b4").rglob("*.xplane.pb"))
    run = tmp_path / "plugins" / "profile" / a.name
    run.mkdir(parents=True)
    data = (a / "engine-cpu.xplane.pb").read_bytes()
    (run / "hosta.xplane.pb").write_bytes(data[: len(data) // 2])
    shutil.copyfile(a / "engine-cpu.trace.json.gz", run / "hosta.trace.json.gz")
    shutil.copyfile(b, run / "hostb.xplane.pb")
    f = fleet.load_fleet(tmp_path, cache=False)
    assert f.hosts == ["hosta", "hostb"]
    [w] = [w for w in f.warnings if "hosta.xplane.pb: not a valid XSpace protobuf" in w]
    assert f"read {run / 'hosta.trace.json.gz'} instead" in w
