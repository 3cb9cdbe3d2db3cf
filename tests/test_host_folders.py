"""Fleets captured host by host (issue 27.2): each host's run folder, seconds apart, read as one
run, its clock offsets estimated by the straggler analysis; and the guards (a host twice, a
folder of several hosts, outside the window, clocks hours apart).

The two hosts' folders are built at test time from the shared 4-chip v6e trace: host b is a
copy whose clocks (line timestamps and the device-clock ``device_offset_ps`` stats) run
ahead by a known shift; the original is never touched. Layouts only discovery looks at use
empty files (discovery stats files, it never opens them).
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest

import traceview
from traceview.cli import main
from traceview.read.discover import HOST_GROUP_WINDOW_S, discover
from traceview.read.xplane.protos import XSpace

V6E = "tpu_v6e_4chip_psum.xplane.pb"
T0 = datetime(2025, 3, 11, 19, 43, 19)
NOW = T0.timestamp() + 3600
SHIFT_PS = 7_654_321_000  # host b's clock runs 7.654321 ms ahead


def _folder(root: Path, when: datetime) -> Path:
    d = root / "plugins" / "profile" / when.strftime("%Y_%m_%d_%H_%M_%S")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _touch(root: Path, when: datetime, *hosts: str) -> None:
    d = _folder(root, when)
    for h in hosts:
        (d / f"{h}.xplane.pb").write_bytes(b"x")


def shifted(src: bytes, shift_ps: int) -> bytes:
    """``src`` (a serialized XSpace) with every clock moved ``shift_ps`` later: each line's
    ``timestamp_ns`` and each event's ``device_offset_ps`` stat."""
    xs = XSpace()
    xs.ParseFromString(src)
    for p in xs.planes:
        off = {k for k, v in p.stat_metadata.items() if v.name == "device_offset_ps"}
        for ln in p.lines:
            ln.timestamp_ns += shift_ps // 1000
            for ev in ln.events if off else ():
                for st in ev.stats:
                    if st.metadata_id in off:
                        kind = st.WhichOneof("value")
                        setattr(st, kind, getattr(st, kind) + shift_ps)
    return xs.SerializeToString()


@pytest.fixture(scope="module")
def two_hosts(shared_traces, tmp_path_factory):
    """A log dir of two run folders, 2 s apart, one host each (b's clocks SHIFT_PS ahead)."""
    root = tmp_path_factory.mktemp("fleet")
    src = shared_traces / V6E
    shutil.copyfile(src, _folder(root, T0 - timedelta(seconds=2)) / "host-a.xplane.pb")
    (_folder(root, T0) / "host-b.xplane.pb").write_bytes(shifted(src.read_bytes(), SHIFT_PS))
    return root


def test_two_hosts_folders_are_one_run(two_hosts, shared_traces):
    d = discover(two_hosts, now=NOW)
    names = [T0.strftime("%Y_%m_%d_%H_%M_%S"), (T0 - timedelta(seconds=2)).strftime("%Y_%m_%d_%H_%M_%S")]
    assert [r.name for r in d.fleet] == names and d.selected == d.fleet
    assert [(f.host, f.run) for f in d.files] == [("host-b", names[0]), ("host-a", names[1])]
    line = next(r for r in d.reasons if r.startswith("read as one run"))
    assert all(n in line for n in names) and "within 2 s" in line and f"within {HOST_GROUP_WINDOW_S:.0f} s" in line
    assert d.warnings == []  # both folders read: nothing left out
    prof = traceview.load(two_hosts, cache=False, stale_after_s=None)
    one = traceview.load(shared_traces / V6E, cache=False)
    devs = prof.device_summary()
    assert devs.height == 8 and sorted(set(devs["host"])) == ["host-a", "host-b"]  # one timeline: not RUN/host
    assert prof.op_events == 2 * one.op_events
    st = prof.stragglers()
    assert st.clock_offsets == {"host-a": 0, "host-b": -SHIFT_PS}
    rep = prof.analyze()
    said = [w for w in rep.warnings if w.startswith("2 run folders read as one capture")]
    assert len(said) == 1 and "host-b -7.654 ms" in said[0] and "disagree" not in said[0]


def test_no_group_hosts_reads_the_newest_folder(two_hosts, capsys):
    assert main(["analyze", str(two_hosts), "--no-cache", "--no-group-hosts", "--stale-days", "0",
                 "--format", "json", "-o", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [f["host"] for f in out["provenance"]["files"]] == ["host-b"]
    assert any("2 runs found; reading the newest" in w for w in out["warnings"])
    assert main(["analyze", str(two_hosts), "--no-cache", "--stale-days", "0", "--format", "json", "-o", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sorted(f["host"] for f in out["provenance"]["files"]) == ["host-a", "host-b"]
    assert not any("runs found" in w for w in out["warnings"])
    assert any("clock offsets against host-a" in w for w in out["warnings"])


def test_a_run_named_or_all_runs_are_not_grouped(two_hosts):
    d = discover(two_hosts, now=NOW, run=T0.strftime("%Y_%m_%d_%H_%M_%S"))
    assert d.fleet == [] and [f.host for f in d.files] == ["host-b"]
    prof = traceview.load(two_hosts, all_runs=True, cache=False, stale_after_s=None)
    assert prof.discovery.fleet == []
    assert len(set(prof.ops["host"])) == 2 and all("/host-" in h for h in set(prof.ops["host"]))  # RUN/host


def test_guards(tmp_path):
    t = T0
    # a host seen again is an earlier session: the group ends there
    _touch(tmp_path / "a", t, "h1")
    _touch(tmp_path / "a", t - timedelta(seconds=3), "h0")
    _touch(tmp_path / "a", t - timedelta(seconds=20), "h1")
    _touch(tmp_path / "a", t - timedelta(seconds=25), "h2")
    d = discover(tmp_path / "a", now=NOW)
    assert [r.hosts[0] for r in d.fleet] == ["h1", "h0"] and len(d.runs) == 4
    assert any("4 runs found; reading the 2 run folders of the newest capture" in w for w in d.warnings)
    # the same host in two folders: two runs, not one fleet
    _touch(tmp_path / "b", t, "h0")
    _touch(tmp_path / "b", t - timedelta(seconds=2), "h0")
    d = discover(tmp_path / "b", now=NOW)
    assert d.fleet == [] and len(d.selected) == 1 and len(d.files) == 1
    # a folder of several hosts is a capture of its own
    _touch(tmp_path / "c", t, "h0")
    _touch(tmp_path / "c", t - timedelta(seconds=2), "h1", "h2")
    assert discover(tmp_path / "c", now=NOW).fleet == []
    _touch(tmp_path / "c2", t, "h0", "h3")
    _touch(tmp_path / "c2", t - timedelta(seconds=2), "h1")
    assert discover(tmp_path / "c2", now=NOW).fleet == []
    # past the window: not grouped, and no time-zone warning (61 s is no quarter hour)
    _touch(tmp_path / "d", t, "h0")
    _touch(tmp_path / "d", t - timedelta(seconds=HOST_GROUP_WINDOW_S + 1), "h1")
    d = discover(tmp_path / "d", now=NOW)
    assert d.fleet == [] and not any("clock or time zone" in w for w in d.warnings)
    # folders under different profile folders are different log dirs
    _touch(tmp_path / "e" / "x", t, "h0")
    _touch(tmp_path / "e" / "y", t - timedelta(seconds=1), "h1")
    assert discover(tmp_path / "e", now=NOW).fleet == []
    assert discover(tmp_path / "a", now=NOW, group_hosts=False).fleet == []


def test_hosts_hours_apart_are_not_grouped_but_named(tmp_path):
    # bad input: a host whose clock (or time zone) is 3 hours off names its folder 3 h away:
    # not read with the newest (folder names alone cannot tell one capture from two
    # sessions), one warning names it and how to read it
    _touch(tmp_path, T0, "h0")
    _touch(tmp_path, T0 - timedelta(hours=3, seconds=2), "h1")
    d = discover(tmp_path, now=NOW)
    assert d.fleet == [] and [f.host for f in d.files] == ["h0"]
    hint = [w for w in d.warnings if "clock or time zone" in w]
    assert len(hint) == 1 and "(host h1) is dated 3 h before" in hint[0] and "--run" in hint[0]
    # a quarter hour apart is no time-zone offset: two sessions, no such warning
    _touch(tmp_path / "q", T0, "h0")
    _touch(tmp_path / "q", T0 - timedelta(minutes=15), "h1")
    assert not any("clock or time zone" in w for w in discover(tmp_path / "q", now=NOW).warnings)


def test_clocks_hours_apart_inside_a_grouped_capture_are_called_out(shared_traces, tmp_path):
    # folders named 1 s apart, but host b's trace clock is 3 h ahead: grouped, and the
    # estimated offset is stated loudly
    src = shared_traces / V6E
    hours = 3 * 3600 * 10**12
    shutil.copyfile(src, _folder(tmp_path, T0 - timedelta(seconds=1)) / "host-a.xplane.pb")
    (_folder(tmp_path, T0) / "host-b.xplane.pb").write_bytes(shifted(src.read_bytes(), hours))
    prof = traceview.load(tmp_path, cache=False, stale_after_s=None)
    assert len(prof.discovery.fleet) == 2
    assert prof.stragglers().clock_offsets == {"host-a": 0, "host-b": -hours}
    said = [w for w in prof.analyze().warnings if w.startswith("2 run folders read as one capture")]
    assert len(said) == 1 and "host-b -3.000 h" in said[0]
    assert "the hosts' clocks disagree by up to 3.000 h: check their time sync" in said[0]
