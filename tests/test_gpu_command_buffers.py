"""A GPU trace whose kernels run inside XLA command buffers (CUDA graphs): JAX 0.11 on an H200
(``fixtures/h200_cmdbuf``). Each kernel of a graph carries the buffer's thunk as ``hlo_op``
(``command_buffer_1``, no instruction of the module) and is named after the fusion it runs; XLA
runs identical fusions with one kernel (fusion.77 as ``fusion_76``), so the op is the buffer's
kernel (``command_buffer_1/fusion_76``) with the shape, HLO and costs of its namesake. The
oracle is the XSpace itself, read here with protobuf: per kernel name and ``hlo_op``, how many
events ran."""

from __future__ import annotations

import collections
from pathlib import Path

import polars as pl
import pytest

import traceview
from traceview.read.xplane.protos import XSpace

TRACE = Path(__file__).resolve().parents[1] / "fixtures" / "h200_cmdbuf"


def _events_by_kernel() -> collections.Counter:
    """(kernel name, hlo_op) -> events on the GPU plane, straight from the protobuf."""
    space = XSpace()
    space.ParseFromString(next(TRACE.rglob("*.xplane.pb")).read_bytes())
    plane = next(p for p in space.planes if p.name == "/device:GPU:0")
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    got: collections.Counter = collections.Counter()
    for line in plane.lines:
        for e in line.events:
            md = plane.event_metadata[e.metadata_id]
            op = next((s.str_value or names.get(s.ref_value) for s in list(e.stats) + list(md.stats)
                       if names.get(s.metadata_id) == "hlo_op"), None)
            got[(md.name, op)] += 1
    return got


@pytest.fixture(scope="module")
def prof():
    return traceview.load(TRACE, cache=False)


def test_kernels_in_a_command_buffer_are_named_with_their_fusions_shapes(prof):
    raw = _events_by_kernel()
    assert sum(n for (_, op), n in raw.items() if op == "command_buffer_1") == 540  # of 564 events
    ops = (pl.DataFrame({"op_name": prof.table.attrs["op_name"][prof.table.events["attr"]]})
           .group_by("op_name").len())
    occ = dict(ops.iter_rows())
    expect: collections.Counter = collections.Counter()
    for (kernel, op), n in raw.items():
        if op == "command_buffer_1" and not kernel.startswith(("nvjet_", "Memset")):
            expect[f"command_buffer_1/{kernel}"] += n
        else:
            expect[op] += n
    assert occ == dict(expect)
    assert occ["command_buffer_1"] == 96  # 48 cuBLAS GEMMs (nvjet_sm90_*) and 48 memsets: no instruction named
    assert occ["command_buffer_1/fusion_76"] == 24  # fusion.76 and fusion.77, 12 runs of the 8x512 program
    shapes = dict(prof.by_shape().select("op_name", "shape").iter_rows())
    assert shapes["command_buffer_1/gemm_fusion_dot_3"] == "bf16[4096,1024] <- bf16[4096,4096], bf16[4096,1024]"
    assert shapes["fusion.78"] == "bf16[8,512,1024] <- bf16[8,512,1024]"  # outside a buffer: its own hlo_op
    assert shapes["command_buffer_1"] in ("", None, "?")


def test_its_steps_are_the_sixteen_executions(prof):
    """Program executions are counted per anchor op: with every kernel under the buffer's one
    name, the 8x16 program (all of it in a graph) read as 120 executions of ~1.6 µs."""
    runs = prof.module_runs.group_by("program_id").len().sort("program_id")
    assert runs.rows() == [(11275, 12), (138934, 4)]
    steps = prof.steps().steps
    assert steps.height == 16 and steps["step"].to_list() == list(range(16))
