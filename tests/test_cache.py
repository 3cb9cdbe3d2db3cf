"""The parsed-table cache: identical results, invalidation, nothing under the input path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

from traceview.api import load
from traceview.model import files
from traceview.model.files import read_file
from traceview.read import cache


def _same(a, b) -> None:
    assert_frame_equal(a.ops, b.ops)
    assert_frame_equal(a.module_runs, b.module_runs)
    assert a.devices == b.devices
    for field in ("path", "host", "format", "notes", "has_shapes", "n_events", "profile_start_ns", "profile_stop_ns"):
        assert getattr(a, field) == getattr(b, field), field


def _entries(d: Path) -> list[Path]:
    return sorted(p for p in (d / f"v{cache.SCHEMA_VERSION}").glob("*") if not p.name.startswith(".")) if d.exists() else []


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


@pytest.fixture
def traces(shared_traces):
    return [shared_traces / "tpu_v6e_4chip_psum.xplane.pb", shared_traces / "mi300x_jax_gemm_sweep.xplane.pb",
            next((shared_traces / "vllm_tpu_qwen").rglob("*.trace.json.gz"))]


def test_cached_equals_uncached(cache_dir, traces, monkeypatch):
    plain = [_uncached(p) for p in traces]
    first = [read_file(p) for p in traces]  # misses: read and stored
    assert len(_entries(cache_dir)) == len(traces)
    def boom(*a, **k):
        raise AssertionError("the reader ran although the cache holds the file")

    monkeypatch.setattr(files, "read_uncached", boom)
    hits = [read_file(p) for p in traces]  # hits: the reader is never called
    for a, b, c in zip(plain, first, hits):
        _same(a, b)
        _same(a, c)


def _uncached(path):
    from traceview.model.files import read_uncached as _read_file_uncached

    return _read_file_uncached(path)


def test_entry_is_keyed_by_the_read_arguments(cache_dir, traces):
    path = traces[0]
    a = read_file(path, host="alpha", run="r1")
    b = read_file(path, host="beta", run="r1")
    assert set(a.ops["host"].unique()) == {"alpha"} and set(b.ops["host"].unique()) == {"beta"}
    assert len(_entries(cache_dir)) == 2
    _same(read_file(path, host="alpha", run="r1"), a)


def test_changed_file_is_read_again(cache_dir, traces, tmp_path):
    f = tmp_path / "in" / "host.xplane.pb"
    f.parent.mkdir()
    shutil.copyfile(traces[0], f)
    first = read_file(f)
    assert len(_entries(cache_dir)) == 1
    # same name, other content (another trace): the stale entry must not be used
    shutil.copyfile(traces[1], f)
    second = read_file(f)
    _same(second, _uncached(f))
    assert second.ops.height != first.ops.height
    assert len(_entries(cache_dir)) == 1  # replaced, not accumulated
    # same content, new mtime: still a fresh read (mtime is part of the identity)
    os.utime(f, ns=(1, 1))
    ident = cache.file_identity(f)
    _same(read_file(f), second)
    meta = json.loads((_entries(cache_dir)[0] / "meta.json").read_text())
    assert meta["identity"] == ident


def test_damaged_entry_is_a_miss(cache_dir, traces):
    path = traces[0]
    good = read_file(path)
    (entry,) = _entries(cache_dir)
    (entry / "ops.arrow").write_bytes(b"not arrow")
    _same(read_file(path), good)
    (entry,) = _entries(cache_dir)  # rewritten
    _same(read_file(path), good)


def test_nothing_is_written_under_the_input(cache_dir, traces, tmp_path):
    run = tmp_path / "logs" / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    shutil.copyfile(traces[0], run / "h0.xplane.pb")
    shutil.copyfile(traces[1], run / "h1.xplane.pb")
    logs = tmp_path / "logs"
    before = _tree(logs)
    for p in [logs, *logs.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        prof = load(logs)
        again = load(logs)
        assert_frame_equal(prof.ops, again.ops)
        assert _tree(logs) == before
        assert len(_entries(cache_dir)) == 2
        # a cache folder inside the profile folder is never written
        for p in [logs, *logs.rglob("*")]:
            if p.is_dir():
                p.chmod(0o755)
        inside = run / "cache"
        os.environ["TRACEVIEW_CACHE_DIR"] = str(inside)
        load(logs)
        assert not inside.exists()
        p0 = str(run / "h0.xplane.pb")
        data, frames, comp = files.encode(prof.traces[0])
        assert cache.TableCache(inside).put(p0, files.cache_args(p0, "xplane", "h0", run.name), data, frames,
                                            compression=comp) is None
        assert not inside.exists()
    finally:
        for p in [logs, *logs.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)


def test_switches_turn_it_off(cache_dir, traces, monkeypatch):
    monkeypatch.setenv("TRACEVIEW_NO_CACHE", "1")
    read_file(traces[0])
    assert not cache_dir.exists()
    monkeypatch.delenv("TRACEVIEW_NO_CACHE")
    read_file(traces[0], cache=False)  # the library's switch: an argument
    assert not cache_dir.exists()
    import inspect

    if "max_bytes" in inspect.signature(read_file).parameters:
        read_file(traces[0], max_bytes=1 << 30)  # a byte limit in force: limits are checked, no cache
        assert not cache_dir.exists()


def test_cli_same_output_with_and_without_cache(cache_dir, traces, tmp_path):
    """The CLI caches files of MIN_FILE_BYTES (1 MiB) or more: a TPU trace scaled to ~1.5 MB."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "scale_trace", Path(__file__).resolve().parents[1] / "benchmarks" / "scale_trace.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    f = tmp_path / "in" / "big.xplane.pb"
    mod.scale_xplane(traces[0], f, 2)
    assert f.stat().st_size >= 1 << 20
    env = {k: v for k, v in os.environ.items() if k != "TRACEVIEW_NO_CACHE"}
    env["TRACEVIEW_CACHE_DIR"] = str(cache_dir)
    outs = []
    for flags in (["--no-cache"], [], [], ["--no-cache"]):
        out = tmp_path / f"o{len(outs)}.json"
        subprocess.run([sys.executable, "-m", "traceview.cli", "analyze", str(f), "--format", "json",
                        "-o", str(out), *flags], check=True, env=env, capture_output=True)
        doc = json.loads(out.read_text())
        doc["provenance"].pop("lines")  # says how old the run is, in seconds
        outs.append(doc)
        assert len(_entries(cache_dir)) == (0 if len(outs) == 1 else 1)
    assert outs[0] == outs[1] == outs[2] == outs[3]
    assert outs[0]["ops"]


def test_prune_keeps_the_budget(cache_dir, traces):
    for p in traces:
        read_file(p)
    assert len(_entries(cache_dir)) == 3
    assert cache.TableCache(cache_dir).prune(max_bytes=0) == 3
    assert _entries(cache_dir) == []
