"""traceview.read.discover: finding the trace files to read, and the stale-trace / stray-file traps.

Real layouts: the vLLM TPU run under ../shared/traces and a CPU profile recorded live; the
traps are rebuilt in temporary trees (empty files with the profiler's names: discovery
only stats files, it never opens them).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import pytest

from traceview.read.discover import Discovery, discover, json_siblings
from traceview.errors import EXIT_NO_TRACE, EXIT_USAGE, NoTraceFound, UsageError

VLLM_RUN = "2026_01_11_21_26_41"
VLLM_HOST = "t1v-n-9eb622fc-w-0"
VLLM_TIME = datetime(2026, 1, 11, 21, 26, 41).timestamp()
DAY = 86400.0


def _touch(path: Path, mtime: float | None = None, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def _listing(root: Path) -> list[tuple[str, int, float]]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            st = p.lstat()
            out.append((str(p.relative_to(root)), st.st_mode, st.st_mtime))
    return sorted(out)


def _all_text(d: Discovery) -> str:
    return "\n".join(d.reasons + d.warnings)


# -- real traces ---------------------------------------------------------------------------

@pytest.mark.parametrize("sub", ["vllm_tpu_qwen", "vllm_tpu_qwen/plugins/profile", f"vllm_tpu_qwen/plugins/profile/{VLLM_RUN}",
                                 f"vllm_tpu_qwen/plugins/profile/{VLLM_RUN}/{VLLM_HOST}.trace.json.gz"])
def test_vllm_found_from_any_level(shared_traces, sub):
    d = discover(shared_traces / sub, now=VLLM_TIME + DAY)
    assert [r.name for r in d.runs] == [VLLM_RUN]
    assert d.selected == d.runs
    assert [(f.run, f.host, f.kind) for f in d.files] == [(VLLM_RUN, VLLM_HOST, "trace_json")]
    f = d.files[0]
    assert f.path.name == f"{VLLM_HOST}.trace.json.gz"
    assert f.size == f.path.stat().st_size
    assert d.runs[0].timestamp == datetime(2026, 1, 11, 21, 26, 41)
    assert d.runs[0].hosts == [VLLM_HOST]
    text = _all_text(d)
    assert VLLM_RUN in text and VLLM_HOST in text
    assert "no .xplane.pb for this host" in text
    assert d.warnings == []  # one run, a day old


def test_stale_run_warns(shared_traces):
    d = discover(shared_traces / "vllm_tpu_qwen", now=VLLM_TIME + 30 * DAY)
    assert len(d.warnings) == 1
    assert "30 days old" in d.warnings[0] and VLLM_RUN in d.warnings[0]
    assert discover(shared_traces / "vllm_tpu_qwen", now=VLLM_TIME + 30 * DAY, stale_after_s=None).warnings == []
    assert discover(shared_traces / "vllm_tpu_qwen", now=VLLM_TIME + 30 * DAY, stale_after_s=60 * DAY).warnings == []


def test_shared_traces_folder_mixes_loose_files_and_a_run(shared_traces):
    d = discover(shared_traces, now=VLLM_TIME + DAY)
    assert sorted(r.name for r in d.runs) == sorted(["traces", VLLM_RUN])
    loose = next(r for r in d.runs if r.name == "traces")
    assert loose.timestamp is None and loose.directory == shared_traces
    assert loose.hosts == sorted(["tpu_v6e_4chip_psum", "corrupt_utf8_mangled", "gpu_v100x8_tf2_bert_no_xla",
                                  "mi300x_jax_gemm_sweep", "mi300x_jax_attention", "mi300x_jax_conv3d",
                                  "tpu_v6e_pallas_matmul_llo"])
    assert all(f.kind == "xplane" for f in loose.files)
    # a run folder wins over loose files, however new they are
    assert [r.name for r in d.selected] == [VLLM_RUN]
    assert any(w.startswith("2 runs found; reading") and VLLM_RUN in w for w in d.warnings)
    assert any("other runs, not read" in r for r in d.reasons)

    d = discover(shared_traces, run=VLLM_RUN, now=VLLM_TIME + DAY)
    assert [f.host for f in d.files] == [VLLM_HOST]
    assert not any("runs found" in w for w in d.warnings)

    d = discover(shared_traces, run="traces", now=VLLM_TIME + DAY)
    assert len(d.files) == 7
    assert any("lie loose in" in w for w in d.warnings)

    d = discover(shared_traces, all_runs=True, now=VLLM_TIME + DAY)
    assert len(d.files) == 8 and len(d.selected) == 2


def test_live_cpu_profile_prefers_xplane(cpu_profile_dir):
    d = discover(cpu_profile_dir)
    assert len(d.runs) == 1 and d.runs[0].timestamp is not None
    assert [f.kind for f in d.files] == ["xplane"]
    assert sorted(f.kind for f in d.runs[0].files) == ["trace_json", "xplane"]
    host = d.files[0].host
    assert any(f"host {host}: reading {host}.xplane.pb" in r and "preferred over" in r for r in d.reasons)
    sib = json_siblings(d, d.files[0])
    assert [s.path.name for s in sib] == [f"{host}.trace.json.gz"]
    assert d.siblings(d.files[0]) == sib
    assert d.warnings == []


# -- errors ----------------------------------------------------------------------------------

def test_empty_folder_raises_no_trace_found(tmp_path):
    (tmp_path / "plugins" / "profile").mkdir(parents=True)
    _touch(tmp_path / "notes.txt")
    with pytest.raises(NoTraceFound) as ei:
        discover(tmp_path)
    msg = str(ei.value)
    assert str(tmp_path) in msg and "*.xplane.pb" in msg and "*.trace.json.gz" in msg
    assert "\n" not in msg
    assert ei.value.exit_code == EXIT_NO_TRACE


def test_missing_path_and_non_trace_file(tmp_path):
    with pytest.raises(NoTraceFound, match="does not exist"):
        discover(tmp_path / "nope")
    with pytest.raises(NoTraceFound, match="not a trace file"):
        discover(_touch(tmp_path / "notes.txt"))
    with pytest.raises(NoTraceFound, match="empty file"):
        discover(_touch(tmp_path / "h.xplane.pb", data=b""))


def test_unknown_run_name_lists_available(tmp_path):
    prof = tmp_path / "plugins" / "profile"
    _touch(prof / "2026_01_01_10_00_00" / "h.xplane.pb")
    _touch(prof / "2026_01_02_10_00_00" / "h.xplane.pb")
    with pytest.raises(UsageError) as ei:
        discover(tmp_path, run="2025_12_31_00_00_00")
    msg = str(ei.value)
    assert "2026_01_01_10_00_00" in msg and "2026_01_02_10_00_00" in msg
    assert ei.value.exit_code == EXIT_USAGE
    with pytest.raises(UsageError):
        discover(tmp_path, run="2026_01_01_10_00_00", all_runs=True)

    # a file is its own run: --run names it or is refused as choosing nothing, not listing the folder
    one = prof / "2026_01_01_10_00_00" / "h.xplane.pb"
    assert discover(one, run="2026_01_01_10_00_00").runs[0].name == "2026_01_01_10_00_00"
    with pytest.raises(UsageError) as ei:
        discover(one, run="2026_01_02_10_00_00")
    assert "is one trace file of run 2026_01_01_10_00_00" in str(ei.value) and "available runs" not in str(ei.value)


# -- the traps -------------------------------------------------------------------------------

def test_two_runs_picks_newest_by_folder_name_and_warns(tmp_path):
    prof = tmp_path / "log" / "plugins" / "profile"
    old = _touch(prof / "2026_01_01_10_00_00" / "h.xplane.pb", mtime=datetime(2026, 3, 1).timestamp())
    new = _touch(prof / "2026_01_02_10_00_00" / "h.xplane.pb", mtime=datetime(2026, 1, 2, 10).timestamp())
    _touch(prof / "2026_01_02_10_00_00" / "h2.xplane.pb", mtime=datetime(2026, 1, 2, 10).timestamp())
    now = datetime(2026, 1, 3).timestamp()
    d = discover(tmp_path, now=now)  # a folder above the log dir
    assert [r.name for r in d.runs] == ["2026_01_02_10_00_00", "2026_01_01_10_00_00"]
    # the older run's file was touched later (copied?): the folder's timestamp still wins
    assert [f.path for f in d.files] == [new, new.with_name("h2.xplane.pb")]
    assert d.runs[0].hosts == ["h", "h2"]
    assert d.warnings[0].startswith("2 runs found; reading the newest 2026_01_02_10_00_00; pass --run or --all-runs")
    assert any("other runs, not read: 2026_01_01_10_00_00" in r for r in d.reasons)
    assert d.runs[1].age(now) == pytest.approx(now - datetime(2026, 1, 1, 10).timestamp())

    d = discover(tmp_path, run="2026_01_01_10_00_00", now=now)
    assert [f.path for f in d.files] == [old]
    assert not any("runs found" in w for w in d.warnings)

    d = discover(tmp_path, all_runs=True, now=now)
    assert [f.run for f in d.files] == ["2026_01_02_10_00_00", "2026_01_02_10_00_00", "2026_01_01_10_00_00"]
    assert d.warnings == []
    # a month later: one stale warning, for the newest run read
    d = discover(tmp_path, all_runs=True, now=now + 30 * DAY)
    assert [w.split(" is ")[0] for w in d.warnings] == ["run 2026_01_02_10_00_00"]


def test_start_trace_none_folder_found_and_explained(tmp_path):
    f = _touch(tmp_path / "None" / "plugins" / "profile" / "2026_01_05_12_00_00" / "h.xplane.pb")
    d = discover(tmp_path)
    assert [x.path for x in d.files] == [f]
    assert d.runs[0].under_none
    assert any("None/plugins/profile" in r and "start_trace(None)" in r for r in d.reasons)
    # an ordinary log dir gets no such line
    g = tmp_path / "other"
    _touch(g / "plugins" / "profile" / "2026_01_05_12_00_00" / "h.xplane.pb")
    assert not any("start_trace(None)" in r for r in discover(g).reasons)


def test_symlink_loop_terminates(tmp_path):
    f = _touch(tmp_path / "a" / "b" / "h.xplane.pb")
    (tmp_path / "a" / "b" / "up").symlink_to(tmp_path / "a", target_is_directory=True)
    (tmp_path / "a" / "self").symlink_to(tmp_path / "a", target_is_directory=True)
    d = discover(tmp_path)
    assert [x.path for x in d.files] == [f]
    assert sum(len(r.files) for r in d.runs) == 1
    assert any("already visited" in why for _, why in d.skipped)


def test_symlinked_run_folder_is_followed(tmp_path):
    real = _touch(tmp_path / "elsewhere" / "2026_01_05_12_00_00" / "h.xplane.pb")
    (tmp_path / "log" / "plugins" / "profile").mkdir(parents=True)
    (tmp_path / "log" / "plugins" / "profile" / "2026_01_05_12_00_00").symlink_to(real.parent, target_is_directory=True)
    d = discover(tmp_path / "log")
    assert [x.path.name for x in d.files] == ["h.xplane.pb"]
    assert d.runs[0].name == "2026_01_05_12_00_00"


def _cannot_list(monkeypatch, bad: Path) -> None:
    """``os.scandir(bad)`` fails as a folder without read permission does (root ignores
    permission bits: the failure is injected instead)."""
    real_scandir = os.scandir

    def scandir(path="."):
        if Path(path) == bad:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)


def test_unreadable_folder_is_skipped(tmp_path, monkeypatch):
    good = _touch(tmp_path / "ok" / "2026_01_05_12_00_00" / "h.xplane.pb")
    bad = tmp_path / "locked"
    _touch(bad / "2026_01_06_12_00_00" / "h.xplane.pb")
    _cannot_list(monkeypatch, bad)
    d = discover(tmp_path)
    assert [x.path for x in d.files] == [good]
    assert (bad, "cannot list folder: Permission denied") in d.skipped
    assert any("skipped 1 path" in r for r in d.reasons)


def test_a_folder_given_that_cannot_be_listed_is_unreadable_not_empty(tmp_path, monkeypatch, capsys):
    """The folder given itself cannot be listed: exit 4 (unreadable) naming it and why, not 3
    (no trace found), which would say it holds no trace; a subfolder that cannot be listed is
    skipped and said (above)."""
    from traceview.cli import main
    from traceview.errors import EXIT_UNREADABLE, TraceUnreadable

    bad = tmp_path / "locked"
    _touch(bad / "2026_01_06_12_00_00" / "h.xplane.pb")
    _cannot_list(monkeypatch, bad)
    with pytest.raises(TraceUnreadable, match="cannot list folder: Permission denied"):
        discover(bad)
    assert main(["analyze", str(bad), "--no-cache"]) == EXIT_UNREADABLE
    err = capsys.readouterr().err
    assert err == f"traceview: error: {bad}: cannot list folder: Permission denied\n", err


def test_read_only_tree_is_left_untouched(tmp_path):
    root = tmp_path / "ro"
    prof = root / "plugins" / "profile"
    _touch(prof / "2026_01_05_12_00_00" / "h.xplane.pb", mtime=1.0e9)
    _touch(prof / "2026_01_05_12_00_00" / "h.trace.json.gz", mtime=1.0e9 + 500)
    _touch(prof / "2026_01_06_12_00_00" / "h.xplane.pb")
    before = _listing(root)
    for dirpath, dirnames, filenames in os.walk(root):
        for n in filenames + dirnames:
            p = Path(dirpath) / n
            p.chmod(p.stat().st_mode & ~0o222)
    root.chmod(root.stat().st_mode & ~0o222)
    try:
        ro_before = _listing(root)
        d = discover(root)
        discover(root, all_runs=True)
        discover(prof / "2026_01_05_12_00_00" / "h.xplane.pb")
        assert d.files and d.warnings
        assert _listing(root) == ro_before
        assert [(n, m) for n, _, m in before] == [(n, m) for n, _, m in ro_before]
    finally:
        for dirpath, dirnames, filenames in os.walk(root):
            os.chmod(dirpath, 0o755)
            for n in filenames:
                os.chmod(Path(dirpath) / n, 0o644)


def test_xplane_and_json_written_far_apart_warns(tmp_path):
    run = tmp_path / "plugins" / "profile" / "2026_01_05_12_00_00"
    t = datetime(2026, 1, 5, 12).timestamp()
    xp = _touch(run / "h.xplane.pb", mtime=t)
    _touch(run / "h.trace.json.gz", mtime=t + 120)
    _touch(run / "g.xplane.pb", mtime=t)
    _touch(run / "g.trace.json.gz", mtime=t + 30)  # within 60 s: fine
    d = discover(tmp_path, now=t + 200)
    assert [f.path.name for f in d.files] == ["g.xplane.pb", "h.xplane.pb"]
    assert xp in [f.path for f in d.files]
    mism = [w for w in d.warnings if "apart" in w]
    assert len(mism) == 1
    assert "h.xplane.pb" in mism[0] and "h.trace.json.gz" in mism[0] and "120 s apart" in mism[0]
    assert "same second" in mism[0]
    assert any("host h: reading h.xplane.pb" in r and "preferred over h.trace.json.gz" in r for r in d.reasons)


def test_perfetto_copy_is_not_read_when_the_trace_json_is_there(tmp_path):
    run = tmp_path / "plugins" / "profile" / "2026_01_05_12_00_00"
    _touch(run / "h.trace.json.gz")
    _touch(run / "perfetto_trace.json.gz")
    d = discover(tmp_path)
    assert [(f.path.name, f.host) for f in d.files] == [("h.trace.json.gz", "h")]
    assert sorted((f.path.name, f.host, f.kind) for f in d.runs[0].files) == [
        ("h.trace.json.gz", "h", "trace_json"), ("perfetto_trace.json.gz", "h", "perfetto")]
    only = tmp_path / "only" / "2026_01_05_12_00_00"
    _touch(only / "perfetto_trace.json.gz")
    d = discover(tmp_path / "only")
    assert [(f.path.name, f.kind) for f in d.files] == [("perfetto_trace.json.gz", "perfetto")]


def test_plain_trace_json_and_gz_prefers_gz(tmp_path):
    run = tmp_path / "2026_01_05_12_00_00"
    _touch(run / "h.trace.json")
    _touch(run / "h.trace.json.gz")
    d = discover(tmp_path)
    assert [f.path.name for f in d.files] == ["h.trace.json.gz"]


def test_loose_single_file_and_empty_file(tmp_path):
    f = _touch(tmp_path / "dump" / "my_host.xplane.pb")
    d = discover(f)
    assert d.runs[0].name == "" and d.files[0].run == "" and d.files[0].host == "my_host"
    d = discover(tmp_path)
    assert d.runs[0].name == "dump" and d.runs[0].timestamp is None
    assert d.warnings == []  # one loose host: no stray-file warning
    _touch(tmp_path / "dump" / "crashed.xplane.pb", data=b"")
    d = discover(tmp_path)
    assert [x.host for x in d.files] == ["my_host"]
    assert any("empty file" in why for _, why in d.skipped)


def test_same_run_name_in_two_log_dirs(tmp_path):
    a = _touch(tmp_path / "a" / "plugins" / "profile" / "2026_01_05_12_00_00" / "h.xplane.pb")
    b = _touch(tmp_path / "b" / "plugins" / "profile" / "2026_01_05_12_00_00" / "h.xplane.pb")
    d = discover(tmp_path, all_runs=True)
    names = sorted(r.name for r in d.runs)
    assert names == ["a/plugins/profile/2026_01_05_12_00_00", "b/plugins/profile/2026_01_05_12_00_00"]
    assert [f.path for f in discover(tmp_path, run=names[1]).files] == [b]
    with pytest.raises(UsageError, match="ambiguous"):
        discover(tmp_path, run="2026_01_05_12_00_00")
    assert a.exists()


def test_package_and_vcs_folders_are_not_searched(tmp_path):
    _touch(tmp_path / ".venv" / "lib" / "site-packages" / "xprof" / "t.xplane.pb")
    _touch(tmp_path / ".git" / "x.xplane.pb")
    f = _touch(tmp_path / "plugins" / "profile" / "2026_01_05_12_00_00" / "h.xplane.pb")
    assert [x.path for x in discover(tmp_path).files] == [f]
    # ...unless the user points at one
    assert len(discover(tmp_path / ".git").files) == 1


def test_skipped_paths_are_named_in_path_order(tmp_path):
    """Links back to the root are skipped ('already visited'); they are listed by path with
    numbers by value, not in directory order (a user saw h889, h1500, h921)."""
    from traceview.read.discover import discover

    run = tmp_path / "plugins" / "profile" / "r1"
    run.mkdir(parents=True)
    (run / "h.xplane.pb").write_bytes(b"\x0a\x00")
    for name in ("h889", "h1500", "h921", "h2"):
        (tmp_path / name).symlink_to(tmp_path, target_is_directory=True)
    d = discover(tmp_path)
    names = [p.name for p, why in d.skipped if "already visited" in why]
    assert names == ["h2", "h889", "h921", "h1500"]


def test_same_bytes_groups_copies_and_links_only(tmp_path):
    """Copies and hard links of one trace are grouped; a file of the same size with other
    bytes (differing only in its last chunk) and files of other sizes are not."""
    from traceview.read.discover import _COMPARE_CHUNK, same_bytes

    run = tmp_path / "2024_01_02_03_04_05"
    body = os.urandom(_COMPARE_CHUNK + 10)
    _touch(run / "a.xplane.pb", data=body)
    _touch(run / "b.xplane.pb", data=body)
    os.link(run / "a.xplane.pb", run / "c.xplane.pb")
    _touch(run / "d.xplane.pb", data=body[:-1] + bytes([body[-1] ^ 1]))  # same size, last byte differs
    _touch(run / "e.xplane.pb", data=body[:-1])
    _touch(run / "f.xplane.pb", data=b"other")
    disc = discover(tmp_path)
    assert len(disc.files) == 6
    assert [sorted(f.host for f in g) for g in same_bytes(disc.files)] == [["a", "b", "c"]]

def test_names_of_one_file_are_grouped_without_a_read(tmp_path, monkeypatch):
    """Hard links of one trace (as benchmarks/fleet.py lays out its hosts) are one group, in
    the files' order, found from their inode: no file is opened."""
    import traceview.read.discover as dm

    links = tmp_path / "2024_01_02_03_04_05"
    _touch(links / "h0.xplane.pb", data=os.urandom(dm._COMPARE_CHUNK + 10))
    for i in (1, 2):
        os.link(links / "h0.xplane.pb", links / f"h{i}.xplane.pb")
    disc = discover(tmp_path)

    def no_open(*a, **k):
        raise AssertionError("a file was opened")
    monkeypatch.setattr(dm, "open", no_open, raising=False)
    assert [[f.host for f in g] for g in dm.same_bytes(disc.files)] == [["h0", "h1", "h2"]]


def test_load_warns_of_one_trace_under_two_host_names(tmp_path, shared_traces):
    from traceview.model.load import load

    run = tmp_path / "2024_01_02_03_04_05"
    data = (shared_traces / "mi300x_jax_gemm_sweep.xplane.pb").read_bytes()
    _touch(run / "h1.xplane.pb", data=data)
    _touch(run / "h2.xplane.pb", data=data)
    prof = load(tmp_path, cache=False)
    [w] = [w for w in prof.warnings if "the same" in w]
    assert "h1.xplane.pb" in w and "h2.xplane.pb" in w and f"the same {len(data):,} bytes under 2 names" in w
    # distinct hosts: no such warning
    _touch(run / "h2.xplane.pb", data=(shared_traces / "mi300x_jax_attention.xplane.pb").read_bytes())
    assert not [w for w in load(tmp_path, cache=False).warnings if "the same" in w]


def test_reason_names_the_empty_xplane_a_json_is_read_for(tmp_path):
    """A host whose .xplane.pb is empty (skipped) is read from its JSON: the reason says why,
    not 'no .xplane.pb for this host'."""
    run = tmp_path / "2024_01_02_03_04_05"
    _touch(run / "h.xplane.pb", data=b"")
    _touch(run / "h.trace.json.gz")
    _touch(run / "g.trace.json.gz")
    disc = discover(tmp_path)
    [h] = [r for r in disc.reasons if r.startswith("host h:")]
    assert "its h.xplane.pb is skipped (empty file (0 bytes)" in h and "no .xplane.pb" not in h
    [g] = [r for r in disc.reasons if r.startswith("host g:")]
    assert "no .xplane.pb for this host" in g
