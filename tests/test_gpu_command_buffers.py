"""A GPU trace whose kernels run inside XLA command buffers (CUDA graphs): JAX 0.11 on an H200
(``fixtures/h200_cmdbuf``). Each kernel of a graph carries the buffer's thunk as ``hlo_op``
(``command_buffer_1``, no instruction of the module) and is named after the fusion it runs; XLA
runs identical fusions with one kernel (fusion.77 as ``fusion_76``), so the op is the buffer's
kernel (``command_buffer_1/fusion_76``) with the shape, HLO and costs of its namesake. A cuBLAS
GEMM (``nvjet_sm90_*``) and the memset before it name no instruction: they are placed by their
graph node and the module's schedule (:mod:`traceview.model.command_buffers`) and become the
custom-call they run (``command_buffer_1/custom-call.2``).

The oracle is the same program recorded with command buffers off (``fixtures/h200_nocmdbuf``,
``XLA_FLAGS=--xla_gpu_enable_command_buffer=``), where every kernel's ``hlo_op`` names its
instruction; both are read here with protobuf, not through traceview."""

from __future__ import annotations

import collections
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

import traceview
from traceview.model import command_buffers
from traceview.read.xplane import wire
from traceview.read.xplane.protos import HloProto, XSpace

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TRACE = FIXTURES / "h200_cmdbuf"
ORACLE = FIXTURES / "h200_nocmdbuf"
CUSTOM_CALLS = ("custom-call.0", "custom-call.1", "custom-call.2", "custom-call.3")


def _space(path: Path) -> XSpace:
    space = XSpace()
    space.ParseFromString(next(path.rglob("*.xplane.pb")).read_bytes())
    return space


def _gpu_events(path: Path) -> list[tuple]:
    """(start_ps, kernel name, hlo_op, program_id) of every GPU event, in time order, straight
    from the protobuf."""
    plane = next(p for p in _space(path).planes if p.name == "/device:GPU:0")
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    out = []
    for line in plane.lines:
        for e in line.events:
            md = plane.event_metadata[e.metadata_id]
            st = {}
            for s in list(md.stats) + list(e.stats):
                kind = s.WhichOneof("value")
                st[names.get(s.metadata_id)] = names.get(s.ref_value) if kind == "ref_value" else getattr(s, kind)
            out.append((line.timestamp_ns * 1000 + e.offset_ps, md.name, st.get("hlo_op"), st.get("program_id")))
    return sorted(out)


def _events_by_kernel(path: Path = TRACE) -> collections.Counter:
    """(kernel name, hlo_op) -> events on the GPU plane, straight from the protobuf."""
    return collections.Counter((k, op) for _, k, op, _ in _gpu_events(path))


def _gemm_flops(path: Path, program_id: int) -> dict[str, int]:
    """custom-call name -> 2·M·N·K of each cuBLAS custom-call of the program, from the shapes
    of its HLO proto (``/host:metadata``) read with protobuf."""
    meta = next(p for p in _space(path).planes if p.name == "/host:metadata")
    sn = {k: v.name for k, v in meta.stat_metadata.items()}
    md = next(m for m in meta.event_metadata.values() if m.name.endswith(f"({program_id})"))
    hlo = HloProto()
    hlo.ParseFromString(next(s.bytes_value for s in md.stats if sn.get(s.metadata_id) == "Hlo Proto"))
    by_id = {i.id: i for c in hlo.hlo_module.computations for i in c.instructions}
    out = {}
    for ins in by_id.values():
        if ins.opcode == "custom-call" and ins.custom_call_target.startswith("__cublas"):
            res = ins.shape.tuple_shapes[0] if ins.shape.tuple_shapes else ins.shape  # (result, workspace)
            m, n = res.dimensions
            k = by_id[ins.operand_ids[0]].shape.dimensions[1]
            out[ins.name] = 2 * m * n * k
    return out


@pytest.fixture(scope="module")
def prof():
    return traceview.load(TRACE, cache=False)


@pytest.fixture(scope="module")
def oracle():
    return traceview.load(ORACLE, cache=False)


def _ops(p) -> pl.DataFrame:
    """Per event: op_name, kernel, start_ps, duration_ps, flops, program_id, in time order."""
    a = p.table.attrs
    ev = p.table.events
    idx = ev["attr"]
    return pl.DataFrame({"op_name": a["op_name"][idx], "kernel": a["kernel"][idx], "flops": a["flops"][idx],
                         "program_id": a["program_id"][idx], "start_ps": ev["start_ps"],
                         "duration_ps": ev["duration_ps"]}).sort("start_ps")


def test_kernels_in_a_command_buffer_are_named_with_their_instructions_shapes(prof):
    raw = _events_by_kernel()
    assert sum(n for (_, op), n in raw.items() if op == "command_buffer_1") == 540  # of 564 events
    occ = dict(_ops(prof).group_by("op_name").len().iter_rows())
    assert "command_buffer_1" not in occ  # every kernel of the graphs has its instruction
    expect: collections.Counter = collections.Counter()
    for (kernel, op), n in raw.items():
        if op == "command_buffer_1" and not kernel.startswith(("nvjet_", "Memset")):
            expect[f"command_buffer_1/{kernel}"] += n
        elif op != "command_buffer_1":
            expect[op] += n
    expect.update({f"command_buffer_1/{cc}": 24 for cc in CUSTOM_CALLS})  # 12 memsets + 12 GEMMs each
    assert occ == dict(expect)
    assert occ["command_buffer_1/fusion_76"] == 24  # fusion.76 and fusion.77, 12 runs of the 8x512 program
    shapes = dict(prof.by_shape().select("op_name", "shape").iter_rows())
    assert shapes["command_buffer_1/gemm_fusion_dot_3"] == "bf16[4096,1024] <- bf16[4096,4096], bf16[4096,1024]"
    assert shapes["fusion.78"] == "bf16[8,512,1024] <- bf16[8,512,1024]"  # outside a buffer: its own hlo_op
    assert shapes["command_buffer_1/custom-call.2"] == "bf16[4096,3072] <- bf16[4096,1024], bf16[1024,3072]"
    assert shapes["command_buffer_1/custom-call.1"] == "bf16[4096,4096] <- bf16[4096,1024], bf16[1024,4096]"


def test_the_gemms_placed_by_the_schedule_are_those_the_oracle_names(prof, oracle):
    """With command buffers off every kernel's hlo_op names its custom-call: per custom-call
    the same memset and GEMM counts, the same order within a step, the same FLOPs (2·M·N·K of
    its HLO shapes) and, GEMM by GEMM, the duration of the oracle's (the 4096-wide MLP GEMMs
    take ~44 µs, the 3072-wide QKV ones ~34 µs: a GEMM given the wrong custom-call would be off
    by 30%)."""
    off = _gpu_events(ORACLE)
    want_counts = collections.Counter((op, k.split("_")[0].split(" ")[0]) for _, k, op, _ in off if op in CUSTOM_CALLS)
    assert want_counts == {(cc, kind): 12 for cc in CUSTOM_CALLS for kind in ("Memset", "nvjet")}
    want_order = [op for _, k, op, _ in off if op in CUSTOM_CALLS and k.startswith("nvjet_")][:4]
    assert want_order == ["custom-call.2", "custom-call.1", "custom-call.3", "custom-call.0"]
    want_flops = _gemm_flops(ORACLE, 11275)
    assert want_flops == _gemm_flops(TRACE, 11275) == {"custom-call.0": 2 * 4096 * 4096 * 1024,
                                                        "custom-call.1": 2 * 4096 * 4096 * 1024,
                                                        "custom-call.2": 2 * 4096 * 3072 * 1024,
                                                        "custom-call.3": 2 * 4096 * 3072 * 1024}

    ops = _ops(prof).filter(pl.col("op_name").str.starts_with("command_buffer_1/custom-call"))
    got_counts = collections.Counter((o.split("/")[1], k.split("_")[0].split(" ")[0])
                                     for o, k in ops.select("op_name", "kernel").iter_rows())
    assert got_counts == want_counts
    gemms = ops.filter(pl.col("kernel").str.starts_with("nvjet_"))
    assert [o.split("/")[1] for o in gemms["op_name"].head(4)] == want_order
    flops = dict(ops.group_by("op_name").agg(pl.col("flops").unique()).iter_rows())
    assert {o.split("/")[1]: f for o, f in flops.items()} == {cc: [float(f)] for cc, f in want_flops.items()}
    on_mean = dict(gemms.group_by("op_name").agg(pl.col("duration_ps").mean()).iter_rows())
    off_mean = {cc: np.mean([d for d, cc2 in _oracle_gemm_durations(off) if cc2 == cc]) for cc in CUSTOM_CALLS}
    for cc in CUSTOM_CALLS:
        assert abs(on_mean[f"command_buffer_1/{cc}"] / off_mean[cc] - 1) < 0.1, cc


def _oracle_gemm_durations(off: list[tuple]) -> list[tuple]:
    """(duration_ps, custom-call) of each GEMM of the oracle: start to the next event's start
    is not the duration; read the XEvent durations instead."""
    plane = next(p for p in _space(ORACLE).planes if p.name == "/device:GPU:0")
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    out = []
    for line in plane.lines:
        for e in line.events:
            md = plane.event_metadata[e.metadata_id]
            if not md.name.startswith("nvjet_"):
                continue
            op = next((names.get(s.ref_value) for s in e.stats if names.get(s.metadata_id) == "hlo_op"), None)
            out.append((e.duration_ps, op))
    return out


def test_mfu_and_flops_match_the_oracle(prof, oracle):
    """Every op of the graphs has its FLOPs now: over the trace the FLOPs are the oracle's
    (each instruction's once per execution), no op is left without costs, and the MFU is the
    oracle's within its steps' timing (13.7% before: a quarter of the FLOPs had no op)."""
    for p in (prof, oracle):
        assert _ops(p).filter(pl.col("flops").is_null()).height == 0
    assert _total_flops(prof) == _total_flops(oracle)
    mfu_on, mfu_off = (p.phases().summary["mfu"][0] for p in (prof, oracle))
    assert mfu_on == pytest.approx(mfu_off, rel=0.15) and mfu_on > 0.25


def _total_flops(p) -> float:
    """FLOPs over the trace: per (op, kernel, program) description the instruction's FLOPs once
    per execution (the largest kernel count of the op, :func:`traceview.analysis.ops.aggregate.executions`)."""
    ops = _ops(p)
    per = (ops.group_by("op_name", "kernel", "program_id").agg(pl.len().alias("n"), pl.col("flops").first())
           .group_by("op_name", "program_id").agg(pl.col("n").max(), pl.col("flops").first()))
    return float((per["n"] * per["flops"]).sum())


def test_its_steps_are_the_sixteen_executions(prof):
    """Program executions are counted per anchor op: with every kernel under the buffer's one
    name, the 8x16 program (all of it in a graph) read as 120 executions of ~1.6 µs."""
    runs = prof.module_runs.group_by("program_id").len().sort("program_id")
    assert runs.rows() == [(11275, 12), (138934, 4)]
    steps = prof.steps().steps
    assert steps.height == 16 and steps["step"].to_list() == list(range(16))


# --- the rule on made-up lines: nothing is attributed without evidence --------------------------

class _Hlo:
    """A stand-in for :class:`~traceview.model.hlo.HloIndex`: one program, scheduled."""

    def __init__(self, sched, ops):
        self.sched, self.ops = sched, ops

    def schedules(self, pid):
        return [self.sched]

    def op(self, pid, name):
        return self.ops.get(name)

    def same_body(self, pid, a, b):
        return a in self.ops and b in self.ops and self.ops[a].body == self.ops[b].body


def _inst(name, opcode="fusion"):
    return SimpleNamespace(name=name, opcode=opcode, category=opcode, shape="f32[8]", body=name.split(".")[0])


def _line(nodes, combos, graph=7):
    """A decoded line of one graph launched twice: event i of each launch is node nodes[i],
    of combo combos[i]."""
    n = len(nodes)
    combo = np.array(list(combos) * 2, dtype=np.uint32)
    kinds = np.zeros((2 * n, 3), dtype=np.uint8)
    kinds[:, 1:] = wire.KIND_UINT64
    vals = np.zeros((2 * n, 3), dtype=np.int64)
    vals[:, 1] = graph
    vals[:, 2] = list(nodes) * 2
    return SimpleNamespace(combo=combo, starts=np.arange(2 * n, dtype=np.int64) * 10, extra_kinds=kinds,
                           extra_values=vals)


# f.1, g.2 and h.3 compute different things (bodies f, g, h) of one shape
SCHED = (("p", "parameter"), ("f.1", "fusion"), ("cc.1", "custom-call"), ("gte", "get-tuple-element"),
         ("g.2", "fusion"), ("cc.2", "custom-call"), ("cc.3", "custom-call"), ("h.3", "fusion"))
OPS = {n: _inst(n, o) for n, o in SCHED}
# combos: 0 f.1's kernel, 1 g.2's, 2 h.3's (named after their fusions), 3 a memset, 4 a GEMM (nameless)
PIDS, INSTS, EXACT = [5] * 5, [OPS["f.1"], OPS["g.2"], OPS["h.3"], None, None], [False] * 5
THUNKS = [None, None, None, "command_buffer_1", "command_buffer_1"]


def _attributed(line, sched=SCHED):
    got = command_buffers.attribute(line, PIDS, INSTS, EXACT, THUNKS, _Hlo(sched, {n: _inst(n, o) for n, o in sched}))
    if got is None:
        return None
    combo, added = got
    return [(int(c), added[int(c) - 5][1].name if c >= 5 else None) for c in combo[:len(combo) // 2]]


def test_a_run_between_two_anchors_is_their_one_launching_instruction():
    # f.1, memset + GEMM, g.2: between f.1 and g.2 only cc.1 launches (gte does not)
    got = _attributed(_line([0, 1, 2, 3], [0, 3, 4, 1]))
    assert [name for _, name in got] == [None, "cc.1", "cc.1", None]


def test_nothing_without_evidence():
    # two custom-calls between g.2 and h.3: which GEMM is which is not known
    assert _attributed(_line([0, 1, 2, 3], [1, 3, 4, 2])) is None
    # no anchor after the run
    assert _attributed(_line([0, 1, 2], [0, 3, 4])) is None
    # anchors out of the schedule's order (g.2 before f.1)
    assert _attributed(_line([0, 1, 2, 3], [1, 3, 4, 0])) is None
    # a node whose events are of two kernels
    line = _line([0, 1, 2, 3], [0, 3, 4, 1])
    line.combo[5] = 4
    assert _attributed(line) is None
    # no graph node stats
    line = _line([0, 1, 2, 3], [0, 3, 4, 1])
    line.extra_kinds[:] = wire.KIND_ABSENT
    assert _attributed(line) is None


def test_a_kernel_named_after_a_fusion_also_runs_its_identical_twins():
    # f.1's kernel runs f.1 and, later, f.4 (identical: body f): the GEMMs after each are cc.1, cc.2
    sched = (("f.1", "fusion"), ("cc.1", "custom-call"), ("g.2", "fusion"), ("f.4", "fusion"),
             ("cc.2", "custom-call"), ("h.3", "fusion"))
    got = _attributed(_line([0, 1, 2, 3, 4, 5, 6], [0, 4, 1, 0, 3, 4, 2]), sched)
    assert [name for _, name in got] == [None, "cc.1", None, None, "cc.2", "cc.2", None]


@pytest.mark.parametrize("path", [TRACE, ORACLE], ids=["cmdbuf", "nocmdbuf"])
def test_a_cublas_call_is_not_bimodal_by_its_memset(path):
    """A cuBLAS custom-call runs a ~0.8 µs memset and a ~34-44 µs GEMM under one op: its
    regimes are read per execution (the two summed), not per kernel, so no "bimodal"; the
    execution time is the oracle's memset + GEMM."""
    from traceview.analysis.ops import aggregate

    p = traceview.load(path, cache=False)
    _, examined = aggregate.by_shape_and_regimes(p.table, p.runs)
    cc = examined.filter(pl.col("op_name").str.contains("custom-call"))
    assert cc.height == 4 and cc["regimes"].null_count() == 4 and cc["executions"].to_list() == [12] * 4
    off = _gpu_events(ORACLE)
    plane = next(q for q in _space(ORACLE).planes if q.name == "/device:GPU:0")
    dur = {(line.timestamp_ns * 1000 + e.offset_ps): e.duration_ps for line in plane.lines for e in line.events}
    per_exec = collections.defaultdict(float)
    for t, _, op, _ in off:
        if op == "custom-call.2":
            per_exec[op] += dur[t] / 12
    got = cc.filter(pl.col("op_name").str.ends_with("custom-call.2"))["later_execution_ps"][0]
    assert got == pytest.approx(per_exec["custom-call.2"], rel=0.1)


def test_a_diff_with_command_buffers_off_pairs_the_same_instructions(capsys):
    """``diff h200_cmdbuf h200_nocmdbuf`` (one program, command buffers on, then off) matched 2
    populations of 67 and paired fusion.91 with fusion.89 (+3), a 3.87x "slowdown": an op run in
    a graph (``command_buffer_1/custom-call.0``, ``command_buffer_1/fusion_89``) now has its
    instruction's stem, so 30 pair with the same occurrences on both sides but one (the
    identical twin fusions the graph runs with one kernel, 24 against 16), none vanishes, and
    no matched population's median changes by more than 1.2x (the GEMMs, two populations of
    two, within 2%)."""
    import json

    from traceview.cli import main

    assert main(["diff", str(TRACE), str(ORACLE), "--format", "json", "--all-rows", "--no-cache"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["counts"] == {"matched": 30, "appeared": 1, "vanished": 0}
    m = [p for p in d["populations"] if p["status"] == "matched"]
    assert sum(p["occurrences_base"] != p["occurrences_treatment"] for p in m) == 1
    assert all(0.5 < p["median_ratio"] < 1.2 for p in m)
    gemms = [p for p in m if p["kind"] == "custom-call"]
    # the four GEMMs, two of each shape: two populations of 48 occurrences a side
    assert sorted(n for p in gemms for n in p["op_names_treatment"]) == list(CUSTOM_CALLS)
    assert [p["occurrences_base"] for p in gemms] == [48, 48] and all(0.98 < p["median_ratio"] < 1.02 for p in gemms)
