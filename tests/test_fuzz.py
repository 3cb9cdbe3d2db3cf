"""Property-based fuzzing of the readers and of the invariants the analyses rely on (issue 6).

Readers: random XSpace messages (planes, lines, events, metadata, stats, dangling ids,
``ref_value`` interning, ``num_occurrences`` events, TPU ``XLA Ops`` lines named by random HLO
text, GPU stream lines with ``hlo_op``/``program_id`` stats joined to random ``/host:metadata``
HLO protos), the same serialized and then cut or bit-flipped, and random Chrome-trace JSON.
Each reader either returns a table or raises a documented :class:`traceview.TraceviewError`,
never anything else; the C XLine decoder and the pure-Python fallback give the same answer.

Invariants, on every table a reader returned: the occurrences of the populations add up to
the op events (sum of ``count``); total and self time are the same in the op table, the name
view, the shape view and the program view. Beside them: the shape signature ignores layouts,
tiling and memory-space annotations, and ``self_times`` on properly nested intervals equals a
brute-force definition.

Each reader property runs FUZZ_EXAMPLES examples (default 500, the same ones every run;
``TRACEVIEW_FUZZ_EXAMPLES`` raises it for a longer local run: 1000 cost the suite 110 s of CPU
on the 2-core VM, 2000 over two minutes per reader property), the two invariant-only
properties half as many.
``derandomize=True`` keeps CI runs reproducible; ``TRACEVIEW_FUZZ_RANDOM=1`` explores new
examples, ``TRACEVIEW_FUZZ_NO_SHRINK=1`` reports a failure as found. See tests/README.md.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

import traceview
import traceview.read.xplane.wire
import traceview.model.from_xplane
from traceview.analysis.ops import aggregate
from traceview.read.xplane.protos import HloProto, XSpace
from traceview.model.shapes import parse_instruction
from traceview.model.timeline import self_times
from traceview.model.files import read_file

FUZZ_EXAMPLES = int(os.environ.get("TRACEVIEW_FUZZ_EXAMPLES", "500"))
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("TRACEVIEW_FUZZ_RANDOM", "") != "1",
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    # TRACEVIEW_FUZZ_NO_SHRINK=1: report a failure as found (long exploratory runs)
    **({"phases": [Phase.explicit, Phase.reuse, Phase.generate]} if os.environ.get("TRACEVIEW_FUZZ_NO_SHRINK") else {}),
)

#: the invariant-only properties (cheap to check, costly to generate) run half as many
FUZZ_HALF = settings(FUZZ, max_examples=max(FUZZ_EXAMPLES // 2, 1))

_TMP = Path(tempfile.mkdtemp(prefix="traceview-fuzz-"))

# -- generators ------------------------------------------------------------------------------
#
# The builders below take a source of choices, ``g``: either :class:`Draws` (each choice is a
# hypothesis draw: shrinkable, about 0.1 ms a choice) or :class:`Seeded` (a ``random.Random``
# seeded by one hypothesis draw: a falsifying example is reproduced by its seed). The shape
# property uses draws; the reader properties use seeds, because an XSpace takes several
# hundred choices and thousands of examples per reader must fit the CI time budget.


class Draws:
    """Choices drawn from hypothesis."""

    def __init__(self, draw):
        self.draw = draw

    def int(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def choice(self, seq):
        return self.draw(st.sampled_from(seq))

    def float(self) -> float:
        return self.draw(st.floats(allow_nan=True, allow_infinity=True))

    def binary(self, n: int) -> bytes:
        return self.draw(st.binary(max_size=n))

    def permutation(self, seq) -> list:
        return self.draw(st.permutations(seq))


class Seeded:
    """Choices from a seeded ``random.Random`` (same interface as :class:`Draws`)."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)

    def int(self, lo: int, hi: int) -> int:
        return self.r.randint(lo, hi)

    def choice(self, seq):
        return seq[self.r.randrange(len(seq))]

    def float(self) -> float:
        return self.choice([0.0, -0.0, 1.5, 1e300, -1e-300, float("nan"), float("inf"), self.r.random() * 1e12])

    def binary(self, n: int) -> bytes:
        return self.r.randbytes(self.r.randint(0, n))

    def permutation(self, seq) -> list:
        out = list(seq)
        self.r.shuffle(out)
        return out


def seeded() -> st.SearchStrategy:
    return st.integers(0, (1 << 64) - 1).map(Seeded)


DTYPES = ["f32", "bf16", "s32", "u8", "s8", "pred", "f16", "f8e4m3fn", "u32", "c64"]
OPCODES = ["add", "fusion", "dot", "convolution", "custom-call", "copy", "reduce", "tuple", "while",
           "all-reduce", "dynamic-slice", "broadcast", "get-tuple-element", "multiply"]
JUNK = ["", " ", "x", "%", "=", "%a = ", "%a = (((((", "%a = f32[", "= f32[1] add(", "%x = f32[1]{1,0:T(8 add(",
        "fusion.1", "jit_f(7)", "jit_f(99999999999999999999999)", "end: add.2", "a.py:3", "a.py:x", "7", "-3",
        "1e400", "99999999999999999999999", "\u00e9\u4e2d\U0001f600", "<script>", "\x00\x01", "%y = s32[<=8,?] copy(s32[<=8,?] %x)",
        "%w = (f32[2]{0}, s8[100]{0}) custom-call(f32[2]{0} %a), custom_call_target=\"__cublas$gemm\""]


def layout(g, rank: int) -> str:
    """A random HLO layout: minor-to-major order, then maybe tiles, element size, memory space."""
    body = ",".join(str(d) for d in g.permutation(list(range(rank))))
    tail = ""
    for _ in range(g.int(0, 3)):
        tail += "T(" + ",".join(g.choice(["8", "128", "2", "1", "4", "256", "*"]) for _ in range(g.int(1, 3))) + ")"
    if g.int(0, 1):
        tail += f"E({g.choice([4, 8, 16, 32])})"
    if g.int(0, 1):
        tail += f"S({g.int(0, 5)})"
    if g.int(0, 1):
        tail += "*(" + g.choice(["s32", "u8"]) + ")"
    return "{" + body + (":" + tail if tail else "") + "}"


def array_shape(g) -> tuple[str, str]:
    """(shape text with a random layout or none, the same without any layout)."""
    dims = [g.int(0, 70000) for _ in range(g.int(0, 4))]
    text_dims = ",".join(("<=" if g.int(0, 3) == 0 else "") + str(d) for d in dims)
    bare = f"{g.choice(DTYPES)}[{text_dims}]"
    return (bare + (layout(g, len(dims)) if g.int(0, 1) else "")), bare


def shape(g, depth: int = 0) -> tuple[str, str]:
    if depth < 2 and g.int(0, 4) == 0:
        members = [shape(g, depth + 1) for _ in range(g.int(0, 3))]
        return "(" + ", ".join(m[0] for m in members) + ")", "(" + ", ".join(m[1] for m in members) + ")"
    return array_shape(g)


def hlo_instruction(g) -> tuple[str, str]:
    """(HLO instruction text with random layouts, the same text without layouts)."""
    name = g.choice(["fusion", "add", "custom-call", "dot", "copy", "x"]) + f".{g.int(0, 99)}"
    opcode = g.choice(OPCODES)
    result = shape(g)
    operands = [shape(g) for _ in range(g.int(0, 4))]
    attrs = g.choice(["", ", kind=kLoop, calls=%fused_computation.1",
                      ', custom_call_target="__cublas$gemm", backend_config={"x":1}',
                      ", lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                      ', metadata={op_name="jit(f)/dot" source_file="/a.py" source_line=3}'])
    root = "ROOT " if g.int(0, 1) else ""

    def text(k: int) -> str:
        ops = ", ".join(f"{o[k]} %p{i}" for i, o in enumerate(operands))
        return f"{root}%{name} = {result[k]} {opcode}({ops}){attrs}"

    return text(0), text(1)


def text(g) -> str:
    """HLO text, a tricky string, or random characters."""
    k = g.int(0, 3)
    if k == 0:
        return hlo_instruction(g)[0]
    if k == 1:
        return g.binary(12).decode("utf-8", "replace")
    return g.choice(JUNK)


STAT_NAMES = ["program_id", "hlo_op", "hlo_module", "flops", "bytes_accessed", "model_flops", "hlo_category",
              "source", "source_stack", "tf_op", "device_offset_ps", "device_duration_ps", "Hlo Proto",
              "shape_with_layout", "name", "profile_start_time", "profile_stop_time",
              "peak_teraflops_per_second", "peak_hbm_bw_gigabytes_per_second", "device_type_string",
              "memory_bandwidth", "device_vendor", "gpu_device_name", "correlation_id", "run_id"]
PLANE_NAMES = ["/device:TPU:0", "/device:TPU:1", "/device:GPU:0", "/device:CUSTOM:MOSAIC:1", "/host:CPU",
               "/host:metadata", "Task Environment", "", "/device:TPU:0 SparseCore 0"]
LINE_NAMES = ["XLA Ops", "XLA Modules", "Stream #1(Kernel)", "Async XLA Ops", "XLA TraceMe", "Steps",
              "tf_XLACpuThunkExecutor", ""]
HOSTILE = [-1, -(1 << 63), (1 << 63) - 1, 1 << 62, 10**15]


def i64(g) -> int:
    """Mostly a sane non-negative int64, sometimes a hostile one."""
    return g.choice(HOSTILE) if g.int(0, 7) == 0 else g.int(0, 10**9)


OP_NAMES = ["dot.1", "fusion.2", "custom-call.1", "add.3", "convolution.4", "copy.5", "while.6"]
PROGRAMS = [3, 5, (1 << 64) - 1]


def hlo_proto_bytes(g, ops=OP_NAMES) -> bytes:
    """Serialized HloProto of a module holding instructions named ``ops`` (and parameters)
    with random opcodes, shapes, operands, fused computations, backend configs and stack
    frames; sometimes cut short, sometimes random bytes."""
    kind = g.int(0, 9)
    if kind == 0:
        return g.binary(64)
    h = HloProto()
    mod = h.hlo_module
    mod.name = g.choice(["jit_f", "jit_g", ""])
    names = ["p0", "p1"] + list(ops)
    for c in range(g.int(1, 2)):
        comp = mod.computations.add()
        comp.id = c if g.int(0, 5) else g.int(0, 3)
        for k, name in enumerate(names if c == 0 else names[: g.int(0, 4)]):
            ins = comp.instructions.add()
            ins.name = name
            ins.opcode = "parameter" if name.startswith("p") else (
                name.split(".")[0] if g.int(0, 2) else g.choice(OPCODES))
            ins.id = k + 1 + 100 * c if g.int(0, 7) else g.int(-1, 8)
            ins.shape.element_type = g.choice([11, 16, 4, 6, 1]) if g.int(0, 7) else g.int(0, 40)
            ins.shape.dimensions.extend(g.choice([8, 16, 128, 0, 3]) if g.int(0, 9) else g.int(-2, 1 << 40)
                                        for _ in range(g.int(0, 3)))
            if g.int(0, 5) == 0:
                sub = ins.shape.tuple_shapes.add()
                sub.element_type = g.choice([11, 2, 6])
                sub.dimensions.extend(g.int(0, 100) for _ in range(g.int(0, 2)))
            if not name.startswith("p"):
                ins.operand_ids.extend(g.int(1, 2) if g.int(0, 5) else g.int(-1, 8) for _ in range(g.int(0, 3)))
                if g.int(0, 2) == 0:
                    ins.called_computation_ids.append(g.int(0, 2))
            ins.dot_dimension_numbers.lhs_contracting_dimensions.extend(g.int(-2, 4) for _ in range(g.int(0, 2)))
            ins.convolution_dimension_numbers.kernel_input_feature_dimension = g.int(-1, 4)
            ins.convolution_dimension_numbers.kernel_spatial_dimensions.extend(g.int(-1, 4) for _ in range(g.int(0, 2)))
            ins.custom_call_target = g.choice(["", "__cublas$gemm", "__cudnn$convForward", "x"])
            ins.fusion_kind = g.choice(["", "kLoop", "kOutput"])
            ins.backend_config = g.choice([
                b"", b'{"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"]}}}',
                b'["dot_dimension_numbers"]', b'{"a":{"dot_dimension_numbers":[1]}}', b"dot_dimension_numbers{",
                b'{"a":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["x"]}}}', b"\xff\xfe"])
            ins.metadata.op_name = g.choice(["", "jit(f)/dot_general", "<script>"])
            ins.metadata.source_file = g.choice(["", "/src/model.py"])
            ins.metadata.source_line = g.int(-1, 100)
            ins.metadata.stack_frame_id = g.int(-1, 4)
    idx = mod.stack_frame_index
    idx.file_names.extend(g.choice(["a.py", "b.py"]) for _ in range(g.int(0, 2)))
    for _ in range(g.int(0, 3)):
        loc = idx.file_locations.add()
        loc.file_name_id, loc.line = g.int(-1, 3), g.int(0, 9)
        fr = idx.stack_frames.add()
        fr.file_location_id, fr.parent_frame_id = g.int(-1, 3), g.int(-1, 4)
    data = h.SerializeToString()
    if kind == 1 and data:
        data = data[: g.int(0, len(data) - 1)]
    return data


def add_stat(g, stats, stat_ids: list[int], sid: int | None = None, value=None) -> None:
    """A stat: ``value`` for stat id ``sid`` when given, else a random id and value."""
    s = stats.add()
    s.metadata_id = sid if sid is not None else (g.choice(stat_ids) if stat_ids and g.int(0, 9) else g.int(-2, 99))
    if value is not None:
        if isinstance(value, str):
            s.str_value = value
        elif isinstance(value, bytes):
            s.bytes_value = value
        elif isinstance(value, float):
            s.double_value = value
        elif value >= 1 << 63:
            s.uint64_value = value
        else:
            s.int64_value = value
        return
    kind = g.int(0, 6)
    if kind == 0:
        s.int64_value = i64(g)
    elif kind == 1:
        s.uint64_value = g.int(0, (1 << 64) - 1)
    elif kind == 2:
        s.double_value = g.float()
    elif kind == 3:
        s.str_value = text(g)
    elif kind == 4:
        s.bytes_value = g.binary(16)
    elif kind == 5:  # an interned string: a stat-metadata id, existing or dangling
        s.ref_value = g.choice(stat_ids) if stat_ids and g.int(0, 1) else g.int(0, (1 << 64) - 1)
    # kind 6: a stat without a value


def _stat_table(g, plane, wanted: list[str]) -> dict[str, int]:
    """Declare stat metadata for ``wanted`` names plus random ones; name -> id (``ref_value``
    interning: some names are declared only to be referenced)."""
    names = list(wanted) + [g.choice(STAT_NAMES) if g.int(0, 3) else text(g) for _ in range(g.int(0, 4))]
    ids = g.permutation(list(range(1, len(names) + 1)))
    table = {}
    for sid, name in zip(ids, names):
        plane.stat_metadata[sid].id = sid if g.int(0, 19) else g.int(0, 40)
        plane.stat_metadata[sid].name = name
        table.setdefault(name, sid)
    return table


def _events(g, line, mids: list[int], stats: dict[str, int], per_event=None) -> None:
    """Timed events on ``line``: mostly back to back or nested, some pre-aggregated, some
    with hostile times; ``per_event(e)`` adds per-event stats."""
    t = g.int(0, 1000)
    for _ in range(g.int(0, 14)):
        e = line.events.add()
        e.metadata_id = g.choice(mids) if mids and g.int(0, 11) else g.int(-1, 50)
        if g.int(0, 9) == 0:
            e.num_occurrences = g.choice(HOSTILE) if g.int(0, 5) == 0 else g.int(1, 1000)
        else:
            e.offset_ps = t if g.int(0, 15) else i64(g)
        e.duration_ps = g.int(0, 5000) if g.int(0, 15) else i64(g)
        t += (min(max(e.duration_ps, 0), 10**6) if g.int(0, 3) else 0) + g.int(0, 100)  # sometimes the next nests
        if per_event is not None:
            per_event(e)
        for _ in range(g.int(0, 1) if g.int(0, 3) == 0 else 0):
            add_stat(g, e.stats, list(stats.values()))


def _tpu_plane(g, xs) -> None:
    plane = xs.planes.add()
    plane.name = g.choice(["/device:TPU:0", "/device:TPU:1", "/device:TPU:0 SparseCore 0"]) if g.int(0, 5) else text(g)
    st_ = _stat_table(g, plane, ["program_id", "hlo_category", "flops", "bytes_accessed", "source", "tf_op",
                                 "device_offset_ps", "device_duration_ps", "peak_teraflops_per_second",
                                 "shape_with_layout"])
    ids = list(st_.values())
    add_stat(g, plane.stats, ids, st_["peak_teraflops_per_second"], g.choice([918.0, 0.0, -1.0, float("nan")]))
    prog = g.choice(PROGRAMS)
    mod_ids = []
    for k in range(g.int(1, 2)):
        mid = 1000 + k
        md = plane.event_metadata[mid]
        md.id, md.name = mid, g.choice([f"jit_f({prog})", "jit_g(5)", "jit_h", text(g)]) if g.int(0, 7) else text(g)
        mod_ids.append(mid)
    op_ids = []
    for k in range(g.int(0, 6)):
        mid = k + 1 if g.int(0, 11) else g.choice([-5, 1 << 40, 0])
        md = plane.event_metadata[mid]
        md.id = mid
        md.name = hlo_instruction(g)[0] if g.int(0, 4) else text(g)
        md.display_name = g.choice(OP_NAMES) if g.int(0, 4) else g.choice(["", "end: add.2", text(g)])
        if g.int(0, 4):
            add_stat(g, md.stats, ids, st_["program_id"], g.choice([prog, 5, -1]))
        if g.int(0, 1):
            add_stat(g, md.stats, ids, st_["hlo_category"], g.choice(["convolution", "loop fusion", text(g)]))
        if g.int(0, 1):
            add_stat(g, md.stats, ids, st_["flops"], g.choice([100, 0, -1, 1 << 63, 7.5]))
        if g.int(0, 2) == 0:
            add_stat(g, md.stats, ids, st_["source"], g.choice(["/src/model.py:12", "x.py", text(g)]))
        if g.int(0, 3) == 0:
            add_stat(g, md.stats, ids, st_["shape_with_layout"], g.choice(["f32[5,1024]{1,0:T(8,128)}", text(g)]))
        for _ in range(g.int(0, 1)):
            add_stat(g, md.stats, ids)
        op_ids.append(mid)

    def device_clock(e):
        if g.int(0, 3) == 0:
            add_stat(g, e.stats, ids, st_["device_offset_ps"], e.offset_ps + g.int(0, 50) if g.int(0, 7) else i64(g))
            add_stat(g, e.stats, ids, st_["device_duration_ps"], e.duration_ps if g.int(0, 7) else i64(g))

    for name in g.permutation(["XLA Modules", "XLA Ops", g.choice(LINE_NAMES)])[: g.int(1, 3)]:
        line = plane.lines.add()
        line.id, line.name = g.int(0, 4), name
        line.timestamp_ns = g.int(0, 10**6) if g.int(0, 15) else g.choice(HOSTILE)
        _events(g, line, mod_ids if name == "XLA Modules" else op_ids, st_, device_clock)


def _gpu_planes(g, xs) -> None:
    ops = OP_NAMES[: g.int(1, len(OP_NAMES))]
    prog = g.choice(PROGRAMS)
    meta = xs.planes.add()
    meta.name = "/host:metadata"
    meta.stat_metadata[1].name = "Hlo Proto"
    meta.stat_metadata[2].name = "program_id"
    for pid in (prog, g.choice(PROGRAMS)):
        md = meta.event_metadata[pid if pid < 1 << 63 else pid - (1 << 64)]
        md.id = pid if pid < 1 << 63 else pid - (1 << 64)
        md.name = f"jit_g({pid})" if g.int(0, 5) else text(g)
        if g.int(0, 7):
            add_stat(g, md.stats, [1, 2], 1, hlo_proto_bytes(g, ops))
        if g.int(0, 3) == 0:
            add_stat(g, md.stats, [1, 2], 2, pid if g.int(0, 3) else g.choice([-1, 7]))
    plane = xs.planes.add()
    plane.name = g.choice(["/device:GPU:0", "/device:CUSTOM:MOSAIC:1", "/host:CPU"]) if g.int(0, 7) else text(g)
    st_ = _stat_table(g, plane, ["hlo_op", "hlo_module", "program_id", "tf_op", "correlation_id"])
    ids = list(st_.values())
    mids = []
    for k in range(g.int(1, 5)):
        mid = k + 1
        plane.event_metadata[mid].id = mid
        plane.event_metadata[mid].name = g.choice(["kernel_a", "kernel_b", "end: dot.1"] + ops) if g.int(0, 7) else text(g)
        mids.append(mid)

    def annotate(e):
        if g.int(0, 5):
            add_stat(g, e.stats, ids, st_["hlo_op"], g.choice(ops) if g.int(0, 7) else text(g))
        if g.int(0, 3):
            add_stat(g, e.stats, ids, st_["program_id"], g.choice([prog, prog, 5, -1, 1 << 62]))
        if g.int(0, 2) == 0:
            add_stat(g, e.stats, ids, st_["hlo_module"], g.choice(["jit_g", "", text(g)]))

    for _ in range(g.int(1, 3)):
        line = plane.lines.add()
        line.id = g.int(0, 4)
        line.name = g.choice(["Stream #1(Kernel)", "Stream #7(MemcpyH2D)", "tf_XLACpuThunkExecutor", "XLA Ops"]) if g.int(0, 5) else text(g)
        line.timestamp_ns = g.int(0, 10**6) if g.int(0, 15) else g.choice(HOSTILE)
        _events(g, line, mids, st_, annotate)


def _junk_plane(g, xs) -> None:
    plane = xs.planes.add()
    plane.name = g.choice(PLANE_NAMES) if g.int(0, 3) else text(g)
    st_ = _stat_table(g, plane, [])
    ids = list(st_.values())
    for _ in range(g.int(0, 3)):
        add_stat(g, plane.stats, ids)
    mids = sorted({g.choice([g.int(0, 12), -5, 1 << 40]) for _ in range(g.int(0, 6))})
    for mid in mids:
        md = plane.event_metadata[mid]
        md.id, md.name = mid, text(g)
        for _ in range(g.int(0, 2)):
            add_stat(g, md.stats, ids)
    for _ in range(g.int(0, 2)):
        line = plane.lines.add()
        line.name = g.choice(LINE_NAMES)
        line.timestamp_ns = g.int(0, 10**6)
        _events(g, line, mids, st_)


def build_xspace(g) -> XSpace:
    """A random XSpace: mostly TPU-like planes (``XLA Modules`` / ``XLA Ops`` lines, HLO text
    names, device-clock stats) and GPU-like planes (stream lines with hlo_op / program_id
    stats, HLO protos in ``/host:metadata``), with dangling ids, interned and hostile stats,
    hostile times and pre-aggregated events sprinkled in, beside planes of anything."""
    xs = XSpace()
    for _ in range(g.int(1, 3) if g.int(0, 15) else 0):
        k = g.int(0, 9)
        if k < 5:
            _tpu_plane(g, xs)
        elif k < 8:
            _gpu_planes(g, xs)
        else:
            _junk_plane(g, xs)
    if g.int(0, 1):
        xs.hostnames.append(text(g))
    return xs


# -- running the readers -----------------------------------------------------------------------

def _outcome(path: Path, kind: str):
    """("ok", TraceData) or ("error", type name, message); anything else propagates."""
    try:
        return ("ok", read_file(path, kind=kind))
    except traceview.TraceviewError as exc:
        assert "\n" not in str(exc), f"multi-line error: {exc!s}"
        return ("error", type(exc).__name__, str(exc))


# the decoder's own detail: the final parentheses, and the line name the C decoder adds
_DETAIL = re.compile(r" \([^()]*\)$|(?<=malformed XLine) '[^']*'")


def _same(a, b) -> None:
    assert a[0] == b[0], (a, b)
    if a[0] == "error":
        # same error and fault; the decoder's own detail in the final parentheses may differ
        assert a[1] == b[1] and _DETAIL.sub("", a[2]) == _DETAIL.sub("", b[2]), (a, b)
        return
    ta, tb = a[1], b[1]
    assert ta.ops.equals(tb.ops, null_equal=True)
    assert ta.module_runs.equals(tb.module_runs, null_equal=True)
    assert (ta.n_events, ta.notes, ta.has_shapes) == (tb.n_events, tb.notes, tb.has_shapes), (
        (ta.n_events, ta.notes, ta.has_shapes), (tb.n_events, tb.notes, tb.has_shapes))
    assert [(d.name, d.kind, d.device_type) for d in ta.devices] == [(d.name, d.kind, d.device_type) for d in tb.devices]


def _check_invariants(ops: pl.DataFrame) -> None:
    """Occurrences and time add up the same way in every view of the table."""
    events = int(ops["count"].sum() or 0)
    dur = int(ops["duration_ps"].sum() or 0)
    self_ = int(ops["self_ps"].sum() or 0)
    views = {"by_shape": aggregate.by_shape(ops), "by_name": aggregate.by_name(ops),
             "by_program_op": aggregate.by_program_op(ops)}
    for name, v in views.items():
        assert int(v["occurrences"].sum() or 0) == events, name
        assert int(v["total_ps"].sum() or 0) == dur, name
        assert int(v["self_ps"].sum() or 0) == self_, name
    # one population per (op name, shape, module); one name row per op name
    assert views["by_shape"].height == ops.select("op_name", "shape", "module").unique().height
    assert views["by_name"].height == ops["op_name"].n_unique() if ops.height else True


def _read_both(data: bytes, name: str, kind: str, monkeypatch):
    path = _TMP / name
    path.write_bytes(data)
    fast = _outcome(path, kind)
    with monkeypatch.context() as m:
        m.setattr(traceview.model.from_xplane, "_fast", None)
        m.setattr(traceview.read.xplane.wire, "_fast", None)
        slow = _outcome(path, kind)
    _same(fast, slow)
    return fast


def test_the_c_decoder_is_built():
    assert traceview.model.from_xplane._fast is not None


@FUZZ
@given(g=seeded())
def test_xplane_reader_on_random_xspaces(g, monkeypatch_module):
    out = _read_both(build_xspace(g).SerializeToString(), "f.xplane.pb", "xplane", monkeypatch_module)
    if out[0] == "ok":
        _check_invariants(out[1].ops)


def damage(g, raw: bytes) -> bytes:
    """``raw`` cut short, bit-flipped, with bytes spliced in, or re-encoded as text."""
    raw = bytearray(raw)
    how = g.choice(["cut", "flip", "splice", "mangle"])
    if how == "cut":
        return bytes(raw[: g.int(0, len(raw) - 1)])
    if how == "flip":
        for _ in range(g.int(1, 4)):
            raw[g.int(0, len(raw) - 1)] ^= 1 << g.int(0, 7)
    elif how == "splice":
        i = g.int(0, len(raw))
        raw[i:i] = g.binary(8) or b"\xff"
    else:  # a text re-encoding: invalid UTF-8 becomes EF BF BD
        raw = bytearray(bytes(raw).decode("utf-8", "replace").encode("utf-8"))
    return bytes(raw)


@FUZZ
@given(g=seeded())
def test_xplane_reader_on_damaged_bytes(g, monkeypatch_module):
    raw = build_xspace(g).SerializeToString()
    assume(raw)
    raw = damage(g, raw)
    assume(raw)
    out = _read_both(raw, "f.xplane.pb", "xplane", monkeypatch_module)
    if out[0] == "ok":
        _check_invariants(out[1].ops)


# -- trace JSON ----------------------------------------------------------------------------------

def json_any(g, depth: int = 0):
    """Any JSON value (integers past 64 bits included)."""
    k = g.int(0, 8 if depth < 2 else 5)
    if k == 0:
        return None
    if k == 1:
        return bool(g.int(0, 1))
    if k == 2:
        return g.choice([0, -1, 7, 1 << 63, -(1 << 70), 10**30])
    if k == 3:
        f = g.float()
        return f if f == f and abs(f) != float("inf") else 0.5
    if k in (4, 5):
        return text(g)
    if k in (6, 7):
        return [json_any(g, depth + 1) for _ in range(g.int(0, 3))]
    return {text(g): json_any(g, depth + 1) for _ in range(g.int(0, 3))}


ARG_KEYS = ("long_name", "hlo_op", "hlo_module", "program_id", "device_offset_ps", "device_duration_ps", "source",
            "source_stack", "tf_op", "model_flops", "bytes_accessed", "shape_with_layout", "hlo_category", "run_id")
ARG_VALUES = ["12", "-3", "99999999999999999999999", "jit_f(7)", "a.py:9", str((1 << 63) + 5), "fusion.2", "dot.1"]


def junk_event(g) -> dict:
    """A Chrome-trace event with any field missing or of any type."""
    ph = g.choice(["X", "X", "X", "M", "i", "C", None, 7])
    e: dict = {} if ph is None else {"ph": ph}
    for key, hi in (("pid", 3), ("tid", 4)):
        if g.int(0, 9):
            e[key] = g.int(0, hi) if g.int(0, 5) else g.choice(["1", None, 1.5, [1], {"a": 1}])
    if ph == "M":
        e["name"] = g.choice(["process_name", "thread_name", "x"])
        e["args"] = {"name": g.choice(PLANE_NAMES + LINE_NAMES) if g.int(0, 4) else json_any(g)} if g.int(0, 5) else json_any(g)
        return e
    for key in ("ts", "dur"):
        if g.int(0, 9):
            e[key] = g.int(0, 10**7) / g.choice([1, 3, 1000]) if g.int(0, 5) else g.choice(
                [1e300, -1e300, 1.5e-7, -5, "12.5", "x", None, [1], 1 << 70])
    if g.int(0, 9):
        e["name"] = text(g) if g.int(0, 5) else json_any(g)
    if g.int(0, 3):
        args = {k: (g.choice(ARG_VALUES) if g.int(0, 1) else text(g) if g.int(0, 1) else json_any(g))
                for k in ARG_KEYS if g.int(0, 3) == 0}
        e["args"] = args if g.int(0, 5) else json_any(g)
    return e


def _spoil(g, e: dict) -> dict:
    """Now and then replace one field of a well-formed event by something hostile."""
    if g.int(0, 7):
        return e
    key = g.choice(["ph", "pid", "tid", "ts", "dur", "name", "args"])
    if g.int(0, 4) == 0:
        e.pop(key, None)
    else:
        e[key] = g.choice([None, "x", -1, 1e300, 1 << 70, [1], {"a": [1]}, text(g)])
    return e


def _process(g, pid: int, kind: str) -> list:
    """The events of one device or host process, as the JAX exporter writes them."""
    name = {"tpu": "/device:TPU:%d" % pid, "gpu": "/device:GPU:%d" % pid, "cpu": "/host:CPU"}[kind]
    out = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}}]
    lines = {"tpu": ["XLA Modules", "XLA Ops"], "gpu": ["Stream #1(Kernel)", "XLA Ops"],
             "cpu": ["tf_XLACpuThunkExecutor", "python"]}[kind]
    for tid, lname in enumerate(lines, start=1):
        out.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": lname}})
    t = g.int(0, 1000) / 10
    prog = g.choice(PROGRAMS)
    if kind == "tpu":
        for _ in range(g.int(0, 2)):
            out.append(_spoil(g, {"ph": "X", "pid": pid, "tid": 1, "ts": t, "dur": 1000.0,
                                  "name": f"jit_f({prog})" if g.int(0, 5) else text(g),
                                  "args": {"device_offset_ps": str(int(t * 1e6)), "device_duration_ps": "1000000000"}
                                  if g.int(0, 2) == 0 else {}}))
            t += 1000.0 + g.int(0, 10)
        t0 = out[-1]["ts"] if out[-1].get("ts") is not None and type(out[-1].get("ts")) in (int, float) else 0.0
        for _ in range(g.int(0, 12)):
            long_name = hlo_instruction(g)[0] if g.int(0, 4) else text(g)
            dur = g.int(0, 5000) / 1000
            args = {"long_name": long_name, "hlo_category": g.choice(["loop fusion", "convolution", ""])}
            for k, v in (("model_flops", "1024"), ("bytes_accessed", "4096"), ("source", "/src/m.py:3"),
                         ("shape_with_layout", "f32[8]{0}"), ("tf_op", "jit(f)/add:")):
                if g.int(0, 2) == 0:
                    args[k] = v
            out.append(_spoil(g, {"ph": "X", "pid": pid, "tid": 2, "ts": t0, "dur": dur,
                                  "name": g.choice(OP_NAMES) if g.int(0, 5) else long_name, "args": args}))
            t0 += dur if g.int(0, 3) else 0.0
    else:
        for _ in range(g.int(0, 12)):
            dur = g.int(0, 5000) / 1000
            args = {"hlo_op": g.choice(OP_NAMES), "hlo_module": f"jit_g({prog})" if g.int(0, 3) else "jit_g"}
            if g.int(0, 1):
                args["run_id"] = g.choice(["1", "2", 3])
            if g.int(0, 3) == 0:
                args["program_id"] = g.choice([str(prog), "x", "-1"])
            out.append(_spoil(g, {"ph": "X", "pid": pid, "tid": 1, "ts": t, "dur": dur,
                                  "name": g.choice(["kernel_a", "end: dot.1"] + OP_NAMES), "args": args}))
            t += dur if g.int(0, 3) else 0.0
    return out


def build_trace_doc(g) -> bytes:
    """A random Chrome-trace file: TPU/GPU/CPU processes as the JAX exporter writes them with
    hostile fields sprinkled in, plus events of anything; as an object, a bare array or any
    JSON; sometimes cut short; sometimes gzip (maybe cut)."""
    events = []
    for pid in range(g.int(0, 3)):
        events += _process(g, pid, g.choice(["tpu", "tpu", "gpu", "cpu"]))
    events += [junk_event(g) if g.int(0, 2) else json_any(g) for _ in range(g.int(0, 3))]
    events = g.permutation(events) if g.int(0, 5) == 0 else events
    form = g.int(0, 9)
    doc = events if form == 0 else json_any(g) if form == 1 else {"displayTimeUnit": "ns", "traceEvents": events + [{}]}
    raw = json.dumps(doc).encode()  # the stdlib writes integers past 64 bits too
    mode = g.int(0, 9)
    if mode == 0 and raw:
        raw = raw[: g.int(0, len(raw) - 1)]
    if g.int(0, 1):
        raw = gzip.compress(raw, compresslevel=1, mtime=0)
        if mode == 1:
            raw = raw[: g.int(0, len(raw) - 1)]
    return raw


@FUZZ
@given(g=seeded())
def test_json_reader_on_random_traces(g, monkeypatch_module):
    raw = build_trace_doc(g)
    assume(raw)
    out = _read_both(raw, "f.trace.json.gz", "trace_json", monkeypatch_module)
    if out[0] == "ok":
        _check_invariants(out[1].ops)


# -- invariants on their own ---------------------------------------------------------------------

@FUZZ_HALF
@given(data=st.data())
def test_signature_ignores_layouts_and_tiling(data):
    with_layout, bare = hlo_instruction(Draws(data.draw))
    a, b = parse_instruction(with_layout), parse_instruction(bare)
    assert a is not None and b is not None
    assert a.signature() == b.signature()
    assert (a.name, a.opcode, a.operand_names) == (b.name, b.opcode, b.operand_names)
    assert "{" not in a.signature() and "T(" not in a.signature()


@st.composite
def nested_intervals(draw, lo: int = 0, hi: int = 10_000, depth: int = 0) -> list[tuple[int, int]]:
    """Properly nested intervals inside [lo, hi]: siblings disjoint (touching allowed),
    each child strictly shorter than its parent."""
    out = []
    cuts = sorted(draw(st.lists(st.integers(lo, hi), max_size=6)))
    points = [lo] + cuts + [hi]
    for a, b in zip(points[:-1], points[1:]):
        if b - a < 1 or not draw(st.booleans()):
            continue
        s = draw(st.integers(a, b - 1))
        e = draw(st.integers(s + 1, b))
        if depth == 0 or (s, e) != (lo, hi):
            out.append((s, e))
            if depth < 3 and e - s > 1:
                out.extend(c for c in draw(nested_intervals(s, e, depth + 1)) if c != (s, e))
    return out


def brute_self_times(iv: list[tuple[int, int]]) -> list[int]:
    out = []
    for i, (s, e) in enumerate(iv):
        inside = [j for j, (s2, e2) in enumerate(iv) if j != i and s <= s2 and e2 <= e and (s2, e2) != (s, e)]
        direct = [j for j in inside
                  if not any(k != j and iv[k][0] <= iv[j][0] and iv[j][1] <= iv[k][1] and iv[k] != iv[j] for k in inside)]
        out.append(max(0, (e - s) - sum(iv[j][1] - iv[j][0] for j in direct)))
    return out


@FUZZ_HALF
@given(iv=nested_intervals(), data=st.data())
def test_self_times_equal_brute_force(iv, data):
    assume(len(set(iv)) == len(iv))
    iv = data.draw(st.permutations(iv))
    starts = np.array([s for s, _ in iv], dtype=np.int64)
    durs = np.array([e - s for s, e in iv], dtype=np.int64)
    assert self_times(starts, durs).tolist() == brute_self_times(iv)


@pytest.fixture(scope="module")
def monkeypatch_module():
    """A monkeypatch usable inside hypothesis tests (function-scoped fixtures are not reset
    between examples; the readers' patches are undone by ``context()`` each time)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TRACEVIEW_NO_CACHE", "1")  # every example read by the readers themselves
    yield mp
    mp.undo()

