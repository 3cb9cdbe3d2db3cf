"""Parallel reads of multi-host runs: local processes and a Dask cluster give the
single-process result, errors come back as warnings, progress is reported."""

from __future__ import annotations

import io
import multiprocessing
import shutil
from concurrent.futures import ProcessPoolExecutor

import pytest
from polars.testing import assert_frame_equal

from traceview.api import load
from traceview.errors import TraceUnreadable
from traceview.model.files import read_task
from traceview.read.batch import Progress, ReadTask, read_many
from traceview.render.progress import TerminalProgress


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("TRACEVIEW_NO_CACHE", "1")


@pytest.fixture(scope="module")
def run_dir(shared_traces, tmp_path_factory):
    """A three-host run: two TPU hosts and one GPU host, in one run folder."""
    logs = tmp_path_factory.mktemp("multihost")
    run = logs / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    shutil.copyfile(shared_traces / "tpu_v6e_4chip_psum.xplane.pb", run / "tpu-a.xplane.pb")
    shutil.copyfile(shared_traces / "tpu_v6e_4chip_psum.xplane.pb", run / "tpu-b.xplane.pb")
    shutil.copyfile(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb", run / "gpu-c.xplane.pb")
    return logs


def _same_profile(a, b) -> None:
    assert_frame_equal(a.ops, b.ops)
    assert_frame_equal(a.module_runs, b.module_runs)
    assert a.devices == b.devices
    assert a.warnings == b.warnings
    assert [t.host for t in a.traces] == [t.host for t in b.traces]


def test_process_pool_equals_single_process(run_dir):
    single = load(run_dir)  # small files: read in this process
    assert sorted(single.ops["host"].unique()) == ["gpu-c", "tpu-a", "tpu-b"]
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as ex:
        pooled = load(run_dir, executor=ex)
    _same_profile(single, pooled)


def test_dask_cluster_equals_single_process(run_dir):
    import distributed
    single = load(run_dir)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster:
        by_address = load(run_dir, scheduler=cluster.scheduler_address)
        with distributed.Client(cluster) as client:
            by_client = load(run_dir, executor=client)  # a Client is an executor too
    _same_profile(single, by_address)
    _same_profile(single, by_client)


def test_refused_scheduler_is_a_remote_fault_at_once(run_dir):
    """Nothing listens on port 1: exit 7's RemoteUnreadable, without Dask's retries until its
    connect timeout (the bound is that timeout, not a measure of speed)."""
    import time

    from traceview.errors import RemoteUnreadable
    from traceview.read.batch import CONNECT_TIMEOUT_S

    pytest.importorskip("distributed")  # imported before the clock
    t0 = time.monotonic()
    with pytest.raises(RemoteUnreadable, match=r"Dask scheduler at tcp://127.0.0.1:1: connection refused"):
        load(run_dir, scheduler="tcp://127.0.0.1:1")
    assert time.monotonic() - t0 < CONNECT_TIMEOUT_S
    with pytest.raises(RemoteUnreadable, match=r"unknown host 'nohost.invalid'"):
        load(run_dir, scheduler="tcp://nohost.invalid:8786")


def test_unreadable_host_comes_back_as_a_warning(run_dir, shared_traces, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(run_dir, bad)
    run = next(bad.rglob("2026_01_01_00_00_00"))
    shutil.copyfile(shared_traces / "corrupt_utf8_mangled.xplane.pb", run / "zz-broken.xplane.pb")
    single = load(bad)
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as ex:
        pooled = load(bad, executor=ex)
    _same_profile(single, pooled)
    assert any("zz-broken" in w for w in pooled.warnings)
    tasks = [ReadTask(path=str(run / "zz-broken.xplane.pb"), kind="xplane", host="zz")]
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as ex:
        (err,) = read_many(tasks, read_task, executor=ex)
    assert isinstance(err, TraceUnreadable) and err.path == tasks[0].path and err.fault


def test_progress_reports_files_bytes_events(run_dir):
    seen: list[Progress] = []
    prof = load(run_dir, progress=seen.append)
    assert seen[0].files_done == 0 and seen[-1].files_done == seen[-1].files_total == 3
    assert [p.files_done for p in seen] == [0, 1, 2, 3]
    assert seen[-1].bytes_done == seen[-1].bytes_total == sum(f.stat().st_size for f in run_dir.rglob("*.pb"))
    assert seen[-1].events == sum(t.n_events for t in prof.traces)


def test_terminal_progress_is_quiet_off_a_terminal():
    stream = io.StringIO()
    bar = TerminalProgress(stream)
    assert not bar.enabled
    bar(Progress(1, 2, 10, 20, 5))
    assert stream.getvalue() == ""
    shown = io.StringIO()
    forced = TerminalProgress(shown, force=True)
    forced(Progress(0, 1, 0, 10, 0))
    forced(Progress(1, 1, 10, 10, 42))  # the last file: the bar stops
    assert forced._bar is None


def test_local_processes_only_when_allowed(shared_traces, tmp_path, monkeypatch, run_dir):
    """Library default: one process. With local workers asked for (``workers=2``, CLI
    --workers N), the files are read by a process pool, with the single-process result."""
    import traceview.read.batch as par

    made = []

    class Counting(ProcessPoolExecutor):
        def __init__(self, *a, **k):
            made.append(1)
            super().__init__(*a, **k)

    import concurrent.futures

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Counting)  # read_many imports it when used
    monkeypatch.setattr(par, "PARALLEL_MIN_BYTES", 0)
    src = next((shared_traces / "vllm_tpu_qwen").rglob("*.trace.json.gz"))
    run = tmp_path / "plugins" / "profile" / "2026_01_02_00_00_00"
    run.mkdir(parents=True)
    for host in ("ja", "jb"):
        shutil.copyfile(src, run / f"{host}.trace.json.gz")
    single_json, single_xplane = load(tmp_path), load(run_dir)
    assert made == []
    _same_profile(single_json, load(tmp_path, workers=2))
    _same_profile(single_xplane, load(run_dir, workers=2))
    assert made == [1, 1]


def test_thread_budget_one_thread_same_result(shared_traces, monkeypatch):
    """Within ``thread_budget(1)`` (what a Dask task runs under) a file is read and its steps
    found without a thread of traceview's own, with the same result."""
    import concurrent.futures
    import os

    from traceview.analysis.steps.anatomy import profile_anatomy
    from traceview.model.profiledata import ProfileData
    from traceview.read.batch import thread_budget, threads_available

    path = shared_traces / "tpu_v6e_4chip_psum.xplane.pb"
    task = ReadTask(path=str(path), kind="xplane", host="h")

    def steps():
        prof = ProfileData.from_traces([read_task(task, memory=False)])
        return prof.table.events, profile_anatomy(prof, window="all", reasons=False).steps

    free = steps()
    assert threads_available() == (os.cpu_count() or 1)

    class NoThreads:
        def __init__(self, *a, **k):
            raise AssertionError("a thread pool under a budget of one thread")

    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", NoThreads)
    with thread_budget(1):
        assert threads_available() == 1
        one = steps()
    assert threads_available() == (os.cpu_count() or 1)
    assert_frame_equal(free[0], one[0])
    assert_frame_equal(free[1], one[1])
