"""What the HLO says (issue 26, item 2): the instruction table of the HLO protos, the detectors
joined to measured time on the shared traces and the engine fixtures, the ``hlo`` query tables,
FLOP provenance, and protos that do not decode."""

from __future__ import annotations

import subprocess
import sys

import polars as pl
import pytest

import traceview
from traceview.analysis.ops.hlo_detect import detect
from traceview.model.hlo_graph import PROTOS_SCHEMA, instructions


@pytest.fixture(scope="module")
def attention(shared_traces):
    prof = traceview.load(shared_traces / "mi300x_jax_attention.xplane.pb", cache=False, stale_after_s=None)
    return prof, detect(prof)


def test_a_convert_fused_into_its_reduction_is_not_flagged(attention):
    """The attention trace's softmax reductions widen bf16[4,2048,2048] to f32 inside their
    reduce fusions: the wide tensor is never written (f32 accumulation of a bf16 input, the right
    way), so no widening-convert is reported; the converts are in the graph."""
    _, h = attention
    assert h.detections.filter(pl.col("detector") == "widening-convert").height == 0
    fused = h.instructions.filter((pl.col("opcode") == "convert") & (pl.col("shape") == "f32[4,2048,2048]"))
    assert fused.height >= 2 and (fused["fusion"] != "").all() and fused["users"].list.len().min() > 0


def test_instruction_table_and_its_edges(attention):
    prof, h = attention
    ins = h.instructions
    # every program that ran has its instructions (programs compiled and never run too)
    assert ins.height > 0 and set(prof.ops["program_id"].unique()) <= set(ins["program_id"].unique())
    # every user of an instruction names an instruction of the same program
    e = h.edges
    assert e.height and e["consumer_opcode"].null_count() == 0


def test_hlo_query_answers_which_converts_feed_a_reduction(shared_traces):
    out = subprocess.run([sys.executable, "-m", "traceview.cli", "query",
                          str(shared_traces / "mi300x_jax_attention.xplane.pb"),
                          "select module, producer from hlo_edges where producer_opcode = 'convert' and "
                          "consumer_opcode = 'reduce' and producer_shape = 'f32[4,2048,2048]' order by module",
                          "--no-cache", "--format", "csv"], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[1:] == ["jit__reduce_max,convert.3.1", "jit__reduce_sum,convert_element_type.2.3"]


def test_in_place_update_of_a_buffer_not_donated():
    """--no-donate: the decode program scatters into KV pools that are entry parameters not aliased
    with an output (one per layer and K/V); the donated fixture has none."""
    nod = detect(traceview.load("fixtures/nodonate_b4", cache=False, stale_after_s=None))
    hits = nod.detections.filter(pl.col("detector") == "dus-not-donated")
    assert hits.height == 4 and set(hits["shape"]) == {"f32[1,33,16,64]"}
    assert set(hits["module"]) == {"jit_decode_b4_bkv128"}
    don = detect(traceview.load("fixtures/greedy_b4", cache=False, stale_after_s=None))
    assert don.detections.filter(pl.col("detector") == "dus-not-donated").height == 0


def test_op_text_when_there_are_no_protos(shared_traces):
    prof = traceview.load(shared_traces / "vllm_tpu_qwen", cache=False, stale_after_s=None)
    h = detect(prof)
    assert h.source == "op text" and "users of an op are unknown" in h.notes[0]
    want = prof.ops.filter((pl.col("op_kind") == "reshape") & (pl.col("self_ps") > 0))
    got = h.detections.filter(pl.col("detector") == "unfused-reshape")
    assert got.height == want.select("op_name", "program_id").n_unique()


def test_flop_provenance(shared_traces, attention):
    _, h = attention
    shares = h.flop_provenance.group_by("module", "program_id").agg(pl.col("share").sum())["share"].to_list()
    assert shares == pytest.approx([1.0] * len(shares))
    pallas = detect(traceview.load(shared_traces / "tpu_v6e_pallas_matmul_llo.xplane.pb", cache=False,
                                   stale_after_s=None))
    assert pallas.flop_provenance["source"].to_list() == ["unknown"]  # an opaque Pallas custom call


def test_a_proto_that_does_not_decode():
    bad = pl.DataFrame({"host": ["h"], "module": ["m"], "program_id": [7], "proto": [b"\xff\xff\xff"]},
                       schema=PROTOS_SCHEMA)
    ins, notes = instructions(bad)
    assert ins.height == 0 and notes == [notes[0]] and "HLO proto of m(7) is unreadable" in notes[0]


def _proto(comps, entry=0, aliased=()):
    """HloProto bytes of ``comps``: [(computation id, name, [(id, name, opcode, dims,
    operand ids, parameter_number, called ids)])]."""
    from traceview.read.xplane.protos import HloProto

    h = HloProto()
    m = h.hlo_module
    m.entry_computation_id = entry
    for p in aliased:
        m.input_output_alias.entries.add().parameter_number = p
    for cid, cname, instrs in comps:
        c = m.computations.add()
        c.id, c.name = cid, cname
        for iid, name, op, dims, ops, num, called in instrs:
            i = c.instructions.add()
            i.id, i.name, i.opcode, i.parameter_number = iid, name, op, num
            i.shape.element_type = 11  # f32
            i.shape.dimensions.extend(dims)
            i.shape.layout.minor_to_major.extend(range(len(dims) - 1, -1, -1))
            i.operand_ids.extend(ops)
            i.called_computation_ids.extend(called)
    return h.SerializeToString()


def _frame(data):
    return pl.DataFrame({"host": ["h"], "module": ["m"], "program_id": [7], "proto": [data]}, schema=PROTOS_SCHEMA)


def test_instruction_rows_of_a_module_with_reused_ids():
    """Every field of a row as the module says it: the entry's parameters (aliased or not),
    a fusion's computation, operands and users by id, and a proto that reuses an instruction id
    (each row reads its own shape; an operand names the id's last instruction)."""
    data = _proto([(0, "main", [(1, "p0", "parameter", [8, 4], [], 0, []), (2, "p1", "parameter", [2], [], 1, []),
                                (3, "f", "fusion", [8, 4], [1], 0, [5]), (4, "c", "copy", [8, 4], [3], 0, [])]),
                   (5, "fused", [(6, "fp", "parameter", [8, 4], [], 0, []), (7, "cv", "convert", [8, 4], [6], 0, []),
                                 (2, "dup", "negate", [3, 3], [7], 0, [])])], aliased=(1,))
    ins, notes = instructions(_frame(data))
    assert notes == []
    rows = {r["name"]: r for r in ins.iter_rows(named=True)}
    assert list(rows) == ["p0", "p1", "f", "c", "fp", "cv", "dup"]
    assert rows["p0"]["parameter"] == 0 and rows["p0"]["aliased"] is False and rows["p1"]["aliased"] is True
    assert rows["fp"]["parameter"] is None and rows["fp"]["param_index"] == 0 and rows["fp"]["fusion"] == "f"
    assert rows["f"]["entry"] and not rows["cv"]["entry"] and rows["cv"]["computation"] == "fused"
    assert rows["c"]["operands"] == ["f"] and rows["c"]["operand_shapes"] == ["f32[8,4]"]
    assert rows["c"]["operand_layouts"] == ["1,0"] and rows["f"]["users"] == ["c"] and rows["p0"]["users"] == ["f"]
    assert rows["p1"]["shape"] == "f32[2]" and rows["dup"]["shape"] == "f32[3,3]" and rows["dup"]["bytes"] == 36
    assert rows["cv"]["users"] == ["dup"] and rows["dup"]["operands"] == ["cv"]
    # id 2 is reused: its last instruction (dup) is what an operand 2 names
    data = _proto([(0, "main", [(2, "a", "parameter", [4], [], 0, []), (9, "b", "add", [4], [2, 2], 0, []),
                                (2, "z", "negate", [5], [], 0, [])])])
    rows = {r["name"]: r for r in instructions(_frame(data))[0].iter_rows(named=True)}
    assert rows["a"]["shape"] == "f32[4]" and rows["b"]["operands"] == ["z", "z"]
    assert rows["b"]["operand_shapes"] == ["f32[5]", "f32[5]"]


def test_a_shape_out_of_range_costs_its_module():
    data = _proto([(0, "main", [(1, "ok", "parameter", [4], [], 0, []), (2, "huge", "broadcast", [1 << 40, 1 << 30],
                                                                          [1], 0, [])])])
    ins, notes = instructions(_frame(data))
    assert ins.height == 0 and notes == ["HLO proto of m(7) is unreadable: instruction huge has a shape out of range "
                                         "(f32[1099511627776,1073741824])"]


def test_flop_provenance_orders_ties_one_way():
    """Rows of one module and equal time (0 ps after a --filter) come out in one order whatever
    order the descriptions arrive in (the group-by's order changed from run to run)."""
    import polars as pl

    from traceview.analysis.ops.hlo_detect import flop_provenance

    m = pl.DataFrame({"module": ["m"] * 4 + ["n"], "program_id": pl.Series([2, 1, 1, 3, 9], dtype=pl.UInt64),
                      "cost_source": ["trace", "derived", "trace", None, "trace"],
                      "time_ps": [0, 0, 5, 0, 7]})
    want = [("m", 1, "trace", 5), ("m", 1, "derived", 0), ("m", 2, "trace", 0), ("m", 3, "unknown", 0),
            ("n", 9, "trace", 7)]
    for seed in range(6):
        got = flop_provenance(None, m.sample(fraction=1.0, shuffle=True, seed=seed))
        assert got.select("module", "program_id", "source", "time_ps").rows() == want


def test_the_c_reader_gives_the_columns_of_the_decoded_module(shared_traces):
    """``instruction_columns`` with the C passes (``hlo_scan``, ``take_lists``) equals the reading
    of the decoded messages: the recorded modules, and crafted ones that take its other paths (an
    operand id of no instruction, a reused id, a shape out of range, a module given twice)."""
    from traceview.analysis import _passes
    from traceview.model.hlo_graph import instruction_columns

    frames = [traceview.load(p, cache=False, stale_after_s=None).hlo_protos
              for p in ("fixtures/nodonate_b4", shared_traces / "mi300x_jax_attention.xplane.pb")]
    ok = _proto([(0, "main", [(1, "p0", "parameter", [8, 4], [], 0, []), (2, "p1", "parameter", [2], [], 1, []),
                              (3, "f", "fusion", [8, 4], [1, 99], 0, [5]), (4, "c", "copy", [8, 4], [3], 0, [])]),
                 (5, "fused", [(6, "fp", "parameter", [8, 4], [], 0, []), (7, "cv", "convert", [8, 4], [6], 0, [])])],
                aliased=(1,))
    reused = _proto([(0, "main", [(2, "a", "parameter", [4], [], 0, []), (9, "b", "add", [4], [2, 2], 0, []),
                                  (2, "z", "negate", [5], [], 0, [])])])
    huge = _proto([(0, "main", [(1, "ok", "parameter", [4], [], 0, []),
                                (2, "huge", "broadcast", [1 << 40, 1 << 30], [1], 0, [])])])
    assert _passes.hlo_scan(ok) is not None and _passes.hlo_scan(reused) is not None
    assert _passes.hlo_scan(ok + ok) is None  # hlo_module twice: the decoded message merges them
    frames += [_frame(d) for d in (ok, reused, huge, ok + ok, b"")]
    for f in frames:
        want = instruction_columns(f)
        assert instruction_columns(f, _passes) == want and (want[0]["name"] or want[1] or f["proto"][0] == b"")
    assert _passes.take_lists([[1, 2], []], {1: "a", 2: "b"}) == [["a", "b"], []]
    assert _passes.take_lists([[1, 3]], {1: "a"}) is None
