"""``traceview export``: a step window as an XSpace that XProf's trace viewer opens and as a
Chrome-trace JSON that Perfetto's JSON importer takes.

The XSpace is read back by XProf 2.24.2's own ``trace_viewer`` tool (the independent oracle,
:mod:`oracle`): the window's op events are there with the times XProf gives them in the whole
trace, and traceview's lines are there too. The JSON is checked against Perfetto's importer as
its source states it (``json_trace_tokenizer.cc``: ``ts``/``dur`` µs coerced to integer ns by
``llround(x * 1000)``; ``trace_sorter.h``: complete events sorted by start, longer first;
``slice_tracker.cc``: a complete event that starts inside an open slice and ends after it is
dropped, perfetto issues #6277 and #6251), re-implemented here independently of the writer.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import orjson
import polars as pl
import pytest

import traceview
from traceview.cli import main
from traceview.read.xplane.protos import XSpace

from badinputs import ADD, tpu_xspace
from oracle import xprof_tool_json

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "fixtures" / "greedy_b4"
V6E = "tpu_v6e_4chip_psum.xplane.pb"
MI300X = "mi300x_jax_attention.xplane.pb"
VLLM = "vllm_tpu_qwen"
TRACEVIEW_LINES = ("traceview steps", "traceview families", "traceview exposed communication", "traceview findings")


def export(capsys, *argv) -> tuple[int, str]:
    """``traceview export ARGV --no-cache`` in this process: (exit code, stderr)."""
    rc = main(["export", *map(str, argv), "--no-cache"])
    return rc, capsys.readouterr().err


# -- Perfetto's JSON importer, as its source states it ---------------------------------------

def _ns(us) -> int:
    """``CoerceToTs``: an integral double times 1000, else ``llround(us * 1000)``."""
    if float(us) == math.trunc(us):
        return int(us) * 1000
    x = us * 1000.0
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def perfetto_faults(doc) -> list[str]:
    """What Perfetto's JSON importer would refuse or drop in ``doc``, one line each: an empty
    or non-object event, a phase other than X and M, an X event without a name or with a
    ts/dur that is not a finite number >= 0 (dur), a time not at a whole ps, a thread or
    process without its name, and a complete event dropped for overlapping its parent."""
    faults = []
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    procs, threads, per = set(), set(), {}
    for i, e in enumerate(evs):
        if not isinstance(e, dict) or not e:
            faults.append(f"event {i}: empty")
            continue
        if e.get("ph") == "M":
            a = e.get("args") or {}
            if e.get("name") == "process_name" and isinstance(a.get("name"), str) and a["name"]:
                procs.add(e["pid"])
            if e.get("name") == "thread_name" and isinstance(a.get("name"), str) and a["name"]:
                threads.add((e["pid"], e["tid"]))
            continue
        if e.get("ph") != "X":
            faults.append(f"event {i}: phase {e.get('ph')!r}")
            continue
        if not isinstance(e.get("name"), str) or not e["name"]:
            faults.append(f"event {i}: no name")
        ts, dur = e.get("ts"), e.get("dur")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (ts, dur)) \
                or dur < 0:
            faults.append(f"event {i}: ts/dur {ts!r}/{dur!r}")
            continue
        if abs(ts * 1e6 - round(ts * 1e6)) > 1e-3 or abs(dur * 1e6 - round(dur * 1e6)) > 1e-3:
            faults.append(f"event {i}: ts/dur {ts!r}/{dur!r} not at a whole ps")
        per.setdefault((e["pid"], e["tid"]), []).append((_ns(ts), _ns(dur), i))
    for key, lst in per.items():
        if key[0] not in procs or key not in threads:
            faults.append(f"pid/tid {key}: no process_name/thread_name")
        lst.sort(key=lambda x: (x[0], -x[1], x[2]))
        stack: list[tuple[int, int]] = []  # (end, dur) of the open slices
        for ts, dur, i in lst:
            while stack and (stack[-1][0] < ts or (stack[-1][0] == ts and not (stack[-1][1] == 0 and dur == 0))):
                stack.pop()
            if stack and ts < stack[-1][0] and ts + dur > stack[-1][0]:
                faults.append(f"event {i} on {key}: [{ts}, {ts + dur}) ns overlaps its parent ending at {stack[-1][0]}")
                continue
            stack.append((ts + dur, dur))
    return faults


def test_the_checker_catches_what_perfetto_drops():
    named = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "p"}},
             {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "t"}}]
    ok = named + [{"ph": "X", "pid": 1, "tid": 1, "ts": 0.0, "dur": 2.0, "name": "a"},
                  {"ph": "X", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0, "name": "b"},  # nested, same end
                  {"ph": "X", "pid": 1, "tid": 1, "ts": 2.0, "dur": 1.0, "name": "c"}]  # starts at a's end
    assert perfetto_faults(ok) == []
    overlap = named + [{"ph": "X", "pid": 1, "tid": 1, "ts": 0.0, "dur": 2.0, "name": "a"},
                       {"ph": "X", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.5, "name": "b"}]
    assert len(perfetto_faults(overlap)) == 1
    # nested at the ps ([500, 2000) in [0, 2000)), not at the ns Perfetto rounds to: [1, 3) ns
    # against [0, 2) ns, so it is dropped; the writer splits on the rounded times
    rounding = named + [{"ph": "X", "pid": 1, "tid": 1, "ts": 0.0, "dur": 0.002, "name": "a"},
                        {"ph": "X", "pid": 1, "tid": 1, "ts": 0.0005, "dur": 0.0015, "name": "b"}]
    assert len(perfetto_faults(rounding)) == 1
    assert len(perfetto_faults(named + [{}])) == 1
    assert len(perfetto_faults([{"ph": "X", "pid": 2, "tid": 2, "ts": 0.0, "dur": 1.0, "name": "x"}])) == 1


# -- what the two files hold -------------------------------------------------------------------

def _space(path: Path) -> XSpace:
    return XSpace.FromString(path.read_bytes())


def _xspace_events(space) -> dict:
    """(plane, line) -> sorted [(name, start ps, dur ps)] of an XSpace's events."""
    out = {}
    for p in space.planes:
        for ln in p.lines:
            for e in ln.events:
                m = p.event_metadata.get(e.metadata_id) if e.metadata_id in p.event_metadata else None
                name = (m.display_name or m.name) if m is not None else f"event {e.metadata_id}"
                out.setdefault((p.name, ln.display_name or ln.name), []).append(
                    (name, ln.timestamp_ns * 1000 + e.offset_ps, e.duration_ps))
    return {k: sorted(v) for k, v in out.items()}


def _json_events(doc) -> dict:
    """(process, thread without its ' [k]' split) -> sorted [(name, start ps, dur ps)]."""
    origin = doc["otherData"]["time_origin_ps"]
    pn, tn, out = {}, {}, {}
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name":
            pn[e["pid"]] = e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_name":
            tn[(e["pid"], e["tid"])] = re.sub(r" \[\d+\]$", "", e["args"]["name"])
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            out.setdefault((pn[e["pid"]], tn[(e["pid"], e["tid"])]), []).append(
                (e["name"], origin + round(e["ts"] * 1e6), round(e["dur"] * 1e6)))
    return {k: sorted(v) for k, v in out.items()}


def _viewer(path: Path) -> list[tuple]:
    """XProf's trace_viewer events of ``path``: (process, thread, name, ts µs, dur µs)."""
    t = xprof_tool_json(path, "trace_viewer")
    names = {}
    for e in t["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
    return [(names.get(e["pid"]), names.get((e["pid"], e.get("tid"))), e["name"], e["ts"], e.get("dur"))
            for e in t["traceEvents"] if e.get("ph") == "X"]


@pytest.fixture(scope="module")
def v6e_export(shared_traces, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "v6e_10_12"
    assert main(["export", str(shared_traces / V6E), "--steps", "10:12", "-o", str(out), "--no-cache"]) == 0
    return out


def test_xprof_trace_viewer_opens_the_v6e_window(v6e_export, shared_traces):
    """XProf's trace viewer on the exported steps 10..12 shows, on every TPU, the three steps
    on traceview's steps line and the families line, and every XLA Ops event of TPU:0 that XProf
    shows inside that window in the whole trace, at the same time and duration."""
    got = _viewer(v6e_export.with_suffix(".xplane.pb"))
    whole = _viewer(shared_traces / V6E)
    for dev in ("/device:TPU:0", "/device:TPU:1", "/device:TPU:2", "/device:TPU:3"):
        steps = sorted(e[2] for e in got if e[0] == dev and e[1] == "traceview steps")
        assert [s.split(" ·")[0] for s in steps] == ["step 10", "step 11", "step 12"], (dev, steps)
        assert any(e[0] == dev and e[1] == "traceview families" for e in got)
    assert any(e[1] == "traceview findings" for e in got)
    ops = [e for e in got if e[0] == "/device:TPU:0" and e[1] == "XLA Ops"]
    lo, hi = min(e[3] for e in ops), max(e[3] + e[4] for e in ops)
    inside = [e for e in whole if e[0] == "/device:TPU:0" and e[1] == "XLA Ops" and e[3] >= lo and e[3] + e[4] <= hi]
    assert len(inside) >= 3 * 15 - 2  # 15 ops a step (the steps table), the window's two ends may be cut
    assert set(inside) <= set(ops)
    # the three steps' program executions are there (the first may be cut where the window starts)
    assert len([e for e in got if e[0] == "/device:TPU:0" and e[1] == "XLA Modules"]) >= 3


def test_the_v6e_json_obeys_perfetto_and_holds_the_xspace(v6e_export):
    doc = orjson.loads(v6e_export.with_suffix(".json").read_bytes())
    assert perfetto_faults(doc) == []
    space = _xspace_events(_space(v6e_export.with_suffix(".xplane.pb")))
    assert _json_events(doc) == space  # every event, at the same ps, on its plane and line
    # the step slices sit where the steps table puts them, moved onto the host-aligned clock by
    # the ops' median device-minus-host offset: the first step starts at the first op's device start
    steps = [e for e in space[("/device:TPU:0", "traceview steps")]]
    plane = next(p for p in _space(v6e_export.with_suffix(".xplane.pb")).planes if p.name == "/device:TPU:0")
    sid = {v.name: k for k, v in plane.stat_metadata.items()}
    dev, delta = [], []
    for ln in plane.lines:
        if ln.name == "XLA Ops":
            for e in ln.events:
                d = next(st.int64_value or st.uint64_value for st in e.stats if st.metadata_id == sid["device_offset_ps"])
                dev.append(d)
                delta.append(d - (ln.timestamp_ns * 1000 + e.offset_ps))
    assert len(dev) == 3 * 15  # three steps of 15 ops
    assert abs(steps[0][1] + int(np.median(delta)) - min(dev)) <= 2_000_000


ENGINE_LIKE = [("engine", None), ("vllm", VLLM), ("mi300x", MI300X)]


@pytest.mark.parametrize(("label", "name"), ENGINE_LIKE, ids=[x[0] for x in ENGINE_LIKE])
def test_default_window_of_an_engine_vllm_and_mi300x_trace(label, name, shared_traces, tmp_path, capsys):
    """The default window (the median step and its neighbours, the steps table's own
    numbers) of the engine fixture, the vLLM trace (a .trace.json.gz) and an MI300X trace: XProf
    opens the XSpace with traceview's lines, the JSON obeys Perfetto's importer and holds the
    same events."""
    src = ENGINE if name is None else shared_traces / name
    rc, err = export(capsys, src, "-o", tmp_path / "w.json")
    assert rc == 0, err
    assert "the median step and its neighbours" in err
    assert ("holds no HLO protos, so the exported XSpace read again" in err) == (name == VLLM)
    assert main(["analyze", str(src), "--format", "json", "--no-cache"]) == 0
    rep = json.loads(capsys.readouterr().out)
    recs = rep["steps"]["records"]
    a, b = (int(x) for x in re.search(r"note: steps (\d+):(\d+)", err).groups())
    assert f" --steps {a}:{b} -o " in rep["steps"]["export_command"]
    got = _viewer(tmp_path / "w.xplane.pb")
    lines = {e[1] for e in got}
    assert "traceview steps" in lines and "traceview families" in lines
    shown = sorted({e[2].split(" ·")[0] for e in got if e[1] == "traceview steps"})
    assert shown == sorted({f"step {s}" for s in range(a, b + 1)})
    assert {r["step"] for r in recs} >= set(range(a, b + 1))
    doc = orjson.loads((tmp_path / "w.json").read_bytes())
    assert perfetto_faults(doc) == []
    assert _json_events(doc) == _xspace_events(_space(tmp_path / "w.xplane.pb"))
    if name == VLLM:  # TPU ops, converted from JSON: their exposed communication and findings are drawn
        assert "traceview exposed communication" in lines


def test_findings_name_the_ops_they_cite_and_print_their_export(tmp_path, capsys):
    """Each finding of the engine fixture is a marker named by its id on the findings line, on
    the op it cites when that op runs in the window; the terminal and JSON print its command,
    which runs as printed."""
    assert main(["analyze", str(ENGINE), "--format", "json", "--no-cache"]) == 0
    rep = json.loads(capsys.readouterr().out)
    cmds = {f["id"]: f["export_command"] for f in rep["findings"]}
    assert cmds and all(c.startswith("traceview export ") for c in cmds.values())
    assert main(["analyze", str(ENGINE), "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert all(f"timeline: {c}" in out for c in cmds.values())
    argv = next(iter(cmds.values())).split()[1:]
    argv[argv.index("-o") + 1] = str(tmp_path / "f")
    assert main(argv + ["--no-cache"]) == 0
    capsys.readouterr()
    space = _xspace_events(_space(tmp_path / "f.xplane.pb"))
    marks = space[("/host:CPU", "traceview findings")]
    assert sorted(m[0].split(":")[1].split(" —")[0].strip() for m in marks) == sorted(cmds)
    ops = {o for (p, ln), evs in space.items() if not ln.startswith("traceview") for o in evs}
    for name, start, dur in marks:
        if " — " in name:  # on a cited op: the marker spans one of the window's events of that name
            op = name.split(" — ")[1]
            assert any(o[0] == op or op in o[0] for o in ops if o[1] == start and o[2] == dur), name


# -- the window's edges and bad input -------------------------------------------------------------

def _no_steps_trace(tmp_path) -> Path:
    """A TPU trace with three ops and no program executions (so no steps): [0, 1000),
    [2000, 3000), [5000, 6000) ps."""
    xs = tpu_xspace(((ADD, "add.1", 0, 1000), (ADD, "add.1", 2000, 1000), (ADD, "add.1", 5000, 1000)))
    del xs.planes[0].lines[0]
    (tmp_path / "in").mkdir(exist_ok=True)  # its own folder: an exported trace may not go beside it
    p = tmp_path / "in" / "nosteps.xplane.pb"
    p.write_bytes(xs.SerializeToString())
    return p


def test_a_trace_without_steps_is_exported_by_time(tmp_path, capsys):
    src = _no_steps_trace(tmp_path)
    rc, err = export(capsys, src, "-o", tmp_path / "whole")
    assert rc == 0 and "no steps: exported whole" in err
    assert [e[1:] for e in _xspace_events(_space(tmp_path / "whole.xplane.pb"))[("/device:TPU:0", "XLA Ops")]] == \
        [(0, 1000), (2000, 1000), (5000, 1000)]
    rc, err = export(capsys, src, "--window-ps", "1500:2500", "-o", tmp_path / "cut")
    assert rc == 0, err
    # the op straddling the window's end is clipped to it; the others are out
    assert [e[1:] for e in _xspace_events(_space(tmp_path / "cut.xplane.pb"))[("/device:TPU:0", "XLA Ops")]] == \
        [(2000, 500)]
    assert perfetto_faults(orjson.loads((tmp_path / "cut.json").read_bytes())) == []


BAD = [
    ("steps outside", lambda src, t: [src, "--steps", "1000:1002", "-o", t / "o"], "outside the trace: its steps are numbered"),
    ("A after B", lambda src, t: [src, "--steps", "12:10", "-o", t / "o"], "A is after B"),
    ("not numbers", lambda src, t: [src, "--steps", "a:b", "-o", t / "o"], "expected A:B"),
    ("both windows", lambda src, t: [src, "--steps", "1:2", "--window-ps", "0:5", "-o", t / "o"], "not allowed with"),
    ("into the profile tree", lambda src, t: [src, "-o", src / "plugins" / "profile" / "w"], "refusing to write"),
    ("into a run folder", lambda src, t: [src, "-o", next((src / "plugins" / "profile").iterdir()) / "w"],
     "refusing to write"),
    ("no output", lambda src, t: [src, "-o", ""], "-o needs a file name"),
    ("output a folder", lambda src, t: [src, "-o", f"{t}/"], "-o needs a file name"),
    # a device: /dev/null.xplane.pb and /dev/null.json would be made beside it
    ("output a device", lambda src, t: [src, "-o", "/dev/null"], "/dev/null is not a file (a device or a pipe)"),
    ("negative step", lambda src, t: [src, "--steps=-1:2", "-o", t / "o"], "step numbers start at 0"),
    ("empty time window", lambda src, t: [src, "--window-ps", "0:0", "-o", t / "o"], "is empty: give START < END"),
    ("negative time", lambda src, t: [src, "--window-ps=-5:10", "-o", t / "o"], "START is ps after the first op event"),
    ("negative time, spaced", lambda src, t: [src, "--window-ps", "-5:10", "-o", t / "o"], "0 or more"),
]


@pytest.mark.parametrize("case", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case, tmp_path, capsys):
    label, argv, says = case
    src = tmp_path / "engine"
    shutil.copytree(ENGINE, src)
    before = sorted(p for p in tmp_path.rglob("*"))
    rc, err = export(capsys, *argv(src, tmp_path))
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("traceview: error: ") and says in lines[0], err
    assert sorted(p for p in tmp_path.rglob("*")) == before


def test_no_steps_bad_windows(tmp_path, capsys):
    src = _no_steps_trace(tmp_path)
    for argv, says in ((["--steps", "1:2"], "the trace has no steps"),
                       (["--window-ps", "7000:8000"], "outside the trace: it spans 0:6000 ps")):
        rc, err = export(capsys, src, *argv, "-o", tmp_path / "o")
        assert rc == 2 and err.count("\n") == 1 and says in err and str(src) in err, err
    assert not list(tmp_path.glob("o*"))


def test_rounding_to_ns_splits_what_perfetto_would_drop():
    """Two events nested at the ps but not at the ns Perfetto rounds to go to two threads."""
    from traceview.render.timeline import chrome_trace

    xs = tpu_xspace(((ADD, "add.1", 0, 2000), (ADD, "add.1", 500, 1500)))
    doc = orjson.loads(chrome_trace([("", xs)]))
    assert perfetto_faults(doc) == []
    tids = {e["tid"] for e in doc["traceEvents"] if e["ph"] == "X" and e["name"] == "add.1"}
    assert len(tids) == 2


def test_two_hosts_give_one_xspace_each_and_one_json(tmp_path, capsys):
    """A run of two hosts (two files): ``OUT.<host>.xplane.pb`` each with its own steps line,
    and one JSON whose processes are named by host and plane."""
    run = tmp_path / "log" / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    src = next((ENGINE / "plugins" / "profile").iterdir()) / "engine-cpu.xplane.pb"
    for h in ("hosta", "hostb"):
        shutil.copyfile(src, run / f"{h}.xplane.pb")
    rc, err = export(capsys, tmp_path / "log", "--steps", "1:1", "-o", tmp_path / "w")
    assert rc == 0, err
    for h in ("hosta", "hostb"):
        ev = _xspace_events(_space(tmp_path / f"w.{h}.xplane.pb"))
        assert [e[0].split(" ·")[0] for e in ev[("/host:CPU", "traceview steps")]] == ["step 1"]
    doc = orjson.loads((tmp_path / "w.json").read_bytes())
    assert perfetto_faults(doc) == []
    procs = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert {"hosta: /host:CPU", "hostb: /host:CPU"} <= procs


def test_the_window_is_the_same_without_the_c_decoder(shared_traces, monkeypatch):
    """The pure-Python path (no C decoder: the file read whole, each line decoded at once)
    cuts the same XSpace as the C path (mapped, in pieces)."""
    from traceview.read import window
    from traceview.read.xplane import wire

    t0 = 19500317903750  # the v6e trace's step 0 on TPU:0 (its steps table, device clock); two steps on
    w = window.Window(t0 + 10 * 784_000_000_000, t0 + 12 * 784_000_000_000)
    a = window.xspace_window(str(shared_traces / V6E), w)
    monkeypatch.setattr(wire, "_fast", None)
    b = window.xspace_window(str(shared_traces / V6E), w)
    assert a.events == b.events > 400 and a.shifts == b.shifts
    assert a.space.SerializeToString() == b.space.SerializeToString()


def test_a_window_too_large_is_refused(shared_traces, tmp_path, capsys, monkeypatch):
    """Over the event cap: one line, exit 6 (limit exceeded), nothing written."""
    from traceview.read import window

    monkeypatch.setattr(window, "MAX_WINDOW_EVENTS", 100)
    rc, err = export(capsys, shared_traces / V6E, "--steps", "10:12", "-o", tmp_path / "w")
    assert rc == 6 and err.count("\n") == 1 and "more than 100 trace events" in err, err
    assert not list(tmp_path.iterdir())


def test_a_finding_that_cites_a_step_exports_that_step():
    """A finding whose evidence names a step (as warmup-in-window's does) gets the command of
    that step and its neighbours; the others, and the steps summary, the median step's."""
    import traceview
    from traceview.analysis.export import attach_export_commands, cited_ops, cited_step
    from traceview.analysis.findings import Finding
    from traceview.analysis.report import build_report

    rep = build_report(traceview.load(ENGINE, cache=False))
    rep.findings = [Finding("x", "medium", "s", {"steps": [{"host": "h", "step": 2, "duration_ps": 1}]}),
                    Finding("y", "medium", "s", {"populations": [{"op_name": "dot.3"}], "ops": ["fusion.1"]})]
    attach_export_commands(rep)
    assert rep.findings[0].export_command.endswith("--steps 1:2 -o steps_1_2")  # step 2 is the last
    assert rep.findings[1].export_command == rep.export_command
    assert cited_step(rep.findings[0].evidence) == 2 and cited_step({"n_steps": 3}) is None
    assert cited_ops(rep.findings[1].evidence) == ["fusion.1", "dot.3"]


def test_default_window_holds_the_step_nearest_the_median_shown(shared_traces):
    """On the 4-chip v6e trace (100 steps on 4 devices) the default window is centred on the
    step holding the device-step nearest the median the step summary shows (the median over
    the window's 400 device-steps), not on a mean over devices (which picked step 0)."""
    from traceview.analysis.export import default_steps

    prof = traceview.load(shared_traces / "tpu_v6e_4chip_psum.xplane.pb", stale_after_s=None)
    anat = prof.analyze().steps
    st = anat.steps.filter(pl.col("in_window"))
    assert st.height == 400
    d = st["duration_ps"].to_numpy().astype(float)
    med = float(np.median(d))
    gap = np.abs(d - med)
    nearest = int(st["step"].to_numpy()[gap == gap.min()].min())  # the lowest step on a tie
    a, b = default_steps(anat)
    assert (a, b) == (nearest - 1, nearest + 1) and nearest != 0


def test_steps_past_the_last_are_exported_as_there_are(tmp_path, capsys, shared_traces):
    """``--steps 98:1000`` on a trace of steps 0..99: steps 98:99 exported and said so (it
    echoed 98:1000 as if exported)."""
    rc, err = export(capsys, shared_traces / "tpu_v6e_4chip_psum.xplane.pb", "--steps", "98:1000", "-o", tmp_path / "w")
    assert rc == 0, err
    assert "--steps 98:1000 runs past the last step: exporting steps 98:99" in err
    assert "traceview: steps 98:99 (" in err


@pytest.mark.parametrize("steps", [None, "3:3", "10:12", "98:99"])
def test_an_exported_window_read_back_keeps_its_steps(shared_traces, tmp_path, capsys, steps):
    """A v6e export (the default steps 26:28, one step, the README's 10:12, the last two) read
    back: on every TPU exactly the window's steps, each with the original's ops, start and
    duration (within 2 µs: the device clock is rebuilt from the host-aligned one). Each op is
    placed by its own device clock and a program execution kept whole: one plane-wide clock
    offset (off by up to ~0.2 s for single events on this trace) dropped the window's first
    copy-starts and cut the neighbouring executions into fragments that read back as steps
    (19 device-steps of median 577.9 ms for 10:12)."""
    src = shared_traces / "tpu_v6e_4chip_psum.xplane.pb"
    rc, err = export(capsys, src, *(["--steps", steps] if steps else []), "-o", tmp_path / "w")
    a, b = (26, 28) if steps is None else map(int, steps.split(":"))
    assert rc == 0 and f"steps {a}:{b}" in err, err
    orig = traceview.load(src, stale_after_s=None).analyze(step_window="all").steps.steps
    back = traceview.load(tmp_path / "w.xplane.pb", stale_after_s=None, cache=False).analyze(step_window="all").steps.steps
    assert sorted(set(back["device"])) == sorted(set(orig["device"]))
    for dev in sorted(set(orig["device"])):
        o = orig.filter((pl.col("device") == dev) & pl.col("step").is_between(a, b)).sort("step")
        k = back.filter(pl.col("device") == dev).sort("start_ps")
        assert k.height == o.height == b - a + 1, dev
        assert k["ops"].to_list() == o["ops"].to_list(), dev
        assert (abs(k["start_ps"] - o["start_ps"]) <= 2_000_000).all(), dev
        assert (abs(k["duration_ps"] - o["duration_ps"]) <= 2_000_000).all(), dev


def test_an_exported_trace_never_lands_beside_the_trace_it_is_cut_from(tmp_path, capsys):
    """-o in the folder of a loose trace read: refused before any work (the folder's next read
    would take the exported window for one of its traces); elsewhere it is written."""
    src = _no_steps_trace(tmp_path)
    rc, err = export(capsys, src, "-o", src.parent / "cut")
    assert rc == 2 and err.count("\n") == 1 and "which holds the trace it is cut from" in err
    assert sorted(p.name for p in src.parent.iterdir()) == ["nosteps.xplane.pb"]
    # nor a folder below it: the folder's next read looks into its subfolders
    (src.parent / "sub" / "deeper").mkdir(parents=True)
    rc, err = export(capsys, src, "-o", src.parent / "sub" / "deeper" / "cut")
    assert rc == 2 and err.count("\n") == 1 and f"written under {src.parent.resolve()}," in err, err
    assert not any((src.parent / "sub" / "deeper").iterdir())
    rc, err = export(capsys, src, "-o", tmp_path / "cut")
    assert rc == 0 and (tmp_path / "cut.xplane.pb").exists()


#: (trace, steps, device, a step of the range: (step, start_ps, duration_ps, ops, op_time_ps))
GPU_ROUND_TRIPS = [
    # the window's last step: four trailing ops (1.36 ms after its program's op) went unread,
    # past the read-back's last step (its start plus the window's longest step period)
    ("mi300x_jax_gemm_sweep.xplane.pb", "9:11", (11, 6_348_688_000, 1_581_442_000, 5, 609_321_000)),
    # one step: read back, the dominant program was another (jit_dot ran once), four steps
    ("mi300x_jax_attention.xplane.pb", "6:6", (6, 2_837_573_000, 1_286_002_000, 9, 626_560_000)),
    # the window's op counts chose another anchor op for the executions: other step bounds
    ("mi300x_jax_conv3d.xplane.pb", "0:2", (1, 88_524_247_000, 4_141_886_000, 5, 710_721_000)),
]


@pytest.mark.parametrize(("name", "steps", "pinned"), GPU_ROUND_TRIPS, ids=[t[0].split("_")[2] for t in GPU_ROUND_TRIPS])
def test_a_gpu_export_read_back_has_the_steps_it_was_cut_at(shared_traces, tmp_path, capsys, name, steps, pinned):
    """An MI300X export read back: on every GPU exactly the exported steps, each with the
    original's start, duration, op count and op time to the ps. A GPU trace's steps are its
    dominant program's executions derived from the whole trace's ops, which the window's ops
    alone did not give again; the export's ``traceview steps`` line is read back as the steps,
    numbered as in the trace they were cut from."""
    src = shared_traces / name
    rc, err = export(capsys, src, "--steps", steps, "-o", tmp_path / "w")
    assert rc == 0, err
    a, b = map(int, steps.split(":"))
    cols = ["start_ps", "duration_ps", "ops", "op_time_ps"]
    orig = traceview.load(src, stale_after_s=None).analyze(step_window="all").steps
    back = traceview.load(tmp_path / "w.xplane.pb", stale_after_s=None, cache=False).analyze(step_window="all").steps
    o = orig.steps.filter(pl.col("step").is_between(a, b))
    assert orig.method == "module" and back.method == "markers"
    assert any("steps are the 'traceview steps' line of a traceview export" in n for n in back.notes)
    assert back.steps.height == o.height > 0
    for dev in sorted(set(o["device"])):  # the steps keep their numbers (they counted from 0 once)
        want = o.filter(pl.col("device") == dev).sort("step").select(["step", *cols]).rows()
        got = back.steps.filter(pl.col("device") == dev).sort("start_ps").select(["step", *cols]).rows()
        assert got == want, dev
    step, *figures = pinned
    assert tuple(figures) in back.steps.filter(pl.col("device") == "/device:GPU:0").select(cols).rows()
    assert tuple(figures) == o.filter((pl.col("device") == "/device:GPU:0") & (pl.col("step") == step)).select(cols).row(0)


def test_an_export_of_an_export_draws_traceview_lines_once(shared_traces, tmp_path, capsys):
    """Cutting steps 6:7 out of an export of steps 6:8 (the timeline command analyze suggests
    for it) replaces the window's traceview lines: read back, steps 6 and 7 once each, as in
    the first export (they were copied and drawn again: four steps, each real one followed by
    a twin of 0 ops)."""
    (tmp_path / "a").mkdir()
    rc, err = export(capsys, shared_traces / "mi300x_jax_gemm_sweep.xplane.pb", "--steps", "6:8", "-o", tmp_path / "a" / "w")
    assert rc == 0, err
    rc, err = export(capsys, tmp_path / "a" / "w.xplane.pb", "--steps", "6:7", "-o", tmp_path / "w2")
    assert rc == 0, err
    cols = ["step", "start_ps", "duration_ps", "ops", "op_time_ps"]
    first = traceview.load(tmp_path / "a" / "w.xplane.pb", cache=False).analyze(step_window="all").steps.steps
    again = traceview.load(tmp_path / "w2.xplane.pb", cache=False).analyze(step_window="all").steps.steps
    assert again["step"].to_list() == [6, 7]
    assert again.select(cols).rows() == first.filter(pl.col("step") <= 7).select(cols).rows()
    for plane in _space(tmp_path / "w2.xplane.pb").planes:
        names = [ln.name for ln in plane.lines if ln.name.startswith("traceview ")]
        assert len(names) == len(set(names)), plane.name
    assert any(ln.name == "traceview steps" for p in _space(tmp_path / "w2.xplane.pb").planes for ln in p.lines)


def test_a_failed_json_write_leaves_no_xplane_behind(tmp_path, capsys, monkeypatch):
    """The disk filling up while ``OUT.json`` is written: exit 2 naming it, and neither
    ``OUT.xplane.pb`` (written first) nor a temporary file is left in the folder."""
    import errno
    import os as _os

    import traceview.read.guard as guard

    real = _os.fdopen

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    def fdopen(fd, *a, **k):
        fh = real(fd, *a, **k)
        return Full(fh) if ".json." in _os.readlink(f"/proc/self/fd/{fd}") else fh

    monkeypatch.setattr(guard.os, "fdopen", fdopen)
    out = tmp_path / "out"
    out.mkdir()
    rc, err = export(capsys, ENGINE, "-o", out / "w")
    assert rc == 2 and "cannot write" in err and "w.json: No space left on device" in err, err
    assert list(out.iterdir()) == []


def test_an_output_linked_to_a_device_is_refused(tmp_path, capsys):
    """-o OUT whose OUT.xplane.pb is a symbolic link to /dev/null: refused (exit 2, one line)
    before the trace is read, not 'wrote OUT.xplane.pb' with the window gone to /dev/null."""
    (tmp_path / "nul.xplane.pb").symlink_to("/dev/null")
    rc, err = export(capsys, ENGINE, "-o", tmp_path / "nul")
    assert rc == 2 and err.strip() == (f"traceview: error: refusing to write {tmp_path}/nul.xplane.pb: it is not a "
                                       "file (a device or a pipe, or a link to one)"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nul.xplane.pb"]
