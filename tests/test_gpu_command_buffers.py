"""A GPU trace whose kernels run inside XLA command buffers (CUDA graphs): JAX 0.11 on an H200
(``fixtures/h200_cmdbuf``). Each kernel of a graph carries the buffer's thunk as ``hlo_op``
(``command_buffer_1``, no instruction of the module); traceview attributes it to the fusion it
runs, named after it. The oracle is the XSpace itself, read here with protobuf: per kernel
name and ``hlo_op``, how many events ran."""

from __future__ import annotations

import collections
import re
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


def test_kernels_in_a_command_buffer_are_the_fusions_they_run(prof):
    raw = _events_by_kernel()
    assert sum(n for (_, op), n in raw.items() if op == "command_buffer_1") == 540  # of 564 events
    ops = (pl.DataFrame({"op_name": prof.table.attrs["op_name"][prof.table.events["attr"]]})
           .group_by("op_name").len())
    occ = dict(ops.iter_rows())
    expect: collections.Counter = collections.Counter()
    for (kernel, op), n in raw.items():
        if op == "command_buffer_1" and not kernel.startswith(("nvjet_", "Memset")):
            expect[re.sub(r"_(\d+)$", r".\1", kernel)] += n
        else:
            expect[op] += n
    assert occ == dict(expect)
    assert occ["command_buffer_1"] == 96  # 48 cuBLAS GEMMs (nvjet_sm90_*) and 48 memsets: no instruction named
    shapes = dict(prof.by_shape().select("op_name", "shape").iter_rows())
    assert shapes["gemm_fusion_dot.3"] == "bf16[4096,1024] <- bf16[4096,4096], bf16[4096,1024]"
    assert shapes["command_buffer_1"] in ("", None, "?")


def test_its_steps_are_the_sixteen_executions(prof):
    """Program executions are counted per anchor op: with every kernel under the buffer's one
    name, the 8x16 program (all of it in a graph) read as 120 executions of ~1.6 µs."""
    runs = prof.module_runs.group_by("program_id").len().sort("program_id")
    assert runs.rows() == [(11275, 12), (138934, 4)]
    steps = prof.steps().steps
    assert steps.height == 16 and steps["step"].to_list() == list(range(16))
