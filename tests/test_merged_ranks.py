"""Merged ranks (issue 27.3): one XSpace holding several ranks' planes, built at test time by
``benchmarks/merge_ranks.py`` (the layouts of tpu-inference's ``merge_xprof.py``) from copies
of the shared traces and fixtures: every plane kept, each rank's devices under their own host,
the ranks told apart where the planes say so."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import polars as pl
import pytest

import traceview
from traceview.cli import main
from traceview.model.from_xplane import read_xplane
from traceview.model.ranks import plane_ranks
from traceview.read.xplane.protos import XSpace

ROOT = Path(__file__).resolve().parents[1]
V6E = "tpu_v6e_4chip_psum.xplane.pb"
#: the op columns a rank's device must give exactly as the original file's device
SAME = ["line", "module", "program_id", "op_name", "op_kind", "category", "shape", "hlo_text", "kernel", "start_ps",
        "duration_ps", "self_ps", "count", "source_file", "source_line", "framework_op", "flops", "bytes_accessed",
        "cost_source"]


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


merge_ranks = _bench("merge_ranks")


def _ranks_of(tmp: Path, src: Path, n: int) -> list[Path]:
    """``n`` copies of ``src`` named as a DP run names its ranks (dp0_..., dp1_...): the
    originals are never touched."""
    out = []
    for k in range(n):
        p = tmp / f"dp{k}_w-0.xplane.pb"
        shutil.copyfile(src, p)
        out.append(p)
    return out


def _cols(ops: pl.DataFrame) -> list[str]:
    return [c for c in SAME if c in ops.columns]


def _rows(ops: pl.DataFrame) -> pl.DataFrame:
    return ops.select(_cols(ops)).sort(_cols(ops), nulls_last=True)


@pytest.fixture(scope="module")
def original(shared_traces):
    return traceview.load(shared_traces / V6E, cache=False)


@pytest.mark.parametrize("mode", ["renumber", "naive", "prefix"])
def test_two_ranks_of_the_v6e_trace_keep_every_device(shared_traces, tmp_path, original, mode):
    ranks = _ranks_of(tmp_path, shared_traces / V6E, 2)
    merged = tmp_path / "out" / "merged.xplane.pb"
    info = merge_ranks.merge(ranks, merged, mode)
    assert info["planes"] == 14
    prof = traceview.load(merged, cache=False)
    labels = {"prefix": ["dp0_w-0", "dp1_w-0"]}.get(mode, ["rank0", "rank1"])
    hosts = [f"merged/{lb}" for lb in labels]
    devs = prof.device_summary()
    assert devs.height == 8 and sorted(set(devs["host"])) == hosts
    assert prof.op_events == 2 * original.op_events == 2 * 6013
    o = original.ops
    for k, h in enumerate(hosts):
        for i in range(4):
            # renumbered planes: rank k's /device:TPU:i is /device:TPU:(4k + i)
            dev = f"/device:TPU:{4 * k + i if mode == 'renumber' else i}"
            got = prof.ops.filter((pl.col("host") == h) & (pl.col("device") == dev))
            want = o.filter(pl.col("device") == f"/device:TPU:{i}")
            assert got.height == want.height > 1000
            assert _rows(got).equals(_rows(want), null_equal=True), (mode, h, dev)
    # one line says how the ranks were told apart
    notes = [w for w in prof.warnings if "ranks' planes" in w]
    assert len(notes) == 1 and all(h in notes[0] for h in hosts)
    want_how = {"renumber": "rank numbers on the host planes", "naive": "plane names repeated",
                "prefix": "planes named '<rank>: <plane>'"}[mode]
    assert want_how in notes[0]
    assert ("plane ids collide too" in notes[0]) == (mode == "naive")
    # each rank's step markers and module runs stay its own
    assert sorted(set(prof.module_runs["host"])) == hosts
    per = prof.module_runs.group_by("host").len()
    assert per["len"].to_list() == [original.module_runs.height] * 2


def test_naive_concat_keeps_every_plane_oracle(shared_traces, tmp_path):
    # the plain concatenation: names and plane ids collide in every field; the op events per
    # (rank, device) are the XLA Ops events of that plane, counted off the raw XSpace
    ranks = _ranks_of(tmp_path, shared_traces / V6E, 3)
    merged = tmp_path / "concat.xplane.pb"
    merge_ranks.merge(ranks, merged, "naive")
    xs = XSpace()
    xs.ParseFromString(merged.read_bytes())
    names = [p.name for p in xs.planes]
    assert names.count("/device:TPU:0") == 3 and len({p.id for p in xs.planes if p.name == "/device:TPU:0"}) == 1
    want = {}
    seen: dict = {}
    for p in xs.planes:
        if p.name.startswith("/device:TPU:"):
            k = seen.get(p.name, 0)
            seen[p.name] = k + 1
            want[(f"concat/rank{k}", p.name)] = sum(len(ln.events) for ln in p.lines if ln.name == "XLA Ops")
    td = read_xplane(merged)
    got = {(h, d): n for h, d, n in td.ops.group_by("host", "device").agg(pl.col("count").sum()).iter_rows()}
    assert got == want and len(got) == 12
    assert len(td.devices) == 12 and {d.host for d in td.devices} == {f"concat/rank{k}" for k in range(3)}


def test_renumbered_gpu_ranks_keep_their_shapes(shared_traces, tmp_path):
    # GPU ops get their shapes from /host:metadata: renumbered to '/host:metadata 1', it is
    # still each rank's metadata plane
    src = shared_traces / "mi300x_jax_gemm_sweep.xplane.pb"
    merged = tmp_path / "gpu.xplane.pb"
    merge_ranks.merge(_ranks_of(tmp_path, src, 2), merged, "renumber")
    one, two = read_xplane(src), read_xplane(merged)
    assert len(two.devices) == 16 and {d.name for d in two.devices} == {f"/device:GPU:{i}" for i in range(16)}
    assert two.ops.height == 2 * one.ops.height > 0
    assert (two.ops["shape"] != "").sum() == 2 * (one.ops["shape"] != "").sum() > 0
    a = _rows(one.ops)
    for h in ("gpu/rank0", "gpu/rank1"):
        assert _rows(two.ops.filter(pl.col("host") == h)).equals(a, null_equal=True)


def test_merged_cpu_ranks_keep_their_virtual_devices_and_stragglers(tmp_path):
    # XLA:CPU ranks (ops on /host:CPU, 8 virtual devices each): two ranks, 16 devices; each
    # rank's straggler analysis is the original's
    src = next((ROOT / "fixtures" / "straggler_8dev").rglob("*.xplane.pb"))
    merged = tmp_path / "cpu.xplane.pb"
    merge_ranks.merge(_ranks_of(tmp_path, src, 2), merged, "naive")
    one, two = traceview.load(src, cache=False), traceview.load(merged, cache=False)
    assert two.device_summary().height == 16 == 2 * one.device_summary().height
    assert two.op_events == 2 * one.op_events
    assert two.step_markers.height == 2 * one.step_markers.height
    for h in ("cpu/rank0", "cpu/rank1"):
        assert _rows(two.ops.filter(pl.col("host") == h)).equals(_rows(one.ops), null_equal=True)


def test_hundreds_of_colliding_planes_all_kept(tmp_path):
    # past the 256 planes a host has (issue 23 removed that cap): 2 x 160 planes named
    # /device:TPU:0..159 with colliding ids, concatenated; every plane is a device of its rank
    big = _bench("big_xplane")
    a, b = tmp_path / "a.xplane.pb", tmp_path / "b.xplane.pb"
    a.write_bytes(big.many_planes(160, ops=4))
    shutil.copyfile(a, b)
    merged = tmp_path / "many.xplane.pb"
    assert merge_ranks.merge([a, b], merged, "naive")["planes"] == 320
    td = read_xplane(merged)
    assert len(td.devices) == 320 and td.table.height == 320 * 4
    per = td.ops.group_by("host", "device").len()
    assert per.height == 320 and set(per["len"]) == {4} and set(per["host"]) == {"many/rank0", "many/rank1"}


def test_a_plane_name_seen_once_per_rank_is_not_split():
    # the rules on plane names alone (no file): one rank reads as before, nothing renamed
    class P:
        def __init__(self, name, id_=0):
            self.name, self.id, self.stat_metadata, self.stats = name, id_, {}, []

    one = plane_ranks([P("/device:TPU:0"), P("/device:TPU:1"), P("/host:metadata"), P("/host:CPU"),
                       P("Task Environment")])
    assert one.labels == [""] and one.note("f", "h") is None and one.host(0, "h") == "h"
    gpu_order = ["/host:metadata 0", "/device:GPU:0", "/device:GPU:1", "/host:CPU 0", "Task Environment 0",
                 "/host:metadata 1", "/device:GPU:2", "/device:GPU:3", "/host:CPU 1", "Task Environment 1"]
    r = plane_ranks([P(n) for n in gpu_order])
    assert r.labels == ["rank0", "rank1"] and r.rank == [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert r.names[5] == "/host:metadata" and r.names[8] == "/host:CPU"
    # two host groups renumbered independently (rank numbers restart): four ranks
    two_hosts = ["/device:TPU:0", "/host:CPU 0", "/device:TPU:1", "/host:CPU 1",
                 "/device:TPU:0", "/host:CPU 0", "/device:TPU:1", "/host:CPU 1"]
    r = plane_ranks([P(n) for n in two_hosts])
    assert r.labels == ["rank0.0", "rank0.1", "rank1.0", "rank1.1"] and r.rank == [0, 0, 1, 1, 2, 2, 3, 3]
    # a concatenation whose XSpace lists one distinct hostname per rank: ranks named by host
    r = plane_ranks([P("/device:TPU:0", 1), P("/host:CPU", 2), P("/device:TPU:0", 1), P("/host:CPU", 2)],
                    ["w-0", "w-1"])
    assert r.labels == ["w-0", "w-1"] and r.ids_collide


def test_ranks_named_by_their_core_details_hostname():
    # two ranks' TPU planes whose core_details (OpenXLA CoreDetails: hostname 1, device_ordinal
    # 2, ...) name their hosts: the ranks take those names
    from traceview.read.xplane.protos import XPlane

    planes = []
    for host in ("w-0", "w-1"):
        for ordinal in (0, 1):
            p = XPlane()
            p.name, p.id = f"/device:TPU:{ordinal}", ordinal + 1
            p.stat_metadata[7].id, p.stat_metadata[7].name = 7, "core_details"
            st = p.stats.add()
            st.metadata_id = 7
            st.bytes_value = b"\x0a" + bytes([len(host)]) + host.encode() + b"\x10" + bytes([ordinal])
            planes.append(p)
    r = plane_ranks(planes)
    assert r.labels == ["w-0", "w-1"] and r.rank == [0, 0, 1, 1] and r.host(3, "m") == "m/w-1"


def test_cli_reads_a_fully_colliding_merge_with_one_line(shared_traces, tmp_path, capsys):
    # bad input: planes that collide in every field (name, id, stats, events): analyzed, one
    # warning line naming the ranks, exit 0
    merged = tmp_path / "same.xplane.pb"
    merge_ranks.merge([shared_traces / V6E] * 2, merged, "naive")
    assert main(["analyze", str(merged), "--no-cache", "--format", "json", "-o", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    lines = [w for w in out["warnings"] if "ranks' planes" in w]
    assert len(lines) == 1 and "plane ids collide too" in lines[0] and "same/rank1" in lines[0]
    assert main(["analyze", str(merged), "--no-cache", "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert "TPU v6 Lite ×8" in text and "same/rank1:/device:TPU:" in text


def test_hostile_thousands_of_identical_planes_are_bounded(tmp_path):
    # 3,000 copies of one small plane, same name and id: read as 3,000 ranks (no plane lost),
    # one note line; the rank rules are linear in the planes
    big = _bench("big_xplane")
    xs = XSpace()
    xs.ParseFromString(big.many_planes(1, ops=2))
    for _ in range(2999):
        xs.planes.add().CopyFrom(xs.planes[0])
    p = tmp_path / "dup.xplane.pb"
    p.write_bytes(xs.SerializeToString())
    td = read_xplane(p)
    assert len(td.devices) == 3000 and td.table.height == 6000
    notes = [n for n in td.notes if "ranks' planes" in n]
    assert len(notes) == 1 and "3000 ranks" in notes[0] and "and 2996 more" in notes[0]


@pytest.mark.parametrize("mode", ["renumber", "naive", "prefix"])
def test_export_of_merged_ranks_writes_each_plane_once(shared_traces, tmp_path, mode, capsys):
    """Two ranks in one XSpace export to one XSpace holding the window of each of the file's
    planes once (per-rank files each held both ranks' planes, every event twice in the JSON),
    each plane cut at its own rank's and device's step: read back, 2 x 4 device-steps of the
    original's ops (every plane was cut at the union of the devices' windows: a fresh user
    read 150 op events and steps of the window's length)."""
    ranks = _ranks_of(tmp_path, shared_traces / V6E, 2)
    merged = tmp_path / "in" / "merged.xplane.pb"
    merge_ranks.merge(ranks, merged, mode)
    out = tmp_path / "out"
    out.mkdir()
    assert main(["export", str(merged), "--steps", "1:1", "-o", str(out / "w"), "--no-cache"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["w.json", "w.xplane.pb"]
    src, got = XSpace(), XSpace()
    src.ParseFromString(merged.read_bytes())
    got.ParseFromString((out / "w.xplane.pb").read_bytes())
    names = [p.name for p in src.planes]
    assert sorted(p.name for p in got.planes) == sorted(names)  # each plane once, none added
    err = capsys.readouterr().err
    assert ("traceview's lines are left out of its export" in err) == (mode in ("naive", "prefix"))
    import traceview

    orig = traceview.load(shared_traces / V6E, stale_after_s=None).analyze(step_window="all").steps.steps
    o = orig.filter(pl.col("step") == 1).sort("device")
    back = traceview.load(out / "w.xplane.pb", stale_after_s=None, cache=False).analyze(step_window="all").steps.steps
    assert back.height == 8 and sorted(back["ops"].to_list()) == sorted(o["ops"].to_list() * 2)
    # each device-step as long as the original's (renumber names rank 1's devices TPU:4..7)
    got, want = sorted(back["duration_ps"].to_list()), sorted(o["duration_ps"].to_list() * 2)
    assert all(abs(x - y) <= 2_000_000 for x, y in zip(got, want)), (got, want)


def test_a_per_plane_cut_is_a_plane_cut(shared_traces, tmp_path):
    """``Window.per_plane`` maps a plane index of the file to a ``PlaneCut``: its window and its
    name without the rank, which tells a prefixed plane for the TPU plane it is (cut on its
    device clock, as in the rank's own file); a bare tuple or an index past the file's planes
    is refused, saying what it must be (a tuple was read by its length)."""
    from traceview.read.window import PlaneCut, Window, xspace_window

    merged = tmp_path / "in" / "merged.xplane.pb"
    merge_ranks.merge(_ranks_of(tmp_path, shared_traces / V6E, 2), merged, "prefix")
    t0 = 19500317903750  # the v6e trace's step 0 on TPU:0 (its steps table, device clock); two steps on
    lo, hi = t0 + 10 * 784_000_000_000, t0 + 12 * 784_000_000_000
    one = xspace_window(str(shared_traces / V6E), Window(lo, hi))

    def tpu0(cut):
        return lambda planes, _hosts: {i: cut for i, p in enumerate(planes) if p.name.endswith(": /device:TPU:0")}

    got = xspace_window(str(merged), Window(lo, hi, per_plane=tpu0(PlaneCut(lo, hi, "/device:TPU:0"))))
    assert [got.shifts[f"dp{k}_w-0: /device:TPU:0"] for k in (0, 1)] == [one.shifts["/device:TPU:0"]] * 2 != [0, 0]
    cut = {p.name: sum(len(ln.events) for ln in p.lines) for p in got.space.planes}
    want = {p.name: sum(len(ln.events) for ln in p.lines) for p in one.space.planes}
    assert cut["dp0_w-0: /device:TPU:0"] == cut["dp1_w-0: /device:TPU:0"] == want["/device:TPU:0"] == 52

    def past(planes, _hosts):  # an index past the file's planes
        return {len(planes): PlaneCut(lo, hi, "x")}

    for bad in (tpu0((lo, hi, "/device:TPU:0")), tpu0((lo, hi)), past):
        with pytest.raises(TypeError, match=r"it must map a plane index of the file \(0\.\.13\) to a PlaneCut"):
            xspace_window(str(merged), Window(lo, hi, per_plane=bad))


GEMM, ATTENTION = "mi300x_jax_gemm_sweep.xplane.pb", "mi300x_jax_attention.xplane.pb"


def _gpu_ranks(shared_traces, tmp_path: Path, mode: str | None) -> Path:
    """The MI300X GEMM trace as rank 0 and the attention trace as rank 1: merged into one
    XSpace (``mode``), or (None) a run folder of two hosts, one file each."""
    if mode is None:
        run = tmp_path / "log" / "plugins" / "profile" / "2026_01_01_00_00_00"
        run.mkdir(parents=True)
        for h, name in (("rank0", GEMM), ("rank1", ATTENTION)):
            shutil.copyfile(shared_traces / name, run / f"{h}.xplane.pb")
        return tmp_path / "log"
    ranks = []
    for k, name in enumerate((GEMM, ATTENTION)):
        ranks.append(tmp_path / f"dp{k}_w-0.xplane.pb")
        shutil.copyfile(shared_traces / name, ranks[-1])
    merged = tmp_path / "in" / "merged.xplane.pb"
    merge_ranks.merge(ranks, merged, mode)
    return merged


def _trace_events(path: Path) -> dict:
    """Plane name -> its events, traceview's own lines left out."""
    xs = XSpace()
    xs.ParseFromString(path.read_bytes())
    return {p.name: sum(len(ln.events) for ln in p.lines if not ln.name.startswith("traceview ")) for p in xs.planes}


def _overlapping(path: Path, plane: str, lo: int, hi: int) -> int:
    """Events of the plane named ``plane`` in the XSpace at ``path`` that overlap [lo, hi) (ps, on
    the timeline's clock), as the export keeps them."""
    xs = XSpace()
    xs.ParseFromString(path.read_bytes())
    n = 0
    for p in xs.planes:
        for ln in p.lines if p.name == plane else ():
            for e in ln.events:
                s = ln.timestamp_ns * 1000 + e.offset_ps
                t = s + max(e.duration_ps, 0)
                n += e.WhichOneof("data") == "offset_ps" and s < hi and (t > lo or (t == s and s >= lo))
    return n


@pytest.mark.parametrize("mode", ["renumber", None], ids=["merged", "two-files"])
def test_export_of_a_rank_without_a_step_in_the_range(shared_traces, tmp_path, mode, capsys):
    """The steps are jit_dot's, which only the GEMM rank runs: the attention rank, without a
    step in the range, is cut at the window over every device (the export raised KeyError)."""
    src = _gpu_ranks(shared_traces, tmp_path, mode)
    out = tmp_path / "out"
    out.mkdir()
    assert main(["export", str(src), "--steps", "3:4", "-o", str(out / "w"), "--no-cache"]) == 0
    st = traceview.load(src, cache=False).analyze().steps.steps.filter(pl.col("step").is_between(3, 4))
    assert st["host"].unique().to_list() == (["merged/rank0"] if mode else ["rank0"])
    lo, hi = st["start_ps"].min(), (st["start_ps"] + st["duration_ps"]).max()
    if mode:
        got, src_pb, planes = _trace_events(out / "w.xplane.pb"), src, ("/device:GPU:8", "/host:CPU 1")
    else:
        got, src_pb = _trace_events(out / "w.rank1.xplane.pb"), next(src.rglob("rank1.xplane.pb"))
        planes = ("/device:GPU:0", "/host:CPU")
    assert [got[p] for p in planes] == [_overlapping(src_pb, p, lo, hi) for p in planes] == [3, 71]
    assert "steps 3:4 (96.12 µs): 119 trace events" in capsys.readouterr().err


def _lines(path: Path) -> list:
    """Per plane (file order): its name and its XLines serialized, traceview's own left out."""
    xs = XSpace()
    xs.ParseFromString(path.read_bytes())
    return [(p.name, [ln.SerializeToString() for ln in p.lines if not ln.name.startswith("traceview ")])
            for p in xs.planes]


@pytest.mark.parametrize("mode", ["renumber", "naive", "prefix"])
def test_merged_gpu_ranks_are_each_cut_at_their_own_window(shared_traces, tmp_path, mode, capsys, monkeypatch):
    """Two MI300X ranks of different runs (GEMM and attention) merged into one XSpace, step 1
    of a program both run: each rank's planes, device and host, hold exactly what the rank's
    own file exports (every plane was cut at the union of the ranks' windows: 6,260 trace
    events for 1,565); the window cut names each plane's rank and, where a device name
    belongs to one rank, holds that device's window by name (it held none)."""
    from traceview.read import window

    seen = []
    cut = window.xspace_window
    monkeypatch.setattr(window, "xspace_window", lambda path, w: seen.append(w) or cut(path, w))
    args = ["--steps", "1:1", "--step-module", "jit_convert_element_type", "--no-cache"]
    for d in ("a", "b", "two", "one"):
        (tmp_path / d).mkdir()
    two = _gpu_ranks(shared_traces, tmp_path / "a", None)
    assert main(["export", str(two), "-o", str(tmp_path / "two" / "w"), *args]) == 0
    assert "1,565 trace events" in capsys.readouterr().err
    merged = _gpu_ranks(shared_traces, tmp_path / "b", mode)
    assert main(["export", str(merged), "-o", str(tmp_path / "one" / "w"), *args]) == 0
    assert "1,565 trace events" in capsys.readouterr().err
    own = [_lines(tmp_path / "two" / f"w.rank{k}.xplane.pb") for k in (0, 1)]
    got = _lines(tmp_path / "one" / "w.xplane.pb")
    src = XSpace()
    src.ParseFromString(merged.read_bytes())
    assert [p for p, _ in got] == [p.name for p in src.planes] and len(got) == 22
    assert [lines for _, lines in got] == [lines for k in (0, 1) for _, lines in own[k]]
    assert sum(len(lines) > 0 for _, lines in got) == 4  # a GPU and /host:CPU per rank
    gpu0, gpu1 = (seen[k].planes["/device:GPU:0"] for k in (0, 1))  # the two files' windows, then the merged
    assert gpu0 != gpu1 and len(seen) == 3
    assert seen[2].planes == ({"/device:GPU:0": gpu0, "/device:GPU:8": gpu1} if mode == "renumber"
                              else {})  # naive, prefix: one name, two windows
    cuts = seen[2].cuts(list(src.planes), list(src.hostnames))
    assert sorted(cuts) == list(range(22)) and [c.rank for c in cuts.values()] == [0] * 11 + [1] * 11
    assert [(c.lo_ps, c.hi_ps) for c in (cuts[1], cuts[12])] == [gpu0, gpu1]  # each rank's GPU:0


def test_merged_tpu_ranks_host_planes_cut_at_their_ranks_devices(shared_traces, tmp_path):
    """Two ranks of the v6e trace (concatenated) given different steps (1 and 5): each rank's
    planes are cut as the file alone is at that rank's steps, its host planes at the union of
    its own TPU planes' windows (they were cut at the union over both ranks)."""
    from traceview.cli.export import _rank_windows
    from traceview.read.window import Window, xspace_window

    merged = tmp_path / "in" / "merged.xplane.pb"
    merge_ranks.merge(_ranks_of(tmp_path, shared_traces / V6E, 2), merged, "naive")
    steps = traceview.load(shared_traces / V6E, stale_after_s=None, cache=False).analyze(step_window="all").steps.steps

    def window(step: int) -> Window:
        st = steps.filter(pl.col("step") == step)
        ends = st["start_ps"] + st["duration_ps"]
        return Window(st["start_ps"].min(), ends.max(),
                      {d: (s, e) for d, s, e in zip(st["device"], st["start_ps"], ends)})

    wins = {"merged/rank0": window(1), "merged/rank1": window(5)}
    got = xspace_window(str(merged), Window(wins["merged/rank0"].lo_ps, wins["merged/rank1"].hi_ps,
                                            per_plane=_rank_windows(list(wins), wins)))
    own = [xspace_window(str(shared_traces / V6E), w) for w in wins.values()]
    n = len(own[0].space.planes)
    assert n == 7 and len(got.space.planes) == 2 * n
    for k in (0, 1):
        for a, b in zip(got.space.planes[k * n:(k + 1) * n], own[k].space.planes):
            assert a.name == b.name and a.SerializeToString() == b.SerializeToString(), (k, a.name)
    assert own[0].aligned["/host:CPU"] != own[1].aligned["/host:CPU"]
    assert got.events == own[0].events + own[1].events


@pytest.mark.parametrize("mode", ["renumber", "naive", "prefix"])
def test_a_merged_gpu_export_draws_its_steps_on_its_own_rank_or_not_at_all(shared_traces, tmp_path, mode, capsys):
    """GEMM and attention ranks merged, steps 9:11 (jit_dot's, the GEMM rank's): where the
    device planes' names tell the ranks apart (renumber) the steps line is drawn on the GEMM
    rank's GPU and read back as its steps, exactly the original's; where they do not (naive:
    both ranks' GPU:0; prefix: '<rank>: /device:GPU:0') traceview's lines are left out, so no
    plane is added (prefix drew them on a new '/device:GPU:0') and no other rank reads them as
    steps of its own (naive: the attention rank's GPU, three steps without an op)."""
    merged = _gpu_ranks(shared_traces, tmp_path, mode)
    out = tmp_path / "out"
    out.mkdir()
    assert main(["export", str(merged), "--steps", "9:11", "-o", str(out / "w"), "--no-cache"]) == 0
    err = capsys.readouterr().err
    assert ("traceview's lines are left out of its export" in err) == (mode != "renumber")
    src, got = XSpace(), XSpace()
    src.ParseFromString(merged.read_bytes())
    got.ParseFromString((out / "w.xplane.pb").read_bytes())
    assert [p.name for p in got.planes] == [p.name for p in src.planes]
    cols = ["device", "start_ps", "duration_ps", "ops", "op_time_ps"]
    back = traceview.load(out / "w.xplane.pb", stale_after_s=None, cache=False).analyze(step_window="all").steps
    assert (back.steps["ops"] > 0).all() and back.steps["host"].unique().to_list() == [
        "w/dp0_w-0" if mode == "prefix" else "w/rank0"]
    if mode == "renumber":
        assert back.method == "markers"
        assert back.steps.select(cols).sort("start_ps").rows() == [
            ("/device:GPU:0", 4_894_606_000, 672_121_000, 1, 672_121_000),
            ("/device:GPU:0", 5_647_927_000, 587_481_000, 1, 587_481_000),
            ("/device:GPU:0", 6_348_688_000, 1_581_442_000, 5, 609_321_000)]


def test_ranks_alike_share_their_descriptions_and_read_as_unshared(shared_traces, tmp_path, monkeypatch):
    # 20 ranks of the v6e trace (80 TPU planes): planes with equal metadata bytes, module
    # executions, op ids and enclosing executions have their module names and description ids
    # worked out once and shared; the table is the one read with nothing shared (and, per
    # rank, the original's rows)
    import traceview.model.from_xplane as fx

    merged = tmp_path / "alike.xplane.pb"
    merge_ranks.merge(_ranks_of(tmp_path, shared_traces / V6E, 20), merged, "naive")
    calls = []
    keys = fx._tpu_keys
    monkeypatch.setattr(fx, "_tpu_keys", lambda *a, **k: calls.append(1) or keys(*a, **k))
    shared = read_xplane(merged)
    n_shared = len(calls)
    monkeypatch.setattr(fx, "SHARED_METADATA_BYTES", 0)  # no plane's metadata bytes compared: nothing shared
    calls.clear()
    alone = read_xplane(merged)
    # TPU:1-3 run the same ops in the same modules (1,503 events each; TPU:0 1,504): two
    # distinct descriptions sets in the whole file, against one per plane unshared
    assert (n_shared, len(calls)) == (2, 80)
    assert shared.table.height == alone.table.height == 20 * 6013
    assert shared.ops.equals(alone.ops, null_equal=True)
    assert shared.table.attrs.equals(alone.table.attrs, null_equal=True)
    assert shared.module_runs.equals(alone.module_runs, null_equal=True)
    one = read_xplane(shared_traces / V6E)
    for k in (0, 19):
        got = shared.ops.filter(pl.col("host") == f"alike/rank{k}")
        assert _rows(got).equals(_rows(one.ops), null_equal=True)
